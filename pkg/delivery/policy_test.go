package delivery_test

import (
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
)

func TestRetryPolicyNext(t *testing.T) {
	p := delivery.RetryPolicy{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2, MaxAttempts: 6}
	for _, c := range []struct {
		attempt int
		delay   time.Duration
		giveUp  bool
	}{
		{1, time.Second, false},
		{2, 2 * time.Second, false},
		{3, 4 * time.Second, false},
		{4, 8 * time.Second, false},
		{5, 10 * time.Second, false}, // capped
		{6, 0, true},
		{7, 0, true},
	} {
		d, g := p.Next(c.attempt)
		if d != c.delay || g != c.giveUp {
			t.Errorf("attempt %d: got %s %v, want %s %v", c.attempt, d, g, c.delay, c.giveUp)
		}
	}
}

func TestRetryPolicyJitterStaysInBounds(t *testing.T) {
	p := delivery.RetryPolicy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2, MaxAttempts: 10}
	seen := map[time.Duration]bool{}
	for range 200 {
		d, _ := p.Next(3) // 4s ± 20%
		if d < 3200*time.Millisecond || d > 4800*time.Millisecond {
			t.Fatalf("delay %s outside 4s±20%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("jitter spread only %d distinct delays", len(seen))
	}
	// At the cap, the jitter spreads delays below it, never past: the cap keeps a retry after
	// a lost answer within the platform's 10-minute duplicate check.
	atCap := map[bool]int{}
	for range 200 {
		d, _ := p.Next(9) // 256s, capped at 60s
		if d > time.Minute || d < 48*time.Second {
			t.Fatalf("delay %s at the cap of 1m, want 48s to 1m", d)
		}
		atCap[d == time.Minute]++
	}
	if atCap[false] == 0 {
		t.Fatal("no jitter below the cap")
	}
}

func TestApply(t *testing.T) {
	p := delivery.RetryPolicy{Initial: time.Second, Max: time.Minute, Multiplier: 2, MaxAttempts: 3}
	if got := p.Apply(delivery.Retry("busy", 0), 2).String(); got != "retry in 2s: busy" {
		t.Errorf("got %q", got)
	}
	if got := p.Apply(delivery.Retry("busy", 0), 3).String(); got != "failed: gave up after 3 attempts: busy" {
		t.Errorf("got %q", got)
	}
	for _, o := range []delivery.Outcome{delivery.Sent(7), delivery.Failed("no binding")} {
		if got := p.Apply(o, 99); got != o {
			t.Errorf("Apply changed %v into %v", o, got)
		}
	}
	if !strings.HasPrefix(delivery.Sent(7).String(), "sent msgid=7") {
		t.Error(delivery.Sent(7).String())
	}
}
