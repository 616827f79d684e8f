package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/cas/castest"
	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

const (
	simAppID    = "wx0123456789abcdef"
	simSecret   = "platform-app-secret-0123456789ab"
	followerA   = "oFollowerA000000000000000001"
	followerB   = "oFollowerB000000000000000002"
	casUser     = "2020000042"
	casUserPass = "cas-password"
	// casMailUser is a CAS account whose user number no push can name.
	casMailUser  = "zhang.san@campus.example"
	bindBoundMsg = "已绑定到此微信"
)

// bindEnv is the front end with sign-in (local and CAS) and the platform simulator over HTTP,
// whose authorization domain is the front end's host.
type bindEnv struct {
	base  string
	sim   *simulator.Simulator
	store *store.Store
	clock *clocktest.Clock
}

func newBindEnv(t *testing.T) *bindEnv {
	t.Helper()
	e, _ := newBindEnvVia(t, false, nil)
	return e
}

// newBindEnvVia is newBindEnv, with the store reached through a proxy the test can cut (and a
// 2-second wait for a server) when viaProxy, and the platform's API answering through answer
// first when it is not nil (answer reports whether it answered the request).
func newBindEnvVia(t *testing.T, viaProxy bool, answer func(w http.ResponseWriter, r *http.Request) bool) (*bindEnv, *embeddedtest.Proxy) {
	t.Helper()
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	f := embeddedtest.FerretDB(t)
	uri := f.URI()
	var proxy *embeddedtest.Proxy
	if viaProxy {
		proxy = embeddedtest.NewProxy(t, strings.TrimSuffix(strings.TrimPrefix(f.URI(), "mongodb://"), "/"))
		uri = "mongodb://" + proxy.Addr() + "/?serverSelectionTimeoutMS=2000"
	}
	casSrv := castest.New(map[string]string{casUser: casUserPass, casMailUser: casUserPass})
	t.Cleanup(casSrv.Close)
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	clk := clocktest.New(time.Now().Truncate(time.Second))
	sim := simulator.New(simulator.Config{AppID: simAppID, Secret: simSecret, WebAuthHosts: []string{ts.Listener.Addr().String()}, Now: clk.Now})
	sim.AddFollower(followerA)
	sim.AddFollower(followerB)
	simHandler := sim.Handler()
	simSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answer == nil || !answer(w, r) {
			simHandler.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(func() { simSrv.Close(); sim.Close() })
	cfg := &config.Config{
		PublicURL: base,
		NATS:      config.NATS{URL: n.URL()},
		MongoDB:   config.MongoDB{URI: uri, Database: embeddedtest.DBName(t)},
		OAuth: config.OAuth{IdentityProviders: config.IdentityProviders{Default: "cas", CAS: config.CASProvider{URL: casSrv.URL()},
			Local: config.LocalProvider{Enabled: true}}},
		Directory: config.Directory{Users: []config.User{{UserID: userID, Password: userPass}}},
		Platform: config.Platform{APIBase: simSrv.URL, OAuthBase: simSrv.URL, AppID: simAppID, Secret: simSecret,
			CallbackToken: cbToken},
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleAPI); err != nil {
		t.Fatal(err)
	}
	api, err := service.NewAPI(context.Background(), cfg, service.Deps{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	if err := f.IndexIDs(context.Background(), cfg.MongoDB.Database); err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = api.Server
	ts.Start()
	t.Cleanup(ts.Close)
	return &bindEnv{base: base, sim: sim, store: api.Store, clock: clk}, proxy
}

// phone is the in-app browser: cookies kept, redirects followed.
func phone(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

// authorizedAs opens /bind in b and picks openid on the simulator's authorization page; it
// returns the binding page the browser lands on.
func (e *bindEnv) authorizedAs(t *testing.T, b *http.Client, openid string) page {
	t.Helper()
	p := get(t, b, e.base+"/bind")
	if p.status != 200 || !strings.Contains(p.body, `value="`+openid+`"`) {
		t.Fatalf("the platform's authorization page: %d %s %s", p.status, p.url, p.body)
	}
	p = submitForm(t, b, p, `value="`+openid+`"`, url.Values{})
	if p.status != 200 || p.url.Path != "/bind" {
		t.Fatalf("back from the platform: %d %s %s", p.status, p.url, p.body)
	}
	return p
}

// submitForm posts the form of p that contains marker, with its hidden fields and extra.
func submitForm(t *testing.T, b *http.Client, p page, marker string, extra url.Values) page {
	t.Helper()
	for _, chunk := range strings.Split(p.body, "<form")[1:] {
		if strings.Contains(chunk, marker) {
			return submit(t, b, page{status: p.status, body: "<form" + chunk, url: p.url}, extra)
		}
	}
	t.Fatalf("no form with %q on %s", marker, p.body)
	return page{}
}

// signedIn signs in with the local directory from the binding page p; it returns the
// consent page.
func (e *bindEnv) signedIn(t *testing.T, b *http.Client, p page) page {
	t.Helper()
	if !strings.Contains(p.body, `href="/bind/signin?idp=local"`) {
		t.Fatalf("the binding page offers no local sign-in: %s", p.body)
	}
	login := get(t, b, e.base+"/bind/signin?idp=local")
	c := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
	if c.status != 200 || !strings.Contains(c.body, `name="accept"`) || !strings.Contains(c.body, userID) {
		t.Fatalf("consent page: %d %s %s", c.status, c.url, c.body)
	}
	return c
}

func (e *bindEnv) bindingOf(t *testing.T, user string) (store.Binding, bool) {
	t.Helper()
	bd, err := e.store.Binding(context.Background(), user)
	if errors.Is(err, store.ErrNotFound) {
		return bd, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return bd, true
}

// TestBindFlow: the whole binding over HTTP: the platform's authorization (the simulator's
// page, a follower picked), the campus sign-in (the local directory, and CAS), consent, the
// binding stored both ways, shown, and unbound; the openid never reaches the browser.
func TestBindFlow(t *testing.T) {
	e := newBindEnv(t)
	b := phone(t)
	p := e.authorizedAs(t, b, followerA)
	if !strings.Contains(p.body, `href="/bind/signin?idp=cas"`) || strings.Index(p.body, "idp=cas") > strings.Index(p.body, "idp=local") {
		t.Fatalf("the default provider (CAS) is not offered first: %s", p.body)
	}
	u, _ := url.Parse(e.base)
	for _, ck := range b.Jar.Cookies(u.JoinPath("/bind")) {
		if strings.Contains(ck.Value, followerA) {
			t.Fatalf("cookie %s shows the openid", ck.Name)
		}
	}
	if strings.Contains(p.body, followerA) {
		t.Fatal("the page shows the whole openid")
	}
	consent := e.signedIn(t, b, p)
	if !strings.Contains(consent.body, "Send you messages") {
		t.Fatalf("the consent page does not say what the student agrees to: %s", consent.body)
	}
	done := submitForm(t, b, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if done.status != 200 || !strings.Contains(done.body, bindBoundMsg) || !strings.Contains(done.body, "Bound: you will receive") ||
		!strings.Contains(done.body, `<strong id="bound-user">`+userID) || !strings.Contains(done.body, followerA[:6]+"…"+followerA[len(followerA)-4:]) {
		t.Fatalf("after consent: %d %s", done.status, done.body)
	}
	if bd, ok := e.bindingOf(t, userID); !ok || bd.OpenID != followerA || !bd.Following {
		t.Fatalf("stored binding %+v %v", bd, ok)
	}
	if bd, err := e.store.BindingOf(context.Background(), followerA); err != nil || bd.UserID != userID {
		t.Fatalf("binding of the follower: %+v %v", bd, err)
	}
	// The page shows the binding on the next visit, without a sign-in.
	if again := get(t, b, e.base+"/bind"); !strings.Contains(again.body, bindBoundMsg) || strings.Contains(again.body, "Bound: you") {
		t.Fatalf("revisit: %s", again.body)
	}

	// The same follower, a new session (the platform's authorization again): still shown.
	b2 := phone(t)
	if p := e.authorizedAs(t, b2, followerA); !strings.Contains(p.body, bindBoundMsg) {
		t.Fatalf("the binding is not shown to the same follower in another browser: %s", p.body)
	}

	// Unbind.
	gone := submitForm(t, b, get(t, b, e.base+"/bind"), `id="unbind"`, url.Values{})
	if gone.status != 200 || !strings.Contains(gone.body, "Unbound") || !strings.Contains(gone.body, "idp=local") {
		t.Fatalf("after unbinding: %d %s", gone.status, gone.body)
	}
	if bd, ok := e.bindingOf(t, userID); ok {
		t.Fatalf("the binding outlived its unbinding: %+v", bd)
	}
	if _, err := e.store.BindingOf(context.Background(), followerA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("binding of the unbound follower: %v", err)
	}

	// Through CAS, follower B; then the same user number from follower A replaces it.
	b3 := phone(t)
	p = e.authorizedAs(t, b3, followerB)
	casForm := get(t, b3, e.base+"/bind/signin?idp=cas")
	consent = submit(t, b3, casForm, url.Values{"username": {casUser}, "password": {casUserPass}})
	if !strings.Contains(consent.body, casUser) {
		t.Fatalf("consent after CAS: %d %s", consent.status, consent.body)
	}
	submitForm(t, b3, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if bd, ok := e.bindingOf(t, casUser); !ok || bd.OpenID != followerB {
		t.Fatalf("binding through CAS: %+v %v", bd, ok)
	}
	b4 := phone(t)
	p = e.authorizedAs(t, b4, followerA)
	casForm = get(t, b4, e.base+"/bind/signin?idp=cas")
	consent = submit(t, b4, casForm, url.Values{"username": {casUser}, "password": {casUserPass}})
	if !strings.Contains(consent.body, "bound to another WeChat account") {
		t.Fatalf("the consent page does not say the binding moves: %s", consent.body)
	}
	submitForm(t, b4, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if bd, ok := e.bindingOf(t, casUser); !ok || bd.OpenID != followerA {
		t.Fatalf("the binding did not move: %+v %v", bd, ok)
	}
	if p := get(t, b3, e.base+"/bind"); strings.Contains(p.body, bindBoundMsg) {
		t.Fatalf("follower B still shows the binding that moved: %s", p.body)
	}

	// Cancel changes nothing.
	b5 := phone(t)
	consent = e.signedIn(t, b5, e.authorizedAs(t, b5, followerB))
	if p := submitForm(t, b5, consent, `name="cancel"`, url.Values{"cancel": {"yes"}}); !strings.Contains(p.body, "Cancelled") {
		t.Fatalf("cancel: %s", p.body)
	}
	if _, ok := e.bindingOf(t, userID); ok {
		t.Fatal("a cancelled consent bound the user")
	}
}

// noFollow is a browser with cookies that does not follow redirects.
func noFollow(t *testing.T, jar http.CookieJar) *http.Client {
	t.Helper()
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// startAuthorization opens /bind in a new browser and returns it (not following redirects)
// and the state of the platform's authorization it was sent to.
func (e *bindEnv) startAuthorization(t *testing.T) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := noFollow(t, jar)
	p := get(t, b, e.base+"/bind")
	loc, err := url.Parse(p.location)
	if p.status != http.StatusFound || err != nil || loc.Query().Get("state") == "" || loc.Query().Get("scope") != "snsapi_base" ||
		loc.Fragment != "wechat_redirect" || loc.Query().Get("redirect_uri") != e.base+"/bind/platform" {
		t.Fatalf("not sent to the platform: %d %q", p.status, p.location)
	}
	return b, loc.Query().Get("state")
}

// returned brings browser b back from the platform with code and state (and extra).
func (e *bindEnv) returned(t *testing.T, b *http.Client, code, state string, extra url.Values) page {
	t.Helper()
	q := url.Values{"code": {code}, "state": {state}}
	for k, v := range extra {
		q[k] = v
	}
	return get(t, b, e.base+"/bind/platform?"+q.Encode())
}

// TestBindRefusals: what an attacker can send to the binding page changes nothing.
func TestBindRefusals(t *testing.T) {
	e := newBindEnv(t)

	t.Run("forged state", func(t *testing.T) {
		b, state := e.startAuthorization(t)
		code := e.sim.IssueWebCode(followerA)
		if p := e.returned(t, b, code, state+"x", nil); p.status != 400 || p.location != "" || !strings.Contains(p.body, "invalid_state") {
			t.Fatalf("%d %q", p.status, p.location)
		}
		if p := e.returned(t, b, code, "", nil); p.status != 400 {
			t.Fatalf("no state: %d", p.status)
		}
		// The refused answers did not learn the follower: the page starts over.
		if p := get(t, b, e.base+"/bind"); p.status != http.StatusFound {
			t.Fatalf("after a forged state the page knows a follower: %d %s", p.status, p.body)
		}
	})
	t.Run("state from another browser", func(t *testing.T) {
		_, state := e.startAuthorization(t)
		other, _ := e.startAuthorization(t)
		if p := e.returned(t, other, e.sim.IssueWebCode(followerA), state, nil); p.status != 400 {
			t.Fatalf("%d", p.status)
		}
		if p := e.returned(t, noFollow(t, nil), e.sim.IssueWebCode(followerA), state, nil); p.status != 400 {
			t.Fatalf("without the cookie: %d", p.status)
		}
	})
	t.Run("replayed code", func(t *testing.T) {
		b, state := e.startAuthorization(t)
		code := e.sim.IssueWebCode(followerA)
		if p := e.returned(t, b, code, state, nil); p.status != http.StatusSeeOther || p.location != "/bind" {
			t.Fatalf("first use: %d %q %s", p.status, p.location, p.body)
		}
		// The same answer again, in the same browser (its state is spent) and in another.
		if p := e.returned(t, b, code, state, nil); p.status != 400 {
			t.Fatalf("the same answer twice: %d", p.status)
		}
		other, state2 := e.startAuthorization(t)
		if p := e.returned(t, other, code, state2, nil); p.status != 400 || !strings.Contains(p.body, "platform_40163") {
			t.Fatalf("a used code: %d %s", p.status, p.body)
		}
		if p := e.returned(t, other, "never-issued", state2, nil); p.status != 400 || !strings.Contains(p.body, "platform_40029") {
			t.Fatalf("an unknown code: %d %s", p.status, p.body)
		}
		if p := get(t, other, e.base+"/bind"); p.status != http.StatusFound {
			t.Fatalf("a used code made the page know a follower: %d", p.status)
		}
	})
	t.Run("openid in the request is ignored", func(t *testing.T) {
		b, state := e.startAuthorization(t)
		p := e.returned(t, b, e.sim.IssueWebCode(followerB), state, url.Values{"openid": {followerA}})
		if p.status != http.StatusSeeOther {
			t.Fatalf("%d %s", p.status, p.body)
		}
		page := get(t, b, e.base+"/bind?openid="+followerA)
		if !strings.Contains(page.body, "…"+followerB[len(followerB)-4:]) || strings.Contains(page.body, "…"+followerA[len(followerA)-4:]) {
			t.Fatalf("the page is not the platform's follower: %s", page.body)
		}
		// Bind, with an openid in the form as well: the binding is the platform's follower's.
		login := get(t, b, e.base+"/bind/signin?idp=local&openid="+followerA)
		for login.status == http.StatusSeeOther || login.status == http.StatusFound {
			login = get(t, b, e.base+login.location)
		}
		consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
		for consent.status == http.StatusSeeOther {
			consent = get(t, b, e.base+consent.location)
		}
		done := submitForm(t, b, consent, `name="accept"`, url.Values{"accept": {"yes"}, "openid": {followerA}})
		if done.status != http.StatusSeeOther {
			t.Fatalf("bind: %d %s", done.status, done.body)
		}
		if bd, ok := e.bindingOf(t, userID); !ok || bd.OpenID != followerB {
			t.Fatalf("bound %+v %v", bd, ok)
		}
	})

	// Browser a is bound (user number userID to follower B, from the subtest above).
	jar, _ := cookiejar.New(nil)
	a := &http.Client{Jar: jar}
	bound := e.authorizedAs(t, a, followerB)
	if !strings.Contains(bound.body, bindBoundMsg) {
		t.Fatalf("not bound: %s", bound.body)
	}
	csrfA := csrfField.FindStringSubmatch(bound.body)[1]
	t.Run("csrf on unbind", func(t *testing.T) {
		attacker := phone(t)
		e.authorizedAs(t, attacker, followerA)
		for name, c := range map[string]struct {
			b    *http.Client
			form url.Values
		}{
			"no csrf":                         {a, url.Values{}},
			"forged csrf":                     {a, url.Values{"csrf": {strings.Repeat("0", 32)}}},
			"csrf of a, from another browser": {attacker, url.Values{"csrf": {csrfA}}},
			"csrf of a, no cookie":            {&http.Client{}, url.Values{"csrf": {csrfA}}},
		} {
			resp, err := c.b.PostForm(e.base+"/bind/unbind", c.form)
			if err != nil {
				t.Fatal(err)
			}
			if p := read(t, resp); p.status != http.StatusForbidden {
				t.Errorf("%s: %d %s", name, p.status, p.body)
			}
		}
		if bd, ok := e.bindingOf(t, userID); !ok || bd.OpenID != followerB {
			t.Fatalf("a refused unbind changed the binding: %+v %v", bd, ok)
		}
	})
	t.Run("csrf on bind", func(t *testing.T) {
		// A signed-in session about to consent; forms not from its page bind nothing.
		v := phone(t)
		e.signedIn(t, v, e.authorizedAs(t, v, followerA))
		for name, form := range map[string]url.Values{
			"no csrf":     {"accept": {"yes"}},
			"forged csrf": {"accept": {"yes"}, "csrf": {strings.Repeat("f", 32)}},
			"csrf of a":   {"accept": {"yes"}, "csrf": {csrfA}},
		} {
			resp, err := v.PostForm(e.base+"/bind", form)
			if err != nil {
				t.Fatal(err)
			}
			if p := read(t, resp); p.status != http.StatusForbidden {
				t.Errorf("%s: %d %s", name, p.status, p.body)
			}
		}
		if _, err := e.store.BindingOf(context.Background(), followerA); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused form bound follower A: %v", err)
		}
	})
	t.Run("sign-in handed to another browser", func(t *testing.T) {
		// The victim's browser is sent the attacker's finished sign-in: it must not take it.
		jar, _ := cookiejar.New(nil)
		attacker := noFollow(t, jar)
		follow := &http.Client{Jar: jar}
		e.authorizedAs(t, follow, followerA)
		login := get(t, follow, e.base+"/bind/signin?idp=local")
		handBack := submit(t, attacker, login, url.Values{"username": {userID}, "password": {userPass}})
		if handBack.status != http.StatusSeeOther || !strings.HasPrefix(handBack.location, "/bind/signed-in?t=") {
			t.Fatalf("the sign-in's end: %d %q", handBack.status, handBack.location)
		}
		victim := phone(t)
		e.authorizedAs(t, victim, followerB)
		if p := get(t, victim, e.base+handBack.location); p.status != 400 || !strings.Contains(p.body, "expired") {
			t.Fatalf("the victim took the attacker's sign-in: %d %s", p.status, p.body)
		}
		// Too late for its own browser too, after two minutes.
		e.clock.Advance(3 * time.Minute)
		if p := get(t, follow, e.base+handBack.location); p.status != 400 {
			t.Fatalf("an expired hand-back: %d", p.status)
		}
	})
	t.Run("bind session expires", func(t *testing.T) {
		b, state := e.startAuthorization(t)
		e.clock.Advance(11 * time.Minute)
		if p := e.returned(t, b, e.sim.IssueWebCode(followerA), state, nil); p.status != 400 {
			t.Fatalf("an authorization answered after 11 minutes: %d", p.status)
		}
	})
}

// TestBindRefusesAUserNumberNoPushNames: a sign-in whose user number holds characters no push
// can name ('@' here) is told it cannot bind, and nothing is stored: such a binding would never
// carry a message, and export would write what import refuses.
func TestBindRefusesAUserNumberNoPushNames(t *testing.T) {
	e := newBindEnv(t)
	b := phone(t)
	e.authorizedAs(t, b, followerA)
	casForm := get(t, b, e.base+"/bind/signin?idp=cas")
	p := submit(t, b, casForm, url.Values{"username": {casMailUser}, "password": {casUserPass}})
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "cannot receive messages") || strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("sign-in as %s from the binding page: %d %s", casMailUser, p.status, p.body)
	}
	if _, ok := e.bindingOf(t, casMailUser); ok {
		t.Fatal("a user number no push can name was bound")
	}
}

// A student who opens the binding page while the store cannot be reached gets the error page in
// Chinese and English, as every other refusal of the page, not the data interfaces' JSON; a
// HEAD of it, the same header fields.
func TestBindPageStoreDown(t *testing.T) {
	e, proxy := newBindEnvVia(t, true, nil)
	b := phone(t)
	e.authorizedAs(t, b, followerA)
	proxy.SetDown(true)
	p := get(t, b, e.base+"/bind")
	if p.status != http.StatusServiceUnavailable || !strings.HasPrefix(p.ctype, "text/html") ||
		!strings.Contains(p.body, "请稍后再试") || !strings.Contains(p.body, "Try again in a moment") {
		t.Fatalf("the binding page with the store down: %d %s %s", p.status, p.ctype, p.body)
	}
	// A HEAD has the GET's header fields (RFC 9110 §9.3.2).
	req, _ := http.NewRequest(http.MethodHead, e.base+"/bind", nil)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != p.status || resp.Header.Get("Content-Type") != p.ctype {
		t.Fatalf("HEAD /bind with the store down: %d %q; its GET: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"), p.status, p.ctype)
	}
}

// TestBindPlatformReturnSlowed: each return of the platform's authorization costs a call to
// the platform on the official account's credentials. An address whose made-up codes the
// platform refuses is slowed (429) past the failures an address may have, as at the campus
// sign-on's return, before any more calls are made for it.
func TestBindPlatformReturnSlowed(t *testing.T) {
	e := newBindEnv(t)
	b, state := e.startAuthorization(t)
	const tries = oauth.DefaultAddressFailureBurst + 200
	var refused, slowed int
	for i := range tries {
		switch p := e.returned(t, b, "not-a-code-"+strconv.Itoa(i), state, nil); p.status {
		case http.StatusTooManyRequests:
			slowed++
		case http.StatusBadRequest:
			refused++
		default:
			t.Fatalf("try %d: %d %s", i, p.status, p.body)
		}
	}
	calls := e.sim.Stats().Errors["40029"] // the platform's answer to a code it does not know
	if calls > int64(oauth.DefaultAddressFailureBurst)+50 || slowed == 0 {
		t.Fatalf("%d returns with made-up codes from one address: %d calls of the platform, %d refused, %d slowed; want the address slowed past %d",
			tries, calls, refused, slowed, oauth.DefaultAddressFailureBurst)
	}
}

// TestBindPlatformTroubleIsNotTheLinks: the platform busy (-1) or the official account's
// credentials refused (40125) at the exchange of the code is no fault of the student's link:
// the page says to try again in a moment (502), the address is not charged a failure (no 429
// however often it happens), and once the platform answers the same student binds.
func TestBindPlatformTroubleIsNotTheLinks(t *testing.T) {
	var trouble atomic.Int64 // the errcode the exchange answers; 0: the simulator answers
	e, _ := newBindEnvVia(t, false, func(w http.ResponseWriter, r *http.Request) bool {
		code := trouble.Load()
		if code == 0 || r.URL.Path != "/sns/oauth2/access_token" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"errcode":%d,"errmsg":"refused"}`, code)
		return true
	})
	b, state := e.startAuthorization(t)
	for i := range oauth.DefaultAddressFailureBurst + 50 {
		trouble.Store([]int64{-1, 40125}[i%2])
		p := e.returned(t, b, e.sim.IssueWebCode(followerA), state, nil)
		if p.status != http.StatusBadGateway || !strings.Contains(p.body, "temporarily_unavailable") || strings.Contains(p.body, "used already") {
			t.Fatalf("try %d, the exchange answered %d: %d %s", i, trouble.Load(), p.status, p.body)
		}
	}
	trouble.Store(0)
	if p := e.returned(t, b, e.sim.IssueWebCode(followerA), state, nil); p.status != http.StatusSeeOther || p.location != "/bind" {
		t.Fatalf("once the platform answers: %d %q %s", p.status, p.location, p.body)
	}
}
