package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
)

// scriptedSender answers its calls with errs in turn (nil: the real platform's answer).
type scriptedSender struct {
	delivery.Sender
	mu   sync.Mutex
	errs []error
}

func (s *scriptedSender) SendTemplate(ctx context.Context, m platform.TemplateMessage) (int64, error) {
	s.mu.Lock()
	var err error
	if len(s.errs) > 0 {
		err, s.errs = s.errs[0], s.errs[1:]
	}
	s.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("send template: %w", err)
	}
	return s.Sender.SendTemplate(ctx, m)
}

// TestResumedPauseDoesNotHoldARedeliveredMessage: a push's first call meets a 502 and is
// retried; the retry meets 45009, the daily quota used up, three minutes before it renews:
// sending pauses for every worker until then, the call is taken back and the message waits at
// the gate, its record queued (one attempt, the pause's reason). A rollout
// stops the worker (the message is handed back at once) and the operator runs `worker
// -resume`. The next worker sends the push now that sending resumed: it does not wait out the
// pause that no longer holds.
func TestResumedPauseDoesNotHoldARedeliveredMessage(t *testing.T) {
	r := newRig(t)
	p := r.openPause()
	ctx := context.Background()
	policy := delivery.RetryPolicy{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2, MaxAttempts: 5} // backoff_max's default
	renewal := time.Now().Add(3 * time.Minute)
	quotaReset := func(time.Time) time.Time { return renewal }
	stopA := r.startWorkerWith(policy, func(c *delivery.Config) {
		c.Pause, c.Concurrency, c.QuotaReset = p, 1, quotaReset
		c.Platform = &scriptedSender{Sender: r.pc, errs: []error{
			&platform.HTTPError{Status: "502 Bad Gateway"},
			&platform.Error{Code: platform.CodeDailyQuota, Msg: "reach max api daily quota limit"},
		}}
	})
	id := r.publish("u-follows", "JML", jml)
	var cur push.Result
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cur, _ = r.st.Current(ctx, id)
		if cur.State == push.StateQueued && cur.Attempts == 1 && strings.HasPrefix(cur.LastError, "45009") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry was not held by the quota's pause: %+v", cur)
		}
	}
	stopA()                               // a rollout: the held message is handed back at once
	if err := p.Resume(ctx); err != nil { // `worker -resume`
		t.Fatal(err)
	}
	resumed := time.Now()
	r.startWorkerWith(policy, func(c *delivery.Config) { c.Pause, c.Concurrency, c.QuotaReset = p, 1, quotaReset })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		cur, _ = r.st.Current(ctx, id)
		if cur.State == push.StateSent {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sending was resumed %s ago, and the push is still %s (attempts %d, next attempt in %s): it waits out the lifted pause",
				time.Since(resumed).Round(time.Second), cur.State, cur.Attempts, time.Until(cur.RetryAt).Round(time.Second))
		}
	}
}
