package sending_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/sending"
)

// budgetRun runs workers budgets of platform.max_rate rate on one NATS server, each with its own
// connection and waiters handlers waiting for the budget in a loop, as a scaled-out worker's
// handlers do under load, for d. It returns the sends allowed and the writes of the shared
// bucket (compare-and-set updates that succeeded).
func budgetRun(t *testing.T, workers, waiters int, rate float64, d time.Duration) (sends int64, writes uint64) {
	t.Helper()
	ctx := context.Background()
	url := embeddedtest.NATS(t)
	var budgets []*sending.Budget
	for range workers {
		_, js := embeddedtest.JetStreamAt(t, url)
		b, err := sending.OpenBudget(ctx, js, rate, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		budgets = append(budgets, b)
	}
	n := sendFor(budgets, waiters, d)
	_, js := embeddedtest.JetStreamAt(t, url)
	s, err := js.Stream(ctx, "KV_"+sending.Bucket+"_budget")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n, info.State.LastSeq
}

// TestSendBudgetWrittenPerLease: workers take the budget a twentieth of a second's worth at a
// time, so that the shared bucket (replicated three times in production) is written about
// twenty times a second however many workers share it, and the rate holds: a worker that
// finds it empty writes nothing and asks again once a lease's worth is back.
func TestSendBudgetWrittenPerLease(t *testing.T) {
	const rate = 500.0 // k8s/configmap.yaml
	const d = 3 * time.Second
	for _, workers := range []int{1, 4} {
		sends, writes := budgetRun(t, workers, 64, rate, d)
		perSec := float64(writes) / d.Seconds()
		t.Logf("%d worker(s) at max_rate %.0f: %d sends in %s (%.0f/s), %d bucket writes (%.0f/s, %.1f sends a write)",
			workers, rate, sends, d, float64(sends)/d.Seconds(), writes, perSec, float64(sends)/float64(max(writes, 1)))
		if sends > int64(rate*d.Seconds())+int64(workers)*25+25 {
			t.Errorf("%d workers sent %d in %s: over max_rate %.0f", workers, sends, d, rate)
		}
		if perSec > 40 {
			t.Errorf("%d worker(s): the shared bucket was written %.0f times a second (%.1f sends a write), "+
				"not about 20 (a lease of %d sends a write)", workers, perSec, float64(sends)/float64(writes), 25)
		}
	}
}

// TestSendBudgetAfterAWorkerWithAFastClock: one worker's clock runs three minutes ahead (NTP
// broke on its node) and it sends a little before it is scaled away. The shared bucket carries
// its time; the workers left do not believe a time that far ahead of theirs, and go on sending
// at the budget's rate rather than wait for their clocks to catch up.
func TestSendBudgetAfterAWorkerWithAFastClock(t *testing.T) {
	ctx := context.Background()
	const rate = 500.0
	url := embeddedtest.NATS(t)
	_, jsBad := embeddedtest.JetStreamAt(t, url)
	ahead := func() time.Time { return time.Now().Add(3 * time.Minute) }
	bad, err := sending.OpenBudget(ctx, jsBad, rate, 1, ahead)
	if err != nil {
		t.Fatal(err)
	}
	for range 30 { // the skewed worker sends a little, then is scaled away
		if err := bad.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var budgets []*sending.Budget
	for range 2 {
		_, js := embeddedtest.JetStreamAt(t, url)
		b, err := sending.OpenBudget(ctx, js, rate, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		budgets = append(budgets, b)
	}
	_, js := embeddedtest.JetStreamAt(t, url)
	s, err := js.Stream(ctx, "KV_"+sending.Bucket+"_budget")
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const d = 3 * time.Second
	n := sendFor(budgets, 16, d)
	after, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writes := after.State.LastSeq - before.State.LastSeq
	t.Logf("after the skewed worker left: 2 workers got %d sends in %s at max_rate %.0f; %d bucket writes meanwhile", n, d, rate, writes)
	if n < int64(rate*d.Seconds()/4) {
		t.Fatalf("the healthy workers got %d sends in %s (max_rate %.0f allows %.0f), with %d writes of the bucket: "+
			"a worker 3 min ahead, since removed, holds the fleet's budget for 3 min", n, d, rate, rate*d.Seconds(), writes)
	}
}

// sendFor runs waiters handlers on each of budgets, each waiting for the budget in a loop as a
// worker's handlers do under load, for d, and returns the sends the budgets allowed.
func sendFor(budgets []*sending.Budget, waiters int, d time.Duration) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, b := range budgets {
		for range waiters {
			wg.Go(func() {
				for b.Wait(ctx) == nil {
					n.Add(1)
				}
			})
		}
	}
	wg.Wait()
	return n.Load()
}

// TestScaledOutWorkersStayUnderTheRate: twenty workers (the manifests' most) each send one
// message of a quiet second, taking a lease each; then a bulk send reaches every worker at
// once. In any second they send at most the rate, the bucket's burst of one lease and what
// was taken in the twentieth of a second before it (the tokens a worker holds lapse then):
// 110 at a rate of 100, not the tokens of every worker's lease of the quiet second on top.
func TestScaledOutWorkersStayUnderTheRate(t *testing.T) {
	const rate, workers = 100.0, 20 // a lease of 5 tokens
	ctx := context.Background()
	url := embeddedtest.NATS(t)
	budgets := make([]*sending.Budget, workers)
	for i := range budgets {
		_, js := embeddedtest.JetStreamAt(t, url) // a connection of its own, as a worker's
		b, err := sending.OpenBudget(ctx, js, rate, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		budgets[i] = b
	}
	for _, b := range budgets {
		if err := b.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	end := time.Now().Add(time.Second)
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var sends atomic.Int64
	var wg sync.WaitGroup
	for _, b := range budgets {
		for range 8 { // a worker's deliveries
			wg.Go(func() {
				for b.Wait(wctx) == nil {
					if time.Now().Before(end) {
						sends.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if got, most := sends.Load(), int64(rate*1.05)+5; got > most {
		t.Errorf("%d workers sent %d messages within a second at a rate of %.0f; at most %d may go", workers, got, rate, most)
	}
}
