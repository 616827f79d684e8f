package server_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// TestPostedSignInStepsRedirectWith303: the password form and the consent form are POSTs; the
// answer that sends the browser back to the client's redirect_uri (with the code, or with
// error=access_denied) is 303 See Other, as the served description says and RFC 9700 (OAuth 2.0
// Security BCP) §4.12 asks of a redirect answering a request that may carry the user's
// credentials: with 302 a user agent may post the form, password and all, again to the
// client's redirect_uri (RFC 9110 §15.4.3). It was 302, which neither operation lists.
func TestPostedSignInStepsRedirectWith303(t *testing.T) {
	e := newSignInEnv(t)
	var bad []string
	check := func(op, what string, p page) {
		t.Helper()
		if !strings.HasPrefix(p.location, rpRedirect) {
			t.Fatalf("%s: %d %q %.200s; want a redirect to the client", what, p.status, p.location, p.body)
		}
		declared := declaredStatuses(t, e.base, "POST", op)
		if p.status != http.StatusSeeOther || !declared[strconv.Itoa(p.status)] {
			bad = append(bad, "POST "+op+" ("+what+"): "+p.url.Path+" answered "+strconv.Itoa(p.status)+" to "+p.location[:len(rpRedirect)]+"…; the description declares "+strings.Join(sortedStatuses(declared), ", ")+" and says 303")
		}
	}
	// The password, for a client that needs no consent: straight back with the code.
	b := browser(t)
	login := get(t, b, e.authURL("trusted", "st"))
	if !strings.Contains(login.body, `name="password"`) {
		t.Fatalf("no login form: %d %.200s", login.status, login.body)
	}
	check("/auth/realms/{realm}/login-actions/authenticate", "password, no consent needed",
		submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}}))

	// Consent accepted, and refused.
	for client, accept := range map[string]string{"portal": "yes", "library": "no"} {
		b := browser(t)
		login := get(t, b, e.authURL(client, "st"))
		consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
		if !strings.Contains(consent.body, `name="accept"`) {
			t.Fatalf("no consent page: %d %.200s", consent.status, consent.body)
		}
		fields := url.Values{}
		if accept == "yes" {
			fields.Set("accept", "yes")
		} else {
			fields.Set("cancel", "yes")
		}
		check("/auth/realms/{realm}/login-actions/consent", "consent accept="+accept, submit(t, b, consent, fields))
	}
	for _, s := range bad {
		t.Error(s)
	}
}

// TestCASReturnRedirectDescribed: the campus sign-on's return ends, for a client, with the
// redirect back to its redirect_uri; its status is one the served description lists for the
// operation that answers it.
func TestCASReturnRedirectDescribed(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	casForm := get(t, b, e.authURL("trusted", "st", "kc_idp_hint", "cas"))
	if !strings.HasPrefix(casForm.url.String(), e.cas.URL()+"/login") {
		t.Fatalf("not sent to the campus sign-on: %s", casForm.url)
	}
	p := submit(t, b, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}})
	if !strings.HasPrefix(p.location, rpRedirect) {
		t.Fatalf("%d %q", p.status, p.location)
	}
	op := strings.Replace(p.url.Path, "/auth/realms/campus/", "/auth/realms/{realm}/", 1)
	declared := declaredStatuses(t, e.base, "GET", op)
	t.Logf("GET %s answered %d to the client", p.url.Path, p.status)
	if !declared[strconv.Itoa(p.status)] {
		t.Errorf("GET %s answers %d to the client's redirect_uri; the served description declares only %v", op, p.status, sortedStatuses(declared))
	}
}
