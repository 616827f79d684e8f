package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/cas/castest"
	"github.com/campus-it/ucs/pkg/config"
)

// TestCASFreshLoginKeepsServiceTime: an authorization request with max_age=60 sends the user
// to the campus sign-on with renew=true, where the user types the password now. The campus
// sign-on's clock is 5 minutes behind this service's, so its authenticationDate says 5 minutes
// ago; auth_time is still not older than the request (OpenID Connect Core §3.1.2.1), and a second
// request with the same max_age right away is met by that fresh sign-in.
func TestCASFreshLoginKeepsServiceTime(t *testing.T) {
	var e *signInEnv
	skewed := castest.New(map[string]string{"2020000042": "cas-password"},
		castest.WithClock(func() time.Time { return e.clock.Now().Add(-5 * time.Minute) }))
	t.Cleanup(skewed.Close)
	e = newSignInEnvWith(t, nil, func(c *config.Config) { c.OAuth.IdentityProviders.CAS.URL = skewed.URL() })
	b := browser(t)

	requested := e.clock.Now()
	casForm := get(t, b, e.authURL("trusted", "s1", "kc_idp_hint", "cas", "max_age", "60"))
	if !strings.HasPrefix(casForm.url.String(), skewed.URL()+"/login") || !strings.Contains(casForm.url.RawQuery, "renew=true") {
		t.Fatalf("max_age=60 did not send the user to the campus sign-on with renew: %s", casForm.url)
	}
	q := callback(t, submit(t, b, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}}))
	tok, errc := e.exchange(t, "trusted", q.Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}
	authTime := int64(jwtClaims(t, tok["id_token"].(string))["auth_time"].(float64))
	if authTime < requested.Unix() {
		t.Errorf("password typed at the campus sign-on after an authorization request with max_age=60 (made at %d): "+
			"ID token auth_time %d, %d s before the request, so a relying party checking auth_time+max_age refuses it; "+
			"want auth_time >= %d (the campus sign-on answered isFromNewLogin=true to a renew validation: the "+
			"authentication happened now, whatever its clock says)", requested.Unix(), authTime, requested.Unix()-authTime, requested.Unix())
	}

	// Right away, the same request again: the sign-in made seconds ago meets max_age=60.
	logins := skewed.Logins()
	p := get(t, b, e.authURL("trusted", "s2", "kc_idp_hint", "cas", "max_age", "60"))
	if !(p.status == http.StatusFound && strings.HasPrefix(p.location, rpRedirect)) {
		t.Errorf("a second request with max_age=60 right after the user typed the password: got %d at %s "+
			"(the campus sign-on's form again: %v, logins %d), want a code at once from the fresh session",
			p.status, p.url, strings.Contains(p.body, `name="password"`), logins)
	}
}
