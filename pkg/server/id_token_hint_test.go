package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestIDTokenHintOfAnotherUserGetsNoCode: a relying party asks, with id_token_hint, for the user
// it expects (2020000001), from a browser where another user (2020000042) signed in through the
// campus sign-on. OpenID Connect Core 3.1.2.1: unless the hinted user is signed in, or signs in
// during the request, the answer is an error. The request goes to the campus sign-on for a new
// sign-in (renew), not its single sign-on, which would answer 2020000042 at once; the other
// user signing in there again gets login_required, not a code. The same when this server has no
// session and the campus sign-on's single sign-on answers for the other user.
func TestIDTokenHintOfAnotherUserGetsNoCode(t *testing.T) {
	e := newSignInEnv(t)
	tokA := e.userTokens(t, "trusted")
	hint := tokA["id_token"].(string) // of 2020000001, signed in elsewhere

	b := browser(t)
	tokB := e.casSignIn(t, b, "s0") // 2020000042
	casForm := get(t, b, e.authURL("trusted", "s1", "kc_idp_hint", "cas", "id_token_hint", hint))
	if !strings.HasPrefix(casForm.url.String(), e.cas.URL()+"/login") || casForm.url.Query().Get("renew") != "true" {
		t.Fatalf("a hint of another user than the one signed in: at %s, want the campus sign-on's login with renew=true", casForm.url)
	}
	q := callback(t, submit(t, b, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}}))
	if q.Get("code") != "" || q.Get("error") != "login_required" || q.Get("state") != "s1" {
		t.Fatalf("the other user signed in again: %v, want error=login_required and no code", q)
	}

	// This server's session ends (the application's back end signs the user out); the campus
	// sign-on's own session stays, and answers for 2020000042 without a password.
	if st, m := e.postForm(t, "/logout", "trusted", url.Values{"refresh_token": {tokB["refresh_token"].(string)}}); st != http.StatusNoContent {
		t.Fatalf("logout: %d %v", st, m)
	}
	logins := e.cas.Logins()
	q = callback(t, get(t, b, e.authURL("trusted", "s2", "kc_idp_hint", "cas", "id_token_hint", hint)))
	if e.cas.Logins() != logins {
		t.Fatal("the campus sign-on asked for a password: its single sign-on was to answer")
	}
	if q.Get("code") != "" || q.Get("error") != "login_required" {
		t.Fatalf("the campus sign-on's single sign-on answered for another user than the hint's: %v, want error=login_required and no code", q)
	}
}

// TestAccessTokenAsIDTokenHintRefusedWhenNotSignedIn: an access token as id_token_hint is
// invalid_request back to the client whether or not the browser is signed in (deployments/
// README.md, logout table), not login_required or a sign-in that ignores it.
func TestAccessTokenAsIDTokenHintRefusedWhenNotSignedIn(t *testing.T) {
	e := newSignInEnv(t)
	tok := e.userTokens(t, "trusted")
	for _, prompt := range []string{"none", ""} {
		args := []string{"id_token_hint", tok["access_token"].(string)}
		if prompt != "" {
			args = append(args, "prompt", prompt)
		}
		q := callback(t, get(t, browser(t), e.authURL("trusted", "h", args...)))
		if q.Get("error") != "invalid_request" || q.Get("state") != "h" {
			t.Errorf("an access token as id_token_hint (prompt %q, not signed in): %v, want error=invalid_request", prompt, q)
		}
	}
}
