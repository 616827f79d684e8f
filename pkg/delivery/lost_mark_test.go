package delivery_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// lostAnswerEvents passes records to the real writer; the first one the store takes answers
// as a write timed out (the store committed it, its answer was lost: a slow primary during a
// rollout), and lost is closed.
type lostAnswerEvents struct {
	delivery.Events
	once sync.Once
	lost chan struct{}
}

func (w *lostAnswerEvents) Write(ctx context.Context, ws ...store.Write) error {
	err := w.Events.Write(ctx, ws...)
	if err != nil {
		return err
	}
	fired := false
	w.once.Do(func() { fired = true; close(w.lost) })
	if fired {
		return context.DeadlineExceeded
	}
	return nil
}

// TestStopAfterLostAttemptRecordCountsNoCall: a worker records a push's first attempt before
// calling the platform; the store takes the record but its answer is lost, and the worker,
// waiting to write it again, is stopped (a rollout). It hands the message back without calling,
// and first puts the record back as it was: the worker that gets the message next does not take
// it for a call whose outcome is unknown, and the push is sent with as many attempts as calls.
func TestStopAfterLostAttemptRecordCountsNoCall(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	wr := r.st.NewWriter(store.WriterOptions{})
	t.Cleanup(wr.Close)
	lost := &lostAnswerEvents{Events: wr, lost: make(chan struct{})}
	stopA := r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Events, c.StoreRetry = lost, time.Second
	})
	id := r.publish("u-follows", "JML", jml)
	select {
	case <-lost.lost:
	case <-time.After(20 * time.Second):
		t.Fatal("the first attempt's record was never written")
	}
	stopA() // SIGTERM while the worker waits to write the attempt's record again
	var p push.Result
	embeddedtest.Eventually(t, 10*time.Second, "the attempt's record", func() bool {
		var err error
		p, err = r.st.InProgress(ctx, id)
		return err == nil
	})
	t.Logf("after the stop: %s, %d attempt(s), platform sends %d", p.State, p.Attempts, r.sim.Stats().Sends)
	r.startWorkerWith(quick, func(c *delivery.Config) { c.StoreRetry = time.Second }) // the rollout's new worker
	res := r.waitState(id, push.StateSent)
	sends := r.sim.Stats().Sends
	t.Logf("sent: %d attempts recorded, %d platform send call(s)", res.Attempts, sends)
	if int64(res.Attempts) != sends {
		t.Fatalf("sent with %d attempts after %d platform call(s): the attempt the stopped worker recorded but never made is counted",
			res.Attempts, sends)
	}
}

// TestStopBeforeASlowAttemptRecordLandsCountsNoCall: as TestStopAfterLostAttemptRecordCountsNoCall,
// but the store is slow: the first attempt's insert reaches it after the writer's time-out, and
// after the stopped worker has put its record back, when the store had none yet. The late
// insert must not say an attempt is under way: the worker that gets the message next would take
// it for a call in doubt and count a call never made.
func TestStopBeforeASlowAttemptRecordLandsCountsNoCall(t *testing.T) {
	r := newRig(t)
	cs := newCutStore(t)
	ctx := context.Background()
	logs := &embeddedtest.SyncBuffer{}
	wr := cs.ws.NewWriter(store.WriterOptions{Timeout: 500 * time.Millisecond})
	t.Cleanup(wr.Close)
	// Everything the worker sends the store arrives 1.5 s late: the first attempt's insert
	// outlives the writer's 500 ms.
	cs.proxy.SetDelay(1500 * time.Millisecond)
	stopA := r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Store, c.Events = cs.ws, wr
		c.StoreRetry = 2 * time.Second
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "the attempt's record timing out", func() bool {
		return strings.Contains(logs.String(), "recording an attempt failed")
	})
	cs.proxy.SetDelay(0) // the store answers in time again
	stopA()              // SIGTERM while the worker waits to write the attempt's record again
	embeddedtest.Eventually(t, 10*time.Second, "the message handed back", func() bool {
		return strings.Contains(logs.String(), "message handed back without an attempt")
	})
	// The slow insert lands after the worker put its record back.
	var p push.Result
	embeddedtest.Eventually(t, 10*time.Second, "the late attempt record", func() bool {
		var err error
		p, err = cs.direct.InProgress(ctx, id)
		return err == nil
	})
	t.Logf("after the stop: %s, %d attempt(s), platform sends %d", p.State, p.Attempts, r.sim.Stats().Sends)
	r.restartOn(cs, quick) // the rollout's new worker
	var res push.Result
	embeddedtest.Eventually(t, 30*time.Second, id+" sent", func() bool {
		var err error
		res, err = cs.direct.Current(ctx, id)
		return err == nil && res.State == push.StateSent
	})
	sends := r.sim.Stats().Sends
	t.Logf("sent: %d attempts recorded, %d platform send call(s)", res.Attempts, sends)
	if int64(res.Attempts) != sends {
		t.Fatalf("sent with %d attempts after %d platform call(s): the attempt the stopped worker's late record claims, never made, is counted",
			res.Attempts, sends)
	}
}

// lateEvents passes records to the real writer until armed; then it passes skip more writes,
// and the next one is not written yet and answers as a write timed out: the store takes it
// later, when the test writes it (a slow store, which got the write after the writer gave up
// waiting).
type lateEvents struct {
	delivery.Events
	mu    sync.Mutex
	armed bool
	skip  int
	late  []store.Write
	held  chan struct{}
}

func (w *lateEvents) arm(skip int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.skip = true, skip
}

func (w *lateEvents) Write(ctx context.Context, ws ...store.Write) error {
	w.mu.Lock()
	if w.armed && w.skip > 0 {
		w.skip--
	} else if w.armed {
		w.armed, w.late = false, ws
		close(w.held)
		w.mu.Unlock()
		return context.DeadlineExceeded
	}
	w.mu.Unlock()
	return w.Events.Write(ctx, ws...)
}

// lateRetryStore returns events writing to r's store through a writer of their own, which
// hold back the write armed; and has the platform answer busy (errcode -1, retried) until told
// otherwise, so that the push's first attempt is followed by a retry record.
func (r *rig) lateRetryStore(t *testing.T) *lateEvents {
	wr := r.st.NewWriter(store.WriterOptions{})
	t.Cleanup(wr.Close)
	r.sim.SetFaults(simulator.Faults{BusyRate: 1})
	return &lateEvents{Events: wr, held: make(chan struct{})}
}

// land writes what w held back: the slow store takes it now.
func (w *lateEvents) land(ctx context.Context) error {
	w.mu.Lock()
	ws := w.late
	w.mu.Unlock()
	return w.Events.Write(ctx, ws...)
}

// waitHeld waits until w held a write back.
func (w *lateEvents) waitHeld(t *testing.T, what string) {
	t.Helper()
	select {
	case <-w.held:
	case <-time.After(20 * time.Second):
		t.Fatal(what + " was never written")
	}
}

// TestStopBeforeALaterAttemptsSlowRecordLandsCountsNoCall: as
// TestStopBeforeASlowAttemptRecordLandsCountsNoCall, for a push's second attempt, whose record
// follows the first attempt's retry. The worker, stopped while it waits to write the second
// attempt's record again, puts the progress back; that record reaches the store after that. It
// must not make the push's progress say the second attempt is under way: the worker that gets
// the message next would take it for a call in doubt and count a call never made.
func TestStopBeforeALaterAttemptsSlowRecordLandsCountsNoCall(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	logs := &embeddedtest.SyncBuffer{}
	late := r.lateRetryStore(t)
	slow := delivery.RetryPolicy{Initial: time.Second, Max: time.Second, Multiplier: 2, MaxAttempts: 5}
	stopA := r.startWorkerWith(slow, func(c *delivery.Config) {
		c.Events, c.StoreRetry = late, 5*time.Second
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "the first attempt's retry recorded", func() bool {
		p, err := r.st.InProgress(ctx, id)
		return err == nil && p.State == push.StateQueued && p.Attempts == 1
	})
	r.sim.SetFaults(simulator.Faults{})
	late.arm(0)
	late.waitHeld(t, "the second attempt's record")
	stopA() // SIGTERM while the worker waits to write the record again
	embeddedtest.Eventually(t, 10*time.Second, "the message handed back", func() bool {
		return strings.Contains(logs.String(), "message handed back without an attempt")
	})
	err := late.land(ctx) // the slow store takes the record now
	p, _ := r.st.InProgress(ctx, id)
	t.Logf("the late record: %v; then %s, %d attempt(s), platform sends %d", err, p.State, p.Attempts, r.sim.Stats().Sends)
	if p.State != push.StateQueued || p.Attempts != 1 {
		t.Errorf("after the late record the push reads %s with %d attempt(s), want queued with 1: the attempt never made shows as under way", p.State, p.Attempts)
	}
	r.startWorkerWith(quick, func(c *delivery.Config) { c.StoreRetry = time.Second }) // the rollout's new worker
	res := r.waitState(id, push.StateSent)
	sends := r.sim.Stats().Sends
	t.Logf("sent: %d attempts recorded, %d platform send call(s)", res.Attempts, sends)
	if sends != 2 || int64(res.Attempts) != sends {
		t.Fatalf("sent with %d attempts after %d platform call(s), want 2 and 2: the attempt the stopped worker's late record claims, never made, is counted",
			res.Attempts, sends)
	}
}

// TestALateRetryRecordLeavesTheNextAttemptShown: the record of a retry (attempt 1 failed, to be
// tried again) reaches a slow store after its writer gave up waiting for it and wrote it again;
// it lands while the message's next delivery has its second attempt under way. The push's
// progress must keep showing that attempt: a worker that stopped during its call would
// otherwise leave the call uncounted, and the next one would take the bound follower rather
// than ask the same one again.
func TestALateRetryRecordLeavesTheNextAttemptShown(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	late := r.lateRetryStore(t)
	slow := delivery.RetryPolicy{Initial: time.Second, Max: time.Second, Multiplier: 2, MaxAttempts: 5}
	late.arm(1) // the first attempt's record passes; the retry's first try is held
	r.startWorkerWith(slow, func(c *delivery.Config) { c.Events, c.StoreRetry = late, 500*time.Millisecond })
	id := r.publish("u-follows", "JML", jml)
	late.waitHeld(t, "the retry's record")
	embeddedtest.Eventually(t, 20*time.Second, "the retry recorded on a second try", func() bool {
		p, err := r.st.InProgress(ctx, id)
		return err == nil && p.State == push.StateQueued && p.Attempts == 1
	})
	// The next delivery's call takes 3 s: its attempt is under way meanwhile.
	r.sim.SetFaults(simulator.Faults{Latency: 3 * time.Second})
	embeddedtest.Eventually(t, 20*time.Second, "the second attempt under way", func() bool {
		p, err := r.st.InProgress(ctx, id)
		return err == nil && p.State == push.StateSending && p.Attempts == 2
	})
	if err := late.land(ctx); err != nil { // the retry's first try lands now
		t.Fatal(err)
	}
	p, err := r.st.InProgress(ctx, id)
	if err != nil || p.State != push.StateSending || p.Attempts != 2 {
		t.Fatalf("after the late retry record the push reads %s with %d attempt(s) (%v), want sending with 2: the attempt under way is undone", p.State, p.Attempts, err)
	}
	res := r.waitState(id, push.StateSent)
	if sends := r.sim.Stats().Sends; sends != 2 || res.Attempts != 2 {
		t.Fatalf("sent with %d attempts after %d platform call(s), want 2 and 2", res.Attempts, sends)
	}
}
