package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
)

// postForm posts form to the OpenID Connect endpoint path as client (HTTP Basic; none when
// client is empty) and returns the status and the JSON answer.
func (e *signInEnv) postForm(t *testing.T, path, client string, form url.Values) (int, map[string]any) {
	t.Helper()
	return postAs(t, e.issuer, path, client, form)
}

// postAs is postForm at the issuer given.
func postAs(t *testing.T, issuer, path, client string, form url.Values) (int, map[string]any) {
	t.Helper()
	auth := ""
	if client != "" {
		auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(client+":"+rpSecret))
	}
	return postTo(t, issuer, path, auth, form)
}

// post posts form to the OpenID Connect endpoint path with the Authorization header auth (none
// when empty) and returns the status and the JSON answer.
func (e *signInEnv) post(t *testing.T, path, auth string, form url.Values) (int, map[string]any) {
	t.Helper()
	return postTo(t, e.issuer, path, auth, form)
}

// postTo is post at the issuer given.
func postTo(t *testing.T, issuer, path, auth string, form url.Values) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, issuer+"/protocol/openid-connect"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	st, _, m := sendReq(t, req)
	return st, m
}

// sendReq sends req and returns the status, the headers and the JSON answer.
func sendReq(t *testing.T, req *http.Request) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, resp.Header, m
}

// tokenGrant posts a grant of the token endpoint as client, with form and extra fields; it
// returns the token answer, or the OAuth error code.
func (e *signInEnv) tokenGrant(t *testing.T, client string, form url.Values, extra ...string) (map[string]any, string) {
	t.Helper()
	for i := 0; i+1 < len(extra); i += 2 {
		form.Set(extra[i], extra[i+1])
	}
	st, m := e.postForm(t, "/token", client, form)
	if st != 200 {
		s, _ := m["error"].(string)
		return nil, s
	}
	return m, ""
}

// exchange redeems a code as client.
func (e *signInEnv) exchange(t *testing.T, client, code string, extra ...string) (map[string]any, string) {
	t.Helper()
	return e.tokenGrant(t, client, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {rpRedirect}}, extra...)
}

// userTokens signs the user in, in a browser of its own, for client and redeems the code: the
// tokens of a sign-in, for a test that needs no more of the browser.
func (e *signInEnv) userTokens(t *testing.T, client string) map[string]any {
	t.Helper()
	tok, errc := e.exchange(t, client, e.signInCode(t, browser(t), client))
	if errc != "" {
		t.Fatal(errc)
	}
	return tok
}

// pushAs sends a push to the front end at base with the access token, and returns the status
// and WWW-Authenticate.
func pushAs(t *testing.T, base, access string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/infra/notification/mp",
		strings.NewReader(`{"userId":"2020000001","type":"JML","data":{"class":"a","info":"b"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+access)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

// refresh uses a refresh token as client.
func (e *signInEnv) refresh(t *testing.T, client, rt string, extra ...string) (map[string]any, string) {
	t.Helper()
	return e.tokenGrant(t, client, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}, extra...)
}

// userinfo calls the userinfo endpoint of base with an access token and returns the status.
func userinfo(t *testing.T, issuer, access string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, issuer+"/protocol/openid-connect/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+access)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// authURL is an authorization request of client for the relying party's callback.
func (e *signInEnv) authURL(client, state string, extra ...string) string {
	v := url.Values{"client_id": {client}, "response_type": {"code"}, "redirect_uri": {rpRedirect},
		"scope": {"openid notification.mp"}, "state": {state}, "kc_idp_hint": {"local"}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return e.issuer + "/protocol/openid-connect/auth?" + v.Encode()
}

// signInCode signs b in to client (login when asked, consent when asked) and returns the code.
func (e *signInEnv) signInCode(t *testing.T, b *http.Client, client string, extra ...string) string {
	t.Helper()
	p := get(t, b, e.authURL(client, "st", extra...))
	if strings.Contains(p.body, `name="password"`) {
		p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	}
	if strings.Contains(p.body, `name="accept"`) {
		p = submit(t, b, p, url.Values{"accept": {"yes"}})
	}
	code := callback(t, p).Get("code")
	if code == "" {
		t.Fatalf("no code: %s", p.location)
	}
	return code
}

// noWrites fails when the store was changed since the last take.
func (e *signInEnv) noWrites(t *testing.T, what string) {
	t.Helper()
	if w := e.writes.take(); len(w) > 0 {
		t.Fatalf("%s changed the store: %v", what, w)
	}
}

// TestRefusedFlowStepsChangeNothing: a refused CSRF token or browser check ends the request:
// nothing is stored and no code is issued, for the login form, the consent form and the
// campus single sign-on's return.
func TestRefusedFlowStepsChangeNothing(t *testing.T) {
	e := newSignInEnv(t)

	t.Run("login form with a forged csrf, form_post", func(t *testing.T) {
		b := browser(t)
		login := get(t, b, e.authURL("portal", "st", "response_mode", "form_post"))
		e.writes.take()
		p := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}, "csrf": {"forged"}})
		if p.status != http.StatusForbidden || strings.Contains(p.body, `name="code"`) || strings.Contains(p.body, rpRedirect) {
			t.Fatalf("%d %s", p.status, p.body)
		}
		e.noWrites(t, "a refused login")
		// No session was made: the next authorization asks for the password.
		if again := get(t, b, e.authURL("portal", "st")); !strings.Contains(again.body, `name="password"`) {
			t.Fatalf("signed in by a refused login: %d", again.status)
		}
	})
	t.Run("consent form with a forged csrf", func(t *testing.T) {
		b := browser(t)
		login := get(t, b, e.authURL("portal", "st"))
		consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
		if !strings.Contains(consent.body, `name="accept"`) {
			t.Fatalf("no consent page: %d", consent.status)
		}
		e.writes.take()
		p := submit(t, b, consent, url.Values{"accept": {"yes"}, "csrf": {"forged"}})
		if p.status != http.StatusForbidden || p.location != "" || strings.Contains(p.body, "code=") {
			t.Fatalf("%d %q", p.status, p.location)
		}
		e.noWrites(t, "a refused consent")
		// The consent was not stored: it is asked again.
		if again := get(t, b, e.authURL("portal", "st")); !strings.Contains(again.body, `name="accept"`) {
			t.Fatalf("consent stored by a refused form: %d %q", again.status, again.location)
		}
	})
	t.Run("consent form from another browser", func(t *testing.T) {
		b := browser(t)
		login := get(t, b, e.authURL("portal", "st"))
		consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
		e.writes.take()
		p := submit(t, browser(t), consent, url.Values{"accept": {"yes"}})
		if p.status != http.StatusForbidden || p.location != "" {
			t.Fatalf("%d %q", p.status, p.location)
		}
		e.noWrites(t, "a consent from another browser")
	})
	t.Run("single sign-on return in another browser", func(t *testing.T) {
		b := browser(t)
		casForm := get(t, b, e.authURL("portal", "st", "kc_idp_hint", "cas"))
		// Sign in at CAS without following its redirect back, to replay that in another browser.
		stop := &http.Client{Jar: b.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		back := submit(t, stop, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}})
		if back.status != http.StatusFound || !strings.Contains(back.location, "ticket=") {
			t.Fatalf("CAS answer: %d %q", back.status, back.location)
		}
		e.writes.take()
		p := get(t, browser(t), back.location)
		if p.status != http.StatusForbidden || p.location != "" {
			t.Fatalf("%d %q", p.status, p.location)
		}
		e.noWrites(t, "a single sign-on return in another browser")
		// The ticket was not even validated: the right browser still completes with it.
		if ok := get(t, b, back.location); !strings.Contains(ok.body, `name="accept"`) {
			t.Fatalf("the right browser: %d %q", ok.status, ok.location)
		}
	})
	t.Run("a sealed request altered or answered twice", func(t *testing.T) {
		b := browser(t)
		login := get(t, b, e.authURL("trusted", "st"))
		m := formAction.FindStringSubmatch(login.body)
		if m == nil {
			t.Fatal("no form")
		}
		action := strings.ReplaceAll(m[1], "&amp;", "&")
		i := strings.Index(action, "req=") + len("req=") + 10
		flipped := action[:i] + string("AB"[(strings.IndexByte("AB", action[i])+1)%2]) + action[i+1:]
		altered := strings.Replace(login.body, m[1], flipped, 1)
		p := submit(t, b, page{status: 200, body: altered, url: login.url}, url.Values{"username": {userID}, "password": {userPass}})
		if p.status != http.StatusBadRequest || p.location != "" {
			t.Fatalf("altered request: %d %q", p.status, p.location)
		}
		first := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
		if callback(t, first).Get("code") == "" {
			t.Fatal("no code")
		}
		again := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
		if again.status != http.StatusBadRequest || again.location != "" || !strings.Contains(again.body, "already finished") {
			t.Fatalf("request answered twice: %d %q", again.status, again.location)
		}
	})
}

// TestUnauthenticatedAuthRequestsStoreNothing: an authorization request no one has signed in
// to travels sealed with the browser and costs no storage.
func TestUnauthenticatedAuthRequestsStoreNothing(t *testing.T) {
	e := newSignInEnv(t)
	e.writes.take()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i := range 2000 {
		resp, err := hc.Get(e.authURL("portal", "s"+strings.Repeat("x", i%100)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("authorization request %d: %d", i, resp.StatusCode)
		}
	}
	e.noWrites(t, "2,000 authorization requests")
}

// TestForeignClientChangesNothing: another client's code or refresh token, a wrong PKCE
// verifier or a scope not granted is refused and uses nothing up.
func TestForeignClientChangesNothing(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	verifier := oauth2.GenerateVerifier()
	code := e.signInCode(t, b, "portal", "code_challenge", oauth2.S256ChallengeFromVerifier(verifier), "code_challenge_method", "S256")

	if _, errc := e.exchange(t, "library", code, "code_verifier", verifier); errc != "invalid_grant" {
		t.Fatalf("another client's code: %q", errc)
	}
	if _, errc := e.exchange(t, "portal", code, "code_verifier", "wrong-"+verifier); errc != "invalid_grant" {
		t.Fatalf("wrong verifier: %q", errc)
	}
	tok, errc := e.exchange(t, "portal", code, "code_verifier", verifier)
	if errc != "" {
		t.Fatalf("the owner's exchange after refused ones: %q", errc)
	}
	rt := tok["refresh_token"].(string)

	if _, errc := e.refresh(t, "library", rt); errc != "invalid_grant" {
		t.Fatalf("another client's refresh token: %q", errc)
	}
	if _, errc := e.refresh(t, "portal", rt, "scope", "openid fake_api"); errc != "invalid_scope" {
		t.Fatalf("a scope not granted: %q", errc)
	}
	next, errc := e.refresh(t, "portal", rt)
	if errc != "" {
		t.Fatalf("the owner's refresh after refused ones: %q", errc)
	}
	if _, errc := e.refresh(t, "portal", next["refresh_token"].(string)); errc != "" {
		t.Fatalf("the family was revoked by a refused refresh: %q", errc)
	}

	// Consuming is atomic: of simultaneous exchanges of one code, exactly one wins, and the
	// others, being replays, revoke what it issued.
	code = e.signInCode(t, b, "portal")
	won := successes(8, func() (map[string]any, string) { return e.exchange(t, "portal", code) })
	if len(won) != 1 {
		t.Fatalf("%d exchanges of one code succeeded", len(won))
	}
	if _, errc := e.refresh(t, "portal", won[0]["refresh_token"].(string)); errc != "invalid_grant" {
		t.Fatalf("the tokens of a replayed code live on: %q", errc)
	}

	// The same for simultaneous refreshes of one refresh token.
	tok, errc = e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	won = successes(8, func() (map[string]any, string) { return e.refresh(t, "portal", tok["refresh_token"].(string)) })
	if len(won) != 1 {
		t.Fatalf("%d refreshes with one refresh token succeeded", len(won))
	}
}

// successes runs grant n times at once and returns the answers that succeeded.
func successes(n int, grant func() (map[string]any, string)) []map[string]any {
	var mu sync.Mutex
	var won []map[string]any
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if tok, errc := grant(); errc == "" {
				mu.Lock()
				won = append(won, tok)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return won
}

// TestCodeReplayEndsOnlyThatClientsSession: as in Keycloak, a replayed code revokes the tokens
// it issued, at once (userinfo 401, introspection inactive), and leaves the user signed in to
// every other application.
func TestCodeReplayEndsOnlyThatClientsSession(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	code := e.signInCode(t, b, "portal")
	portal, errc := e.exchange(t, "portal", code)
	if errc != "" {
		t.Fatal(errc)
	}
	library, errc := e.exchange(t, "library", e.signInCode(t, b, "library"))
	if errc != "" {
		t.Fatal(errc)
	}
	access := portal["access_token"].(string)
	if st := userinfo(t, e.issuer, access); st != 200 { // verified and cached
		t.Fatalf("userinfo: %d", st)
	}
	if _, errc := e.exchange(t, "portal", code); errc != "invalid_grant" {
		t.Fatalf("replay: %q", errc)
	}
	if st := userinfo(t, e.issuer, access); st != http.StatusUnauthorized {
		t.Fatalf("the replayed code's access token at userinfo: %d", st)
	}
	if _, m := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {access}}); m["active"] != false {
		t.Fatalf("the replayed code's access token introspects %v", m)
	}
	if _, errc := e.refresh(t, "portal", portal["refresh_token"].(string)); errc != "invalid_grant" {
		t.Fatalf("the replayed code's refresh token: %q", errc)
	}
	// The other application's tokens and the sign-in session live on.
	if st := userinfo(t, e.issuer, library["access_token"].(string)); st != 200 {
		t.Fatalf("another application's access token: %d", st)
	}
	if _, errc := e.refresh(t, "library", library["refresh_token"].(string)); errc != "" {
		t.Fatalf("another application's refresh: %q", errc)
	}
	p := get(t, b, e.authURL("portal", "again"))
	if q := callback(t, p); q.Get("code") == "" {
		t.Fatalf("the user was signed out: %v", q)
	}
}

// TestIntrospectionAnswersAsTheBearerCheck: after logout a token is inactive at once; only its
// own client or one with the introspect permission learns more than {"active": false}.
func TestIntrospectionAnswersAsTheBearerCheck(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	access, rt := tok["access_token"].(string), tok["refresh_token"].(string)
	for _, tk := range []string{access, rt} {
		if _, m := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {tk}}); m["active"] != true || m["client_id"] != "portal" {
			t.Fatalf("own client: %v", m)
		}
		if _, m := e.postForm(t, "/token/introspect", "gateway", url.Values{"token": {tk}}); m["active"] != true || m["userid"] != userID {
			t.Fatalf("a client with the introspect permission: %v", m)
		}
		if st, m := e.postForm(t, "/token/introspect", "library", url.Values{"token": {tk}}); st != 200 || len(m) != 1 || m["active"] != false {
			t.Fatalf("another client learns %d %v", st, m)
		}
	}
	if st := userinfo(t, e.issuer, access); st != 200 {
		t.Fatalf("userinfo: %d", st)
	}
	if out := get(t, b, e.issuer+"/protocol/openid-connect/logout?redirect_uri="+url.QueryEscape(rpRedirect)); out.status != http.StatusFound {
		t.Fatalf("logout: %d", out.status)
	}
	for _, tk := range []string{access, rt} {
		if _, m := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {tk}}); m["active"] != false {
			t.Fatalf("after logout: %v", m)
		}
	}
	if st := userinfo(t, e.issuer, access); st != http.StatusUnauthorized {
		t.Fatalf("userinfo after logout: %d", st)
	}
}

// replica starts another front end on the same NATS and store, with clients.
func (e *signInEnv) replica(t *testing.T, clients []config.Client) string {
	t.Helper()
	return e.replicaAt(t, clients, e.deps.Now)
}

// replicaAt is replica, with the clock now.
func (e *signInEnv) replicaAt(t *testing.T, clients []config.Client, now func() time.Time) string {
	t.Helper()
	cfg := *e.cfg
	cfg.OAuth.Clients = clients
	api, err := service.NewAPI(context.Background(), &cfg, service.Deps{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	ts := httptest.NewServer(api.Server)
	t.Cleanup(ts.Close)
	return ts.URL + "/auth/realms/campus"
}

// TestRevocationsReachEveryReplica: a logout on one front end refuses the session's tokens on
// another (shared through NATS, not process memory).
func TestRevocationsReachEveryReplica(t *testing.T) {
	e := newSignInEnv(t)
	other := e.replica(t, e.cfg.OAuth.Clients)
	b := browser(t)
	tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	access := tok["access_token"].(string)
	if st := userinfo(t, other, access); st != 200 {
		t.Fatalf("userinfo on the other replica: %d", st)
	}
	get(t, b, e.issuer+"/protocol/openid-connect/logout?redirect_uri="+url.QueryEscape(rpRedirect))
	embeddedtest.Eventually(t, 5*time.Second, "the other replica refuses the token of an ended session", func() bool {
		return userinfo(t, other, access) == http.StatusUnauthorized
	})
}

// TestRemovedClientsTokensRefused: once a client is removed from the configuration, its
// tokens stop working on every interface, though they have not expired.
func TestRemovedClientsTokensRefused(t *testing.T) {
	e := newSignInEnv(t)
	tok := e.userTokens(t, "portal")
	access := tok["access_token"].(string)
	kept := slices.DeleteFunc(slices.Clone(e.cfg.OAuth.Clients), func(c config.Client) bool { return c.ClientID == "portal" })
	issuer := e.replica(t, kept)
	if st := userinfo(t, issuer, access); st != http.StatusUnauthorized {
		t.Fatalf("userinfo: %d", st)
	}
	if st, _ := pushAs(t, strings.TrimSuffix(issuer, "/auth/realms/campus"), access); st != http.StatusUnauthorized {
		t.Fatalf("push: %d", st)
	}
	ireq, _ := http.NewRequest(http.MethodPost, issuer+"/protocol/openid-connect/token/introspect", strings.NewReader(url.Values{"token": {access}}.Encode()))
	ireq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	ireq.SetBasicAuth("gateway", rpSecret)
	resp, err := http.DefaultClient.Do(ireq)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if m["active"] != false {
		t.Fatalf("introspection: %v", m)
	}
	// The same token is still good where the client is registered.
	if st := userinfo(t, e.issuer, access); st != 200 {
		t.Fatalf("userinfo where the client is registered: %d", st)
	}
}

// TestLogoutClientWithARevokedRefreshToken: a refresh token revoked by RFC 7009 revocation
// (its family revoked) must be dead everywhere: the client's server-side logout with it is
// invalid_grant and ends nothing, as for a used or unknown token.
func TestLogoutClientWithARevokedRefreshToken(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	rt := tok["refresh_token"].(string)
	if st, m := e.postForm(t, "/revoke", "portal", url.Values{"token": {rt}}); st != 200 {
		t.Fatalf("revoke: %d %v", st, m)
	}
	if _, errc := e.refresh(t, "portal", rt); errc != "invalid_grant" {
		t.Fatalf("refresh of the revoked token: %q", errc)
	}
	if st, m := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {rt}}); st != 200 || m["active"] != false {
		t.Fatalf("introspection of the revoked token: %d %v", st, m)
	}
	st, m := e.post(t, "/logout", "", url.Values{"client_id": {"portal"}, "client_secret": {rpSecret}, "refresh_token": {rt}})
	if st != http.StatusBadRequest || m["error"] != "invalid_grant" {
		t.Errorf("server-side logout with a revoked refresh token: %d %v; want 400 invalid_grant", st, m)
	}
	if q := callback(t, get(t, b, e.authURL("portal", "pn", "prompt", "none"))); q.Get("code") == "" {
		t.Errorf("the revoked token ended the user's session: prompt=none answered %v", q)
	}
}

// TestServerSideLogoutWithAnExpiredRefreshToken: Keycloak's server-side logout (POST
// client_id, client_secret, refresh_token, as python-keycloak's logout() sends) does not check
// the refresh token's expiry (LogoutEndpoint.logoutToken: verifyRefreshToken(..., false)): the
// session it names ends as long as it lives. A client's refresh token expires RefreshTTL after
// its last refresh, while the sign-in session lives on as long as another application uses it;
// the application whose token expired must still be able to sign its user out.
func TestServerSideLogoutWithAnExpiredRefreshToken(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	portal, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	// Twenty minutes later the user opens the library in the same browser (single sign-on).
	e.clock.Advance(20 * time.Minute)
	library, errc := e.exchange(t, "library", e.signInCode(t, b, "library"))
	if errc != "" {
		t.Fatal(errc)
	}
	// Fifteen more minutes: the portal's refresh token (30 min) has expired, the session has not:
	// the library refreshes.
	e.clock.Advance(15 * time.Minute)
	library, errc = e.refresh(t, "library", library["refresh_token"].(string))
	if errc != "" {
		t.Fatalf("the session should be alive: %s", errc)
	}
	// The user presses "sign out" in the portal; its back end ends the session.
	st, m := e.post(t, "/logout", "", url.Values{"client_id": {"portal"}, "client_secret": {rpSecret},
		"refresh_token": {portal["refresh_token"].(string)}})
	if st != http.StatusNoContent {
		t.Errorf("server-side logout with the portal's expired refresh token of a live session: %d %v (Keycloak: 204, the session ends)", st, m)
	}
	if _, errc := e.refresh(t, "library", library["refresh_token"].(string)); errc != "invalid_grant" {
		t.Errorf("the session lives on after the portal's logout: the library still refreshes (%q)", errc)
	}
	if q := callback(t, get(t, b, e.authURL("portal", "pn", "prompt", "none"))); q.Get("error") != "login_required" {
		t.Errorf("prompt=none after the portal's logout still signs the browser in: %v", q)
	}
}

// longSession is a user signed in to the portal and the library in one browser, with sessions
// of three days, as the server-side logout tests below need: the portal's refresh token expires
// in 30 minutes, while the library keeps the session in use.
type longSession struct {
	e               *signInEnv
	b               *http.Client
	portal, library map[string]any
}

func newLongSession(t *testing.T) *longSession {
	t.Helper()
	l := &longSession{e: newSignInEnvWith(t, nil, func(c *config.Config) { c.OAuth.SessionTTL = config.Duration(72 * time.Hour) }), b: browser(t)}
	var errc string
	if l.portal, errc = l.e.exchange(t, "portal", l.e.signInCode(t, l.b, "portal")); errc != "" {
		t.Fatal(errc)
	}
	if l.library, errc = l.e.exchange(t, "library", l.e.signInCode(t, l.b, "library")); errc != "" {
		t.Fatal(errc)
	}
	return l
}

// use keeps the session in use through the library for hours: a refresh every twenty minutes.
func (l *longSession) use(t *testing.T, hours int) {
	t.Helper()
	for range hours * 3 {
		l.e.clock.Advance(20 * time.Minute)
		var errc string
		if l.library, errc = l.e.refresh(t, "library", l.library["refresh_token"].(string)); errc != "" {
			t.Fatalf("the session should be alive: %s", errc)
		}
	}
}

func (l *longSession) sweep(t *testing.T) {
	t.Helper()
	if _, err := l.e.store.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// portalLogout is the portal's back end signing its user out with its refresh token.
func (l *longSession) portalLogout(t *testing.T) (int, map[string]any) {
	t.Helper()
	return l.e.post(t, "/logout", "", url.Values{"client_id": {"portal"}, "client_secret": {rpSecret},
		"refresh_token": {l.portal["refresh_token"].(string)}})
}

// libraryRefresh is the error of the library's refresh ("" if it refreshed).
func (l *longSession) libraryRefresh(t *testing.T) string {
	t.Helper()
	var errc string
	l.library, errc = l.e.refresh(t, "library", l.library["refresh_token"].(string))
	return errc
}

// portalLogoutEndsSession checks that the portal's server-side logout, with its refresh token
// (of which token says what), answers 204 and ends the session: the library can no longer
// refresh in it.
func (l *longSession) portalLogoutEndsSession(t *testing.T, token string) {
	t.Helper()
	if st, m := l.portalLogout(t); st != http.StatusNoContent {
		t.Errorf("server-side logout with the portal's refresh token, %s: %d %v (Keycloak: 204, the session ends)", token, st, m)
	}
	if errc := l.libraryRefresh(t); errc != "invalid_grant" {
		t.Errorf("the session lives on after the portal's logout: the library still refreshes (%q)", errc)
	}
}

// TestServerSideLogoutWithARefreshTokenExpiredDaysAgo: as
// TestServerSideLogoutWithAnExpiredRefreshToken, with sessions that last three days: the
// portal's refresh token expired more than a day ago, and the store's sweep has run since, while
// the library kept the session alive. The portal's back end still signs its user out.
func TestServerSideLogoutWithARefreshTokenExpiredDaysAgo(t *testing.T) {
	l := newLongSession(t)
	l.use(t, 30)
	l.sweep(t)
	l.portalLogoutEndsSession(t, "expired 29 hours ago, of a live session")
}

// TestServerSideLogoutWithATokenOfARenewedSession: as
// TestServerSideLogoutWithARefreshTokenExpiredDaysAgo, but two days on the user signs in again in
// the same browser (prompt=login), which renews the session in place and moves its end two days
// on. More than a day past the session's first end, after the sweep, the portal's back end signs
// its user out with its expired refresh token: the session still lives, and ends.
func TestServerSideLogoutWithATokenOfARenewedSession(t *testing.T) {
	l := newLongSession(t)
	l.use(t, 48)
	var errc string
	if l.library, errc = l.e.exchange(t, "library", l.e.signInCode(t, l.b, "library", "prompt", "login")); errc != "" {
		t.Fatal(errc)
	}
	l.use(t, 50) // the portal's token's first end (72 hours) is more than a day past
	l.sweep(t)
	l.portalLogoutEndsSession(t, "of a live (renewed) session")
}

// TestServerSideLogoutWithARevokedGrantsTokenAfterTheSweep: the user revokes the portal's access
// on the account page; the portal's refresh token is revoked (its server-side logout answers
// invalid_grant). The token's record is kept while its session can live, and so is the
// revocation: after the sweep, 60 hours on, the revoked token still ends nothing.
func TestServerSideLogoutWithARevokedGrantsTokenAfterTheSweep(t *testing.T) {
	l := newLongSession(t)
	l.e.revokeOnAccountPage(t, l.b, "portal")
	if st, m := l.portalLogout(t); st != http.StatusBadRequest {
		t.Fatalf("logout with the revoked token right after the revocation: %d %v, want 400 invalid_grant", st, m)
	}
	l.use(t, 60)
	l.sweep(t)
	st, m := l.portalLogout(t)
	if errc := l.libraryRefresh(t); errc != "" {
		t.Errorf("the portal's revoked refresh token ended the live session (logout answered %d %v); the library's refresh now: %q", st, m, errc)
	}
	if st != http.StatusBadRequest {
		t.Errorf("server-side logout with a refresh token of a revoked grant, after the sweep: %d %v, want 400 invalid_grant", st, m)
	}
}

// TestServerSideLogoutOfAnEndedSession: Keycloak answers the server-side logout 204 when
// the refresh token's session has already ended (signed out in the browser, or idle): there is
// nothing left to end (LogoutEndpoint.logoutToken: "if (userSessionModel != null) logout"). A
// 400 invalid_grant would be raised by python-keycloak's logout() as KeycloakPostError: the
// application's own sign-out would fail for a user who is already signed out.
func TestServerSideLogoutOfAnEndedSession(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	// The user signs out in the browser (RP-initiated logout with the portal's ID token).
	p := get(t, b, e.issuer+"/protocol/openid-connect/logout?"+url.Values{"id_token_hint": {tok["id_token"].(string)},
		"post_logout_redirect_uri": {rpRedirect}}.Encode())
	if p.status != http.StatusFound {
		t.Fatalf("browser logout: %d %q", p.status, p.location)
	}
	if _, errc := e.refresh(t, "portal", tok["refresh_token"].(string)); errc != "invalid_grant" {
		t.Fatalf("the session should have ended: %q", errc)
	}
	// The portal's back end then ends its session too, as python-keycloak's logout() does.
	st, m := e.post(t, "/logout", "", url.Values{"client_id": {"portal"}, "client_secret": {rpSecret},
		"refresh_token": {tok["refresh_token"].(string)}})
	if st != http.StatusNoContent {
		t.Errorf("server-side logout of a session that already ended: %d %v (Keycloak: 204)", st, m)
	}
}

// TestClientEndpointsRefuseRepeatedParameters: RFC 6749 §3.2, which RFC 7009 and RFC 7662
// build on: a parameter is given once. token=junk&token=<refresh token> at the revocation
// endpoint is invalid_request, and the refresh token stays as it was, rather than 200 (which
// tells the client it is revoked) with the token left active; introspection refuses it too
// rather than answer about the first token alone, and so do the token endpoint (a refresh
// naming two tokens) and Keycloak's logout by a client's back end (two sessions).
func TestClientEndpointsRefuseRepeatedParameters(t *testing.T) {
	e := newSignInEnv(t)
	tok := e.userTokens(t, "portal")
	rt := tok["refresh_token"].(string)
	for _, tt := range []struct {
		path string
		form url.Values
	}{
		{"/revoke", url.Values{"token": {"junk", rt}}},
		{"/token/introspect", url.Values{"token": {"junk", rt}}},
		{"/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt, "junk"}}},
		{"/logout", url.Values{"refresh_token": {rt, "junk"}}},
	} {
		if st, m := e.postForm(t, tt.path, "portal", tt.form); st != 400 || m["error"] != "invalid_request" {
			t.Errorf("%s with a parameter given twice: %d %v, want 400 invalid_request", tt.path, st, m)
		}
	}
	if _, m := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {rt}}); m["active"] != true {
		t.Errorf("after the refused requests the refresh token reads %v, want it active as before", m)
	}
}

// TestUserinfoWithoutOpenIDScope: userinfo refuses a valid token issued without the openid
// scope with 403 insufficient_scope, in OAuth's shape, naming the scope it needs (RFC 6750
// §3.1; Keycloak answers so since version 20), so that a relying party asks for scope openid
// rather than for a new token of the same kind, as a 401 tells it to. A token with the scope
// is answered, and one that is no token at all is 401.
func TestUserinfoWithoutOpenIDScope(t *testing.T) {
	e := newSignInEnv(t)
	get := func(tok string) (int, http.Header, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.issuer+"/protocol/openid-connect/userinfo", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		return sendReq(t, req)
	}
	cc, _ := e.tokenGrant(t, "gateway", url.Values{"grant_type": {"client_credentials"}})
	st, h, m := get(cc["access_token"].(string))
	if st != http.StatusForbidden || m["error"] != "insufficient_scope" ||
		!strings.Contains(h.Get("WWW-Authenticate"), `error="insufficient_scope"`) || !strings.Contains(h.Get("WWW-Authenticate"), `scope="openid"`) {
		t.Errorf("a client credentials token (no openid scope): %d %v, WWW-Authenticate %q; want 403 insufficient_scope naming scope openid",
			st, m, h.Get("WWW-Authenticate"))
	}
	if st, _, m := get(e.userTokens(t, "portal")["access_token"].(string)); st != http.StatusOK || m["sub"] == nil {
		t.Errorf("a user's token with scope openid: %d %v, want 200 with sub", st, m)
	}
	if st, h, _ := get("not-a-token"); st != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Errorf("no token at all: %d, WWW-Authenticate %q; want 401 invalid_token", st, h.Get("WWW-Authenticate"))
	}
}

// TestRevokeAccessToken: RFC 7009 revocation of an access token, as Keycloak does it and as
// oidc-client-ts asks for at sign-out by default (revokeTokenTypes access_token, then
// refresh_token, stopping at the first refusal): the token is refused from then on by every
// front end, at the data interfaces, userinfo and introspection, while the sign-in session and
// the refresh token stay. Another client cannot revoke it, and its attempt changes nothing.
func TestRevokeAccessToken(t *testing.T) {
	e := newSignInEnv(t)
	other := e.replica(t, e.cfg.OAuth.Clients)
	otherBase := strings.TrimSuffix(other, "/auth/realms/campus")

	// A client credentials token, used on both front ends before its revocation.
	cc, errc := e.tokenGrant(t, "gateway", url.Values{"grant_type": {"client_credentials"}})
	if errc != "" {
		t.Fatal(errc)
	}
	access := cc["access_token"].(string)
	for _, base := range []string{e.base, otherBase} {
		if st, _ := pushAs(t, base, access); st != 200 {
			t.Fatalf("push with a fresh client credentials token at %s: %d", base, st)
		}
	}
	if st, m := e.postForm(t, "/revoke", "portal", url.Values{"token": {access}}); st != 400 || m["error"] != "invalid_request" {
		t.Errorf("another client revoking the token: %d %v, want 400 invalid_request", st, m)
	}
	if st, _ := pushAs(t, e.base, access); st != 200 {
		t.Fatalf("after another client's refused revocation the token pushes: %d, want 200", st)
	}
	if st, m := e.postForm(t, "/revoke", "gateway", url.Values{"token": {access}, "token_type_hint": {"access_token"}}); st != 200 {
		t.Fatalf("revoking its own access token: %d %v, want 200", st, m)
	}
	// The front end that revoked it refuses it at once; the other, which read the token as not
	// revoked before, learns of the revocation from the bucket's watch (RFC 7009 §2.2 allows such
	// a propagation delay).
	if st, h := pushAs(t, e.base, access); st != 401 || !strings.Contains(h, "revoked") {
		t.Errorf("push with the revoked token at the front end that revoked it: %d %q, want 401 naming the revocation", st, h)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the other front end refuses the revoked token, naming the revocation", func() bool {
		st, h := pushAs(t, otherBase, access)
		return st == 401 && strings.Contains(h, "revoked")
	})
	if _, m := e.postForm(t, "/token/introspect", "gateway", url.Values{"token": {access}}); m["active"] != false {
		t.Errorf("introspection of the revoked token: %v, want inactive", m)
	}

	// A user's access token: refused once revoked; its refresh token still works.
	tok := e.userTokens(t, "portal")
	ua, rt := tok["access_token"].(string), tok["refresh_token"].(string)
	if st, m := e.postForm(t, "/revoke", "portal", url.Values{"token": {ua}}); st != 200 {
		t.Fatalf("revoking a user's access token: %d %v, want 200", st, m)
	}
	for _, iss := range []string{e.issuer, other} {
		if st, _ := postTo(t, iss, "/userinfo", "Bearer "+ua, url.Values{}); st != 401 {
			t.Errorf("userinfo with the revoked user's token at %s: %d, want 401", iss, st)
		}
	}
	again, errc := e.refresh(t, "portal", rt)
	if errc != "" {
		t.Fatalf("the refresh token after its access token's revocation: %s, want new tokens (Keycloak keeps the session)", errc)
	}
	if st, m := e.post(t, "/userinfo", "Bearer "+again["access_token"].(string), url.Values{}); st != 200 {
		t.Errorf("userinfo with the token refreshed after the revocation: %d %v", st, m)
	}
}

// TestRefreshedIDTokenKeepsOriginalAuthTime: OpenID Connect Core 1.0 §12.2: an ID token
// issued in a refresh "if the ID Token contains an auth_time Claim, its value MUST represent
// the time of the original authentication - not the time that the new ID token is issued".
// The portal's grant came from the sign-in at T0; a later sign-in at T1 in the same browser for
// another application (prompt=login) must not change the auth_time of the portal's refreshed
// ID tokens. Relying parties that check it (oidc-client-ts: "auth_time in id_token does not
// match original auth_time"; Spring Security 6.3 to 6.5: "Invalid authenticated at time")
// drop the user's session at the next refresh.
func TestRefreshedIDTokenKeepsOriginalAuthTime(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	first, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	original := jwtClaims(t, first["id_token"].(string))["auth_time"]

	e.clock.Advance(2 * time.Minute)
	// Another application asks for a fresh sign-in in the same browser.
	if _, errc := e.exchange(t, "library", e.signInCode(t, b, "library", "prompt", "login")); errc != "" {
		t.Fatal(errc)
	}

	e.clock.Advance(time.Minute)
	refreshed, errc := e.refresh(t, "portal", first["refresh_token"].(string))
	if errc != "" {
		t.Fatal(errc)
	}
	if got := jwtClaims(t, refreshed["id_token"].(string))["auth_time"]; got != original {
		t.Fatalf("the portal's refreshed ID token has auth_time %v, the original authentication was at %v", got, original)
	}
}

// TestCodeReplayWithAnotherRedirectURIRevokes: RFC 6749 §4.1.2 "If an authorization code
// is used more than once, the authorization server MUST deny the request and SHOULD revoke (when
// possible) all tokens previously issued based on that authorization code"; exchangeCode's own
// doc promises "a code used before is a replay, which revokes the token family". Keycloak
// detects the reuse before it looks at redirect_uri: the same authenticated client presenting
// the used code with another redirect_uri is a replay too, and the tokens of the code die.
func TestCodeReplayWithAnotherRedirectURIRevokes(t *testing.T) {
	e := newSignInEnv(t)
	code := e.signInCode(t, browser(t), "portal")
	tok, errc := e.exchange(t, "portal", code)
	if errc != "" {
		t.Fatal(errc)
	}
	access := tok["access_token"].(string)
	if st := userinfo(t, e.issuer, access); st != http.StatusOK {
		t.Fatalf("userinfo before the replay: %d", st)
	}
	_, errc = e.tokenGrant(t, "portal", url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {"https://app.example.edu/other"}})
	if errc != "invalid_grant" {
		t.Fatalf("replay: %q", errc)
	}
	if st := userinfo(t, e.issuer, access); st != http.StatusUnauthorized {
		t.Errorf("the replayed code's access token still works at userinfo: %d", st)
	}
	if _, errc := e.refresh(t, "portal", tok["refresh_token"].(string)); errc != "invalid_grant" {
		t.Errorf("the replayed code's refresh token still refreshes: %q", errc)
	}
}

// TestClientSecretNeverPutInAURL: a client's back end posts its credentials to the logout
// endpoint without a refresh token, or to the authorization endpoint, with no cookie. Neither
// answer copies client_secret into a URL, where a GET would carry it into every proxy's access
// log: the logout is a client's, refused for its missing refresh token; the authorization
// request goes on as a GET without the secret.
func TestClientSecretNeverPutInAURL(t *testing.T) {
	e := newSignInEnv(t)
	stop := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(endpoint string, form url.Values) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.issuer+"/protocol/openid-connect/"+endpoint, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := stop.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, resp.Header, b.String()
	}
	status, header, body := post("logout", url.Values{"client_id": {"portal"}, "client_secret": {rpSecret}})
	if loc := header.Get("Location"); strings.Contains(loc, rpSecret) || strings.Contains(body, rpSecret) {
		t.Fatalf("logout: the answer (%d) carries the client secret: Location %q", status, loc)
	}
	if status != http.StatusBadRequest || !strings.Contains(body, "invalid_request") {
		t.Fatalf("logout with a client's credentials and no refresh token: %d %s, want 400 invalid_request", status, body)
	}
	status, header, body = post("auth", url.Values{"client_id": {"portal"}, "client_secret": {rpSecret}, "response_type": {"code"},
		"scope": {"openid"}, "redirect_uri": {rpRedirect}, "state": {"s"}})
	loc := header.Get("Location")
	if status != http.StatusSeeOther || strings.Contains(loc, rpSecret) || strings.Contains(body, rpSecret) {
		t.Fatalf("auth: %d, Location %q; want 303 without the client secret", status, loc)
	}
	if u, err := url.Parse(loc); err != nil || u.Query().Get("client_id") != "portal" || u.Query().Get("state") != "s" {
		t.Fatalf("auth: Location %q lost the request's parameters", loc)
	}
}

// TestLoopbackRedirectAnyPort: a native application (a desktop tool, a CLI) registers the
// loopback redirect http://127.0.0.1/callback and, at sign-in, listens on whatever port the OS
// gives it. RFC 8252 §7.3 ("The authorization server MUST allow any port to be specified at the
// time of the request for loopback IP redirect URIs"), RFC 9700 §2.1 (exact matching "except for
// port numbers in localhost redirection URIs of native apps") and Keycloak (RedirectUtils drops
// the port of http://127.0.0.1 and http://localhost before matching) all take it; this service
// answers the invalid redirect_uri page, so the application can never sign a user in.
func TestLoopbackRedirectAnyPort(t *testing.T) {
	const registered, asked = "http://127.0.0.1/callback", "http://127.0.0.1:53682/callback"
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		c.OAuth.Clients = append(c.OAuth.Clients, config.Client{ClientID: "desktop", ClientSecret: rpSecret,
			Grants: []string{"authorization_code"}, Scopes: []string{"openid"}, RedirectURIs: []string{registered}, SkipConsent: true})
	})
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), "http://127.0.0.1:53682/") {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	p := get(t, b, e.issuer+"/protocol/openid-connect/auth?"+url.Values{"client_id": {"desktop"}, "response_type": {"code"},
		"redirect_uri": {asked}, "scope": {"openid"}, "state": {"st"}, "kc_idp_hint": {"local"}}.Encode())
	if p.status != http.StatusOK || !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("authorization request with the loopback redirect on an ephemeral port refused: %d %s", p.status, p.body[:min(len(p.body), 300)])
	}
	p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, asked+"?") {
		t.Fatalf("not sent back to the port the application listens on: %d %q", p.status, p.location)
	}
	u, _ := url.Parse(p.location)
	if st, m := e.postForm(t, "/token", "desktop", url.Values{"grant_type": {"authorization_code"}, "code": {u.Query().Get("code")},
		"redirect_uri": {asked}}); st != http.StatusOK {
		t.Fatalf("code exchange: %d %v", st, m)
	}
}
