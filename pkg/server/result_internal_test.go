package server

import (
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/push"
)

// TestResultTimesNotBeforeAcceptance: a worker whose clock runs 10 s behind the front end's
// (within the 15 s the operations guide allows) records an attempt in doubt as updated before
// the push was accepted; the lookup shows no time before the acceptance, and the others as
// they are.
func TestResultTimesNotBeforeAcceptance(t *testing.T) {
	accepted := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	r := push.Result{UcsID: "01M8F5HBAE8VFSTZEECXVG0CQH", State: push.StateSending, Attempts: 1,
		Accepted: accepted, Updated: accepted.Add(-10 * time.Second), RetryAt: accepted.Add(time.Minute)}
	v := resultView(r, time.UTC)
	if v.UpdatedAt != v.AcceptedAt || v.AcceptedAt != "2026-11-27 10:00:00.000" || v.NextAttemptAt != "2026-11-27 10:01:00.000" {
		t.Fatalf("accepted %s, updated %s, next attempt %s", v.AcceptedAt, v.UpdatedAt, v.NextAttemptAt)
	}
	if v := resultView(push.Result{UcsID: r.UcsID, State: push.StateQueued, Accepted: accepted}, time.UTC); v.SentAt != "" || v.FinishedAt != "" {
		t.Fatalf("times a queued push does not have: sent %q, finished %q", v.SentAt, v.FinishedAt)
	}
}
