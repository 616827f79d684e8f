package natskv

import (
	"testing"
	"time"
)

// TestBucketTake: the refill and take rule, on a fixed clock.
func TestBucketTake(t *testing.T) {
	t0 := time.Date(2025, 9, 1, 8, 0, 0, 0, time.UTC)
	r := Rate{PerSecond: 10, Burst: 20}
	for _, c := range []struct {
		name string
		st   bucketState
		now  time.Time
		r    Rate
		want int
		got  int
		left float64
		wait time.Duration
		at   time.Time
	}{
		{"a new bucket is full", full(r, t0), t0, r, 5, 5, 15, 0, t0},
		{"a whole lease or nothing", bucketState{Tokens: 3, At: t0.UnixNano()}, t0, r, 5, 0, 3, 200 * time.Millisecond, t0},
		{"a lease of the burst when it is smaller", bucketState{Tokens: 2, At: t0.UnixNano()}, t0, Rate{PerSecond: 10, Burst: 2}, 5, 2, 0, 0, t0},
		{"empty: wait for a lease's worth", bucketState{Tokens: 0, At: t0.UnixNano()}, t0, r, 5, 0, 0, 500 * time.Millisecond, t0},
		{"empty: a lease's worth, at most the burst", bucketState{Tokens: 0, At: t0.UnixNano()}, t0, Rate{PerSecond: 10, Burst: 2}, 5, 0, 0, 200 * time.Millisecond, t0},
		{"part of a token: wait for the rest", bucketState{Tokens: 0.5, At: t0.UnixNano()}, t0, r, 1, 0, 0.5, 50 * time.Millisecond, t0},
		{"refills with time", bucketState{Tokens: 0, At: t0.UnixNano()}, t0.Add(300 * time.Millisecond), r, 3, 3, 0, 0, t0.Add(300 * time.Millisecond)},
		{"never beyond the burst", bucketState{Tokens: 0, At: t0.UnixNano()}, t0.Add(time.Hour), r, 30, 20, 0, 0, t0.Add(time.Hour)},
		{"a clock a little behind the bucket's refills nothing, nor moves it back", bucketState{Tokens: 0, At: t0.UnixNano()}, t0.Add(-500 * time.Millisecond), r, 1, 0, 0, 100 * time.Millisecond, t0},
		{"nor does one 15 s behind, the most replicas' clocks may differ", bucketState{Tokens: 0, At: t0.UnixNano()}, t0.Add(-15 * time.Second), r, 1, 0, 0, 100 * time.Millisecond, t0},
		{"a bucket time over maxAhead ahead is not believed", bucketState{Tokens: 0, At: t0.Add(time.Minute).UnixNano()}, t0, r, 1, 0, 0, 100 * time.Millisecond, t0},
		{"and refills from the replica's time after it", bucketState{Tokens: 0, At: t0.Add(time.Minute).UnixNano()}, t0.Add(300 * time.Millisecond), r, 5, 0, 0, 500 * time.Millisecond, t0.Add(300 * time.Millisecond)},
		{"a slow rate waits long", bucketState{Tokens: 0, At: t0.UnixNano()}, t0, Rate{PerSecond: 0.5, Burst: 1}, 1, 0, 0, 2 * time.Second, t0},
	} {
		t.Run(c.name, func(t *testing.T) {
			next, got, wait := c.st.take(c.now, c.r, c.want)
			if got != c.got || wait != c.wait || next.Tokens != c.left || next.At != c.at.UnixNano() {
				t.Fatalf("got %d, wait %v, left %v at %d; want %d, %v, %v at %d", got, wait, next.Tokens, next.At, c.got, c.wait, c.left, c.at.UnixNano())
			}
		})
	}
}

// TestChunk: a lease is Lease's worth of tokens, at least one, at most the burst.
func TestChunk(t *testing.T) {
	for _, c := range []struct {
		lease time.Duration
		r     Rate
		want  int
	}{
		{100 * time.Millisecond, Rate{PerSecond: 50, Burst: 100}, 5},
		{100 * time.Millisecond, Rate{PerSecond: 5, Burst: 10}, 1},
		{50 * time.Millisecond, Rate{PerSecond: 1000, Burst: 50}, 50},
		{50 * time.Millisecond, Rate{PerSecond: 1001, Burst: 1000}, 51},
		{100 * time.Millisecond, Rate{PerSecond: 1000, Burst: 3}, 3},
	} {
		tb := NewTokenBuckets(nil, TokenBucketsConfig{Lease: c.lease})
		if got := tb.chunk(c.r); got != c.want {
			t.Errorf("lease %v, %+v: chunk %d, want %d", c.lease, c.r, got, c.want)
		}
	}
}
