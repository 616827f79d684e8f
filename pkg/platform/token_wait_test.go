package platform_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
)

// TestTokenWaitAnswersWhatIsLeftOfIt: the renewal ahead of expiry meets a 429 with
// Retry-After: 300 from the token endpoint; the sends go on with the token in hand until it is
// no longer good (4 minutes later), then get the remembered answer, which says what is left of
// the wait (60 s): it said 300 s, and the worker paused itself for all of it from then on
// (selfPause takes he.RetryAfter), up to 4 minutes longer than the endpoint asked.
func TestTokenWaitAnswersWhatIsLeftOfIt(t *testing.T) {
	clk := newClock()
	var fetches atomic.Int64
	e := newEnv(t, envOptions{simNow: clk.Now, clientNow: clk.Now, wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/cgi-bin/stable_token" && fetches.Add(1) > 1 {
				w.Header().Set("Retry-After", "300")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "m1")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(6900*time.Second + time.Second) // due for renewal (7200 s token, 5 min ahead)
	if _, err := e.client.SendTemplate(ctx, exam(follower, "m2")); err != nil {
		t.Fatal(err)
	}
	// The renewal's failure is logged under the cache's lock, with its wait recorded.
	embeddedtest.Eventually(t, 5*time.Second, "the renewal met the 429", func() bool {
		return fetches.Load() == 2 && strings.Contains(e.logs.String(), "fetching the platform access token failed")
	})
	clk.Advance(240 * time.Second) // the token in hand is no longer good; 60 s of the wait left
	_, err := e.client.SendTemplate(ctx, exam(follower, "m3"))
	var he *platform.HTTPError
	if !errors.As(err, &he) {
		t.Fatalf("send after the token's good time: %v", err)
	}
	if fetches.Load() != 2 {
		t.Fatalf("the token endpoint was called during its wait")
	}
	if he.RetryAfter > 60*time.Second {
		t.Errorf("60 s are left of the token endpoint's wait, but the answer says Retry-After %v (%v)", he.RetryAfter, err)
	}
}
