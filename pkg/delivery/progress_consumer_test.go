package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/sending"
)

// TestANewConsumersDeliveryReachingTheOldCountShowsItsAttempt: the message's first life
// reaches delivery 2 (two calls, the second's retry recorded under e0d2). The consumer is made
// anew; its delivery 1 waits at the send budget and is handed back when its worker stops,
// having written nothing. The new life's delivery 2 then reads the first life's delivery 2
// entry, which has its number but is not its own: its attempt 3 must be marked above that
// entry, and the push read sending with 3 attempts while the third call is under way.
func TestANewConsumersDeliveryReachingTheOldCountShowsItsAttempt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.sim.SetFaults(simulator.Faults{BusyRate: 1}) // errcode -1: retried
	policy := delivery.RetryPolicy{Initial: time.Second, Max: time.Minute, Multiplier: 60, MaxAttempts: 5}
	stopA := r.startWorkerWith(policy, func(c *delivery.Config) { c.StoreRetry = time.Second })
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "the second attempt's retry recorded", func() bool {
		p, err := r.st.InProgress(ctx, id)
		return err == nil && p.State == push.StateQueued && p.Attempts == 2
	})
	stopA()
	p, _ := r.st.InProgress(ctx, id)
	t.Logf("first life ends: %s, %d attempt(s), rev %q, sends %d", p.State, p.Attempts, p.Rev, r.sim.Stats().Sends)
	if err := r.js.DeleteConsumer(ctx, r.qcfg.Stream, r.qcfg.Consumer); err != nil {
		t.Fatal(err)
	}
	// A send budget already spent: the new life's delivery 1 waits at the gate.
	budget, err := sending.OpenBudget(ctx, r.js, 0.001, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := budget.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	stopB := r.startWorkerWith(policy, func(c *delivery.Config) { c.StoreRetry, c.Budget = time.Second, budget })
	embeddedtest.Eventually(t, 20*time.Second, "the new life's delivery 1 held at the budget", func() bool {
		c, err := r.js.Consumer(ctx, r.qcfg.Stream, r.qcfg.Consumer)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 1 && info.NumPending == 0
	})
	stopB() // handed back, nothing written: delivery 2 of the new life comes next
	r.sim.SetFaults(simulator.Faults{Latency: 6 * time.Second})
	sendsBefore := r.sim.Stats().Sends
	// A worker whose longest backoff (1 s) is shorter than the retry time the first life
	// recorded (a minute on): it takes that for a pause's, which its gate holds to, and calls.
	short := delivery.RetryPolicy{Initial: time.Second, Max: time.Second, Multiplier: 2, MaxAttempts: 5}
	r.startWorkerWith(short, func(c *delivery.Config) { c.StoreRetry = time.Second })
	var cur push.Result
	ok := false
	for deadline := time.Now().Add(15 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		cur, err = r.st.InProgress(ctx, id)
		ok = err == nil && cur.State == push.StateSending && cur.Attempts == 3
		if c, cerr := r.st.Current(ctx, id); cerr == nil && c.State != push.StateQueued && c.State != push.StateSending {
			break // the call returned: the attempt is no longer under way
		}
	}
	t.Logf("during the new life's call: %s, %d attempt(s), rev %q; sends before %d, now %d", cur.State, cur.Attempts, cur.Rev, sendsBefore, r.sim.Stats().Sends)
	if !ok {
		t.Fatalf("while the third call is under way the push reads %s with %d attempt(s), want sending with 3: the new consumer's delivery 2 wrote its mark under the first life's delivery 2 keys, below that delivery's retry record", cur.State, cur.Attempts)
	}
}

// TestADuplicatedRetryRecordAfterTheConsumerIsMadeAgainLeavesTheNextAttemptShown: the
// first delivery's retry record is written twice (the first try's answer lost, the second
// taken), so the push's progress is that entry. The consumer is made anew; its delivery 1
// reads that entry, of its number but not its own, and marks attempt 2. The first try of that
// retry record reaches the slow store during the second call: it must not replace the mark.
func TestADuplicatedRetryRecordAfterTheConsumerIsMadeAgainLeavesTheNextAttemptShown(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	late := r.lateRetryStore(t)
	policy := delivery.RetryPolicy{Initial: time.Minute, Max: time.Minute, Multiplier: 2, MaxAttempts: 5}
	late.arm(1) // the first attempt's record passes; the retry record's first try is held
	stopA := r.startWorkerWith(policy, func(c *delivery.Config) { c.Events, c.StoreRetry = late, 500*time.Millisecond })
	id := r.publish("u-follows", "JML", jml)
	late.waitHeld(t, "the retry's record")
	embeddedtest.Eventually(t, 20*time.Second, "the retry record written again", func() bool {
		p, err := r.st.InProgress(ctx, id)
		return err == nil && p.State == push.StateQueued && p.Attempts == 1 && p.Rev != ""
	})
	stopA()
	p, _ := r.st.InProgress(ctx, id)
	t.Logf("first life ends: %s, %d attempt(s), rev %q, sends %d", p.State, p.Attempts, p.Rev, r.sim.Stats().Sends)
	if err := r.js.DeleteConsumer(ctx, r.qcfg.Stream, r.qcfg.Consumer); err != nil {
		t.Fatal(err)
	}
	r.sim.SetFaults(simulator.Faults{Latency: 4 * time.Second})
	r.startWorkerWith(quick, func(c *delivery.Config) { c.StoreRetry = time.Second })
	embeddedtest.Eventually(t, 20*time.Second, "the second attempt under way", func() bool {
		p, err := r.st.InProgress(ctx, id)
		return err == nil && p.State == push.StateSending && p.Attempts == 2
	})
	p, _ = r.st.InProgress(ctx, id)
	t.Logf("second attempt under way: rev %q", p.Rev)
	if err := late.land(ctx); err != nil { // the retry record's first try lands now
		t.Fatal(err)
	}
	p, err := r.st.InProgress(ctx, id)
	t.Logf("after the late record: %s, %d attempt(s), rev %q", p.State, p.Attempts, p.Rev)
	if err != nil || p.State != push.StateSending || p.Attempts != 2 {
		t.Fatalf("after the late retry record the push reads %s with %d attempt(s) (%v), want sending with 2: the attempt under way (2 platform calls made) is undone", p.State, p.Attempts, err)
	}
}
