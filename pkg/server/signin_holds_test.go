package server_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/campus-it/ucs/pkg/config"
)

// TestMaxAgeRecheckedAtConsent: with max_age, a sign-in older than max_age must not answer
// the request (OpenID Connect Core §3.1.2.1). A sign-in fresh enough when the request came
// but older by the time the consent page is submitted (it may stay open for 10 minutes) no
// longer is: the user signs in again, then consents, and the ID token's auth_time is within
// max_age of the code.
func TestMaxAgeRecheckedAtConsent(t *testing.T) {
	e := newSignInEnv(t)
	r := newRP(t, e) // portal
	b := browser(t)
	// Signed in through trusted (no consent there); portal's consent is not given yet.
	if _, errc := e.exchange(t, "trusted", e.signInCode(t, b, "trusted")); errc != "" {
		t.Fatal(errc)
	}
	e.clock.Advance(30 * time.Second)
	p := get(t, b, e.authURL("portal", "ma", "max_age", "60"))
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("expected the consent page (sign-in 30 s old, max_age 60): %d %q", p.status, p.location)
	}
	e.clock.Advance(5 * time.Minute) // the user reads the consent page
	p = submit(t, b, p, url.Values{"accept": {"yes"}})
	if !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("consent to a sign-in older than max_age answered %d %q, not the login form", p.status, p.location)
	}
	p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	if strings.Contains(p.body, `name="accept"`) {
		p = submit(t, b, p, url.Values{"accept": {"yes"}})
	}
	tok, errc := e.exchange(t, "portal", callback(t, p).Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}
	if age := e.clock.Now().Unix() - authTime(t, r, tok); age > 60 {
		t.Fatalf("code issued for max_age=60 with an ID token whose auth_time is %d s old", age)
	}
}

// TestCrossSitePostLogoutEndsTheSession: RP-Initiated Logout 1.0 lets a relying party send
// the browser to the end_session_endpoint by POST. From another site's page (here localhost,
// the service being 127.0.0.1) the POST carries no session cookie (SameSite=Lax), and no
// id_token_hint names a session: it is turned into a GET of the same request, which carries
// the cookie, the user confirms, and the session ends with its tokens.
func TestCrossSitePostLogoutEndsTheSession(t *testing.T) {
	rpSite := http.NewServeMux()
	rpSrv := httptest.NewServer(rpSite)
	t.Cleanup(rpSrv.Close)
	// Another site than the service's 127.0.0.1: localhost.
	rpBase := strings.Replace(rpSrv.URL, "127.0.0.1", "localhost", 1)
	bye := rpBase + "/bye"
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		c.OAuth.Clients = append(c.OAuth.Clients, config.Client{ClientID: "webapp", ClientSecret: rpSecret,
			Grants: []string{"authorization_code"}, Scopes: []string{"openid"}, RedirectURIs: []string{bye},
			PostLogoutRedirectURIs: []string{bye}})
	})
	rpSite.HandleFunc("/signout", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><form id="f" method="post" action="` + e.issuer + `/protocol/openid-connect/logout">` +
			`<input type="hidden" name="client_id" value="webapp">` +
			`<input type="hidden" name="post_logout_redirect_uri" value="` + bye + `"></form>` +
			`<script>document.getElementById("f").submit()</script>`))
	})
	rpSite.HandleFunc("/bye", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><p id="bye">signed out, says the application</p>`))
	})

	ctx, _ := chromium(t)
	tb := tab{t: t, ctx: ctx}
	signedIn := func() bool {
		tb.run(chromedp.Navigate(e.issuer + "/account"))
		waitFor(t, func() bool {
			return tb.eval(`document.getElementById("username") ? "form" : (document.body && document.body.innerText.includes("`+userID+`") ? "in" : "")`) != ""
		})
		return tb.eval(`document.getElementById("username") ? "no" : "yes"`) == "yes"
	}
	signInOnAccountPage(t, tb, e.issuer)
	if !signedIn() {
		t.Fatal("the sign-in on the account page did not hold")
	}

	// The application signs the user in (single sign-on: straight back with a code) and keeps
	// its tokens; so would any other application of the session.
	tb.run(chromedp.Navigate(e.issuer + "/protocol/openid-connect/auth?" + url.Values{"client_id": {"webapp"},
		"response_type": {"code"}, "redirect_uri": {bye}, "scope": {"openid"}, "kc_idp_hint": {"local"}, "state": {"s"}}.Encode()))
	waitFor(t, func() bool { return strings.HasPrefix(tb.eval(`location.href`), bye) })
	back, _ := url.Parse(tb.eval(`location.href`))
	tok, errc := e.tokenGrant(t, "webapp", url.Values{"grant_type": {"authorization_code"}, "code": {back.Query().Get("code")}, "redirect_uri": {bye}})
	if errc != "" {
		t.Fatal(errc)
	}

	tb.run(chromedp.Navigate(rpBase + "/signout"))
	waitFor(t, func() bool {
		return strings.HasPrefix(tb.eval(`location.href`), bye) || strings.Contains(tb.eval(`document.body ? document.body.innerHTML : ""`), `name="confirm"`)
	})
	if strings.HasPrefix(tb.eval(`location.href`), bye) {
		t.Fatal("the cross-site POST logout went back to the application without the user's confirmation")
	}
	tb.run(chromedp.Click(chromedp.CSS(`button[type=submit]`)))
	waitFor(t, func() bool { return strings.HasPrefix(tb.eval(`location.href`), bye) })
	where := tb.eval(`location.href`)
	_, errc = e.refresh(t, "webapp", tok["refresh_token"].(string))
	st, intro := e.postForm(t, "/token/introspect", "webapp", url.Values{"token": {tok["access_token"].(string)}})
	if errc == "" || intro["active"] == true {
		t.Fatalf("after the application's cross-site POST logout the browser was sent to %s; the session lives on: "+
			"its refresh token still refreshes (error %q), its access token is active (%d %v)", where, errc, st, intro)
	}
}

// TestFormClientRefusedHasChallenge: a client refused its credentials sent in the form
// (client_secret_post) gets 401 with WWW-Authenticate, as with HTTP Basic: RFC 9110 §15.5.2
// wants a challenge on every 401.
func TestFormClientRefusedHasChallenge(t *testing.T) {
	e := newSignInEnv(t)
	for _, path := range []string{"/token", "/revoke", "/token/introspect", "/logout"} {
		form := url.Values{"client_id": {"portal"}, "client_secret": {"wrong-secret"}, "grant_type": {"client_credentials"},
			"token": {"whatever"}, "refresh_token": {"whatever"}}
		req, _ := http.NewRequest(http.MethodPost, e.issuer+"/protocol/openid-connect"+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic realm=") {
			t.Errorf("%s with a wrong client_secret in the form: %d, WWW-Authenticate %q", path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

// TestSignInStepsWithoutSignInRefused: a front end without identity providers (server.Config.SignIn
// nil, which turns sign-in off) still routes the sign-in steps; an outsider's request to them is
// refused with a status the description lists, never a 500 (and a stack in the log).
func TestSignInStepsWithoutSignInRefused(t *testing.T) {
	e := newEnv(t) // no oauth.identity_providers: SignIn is nil
	described := describedStatuses(t, e)
	realm := "/auth/realms/" + e.cfg.OAuth.Realm
	for _, c := range []struct{ m, p, op string }{
		{"POST", realm + "/login-actions/authenticate", "POST " + realm + "/login-actions/authenticate"},
		{"POST", realm + "/login-actions/consent", "POST " + realm + "/login-actions/consent"},
		{"GET", realm + "/broker/cas/endpoint?ticket=ST-1-x&req=x", "GET " + realm + "/broker/cas/endpoint"},
	} {
		a := e.do(c.m, c.p, form, "", "username=a&password=b")
		if a.status >= 500 || !slices.Contains(described[c.op], a.status) {
			t.Errorf("%s %s with sign-in off: %d %.120s; described %v", c.m, c.p, a.status, a.body, described[c.op])
		}
	}
}

// TestRevokeOfAnotherClientsTokenRefused: RFC 7009 §2.1: the server "verifies whether the
// token was issued to the client making the revocation request. If this validation fails, the
// request is refused and the client is informed of the error". Revoking another client's
// refresh token is refused (invalid_request, as Keycloak's "Unmatching clients"), not answered
// 200 as if revoked while the token stays alive.
func TestRevokeOfAnotherClientsTokenRefused(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatalf("exchange: %s", errc)
	}
	rt, _ := tok["refresh_token"].(string)
	st, m := e.postForm(t, "/revoke", "library", url.Values{"token": {rt}, "token_type_hint": {"refresh_token"}})
	if _, errc := e.refresh(t, "portal", rt); errc != "" {
		t.Fatalf("the refresh token should be untouched: %s", errc)
	}
	if st != http.StatusBadRequest || m["error"] != "invalid_request" {
		t.Errorf("revoking portal's refresh token as library: %d %v; the token is still alive (want 400 invalid_request, RFC 7009 §2.1)", st, m)
	}
}

// TestAccessTokenEndsWithSession: with a 5-minute session, the access token and the ID token
// of the authorization code grant expire with the session, and expires_in says so, as
// Keycloak caps them (KEYCLOAK-4215, keycloak/keycloak#4810): the service refuses the token
// once the session is over, and resource servers that check exp locally stop with it too.
func TestAccessTokenEndsWithSession(t *testing.T) {
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		c.OAuth.SessionTTL = config.Duration(5 * time.Minute)
		c.OAuth.RefreshTokenTTL = config.Duration(5 * time.Minute)
	})
	b := browser(t)
	signedInAt := e.clock.Now()
	tok, errc := e.exchange(t, "trusted", e.signInCode(t, b, "trusted"))
	if errc != "" {
		t.Fatal(errc)
	}
	sessionEnd := signedInAt.Add(5 * time.Minute).Unix()
	expiresIn := int64(tok["expires_in"].(float64))
	exp := int64(jwtClaims(t, tok["access_token"].(string))["exp"].(float64))
	idExp := int64(jwtClaims(t, tok["id_token"].(string))["exp"].(float64))

	e.clock.Advance(6 * time.Minute)
	after := userinfo(t, e.issuer, tok["access_token"].(string))
	if exp > sessionEnd || expiresIn > 300 || idExp > sessionEnd || after != http.StatusUnauthorized {
		t.Errorf("session of 5 minutes (ends at %d): expires_in %d, access token exp %d (%d s past the session), "+
			"ID token exp %d; 6 minutes later the service itself answers the token %d; want exp and expires_in "+
			"not beyond the session's end, as Keycloak caps them", sessionEnd, expiresIn, exp, exp-sessionEnd, idExp, after)
	}
}

// TestLogoutEndsCampusSingleSignOn: a student signs in to an application through the
// campus sign-on and signs out with the browser's own id_token_hint (no confirmation). As
// Keycloak's CAS broker does (keycloakInitiatedBrowserLogout sends the browser to CAS /logout),
// the sign-out must end the campus single sign-on too; otherwise the next person at the same
// (lab, library) computer who presses "sign in" would be signed in as the previous student
// without typing any password. The browser goes through CAS's logout, which sends it on to the
// application.
func TestLogoutEndsCampusSingleSignOn(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	tok := e.casSignIn(t, b, "s1")
	logins := e.cas.Logins()

	// The student signs out of the application: the browser's own ID token, no confirmation.
	p := get(t, b, e.issuer+"/protocol/openid-connect/logout?"+url.Values{
		"id_token_hint": {tok["id_token"].(string)}, "post_logout_redirect_uri": {rpRedirect}, "state": {"out"}}.Encode())
	if p.status != http.StatusFound || !strings.HasPrefix(p.location, rpRedirect) || !strings.HasPrefix(p.url.String(), e.cas.URL()+"/logout") {
		t.Fatalf("logout: %d %q from %s, want the application's address through CAS's logout", p.status, p.location, p.url)
	}
	if back, err := url.Parse(p.location); err != nil || back.Query().Get("state") != "out" {
		t.Fatalf("back at %q: the state is lost", p.location)
	}

	// The next person presses "sign in" on the same computer.
	p = get(t, b, e.authURL("trusted", "s2", "kc_idp_hint", "cas"))
	if p.status == http.StatusFound && strings.HasPrefix(p.location, rpRedirect) {
		q := callback(t, p)
		tok2, _ := e.exchange(t, "trusted", q.Get("code"))
		who := ""
		if id, ok := tok2["id_token"].(string); ok {
			who, _ = jwtClaims(t, id)["userid"].(string)
		}
		t.Fatalf("after signing out, a new sign-in through the campus sign-on was answered at once with a code "+
			"for userid %q (campus password checks %d → %d): the campus single sign-on outlived the logout; "+
			"want the campus sign-on's password form (Keycloak's CAS broker logs out of CAS at logout)",
			who, logins, e.cas.Logins())
	}
	if !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("after logout: %d %s, want the campus sign-on's password form", p.status, p.url)
	}
}

// signInOnAccountPage signs the test user in on the account page at issuer, and returns once
// the page shows them signed in.
func signInOnAccountPage(t *testing.T, tb tab, issuer string) {
	t.Helper()
	tb.run(chromedp.Navigate(issuer+"/account"),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), userID),
		chromedp.SendKeys(chromedp.ID("password"), userPass),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)))
	waitFor(t, func() bool {
		return tb.eval(`document.readyState === "complete" && !document.getElementById("password") && document.body.innerText.includes("`+userID+`") ? "y" : ""`) == "y"
	})
}
