package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/event"
)

// storeHook runs a function once, when the store command it is armed for ("find <collection>")
// starts: the command waits until it returns, as a request of another user landing at that
// moment would.
type storeHook struct {
	mu  sync.Mutex
	cmd string
	fn  func()
	ran bool
}

func (h *storeHook) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		cmd := commandName(ev)
		h.mu.Lock()
		var fn func()
		if h.cmd != "" && cmd == h.cmd {
			fn, h.cmd, h.fn, h.ran = h.fn, "", nil, true
		}
		h.mu.Unlock()
		if fn != nil {
			fn()
		}
	}}
}

// hookedPortal starts a sign-in front end whose store commands h can hook, and signs browser b
// in to the account page and to portal, whose tokens it returns.
func hookedPortal(t *testing.T) (*signInEnv, *storeHook, *http.Client, map[string]any) {
	t.Helper()
	h := &storeHook{}
	e := newSignInEnvMonitored(t, nil, h.monitor())
	b := browser(t)
	e.signedIn(t, b)
	tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	return e, h, b, tok
}

func (h *storeHook) arm(cmd string, fn func()) {
	h.mu.Lock()
	h.cmd, h.fn, h.ran = cmd, fn, false
	h.mu.Unlock()
}

func (h *storeHook) fired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ran
}

// revokeDuring arms h to revoke client's access on browser b's account page when the command
// cmd starts (after the grant's revocations were read), and the clock to move on 20 ms after it,
// as the request goes on. It returns the revocation's status, once h fired.
func (e *signInEnv) revokeDuring(t *testing.T, h *storeHook, b *http.Client, client, cmd string) func() int {
	t.Helper()
	csrf := e.account(t, b).csrf
	status := 0
	h.arm(cmd, func() {
		resp, err := b.PostForm(e.issuer+"/account/grants/revoke", url.Values{"client_id": {client}, "csrf": {csrf}})
		if err == nil {
			status = resp.StatusCode
			_ = resp.Body.Close()
		}
		e.clock.Advance(20 * time.Millisecond)
	})
	return func() int {
		if !h.fired() {
			t.Fatalf("no %s during the request", cmd)
		}
		return status
	}
}

// revocationHolds checks what a request that the revocation of client's access raced gave:
// refused, or tokens that are dead (the access token refused, the refresh token not
// refreshing); and that the account page does not list the application again.
func (e *signInEnv) revocationHolds(t *testing.T, b *http.Client, client string, tok map[string]any, errc string) {
	t.Helper()
	if errc == "" {
		e.clock.Advance(time.Second)
		st := userinfo(t, e.issuer, tok["access_token"].(string))
		_, again := e.refresh(t, client, tok["refresh_token"].(string))
		if st != http.StatusUnauthorized || again != "invalid_grant" {
			t.Fatalf("the user revoked %s's access during the request; its tokens still work: userinfo %d (want 401), refresh %q (want invalid_grant)", client, st, again)
		}
	} else if errc != "invalid_grant" {
		t.Fatalf("the request the revocation raced: %s, want invalid_grant or dead tokens", errc)
	}
	if g := e.account(t, b).grants; slices.Contains(g, client) {
		t.Fatalf("the account page lists %s again after the user revoked it: %v", client, g)
	}
}

// TestRefreshRacingARevocationIssuesNothingThatOutlivesIt: the user removes the application's
// access on the account page while its refresh is under way, after the refresh read the
// revocations. A revocation covers what was issued at or before it: tokens stamped with a time
// after it would outlive it, a refresh token that refreshes for ever.
func TestRefreshRacingARevocationIssuesNothingThatOutlivesIt(t *testing.T) {
	e, h, b, tok := hookedPortal(t)
	revoked := e.revokeDuring(t, h, b, "portal", "find sso_sessions") // stillGranted reads the session after the revocations
	next, errc := e.refresh(t, "portal", tok["refresh_token"].(string))
	if st := revoked(); st != http.StatusOK {
		t.Fatalf("revocation: %d", st)
	}
	e.revocationHolds(t, b, "portal", next, errc)
}

// TestRevocationInTheRefreshsMillisecond: as above, on a clock that is not on a whole
// millisecond, as a real one almost never is. The store keeps times to the millisecond: a
// revocation in the very millisecond of the refresh's time covers it all the same.
func TestRevocationInTheRefreshsMillisecond(t *testing.T) {
	e, h, b, tok := hookedPortal(t)
	e.clock.Advance(time.Second + 400*time.Microsecond)
	revoked := e.revokeDuring(t, h, b, "portal", "insert refresh_tokens") // the successor's record, before the second read
	next, errc := e.refresh(t, "portal", tok["refresh_token"].(string))
	if st := revoked(); st != http.StatusOK {
		t.Fatalf("revocation: %d", st)
	}
	if errc != "invalid_grant" {
		t.Fatalf("a refresh that read the revocations again after the revocation, in the same millisecond as its time: %q, want invalid_grant", errc)
	}
	e.revocationHolds(t, b, "portal", next, errc)
}

// TestCodeExchangeRacingARevocationIssuesNothingThatOutlivesIt: as above, for a code exchange.
func TestCodeExchangeRacingARevocationIssuesNothingThatOutlivesIt(t *testing.T) {
	h := &storeHook{}
	e := newSignInEnvMonitored(t, nil, h.monitor())
	b := browser(t)
	e.signedIn(t, b)
	code := e.signInCode(t, b, "portal")
	revoked := e.revokeDuring(t, h, b, "portal", "find sso_sessions")
	tok, errc := e.exchange(t, "portal", code)
	if st := revoked(); st != http.StatusOK {
		t.Fatalf("revocation: %d", st)
	}
	e.revocationHolds(t, b, "portal", tok, errc)
}

// TestRevocationWhileAGrantsUseIsRecordedTakesTheApplicationOff: the user revokes the
// application's access while a refresh records the grant's use for the account page, its last
// step (the revocation deletes the record, the use writes it again). The refresh's tokens are
// dead, and the page does not list the application.
func TestRevocationWhileAGrantsUseIsRecordedTakesTheApplicationOff(t *testing.T) {
	e, h, b, tok := hookedPortal(t)
	revoked := e.revokeDuring(t, h, b, "portal", "update consents")
	next, errc := e.refresh(t, "portal", tok["refresh_token"].(string))
	if st := revoked(); st != http.StatusOK {
		t.Fatalf("revocation: %d", st)
	}
	e.revocationHolds(t, b, "portal", next, errc)
}

// TestStaleRefreshKeepsAConsentGivenAfterTheRevocation: a refresh is under way (it read the
// revocations) when the user removes the application's access on the account page, then signs
// in to it again and consents anew. The stale refresh is refused, and changes nothing of the
// new consent: the account page lists the application, and the next sign-in asks nothing.
func TestStaleRefreshKeepsAConsentGivenAfterTheRevocation(t *testing.T) {
	e, h, b, tok := hookedPortal(t)
	reached, resume := make(chan struct{}), make(chan struct{})
	h.arm("insert refresh_tokens", func() { // the stale refresh records its successor
		close(reached)
		<-resume
	})
	type answer struct {
		st  int
		m   map[string]any
		err error
	}
	done := make(chan answer, 1)
	go func() { // the stale refresh, answered once resumed
		var a answer
		resp, err := http.PostForm(e.issuer+"/protocol/openid-connect/token", url.Values{"grant_type": {"refresh_token"},
			"refresh_token": {tok["refresh_token"].(string)}, "client_id": {"portal"}, "client_secret": {rpSecret}})
		if a.err = err; err == nil {
			a.st, a.err = resp.StatusCode, json.NewDecoder(resp.Body).Decode(&a.m)
			_ = resp.Body.Close()
		}
		done <- a
	}()
	select {
	case <-reached:
	case a := <-done:
		t.Fatalf("the refresh ended before recording its successor: %d %v %v", a.st, a.m, a.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the refresh never recorded its successor")
	}
	e.revokeOnAccountPage(t, b, "portal")
	e.clock.Advance(2 * time.Second)
	fresh, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	close(resume)
	if errc != "" {
		t.Fatalf("the sign-in after the revocation: %s", errc)
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stale refresh never answered")
	}
	if a.err != nil || a.st != http.StatusBadRequest || a.m["error"] != "invalid_grant" {
		t.Fatalf("the refresh the revocation raced: %d %v %v, want 400 invalid_grant", a.st, a.m, a.err)
	}
	if st := userinfo(t, e.issuer, fresh["access_token"].(string)); st != http.StatusOK {
		t.Fatalf("the access token granted after the revocation: userinfo %d", st)
	}
	g := e.account(t, b).grants
	asked := strings.Contains(get(t, b, e.authURL("portal", "again")).body, `name="accept"`)
	if !slices.Contains(g, "portal") || asked {
		t.Fatalf("the consent given after the revocation: the account page lists %v (want portal), the next sign-in asks for consent again: %v", g, asked)
	}
}
