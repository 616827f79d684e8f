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
	e := newSignInEnvWith(t, nil, func(c *config.Config) { c.OAuth.RefreshTokenTTL = config.Duration(60 * time.Second) })
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
	answer := submit(t, b, consent, url.Values{"accept": {"yes"}})
	if answer.status != http.StatusFound || !strings.HasPrefix(answer.location, rpRedirect) {
		body := answer.body
		if i := strings.Index(body, "<main"); i >= 0 {
			body = body[i:min(len(body), i+400)]
		}
		t.Fatalf("consent given 2 minutes after signing in (sign-in request valid 10 minutes) was refused: %d %s", answer.status, body)
	}
}
