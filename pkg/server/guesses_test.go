package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// messageCounter counts the log records whose message contains text.
type messageCounter struct {
	text string
	n    *atomic.Int64
}

func (c messageCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c messageCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, c.text) {
		c.n.Add(1)
	}
	return nil
}
func (c messageCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c messageCounter) WithGroup(string) slog.Handler      { return c }

// TestBruteForceLockHoldsUnderParallelGuesses: Keycloak's brute-force detection locks a user
// after brute_force.failures (default 30) wrong passwords: the 31st guess is refused without
// its password counting (TestBruteForceLoginForm, one guess after another). Of 60 guesses sent
// at once no more than 30 are checked either, however slow the server gets (200 at once under
// the race detector on a loaded machine checked 101, then 200, while the shared record could not
// count them in time). The log says which were checked ("wrong user
// number or password") and which refused as blocked.
func TestBruteForceLockHoldsUnderParallelGuesses(t *testing.T) {
	var checked atomic.Int64
	e := newSignInEnvLogged(t, slog.New(messageCounter{text: "sign-in refused: wrong user number or password", n: &checked}))
	const guesses = 60
	b := browser(t)
	login := get(t, b, e.authURL("trusted", "st"))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range guesses {
		wg.Go(func() {
			<-start
			submit(t, b, login, url.Values{"username": {userID}, "password": {"wrong"}})
		})
	}
	close(start)
	wg.Wait()
	// Fewer is no fault: an attempt NATS is too slow to count, on a loaded machine, is refused
	// as locked (TestSlowSharedRecordsRefuseAwayOnesAllow).
	if n := checked.Load(); n > 30 || n == 0 {
		t.Fatalf("%d guesses sent at once: %d passwords were checked against a user that locks after 30 failures", guesses, n)
	}
}

// onReplica is u with the host of the front end whose issuer is issuer.
func onReplica(t *testing.T, u, issuer string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	o, err := url.Parse(issuer)
	if err != nil {
		t.Fatal(err)
	}
	p.Host = o.Host
	return p.String()
}

// TestSlowedAddressAtAnotherFrontEnd: an address that went over its failed authentications
// at front end A is answered 429 for every login form it posts, before the password is
// checked (deployments/README.md, "Who can be held back"), at every front end: behind a load
// balancer its next post lands on front end B, which never saw it fail.
func TestSlowedAddressAtAnotherFrontEnd(t *testing.T) {
	e := newSignInEnvLogged(t, nil, func(c *config.Config) {
		c.OAuth.RateLimits.PerAddress, c.OAuth.RateLimits.PerAddressBurst = 10_000, 10_000
	})
	other := e.replica(t, e.cfg.OAuth.Clients)
	b := browser(t)
	loginB := get(t, b, onReplica(t, e.authURL("trusted", "sb"), other))
	loginA := get(t, b, e.authURL("trusted", "sa"))
	// Guessing client secrets at A until A slows the address.
	guessUntilSlowed(t, e.base, "gateway", "")
	// The same address, at once (no time passes on the clock), posts a login form at B.
	if p := submit(t, b, loginB, url.Values{"username": {userID}, "password": {userPass}}); p.status != http.StatusTooManyRequests {
		t.Errorf("front end B checked the password of an address A slows: %d %.120q", p.status, p.location)
	}
	if p := submit(t, b, loginA, url.Values{"username": {userID}, "password": {userPass}}); p.status != http.StatusTooManyRequests {
		t.Errorf("front end A itself: %d", p.status)
	}
}
