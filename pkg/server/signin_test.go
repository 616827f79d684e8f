package server_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.mongodb.org/mongo-driver/event"
	"golang.org/x/oauth2"

	"github.com/campus-it/ucs/pkg/cas/castest"
	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

const (
	rpRedirect = "https://app.example.edu/cb"
	rpSecret   = "relying-party-secret-01"
	userID     = "2020000001"
	userPass   = "correct horse battery"
)

type signInEnv struct {
	issuer string
	base   string
	cas    *castest.Server
	clock  *clocktest.Clock
	writes *writeRecorder
	cfg    *config.Config
	deps   service.Deps
	store  *store.Store
}

// writeRecorder keeps every command that changes the store.
type writeRecorder struct {
	mu   sync.Mutex
	cmds []string
}

func (w *writeRecorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "insert", "update", "delete", "findAndModify":
			w.mu.Lock()
			w.cmds = append(w.cmds, e.CommandName+" "+e.Command.Lookup(e.CommandName).StringValue())
			w.mu.Unlock()
		}
	}}
}

// take returns the writes since the last take.
func (w *writeRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.cmds
	w.cmds = nil
	return out
}

func newSignInEnv(t *testing.T) *signInEnv {
	t.Helper()
	return newSignInEnvLogged(t, nil)
}

// newSignInEnvLogged is newSignInEnv with the service logging to logger (nil: nowhere), and
// the configuration changed by change.
func newSignInEnvLogged(t *testing.T, logger *slog.Logger, change ...func(*config.Config)) *signInEnv {
	t.Helper()
	return newSignInEnvWith(t, logger, change...)
}

// newSignInEnvWith is newSignInEnvLogged with each change (nil: none) applied to the
// configuration before the service starts.
func newSignInEnvWith(t *testing.T, logger *slog.Logger, change ...func(*config.Config)) *signInEnv {
	t.Helper()
	return newSignInEnvMonitored(t, logger, nil, change...)
}

// newSignInEnvMonitored is newSignInEnvWith with monitor (nil: none) told of every MongoDB
// command the service starts, so that a test can hold one of them at a chosen moment.
func newSignInEnvMonitored(t *testing.T, logger *slog.Logger, monitor *event.CommandMonitor, change ...func(*config.Config)) *signInEnv {
	t.Helper()
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	f := embeddedtest.FerretDB(t)
	clk := clocktest.New(time.Now().Truncate(time.Second))
	// The campus sign-on keeps the same time as the service, as NTP makes it in production.
	casSrv := castest.New(map[string]string{"2020000042": "cas-password"}, castest.WithClock(clk.Now))
	t.Cleanup(casSrv.Close)
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	cfg := &config.Config{
		PublicURL: base,
		NATS:      config.NATS{URL: n.URL()},
		MongoDB:   config.MongoDB{URI: f.URI(), Database: embeddedtest.DBName(t)},
		OAuth: config.OAuth{
			IdentityProviders: config.IdentityProviders{Default: "local", CAS: config.CASProvider{URL: casSrv.URL()}, Local: config.LocalProvider{Enabled: true}},
			Clients: []config.Client{{ClientID: "portal", ClientSecret: rpSecret,
				Grants: []string{"authorization_code", "refresh_token"}, Scopes: []string{"openid", "notification.mp"},
				RedirectURIs: []string{rpRedirect}},
				{ClientID: "trusted", ClientSecret: rpSecret, Grants: []string{"authorization_code"},
					Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{rpRedirect}, SkipConsent: true},
				{ClientID: "library", ClientSecret: rpSecret, Grants: []string{"authorization_code", "refresh_token"},
					Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{rpRedirect}},
				{ClientID: "kiosk", ClientSecret: rpSecret, Grants: []string{"authorization_code"}, RefreshTokens: new(false), IDTokenAlg: "ES256",
					Scopes: []string{"openid"}, RedirectURIs: []string{rpRedirect}},
				{ClientID: "gateway", ClientSecret: rpSecret, Grants: []string{"client_credentials"},
					Scopes: []string{"notification.mp"}, Introspect: true}},
		},
		Directory: config.Directory{Users: []config.User{{UserID: userID, Password: userPass}}},
	}
	for _, f := range change {
		if f != nil {
			f(cfg)
		}
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleAPI); err != nil {
		t.Fatal(err)
	}
	writes := &writeRecorder{}
	mm := writes.monitor()
	if monitor != nil {
		started := mm.Started
		mm.Started = func(ctx context.Context, ev *event.CommandStartedEvent) { started(ctx, ev); monitor.Started(ctx, ev) }
	}
	deps := service.Deps{Now: clk.Now, MongoMonitor: mm, Logger: logger}
	api, err := service.NewAPI(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	ts.Config.Handler = api.Server
	ts.Start()
	t.Cleanup(ts.Close)
	return &signInEnv{issuer: base + "/auth/realms/campus", base: base, cas: casSrv, clock: clk, writes: writes, cfg: cfg, deps: deps, store: api.Store}
}

// browser is a user agent with cookies that stops at the relying party's callback.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), rpRedirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

var (
	formAction = regexp.MustCompile(`<form[^>]*action="([^"]+)"`)
	hidden     = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)"`)
)

type page struct {
	status   int
	body     string
	location string
	url      *url.URL
	ctype    string
}

func get(t *testing.T, b *http.Client, u string) page {
	t.Helper()
	resp, err := b.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, resp)
}

func read(t *testing.T, resp *http.Response) page {
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, body: string(body), location: resp.Header.Get("Location"), url: resp.Request.URL,
		ctype: resp.Header.Get("Content-Type")}
}

// submit posts the page's form with extra fields, as a person pressing its button would.
func submit(t *testing.T, b *http.Client, p page, fields url.Values) page {
	t.Helper()
	return submitAt(t, b, p, "", fields)
}

// submitAt is submit, the form posted to the front end at base ("": the page's own), as a load
// balancer may send it to another replica.
func submitAt(t *testing.T, b *http.Client, p page, base string, fields url.Values) page {
	t.Helper()
	m := formAction.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no form on page %d: %s", p.status, p.body)
	}
	action, _ := p.url.Parse(html.UnescapeString(m[1]))
	if base != "" {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		action.Host = u.Host
	}
	for _, h := range hidden.FindAllStringSubmatch(p.body, -1) {
		if fields.Get(h[1]) == "" {
			fields.Set(h[1], html.UnescapeString(h[2]))
		}
	}
	resp, err := b.PostForm(action.String(), fields)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, resp)
}

// callback is what the client's redirect_uri receives from p, a redirect back to it: 303 after
// a form (TestPostedSignInStepsRedirectWith303), 302 after a GET.
func callback(t *testing.T, p page) url.Values {
	t.Helper()
	if p.status != http.StatusFound && p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, rpRedirect) {
		t.Fatalf("not sent back to the client: %d %q %s", p.status, p.location, p.body)
	}
	u, _ := url.Parse(p.location)
	return u.Query()
}

type rp struct {
	provider *oidc.Provider
	conf     oauth2.Config
	verifier *oidc.IDTokenVerifier
}

func newRP(t *testing.T, e *signInEnv) *rp {
	ctx := context.Background()
	p, err := oidc.NewProvider(ctx, e.issuer)
	if err != nil {
		t.Fatal(err)
	}
	return &rp{provider: p, verifier: p.Verifier(&oidc.Config{ClientID: "portal", Now: e.clock.Now}), conf: oauth2.Config{
		ClientID: "portal", ClientSecret: rpSecret, Endpoint: p.Endpoint(), RedirectURL: rpRedirect,
		Scopes: []string{oidc.ScopeOpenID, "notification.mp"},
	}}
}

func random() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// TestSignInLocalAsRelyingParty drives the whole flow as a campus web application would:
// discovery, login form, consent, code exchange with PKCE, ID token verification, userid,
// userinfo, refresh with rotation, single sign-on on a second authorization, logout.
func TestSignInLocalAsRelyingParty(t *testing.T) {
	e := newSignInEnv(t)
	r := newRP(t, e)
	ctx := context.Background()
	b := browser(t)
	state, nonce, verifier := random(), random(), oauth2.GenerateVerifier()
	auth := r.conf.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("kc_idp_hint", "local"))

	login := get(t, b, auth)
	if login.status != 200 || !strings.Contains(login.body, `name="password"`) {
		t.Fatalf("login page: %d", login.status)
	}
	wrong := submit(t, b, login, url.Values{"username": {userID}, "password": {"nope"}})
	if wrong.status != http.StatusUnauthorized || wrong.location != "" {
		t.Fatalf("wrong password: %d %q", wrong.status, wrong.location)
	}
	consent := submit(t, b, wrong, url.Values{"username": {userID}, "password": {userPass}})
	if consent.status != 200 || !strings.Contains(consent.body, `name="accept"`) || !strings.Contains(consent.body, "公众号") {
		t.Fatalf("consent page: %d %s", consent.status, consent.body)
	}
	q := callback(t, submit(t, b, consent, url.Values{"accept": {"yes"}}))
	if q.Get("state") != state || q.Get("code") == "" || q.Get("iss") != e.issuer {
		t.Fatalf("callback %v", q)
	}
	tok, err := r.conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id_token", "session_state", "refresh_expires_in", "not-before-policy", "scope"} {
		if tok.Extra(f) == nil {
			t.Errorf("token response lacks %s", f)
		}
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := r.verifier.Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	// The ID token binds the access token issued with it (at_hash), as Keycloak's do.
	if err := idt.VerifyAccessToken(tok.AccessToken); err != nil {
		t.Fatalf("the ID token does not bind its access token: %v", err)
	}
	var claims struct {
		UserID, Typ, Azp, Scope, Nonce, SID string
		AuthTime                            int64 `json:"auth_time"`
	}
	_ = idt.Claims(&claims)
	if idt.Subject != userID || claims.UserID != userID || claims.Nonce != nonce || claims.Azp != "portal" ||
		claims.SID == "" || claims.AuthTime == 0 || !strings.Contains(claims.Scope, "openid") {
		t.Fatalf("id token claims %+v", claims)
	}
	ui, err := r.provider.UserInfo(ctx, oauth2.StaticTokenSource(tok))
	if err != nil {
		t.Fatal(err)
	}
	var uic struct{ UserID string }
	_ = ui.Claims(&uic)
	if ui.Subject != userID || uic.UserID != userID {
		t.Fatalf("userinfo %+v %+v", ui, uic)
	}
	// The user's access token pushes (the push interface accepts the authorization code grant).
	req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/infra/notification/mp", strings.NewReader(`{"userId":"2020000001","type":"JML","data":{"class":"a","info":"b"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("push with the user's token: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("push with the user's token: %v", resp.StatusCode)
	}

	// Refresh rotates; the rotated token used again revokes the family.
	old := tok.RefreshToken
	fresh, err := r.conf.TokenSource(ctx, &oauth2.Token{RefreshToken: old, Expiry: time.Now().Add(-time.Hour)}).Token()
	if err != nil || fresh.RefreshToken == "" || fresh.RefreshToken == old {
		t.Fatalf("refresh: %v", err)
	}
	if raw, _ := fresh.Extra("id_token").(string); raw == "" {
		t.Fatal("a refresh gave no ID token")
	} else if idt, err := r.verifier.Verify(ctx, raw); err != nil || idt.VerifyAccessToken(fresh.AccessToken) != nil {
		t.Fatalf("the refreshed ID token does not bind its access token: %v", err)
	}
	if _, err := r.conf.TokenSource(ctx, &oauth2.Token{RefreshToken: old, Expiry: time.Now().Add(-time.Hour)}).Token(); err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("reused refresh token: %v", err)
	}
	if _, err := r.conf.TokenSource(ctx, &oauth2.Token{RefreshToken: fresh.RefreshToken, Expiry: time.Now().Add(-time.Hour)}).Token(); err == nil {
		t.Fatal("the family of a reused refresh token is still alive")
	}

	// Same browser again: no login, no consent.
	q2 := callback(t, get(t, b, r.conf.AuthCodeURL("s2", oidc.Nonce("n2"))))
	tok2, err := r.conf.Exchange(ctx, q2.Get("code"))
	if err != nil || q2.Get("state") != "s2" {
		t.Fatalf("second authorization: %v %v", q2, err)
	}

	// Logout to a registered address ends the session, its refresh tokens and, at once, its
	// access tokens (this one is already verified and cached).
	if _, err := r.provider.UserInfo(ctx, oauth2.StaticTokenSource(tok2)); err != nil {
		t.Fatalf("userinfo before logout: %v", err)
	}
	out := get(t, b, e.issuer+"/protocol/openid-connect/logout?"+url.Values{
		"id_token_hint": {tok2.Extra("id_token").(string)}, "post_logout_redirect_uri": {rpRedirect}, "state": {"bye"}}.Encode())
	if out.status != http.StatusFound || out.location != rpRedirect+"?state=bye" {
		t.Fatalf("logout: %d %q", out.status, out.location)
	}
	if _, err := r.conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok2.RefreshToken, Expiry: time.Now().Add(-time.Hour)}).Token(); err == nil {
		t.Fatal("refresh token outlived its session")
	}
	if _, err := r.provider.UserInfo(ctx, oauth2.StaticTokenSource(tok2)); err == nil {
		t.Fatal("an access token outlived its session")
	}
	if again := get(t, b, r.conf.AuthCodeURL("s3")); again.status != 200 || !strings.Contains(again.body, `name="password"`) {
		t.Fatalf("after logout the login is not asked again: %d", again.status)
	}
}

// TestSignInCAS signs in through the campus single sign-on (a CAS 3.0 server in the test).
func TestSignInCAS(t *testing.T) {
	e := newSignInEnv(t)
	r := newRP(t, e)
	b := browser(t)
	casForm := get(t, b, r.conf.AuthCodeURL("cs", oidc.Nonce("cn"), oauth2.SetAuthURLParam("kc_idp_hint", "cas")))
	if !strings.HasPrefix(casForm.url.String(), e.cas.URL()+"/login") {
		t.Fatalf("not sent to CAS: %s", casForm.url)
	}
	consent := submit(t, b, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}})
	q := callback(t, submit(t, b, consent, url.Values{"accept": {"yes"}}))
	tok, err := r.conf.Exchange(context.Background(), q.Get("code"))
	if err != nil {
		t.Fatal(err)
	}
	idt, err := r.verifier.Verify(context.Background(), tok.Extra("id_token").(string))
	if err != nil || idt.Subject != "2020000042" {
		t.Fatalf("id token: %v %v", idt, err)
	}
}

func TestSignInRefusals(t *testing.T) {
	e := newSignInEnv(t)
	r := newRP(t, e)
	ctx := context.Background()
	signIn := func(b *http.Client, opts ...oauth2.AuthCodeOption) page {
		login := get(t, b, r.conf.AuthCodeURL("st", opts...))
		return submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
	}

	t.Run("consent cancelled", func(t *testing.T) {
		b := browser(t)
		q := callback(t, submit(t, b, signIn(b), url.Values{"cancel": {"yes"}}))
		if q.Get("error") != "access_denied" || q.Get("state") != "st" || q.Has("code") {
			t.Fatalf("callback %v", q)
		}
	})
	t.Run("consent form from another browser", func(t *testing.T) {
		p := submit(t, browser(t), signIn(browser(t)), url.Values{"accept": {"yes"}})
		if p.status != http.StatusForbidden || p.location != "" {
			t.Fatalf("%d %q", p.status, p.location)
		}
	})
	t.Run("unregistered redirect_uri gets a page, not a redirect", func(t *testing.T) {
		u := strings.Replace(r.conf.AuthCodeURL("x"), url.QueryEscape(rpRedirect), url.QueryEscape("https://evil.example.com/cb"), 1)
		p := get(t, browser(t), u)
		if p.status != 400 || p.location != "" || !strings.Contains(p.body, "redirect_uri") {
			t.Fatalf("%d %q", p.status, p.location)
		}
	})
	t.Run("logout to an unregistered address", func(t *testing.T) {
		p := get(t, browser(t), e.issuer+"/protocol/openid-connect/logout?redirect_uri="+url.QueryEscape("https://evil.example.com/"))
		if p.status != 400 || p.location != "" {
			t.Fatalf("%d %q", p.status, p.location)
		}
	})
	t.Run("forged csrf", func(t *testing.T) {
		b := browser(t)
		login := get(t, b, r.conf.AuthCodeURL("st"))
		p := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}, "csrf": {"forged"}})
		if p.status != http.StatusForbidden {
			t.Fatalf("%d", p.status)
		}
	})
	t.Run("expired code", func(t *testing.T) {
		b := browser(t)
		q := callback(t, submit(t, b, signIn(b), url.Values{"accept": {"yes"}}))
		e.clock.Advance(61 * time.Second)
		if _, err := r.conf.Exchange(ctx, q.Get("code")); err == nil || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("expired code: %v", err)
		}
	})
}

func TestSignInModesAndTokenEndpoints(t *testing.T) {
	e := newSignInEnv(t)
	r := newRP(t, e)
	ctx := context.Background()
	b := browser(t)
	// Sign in once (query mode), keeping the session for the rest.
	login := get(t, b, r.conf.AuthCodeURL("q"))
	q := callback(t, submit(t, b, submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}}), url.Values{"accept": {"yes"}}))
	tok, err := r.conf.Exchange(ctx, q.Get("code"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("fragment", func(t *testing.T) {
		p := get(t, b, r.conf.AuthCodeURL("f", oauth2.SetAuthURLParam("response_mode", "fragment")))
		u, _ := url.Parse(p.location)
		frag, _ := url.ParseQuery(u.Fragment)
		if p.status != http.StatusFound || u.RawQuery != "" || frag.Get("code") == "" || frag.Get("state") != "f" {
			t.Fatalf("%d %q", p.status, p.location)
		}
	})
	t.Run("form_post", func(t *testing.T) {
		p := get(t, b, r.conf.AuthCodeURL("fp", oauth2.SetAuthURLParam("response_mode", "form_post")))
		if p.status != 200 || !strings.Contains(p.body, `action="`+rpRedirect+`"`) || !strings.Contains(p.body, `name="code"`) ||
			!strings.Contains(p.body, `value="fp"`) {
			t.Fatalf("%d %s", p.status, p.body)
		}
	})
	t.Run("skip_consent", func(t *testing.T) {
		c := r.conf
		c.ClientID = "trusted"
		b2 := browser(t)
		login := get(t, b2, c.AuthCodeURL("sk"))
		q := callback(t, submit(t, b2, login, url.Values{"username": {userID}, "password": {userPass}}))
		if q.Get("code") == "" {
			t.Fatalf("consent was asked of a skip_consent client: %v", q)
		}
	})
	t.Run("unknown client gets a page", func(t *testing.T) {
		c := r.conf
		c.ClientID = "ghost"
		p := get(t, browser(t), c.AuthCodeURL("x"))
		if p.status != 400 || p.location != "" {
			t.Fatalf("%d %q", p.status, p.location)
		}
	})
	t.Run("other errors redirect with state", func(t *testing.T) {
		p := get(t, b, r.conf.AuthCodeURL("bad", oauth2.SetAuthURLParam("scope", "openid fake_api")))
		q := callback(t, p)
		if q.Get("error") != "invalid_scope" || q.Get("state") != "bad" || q.Get("error_description") == "" || q.Has("code") {
			t.Fatalf("%v", q)
		}
	})

	post := func(path string, form url.Values, withSecret bool) (int, map[string]any) {
		client := ""
		if withSecret {
			client = "portal"
		}
		return e.postForm(t, path, client, form)
	}
	t.Run("introspect and revoke", func(t *testing.T) {
		if st, m := post("/token/introspect", url.Values{"token": {tok.AccessToken}}, true); st != 200 || m["active"] != true || m["userid"] != userID {
			t.Fatalf("introspect access: %d %v", st, m)
		}
		if st, m := post("/token/introspect", url.Values{"token": {tok.RefreshToken}}, true); st != 200 || m["active"] != true {
			t.Fatalf("introspect refresh: %d %v", st, m)
		}
		if st, _ := post("/token/introspect", url.Values{"token": {tok.AccessToken}}, false); st != 401 {
			t.Fatalf("introspection without client credentials: %d", st)
		}
		if st, m := post("/revoke", url.Values{"token": {tok.AccessToken}}, true); st != 200 {
			t.Fatalf("revoke access token: %d %v", st, m)
		}
		if st, m := post("/token/introspect", url.Values{"token": {tok.AccessToken}}, true); st != 200 || m["active"] != false {
			t.Fatalf("revoked access token still active: %v", m)
		}
		if st, _ := post("/revoke", url.Values{"token": {tok.RefreshToken}}, true); st != 200 {
			t.Fatalf("revoke: %d", st)
		}
		if st, m := post("/token/introspect", url.Values{"token": {tok.RefreshToken}}, true); st != 200 || m["active"] != false {
			t.Fatalf("revoked refresh token still active: %v", m)
		}
		if _, err := r.conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Hour)}).Token(); err == nil {
			t.Fatal("a revoked refresh token still works")
		}
	})
	t.Run("password grant is under construction", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/token", strings.NewReader("grant_type=password&username=a&password=b"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("portal", rpSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || m["error"] != "unsupported_grant_type" || !strings.Contains(m["error_description"], "under construction") {
			t.Fatalf("%d %v", resp.StatusCode, m)
		}
	})
}
