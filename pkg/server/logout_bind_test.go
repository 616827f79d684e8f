package server_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// TestHintedLogoutWithABindSignInEndsTheHintsSession: an application's RP-initiated logout
// (GET, id_token_hint of its session, post_logout_redirect_uri) in a browser that holds no
// realm session cookie ends the session the hint names, as Keycloak does, with no
// confirmation. A pending binding-page sign-in in that browser (UCS_BIND_SIGNIN, consent not
// yet answered) is no session of any application: it must not turn the logout into a
// confirmation whose answer ends only the binding sign-in and leaves the application's
// session, and its refresh tokens, alive while the application is told it signed out.
func TestHintedLogoutWithABindSignInEndsTheHintsSession(t *testing.T) {
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		u, _ := url.Parse(c.PublicURL)
		sim := simulator.New(simulator.Config{AppID: simAppID, Secret: simSecret, WebAuthHosts: []string{u.Host}})
		sim.AddFollower(followerA)
		srv := httptest.NewServer(sim.Handler())
		t.Cleanup(func() { srv.Close(); sim.Close() })
		c.Platform = config.Platform{APIBase: srv.URL, OAuthBase: srv.URL, AppID: simAppID, Secret: simSecret, CallbackToken: cbToken}
	})
	// The application's session (portal: refresh tokens), signed in elsewhere.
	tok := e.userTokens(t, "portal")
	// The phone: a binding-page sign-in, consent not answered yet.
	ph := phone(t)
	be := &bindEnv{base: e.base}
	be.signedIn(t, ph, be.authorizedAs(t, ph, followerA))
	// The application logs out in the phone's browser with its id_token_hint.
	ph.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), rpRedirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}
	out := get(t, ph, e.issuer+"/protocol/openid-connect/logout?"+url.Values{
		"id_token_hint": {tok["id_token"].(string)}, "post_logout_redirect_uri": {rpRedirect}}.Encode())
	if strings.Contains(out.body, `name="confirm"`) {
		// The user confirms, as a user would.
		out = submitForm(t, ph, out, `name="confirm"`, url.Values{})
		t.Errorf("a hinted logout in a browser whose only sign-in is the binding page's asked for confirmation")
	}
	if !strings.HasPrefix(out.location, rpRedirect) && !strings.HasPrefix(out.url.String(), rpRedirect) {
		t.Logf("logout ended at %d %s %s", out.status, out.url, out.location)
	}
	if _, errc := e.refresh(t, "portal", tok["refresh_token"].(string)); errc == "" {
		t.Errorf("after the application's logout with its id_token_hint (browser holding only a pending binding sign-in), "+
			"the application's session lives on: its refresh token still works; ended at %d %s", out.status, out.location)
	}
}
