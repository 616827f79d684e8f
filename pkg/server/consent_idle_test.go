package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/campus-it/ucs/pkg/config"
)

// TestConsentReadLongerThanTheIdleLimit: with refresh_token_ttl at its lower bound (60s), a
// user who signs in and reads the consent page for two minutes, within the sign-in request's
// 10 minutes, gets the consent taken: the new session does not end idle before its consent
// may come (Keycloak creates the user session only once the flow, consent included, is over).
func TestConsentReadLongerThanTheIdleLimit(t *testing.T) {
	e := newSignInEnvWith(t, nil, shortIdle)
	r := newRP(t, e)
	b := browser(t)
	state, nonce, verifier := random(), random(), oauth2.GenerateVerifier()
	auth := r.conf.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("kc_idp_hint", "local"))
	login := get(t, b, auth)
	consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
	if consent.status != 200 || !strings.Contains(consent.body, `name="accept"`) {
		t.Fatalf("consent page: %d %s", consent.status, consent.body)
	}
	e.clock.Advance(2 * time.Minute) // the user reads what the application asks for
	requireBackAtClient(t, submit(t, b, consent, url.Values{"accept": {"yes"}}),
		"consent given 2 minutes after signing in (sign-in request valid 10 minutes)")
}

// requireBackAtClient fails unless answer sends the browser back to the client, naming what
// was answered and the page's explanation otherwise.
func requireBackAtClient(t *testing.T, answer page, what string) {
	t.Helper()
	if answer.status != http.StatusSeeOther || !strings.HasPrefix(answer.location, rpRedirect) { // a form answered: 303
		body := answer.body
		if i := strings.Index(body, "<main"); i >= 0 {
			body = body[i:min(len(body), i+400)]
		}
		t.Fatalf("%s was refused: %d %s", what, answer.status, body)
	}
}

// shortIdle sets refresh_token_ttl (the session's idle limit) to its documented lower bound.
func shortIdle(c *config.Config) { c.OAuth.RefreshTokenTTL = config.Duration(60 * time.Second) }

// TestConsentInSignedInSessionOutlivesIdle: a user signed in 30 s ago is asked by an
// application for consent and reads the consent page for two minutes, within the sign-in
// request's 10 minutes, with refresh_token_ttl at its lower bound (60s): the consent is taken,
// as for a new session, since the session does not end idle while the consent may come.
func TestConsentInSignedInSessionOutlivesIdle(t *testing.T) {
	e := newSignInEnvWith(t, nil, shortIdle)
	b := browser(t)
	e.signedIn(t, b)
	e.clock.Advance(30 * time.Second) // the user signed in to the account page 30 s ago
	consent := get(t, b, e.authURL("portal", "st"))
	if consent.status != 200 || !strings.Contains(consent.body, `name="accept"`) {
		t.Fatalf("consent page for a signed-in browser: %d %s", consent.status, consent.body)
	}
	e.clock.Advance(2 * time.Minute) // the user reads what the application asks for
	requireBackAtClient(t, submit(t, b, consent, url.Values{"accept": {"yes"}}),
		"consent given 2 minutes after the authorization request arrived (request valid 10 minutes), in a signed-in browser")
}

// TestCodeOfAnsweredAuthorizationExchanges: answering an authorization (the code, after the
// consent) is a use of the session. A user signs in, reads the consent page for 9 min 50 s (the
// request allows 10) and consents; the application exchanges the code 30 s later, within the
// code's 60 s, and gets its tokens, with refresh_token_ttl at its lower bound (60s).
func TestCodeOfAnsweredAuthorizationExchanges(t *testing.T) {
	e := newSignInEnvWith(t, nil, shortIdle)
	b := browser(t)
	login := get(t, b, e.authURL("portal", "st"))
	consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
	if consent.status != 200 || !strings.Contains(consent.body, `name="accept"`) {
		t.Fatalf("consent page: %d %s", consent.status, consent.body)
	}
	e.clock.Advance(9*time.Minute + 50*time.Second)
	code := callback(t, submit(t, b, consent, url.Values{"accept": {"yes"}})).Get("code")
	e.clock.Advance(30 * time.Second)
	if _, errc := e.exchange(t, "portal", code); errc != "" {
		t.Fatalf("a code issued 30 s ago, in answer to the consent just given, was refused: %s (the session ended idle 10 minutes after the sign-in although the authorization it answered is a use)", errc)
	}
}

// TestConsentAnsweredEndsTheHold: with refresh_token_ttl at 60 s, a user consents 5 s into the
// consent page and the application redeems the code; then nothing uses the session. The hold
// that kept the session while the page waited ends with the answer: the access token ends no
// later than the session would end idle, the session ends 60 s after that last use, and
// another application's prompt=none minutes later gets no code. A refusal ends the hold too.
func TestConsentAnsweredEndsTheHold(t *testing.T) {
	for _, accept := range []bool{true, false} {
		e := newSignInEnvWith(t, nil, shortIdle)
		b := browser(t)
		login := get(t, b, e.authURL("portal", "st"))
		consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
		if !strings.Contains(consent.body, `name="accept"`) {
			t.Fatalf("consent page: %d %s", consent.status, consent.body)
		}
		e.clock.Advance(5 * time.Second)
		if accept {
			tok, errc := e.exchange(t, "portal", callback(t, submit(t, b, consent, url.Values{"accept": {"yes"}})).Get("code"))
			if errc != "" {
				t.Fatal(errc)
			}
			if ttl := tok["expires_in"].(float64); ttl > 60 {
				t.Errorf("access token: expires_in %v s, refresh_expires_in %v s: past the session's idle end (60 s)", ttl, tok["refresh_expires_in"])
			}
			e.clock.Advance(5 * time.Minute)
			if st := userinfo(t, e.issuer, tok["access_token"].(string)); st == http.StatusOK {
				t.Error("the access token is accepted 5 minutes after the session's last use (idle limit 60 s)")
			}
		} else {
			if q := callback(t, submit(t, b, consent, url.Values{})); q.Get("error") != "access_denied" {
				t.Fatalf("refusal: %v", q)
			}
			e.clock.Advance(5 * time.Minute)
		}
		if q := callback(t, get(t, b, e.authURL("trusted", "st2", "prompt", "none"))); q.Get("code") != "" || q.Get("error") != "login_required" {
			t.Errorf("accept %v: prompt=none 5 minutes after the session's last use (idle limit 60 s) answered %v, want login_required", accept, q)
		}
	}
}

// TestConsentAnsweredKeepsAnotherPagesHold: with refresh_token_ttl at 60 s, a user signs in to
// one application (consent page A) and, in another tab of the same browser, opens a second
// application (consent page B, held to its request's 10 minutes). Answering A does not end the
// hold B still needs: B answered 3 minutes later, within its request, is taken. Refusing A
// ends its own hold alone too.
func TestConsentAnsweredKeepsAnotherPagesHold(t *testing.T) {
	for _, accept := range []string{"yes", ""} {
		e := newSignInEnvWith(t, nil, shortIdle)
		b := browser(t)
		login := get(t, b, e.authURL("portal", "stA"))
		consentA := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
		if !strings.Contains(consentA.body, `name="accept"`) {
			t.Fatalf("consent page A: %d %s", consentA.status, consentA.body)
		}
		consentB := get(t, b, e.authURL("library", "stB"))
		if !strings.Contains(consentB.body, `name="accept"`) {
			t.Fatalf("consent page B: %d %s", consentB.status, consentB.body)
		}
		e.clock.Advance(5 * time.Second)
		answer := url.Values{}
		if accept != "" {
			answer.Set("accept", accept)
		}
		callback(t, submit(t, b, consentA, answer))
		e.clock.Advance(3 * time.Minute) // the user reads page B, within its request's 10 minutes
		requireBackAtClient(t, submit(t, b, consentB, url.Values{"accept": {"yes"}}),
			"consent B, 3 minutes into its page, after consent A was answered ("+accept+")")
	}
}
