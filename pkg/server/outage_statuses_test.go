package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestLogoutWhileTheStoreIsDownDescribed: RP-initiated logout while MongoDB cannot be reached
// is answered 503 (the error page, "try again"), GET with id_token_hint and the confirmation's
// POST alike; the served description, which README calls the reference of every status, lists
// it for both, as it does for the account forms that fail the same way.
func TestLogoutWhileTheStoreIsDownDescribed(t *testing.T) {
	e := newStoreCutEnv(t)
	op := "/auth/realms/{realm}/protocol/openid-connect/logout"
	getDeclared := declaredStatuses(t, e.base, "GET", op)
	postDeclared := declaredStatuses(t, e.base, "POST", op)

	// 1. GET with the application's id_token_hint, in the signed-in browser.
	b := browser(t)
	tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	hint, _ := tok["id_token"].(string)
	if hint == "" {
		t.Fatalf("no id_token: %v", tok)
	}
	e.proxy.SetDown(true)
	down := get(t, b, e.issuer+"/protocol/openid-connect/logout?"+url.Values{"id_token_hint": {hint}}.Encode())
	e.proxy.SetDown(false)
	if down.status != http.StatusServiceUnavailable {
		t.Fatalf("GET logout with the store down: %d %.200s", down.status, down.body)
	}
	if !getDeclared["503"] {
		t.Errorf("GET %s answers %d (%s) while the store is down; the served description declares only %v", op, down.status, down.ctype, sortedStatuses(getDeclared))
	}

	// 2. The confirmation form (a logout without a hint), posted while the store is down.
	b2 := browser(t)
	e.signInCode(t, b2, "portal")
	confirm := get(t, b2, e.issuer+"/protocol/openid-connect/logout")
	if confirm.status != http.StatusOK {
		t.Fatalf("logout confirmation page: %d %.200s", confirm.status, confirm.body)
	}
	e.proxy.SetDown(true)
	posted := submit(t, b2, confirm, url.Values{})
	e.proxy.SetDown(false)
	if posted.status != http.StatusServiceUnavailable {
		t.Fatalf("POST logout confirmation with the store down: %d %.200s", posted.status, posted.body)
	}
	if !postDeclared["503"] {
		t.Errorf("POST %s answers %d (%s) while the store is down; the served description declares only %v", op, posted.status, posted.ctype, sortedStatuses(postDeclared))
	}
}

// TestUnbindWhileTheStoreIsDownDescribed: a student presses "unbind" on the binding page while
// MongoDB cannot be reached: 503 (the error page, "try again"), which the served description
// lists for POST /bind/unbind, as for GET /bind and POST /bind.
func TestUnbindWhileTheStoreIsDownDescribed(t *testing.T) {
	e, proxy := newBindEnvVia(t, true, nil)
	b := phone(t)
	p := e.authorizedAs(t, b, followerA)
	consent := e.signedIn(t, b, p)
	done := submitForm(t, b, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if done.status != 200 || !strings.Contains(done.body, bindBoundMsg) {
		t.Fatalf("after consent: %d %.300s", done.status, done.body)
	}
	bound := get(t, b, e.base+"/bind")
	proxy.SetDown(true)
	down := submitForm(t, b, bound, `id="unbind"`, url.Values{})
	proxy.SetDown(false)
	if down.status != http.StatusServiceUnavailable {
		t.Fatalf("unbind with the store down: %d %.300s", down.status, down.body)
	}
	declared := declaredStatuses(t, e.base, "POST", "/bind/unbind")
	if !declared["503"] {
		t.Errorf("POST /bind/unbind answers %d (%s) while the store is down; the served description declares only %v (GET /bind: %v)",
			down.status, down.ctype, sortedStatuses(declared), sortedStatuses(declaredStatuses(t, e.base, "GET", "/bind")))
	}
}
