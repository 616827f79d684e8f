package delivery

import (
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// outcomeKind says what became of one delivery of a message from the queue.
type outcomeKind int

const (
	outcomeSent outcomeKind = iota + 1
	outcomeRetry
	outcomeFailed
	// outcomeSnooze hands the message back without an attempt: the store could not be read
	// or written, sending is paused, the worker is stopping. It never counts toward
	// MaxAttempts (River's snooze).
	outcomeSnooze
)

// Outcome is the explicit result of one delivery of a message: sent (with the platform's
// msgid), retry after a delay (with the error), failed for good (with the reason), or handed
// back without an attempt (snoozed, after a delay).
type Outcome struct {
	kind   outcomeKind
	msgID  int64
	delay  time.Duration
	reason string
	// class names a failure's kind in a word, for metrics: no_binding, a platform errcode,
	// max_attempts.
	class string
	// exhausted marks a failure because the attempts ran out: the message is dead-lettered.
	exhausted bool
	// lastError is the last attempt's error, of an exhausted failure.
	lastError string
	// inDoubtSince, of a retry, is when the call whose outcome is unknown was made: the
	// message's record keeps saying sending since then (see Worker.askAgain).
	inDoubtSince time.Time
}

// Sent is an attempt the platform accepted.
func Sent(msgID int64) Outcome { return Outcome{kind: outcomeSent, msgID: msgID} }

// Retry is an attempt to be repeated after delay.
func Retry(reason string, delay time.Duration) Outcome {
	return Outcome{kind: outcomeRetry, reason: reason, delay: delay}
}

// Failed is an attempt that must never be repeated.
func Failed(reason string) Outcome {
	return Outcome{kind: outcomeFailed, reason: reason, class: "other"}
}

// Snooze hands a message back to the queue after delay without counting an attempt: nothing
// was asked of the platform, or what was asked is not the message's doing.
func Snooze(reason string, delay time.Duration) Outcome {
	return Outcome{kind: outcomeSnooze, reason: reason, delay: delay}
}

// failedAs is Failed with the failure's class.
func failedAs(class, reason string) Outcome {
	return Outcome{kind: outcomeFailed, reason: reason, class: class}
}

// String describes the outcome for logs and tests.
func (o Outcome) String() string {
	switch o.kind {
	case outcomeSent:
		return fmt.Sprintf("sent msgid=%d", o.msgID)
	case outcomeRetry:
		return fmt.Sprintf("retry in %s: %s", o.delay, o.reason)
	case outcomeFailed:
		return "failed: " + o.reason
	case outcomeSnooze:
		return fmt.Sprintf("handed back for %s without an attempt: %s", o.delay, o.reason)
	}
	return "unknown outcome"
}

// RetryPolicy decides how long a message waits before its next attempt, and when to give up.
type RetryPolicy struct {
	// Initial is the delay after the first failed attempt.
	Initial time.Duration
	// Max caps the delay, jitter included.
	Max time.Duration
	// Multiplier grows the delay from one attempt to the next. Default 2.
	Multiplier float64
	// Jitter spreads delays by ± this share, so that a burst of failures does not return as a
	// burst. 0 to 1; 0 means none.
	Jitter float64
	// MaxAttempts is the number of attempts after which a message fails.
	MaxAttempts int
}

// Next returns the delay before attempt+1 after attempt (counted from 1) failed, and whether
// the message should be given up instead.
func (p RetryPolicy) Next(attempt int) (time.Duration, bool) {
	if attempt >= p.MaxAttempts {
		return 0, true
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.Initial,
		RandomizationFactor: p.Jitter,
		Multiplier:          p.Multiplier,
		MaxInterval:         p.Max,
		MaxElapsedTime:      0, // MaxAttempts ends retries, not time
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	if b.Multiplier == 0 {
		b.Multiplier = 2
	}
	b.Reset()
	var d time.Duration
	for range attempt {
		d = b.NextBackOff()
	}
	if p.Max > 0 {
		// The jitter spreads delays below the cap, never past it: the cap is what keeps a
		// retry within the platform's duplicate check.
		d = min(d, p.Max)
	}
	return d, false
}

// Apply sets the delay of a retry outcome of the given attempt (counted from 1: the platform
// calls made for the message, this one included), or turns it into a failure when the policy
// gives up. Other outcomes pass unchanged.
func (p RetryPolicy) Apply(o Outcome, attempt int) Outcome {
	if o.kind != outcomeRetry {
		return o
	}
	d, giveUp := p.Next(attempt)
	if giveUp {
		return p.GiveUp(attempt, o.reason)
	}
	o.delay = d
	return o
}

// GiveUp is the failure of a message whose attempts ran out, the last one's error being
// reason: it is dead-lettered.
func (p RetryPolicy) GiveUp(attempts int, reason string) Outcome {
	f := failedAs("max_attempts", fmt.Sprintf("gave up after %d attempts: %s", attempts, reason))
	f.exhausted, f.lastError = true, reason
	return f
}

// Expired is the failure of a message not sent within maxAge of its acceptance (nats.max_age).
// lastError is its last attempt's error, if it had one. It is not dead-lettered: a whole
// backlog may expire at once (workers stopped for days), and its failed records say it all.
func Expired(maxAge time.Duration, lastError string) Outcome {
	reason := "expired: not sent within " + maxAge.String() + " of its acceptance"
	if lastError != "" {
		reason += "; last error: " + lastError
	}
	return failedAs("expired", reason)
}
