package server_test

import (
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/campus-it/ucs/pkg/config"
)

// postToConsent posts the form of the sign-in page p (its hidden fields, CSRF included) to
// the consent step instead of the login step, with accept: the re-authentication bypass.
func postToConsent(t *testing.T, b *http.Client, p page) page {
	t.Helper()
	m := formAction.FindStringSubmatch(p.body)
	if m == nil || !strings.Contains(m[1], "/login-actions/authenticate?") {
		t.Fatalf("not a login page: %d %s", p.status, p.body)
	}
	action := strings.Replace(html.UnescapeString(m[1]), "/login-actions/authenticate?", "/login-actions/consent?", 1)
	return submit(t, b, page{status: p.status, body: `<form action="` + html.EscapeString(action) + `">` + p.body, url: p.url},
		url.Values{"accept": {"yes"}})
}

// TestConsentOnlyAfterSignIn: a request that asks for a new sign-in (prompt=login, an exceeded
// max_age) cannot skip it by posting its sealed request to the consent step; nor can the
// account page's sign-in request reach a client's consent.
func TestConsentOnlyAfterSignIn(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	e.signInCode(t, b, "portal") // signed in, consent given

	refused := func(name string, p page) {
		t.Helper()
		if p.status == http.StatusFound || strings.Contains(p.location, "code=") || strings.Contains(p.body, `name="code"`) {
			t.Fatalf("%s: the consent step answered a request that skipped the sign-in: %d %q", name, p.status, p.location)
		}
		if p.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", name, p.status, p.body)
		}
	}
	login := get(t, b, e.authURL("portal", "pl", "prompt", "login"))
	refused("prompt=login", postToConsent(t, b, login))
	// The same request still takes a real sign-in.
	if p := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}}); callback(t, p).Get("code") == "" {
		t.Fatalf("prompt=login after the refusal: %d %q", p.status, p.location)
	}

	e.clock.Advance(2 * time.Second)
	login = get(t, b, e.authURL("portal", "ma", "max_age", "1"))
	refused("max_age exceeded", postToConsent(t, b, login))

	// The account page's sign-in request, from a browser that is not signed in.
	b2 := browser(t)
	refused("account page's sign-in", postToConsent(t, b2, get(t, b2, e.issuer+"/account")))
	// A signed-in browser's account page sign-in request too.
	b3 := browser(t)
	acct := get(t, b3, e.issuer+"/account")
	e.signInCode(t, b3, "portal")
	refused("account page's sign-in, signed in", postToConsent(t, b3, acct))
}

// TestLogoutHints: a hint must be an ID token of this issuer for the browser's own session.
// Another user's ID token asks for the confirmation and ends nothing; an access token is no
// hint, at logout or at authorize.
func TestLogoutHints(t *testing.T) {
	e := newSignInEnv(t)
	logout := e.issuer + "/protocol/openid-connect/logout"
	signedIn := func(b *http.Client) bool {
		t.Helper()
		return get(t, b, e.authURL("trusted", "s")).location != ""
	}
	a := browser(t)
	tokA, errc := e.exchange(t, "trusted", e.signInCode(t, a, "trusted"))
	if errc != "" {
		t.Fatal(errc)
	}
	// Another user, in another browser (the campus sign-on).
	bb := browser(t)
	p := get(t, bb, e.authURL("trusted", "s", "kc_idp_hint", "cas"))
	p = submit(t, bb, p, url.Values{"username": {"2020000042"}, "password": {"cas-password"}})
	tokB, errc := e.exchange(t, "trusted", callback(t, p).Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}

	p = get(t, a, logout+"?"+url.Values{"id_token_hint": {tokB["id_token"].(string)},
		"post_logout_redirect_uri": {rpRedirect}}.Encode())
	if p.status != http.StatusOK || !strings.Contains(p.body, `name="confirm"`) || !signedIn(a) || !signedIn(bb) {
		t.Fatalf("another user's hint: %d %q, signed in %v %v", p.status, p.location, signedIn(a), signedIn(bb))
	}
	// An ID token of the same user but another session of theirs asks too.
	a2 := browser(t)
	tokA2, _ := e.exchange(t, "trusted", e.signInCode(t, a2, "trusted"))
	if p := get(t, a, logout+"?id_token_hint="+tokA2["id_token"].(string)); !strings.Contains(p.body, `name="confirm"`) || !signedIn(a) || !signedIn(a2) {
		t.Fatalf("another session's hint: %d, signed in %v %v", p.status, signedIn(a), signedIn(a2))
	}

	// An access token is no ID token: at logout an error page, at authorize an error.
	p = get(t, a, logout+"?"+url.Values{"id_token_hint": {tokA["access_token"].(string)},
		"post_logout_redirect_uri": {rpRedirect}}.Encode())
	if p.status != http.StatusBadRequest || p.location != "" || !signedIn(a) {
		t.Fatalf("an access token as hint at logout: %d %q", p.status, p.location)
	}
	q := callback(t, get(t, a, e.authURL("trusted", "h", "prompt", "none", "id_token_hint", tokA["access_token"].(string))))
	if q.Get("error") != "invalid_request" || q.Has("code") {
		t.Fatalf("an access token as hint at authorize: %v", q)
	}
	// The browser's own ID token signs it out at once.
	p = get(t, a, logout+"?"+url.Values{"id_token_hint": {tokA["id_token"].(string)},
		"post_logout_redirect_uri": {rpRedirect}}.Encode())
	if p.status != http.StatusFound || p.location != rpRedirect || signedIn(a) || !signedIn(bb) {
		t.Fatalf("own hint: %d %q", p.status, p.location)
	}
}

// TestServerSideLogout: Keycloak's logout by a client's back end (client credentials and a
// refresh token) ends that session and answers 204; a hint without a session cookie ends the
// session it names.
func TestServerSideLogout(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	other, _ := e.exchange(t, "library", e.signInCode(t, browser(t), "library"))

	// Wrong secret: refused, nothing ends.
	if st, m := e.post(t, "/logout", "", url.Values{"client_id": {"portal"}, "client_secret": {"wrong"},
		"refresh_token": {tok["refresh_token"].(string)}}); st != http.StatusUnauthorized || m["error"] != "invalid_client" {
		t.Fatalf("wrong secret: %d %v", st, m)
	}
	// Another client's refresh token: refused.
	if st, m := e.post(t, "/logout", "", url.Values{"client_id": {"portal"}, "client_secret": {rpSecret},
		"refresh_token": {other["refresh_token"].(string)}}); st != http.StatusBadRequest || m["error"] != "invalid_grant" {
		t.Fatalf("another client's token: %d %v", st, m)
	}
	if _, errc := e.refresh(t, "library", other["refresh_token"].(string)); errc != "" {
		t.Fatalf("a refused logout ended another client's session: %s", errc)
	}

	req, _ := http.NewRequest(http.MethodPost, e.issuer+"/protocol/openid-connect/logout", strings.NewReader(url.Values{
		"client_id": {"portal"}, "client_secret": {rpSecret}, "refresh_token": {tok["refresh_token"].(string)}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout by the client: %d", resp.StatusCode)
	}
	if _, errc := e.refresh(t, "portal", tok["refresh_token"].(string)); errc != "invalid_grant" {
		t.Fatalf("refresh after the logout: %q", errc)
	}
	for _, k := range []string{"refresh_token", "access_token"} {
		if st, m := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {tok[k].(string)}}); st != 200 || m["active"] != false {
			t.Fatalf("introspection of the %s after the logout: %d %v", k, st, m)
		}
	}
	if q := callback(t, get(t, b, e.authURL("portal", "pn", "prompt", "none"))); q.Get("error") != "login_required" {
		t.Fatalf("prompt=none after the logout: %v", q)
	}

	// id_token_hint without the session cookie (a cross-site form): the hint's session ends.
	b = browser(t)
	tok, _ = e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	req, _ = http.NewRequest(http.MethodPost, e.issuer+"/protocol/openid-connect/logout", strings.NewReader(url.Values{
		"id_token_hint": {tok["id_token"].(string)}, "post_logout_redirect_uri": {rpRedirect}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Through the campus sign-on's logout, which returns to the application.
	if loc, err := url.Parse(resp.Header.Get("Location")); resp.StatusCode != http.StatusFound || err != nil ||
		!strings.HasSuffix(loc.Path, "/cas/logout") || loc.Query().Get("service") != rpRedirect {
		t.Fatalf("logout with a hint and no cookie: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if q := callback(t, get(t, b, e.authURL("portal", "pn", "prompt", "none"))); q.Get("error") != "login_required" {
		t.Fatalf("the hint's session lives on: %v", q)
	}
	if _, errc := e.refresh(t, "portal", tok["refresh_token"].(string)); errc != "invalid_grant" {
		t.Fatalf("refresh after the logout by hint: %q", errc)
	}
}

// TestRefreshKeepsGrantScope: RFC 6749 §6: a refresh asking for less narrows that answer only;
// the refresh token issued keeps the grant's scope.
func TestRefreshKeepsGrantScope(t *testing.T) {
	e := newSignInEnv(t)
	tok := e.userTokens(t, "portal")
	narrow, errc := e.refresh(t, "portal", tok["refresh_token"].(string), "scope", "openid")
	if errc != "" || narrow["scope"] != "openid" {
		t.Fatalf("narrowed refresh: %v %s", narrow, errc)
	}
	full, errc := e.refresh(t, "portal", narrow["refresh_token"].(string))
	if errc != "" || full["scope"] != "notification.mp openid" {
		t.Fatalf("the next refresh: %v %s", full, errc)
	}
	again, errc := e.refresh(t, "portal", full["refresh_token"].(string), "scope", "openid notification.mp")
	if errc != "" || len(strings.Fields(again["scope"].(string))) != 2 {
		t.Fatalf("asking for the whole grant after a narrowed refresh: %v %s", again, errc)
	}
}

// TestCampusSignOnRenewed: a request for a new sign-in (prompt=login) or for one no older than
// max_age that goes to the campus sign-on asks it for a new sign-in (renew): its single
// sign-on, whose sign-in may be of any age, does not answer it, the user types the password
// again, and only then is a code issued, with the new sign-in's time.
func TestCampusSignOnRenewed(t *testing.T) {
	e := newSignInEnv(t)
	r := newRP(t, e)
	b := browser(t)
	casForm := get(t, b, e.authURL("trusted", "s1", "kc_idp_hint", "cas"))
	if !strings.HasPrefix(casForm.url.String(), e.cas.URL()+"/login") {
		t.Fatalf("not sent to the campus sign-on: %s", casForm.url)
	}
	q := callback(t, submit(t, b, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}}))
	if _, errc := e.exchange(t, "trusted", q.Get("code")); errc != "" {
		t.Fatal(errc)
	}
	cfg := r.conf
	cfg.ClientID = "trusted"
	trusted := &rp{provider: r.provider, conf: cfg, verifier: r.provider.Verifier(&oidc.Config{ClientID: "trusted", Now: e.clock.Now})}
	for _, ask := range [][]string{{"max_age", "60"}, {"prompt", "login"}} {
		e.clock.Advance(10 * time.Minute)
		logins := e.cas.Logins()
		p := get(t, b, e.authURL("trusted", "s2", append([]string{"kc_idp_hint", "cas"}, ask...)...))
		if !strings.HasPrefix(p.url.String(), e.cas.URL()+"/login") || !strings.Contains(p.body, `name="password"`) {
			t.Fatalf("%v: the campus sign-on's single sign-on answered (%d, %s, %q)", ask, p.status, p.url, p.location)
		}
		q := callback(t, submit(t, b, p, url.Values{"username": {"2020000042"}, "password": {"cas-password"}}))
		tok, errc := e.exchange(t, "trusted", q.Get("code"))
		if errc != "" {
			t.Fatal(errc)
		}
		if e.cas.Logins() != logins+1 || authTime(t, trusted, tok) != e.clock.Now().Unix() {
			t.Fatalf("%v: password sign-ins %d → %d, auth_time %d at %d", ask, logins, e.cas.Logins(), authTime(t, trusted, tok), e.clock.Now().Unix())
		}
	}
}

// TestPromptLoginAndConsent: prompt="login consent" asks for both, the password and then the
// consent, however the user consented before.
func TestPromptLoginAndConsent(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	_ = e.signInCode(t, b, "portal") // signed in, consent given
	p := get(t, b, e.authURL("portal", "pc", "prompt", "login consent"))
	if !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("no login form: %d %q", p.status, p.location)
	}
	p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("no consent page after the login: %d %q", p.status, p.location)
	}
}

// signInAgain answers the authorization request of client with prompt=login in b, signing in
// as user with password (and consenting when asked), and returns the tokens.
func (e *signInEnv) signInAgain(t *testing.T, b *http.Client, client, user, password string) map[string]any {
	t.Helper()
	p := get(t, b, e.authURL(client, "again", "prompt", "login"))
	if !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("no login form for prompt=login: %d %q", p.status, p.location)
	}
	p = submit(t, b, p, url.Values{"username": {user}, "password": {password}})
	if strings.Contains(p.body, `name="accept"`) {
		p = submit(t, b, p, url.Values{"accept": {"yes"}})
	}
	tok, errc := e.exchange(t, client, callback(t, p).Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}
	return tok
}

// TestSecondSignInRenewsTheBrowsersSession: a browser keeps one session, as Keycloak's do. When
// another application asks the same user to sign in again (prompt=login), the session is
// renewed, not doubled: both applications' tokens carry its sid, and when the first one signs
// the user out with its own ID token, the browser's sign-out ends its tokens too.
func TestSecondSignInRenewsTheBrowsersSession(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	tokP, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	tokL := e.signInAgain(t, b, "library", userID, userPass)
	if p, l := idTokenSID(t, tokP["id_token"].(string)), idTokenSID(t, tokL["id_token"].(string)); p != l {
		t.Fatalf("the second sign-in made a second session: sid %s, then %s", p, l)
	}
	logout := e.issuer + "/protocol/openid-connect/logout?" + url.Values{
		"id_token_hint": {tokP["id_token"].(string)}, "post_logout_redirect_uri": {rpRedirect}}.Encode()
	p := get(t, b, logout)
	if strings.Contains(p.body, `name="confirm"`) {
		p = submit(t, b, p, url.Values{})
	}
	if p.status != http.StatusFound || p.location != rpRedirect {
		t.Fatalf("logout: %d %q", p.status, p.location)
	}
	for client, tok := range map[string]map[string]any{"portal": tokP, "library": tokL} {
		if st, m := e.postForm(t, "/token/introspect", client, url.Values{"token": {tok["access_token"].(string)}}); m["active"] != false {
			t.Errorf("%s's access token is active after the browser's sign-out: %d %v", client, st, m)
		}
		if _, errc := e.refresh(t, client, tok["refresh_token"].(string)); errc != "invalid_grant" {
			t.Errorf("%s's refresh token works after the browser's sign-out (error %q)", client, errc)
		}
	}
}

// TestAnotherUserEndsTheBrowsersSession: another user signing in on a browser (a shared campus
// computer) ends the session of the user before, with the tokens issued in it.
func TestAnotherUserEndsTheBrowsersSession(t *testing.T) {
	const other, otherPass = "2020000002", "another correct horse"
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		c.Directory.Users = append(c.Directory.Users, config.User{UserID: other, Password: otherPass})
	})
	b := browser(t)
	tokP, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	tokL := e.signInAgain(t, b, "library", other, otherPass)
	if st, m := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {tokP["access_token"].(string)}}); m["active"] != false {
		t.Errorf("the first user's access token is active after another user signed in on the browser: %d %v", st, m)
	}
	if _, errc := e.refresh(t, "portal", tokP["refresh_token"].(string)); errc != "invalid_grant" {
		t.Errorf("the first user's refresh token works after another user signed in (error %q)", errc)
	}
	if st, m := e.postForm(t, "/token/introspect", "library", url.Values{"token": {tokL["access_token"].(string)}}); m["active"] != true {
		t.Errorf("the second user's access token is not active: %d %v", st, m)
	}
}

// TestHugeMaxAge: a max_age of centuries is met by any sign-in: prompt=none right after
// signing in answers a code, whatever the size of the number.
func TestHugeMaxAge(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	e.signInCode(t, b, "trusted")
	for _, ma := range []string{"3600", "10000000000", "9223372036854775807"} {
		q := callback(t, get(t, b, e.authURL("trusted", "s", "prompt", "none", "max_age", ma)))
		if q.Get("code") == "" {
			t.Errorf("prompt=none max_age=%s right after signing in: %v", ma, q)
		}
	}
}

// TestUnknownIDPHintSignsInWithTheDefault: kc_idp_hint is only a hint, as in Keycloak, which
// goes on to its login form when the hint names no provider: an application that sends its
// campus's own value, or another spelling, signs its users in with the default provider, not
// sent back with invalid_request, and so does a link to the account page.
func TestUnknownIDPHintSignsInWithTheDefault(t *testing.T) {
	e := newSignInEnv(t)
	authz := e.issuer + "/protocol/openid-connect/auth"
	for _, hint := range []string{"campus-sso", "CAS"} {
		q := url.Values{"client_id": {"portal"}, "redirect_uri": {rpRedirect}, "response_type": {"code"},
			"kc_idp_hint": {hint}, "state": {"st"}, "scope": {"openid"}}
		p := get(t, browser(t), authz+"?"+q.Encode())
		if p.status != http.StatusOK || !strings.Contains(p.body, `name="password"`) {
			t.Errorf("kc_idp_hint=%s: %d Location %q; want the default provider's login page", hint, p.status, p.location)
		}
		// The account page, which an application links with the same hint.
		if p := get(t, browser(t), e.issuer+"/account?kc_idp_hint="+url.QueryEscape(hint)); p.status != http.StatusOK || !strings.Contains(p.body, `name="password"`) {
			t.Errorf("the account page with kc_idp_hint=%s: %d Location %q; want the default provider's login page", hint, p.status, p.location)
		}
	}
}

// TestCrossSitePostAuthorizeSeesTheSession: the authorization endpoint takes POST as well as
// GET (OpenID Connect Core §3.1.2.1). A relying party on its own site that sends the signed-in
// user there by an auto-submitted form (prompt=none, to learn silently whether the user is
// signed in) gets a code, as with the same request as a GET, although the cross-site POST
// carries no SameSite=Lax session cookie.
func TestCrossSitePostAuthorizeSeesTheSession(t *testing.T) {
	rpSite := http.NewServeMux()
	rpSrv := httptest.NewServer(rpSite)
	t.Cleanup(rpSrv.Close)
	rpBase := strings.Replace(rpSrv.URL, "127.0.0.1", "localhost", 1) // another site than the service's
	cb := rpBase + "/cb"
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		c.OAuth.Clients = append(c.OAuth.Clients, config.Client{ClientID: "webapp", ClientSecret: rpSecret,
			Grants: []string{"authorization_code"}, Scopes: []string{"openid"}, RedirectURIs: []string{cb}})
	})
	params := url.Values{"client_id": {"webapp"}, "response_type": {"code"}, "redirect_uri": {cb},
		"scope": {"openid"}, "kc_idp_hint": {"local"}, "state": {"s1"}, "prompt": {"none"}}
	rpSite.HandleFunc("/silent", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		var b strings.Builder
		b.WriteString(`<!doctype html><form id="f" method="post" action="` + e.issuer + `/protocol/openid-connect/auth">`)
		for k, v := range params {
			b.WriteString(`<input type="hidden" name="` + k + `" value="` + v[0] + `">`)
		}
		b.WriteString(`</form><script>document.getElementById("f").submit()</script>`)
		_, _ = w.Write([]byte(b.String()))
	})
	rpSite.HandleFunc("/cb", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><p>back at the application</p>`))
	})

	ctx, _ := chromium(t)
	tb := tab{t: t, ctx: ctx}
	// The user signs in (the account page), so the browser holds a session here.
	signInOnAccountPage(t, tb, e.issuer)

	// The same request as a GET: signed in, straight back with a code.
	tb.run(chromedp.Navigate(e.issuer + "/protocol/openid-connect/auth?" + params.Encode()))
	waitFor(t, func() bool { return strings.HasPrefix(tb.eval(`location.href`), cb) })
	got, _ := url.Parse(tb.eval(`location.href`))
	if got.Query().Get("code") == "" {
		t.Fatalf("the GET authorization request of a signed-in user got no code: %s", got)
	}

	// As a POST from the application's page.
	tb.run(chromedp.Navigate(rpBase + "/silent"))
	waitFor(t, func() bool { return strings.HasPrefix(tb.eval(`location.href`), cb) })
	got, _ = url.Parse(tb.eval(`location.href`))
	if got.Query().Get("code") == "" {
		t.Fatalf("the POST authorization request (OIDC Core §3.1.2.1) of the same signed-in user got no code: %s", got.RawQuery)
	}
}

// TestCASConsentPageOpenedAgain: the consent page after a sign-in at the campus sign-on, reloaded
// or come back to with the back button (it is no-store, so the browser asks again), shows the
// consent page again, without the used ticket being sent to the campus sign-on (which refuses
// it: "Campus sign-on failed", and a failed sign-in counted against the address). Once the
// request is finished, it is the expired page.
func TestCASConsentPageOpenedAgain(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	casForm := get(t, b, e.authURL("portal", "rl", "kc_idp_hint", "cas"))
	if !strings.HasPrefix(casForm.url.String(), e.cas.URL()+"/login") {
		t.Fatalf("not sent to CAS: %s", casForm.url)
	}
	consent := submit(t, b, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}})
	if consent.status != http.StatusOK || !strings.Contains(consent.body, `name="accept"`) {
		t.Fatalf("consent page: %d %s %.200s", consent.status, consent.url, consent.body)
	}
	if strings.Contains(consent.url.RawQuery, "ticket=") {
		t.Fatalf("the consent page's address holds the ticket: %s", consent.url)
	}
	again := get(t, b, consent.url.String())
	if again.status != http.StatusOK || !strings.Contains(again.body, `name="accept"`) {
		t.Fatalf("the consent page opened again: %d %.300s, want the consent page", again.status, again.body)
	}
	done := submit(t, b, again, url.Values{"accept": {"yes"}})
	if _, errc := e.exchange(t, "portal", callback(t, done).Get("code")); errc != "" {
		t.Fatalf("the code of the consent given on the page opened again: %s", errc)
	}
	if late := get(t, b, consent.url.String()); late.status != http.StatusBadRequest || !strings.Contains(late.body, "expired") {
		t.Fatalf("the consent page opened after the request finished: %d %.300s, want the expired page", late.status, late.body)
	}
}
