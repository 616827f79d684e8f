package delivery_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
)

// TestLastAttemptAnswerLostIsAskedAgain: the platform takes a push's last allowed call
// (max_attempts 1) but its answer never reaches the worker (the connection drops: a proxy
// dropping the response). The call's outcome is unknown, as after a worker killed
// mid-call: the push is asked again with the same client_msg_id, past max_attempts, and the
// platform answers with the first call's msgid: the push ends sent, with that msgid, not failed
// and dead-lettered while the user has the message.
func TestLastAttemptAnswerLostIsAskedAgain(t *testing.T) {
	r := newRig(t)
	var calls atomic.Int64
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "template/send") || calls.Add(1) > 1 {
			return false // a later call is answered as usual
		}
		// The platform takes the message; its answer is lost with the connection.
		r.sim.Handler().ServeHTTP(httptest.NewRecorder(), req)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return true
		}
		_ = conn.Close()
		return true
	})
	r.startWorkerWith(lastOnly, func(c *delivery.Config) {
		c.Platform = pc
		c.StoreRetry = 100 * time.Millisecond
	})
	id := r.publish("u-follows", "JML", jml)
	res := r.waitState(id, push.StateSent)
	if accepted := r.msgIDOf(id); accepted == 0 || res.MsgID != accepted || calls.Load() != 2 || res.Attempts != 2 {
		t.Fatalf("%s: %s with msgid %d after %d calls and %d attempts; the platform took it as msgid %d",
			id, res.State, res.MsgID, calls.Load(), res.Attempts, accepted)
	}
}

// TestKilledCallThenPlatformErrorStaysInDoubt: a worker is killed during a push's call, after
// the platform took the message. The next worker calls again with the same client_msg_id, but
// the platform answers HTTP 502, which says nothing of the first call: the push stays in doubt
// (its record says sending), is asked again past max_attempts while the platform's duplicate
// check lasts, and ends sent with the first call's msgid once the platform answers.
func TestKilledCallThenPlatformErrorStaysInDoubt(t *testing.T) {
	r := newRig(t)
	policy := delivery.RetryPolicy{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, MaxAttempts: 2}
	id := r.killedDuringCall(policy)
	accepted := r.msgIDOf(id)
	if accepted == 0 {
		t.Fatal("the platform did not take the first call")
	}
	r.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	r.startWorker(policy)
	embeddedtest.Eventually(t, 20*time.Second, "asked again past max_attempts, still in doubt", func() bool {
		res, err := r.st.Current(context.Background(), id)
		if err == nil && res.State.Final() {
			t.Fatalf("the platform took %s as msgid %d before the kill, yet after 502s it ends %s after %d attempts: %q",
				id, accepted, res.State, res.Attempts, res.Reason)
		}
		return err == nil && res.State == push.StateSending && res.Attempts > policy.MaxAttempts+2
	})
	r.sim.SetFaults(simulator.Faults{})
	if res := r.waitState(id, push.StateSent); res.MsgID != accepted {
		t.Fatalf("sent with msgid %d, want the first call's %d", res.MsgID, accepted)
	}
}

// TestInDoubtFailsAfterTheDuplicateCheck: every call of a push times out (the platform may have
// taken each). It is asked again past max_attempts while the platform's duplicate check of the
// first lasts; once that is over, a repeat could reach the user twice: it fails, its reason
// saying that the platform may have sent it.
func TestInDoubtFailsAfterTheDuplicateCheck(t *testing.T) {
	r := newRig(t)
	clk := clocktest.New(time.Now())
	var calls atomic.Int64
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "template/send") {
			return false
		}
		calls.Add(1)
		_, _ = io.Copy(io.Discard, req.Body) // read, so that the server notices the caller giving up
		<-req.Context().Done()               // no answer
		return true
	})
	r.startWorkerWith(lastOnly, func(c *delivery.Config) {
		c.Platform, c.Now = pc, clk.Now
		// Long enough for every call to reach the platform on a loaded machine: an attempt
		// is counted for each call made, and the test counts the calls the platform got.
		c.SendTimeout = 2 * time.Second
	})
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "asked again past max_attempts", func() bool {
		res, err := r.st.Current(context.Background(), id)
		return calls.Load() >= 3 && err == nil && res.State == push.StateSending
	})
	clk.Advance(platform.DuplicateWindow)
	res := r.waitState(id, push.StateFailed)
	if !strings.Contains(res.Reason, "the platform may have sent the message") || int64(res.Attempts) != calls.Load() {
		t.Fatalf("failed after %d attempts (%d calls): %q", res.Attempts, calls.Load(), res.Reason)
	}
}
