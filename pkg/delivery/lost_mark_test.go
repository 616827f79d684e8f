package delivery_test

import (
	"context"
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
