package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/keys"
)

// renewedPastTwoRotations signs a browser in to the portal and the library, keeps the session
// alive in the library for 56 hours (a refresh every 2 hours, within its idle limit of 3, and a
// new sign-in in the same browser, prompt=login, at hours 20 and 40, which renews the session
// in place) while the keys
// rotate daily, the least allowed: the portal's ID token of the session's start is signed by a
// key no longer held. It returns the browser, the portal's and the library's token answers, and
// a front end started now (or any once it read the keys again).
func renewedPastTwoRotations(t *testing.T) (e *signInEnv, b *http.Client, portal, library map[string]any, other string) {
	t.Helper()
	e = newSignInEnvWith(t, nil, func(c *config.Config) {
		c.OAuth.SessionTTL = config.Duration(24 * time.Hour)
		c.OAuth.KeyRotation = config.Duration(24 * time.Hour) // the least allowed
		c.OAuth.RefreshTokenTTL = config.Duration(3 * time.Hour)
	})
	b = browser(t)
	portal, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	library, errc = e.exchange(t, "library", e.signInCode(t, b, "library"))
	if errc != "" {
		t.Fatal(errc)
	}
	ctx := context.Background()
	st := adminStore(t, e)
	// Another front end's ticker: it rotates the keys when they are due.
	rotate := func() {
		for _, alg := range []string{"ES256", "RS256"} {
			ks, err := keys.Load(ctx, st, alg, e.clock.Now)
			if err != nil {
				t.Fatal(err)
			}
			if err := ks.Refresh(ctx, st, 24*time.Hour, e.clock.Now); err != nil {
				t.Fatal(err)
			}
		}
	}
	for h := 2; h <= 56; h += 2 {
		e.clock.Advance(2 * time.Hour)
		if h == 20 || h == 40 {
			if library, errc = e.exchange(t, "library", e.signInCode(t, b, "library", "prompt", "login")); errc != "" {
				t.Fatal(errc)
			}
		} else if library, errc = e.refresh(t, "library", library["refresh_token"].(string)); errc != "" {
			t.Fatalf("hour %d: the session should be alive: %s", h, errc)
		}
		rotate()
	}
	return e, b, portal, library, e.replica(t, e.cfg.OAuth.Clients)
}

// TestIDTokenHintOfARenewedSessionAfterTwoRotations: a session renewed in place (prompt=login in
// the same browser) keeps its sid and moves its end on, so it can outlive two key rotations; the
// portal's ID token of the session's start is then signed by a key no longer held.
//
// At the authorization endpoint the portal checks silently whether its user is still signed in
// (prompt=none with that id_token_hint, as oidc-client-ts' signinSilent does): the user is, in
// this browser, as the hint's user, and OpenID Connect Core §3.1.2.1 wants a positive answer
// (Keycloak ignores the hint at authorize): the hint is read as no hint. Then the portal's
// RP-initiated logout with it is not refused either: it goes on as a logout without a hint,
// which the user confirms, and the live session ends.
func TestIDTokenHintOfARenewedSessionAfterTwoRotations(t *testing.T) {
	e, b, portal, library, other := renewedPastTwoRotations(t)
	// Without the hint the signed-in user gets a code (the session is alive).
	u := other + e.authURL("portal", "pn", "prompt", "none")[len(e.issuer):]
	if q := callback(t, get(t, b, u)); q.Get("code") == "" {
		t.Fatalf("prompt=none without a hint: %v, want a code", q)
	}
	// With the portal's own (old) ID token of this very session and user.
	u = other + e.authURL("portal", "pn", "prompt", "none", "id_token_hint", portal["id_token"].(string))[len(e.issuer):]
	if q := callback(t, get(t, b, u)); q.Get("code") == "" {
		t.Errorf("prompt=none with the portal's ID token of the live (renewed) session, signed by a key retired since: %v; want a code (as without the hint)", q)
	}
	// The user presses "sign out" in the portal: RP-initiated logout with its ID token.
	p := get(t, b, other+"/protocol/openid-connect/logout?"+url.Values{"id_token_hint": {portal["id_token"].(string)},
		"post_logout_redirect_uri": {rpRedirect}}.Encode())
	if !strings.Contains(p.body, `name="confirm"`) {
		t.Fatalf("logout with the portal's ID token of a live (renewed) session, signed by a key retired since: %d, want the confirmation", p.status)
	}
	if p = submit(t, b, p, url.Values{}); p.status != http.StatusOK || !strings.Contains(p.body, "You have signed out") {
		t.Fatalf("the logout confirmed: %d %s", p.status, p.url)
	}
	if _, errc := e.refresh(t, "library", library["refresh_token"].(string)); errc != "invalid_grant" {
		t.Errorf("the session lives on after the portal's logout: the library still refreshes (%q)", errc)
	}
}

// TestForeignIDTokenAsHintIsInvalidRequest: deployments/README.md says a hint that is not an ID
// token of this server is invalid_request back to the client, signed in or not; only one signed
// by a key of this server retired since is read as no hint. An ID token of another issuer
// (another IdP, the staging realm), signed by its own key, is not an ID token of this server.
func TestForeignIDTokenAsHintIsInvalidRequest(t *testing.T) {
	e := newSignInEnv(t)
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": "https://idp.other.example/realms/campus", "sub": "2020000042", "aud": "trusted", "azp": "trusted",
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	})
	tok.Header["kid"] = "other-idp-key"
	hint, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	q := callback(t, get(t, browser(t), e.authURL("trusted", "h", "prompt", "none", "id_token_hint", hint)))
	if q.Get("error") != "invalid_request" {
		t.Errorf("not signed in, another issuer's ID token as id_token_hint: %v, want error=invalid_request", q)
	}
	b := browser(t)
	e.signedIn(t, b)
	q = callback(t, get(t, b, e.authURL("trusted", "h2", "prompt", "none", "id_token_hint", hint)))
	if q.Get("error") != "invalid_request" {
		t.Errorf("signed in, another issuer's ID token (sub 2020000042) as id_token_hint: %v, want error=invalid_request", q)
	}
}
