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
