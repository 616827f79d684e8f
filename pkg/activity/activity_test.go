package activity

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/push"
)

func TestKind(t *testing.T) {
	for reason, want := range map[string]string{
		"no binding: user 2020000009 has no follower id of the official account": "no_binding",
		"not following: user 1 does not follow the official account":             "not_following",
		"no template configured for type TDL":                                    "no_template",
		"gave up after 12 attempts: platform error -1: system error":             "max_attempts",
		"undecodable message: invalid character 'x'":                             "undecodable",
		"43004 require subscribe":                                                "43004",
		"47003 argument invalid! data.thing1.value invalid":                      "47003",
		"-1 system error":               "-1",
		"failed:user block":             "user block",
		"failed: system failed":         "system failed",
		"something else: with detail":   "something else",
		"":                              "unknown",
		"- dash":                        "- dash",
		strings.Repeat("长", 50) + ": x": strings.Repeat("长", 40) + "…",
	} {
		if got := Kind(reason); got != want {
			t.Errorf("Kind(%q) = %q, want %q", reason, got, want)
		}
	}
}

// TestSeries checks that accepts, sends and final results land in the minute they were seen,
// that the series spans the last hour, and that the latency percentiles are within a bucket.
func TestSeries(t *testing.T) {
	c := clocktest.New(time.Date(2026, 11, 23, 10, 0, 30, 0, time.UTC))
	r := New(c.Now)
	r.Accepted(3)
	acc := c.Now()
	for i, lat := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 10 * time.Second} {
		r.Sent(push.Result{UcsID: fmt.Sprint(i), State: push.StateSent, MsgID: int64(i + 1)})
		r.Final(push.Result{UcsID: fmt.Sprint(i), State: push.StateDelivered, MsgID: int64(i + 1), Accepted: acc, Finished: acc.Add(lat)})
	}
	c.Advance(2 * time.Minute)
	r.Accepted(1)
	r.Sent(push.Result{UcsID: "s", State: push.StateSent, MsgID: 9})
	r.Final(push.Result{UcsID: "f", State: push.StateFailed, UserID: "u1", Type: "TDL", Reason: "no binding: user u1 has none"})

	s := r.Snapshot()
	if s.Accepted != 4 || s.Sent != 4 || s.Delivered != 3 || s.Failed != 1 || s.AwaitingReceipt != 1 {
		t.Errorf("totals: %+v", s)
	}
	if len(s.Minutes) != 60 {
		t.Fatalf("%d minutes, want 60", len(s.Minutes))
	}
	lastStart := s.Minutes[59].Start
	if want := time.Date(2026, 11, 23, 10, 2, 0, 0, time.UTC); !lastStart.Equal(want) {
		t.Errorf("last minute starts %v, want %v", lastStart, want)
	}
	first := s.Minutes[57]
	if first.Accepted != 3 || first.Delivered != 3 || first.Failed != 0 {
		t.Errorf("10:00 minute: %+v", first)
	}
	// p50 of {100ms, 200ms, 10s} is 200ms, p95 is 10s; a bucket is at most 19% wide.
	if first.P50 < 200*time.Millisecond || first.P50 > 240*time.Millisecond || first.P95 < 10*time.Second || first.P95 > 12*time.Second {
		t.Errorf("percentiles: p50 %v, p95 %v", first.P50, first.P95)
	}
	if m := s.Minutes[59]; m.Accepted != 1 || m.Failed != 1 || m.P50 != 0 {
		t.Errorf("10:02 minute: %+v", m)
	}
	if len(s.Kinds) != 1 || s.Kinds[0] != (KindCount{"no_binding", 1}) {
		t.Errorf("kinds: %+v", s.Kinds)
	}
	if len(s.Recent) != 1 || s.Recent[0].UcsID != "f" || s.Recent[0].UserID != "u1" || s.Recent[0].Kind != "no_binding" {
		t.Errorf("recent: %+v", s.Recent)
	}

	// An hour later the old minutes have left the window, and their slots are reused.
	c.Advance(time.Hour)
	r.Accepted(2)
	s = r.Snapshot()
	var sum int64
	for _, m := range s.Minutes {
		sum += m.Accepted
	}
	if sum != 2 || s.Accepted != 6 {
		t.Errorf("after an hour: %d in the window, %d in all", sum, s.Accepted)
	}
}

// TestBounded checks that no input grows the recorder without end: the recent list, the kinds
// and the reasons kept are capped.
func TestBounded(t *testing.T) {
	r := New(nil)
	for i := range 500 {
		r.Final(push.Result{UcsID: fmt.Sprint(i), State: push.StateFailed, Reason: fmt.Sprintf("odd%d: %s", i, strings.Repeat("x", 1000))})
	}
	s := r.Snapshot()
	if len(s.Recent) != RecentFailures || s.Recent[0].UcsID != "499" {
		t.Errorf("recent: %d, newest %s", len(s.Recent), s.Recent[0].UcsID)
	}
	if len(s.Kinds) != maxKinds+1 {
		t.Errorf("%d kinds, want %d and other", len(s.Kinds), maxKinds)
	}
	if s.Kinds[0] != (KindCount{"other", 500 - maxKinds}) {
		t.Errorf("most frequent kind: %+v", s.Kinds[0])
	}
	if n := len([]rune(s.Recent[0].Reason)); n != maxReasonRunes+1 {
		t.Errorf("reason kept at %d characters", n)
	}
	var nilRec *Recorder
	nilRec.Accepted(1)
	nilRec.Final(push.Result{State: push.StateFailed})
	if s := nilRec.Snapshot(); s.Accepted != 0 {
		t.Error("a nil recorder counted")
	}
}

// TestConcurrent adds from many goroutines while another reads, for the race detector.
func TestConcurrent(t *testing.T) {
	r := New(nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				r.Accepted(1)
				r.Final(push.Result{State: push.StateFailed, Reason: "no binding"})
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			_ = r.Snapshot()
		}
	})
	wg.Wait()
	if s := r.Snapshot(); s.Accepted != 8000 || s.Failed != 8000 || s.Kinds[0].Count != 8000 {
		t.Errorf("lost counts: %+v", s.Kinds)
	}
}

// "Sent, awaiting receipt" counts the sends this front end counted and has seen no final
// result of: a final result of a send before its start (a restart with messages in flight)
// cancels none of them, and a final result that came before its send's announcement (they
// travel apart) leaves that send not waiting.
func TestAwaitingReceipt(t *testing.T) {
	type step struct {
		final bool // else sent
		msgID int64
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  int64
	}{
		{"sent, then finished", []step{{false, 1}, {false, 2}, {true, 1}}, 1},
		{"a send before the start finished", []step{{true, 1001}, {false, 2}}, 1},
		{"finished before its send was announced", []step{{true, 3}, {false, 3}, {false, 4}}, 1},
		{"finished twice", []step{{false, 5}, {false, 6}, {true, 5}, {true, 5}}, 1},
		{"a failure without a send", []step{{false, 7}, {true, 0}}, 1},
		{"sent again after its final result", []step{{false, 8}, {true, 8}, {false, 8}, {false, 9}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
			r := New(clk.Now)
			for _, s := range tc.steps {
				res := push.Result{UcsID: fmt.Sprint("01PUSH", s.msgID), MsgID: s.msgID, Accepted: clk.Now()}
				if s.final {
					res.State, res.Finished = push.StateDelivered, clk.Now()
					if s.msgID == 0 {
						res.State, res.Reason = push.StateFailed, "failed:user block"
					}
					r.Final(res)
				} else {
					res.State, res.Sent = push.StateSent, clk.Now()
					r.Sent(res)
				}
			}
			if got := r.Snapshot().AwaitingReceipt; got != tc.want {
				t.Fatalf("AwaitingReceipt = %d, want %d", got, tc.want)
			}
		})
	}
}
