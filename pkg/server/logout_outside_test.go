package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/event"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// nextCASSignIn is what the next person at the same computer meets when pressing
// "sign in" with the campus sign-on: "" when the campus sign-on asks for the password, else the
// userid the application would be handed without any password typed.
func nextCASSignIn(t *testing.T, e *signInEnv, b *http.Client) string {
	t.Helper()
	p := get(t, b, e.authURL("trusted", "next", "kc_idp_hint", "cas"))
	if strings.Contains(p.body, `name="password"`) {
		return ""
	}
	q := callback(t, p)
	tok, errc := e.exchange(t, "trusted", q.Get("code"))
	if errc != "" {
		t.Fatalf("exchange of the next sign-in's code: %s", errc)
	}
	who, _ := jwtClaims(t, tok["id_token"].(string))["userid"].(string)
	return who
}

// TestPostLogoutWithHintEndsCampusSignOn: OpenID Connect RP-Initiated Logout 1.0 §2 lets
// the application send the logout request by POST (a form on its page); Keycloak's logout
// endpoint takes it. A cross-site POST carries no SameSite=Lax session cookie, so the service
// finds the session by the id_token_hint and ends it. The browser then goes through the campus
// sign-on's logout, as Keycloak's broker logout sends it to CAS /logout and as a GET with the
// cookie does (TestLogoutEndsCampusSingleSignOn): the next person at the same lab computer who
// presses "sign in" is asked for a password.
func TestPostLogoutWithHintEndsCampusSignOn(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	tok := e.casSignIn(t, b, "s1")

	form := url.Values{"id_token_hint": {tok["id_token"].(string)}, "post_logout_redirect_uri": {rpRedirect}, "state": {"out"}}
	req, _ := http.NewRequest(http.MethodPost, e.issuer+"/protocol/openid-connect/logout", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultTransport.RoundTrip(req) // a cross-site form post: no cookie of this service
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST logout with id_token_hint: %d, want a redirect", resp.StatusCode)
	}
	// The browser follows the redirect as a top-level navigation: its cookies for CAS go along.
	if !strings.HasPrefix(loc, rpRedirect) {
		get(t, b, loc)
	}
	// The session of the hint did end (the service's part works).
	if q := callback(t, get(t, b, e.authURL("trusted", "pn", "prompt", "none"))); q.Get("error") != "login_required" {
		t.Fatalf("the hint's session lives on: %v", q)
	}
	if who := nextCASSignIn(t, e, b); who != "" || !strings.HasPrefix(loc, e.cas.URL()+"/logout") {
		t.Fatalf("POST logout (id_token_hint of a campus sign-on session, no session cookie) answered %d Location %q: "+
			"not through the campus sign-on's logout; the next person's sign-in at the same browser is answered at once as userid %q "+
			"with no password typed; want the browser sent through %s/logout?service=… as Keycloak's broker logout does",
			resp.StatusCode, loc, who, e.cas.URL())
	}
}

// TestLogoutDuringNATSOutage: a student signed in through the campus sign-on presses "sign
// out" while the front end's connection to NATS is briefly down. The session ends in the store
// and its clients are told; the shared revocation cannot be written, but the sign-out goes on
// (the other front ends learn it from the store within a minute): the cookie is cleared and the
// browser goes through the campus sign-on's logout, so that the next person at that computer
// is asked for a password, not told to retry a sign-out that already happened.
func TestLogoutDuringNATSOutage(t *testing.T) {
	var proxy *embeddedtest.Proxy
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		proxy = embeddedtest.NewProxy(t, strings.TrimPrefix(c.NATS.URL, "nats://"))
		c.NATS.URL = "nats://" + proxy.Addr()
	})
	ready := func() int {
		resp, err := http.Get(e.base + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	b := browser(t)
	tok := e.casSignIn(t, b, "s1")
	logout := e.issuer + "/protocol/openid-connect/logout?" + url.Values{
		"id_token_hint": {tok["id_token"].(string)}, "post_logout_redirect_uri": {rpRedirect}}.Encode()

	proxy.SetDown(true)
	embeddedtest.Eventually(t, 10*time.Second, "the front end notices NATS is down", func() bool { return ready() == 503 })
	first := get(t, b, logout)
	proxy.SetDown(false)
	embeddedtest.Eventually(t, 20*time.Second, "the front end reconnects", func() bool { return ready() == 200 })

	sessionEnded := callback(t, get(t, b, e.authURL("trusted", "pn", "prompt", "none"))).Get("error") == "login_required"
	throughCAS := strings.HasPrefix(first.url.String(), e.cas.URL()+"/logout")
	retried := false
	if first.status >= 400 {
		// The page said to try again: the student does.
		retried = true
		p := get(t, b, logout)
		throughCAS = throughCAS || strings.HasPrefix(p.url.String(), e.cas.URL()+"/logout")
	}
	if who := nextCASSignIn(t, e, b); who != "" {
		t.Fatalf("logout during a NATS outage answered %d (%.80q), yet the session had ended: %v; retried: %v; "+
			"any attempt through the campus sign-on's logout: %v; the next person at the browser is signed in as %q "+
			"with no password; want a failed logout to end nothing, or the campus sign-on ended on the retry",
			first.status, first.body, sessionEnded, retried, throughCAS, who)
	}
}

// TestCodeExchangeRacingLogout: the code exchange checks that the session lives
// (stillGranted) and then records the client among the session's clients (AddSessionClient),
// which decides who gets a back-channel logout token. A logout that falls between the two
// either finds the client recorded, and sends it a logout token, or makes the recording fail,
// and the exchange answers invalid_grant: no client holds tokens of an ended session without
// being told (Back-Channel Logout 1.0 is what it registered to rely on).
func TestCodeExchangeRacingLogout(t *testing.T) {
	tokens := make(chan string, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens <- r.PostFormValue("logout_token")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rcv.Close)

	var armed atomic.Bool
	reached, release := make(chan struct{}), make(chan struct{})
	monitor := &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		if ev.CommandName == "findAndModify" && ev.Command.Lookup("findAndModify").StringValue() == "sso_sessions" &&
			strings.Contains(ev.Command.String(), "$addToSet") && armed.CompareAndSwap(true, false) {
			close(reached)
			<-release // the exchange's AddSessionClient waits here, before it reaches the store
		}
	}}
	e := newSignInEnvMonitored(t, nil, monitor, func(c *config.Config) {
		c.OAuth.Clients = append(c.OAuth.Clients, config.Client{ClientID: "bc-app", ClientSecret: rpSecret,
			Grants: []string{"authorization_code"}, Scopes: []string{"openid"}, RedirectURIs: []string{rpRedirect},
			SkipConsent: true, BackchannelLogoutURI: rcv.URL + "/logout", BackchannelLogoutSessionRequired: true})
	})
	b := browser(t)
	code := e.signInCode(t, b, "bc-app", "scope", "openid")

	type result struct {
		status int
		body   map[string]any
		err    error
	}
	done := make(chan result, 1)
	armed.Store(true)
	go func() {
		form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {rpRedirect},
			"client_id": {"bc-app"}, "client_secret": {rpSecret}}
		resp, err := http.PostForm(e.issuer+"/protocol/openid-connect/token", form)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		done <- result{status: resp.StatusCode, body: m}
	}()
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("the exchange never recorded the session's client")
	}
	// The user signs out meanwhile (the interface's logout: redirect_uri, no confirmation). The
	// end of the session waits for the session's lock, which the stalled record holds; the
	// stall ends a moment after the logout began.
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	out := get(t, b, e.issuer+"/protocol/openid-connect/logout?redirect_uri="+url.QueryEscape(rpRedirect))
	if out.status != http.StatusFound {
		t.Fatalf("logout: %d %s", out.status, out.body)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.status != http.StatusOK {
		return // refused: the client holds nothing of the ended session
	}
	idt, _ := r.body["id_token"].(string)
	select {
	case <-tokens:
		return // told
	case <-time.After(5 * time.Second): // a span in which the logout token would have been sent
	}
	t.Fatalf("a code exchange that raced a logout answered 200 with an ID token of the ended session (sid %s; "+
		"userinfo with its access token now %d) and the client, registered for back-channel logout, was never "+
		"sent a logout token; want invalid_grant or a logout token", idTokenSID(t, idt), userinfo(t, e.issuer, r.body["access_token"].(string)))
}

// TestLogoutAfterSessionExpiryEndsCampusSignOn: the interface tells applications to keep
// their own session apart from the single sign-on session, so an application's session
// commonly outlives this service's (oauth.session_ttl, here 1 h). When the student then
// presses "sign out" in the application, which sends the browser to the logout endpoint with
// its id_token_hint, the browser still goes through the campus sign-on's logout: the campus
// single sign-on has its own lifetime, and the next person at that computer must be asked for
// a password.
func TestLogoutAfterSessionExpiryEndsCampusSignOn(t *testing.T) {
	e := newSignInEnvWith(t, nil, func(c *config.Config) { c.OAuth.SessionTTL = config.Duration(time.Hour) })
	b := browser(t)
	tok := e.casSignIn(t, b, "s1")
	e.clock.Advance(61 * time.Minute) // the application's own session is still open
	p := get(t, b, e.issuer+"/protocol/openid-connect/logout?"+url.Values{
		"id_token_hint": {tok["id_token"].(string)}, "post_logout_redirect_uri": {rpRedirect}}.Encode())
	throughCAS := strings.HasPrefix(p.url.String(), e.cas.URL()+"/logout")
	if who := nextCASSignIn(t, e, b); who != "" || !throughCAS {
		t.Fatalf("sign-out from the application after this service's session expired: %d %q from %s (through CAS's "+
			"logout: %v); the next person at the browser is signed in as %q with no password; want the browser sent "+
			"through the campus sign-on's logout", p.status, p.location, p.url.Host+p.url.Path, throughCAS, who)
	}
}

// TestLocalReauthKeepsCampusLogout: a student signs in through the campus sign-on; later
// an application of the same browser asks for a fresh sign-in with the local form
// (kc_idp_hint=local, prompt=login) and the same campus number signs in there, which renews the
// browser's one session as a local one. The browser still holds a campus single sign-on
// session, so its sign-out goes through the campus sign-on's logout all the same.
func TestLocalReauthKeepsCampusLogout(t *testing.T) {
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		c.Directory.Users = append(c.Directory.Users, config.User{UserID: "2020000042", Password: userPass})
	})
	b := browser(t)
	e.casSignIn(t, b, "s1")
	p := get(t, b, e.authURL("trusted", "s2", "kc_idp_hint", "local", "prompt", "login"))
	if !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("prompt=login: %d %s", p.status, p.url)
	}
	tok, errc := e.exchange(t, "trusted", callback(t, submit(t, b, p, url.Values{"username": {"2020000042"}, "password": {userPass}})).Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}
	out := get(t, b, e.issuer+"/protocol/openid-connect/logout?"+url.Values{
		"id_token_hint": {tok["id_token"].(string)}, "post_logout_redirect_uri": {rpRedirect}}.Encode())
	throughCAS := strings.HasPrefix(out.url.String(), e.cas.URL()+"/logout")
	if who := nextCASSignIn(t, e, b); who != "" || !throughCAS {
		t.Fatalf("sign-out after a local re-authentication of a campus sign-on session: %d %q (through CAS's logout: %v); "+
			"the next person at the browser is signed in as %q with no password; want the campus sign-on ended too",
			out.status, out.location, throughCAS, who)
	}
}

// TestSSOSessionIdle: a sign-in session no one uses for refresh_token_ttl ends, as Keycloak's
// SSO Session Idle ends it (its default, 30 minutes, is refresh_token_ttl's): the next person at
// a lab computer is asked to sign in, though session_ttl (10 h) has not passed. An
// authorization the session answers is a use of it, and moves its idle end on.
func TestSSOSessionIdle(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	if _, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal")); errc != "" {
		t.Fatal(errc)
	}
	// Used every 20 minutes, it lives on.
	for i := range 3 {
		e.clock.Advance(20 * time.Minute)
		if q := callback(t, get(t, b, e.authURL("portal", "pn", "prompt", "none"))); q.Get("code") == "" {
			t.Fatalf("prompt=none %d min after the last use (use %d): %v", 20, i+1, q)
		}
	}
	// Then left alone for 31 minutes, it has ended.
	e.clock.Advance(31 * time.Minute)
	if q := callback(t, get(t, b, e.authURL("portal", "pn", "prompt", "none"))); q.Get("error") != "login_required" {
		t.Fatalf("prompt=none 31 min after the last use (refresh_token_ttl 30 min): %v; want login_required", q)
	}
}
