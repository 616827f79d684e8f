package delivery_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

type rig struct {
	t     testing.TB
	st    *store.Store
	sim   *simulator.Simulator
	pub   *queue.Publisher
	js    jetstream.JetStream
	qcfg  queue.Config
	pc    *platform.Client
	stops []func()
}

var templates = map[string]config.Template{
	"TDL": {TemplateID: "tpl-TDL", Fields: map[string]string{"type": "thing1", "list": "thing2", "step": "thing3", "content": "thing4"}},
	"JML": {TemplateID: "tpl-JML", Fields: map[string]string{"class": "thing1", "info": "thing2"}},
}

func newRig(t testing.TB) *rig {
	t.Helper()
	_, js := embeddedtest.JetStream(t)
	st := embeddedtest.Store(t, nil)
	sim := simulator.New(simulator.Config{AppID: "wxapp", Secret: "wxsecret"})
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	sim.AddTemplate("tpl-TDL", []string{"thing1", "thing2", "thing3", "thing4"})
	sim.AddTemplate("tpl-JML", []string{"thing1", "thing2"})
	sim.AddFollower("oFollower")
	ctx := context.Background()
	for _, b := range []store.Binding{
		{UserID: "u-follows", OpenID: "oFollower", Following: true},
		{UserID: "u-left", OpenID: "oLeft"},
		{UserID: "u-unknown-openid", OpenID: "oNobody", Following: true},
	} {
		if err := st.PutBinding(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetFollowing(ctx, "oLeft", false, time.Now()); err != nil {
		t.Fatal(err)
	}
	qc := queue.Config{Stream: "S", Consumer: "C", Replicas: 1, MaxBytes: 1 << 30, MaxAge: time.Hour, AckWait: 5 * time.Second}
	if _, err := queue.EnsureStream(ctx, js, qc); err != nil {
		t.Fatal(err)
	}
	pc, err := platform.New(platform.Config{APIBase: srv.URL, AppID: "wxapp", Secret: "wxsecret"})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, st: st, sim: sim, pub: queue.NewPublisher(js), js: js, qcfg: qc, pc: pc}
}

// startWorker runs a worker until the test ends.
func (r *rig) startWorker(policy delivery.RetryPolicy, concurrency ...int) {
	r.t.Helper()
	r.startWorkerWith(policy, func(c *delivery.Config) {
		if len(concurrency) > 0 {
			c.Concurrency = concurrency[0]
		}
	})
}

func (r *rig) publish(userID string, typ push.Type, data map[string]string) string {
	r.t.Helper()
	id := push.NewID(time.Now())
	m := push.Message{UcsID: id, ClientID: "c1", UserID: userID, Type: typ, Data: data, Accepted: time.Now().UnixMilli()}
	if err := r.pub.Publish(context.Background(), m); err != nil {
		r.t.Fatal(err)
	}
	return id
}

func (r *rig) waitState(id string, want store.State) store.Result {
	r.t.Helper()
	var res store.Result
	embeddedtest.Eventually(r.t, 15*time.Second, fmt.Sprintf("%s reaches %s", id, want), func() bool {
		var err error
		res, err = r.st.Current(context.Background(), id)
		return err == nil && res.State == want
	})
	return res
}

var tdl = map[string]string{"header": "待办", "type": "请假审批", "list": "学生请假", "step": "辅导员审批", "content": "张三的请假申请待您审批", "remark": "尽快"}

var quick = delivery.RetryPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2, MaxAttempts: 5}

func TestDeliversMappedFields(t *testing.T) {
	r := newRig(t)
	r.startWorker(quick)
	id := r.publish("u-follows", "TDL", tdl)
	res := r.waitState(id, store.StateSent)
	if res.Attempts != 1 || res.MsgID == 0 || res.ClientID != "c1" {
		t.Fatalf("result %+v", res)
	}
	sent := r.sim.Sent()
	if len(sent) != 1 {
		t.Fatalf("simulator got %d messages", len(sent))
	}
	s := sent[0]
	want := map[string]string{"thing1": "请假审批", "thing2": "学生请假", "thing3": "辅导员审批", "thing4": "张三的请假申请待您审批"}
	if s.ToUser != "oFollower" || s.TemplateID != "tpl-TDL" || s.ClientMsgID != id || s.MsgID != res.MsgID || fmt.Sprint(s.Data) != fmt.Sprint(want) {
		t.Fatalf("sent %+v", s)
	}
}

func TestPermanentFailuresAreNotRetried(t *testing.T) {
	r := newRig(t)
	r.startWorker(quick)
	cases := []struct {
		user   string
		typ    push.Type
		data   map[string]string
		reason string
	}{
		{"u-nobody", "TDL", tdl, "no binding: user u-nobody has no follower id of the official account"},
		{"u-left", "TDL", tdl, "not following: user u-left does not follow the official account"},
		{"u-unknown-openid", "TDL", tdl, "40003"},
		{"u-follows", "WR", map[string]string{"title": "a", "date": "b", "content": "c"}, "no template configured for type WR"},
	}
	for _, c := range cases {
		id := r.publish(c.user, c.typ, c.data)
		res := r.waitState(id, store.StateFailed)
		if res.Attempts != 1 || !slices.Contains([]bool{true}, len(res.Reason) >= len(c.reason) && res.Reason[:len(c.reason)] == c.reason) {
			t.Errorf("%s/%s: attempts=%d reason=%q, want %q", c.user, c.typ, res.Attempts, res.Reason, c.reason)
		}
	}
	if n := len(r.sim.Sent()); n != 0 {
		t.Fatalf("the platform accepted %d messages that should have failed", n)
	}
}

func TestBusyPlatformIsRetriedWithBackoff(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{BusyRate: 1})
	r.startWorker(quick)
	id := r.publish("u-follows", "JML", map[string]string{"class": "高等数学", "info": "第三章作业"})
	embeddedtest.Eventually(t, 10*time.Second, "a retry is recorded", func() bool {
		res, err := r.st.Current(context.Background(), id)
		return err == nil && res.Attempts >= 2 && res.LastError != ""
	})
	r.sim.SetFaults(simulator.Faults{})
	res := r.waitState(id, store.StateSent)
	if res.Attempts < 2 || res.LastError == "" {
		t.Fatalf("result %+v", res)
	}
	if n := len(r.sim.Sent()); n != 1 {
		t.Fatalf("simulator accepted %d", n)
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	r.startWorker(delivery.RetryPolicy{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, MaxAttempts: 3})
	id := r.publish("u-follows", "JML", map[string]string{"class": "a", "info": "b"})
	res := r.waitState(id, store.StateFailed)
	if res.Attempts != 3 || len(res.Reason) < 25 || res.Reason[:25] != "gave up after 3 attempts:" {
		t.Fatalf("result %+v", res)
	}
}

func TestManyMessagesConcurrently(t *testing.T) {
	r := newRig(t)
	r.startWorker(quick)
	var ids []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := r.publish("u-follows", "JML", map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)})
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		}()
	}
	wg.Wait()
	embeddedtest.Eventually(t, 30*time.Second, "200 messages accepted by the platform", func() bool { return len(r.sim.Sent()) >= 200 })
	for _, id := range ids {
		r.waitState(id, store.StateSent)
	}
	if n := len(r.sim.Sent()); n != 200 {
		t.Fatalf("platform accepted %d, want 200", n)
	}
}

// A message the platform accepted is announced with the follower it went to, so that a front
// end can apply its receipt from memory.
func TestAnnouncesSent(t *testing.T) {
	r := newRig(t)
	type sent struct {
		r      store.Result
		openID string
	}
	got := make(chan sent, 1)
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.AnnounceSent = func(res store.Result, openID string) { got <- sent{res, openID} }
	})
	id := r.publish("u-follows", "TDL", tdl)
	select {
	case a := <-got:
		if a.r.UcsID != id || a.r.State != store.StateSent || a.r.MsgID == 0 || a.openID != "oFollower" {
			t.Fatalf("announced %+v for %s", a, id)
		}
		if res := r.waitState(id, store.StateSent); res.MsgID != a.r.MsgID {
			t.Fatalf("recorded msgid %d, announced %d", res.MsgID, a.r.MsgID)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("nothing announced")
	}
}

// An attempt that ends quickly is recorded by its outcome alone; one that takes longer shows
// as sending while it lasts.
func TestSendingRecordedOnlyForSlowAttempts(t *testing.T) {
	r := newRig(t)
	r.startWorker(quick)
	ctx := context.Background()
	kinds := func(id string) []string {
		t.Helper()
		h, err := r.st.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, rec := range h {
			out = append(out, rec.Kind+":"+string(rec.Result.State))
		}
		return out
	}

	fast := r.publish("u-follows", "TDL", tdl)
	r.waitState(fast, store.StateSent)

	r.sim.SetFaults(simulator.Faults{Latency: 2 * time.Second})
	slow := r.publish("u-follows", "TDL", tdl)
	res := r.waitState(slow, store.StateSending)
	if res.Attempts != 1 {
		t.Fatalf("sending record %+v", res)
	}
	r.waitState(slow, store.StateSent)
	if got := kinds(slow); !slices.Contains(got, store.RecordProgress+":"+string(store.StateSending)) {
		t.Fatalf("a slow send left no sending record: %v", got)
	}
	// Seconds later, through the same writer: a late record of the fast send would be in.
	if got := kinds(fast); slices.Contains(got, store.RecordProgress+":"+string(store.StateSending)) {
		t.Fatalf("a send answered at once left a sending record: %v", got)
	}
}

// TestCopyMarkedAgainIsNotSentTwice: a copy of a push that was already delivered, published
// again with Ucs-Again (a batch's chunk expanded twice), is answered from the first copy's
// recorded outcome without calling the platform; an unmarked copy would be sent again.
func TestCopyMarkedAgainIsNotSentTwice(t *testing.T) {
	r := newRig(t)
	r.startWorker(quick)
	ctx := context.Background()
	id := r.publish("u-follows", "TDL", tdl)
	first := r.waitState(id, store.StateSent)
	st, err := r.js.Stream(ctx, r.qcfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	empty := func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}
	embeddedtest.Eventually(t, 5*time.Second, "the first copy leaves the queue", empty)
	m := push.Message{UcsID: id, ClientID: "c1", UserID: "u-follows", Type: "TDL", Data: tdl, Accepted: first.Accepted.UnixMilli()}
	if errs := r.pub.PublishBatch(ctx, []push.Message{m}, queue.PublishOptions{Again: true}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	embeddedtest.Eventually(t, 5*time.Second, "the marked copy is answered and leaves the queue", empty)
	if s := r.sim.Stats(); s.Accepted != 1 || s.Deduplicated != 0 {
		t.Fatalf("platform: %d sends, %d repeats; the marked copy was sent", s.Accepted, s.Deduplicated)
	}
	if res, err := r.st.Current(ctx, id); err != nil || res.State != store.StateSent || res.MsgID != first.MsgID {
		t.Fatalf("result after the copy: %+v %v", res, err)
	}
	// Unmarked, the same copy reaches the platform (which drops it by its client_msg_id).
	if errs := r.pub.PublishBatch(ctx, []push.Message{m}, queue.PublishOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	embeddedtest.Eventually(t, 5*time.Second, "the unmarked copy is sent", func() bool { return r.sim.Stats().Deduplicated == 1 })
}
