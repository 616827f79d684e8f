package delivery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
)

// TestUnreachablePlatformGivesUpAtMaxAttempts: the worker holds an access token (one push went
// out), then the platform becomes unreachable: every send is refused at the connection, and no
// byte reaches the platform. Such a call's outcome is known (nothing was taken): the push fails
// after worker.max_attempts calls, as for any other retryable failure, and its reason does not
// say the platform may have sent it.
func TestUnreachablePlatformGivesUpAtMaxAttempts(t *testing.T) {
	r := newRig(t)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.sim.Handler().ServeHTTP(w, req)
	}))
	t.Cleanup(front.Close)
	policy := delivery.RetryPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2, MaxAttempts: 2}
	r.startWorkerWith(policy, func(c *delivery.Config) { c.Platform = r.platformAt(front.URL) })
	r.waitState(r.publish("u-follows", "JML", jml), push.StateSent) // the token is held now

	front.CloseClientConnections()
	front.Close() // from now on every send is "connection refused"

	id := r.publish("u-follows", "JML", jml)
	var res push.Result
	embeddedtest.Eventually(t, 10*time.Second, id+" failed", func() bool {
		cur, err := r.st.Current(context.Background(), id)
		res = cur
		return err == nil && cur.State == push.StateFailed
	})
	if res.Attempts != policy.MaxAttempts {
		t.Errorf("failed after %d attempts, want max_attempts %d (reason %q)", res.Attempts, policy.MaxAttempts, res.Reason)
	}
	if strings.Contains(res.Reason, "may have sent") {
		t.Errorf("a send refused at the connection reached no platform, but the reason says: %q", res.Reason)
	}
	// The caller reads what happened, not the operator's network.
	host := strings.TrimPrefix(front.URL, "http://")
	for _, text := range []string{res.Reason, res.LastError} {
		if strings.Contains(text, host) || strings.Contains(text, "dial tcp") || !strings.Contains(text, "the platform could not be reached: connection refused") {
			t.Errorf("a caller reads %q: want the platform unreachable said, without its address", text)
		}
	}
}

// TestNoTokenReasonHidesTheNetwork: the worker reaches no token endpoint (its platform address,
// an egress relay of the operator's, refuses connections): the push's lastError, which its
// caller reads, says so without the address or the transport's error chain.
func TestNoTokenReasonHidesTheNetwork(t *testing.T) {
	r := newRig(t)
	front := httptest.NewServer(http.NotFoundHandler())
	closed := front.URL
	front.Close()
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform = r.platformAt(closed) })
	id := r.publish("u-follows", "JML", jml)
	var res push.Result
	embeddedtest.Eventually(t, 10*time.Second, id+" held for want of a token", func() bool {
		cur, err := r.st.Current(context.Background(), id)
		res = cur
		return err == nil && cur.LastError != ""
	})
	if strings.Contains(res.LastError, strings.TrimPrefix(closed, "http://")) || strings.Contains(res.LastError, "dial tcp") ||
		!strings.HasPrefix(res.LastError, "no access token: the platform could not be reached: connection refused") {
		t.Errorf("lastError %q: want the missing token and the unreachable platform said, without its address", res.LastError)
	}
}

// TestAccountRefusalAtTheTokenEndpointCountsNoAttempt: the platform's token endpoint refuses the
// account (40125: platform.secret is not the account's AppSecret), so no template send is made;
// and the shared pause cannot be set (its bucket unreachable). Attempts are the platform's
// calls: the push records none, and is not failed as having used them up.
func TestAccountRefusalAtTheTokenEndpointCountsNoAttempt(t *testing.T) {
	r := newRig(t)
	front := httptest.NewServer(r.sim.Handler())
	t.Cleanup(front.Close)
	pc, err := platform.New(platform.Config{APIBase: front.URL, AppID: "wxapp", Secret: "not-the-secret"})
	if err != nil {
		t.Fatal(err)
	}
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Platform, c.Pause, c.QuotaReset = pc, brokenPause{}, quotaInAnHour
		c.StoreRetry = 100 * time.Millisecond
	})
	id := r.publish("u-follows", "JML", jml)
	var res push.Result
	embeddedtest.Eventually(t, 10*time.Second, id+" held for the refusal", func() bool {
		cur, err := r.st.Current(context.Background(), id)
		res = cur
		return err == nil && strings.Contains(cur.LastError, "40125")
	})
	// Several rounds of the token endpoint's refusal (one every StoreRetry) leave it so.
	embeddedtest.Eventually(t, 10*time.Second, "three more token requests", func() bool {
		return r.sim.Stats().TokenRequests >= 4
	})
	// A round marks its attempt as under way before it asks for the token, and takes it back
	// after the refusal: read the push between two rounds.
	embeddedtest.Eventually(t, 10*time.Second, id+" between two rounds", func() bool {
		res, err = r.st.Current(context.Background(), id)
		return err != nil || res.State != push.StateSending
	})
	if sends := r.sim.Stats().Sends; err != nil || res.Attempts != int(sends) || res.State.Final() {
		t.Fatalf("the platform got %d template sends, but the push records %d attempts (%v; state %s, last error %q, reason %q)",
			sends, res.Attempts, err, res.State, res.LastError, res.Reason)
	}
}
