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

// slowStoreEvents passes records to the real writer until armed; from then on every write
// reaches the store late: it answers as a write timed out, and the store takes it when the
// test lands it.
type slowStoreEvents struct {
	delivery.Events
	mu    sync.Mutex
	armed bool
	late  [][]store.Write
}

func (w *slowStoreEvents) Write(ctx context.Context, ws ...store.Write) error {
	w.mu.Lock()
	if w.armed {
		w.late = append(w.late, ws)
		w.mu.Unlock()
		return context.DeadlineExceeded
	}
	w.mu.Unlock()
	return w.Events.Write(ctx, ws...)
}

func (w *slowStoreEvents) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.late)
}

// TestAPausedFirstDeliveryLeavesTheNextDeliveriesKeys: a first delivery whose call the platform
// refused for the account (the attempt taken back, an entry of its own) reads that entry when
// it marks its attempt after the pause: it must stay at its own keys. The message's delivery 2
// then has its mark and, once its worker is stopped, its putting back of the progress reach a
// slow store late, after delivery 3 marked its attempt: they must stay below delivery 3's
// entries, not undo its attempt under way.
func TestAPausedFirstDeliveryLeavesTheNextDeliveriesKeys(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	logs := &embeddedtest.SyncBuffer{}
	wr := r.st.NewWriter(store.WriterOptions{})
	t.Cleanup(wr.Close)
	slowStore := &slowStoreEvents{Events: wr}
	p := r.openPause()
	r.sim.SetFaults(simulator.Faults{QuotaUsedUp: true})
	slow := delivery.RetryPolicy{Initial: 2 * time.Second, Max: 2 * time.Second, Multiplier: 2, MaxAttempts: 5}
	stopA := r.startWorkerWith(slow, func(c *delivery.Config) {
		c.Events, c.StoreRetry, c.Pause = slowStore, 5*time.Second, p
		c.QuotaReset = quotaInAnHour
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "the attempt taken back, the message held", func() bool {
		p, err := r.st.InProgress(ctx, id)
		return err == nil && p.State == push.StateQueued && p.Attempts == 0 && strings.Contains(p.LastError, "45009")
	})
	r.sim.SetFaults(simulator.Faults{BusyRate: 1}) // after the pause: errcode -1, retried
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	var cur push.Result
	embeddedtest.Eventually(t, 20*time.Second, "the first attempt's retry recorded", func() bool {
		var err error
		cur, err = r.st.InProgress(ctx, id)
		return err == nil && cur.State == push.StateQueued && cur.Attempts == 1
	})
	t.Logf("delivery 1 ends: %s, %d attempt(s), rev %q, platform sends %d", cur.State, cur.Attempts, cur.Rev, r.sim.Stats().Sends)
	slowStore.mu.Lock()
	slowStore.armed = true // delivery 2's writes reach the store late
	slowStore.mu.Unlock()
	r.sim.SetFaults(simulator.Faults{Latency: 3 * time.Second})
	embeddedtest.Eventually(t, 20*time.Second, "delivery 2's mark held", func() bool { return slowStore.held() >= 1 })
	stopA() // SIGTERM while the worker waits to write the mark again: it puts the progress back
	embeddedtest.Eventually(t, 10*time.Second, "the message handed back", func() bool {
		return strings.Contains(logs.String(), "message handed back without an attempt")
	})
	sendsBefore := r.sim.Stats().Sends
	r.startWorkerWith(quick, func(c *delivery.Config) { c.StoreRetry = time.Second })
	embeddedtest.Eventually(t, 20*time.Second, "delivery 3's attempt under way", func() bool {
		var err error
		cur, err = r.st.InProgress(ctx, id)
		return err == nil && cur.State == push.StateSending && cur.Attempts == 2
	})
	t.Logf("delivery 3's attempt: %s, %d attempt(s), rev %q; platform sends %d", cur.State, cur.Attempts, cur.Rev, sendsBefore)
	slowStore.mu.Lock()
	late := slowStore.late
	slowStore.mu.Unlock()
	for _, ws := range late { // the slow store takes delivery 2's writes now
		if err := wr.Write(ctx, ws...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.st.InProgress(ctx, id)
	t.Logf("after %d late write(s): %s, %d attempt(s), rev %q", len(late), got.State, got.Attempts, got.Rev)
	if err != nil || got.State != push.StateSending || got.Attempts != 2 {
		t.Fatalf("after delivery 2's late writes the push reads %s with %d attempt(s) (%v), want sending with 2: delivery 3's attempt under way is undone", got.State, got.Attempts, err)
	}
}

// TestALateRetryRecordAfterTheConsumerIsMadeAgainLeavesTheNextAttemptShown: the first attempt's
// retry record reaches a slow store after its worker gave up on it and stopped; the push's
// progress is then the first attempt's whole record. The consumer is deleted and made again,
// so the message's next delivery is counted 1 again: it reads that record, asks the call in
// doubt again, and marks that attempt. The late retry record, landing during that call, must
// not undo it.
func TestALateRetryRecordAfterTheConsumerIsMadeAgainLeavesTheNextAttemptShown(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	logs := &embeddedtest.SyncBuffer{}
	late := r.lateRetryStore(t)
	slow := delivery.RetryPolicy{Initial: time.Second, Max: time.Second, Multiplier: 2, MaxAttempts: 5}
	late.arm(1) // the first attempt's record passes; the retry's record is held
	stopA := r.startWorkerWith(slow, func(c *delivery.Config) {
		c.Events, c.StoreRetry = late, 30*time.Second
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	id := r.publish("u-follows", "JML", jml)
	late.waitHeld(t, "the retry's record")
	stopA() // SIGTERM while the worker waits to write the retry's record again
	embeddedtest.Eventually(t, 10*time.Second, "the message handed back", func() bool {
		return strings.Contains(logs.String(), "message handed back without an attempt")
	})
	p, err := r.st.InProgress(ctx, id)
	t.Logf("after the stop: %s, %d attempt(s), rev %q (%v), platform sends %d", p.State, p.Attempts, p.Rev, err, r.sim.Stats().Sends)
	// The operator deletes the consumer; the next worker makes it again (delivery counts restart).
	if err := r.js.DeleteConsumer(ctx, r.qcfg.Stream, r.qcfg.Consumer); err != nil {
		t.Fatal(err)
	}
	r.sim.SetFaults(simulator.Faults{Latency: 3 * time.Second}) // the repeat's call takes 3 s
	r.startWorkerWith(quick, func(c *delivery.Config) { c.StoreRetry = time.Second })
	embeddedtest.Eventually(t, 20*time.Second, "the second attempt under way", func() bool {
		p, err := r.st.InProgress(ctx, id)
		return err == nil && p.State == push.StateSending && p.Attempts == 2
	})
	if err := late.land(ctx); err != nil { // the stopped worker's retry record lands now
		t.Fatal(err)
	}
	p, err = r.st.InProgress(ctx, id)
	t.Logf("after the late record: %s, %d attempt(s), rev %q", p.State, p.Attempts, p.Rev)
	if err != nil || p.State != push.StateSending || p.Attempts != 2 {
		t.Fatalf("after the late retry record the push reads %s with %d attempt(s) (%v), want sending with 2: the attempt under way (2 platform calls made) is undone", p.State, p.Attempts, err)
	}
}
