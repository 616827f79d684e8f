package delivery_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/store"
)

// maxInASecond is the largest number of sends the simulator took within any one second.
func maxInASecond(at []time.Time) int {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// waitingForTheRecord counts the pushes of ids whose attempt's record the worker is trying
// to write (it logs each try the store refused): each of them passed the gate.
func waitingForTheRecord(logs *embeddedtest.SyncBuffer, ids []string) int {
	out := logs.String()
	n := 0
	for _, id := range ids {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "recording an attempt failed") && strings.Contains(line, id) {
				n++
				break
			}
		}
	}
	return n
}

// stalledWorker starts a worker on a store the test can cut (cs), changed by mod, and sends
// one push first, so that the worker knows the student's binding; logs holds its warnings.
func (r *rig) stalledWorker(t *testing.T, cs *cutStore, mod func(*delivery.Config)) *embeddedtest.SyncBuffer {
	t.Helper()
	ctx := context.Background()
	logs := &embeddedtest.SyncBuffer{}
	wr := cs.ws.NewWriter(store.WriterOptions{Timeout: 500 * time.Millisecond})
	t.Cleanup(wr.Close)
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Store, c.Events = cs.ws, wr
		c.StoreRetry = 100 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		mod(c)
	})
	first := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "the first push sent", func() bool {
		res, err := cs.direct.Current(ctx, first)
		return err == nil && res.State == push.StateSent
	})
	return logs
}

// TestSendBudgetHoldsAcrossAStoreStall: platform.max_rate is 5 a second. The store is
// unreachable for a few seconds while a bulk send waits in the queue, and the messages that
// passed the gate (a budget token each) wait for their attempt's record. Once the store is
// back, the platform still gets at most the cap (and a little more) in any second: a token held
// through the outage is not spent, the message goes through the gate again.
func TestSendBudgetHoldsAcrossAStoreStall(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	cs := newCutStore(t)
	const rate = 5.0
	b, err := sending.OpenBudget(ctx, r.js, rate, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := r.stalledWorker(t, cs, func(c *delivery.Config) { c.Budget, c.Concurrency = b, 32 })
	cs.proxy.SetDown(true)
	const n = 25
	ids := make([]string, n)
	for i := range n {
		ids[i] = r.publish("u-follows", "JML", map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)})
	}
	// The outage lasts until 15 messages took their place in the budget (3 s at the cap).
	embeddedtest.Eventually(t, 20*time.Second, "15 messages past the gate", func() bool { return waitingForTheRecord(logs, ids) >= 15 })
	cs.proxy.SetDown(false)
	embeddedtest.Eventually(t, 60*time.Second, "every push sent", func() bool { return len(r.sim.Sent()) >= n+1 })
	var at []time.Time
	for _, s := range r.sim.Sent() {
		at = append(at, s.At)
	}
	most := maxInASecond(at)
	t.Logf("%d sends; at most %d within one second (max_rate %.0f)", len(at), most, rate)
	if most > int(rate)+2 {
		t.Fatalf("%d sends reached the platform within one second; platform.max_rate is %.0f a second", most, rate)
	}
}

// TestPauseHoldsMessagesPastTheGate: while the store is unreachable, a bulk send's messages
// pass the gate and wait for their attempt's record; meanwhile sending is paused for every
// worker (another worker met 45009). Once the store is back, no message goes to the platform
// while the pause lasts: each is held, queued, its record naming the pause.
func TestPauseHoldsMessagesPastTheGate(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	cs := newCutStore(t)
	p := r.openPause()
	logs := r.stalledWorker(t, cs, func(c *delivery.Config) {
		c.Pause, c.QuotaReset, c.Concurrency = p, quotaInAnHour, 8
	})
	cs.proxy.SetDown(true)
	var ids []string
	for i := range 5 {
		ids = append(ids, r.publish("u-follows", "JML", map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)}))
	}
	embeddedtest.Eventually(t, 20*time.Second, "every message past the gate", func() bool { return waitingForTheRecord(logs, ids) == len(ids) })
	if err := p.Set(ctx, sending.PauseState{Until: time.Now().Add(time.Hour), Reason: "45009: the platform's daily quota is used up"}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the pause seen", func() bool { _, ok := p.Paused(); return ok })
	cs.proxy.SetDown(false)
	// Each message ends up sent, or held by the pause (queued, its record naming it).
	embeddedtest.Eventually(t, 20*time.Second, "every message sent or held", func() bool {
		for _, id := range ids {
			res, err := cs.direct.Current(ctx, id)
			if err != nil || !(res.State == push.StateSent || res.State == push.StateQueued && strings.Contains(res.LastError, "paused")) {
				return false
			}
		}
		return true
	})
	if n := len(r.sim.Sent()) - 1; n > 0 {
		t.Fatalf("%d of %d messages sent to the platform while sending was paused for every worker", n, len(ids))
	}
}
