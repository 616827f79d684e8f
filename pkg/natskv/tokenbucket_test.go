package natskv_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
)

func counters(t *testing.T, name string) *natskv.Counters {
	_, js := embeddedtest.JetStream(t)
	c, err := natskv.OpenCounters(context.Background(), js, name, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTokenBucketsShared: two replicas on one bucket hand out the burst between them, then
// what the rate refills; a key's tokens are its own; and an empty bucket is answered from
// memory with how long to wait.
func TestTokenBucketsShared(t *testing.T) {
	ctx := context.Background()
	kv := counters(t, "rates")
	clk := clocktest.New(time.Date(2025, 9, 1, 8, 0, 0, 0, time.UTC))
	a := natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{Now: clk.Now})
	b := natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{Now: clk.Now})
	r := natskv.Rate{PerSecond: 20, Burst: 40}
	take := func(n int, key string) (granted int) {
		for i := range n {
			tb := a
			if i%2 == 1 {
				tb = b
			}
			ok, _, err := tb.Take(ctx, key, r)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				granted++
			}
		}
		return granted
	}
	if got := take(100, "k1"); got != 40 {
		t.Fatalf("a burst of 40 over two replicas: %d granted", got)
	}
	if empty, wait, err := a.Empty(ctx, "k1", r); err != nil || !empty || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("after the burst: empty %v for %v (%v)", empty, wait, err)
	}
	// A replica that never asked for the key reads the shared bucket, taking nothing.
	c := natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{Now: clk.Now})
	for range 2 {
		if empty, wait, err := c.Empty(ctx, "k1", r); err != nil || !empty || wait <= 0 || wait > 100*time.Millisecond {
			t.Fatalf("at another replica, after the burst: empty %v for %v (%v)", empty, wait, err)
		}
	}
	if empty, _, err := c.Empty(ctx, "never", r); err != nil || empty {
		t.Fatalf("a key never used: empty %v (%v)", empty, err)
	}
	if got := take(10, "k2"); got != 10 {
		t.Fatalf("another key: %d of 10", got)
	}
	clk.Advance(time.Second)
	// A second refills 20; leases lapsed with the second, so each replica asks again.
	if got := take(100, "k1"); got != 20 {
		t.Fatalf("after a second at 20/s: %d granted", got)
	}
}

// TestTokenBucketsWait: Wait hands out the rate and no more: at 200/s, 50 tokens take about a
// quarter of a second on the real clock.
func TestTokenBucketsWait(t *testing.T) {
	ctx := context.Background()
	tb := natskv.NewTokenBuckets(counters(t, "budget"), natskv.TokenBucketsConfig{Lease: 50 * time.Millisecond})
	r := natskv.Rate{PerSecond: 200, Burst: 10}
	start := time.Now()
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			for range 10 {
				if err := tb.Wait(ctx, "budget", r); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// 10 at once, then 40 at 200/s: at least 200 ms.
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Fatalf("50 tokens at 200/s with a burst of 10 in %v", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for {
		if err := tb.Wait(cctx, "budget", natskv.Rate{PerSecond: 0.001, Burst: 1}); err != nil {
			break
		}
	}
}

// TestTokenBucketsBounded: however many keys callers make, at most Keys leases stay in memory,
// and a key whose lease was dropped still finds its shared bucket empty.
func TestTokenBucketsBounded(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(time.Date(2025, 9, 1, 8, 0, 0, 0, time.UTC))
	tb := natskv.NewTokenBuckets(counters(t, "bounded"), natskv.TokenBucketsConfig{Keys: 50, Now: clk.Now})
	r := natskv.Rate{PerSecond: 1, Burst: 1}
	if ok, _, _ := tb.Take(ctx, "first", r); !ok {
		t.Fatal("first token refused")
	}
	if ok, _, _ := tb.Take(ctx, "first", r); ok {
		t.Fatal("second token of a burst of 1 granted")
	}
	for i := range 500 {
		if _, _, err := tb.Take(ctx, "k"+strconv.Itoa(i), r); err != nil {
			t.Fatal(err)
		}
		if n := tb.Leases(); n > 50 {
			t.Fatalf("%d leases in memory, bound 50", n)
		}
	}
	if ok, _, _ := tb.Take(ctx, "first", r); ok {
		t.Fatal("a dropped lease let a token through that the shared bucket does not have")
	}
}

// TestTokenBucketsTakeN: TakeN takes all of n tokens or none, across replicas, says how long
// until n are back, and refuses more than the burst; GiveN puts tokens back, up to the burst.
func TestTokenBucketsTakeN(t *testing.T) {
	ctx := context.Background()
	kv := counters(t, "shares")
	clk := clocktest.New(time.Date(2025, 9, 1, 8, 0, 0, 0, time.UTC))
	a := natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{Now: clk.Now})
	b := natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{Now: clk.Now})
	r := natskv.Rate{PerSecond: 10, Burst: 1000}
	for i, tc := range []struct {
		tb     *natskv.TokenBuckets
		n      int
		ok     bool
		wait   time.Duration
		before time.Duration
	}{
		{a, 600, true, 0, 0},
		{b, 300, true, 0, 0},
		{a, 200, false, 10 * time.Second, 0}, // 100 left: 100 more come in 10 s
		{b, 100, true, 0, 0},
		{a, 50, true, 0, 5 * time.Second},
		{b, 1, false, 100 * time.Millisecond, 0},
	} {
		clk.Advance(tc.before)
		ok, wait, err := tc.tb.TakeN(ctx, "client", tc.n, r)
		if err != nil || ok != tc.ok || wait != tc.wait {
			t.Fatalf("take %d: %d tokens: ok %v, wait %v, %v; want ok %v, wait %v", i, tc.n, ok, wait, err, tc.ok, tc.wait)
		}
	}
	// 50 taken for something that did not come about are given back, and taken again.
	if err := b.GiveN(ctx, "client", 50, r); err != nil {
		t.Fatal(err)
	}
	if ok, wait, err := a.TakeN(ctx, "client", 50, r); !ok || err != nil {
		t.Fatalf("tokens given back, taken again: ok %v, wait %v, %v", ok, wait, err)
	}
	// Given back beyond the burst, the bucket holds the burst.
	if err := a.GiveN(ctx, "client", 5000, r); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := a.TakeN(ctx, "client", 1000, r); !ok || err != nil {
		t.Fatalf("the whole burst after a large give: ok %v, %v", ok, err)
	}
	if ok, _, err := a.TakeN(ctx, "client", 1, r); ok || err != nil {
		t.Fatalf("one more than the burst: ok %v, %v; want none", ok, err)
	}
	if ok, _, err := a.TakeN(ctx, "other", 1001, r); ok || err == nil {
		t.Fatalf("more than the burst at once: ok %v, %v; want an error", ok, err)
	}
	if ok, _, err := a.TakeN(ctx, "other", 1000, r); !ok || err != nil {
		t.Fatalf("another key's whole burst: ok %v, %v", ok, err)
	}
}

// TestSkewedReplicasShareOneBucket: two front ends share a rate limit, their clocks 5 s apart
// (the deployment guide lets them differ by 15 s), and no time passes: together they hand out
// the burst and a lease each, however they take in turn. A replica behind that moved the
// bucket's time back to its own would let the one ahead refill the 5 s again at every take.
func TestSkewedReplicasShareOneBucket(t *testing.T) {
	ctx := context.Background()
	kv := counters(t, "rates-skew")
	behind := clocktest.New(time.Date(2025, 12, 31, 23, 59, 0, 0, time.UTC))
	ahead := clocktest.New(behind.Now().Add(5 * time.Second))
	a := natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{Now: ahead.Now})
	b := natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{Now: behind.Now})
	r := natskv.Rate{PerSecond: 2, Burst: 10}
	granted := 0
	for i := range 200 {
		tb := a
		if i%2 == 1 {
			tb = b
		}
		ok, _, err := tb.Take(ctx, "client.app", r)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			granted++
		}
	}
	if most := r.Burst + 2; granted > most {
		t.Fatalf("with no time passing, replicas 5 s apart granted %d tokens of a bucket of %d at %v/s, at most %d", granted, r.Burst, r.PerSecond, most)
	}
}
