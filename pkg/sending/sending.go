// Package sending holds what every worker obeys when sending to the platform, shared through
// NATS key-value: the pause of sending (the platform's daily quota used up, or a problem of the
// account that waits for an operator) and the send budget of platform.max_rate.
//
// It is a package of its own rather than part of natskv, because natskv's helpers know nothing
// of the product, while the pause and the budget carry rules of sending to the platform.
package sending

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/natskv"
)

// Bucket holds what every worker obeys when sending to the platform: the pause after
// the daily quota is used up, and the shared send budget of platform.max_rate.
const Bucket = "ucs_sending"

const (
	pauseKey  = "paused"
	budgetKey = "budget"
)

// Pause is the shared pause of sending: every worker follows it in memory.
type Pause struct {
	m   *natskv.Mirror
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

// Explain is how a message held back by the pause explains itself in a lookup, with the pause's
// end in loc (the service's time zone, as every time it shows; nil: the process's).
func (st PauseState) Explain(loc *time.Location) string {
	if st.Action != "" {
		return st.Reason + "; sending paused until an operator acts: " + st.Action
	}
	if loc == nil {
		loc = time.Local
	}
	return st.Reason + "; sending paused until " + st.Until.In(loc).Format(time.RFC3339)
}

// OpenPause opens the sending bucket and follows its pause.
func OpenPause(ctx context.Context, js jetstream.JetStream, replicas int, now func() time.Time) (*Pause, error) {
	if now == nil {
		now = time.Now
	}
	m, err := natskv.OpenMirror(ctx, js, Bucket, 48*time.Hour, replicas, now)
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

// Set pauses sending for every worker until st.Until, unless a pause in force lasts longer:
// of two refusals met at once (the per-minute limit by one worker, the daily quota or a
// refusal of the account by another), the longer pause stands, whichever is written last.
func (p *Pause) Set(ctx context.Context, st PauseState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = p.m.Update(ctx, pauseKey, func(old []byte) ([]byte, error) {
		var cur PauseState
		if old != nil && json.Unmarshal(old, &cur) == nil && cur.Until.After(st.Until) && cur.Until.After(p.now()) {
			return nil, errLongerPause
		}
		return b, nil
	})
	if errors.Is(err, errLongerPause) {
		return nil
	}
	return err
}

// errLongerPause ends an update that leaves a longer pause in force.
var errLongerPause = errors.New("a longer pause is in force")

// Resume ends a pause for every worker at once, however long.
func (p *Pause) Resume(ctx context.Context) error {
	b, err := json.Marshal(PauseState{Until: time.Unix(0, 0), Reason: "resumed"})
	if err != nil {
		return err
	}
	return p.m.Put(ctx, pauseKey, b)
}

// Close stops following the bucket.
func (p *Pause) Close() { p.m.Close() }

// Budget is a send budget shared by every worker through a token bucket in NATS (key-value
// bucket ucs_sending_budget): together they send at most rate messages a second, and one lease
// more at most, however many workers run. A worker takes a twentieth of a second's worth at a
// time, at least one message (a lease), with one compare-and-set, and spends it
// within that twentieth of a second or not at all, so that the tokens the workers hold add
// nothing to a second's sends; the bucket is touched about twenty times a second however many
// workers share it. The bucket holds at most one lease: a quiet second is not saved up for a
// burst.
type Budget struct {
	tb   *natskv.TokenBuckets
	rate natskv.Rate
}

// budgetLease is how much of a second's worth of sends a worker takes at a time.
const budgetLease = time.Second / 20

// OpenBudget opens the shared budget of rate messages a second.
func OpenBudget(ctx context.Context, js jetstream.JetStream, rate float64, replicas int, now func() time.Time) (*Budget, error) {
	c, err := natskv.OpenCounters(ctx, js, Bucket+"_budget", time.Hour, replicas)
	if err != nil {
		return nil, err
	}
	chunk := max(1, int(math.Ceil(rate*budgetLease.Seconds())))
	return &Budget{
		tb:   natskv.NewTokenBuckets(c, natskv.TokenBucketsConfig{Lease: budgetLease, Keep: budgetLease, Keys: 1, Now: now}),
		rate: natskv.Rate{PerSecond: rate, Burst: chunk},
	}, nil
}

// Wait returns once one message may be sent, or with ctx's error or the bucket's.
func (b *Budget) Wait(ctx context.Context) error {
	if err := b.tb.Wait(ctx, budgetKey, b.rate); err != nil {
		return fmt.Errorf("send budget: %w", err)
	}
	return nil
}
