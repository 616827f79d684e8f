package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
)

// labsClient is a client with two scopes that need consent (notification.mp, fake_api).
func labsClient(cfg *config.Config) {
	cfg.OAuth.Clients = append(cfg.OAuth.Clients, config.Client{ClientID: "labs", ClientSecret: rpSecret,
		Grants: []string{"authorization_code", "refresh_token"}, Scopes: []string{"openid", "notification.mp", "fake_api"},
		RedirectURIs: []string{rpRedirect}})
}

// TestConsentPageAsksOnlyForScopesNotYetGranted: a user who granted notification.mp is asked,
// for a request of notification.mp and fake_api, for fake_api alone (Keycloak's consent screen
// lists the client scopes not yet granted unless prompt=consent).
func TestConsentPageAsksOnlyForScopesNotYetGranted(t *testing.T) {
	e := newSignInEnvWith(t, nil, labsClient)
	b := browser(t)
	e.signedIn(t, b)
	p := get(t, b, e.authURL("labs", "one", "scope", "openid notification.mp"))
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("no consent page: %d %s", p.status, p.body)
	}
	callback(t, submit(t, b, p, url.Values{"accept": {"yes"}}))
	e.clock.Advance(time.Minute)
	p = get(t, b, e.authURL("labs", "two", "scope", "openid notification.mp fake_api"))
	if !strings.Contains(p.body, `name="accept"`) || !strings.Contains(p.body, "Use the test interface") {
		t.Fatalf("no consent page for the new scope: %d %s", p.status, p.body)
	}
	if strings.Contains(p.body, "official account") {
		t.Fatalf("the consent page asks again for notification.mp, which the user already granted:\n%s", p.body)
	}
}

// TestTwoTabsConsentingAtOnceKeepBothConsents: two tabs of one browser ask labs for different
// scopes; the user accepts both, the second while the first's consent is being recorded. Both
// clients' codes are issued, so both consents must be on record: the grant lists both scopes,
// and a later request for both does not ask again.
func TestTwoTabsConsentingAtOnceKeepBothConsents(t *testing.T) {
	h := &storeHook{}
	e := newSignInEnvMonitored(t, nil, h.monitor(), labsClient)
	b := browser(t)
	e.signedIn(t, b)
	pa := get(t, b, e.authURL("labs", "tabA", "scope", "openid notification.mp"))
	pb := get(t, b, e.authURL("labs", "tabB", "scope", "openid fake_api"))
	if !strings.Contains(pa.body, `name="accept"`) || !strings.Contains(pb.body, `name="accept"`) {
		t.Fatalf("consent pages: %d %d", pa.status, pb.status)
	}
	var qb url.Values
	// Tab A read the grant (none yet); tab B's consent lands before tab A's is written.
	h.arm("find revoked_grants", func() {
		qb = callback(t, submit(t, b, pb, url.Values{"accept": {"yes"}}))
	})
	qa := callback(t, submit(t, b, pa, url.Values{"accept": {"yes"}}))
	if !h.fired() || qa.Get("code") == "" || qb.Get("code") == "" {
		t.Fatalf("codes: %v %v fired %v", qa, qb, h.fired())
	}
	for _, q := range []url.Values{qa, qb} {
		if _, errc := e.exchange(t, "labs", q.Get("code")); errc != "" {
			t.Fatal(errc)
		}
	}
	e.clock.Advance(time.Minute)
	p := get(t, b, e.authURL("labs", "both", "scope", "openid notification.mp fake_api"))
	if strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("the user consented to both scopes (both codes issued) yet is asked again; one consent was overwritten:\n%s", p.body)
	}
	if p.status != http.StatusFound && p.status != http.StatusSeeOther {
		t.Fatalf("%d %s", p.status, p.body)
	}
}

// TestConsentRulesHold: a declined consent returns access_denied with the state and records
// nothing; an answered form posted again gives no second code; a wrong CSRF token or an expired
// request gives none; a narrower request is not asked; prompt=consent always asks but for a
// client that skips consent; a refresh cannot widen the grant.
func TestConsentRulesHold(t *testing.T) {
	e := newSignInEnvWith(t, nil, labsClient)
	b := browser(t)
	e.signedIn(t, b)
	// Decline: access_denied with state, nothing recorded.
	p := get(t, b, e.authURL("labs", "decl", "scope", "openid notification.mp"))
	q := callback(t, submit(t, b, p, url.Values{"cancel": {"yes"}}))
	if q.Get("error") != "access_denied" || q.Get("state") != "decl" {
		t.Fatalf("decline: %v", q)
	}
	if g := e.account(t, b).grants; len(g) != 0 {
		t.Fatalf("declined consent recorded: %v", g)
	}
	// Accept, then replay.
	p = get(t, b, e.authURL("labs", "acc", "scope", "openid notification.mp"))
	q = callback(t, submit(t, b, p, url.Values{"accept": {"yes"}}))
	if r := submit(t, b, p, url.Values{"accept": {"yes"}}); strings.Contains(r.location, "code=") {
		t.Fatalf("replayed accepted form gave a code: %s", r.location)
	}
	// Bad CSRF.
	p2 := get(t, b, e.authURL("labs", "csrf", "scope", "openid fake_api"))
	if r := submit(t, b, p2, url.Values{"accept": {"yes"}, "csrf": {"wrong"}}); strings.Contains(r.location, "code=") {
		t.Fatalf("wrong csrf gave a code: %s", r.location)
	}
	// Expired auth request.
	e.clock.Advance(2 * time.Hour)
	if r := submit(t, b, p2, url.Values{"accept": {"yes"}}); strings.Contains(r.location, "code=") {
		t.Fatalf("expired request gave a code: %d %s", r.status, r.location)
	}
	b = browser(t)
	e.signedIn(t, b)
	// Fewer scopes: no ask; prompt=consent: asks; skip consent client never asks even with prompt=consent.
	if p := get(t, b, e.authURL("labs", "few", "scope", "openid")); strings.Contains(p.body, `name="accept"`) {
		t.Fatal("asked for openid alone")
	}
	if p := get(t, b, e.authURL("labs", "pc", "scope", "openid notification.mp", "prompt", "consent")); !strings.Contains(p.body, `name="accept"`) {
		t.Fatal("prompt=consent did not ask")
	}
	if p := get(t, b, e.authURL("trusted", "tr", "prompt", "consent")); strings.Contains(p.body, `name="accept"`) {
		t.Fatal("skip-consent client asked")
	}
	// Refresh scope cannot grow.
	tok := e.userTokens(t, "portal")
	if _, errc := e.refresh(t, "portal", tok["refresh_token"].(string), "scope", "openid notification.mp fake_api"); errc != "invalid_scope" {
		t.Fatalf("refresh grew scope: %q", errc)
	}
	_ = q
	_ = http.StatusOK
}

// TestDeclinedConsentFormPostedAgainRecordsNothing: the user denies labs, then (the back button,
// a second click, a second tab of the same page) posts the same consent form with Allow. The
// sign-in request is finished: the answer is the "already finished" page and no code, yet the
// consent is recorded, so that labs' next request gets notification.mp without asking the
// user, who was told the sign-in did not complete and whose last answer to labs was "deny".
func TestDeclinedConsentFormPostedAgainRecordsNothing(t *testing.T) {
	e := newSignInEnvWith(t, nil, labsClient)
	b := browser(t)
	e.signedIn(t, b)
	p := get(t, b, e.authURL("labs", "decl", "scope", "openid notification.mp"))
	if q := callback(t, submit(t, b, p, url.Values{"cancel": {"yes"}})); q.Get("error") != "access_denied" || q.Get("state") != "decl" {
		t.Fatalf("decline: %v", q)
	}
	r := submit(t, b, p, url.Values{"accept": {"yes"}})
	if strings.Contains(r.location, "code=") {
		t.Fatalf("the finished request's form gave a code: %s", r.location)
	}
	if g := e.account(t, b).grants; len(g) != 0 {
		t.Fatalf("the account page lists a grant the user never completed (the request was finished, answered by deny): %v", g)
	}
	if p := get(t, b, e.authURL("labs", "next", "scope", "openid notification.mp")); !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("labs' next request is not asked: consent recorded from a form of a finished request: %d %s", p.status, p.location)
	}
}
