package clocktest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
)

var start = time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)

func TestClock(t *testing.T) {
	c := clocktest.New(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now() = %v, want %v", c.Now(), start)
	}
	c.Advance(90 * time.Second)
	if got := c.Now().Sub(start); got != 90*time.Second {
		t.Fatalf("after Advance(90s) the clock moved %v", got)
	}
	c.Advance(-30 * time.Second)
	if got := c.Now().Sub(start); got != time.Minute {
		t.Fatalf("after Advance(-30s) the clock is %v past the start", got)
	}
	at := time.Unix(1_800_000_000, 0)
	c.Set(at)
	if !c.Now().Equal(at) {
		t.Fatalf("after Set, Now() = %v", c.Now())
	}
}

// TestClockConcurrent is for -race: readers and advancers at once, and no
// advance is lost.
func TestClockConcurrent(t *testing.T) {
	c := clocktest.New(start)
	now := c.Now // the method value components are given
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				c.Advance(time.Millisecond)
				_ = now()
			}
		})
	}
	wg.Wait()
	if got := c.Now().Sub(start); got != 4*time.Second {
		t.Fatalf("the clock moved %v, want 4s", got)
	}
}
