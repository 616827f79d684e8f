package delivery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/store"
)

// frontEnd is the front end's lookup service on the rig's queue and store.
func (r *rig) frontEnd(t *testing.T) *notification.Service {
	t.Helper()
	ctx := context.Background()
	st, err := r.js.Stream(ctx, r.qcfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := notification.New(notification.Config{
		Publisher: r.pub,
		Waiting:   queue.NewWaiting(r.js, st, r.qcfg.Consumer),
		Store:     r.st,
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// receiptFrontEnd is a front end on the rig's queue and store that keeps and applies the
// platform's events, as the callback and the applying front end do.
func (r *rig) receiptFrontEnd(t *testing.T) (*notification.Service, jetstream.Stream) {
	t.Helper()
	ctx := context.Background()
	pe, err := queue.OpenPlatformEvents(ctx, r.js, r.qcfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.js.Stream(ctx, r.qcfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	feWriter := r.st.NewWriter(store.WriterOptions{})
	t.Cleanup(feWriter.Close)
	svc, err := notification.New(notification.Config{
		Publisher: r.pub, Waiting: queue.NewWaiting(r.js, st, r.qcfg.Consumer), Store: r.st,
		Events: feWriter, KeepEvent: pe.Keep, ReceiptWait: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	events := make(chan []*queue.PlatformEvent)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = pe.Run(runCtx, events) }()
	go func() { defer wg.Done(); _ = svc.ApplyEvents(runCtx, events) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return svc, st
}

// msgIDOf is the msgid the platform gave the push id, 0 while it has none.
func (r *rig) msgIDOf(id string) int64 {
	for _, s := range r.sim.Sent() {
		if s.ClientMsgID == id {
			return s.MsgID
		}
	}
	return 0
}

// sentThenDied publishes a push that a worker sends, announces to svc and then dies before
// writing its sent record; it returns the push and the msgid the platform gave it.
func (r *rig) sentThenDied(t *testing.T, svc *notification.Service) (id string, msgID int64) {
	t.Helper()
	aWriter := r.st.NewWriter(store.WriterOptions{})
	t.Cleanup(aWriter.Close)
	dying := &dieOnOutcome{Events: aWriter, died: make(chan struct{})}
	stopA := r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Events, c.Concurrency = dying, 1
		c.AnnounceSent, c.Announce = svc.RememberSent, svc.Remember
	})
	id = r.publish("u-follows", "JML", jml)
	select {
	case <-dying.died:
	case <-time.After(15 * time.Second):
		t.Fatal("the worker never got to record its outcome")
	}
	stopA()
	if msgID = r.msgIDOf(id); msgID == 0 {
		t.Fatal("the platform has no message for the push")
	}
	return id, msgID
}

// everywhere is what every reader says of a push once it left the queue: the store, a front
// end started now, and the front end svc that applied its receipt.
type everywhere struct {
	stored, fresh, mem          push.Result
	storedErr, freshErr, memErr error
}

// resultsOnceDone waits until the queue st lets go of the push id, and reads it everywhere.
func (r *rig) resultsOnceDone(t *testing.T, st jetstream.Stream, svc *notification.Service, id string) everywhere {
	t.Helper()
	ctx := context.Background()
	embeddedtest.Eventually(t, 20*time.Second, "the queue lets go of the push", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	var e everywhere
	e.stored, e.storedErr = r.st.Outcome(ctx, id)
	fresh, err := notification.New(notification.Config{Publisher: r.pub, Waiting: queue.NewWaiting(r.js, st, r.qcfg.Consumer), Store: r.st})
	if err != nil {
		t.Fatal(err)
	}
	e.fresh, e.freshErr = fresh.Result(ctx, "c1", id)
	e.mem, e.memErr = svc.Result(ctx, "c1", id)
	return e
}

// receipt is the platform's TEMPLATESENDJOBFINISH event for msgID, as the callback keeps it.
func receipt(msgID int64, status string) platform.Event {
	return platform.Event{ToUserName: simulator.AccountID, FromUserName: "oFollower", CreateTime: time.Now().Unix(),
		MsgType: "event", Event: platform.EventTemplateFinish, MsgID: msgID, Status: status}
}

// TestPushPastMaxAgeFailsAsExpired: a push the platform answered "busy" waits out its backoff
// past nats.max_age (6 s here, room for a loaded machine to make attempt 1 first; at least 24h
// in production). The stream drops nothing by age: the worker that gets it next fails it as
// expired, without calling the platform, so that the accepted ucsId ends failed with a reason
// rather than unknown. No dead letter: a whole backlog may expire at once.
func TestPushPastMaxAgeFailsAsExpired(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	st, err := r.js.Stream(ctx, r.qcfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if age := st.CachedInfo().Config.MaxAge; age != 0 {
		t.Fatalf("the stream drops messages older than %s", age)
	}
	r.sim.SetFaults(simulator.Faults{BusyRate: 1})
	var dead atomic.Int64
	r.startWorkerWith(delivery.RetryPolicy{Initial: 8 * time.Second, Max: 8 * time.Second, Multiplier: 1, MaxAttempts: 3},
		func(c *delivery.Config) {
			c.MaxAge = 6 * time.Second
			c.DeadLetter = func(context.Context, jetstream.Msg, string, int) error { dead.Add(1); return nil }
		})
	svc := r.frontEnd(t)

	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "attempt 1 recorded and answered busy", func() bool {
		res, err := r.st.Current(ctx, id)
		return err == nil && res.Attempts == 1 && res.State == push.StateQueued && res.LastError != ""
	})
	r.sim.SetFaults(simulator.Faults{}) // a retry would be sent now
	res := r.waitState(id, push.StateFailed)
	if !strings.HasPrefix(res.Reason, "expired: ") || res.Attempts != 1 {
		t.Fatalf("failed with %q after %d attempts, want expired after 1", res.Reason, res.Attempts)
	}
	if calls := r.sim.Stats().Sends; calls != 1 || dead.Load() != 0 {
		t.Fatalf("platform calls %d, dead letters %d; want 1 and none (its failed record says it all)", calls, dead.Load())
	}
	got, err := svc.Result(ctx, "c1", id)
	if err != nil || got.State != push.StateFailed {
		t.Fatalf("lookup: %+v, %v; want failed", got, err)
	}
}

// dieOnOutcome passes records to the real writer, but ends the calling goroutine, as a worker
// process killed at that moment, when asked to write a push's sent records (the two records of
// store.SentRecords): the platform answered and the front ends were told, the store has nothing.
type dieOnOutcome struct {
	delivery.Events
	died chan struct{}
}

func (d *dieOnOutcome) Write(ctx context.Context, ws ...store.Write) error {
	if len(ws) == 2 {
		close(d.died)
		runtime.Goexit()
	}
	return d.Events.Write(ctx, ws...)
}

// TestReceiptBeforeTheSentRecordStaysTheResult: a worker gets the platform's answer (msgid M),
// announces the sent message to the front ends and is killed before its sent record is
// written. The platform's receipt for M says "success": the front end applies it from memory
// and records delivered (at <ucsId>/f). The user then unfollows the account. The queue gives
// the message to another worker after the ack wait, which must find the receipt's result and
// leave it: the first final result of a push stays its result, in the store and in every
// front end, and a restarted front end never answers sending after delivered.
func TestReceiptBeforeTheSentRecordStaysTheResult(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	svc, st := r.receiptFrontEnd(t)
	id, msgID := r.sentThenDied(t, svc) // worker A
	// The platform's receipt: delivered.
	if err := svc.KeepEvent(ctx, receipt(msgID, "success")); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the receipt is applied: delivered", func() bool {
		res, err := svc.Result(ctx, "c1", id)
		return err == nil && res.State == push.StateDelivered
	})
	// Meanwhile a front end without the result in memory (restarted) reads the store through
	// the queue, where the push still waits.
	before, beforeErr := func() (push.Result, error) {
		fe, err := notification.New(notification.Config{Publisher: r.pub, Waiting: queue.NewWaiting(r.js, st, r.qcfg.Consumer), Store: r.st})
		if err != nil {
			return push.Result{}, err
		}
		return fe.Result(ctx, "c1", id)
	}()
	// The user, having read it, unfollows the account (the front end applies the unsubscribe).
	if err := r.st.SetFollowing(ctx, "oFollower", false, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Worker B gets the message after the ack wait.
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Announce = svc.Remember; c.AnnounceSent = svc.RememberSent })
	e := r.resultsOnceDone(t, st, svc, id)
	if e.storedErr != nil || e.stored.State != push.StateDelivered || e.freshErr != nil || e.fresh.State != e.mem.State {
		t.Fatalf("push %s: the first final result (delivered, from the platform's receipt) must stay its result everywhere:\n"+
			"  store Outcome: state=%s reason=%q attempts=%d (err %v), expected delivered\n"+
			"  lookup at the front end that applied the receipt: %s (err %v)\n"+
			"  lookup at a front end started since: %s reason=%q (err %v)\n"+
			"  (before the second worker, a restarted front end's lookup already answered %s (err %v) after delivered was reported)",
			id, e.stored.State, e.stored.Reason, e.stored.Attempts, e.storedErr, e.mem.State, e.memErr, e.fresh.State, e.fresh.Reason, e.freshErr, before.State, beforeErr)
	}
}

// TestAnswerWithoutMsgIDIsInDoubt: the platform takes the message (and later pushes its
// receipt) but the answer is HTTP 200 errcode 0 without a msgid (a proxy in between that
// rewrites the body). That is no success with msgid 0: the attempt's outcome is unknown, and
// the retry with the same client_msg_id learns the real msgid, which the receipt then finds.
func TestAnswerWithoutMsgIDIsInDoubt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	svc, _ := r.receiptFrontEnd(t)
	var sends atomic.Int64
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "/message/template/send") || sends.Add(1) > 1 {
			return false
		}
		r.sim.Handler().ServeHTTP(httptest.NewRecorder(), req)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"errcode":0,"errmsg":"ok"}`))
		return true
	})
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Platform = pc
		c.AnnounceSent, c.Announce = svc.RememberSent, svc.Remember
	})
	id := r.publish("u-follows", "JML", jml)
	var msgID int64
	embeddedtest.Eventually(t, 10*time.Second, "the platform has the message", func() bool {
		msgID = r.msgIDOf(id)
		return msgID != 0
	})
	if err := svc.KeepEvent(ctx, receipt(msgID, "success")); err != nil {
		t.Fatal(err)
	}
	var res push.Result
	var err error
	deadline := time.Now().Add(15 * time.Second) // past the receipt's wait for its msgid (5 s here)
	for time.Now().Before(deadline) {
		if res, err = svc.Result(ctx, "c1", id); err == nil && res.State.Final() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("push %s, taken by the platform as msgid %d with a delivery receipt \"success\", never reached a final state:\n"+
		"  expected: delivered (README: sent (the platform took it; msgId) → delivered or failed)\n"+
		"  got: state=%s msgId=%d attempts=%d (err %v); platform send calls %d",
		id, msgID, res.State, res.MsgID, res.Attempts, err, sends.Load())
}

// TestSlowCallLongerThanAckWait: a platform call slower than the consumer's ack wait
// (5 s here, 8 s calls) with two workers on the consumer: the heartbeat keeps the message with
// its worker, so it is sent once and counted once. (A check that held.)
func TestSlowCallLongerThanAckWait(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{Latency: 8 * time.Second})
	for range 2 {
		r.startWorkerWith(quick, func(c *delivery.Config) { c.SendTimeout = 14 * time.Second })
	}
	id := r.publish("u-follows", "JML", jml)
	res := r.waitState(id, push.StateSent)
	if calls := r.sim.Stats().Sends; res.Attempts != 1 || calls != 1 {
		t.Fatalf("attempts %d, platform calls %d, expected 1 and 1", res.Attempts, calls)
	}
}

// A push the platform answered "busy" waits out a five-minute backoff; meanwhile sending
// pauses for 20 s (another worker met the per-minute limit). A lookup tells the retry the worker
// has scheduled, after the pause, and the platform's error, not the pause's end and reason.
func TestLookupDuringAPauseKeepsALaterRetry(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	p := r.openPause()
	r.sim.SetFaults(simulator.Faults{BusyRate: 1})
	r.startWorkerWith(delivery.RetryPolicy{Initial: 5 * time.Minute, Max: 5 * time.Minute, Multiplier: 1, MaxAttempts: 5},
		func(c *delivery.Config) { c.Pause, c.QuotaReset = p, quotaInAnHour })
	id := r.publish("u-follows", "JML", jml)
	var rec push.Result
	embeddedtest.Eventually(t, 15*time.Second, "attempt 1 answered busy, retry scheduled", func() bool {
		var err error
		rec, err = r.st.Current(ctx, id)
		return err == nil && rec.Attempts == 1 && rec.State == push.StateQueued && !rec.RetryAt.IsZero()
	})
	// Another worker met 45011: sending pauses until the next minute (here: 20 s).
	now := time.Now()
	if err := p.Set(ctx, sending.PauseState{Until: now.Add(20 * time.Second), Reason: "45011: the platform's per-minute limit was hit"}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the pause seen", func() bool { _, ok := p.Paused(); return ok })

	st, err := r.js.Stream(ctx, r.qcfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	fe, err := notification.New(notification.Config{Publisher: r.pub, Waiting: queue.NewWaiting(r.js, st, r.qcfg.Consumer),
		Store: r.st, Paused: p.Paused})
	if err != nil {
		t.Fatal(err)
	}
	got, err := fe.Result(ctx, "c1", id)
	if err != nil {
		t.Fatal(err)
	}
	if got.RetryAt.Before(rec.RetryAt.Add(-time.Millisecond)) || got.LastError != rec.LastError {
		t.Fatalf("lookup says nextAttemptAt %s (in %s), but the worker retries the push only at %s (in %s): "+
			"the pause's end replaced the later backoff (lastError now %q, was %q)",
			got.RetryAt.Format(time.TimeOnly), time.Until(got.RetryAt).Round(time.Second),
			rec.RetryAt.Format(time.TimeOnly), time.Until(rec.RetryAt).Round(time.Second), got.LastError, rec.LastError)
	}
}

// The worker's clock runs 10 s ahead of the front end's, within the 15 s the operations guide
// allows, and the push's receipt comes at once: no lookup says it finished before it was sent.
func TestFinishedNotBeforeSent(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	svc, st := r.receiptFrontEnd(t)
	ahead := func() time.Time { return time.Now().Add(10 * time.Second) }
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Now = ahead
		c.AnnounceSent, c.Announce = svc.RememberSent, svc.Remember
	})
	id := r.publish("u-follows", "JML", jml)
	r.waitState(id, push.StateSent)
	msgID := r.msgIDOf(id)
	if err := svc.KeepEvent(ctx, receipt(msgID, "success")); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 15*time.Second, "delivered", func() bool {
		res, err := svc.Result(ctx, "c1", id)
		return err == nil && res.State == push.StateDelivered
	})
	e := r.resultsOnceDone(t, st, svc, id)
	for name, res := range map[string]push.Result{"store": e.stored, "front end": e.mem, "fresh front end": e.fresh} {
		if res.Finished.Before(res.Sent) {
			t.Errorf("%s: acceptedAt %s sentAt %s finishedAt %s: delivered %s before it was sent",
				name, res.Accepted.Format("15:04:05.000"), res.Sent.Format("15:04:05.000"), res.Finished.Format("15:04:05.000"),
				res.Sent.Sub(res.Finished).Round(time.Millisecond))
		}
	}
}

// The worker's clock runs 10 s behind the front end's (within the 15 s the operations guide
// allows): a push sent at once does not read as sent before it was accepted, nor one that fails
// at once (the user does not follow) as finished before it was accepted.
func TestSentNotBeforeAccepted(t *testing.T) {
	r := newRig(t)
	behind := func() time.Time { return time.Now().Add(-10 * time.Second) }
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Now = behind })
	sent := r.publish("u-follows", "JML", jml)
	failed := r.publish("u-left", "JML", jml)
	res := r.waitState(sent, push.StateSent)
	if res.Sent.Before(res.Accepted) {
		t.Errorf("acceptedAt %s sentAt %s: sent %s before it was accepted",
			res.Accepted.Format("15:04:05.000"), res.Sent.Format("15:04:05.000"), res.Accepted.Sub(res.Sent).Round(time.Millisecond))
	}
	res = r.waitState(failed, push.StateFailed)
	if res.Finished.Before(res.Accepted) {
		t.Errorf("acceptedAt %s finishedAt %s: failed %s before it was accepted",
			res.Accepted.Format("15:04:05.000"), res.Finished.Format("15:04:05.000"), res.Accepted.Sub(res.Finished).Round(time.Millisecond))
	}
}
