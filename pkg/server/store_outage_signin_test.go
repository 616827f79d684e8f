package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/event"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// storeCutEnv is a sign-in front end whose MongoDB is reached through a proxy (with a
// 2-second wait for a server), and which can cut the store at the moment a chosen read starts.
type storeCutEnv struct {
	*signInEnv
	proxy *embeddedtest.Proxy

	mu    sync.Mutex
	cutAt string // "find <collection>": the proxy goes down when that command starts
	cut   bool
}

func newStoreCutEnv(t *testing.T) *storeCutEnv {
	t.Helper()
	r := &storeCutEnv{}
	mon := &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		cmd := commandName(ev)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.cutAt != "" && cmd == r.cutAt {
			r.cutAt, r.cut = "", true
			r.proxy.SetDown(true) // before the command reaches the store
		}
	}}
	r.signInEnv = newSignInEnvMonitored(t, nil, mon, func(c *config.Config) {
		u, err := url.Parse(c.MongoDB.URI)
		if err != nil {
			t.Fatal(err)
		}
		r.proxy = embeddedtest.NewProxy(t, u.Host)
		u.Host = r.proxy.Addr()
		q := u.Query()
		q.Set("serverSelectionTimeoutMS", "2000")
		u.RawQuery = q.Encode()
		if u.Path == "" {
			u.Path = "/"
		}
		c.MongoDB.URI = u.String()
	})
	return r
}

// commandName names a store command as the cut and the hooks of these tests match it:
// "find sessions", "update token_families".
func commandName(ev *event.CommandStartedEvent) string {
	cmd := ev.CommandName
	if v, err := ev.Command.LookupErr(cmd); err == nil {
		if s, ok := v.StringValueOK(); ok {
			cmd += " " + s
		}
	}
	return cmd
}

// cutWhen takes the store down as soon as the command cmd ("find <collection>") starts.
func (r *storeCutEnv) cutWhen(cmd string) {
	r.mu.Lock()
	r.cutAt, r.cut = cmd, false
	r.mu.Unlock()
}

// tokenDuringCut posts form to the token endpoint as portal, with the store cut as soon as the
// command cmd starts, and brings the store back once answered; it fails the test if cmd never
// started.
func (r *storeCutEnv) tokenDuringCut(t *testing.T, cmd string, form url.Values) (int, map[string]any) {
	t.Helper()
	r.cutWhen(cmd)
	st, m := r.postForm(t, "/token", "portal", form)
	if !r.wasCut() {
		t.Fatalf("no %s during the request (answer %d %v)", cmd, st, m)
	}
	r.proxy.SetDown(false)
	return st, m
}

func (r *storeCutEnv) wasCut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cut
}

// TestCodeExchangeWhileTheStoreFailsIsNoInvalidGrant: the store fails in the middle of a code
// exchange (after the code was read, at the check of the user's revocations, as during a
// primary's step-down). The answer is invalid_grant "the user revoked this application's
// access": the client is told, finally (RFC 6749 §5.2), that its grant is dead, and shows the
// user a failed sign-in, while nothing was revoked: the very same code is exchanged once the
// store answers again. A store that cannot answer must be a server_error (or a 503
// temporarily_unavailable), which the client may retry, not a false revocation.
func TestCodeExchangeWhileTheStoreFailsIsNoInvalidGrant(t *testing.T) {
	e := newStoreCutEnv(t)
	b := browser(t)
	code := e.signInCode(t, b, "portal")

	st, m := e.tokenDuringCut(t, "find revoked_grants", url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {rpRedirect}})

	// Nothing was revoked and the code was not used: it is exchanged now.
	tok, errc := e.exchange(t, "portal", code)
	if errc != "" {
		t.Fatalf("the same code once the store is back: %s", errc)
	}
	_ = tok
	if st != http.StatusInternalServerError || m["error"] != "server_error" {
		t.Fatalf("the store failing mid-exchange was answered %d %v, want 500 server_error, which the client may retry: the same code was exchanged once the store answered", st, m)
	}
}

// TestRefreshWhileTheStoreFailsIsNoInvalidGrant: the store fails during a refresh, after the
// refresh token was read, at the check of its family. The answer is invalid_grant "the refresh
// token was revoked": every OAuth client drops its refresh token on invalid_grant and signs the
// user out, while nothing was revoked: the same refresh token refreshes once the store answers.
func TestRefreshWhileTheStoreFailsIsNoInvalidGrant(t *testing.T) {
	e := newStoreCutEnv(t)
	b := browser(t)
	code := e.signInCode(t, b, "portal")
	tok, errc := e.exchange(t, "portal", code)
	if errc != "" {
		t.Fatal(errc)
	}
	rt, _ := tok["refresh_token"].(string)
	if rt == "" {
		t.Fatalf("no refresh token: %v", tok)
	}

	st, m := e.tokenDuringCut(t, "find token_families", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})

	if _, errc := e.refresh(t, "portal", rt); errc != "" {
		t.Fatalf("the same refresh token once the store is back: %s", errc)
	}
	if st != http.StatusInternalServerError || m["error"] != "server_error" {
		t.Fatalf("the store failing mid-refresh was answered %d %v, want 500 server_error (invalid_grant makes the client drop the refresh token and sign the user out): the same token refreshed once the store answered", st, m)
	}
}

// TestCodeExchangeRetriedAfterTheStoreFailedMidIssue: the store fails while a code exchange
// records the new tokens (their family), after every check passed. The client is told
// server_error and retries with the same code, which must be an exchange: a code used up
// before its tokens were recorded would make the retry a replay, answered invalid_grant, and
// the user's sign-in would fail for a moment's outage.
func TestCodeExchangeRetriedAfterTheStoreFailedMidIssue(t *testing.T) {
	e := newStoreCutEnv(t)
	b := browser(t)
	code := e.signInCode(t, b, "portal")

	st, m := e.tokenDuringCut(t, "update token_families", url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {rpRedirect}})
	if st != http.StatusInternalServerError || m["error"] != "server_error" {
		t.Fatalf("the store failing while the tokens were recorded was answered %d %v, want 500 server_error", st, m)
	}

	tok, errc := e.exchange(t, "portal", code)
	if errc != "" {
		t.Fatalf("the client's retry with the same code, once the store is back: %s (the code was used up before its tokens were recorded)", errc)
	}
	rt, _ := tok["refresh_token"].(string)
	if _, errc := e.refresh(t, "portal", rt); errc != "" {
		t.Fatalf("the refresh token of the retried exchange: %s", errc)
	}
	if _, errc := e.exchange(t, "portal", code); errc != "invalid_grant" {
		t.Fatalf("the code exchanged a second time: %q, want invalid_grant", errc)
	}
}

// TestRefreshRetriedAfterTheStoreFailedMidIssue: the store fails while a refresh records the
// new refresh token (its family), after every check passed. The client retries with the same
// refresh token, which must refresh: used up before its successor was recorded, the retry would
// be taken for a reuse, its family revoked and the user signed out.
func TestRefreshRetriedAfterTheStoreFailedMidIssue(t *testing.T) {
	e := newStoreCutEnv(t)
	tok := e.userTokens(t, "portal")
	rt, _ := tok["refresh_token"].(string)

	st, m := e.tokenDuringCut(t, "update token_families", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
	if st != http.StatusInternalServerError || m["error"] != "server_error" {
		t.Fatalf("the store failing while the successor was recorded was answered %d %v, want 500 server_error", st, m)
	}

	next, errc := e.refresh(t, "portal", rt)
	if errc != "" {
		t.Fatalf("the client's retry with the same refresh token, once the store is back: %s (it was used up before its successor was recorded)", errc)
	}
	if _, errc := e.refresh(t, "portal", next["refresh_token"].(string)); errc != "" {
		t.Fatalf("the successor of the retried refresh: %s", errc)
	}
}

// TestRefreshTokenUsedWhoseFlagWasNotWrittenIsUsed: a refresh succeeds, but the store fails at
// the write that flags the old token rotated, after its use was recorded. The token endpoint
// takes the old token for used; introspection and the client's server-side logout must too:
// not active, and a logout with it invalid_grant, ending nothing.
func TestRefreshTokenUsedWhoseFlagWasNotWrittenIsUsed(t *testing.T) {
	e := newStoreCutEnv(t)
	tok := e.userTokens(t, "portal")
	old := tok["refresh_token"].(string)

	st, m := e.tokenDuringCut(t, "update refresh_tokens", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {old}})
	if st != http.StatusOK {
		t.Fatalf("the refresh whose flag write failed: %d %v, want 200 (its use was recorded)", st, m)
	}
	_, in := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {old}})
	lst, lm := e.post(t, "/logout", "", url.Values{"client_id": {"portal"}, "client_secret": {rpSecret}, "refresh_token": {old}})
	if in["active"] != false || lst != http.StatusBadRequest {
		t.Fatalf("a used refresh token: introspection %v (want active false); server-side logout with it %d %v (want 400 invalid_grant, nothing ended)", in, lst, lm)
	}
	if _, errc := e.refresh(t, "portal", m["refresh_token"].(string)); errc != "" {
		t.Fatalf("the session after a logout with a used token: the new refresh token %s", errc)
	}
}

// TestCodeUsedWhoseFlagWasNotWrittenIsUsed: as above, for a code: the exchange succeeds but the
// store fails at the write that flags the code used. Replayed once it expired (a code leaked
// from a log or a referrer), it must still be a replay, which revokes the tokens it issued
// (RFC 6749 §4.1.2), not a code that expired.
func TestCodeUsedWhoseFlagWasNotWrittenIsUsed(t *testing.T) {
	e := newStoreCutEnv(t)
	b := browser(t)
	code := e.signInCode(t, b, "portal")

	st, m := e.tokenDuringCut(t, "update auth_codes", url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {rpRedirect}})
	if st != http.StatusOK {
		t.Fatalf("the exchange whose flag write failed: %d %v, want 200 (its use was recorded)", st, m)
	}
	e.clock.Advance(61 * time.Second) // past the code's life
	_, again := e.exchange(t, "portal", code)
	if _, errc := e.refresh(t, "portal", m["refresh_token"].(string)); errc != "invalid_grant" {
		t.Fatalf("a used code replayed (answer %q): the refresh token it issued still refreshes (%q), want invalid_grant", again, errc)
	}
}

// TestPromptNoneWhileTheStoreIsDownIsNoLoginRequired: a relying party checks the user's
// sign-in silently (prompt=none, OpenID Connect Core §3.1.2.1) while MongoDB is down. The
// user is signed in, but the answer is login_required ("the user is not signed in"): the
// relying party ends its own session of the user (silent renew, session checks), for an
// outage of this service's store. It should be temporarily_unavailable or server_error.
func TestPromptNoneWhileTheStoreIsDownIsNoLoginRequired(t *testing.T) {
	e := newStoreCutEnv(t)
	b := browser(t)
	e.signInCode(t, b, "trusted")

	e.proxy.SetDown(true)
	down := get(t, b, e.authURL("trusted", "silent", "prompt", "none"))
	e.proxy.SetDown(false)
	q := callback(t, down)

	back := callback(t, get(t, b, e.authURL("trusted", "silent2", "prompt", "none")))
	if back.Get("code") == "" {
		t.Fatalf("prompt=none once the store is back: %v (the user is signed in)", back)
	}
	if q.Get("error") != "temporarily_unavailable" {
		t.Fatalf("a signed-in user's prompt=none with the store down was answered %v, want temporarily_unavailable (login_required makes the relying party sign the user out; the session was there all along)", q)
	}
}

// TestConsentWhileTheStoreIsDownSaysTryAgain: the user presses "accept" on the consent
// page while MongoDB is down. The answer is 400 "Sign-in expired: your sign-in session ended.
// Go back to the application and start again", though the session lives: the same form is
// taken once the store answers. A store that cannot be reached is, on every other page,
// 503 "Try again in a moment" (errors.go, browserPage).
func TestConsentWhileTheStoreIsDownSaysTryAgain(t *testing.T) {
	e := newStoreCutEnv(t)
	b := browser(t)
	login := get(t, b, e.authURL("portal", "st"))
	consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
	if !strings.Contains(consent.body, `name="accept"`) {
		t.Fatalf("no consent page: %d %s", consent.status, consent.body)
	}

	e.proxy.SetDown(true)
	down := submit(t, b, consent, url.Values{"accept": {"yes"}})
	e.proxy.SetDown(false)

	q := callback(t, submit(t, b, consent, url.Values{"accept": {"yes"}}))
	if q.Get("code") == "" {
		t.Fatalf("the same consent once the store is back: %v", q)
	}
	if down.status != http.StatusServiceUnavailable || strings.Contains(down.body, "session ended") {
		t.Fatalf("consent with the store down: %d, says the session ended (%v), want 503 \"try again\"; the same form was taken once the store answered",
			down.status, strings.Contains(down.body, "session ended"))
	}
}

// TestAccountFormWhileTheStoreIsDownSaysTryAgain: the user, signed in, presses "remove access"
// on the account page while MongoDB is down: the 503 page "try again", not "your sign-in
// session ended" (the session lives: the same form is taken once the store answers).
func TestAccountFormWhileTheStoreIsDownSaysTryAgain(t *testing.T) {
	e := newStoreCutEnv(t)
	b := browser(t)
	if _, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal")); errc != "" {
		t.Fatal(errc)
	}
	page := e.account(t, b)
	form := url.Values{"client_id": {"portal"}, "csrf": {page.csrf}}

	e.proxy.SetDown(true)
	down := e.accountPost(t, b, "/grants/revoke", form)
	e.proxy.SetDown(false)

	again := e.accountPost(t, b, "/grants/revoke", form)
	if again.status != http.StatusOK || again.url.Path != "/auth/realms/campus/account" {
		t.Fatalf("the same form once the store is back: %d %s", again.status, again.url)
	}
	if down.status != http.StatusServiceUnavailable || strings.Contains(down.body, "session ended") {
		t.Fatalf("account form with the store down: %d, says the session ended (%v), want 503 \"try again\"",
			down.status, strings.Contains(down.body, "session ended"))
	}
	op := "/auth/realms/{realm}/account/grants/revoke"
	if declared := declaredStatuses(t, e.base, "POST", op); !declared["503"] {
		t.Errorf("POST %s answers 503 while the store is down; the served description declares only %v", op, sortedStatuses(declared))
	}
}

// TestTokenServerErrorDescribed: the token endpoint's answer while the store fails, 500
// server_error, is one the served description lists for both token paths.
func TestTokenServerErrorDescribed(t *testing.T) {
	e := newStoreCutEnv(t)
	tok := e.userTokens(t, "portal")
	rt, _ := tok["refresh_token"].(string)
	e.cutWhen("find token_families")
	st, m := e.postForm(t, "/token", "portal", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
	e.proxy.SetDown(false)
	if st != http.StatusInternalServerError || m["error"] != "server_error" {
		t.Fatalf("refresh with the store failing: %d %v, want 500 server_error", st, m)
	}
	for _, p := range []string{"/auth/realms/{realm}/protocol/openid-connect/token", "/v1/token"} {
		if !declaredStatuses(t, e.base, "POST", p)["500"] {
			t.Errorf("POST %s answers 500 server_error, which the served description does not list", p)
		}
	}
}
