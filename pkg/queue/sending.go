package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SendingBucket holds what every worker obeys when sending to the platform: the pause after
// the daily quota is used up, and the shared send budget of platform.max_rate.
const SendingBucket = "ucs_sending"

const (
	pauseKey  = "paused"
	budgetKey = "budget"
)

// Pause is the shared pause of sending: every worker follows it in memory.
type Pause struct {
	m   *Mirror
	now func() time.Time
}

// PauseState is a pause: sending waits until Until, for Reason. A pause for a problem of the
// account (Action set) lasts until an operator resumes sending; Until only bounds it, so that
// sending is tried again now and then.
type PauseState struct {
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
	// Action is what an operator must do before resuming, for a problem of the account; ""
	// for the daily quota, which ends by itself.
	Action string `json:"action,omitempty"`
}

// Explain is how a message held back by the pause explains itself in a lookup.
func (st PauseState) Explain() string {
	if st.Action != "" {
		return st.Reason + "; sending paused until an operator acts: " + st.Action
	}
	return st.Reason + "; sending paused until " + st.Until.Format(time.RFC3339)
}

// OpenPause opens the sending bucket and follows its pause.
func OpenPause(ctx context.Context, js jetstream.JetStream, replicas int, now func() time.Time) (*Pause, error) {
	if now == nil {
		now = time.Now
	}
	m, err := OpenMirror(ctx, js, SendingBucket, 48*time.Hour, replicas, now)
	if err != nil {
		return nil, err
	}
	return &Pause{m: m, now: now}, nil
}

// Paused returns the pause in force, if any.
func (p *Pause) Paused() (PauseState, bool) {
	raw, ok := p.m.Get(pauseKey)
	if !ok {
		return PauseState{}, false
	}
	var st PauseState
	if json.Unmarshal(raw, &st) != nil || !st.Until.After(p.now()) {
		return PauseState{}, false
	}
	return st, true
}

// Set pauses sending for every worker until st.Until.
func (p *Pause) Set(ctx context.Context, st PauseState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return p.m.Put(ctx, pauseKey, b)
}

// Resume ends a pause for every worker at once.
func (p *Pause) Resume(ctx context.Context) error {
	return p.Set(ctx, PauseState{Until: time.Unix(0, 0), Reason: "resumed"})
}

// Close stops following the bucket.
func (p *Pause) Close() { p.m.Close() }

// Budget is a send budget shared by every worker through a token bucket in NATS: together they
// send at most rate messages a second. A worker takes a twentieth of a second's worth at a time
// (a lease) with one compare-and-set, and spends it within leaseTTL, so that the bucket is
// touched about twenty times a second however many workers share it.
type Budget struct {
	c     *Counters
	rate  float64
	chunk float64
	now   func() time.Time

	lease chan struct{} // held by the goroutine taking a lease
	mu    sync.Mutex
	left  int
	until time.Time
}

// leaseTTL bounds how long a lease may be spent: tokens a worker took and did not use in time
// are gone, so that an idle worker cannot save them up for a burst.
const leaseTTL = time.Second

// OpenBudget opens the shared budget of rate messages a second.
func OpenBudget(ctx context.Context, js jetstream.JetStream, rate float64, replicas int, now func() time.Time) (*Budget, error) {
	if now == nil {
		now = time.Now
	}
	c, err := OpenCounters(ctx, js, SendingBucket+"_budget", time.Hour, replicas)
	if err != nil {
		return nil, err
	}
	return &Budget{c: c, rate: rate, chunk: math.Max(1, math.Ceil(rate/20)), now: now, lease: make(chan struct{}, 1)}, nil
}

type bucketState struct {
	Tokens float64 `json:"t"`
	At     int64   `json:"at"` // unix ns
}

// Wait returns once one message may be sent, or with ctx's error.
func (b *Budget) Wait(ctx context.Context) error {
	for {
		if b.take() {
			return nil
		}
		select {
		case b.lease <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if b.take() { // another goroutine took a lease meanwhile
			<-b.lease
			return nil
		}
		wait, err := b.refill(ctx)
		<-b.lease
		if err != nil {
			return err
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}
}

func (b *Budget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left > 0 && b.now().Before(b.until) {
		b.left--
		return true
	}
	return false
}

// refill takes a lease from the shared bucket, or says how long until one is there.
func (b *Budget) refill(ctx context.Context) (time.Duration, error) {
	var granted float64
	var wait time.Duration
	_, err := b.c.Update(ctx, budgetKey, func(old []byte) ([]byte, error) {
		now := b.now()
		st := bucketState{Tokens: b.chunk, At: now.UnixNano()}
		if old != nil {
			if err := json.Unmarshal(old, &st); err != nil {
				return nil, fmt.Errorf("send budget: %w", err)
			}
			elapsed := time.Duration(now.UnixNano() - st.At).Seconds()
			// The bucket holds at most one lease: a quiet second is not saved for a burst.
			st.Tokens = math.Min(b.chunk, st.Tokens+math.Max(0, elapsed)*b.rate)
			st.At = now.UnixNano()
		}
		granted, wait = 0, 0
		if st.Tokens >= b.chunk {
			st.Tokens -= b.chunk
			granted = b.chunk
		} else {
			wait = time.Duration((b.chunk - st.Tokens) / b.rate * float64(time.Second))
		}
		return json.Marshal(st)
	})
	if err != nil {
		return 0, err
	}
	if granted > 0 {
		b.mu.Lock()
		b.left, b.until = int(granted), b.now().Add(leaseTTL)
		b.mu.Unlock()
	}
	return wait, nil
}
