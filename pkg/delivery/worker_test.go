package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/store"
)

type rig struct {
	t    testing.TB
	st   *store.Store
	sim  *simulator.Simulator
	pub  *queue.Publisher
	js   jetstream.JetStream
	qcfg queue.Config
	pc   *platform.Client
	// calls, once set by countCalls, counts the calls of every platform client of the rig.
	calls *atomic.Pointer[metrics.Metrics]
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
	pub, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, st: st, sim: sim, pub: pub, js: js, qcfg: qc, calls: &atomic.Pointer[metrics.Metrics]{}}
	r.pc = r.platformAt(srv.URL)
	return r
}

// platformAt is a platform client of the rig's account at base, whose calls countCalls counts.
func (r *rig) platformAt(base string) *platform.Client {
	r.t.Helper()
	pc, err := platform.New(platform.Config{APIBase: base, AppID: "wxapp", Secret: "wxsecret",
		OnSend: func(took time.Duration, err error) {
			r.calls.Load().PlatformCall(took.Seconds(), platform.ErrorLabel(err))
		}})
	if err != nil {
		r.t.Fatal(err)
	}
	return pc
}

// countCalls counts the calls of the rig's platform clients in m, as a worker process does.
func (r *rig) countCalls(m *metrics.Metrics) { r.calls.Store(m) }

// openPause opens the pause of sending the rig's workers share, closed when the test ends.
func (r *rig) openPause() *sending.Pause {
	r.t.Helper()
	p, err := sending.OpenPause(context.Background(), r.js, 1, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(p.Close)
	return p
}

// quotaInAnHour is the QuotaReset of a worker whose test does not wait for the daily quota.
func quotaInAnHour(now time.Time) time.Time { return now.Add(time.Hour) }

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
	if err := r.pub.Publish(context.Background(), m, queue.PublishOptions{}); err != nil {
		r.t.Fatal(err)
	}
	return id
}

func (r *rig) waitState(id string, want push.State) push.Result {
	r.t.Helper()
	var res push.Result
	embeddedtest.Eventually(r.t, 30*time.Second, fmt.Sprintf("%s reaches %s", id, want), func() bool {
		var err error
		res, err = r.st.Current(context.Background(), id)
		return err == nil && res.State == want
	})
	return res
}

// waitCounted waits for a counter to reach want: a worker writes a message's record before
// it counts the message's end, so a count read as soon as the record shows may be one short.
func waitCounted(t *testing.T, name string, c prometheus.Collector, want float64) {
	t.Helper()
	embeddedtest.Eventually(t, 10*time.Second, fmt.Sprintf("%s counted %v", name, want), func() bool {
		return testutil.ToFloat64(c) >= want
	})
}

var tdl = map[string]string{"header": "待办", "type": "请假审批", "list": "学生请假", "step": "辅导员审批", "content": "张三的请假申请待您审批", "remark": "尽快"}

var quick = delivery.RetryPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2, MaxAttempts: 5}

func TestDeliversMappedFields(t *testing.T) {
	r := newRig(t)
	r.startWorker(quick)
	id := r.publish("u-follows", "TDL", tdl)
	res := r.waitState(id, push.StateSent)
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

		attempts int
	}{
		{"u-nobody", "TDL", tdl, "no binding: user u-nobody has no follower id of the official account", 0},
		{"u-left", "TDL", tdl, "not following: user u-left does not follow the official account", 0},
		{"u-unknown-openid", "TDL", tdl, "40003", 1},
		{"u-follows", "WR", map[string]string{"title": "a", "date": "b", "content": "c"}, "no template configured for type WR", 0},
	}
	for _, c := range cases {
		id := r.publish(c.user, c.typ, c.data)
		res := r.waitState(id, push.StateFailed)
		if res.Attempts != c.attempts || !strings.HasPrefix(res.Reason, c.reason) {
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
	res := r.waitState(id, push.StateSent)
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
	res := r.waitState(id, push.StateFailed)
	if res.Attempts != 3 || len(res.Reason) < 25 || res.Reason[:25] != "gave up after 3 attempts:" {
		t.Fatalf("result %+v", res)
	}
}

// A dead-letter copy that fails is tried again in place: the message that exhausted its
// attempts is not handed back, so the platform is never called again for it, and it ends
// failed once the copy is kept.
func TestDeadLetterFailureCallsNoMore(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	var mu sync.Mutex
	var copies []int // the attempts each try of the copy reported
	r.startWorkerWith(delivery.RetryPolicy{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, MaxAttempts: 2},
		func(c *delivery.Config) {
			c.StoreRetry = 20 * time.Millisecond
			c.DeadLetter = func(ctx context.Context, msg jetstream.Msg, reason string, attempts int) error {
				mu.Lock()
				defer mu.Unlock()
				copies = append(copies, attempts)
				if len(copies) <= 3 {
					return errors.New("the dead letters are unavailable")
				}
				return nil
			}
		})
	id := r.publish("u-follows", "JML", jml)
	res := r.waitState(id, push.StateFailed)
	if calls := r.sim.Stats().Sends; res.Attempts != 2 || calls != 2 {
		t.Fatalf("max_attempts 2: attempts %d, platform calls %d: %+v", res.Attempts, calls, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(copies, []int{2, 2, 2, 2}) {
		t.Fatalf("tries of the dead-letter copy reported attempts %v, want 2 four times", copies)
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
		r.waitState(id, push.StateSent)
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
		r      push.Result
		openID string
	}
	got := make(chan sent, 1)
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.AnnounceSent = func(res push.Result, openID string) { got <- sent{res, openID} }
	})
	id := r.publish("u-follows", "TDL", tdl)
	select {
	case a := <-got:
		if a.r.UcsID != id || a.r.State != push.StateSent || a.r.MsgID == 0 || a.openID != "oFollower" {
			t.Fatalf("announced %+v for %s", a, id)
		}
		if res := r.waitState(id, push.StateSent); res.MsgID != a.r.MsgID {
			t.Fatalf("recorded msgid %d, announced %d", res.MsgID, a.r.MsgID)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("nothing announced")
	}
}

// Every attempt is recorded as sending, with its number, before the platform is called.
func TestAttemptRecordedBeforeTheCall(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{Latency: 2 * time.Second})
	r.startWorker(quick)
	id := r.publish("u-follows", "TDL", tdl)
	res := r.waitState(id, push.StateSending)
	if res.Attempts != 1 || r.sim.Stats().Accepted != 0 {
		t.Fatalf("while the first call lasts: %+v, platform accepted %d", res, r.sim.Stats().Accepted)
	}
	if res := r.waitState(id, push.StateSent); res.Attempts != 1 {
		t.Fatalf("sent after one call: %+v", res)
	}
}

// flakyStore fails the binding reads of one user a number of times, as a store outage does.
type flakyStore struct {
	delivery.Store
	mu    sync.Mutex
	fails int
	reads int
}

func (f *flakyStore) Binding(ctx context.Context, userID string) (store.Binding, error) {
	f.mu.Lock()
	f.reads++
	fail := f.fails > 0
	if fail {
		f.fails--
	}
	f.mu.Unlock()
	if fail {
		return store.Binding{}, errors.New("server selection error: store unreachable")
	}
	return f.Store.Binding(ctx, userID)
}

// flakySender answers the first calls with an HTTP 502, then calls the platform; it counts
// every call.
type flakySender struct {
	delivery.Sender
	mu    sync.Mutex
	fails int
	calls int
}

func (f *flakySender) SendTemplate(ctx context.Context, m platform.TemplateMessage) (int64, error) {
	f.mu.Lock()
	f.calls++
	fail := f.fails > 0
	if fail {
		f.fails--
	}
	f.mu.Unlock()
	if fail {
		return 0, fmt.Errorf("send template: %w", &platform.HTTPError{Status: "502 Bad Gateway"})
	}
	return f.Sender.SendTemplate(ctx, m)
}

func (f *flakySender) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Attempts count platform calls and only those: failed binding reads hand the message back
// without an attempt, however many there are. Three failed reads and one call make one
// attempt; max_attempts failed reads and one HTTP 502 leave the message retrying (two calls,
// two attempts), not given up.
func TestStoreOutageSpendsNoAttempts(t *testing.T) {
	for _, c := range []struct {
		name                string
		readFails, sendFail int
		wantAttempts        int
	}{
		{"three failed reads, one call", 3, 0, 1},
		{"max_attempts failed reads, then a 502", 5, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			fs := &flakyStore{Store: r.st, fails: c.readFails}
			sender := &flakySender{Sender: r.pc, fails: c.sendFail}
			r.startWorkerWith(quick, func(cfg *delivery.Config) {
				cfg.Store, cfg.Platform, cfg.StoreRetry = fs, sender, 20*time.Millisecond
			})
			id := r.publish("u-follows", "JML", jml)
			res := r.waitState(id, push.StateSent)
			if res.Attempts != c.wantAttempts || sender.count() != c.wantAttempts {
				t.Fatalf("attempts %d after %d platform calls, want %d: %+v", res.Attempts, sender.count(), c.wantAttempts, res)
			}
			fs.mu.Lock()
			defer fs.mu.Unlock()
			if fs.reads < c.readFails+1 {
				t.Fatalf("binding read %d times, want at least %d", fs.reads, c.readFails+1)
			}
		})
	}
}

// dyingSender calls the platform, then ends its goroutine without an answer, as a worker
// process killed during the call: nothing is acknowledged and no heartbeat follows.
type dyingSender struct {
	delivery.Sender
	called chan struct{}
	once   sync.Once
}

func (d *dyingSender) SendTemplate(ctx context.Context, m platform.TemplateMessage) (int64, error) {
	_, _ = d.Sender.SendTemplate(ctx, m)
	d.once.Do(func() { close(d.called) })
	runtime.Goexit()
	return 0, nil
}

// killedDuringCall publishes a push to a worker under policy that dies during its first call
// of the platform, and returns its ucsId once that worker is stopped (it fetches nothing more).
func (r *rig) killedDuringCall(policy delivery.RetryPolicy) string {
	r.t.Helper()
	dying := &dyingSender{Sender: r.pc, called: make(chan struct{})}
	stop := r.startWorkerWith(policy, func(cfg *delivery.Config) { cfg.Platform, cfg.Concurrency = dying, 1 })
	id := r.publish("u-follows", "JML", jml)
	select {
	case <-dying.called:
	case <-time.After(15 * time.Second):
		r.t.Fatal("the first worker never called the platform")
	}
	stop()
	return id
}

// A worker that dies during a call leaves its attempt recorded: the worker that gets the
// message next counts it, and the attempts equal the platform's calls.
func TestKilledAttemptCountsOnce(t *testing.T) {
	r := newRig(t)
	id := r.killedDuringCall(quick)
	if res, err := r.st.Current(context.Background(), id); err != nil || res.State != push.StateSending || res.Attempts != 1 {
		t.Fatalf("record of the attempt under way: %+v %v", res, err)
	}
	r.startWorker(quick) // gets the message once the ack wait gives it back
	res := r.waitState(id, push.StateSent)
	if calls := r.sim.Stats().Sends; res.Attempts != 2 || calls != 2 {
		t.Fatalf("attempts %d, platform calls %d: %+v", res.Attempts, calls, res)
	}
}

// slowBindingStore holds its first binding read, after the store answered, until released.
type slowBindingStore struct {
	delivery.Store
	once    sync.Once
	read    chan struct{}
	release chan struct{}
}

func (s *slowBindingStore) Binding(ctx context.Context, userID string) (store.Binding, error) {
	b, err := s.Store.Binding(ctx, userID)
	s.once.Do(func() { close(s.read); <-s.release })
	return b, err
}

// A binding changed while a read of the old one is under way: Forget wins, the old binding is
// not cached, and a push accepted after the change goes to the new follower.
func TestForgetWinsOverAReadUnderWay(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.sim.AddFollower("oNew")
	ss := &slowBindingStore{Store: r.st, read: make(chan struct{}), release: make(chan struct{})}
	cctx, cancel := context.WithCancel(ctx)
	cons, err := queue.EnsureConsumer(cctx, r.js, r.qcfg)
	if err != nil {
		t.Fatal(err)
	}
	wr := r.st.NewWriter(store.WriterOptions{})
	w, err := delivery.New(delivery.Config{Consumer: cons, Store: ss, Events: wr, Platform: r.pc, Templates: templates, Policy: quick, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = w.Run(cctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; wr.Close() })

	before := r.publish("u-follows", "JML", jml)
	<-ss.read
	// The student binds another follower; the front end announces it.
	if err := r.st.PutBinding(ctx, store.Binding{UserID: "u-follows", OpenID: "oNew", Following: true}); err != nil {
		t.Fatal(err)
	}
	w.Forget("u-follows")
	close(ss.release)
	r.waitState(before, push.StateSent)
	after := r.publish("u-follows", "JML", jml)
	r.waitState(after, push.StateSent)
	for _, s := range r.sim.Sent() {
		if s.ClientMsgID == after && s.ToUser != "oNew" {
			t.Errorf("the push accepted after the change went to %s, want oNew", s.ToUser)
		}
	}
}
