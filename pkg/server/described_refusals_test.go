package server_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestFlowStepRefusalDescribed: a step of the sign-in flow that does not come from the
// browser that started it is refused 403, as TestRefusedFlowStepsChangeNothing wants; the
// served description lists that 403 for the login form, the consent form and the single
// sign-on's return.
func TestFlowStepRefusalDescribed(t *testing.T) {
	s := newSignInEnv(t)
	e := &env{t: t, url: s.base, cfg: s.cfg}
	described := describedStatuses(t, e)
	realm := "/auth/realms/" + s.cfg.OAuth.Realm

	// The login form, posted from another browser.
	b := browser(t)
	login := get(t, b, s.authURL("portal", "st"))
	p := submit(t, browser(t), login, url.Values{"username": {userID}, "password": {userPass}})
	if op := "POST " + realm + "/login-actions/authenticate"; !slices.Contains(described[op], p.status) {
		t.Errorf("%s from another browser: %d, described %v", op, p.status, described[op])
	}
	// The consent form, posted from another browser.
	consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
	if !strings.Contains(consent.body, `name="accept"`) {
		t.Fatalf("no consent page: %d", consent.status)
	}
	p = submit(t, browser(t), consent, url.Values{"accept": {"yes"}})
	if op := "POST " + realm + "/login-actions/consent"; !slices.Contains(described[op], p.status) {
		t.Errorf("%s from another browser: %d, described %v", op, p.status, described[op])
	}
	// The single sign-on's return, opened in another browser.
	b = browser(t)
	casForm := get(t, b, s.authURL("portal", "st", "kc_idp_hint", "cas"))
	stop := &http.Client{Jar: b.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	back := submit(t, stop, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}})
	if !strings.Contains(back.location, "ticket=") {
		t.Fatalf("CAS answer: %d %q", back.status, back.location)
	}
	p = get(t, browser(t), back.location)
	if op := "GET " + realm + "/broker/cas/endpoint"; !slices.Contains(described[op], p.status) {
		t.Errorf("%s in another browser: %d, described %v", op, p.status, described[op])
	}
}

// TestFeaturesOffDescribed: where binding is not configured (no bind: section, the default),
// every /bind path answers 404, and /sandbox/feed and /sandbox/sandbox.js, which only a
// standalone stack serves, answer 404 elsewhere: the served description lists each 404, as it
// does for /ops and /sandbox.
func TestFeaturesOffDescribed(t *testing.T) {
	e := newEnv(t)
	described := describedStatuses(t, e)
	for _, op := range []string{"GET /bind", "POST /bind", "GET /bind/signin", "GET /bind/platform", "GET /bind/signed-in", "POST /bind/unbind",
		"GET /sandbox/feed", "GET /sandbox/sandbox.js"} {
		m, p, _ := strings.Cut(op, " ")
		a := e.do(m, p, form, "", "")
		if !slices.Contains(described[op], a.status) {
			t.Errorf("%s with binding off: %d, described %v", op, a.status, described[op])
		}
	}
}

// TestCallbackRefusalNamesItsScheme: the callback refuses a bad or missing signature with 401,
// which names its scheme in WWW-Authenticate (RFC 9110 §15.5.2), as every other 401 of the
// service does (Bearer on the data interfaces, Basic on the token endpoints).
func TestCallbackRefusalNamesItsScheme(t *testing.T) {
	e := newEnv(t)
	for _, a := range []answer{
		e.do("GET", callbackPath+"?signature=x&timestamp=1&nonce=n&echostr=a", "", "", ""),
		e.callback("signature=x&timestamp=1&nonce=n", followEvent("oA", "subscribe", 1)),
	} {
		if a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") != `Signature realm="callback"` {
			t.Errorf("callback refused: %d, WWW-Authenticate %q: %s", a.status, a.header.Get("WWW-Authenticate"), a.body)
		}
	}
}
