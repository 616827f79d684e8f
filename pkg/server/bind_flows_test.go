package server_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
)

// TestBindValuesSingleUse: the sign-in's ticket back to the page and the platform
// authorization's state are each taken once; the binding page's sign-in request never reaches
// a client's consent step.
func TestBindValuesSingleUse(t *testing.T) {
	e := newBindEnv(t)

	t.Run("ticket replayed after the consent", func(t *testing.T) {
		b := phone(t)
		var ticket string
		b.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
			if req.URL.Path == "/bind/signed-in" {
				ticket = req.URL.String()
			}
			return nil
		}
		c := e.signedIn(t, b, e.authorizedAs(t, b, followerA))
		if ticket == "" {
			t.Fatal("the sign-in did not hand back through /bind/signed-in")
		}
		if p := submitForm(t, b, c, `name="accept"`, url.Values{"accept": {"yes"}}); !strings.Contains(p.body, bindBoundMsg) {
			t.Fatalf("bind: %d %s", p.status, p.body)
		}
		p := get(t, b, e.base+"/bind")
		if p = submitForm(t, b, p, `/bind/unbind`, url.Values{}); p.status != 200 {
			t.Fatalf("unbind: %d", p.status)
		}
		if _, ok := e.bindingOf(t, userID); ok {
			t.Fatal("still bound after unbinding")
		}
		p = get(t, b, ticket)
		if p.status != http.StatusBadRequest || strings.Contains(p.body, `name="accept"`) {
			t.Fatalf("the ticket replayed: %d %s", p.status, p.body)
		}
	})

	t.Run("pre-authorization cookie replayed with a second code", func(t *testing.T) {
		b, state := e.startAuthorization(t)
		u, _ := url.Parse(e.base + "/bind")
		saved := b.Jar.Cookies(u)
		if p := e.returned(t, b, e.sim.IssueWebCode(followerA), state, nil); p.status != http.StatusSeeOther {
			t.Fatalf("first code: %d %s", p.status, p.body)
		}
		// The old cookie in a fresh jar, with a second code under the same state.
		jar, _ := cookiejar.New(nil)
		jar.SetCookies(u, saved)
		if p := e.returned(t, noFollow(t, jar), e.sim.IssueWebCode(followerB), state, nil); p.status != http.StatusBadRequest {
			t.Fatalf("the state taken twice: %d %q %s", p.status, p.location, p.body)
		}
	})

	t.Run("binding page's sign-in request at the consent step", func(t *testing.T) {
		b := phone(t)
		b.CheckRedirect = func(*http.Request, []*http.Request) error { return nil }
		e.signedIn(t, b, e.authorizedAs(t, b, followerB)) // a sign-in session in this browser
		login := get(t, b, e.base+"/bind/signin?idp=local")
		b.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		p := postToConsent(t, b, login)
		if p.status != http.StatusBadRequest || strings.Contains(p.location, "code=") {
			t.Fatalf("the bind sign-in at the consent step: %d %s %s", p.status, p.url, p.body)
		}
	})
}

// TestBindSnapshotUser: a page opened from a Moments snapshot (is_snapshotuser 1, a virtual
// openid) binds nothing and tells the student to open it from the official account.
func TestBindSnapshotUser(t *testing.T) {
	e := newBindEnv(t)
	b, state := e.startAuthorization(t)
	p := e.returned(t, b, e.sim.IssueSnapshotWebCode(followerA), state, nil)
	if p.status != http.StatusForbidden || !strings.Contains(p.body, "official account") || !strings.Contains(p.body, "snapshot_user") {
		t.Fatalf("a snapshot user: %d %q %s", p.status, p.location, p.body)
	}
	// The page knows no follower: it starts the authorization again.
	if p := get(t, b, e.base+"/bind"); p.status != http.StatusFound {
		t.Fatalf("after a snapshot answer the page knows a follower: %d %s", p.status, p.body)
	}
	if p := get(t, b, e.base+"/bind/signin?idp=local"); p.status != http.StatusSeeOther || p.location != "/bind" {
		t.Fatalf("sign-in offered to a snapshot user: %d %q", p.status, p.location)
	}
}

// TestBindConsentBindsTheUserShown: a consent page names the user number it binds. Accepted
// after another sign-in of the same bind session (a second tab), it binds nobody and shows the
// page again, naming who is signed in now; that page binds that user.
func TestBindConsentBindsTheUserShown(t *testing.T) {
	e := newBindEnv(t)
	b := phone(t)
	p := e.authorizedAs(t, b, followerA)
	tab1 := e.signedIn(t, b, p)
	if !strings.Contains(tab1.body, `<strong id="consent-user">`+userID) {
		t.Fatalf("tab 1 consent page: %s", tab1.body)
	}
	casForm := get(t, b, e.base+"/bind/signin?idp=cas")
	tab2 := submit(t, b, casForm, url.Values{"username": {casUser}, "password": {casUserPass}})
	if !strings.Contains(tab2.body, `<strong id="consent-user">`+casUser) {
		t.Fatalf("tab 2 consent page: %d %s", tab2.status, tab2.body)
	}
	again := submitForm(t, b, tab1, `name="accept"`, url.Values{"accept": {"yes"}})
	if _, bound := e.bindingOf(t, casUser); bound {
		t.Fatalf("accepting the page shown for %s bound %s", userID, casUser)
	}
	if _, bound := e.bindingOf(t, userID); bound {
		t.Fatalf("accepting the page shown for %s after %s signed in bound %s", userID, casUser, userID)
	}
	if !strings.Contains(again.body, `<strong id="consent-user">`+casUser) {
		t.Fatalf("after the stale consent: %d %s", again.status, again.body)
	}
	submitForm(t, b, again, `name="accept"`, url.Values{"accept": {"yes"}})
	if bd, bound := e.bindingOf(t, casUser); !bound || bd.OpenID != followerA {
		t.Fatalf("the page shown for %s, accepted: %+v %v", casUser, bd, bound)
	}
}

// TestBindConsentAfterSignOut: a student signs in on the binding page (the campus
// sign-in of this service), reaches the consent page, then signs out of this service (the
// logout endpoint, confirmed). The sign-in that named the user number has ended, though the
// bind cookie, which holds the user number for 30 minutes, has not: the page asks for a
// sign-in again, and the consent form posted from the earlier page binds nothing.
func TestBindConsentAfterSignOut(t *testing.T) {
	e := newBindEnv(t)
	b := phone(t)
	consent := e.signedIn(t, b, e.authorizedAs(t, b, followerA))

	// Sign out of this service, at its logout endpoint (confirming, should it ask).
	out := get(t, b, e.base+"/auth/realms/campus/protocol/openid-connect/logout")
	if strings.Contains(out.body, `name="confirm"`) {
		out = submit(t, b, out, url.Values{})
	}
	if out.status != 200 || !strings.Contains(out.body, "You have signed out") {
		t.Fatalf("signed out: %d %s %s", out.status, out.url, out.body)
	}
	u, _ := url.Parse(e.base + "/auth/realms/campus/")
	for _, ck := range b.Jar.Cookies(u) {
		if ck.Name == "UCS_SESSION" || ck.Name == "UCS_BIND_SIGNIN" {
			t.Fatalf("still signed in after the logout: %v", ck)
		}
	}

	if p := get(t, b, e.base+"/bind"); strings.Contains(p.body, `name="accept"`) {
		t.Errorf("after signing out, the binding page still offers to bind %s with no sign-in", userID)
	}
	submitForm(t, b, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if bd, bound := e.bindingOf(t, userID); bound {
		t.Errorf("the consent form posted after its sign-in was signed out bound %s to %s", userID, bd.OpenID)
	}
}

// TestLogoutLinkDoesNotEndBindSignInUnconfirmed: a logout without id_token_hint is confirmed
// with a form, so that a link or an image on another site signs no one out: the binding page's
// sign-in too, when it is the browser's only one. The student's consent, answered after such a
// link was opened, binds.
func TestLogoutLinkDoesNotEndBindSignInUnconfirmed(t *testing.T) {
	e := newBindEnv(t)
	student := phone(t)
	consent := e.signedIn(t, student, e.authorizedAs(t, student, followerA))
	out := get(t, student, e.base+"/auth/realms/campus/protocol/openid-connect/logout")
	if !strings.Contains(out.body, `name="confirm"`) {
		t.Errorf("a bare GET of the logout endpoint, with the binding page's sign-in open: %d %s, want the confirmation form", out.status, out.url)
	}
	done := submitForm(t, student, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if _, bound := e.bindingOf(t, userID); !bound {
		t.Errorf("the consent answered after a logout link was opened bound nothing: %d %s", done.status, done.url)
	}
}

// signOutOthers signs user in to the account page (through idp) in a browser of its own, the
// student's laptop, where the phone holds the other sign-in, and presses "Sign out everywhere
// else"; it returns the laptop.
func (e *bindEnv) signOutOthers(t *testing.T, idp, user, password string) *http.Client {
	t.Helper()
	laptop := phone(t)
	login := get(t, laptop, e.base+"/auth/realms/campus/account?kc_idp_hint="+idp)
	acc := parseAccount(t, submit(t, laptop, login, url.Values{"username": {user}, "password": {password}}))
	if len(acc.sessions) != 2 || acc.csrf == "" {
		t.Fatalf("account page lists %d sessions: %s", len(acc.sessions), acc.page.body)
	}
	resp, err := laptop.PostForm(e.base+"/auth/realms/campus/account/sessions/end", url.Values{"sid": {"others"}, "csrf": {acc.csrf}})
	if err != nil {
		t.Fatal(err)
	}
	if p := read(t, resp); !strings.Contains(p.body, "Every other session has ended") {
		t.Fatalf("sign out everywhere else: %d %s", p.status, p.body)
	}
	return laptop
}

// TestBindConsentAfterSessionsEndedElsewhere: the student signed in on a friend's phone's
// binding page, then, on their own computer, signs in to the account page and presses "Sign out
// everywhere else", which ends the phone's sign-in session. The phone's consent form, posted
// afterwards, must not bind the student's user number to the friend's WeChat account.
func TestBindConsentAfterSessionsEndedElsewhere(t *testing.T) {
	e := newBindEnv(t)
	friend := phone(t)
	consent := e.signedIn(t, friend, e.authorizedAs(t, friend, followerA))

	laptop := e.signOutOthers(t, "local", userID, userPass)
	if acc := parseAccount(t, get(t, laptop, e.base+"/auth/realms/campus/account")); len(acc.sessions) != 1 {
		t.Fatalf("the phone's session did not end: %d sessions", len(acc.sessions))
	}

	submitForm(t, friend, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if bd, bound := e.bindingOf(t, userID); bound {
		t.Errorf("after every other sign-in session of %s was ended, the phone's consent form still bound it to %s", userID, bd.OpenID)
	}
}

// TestBindSignInKeepsSignInOfAnotherTab: a sign-in begun from the binding page (/bind/signin,
// outside the realm's path) leaves a sign-in open in another tab of the same browser going:
// both are bound to the one browser cookie, which the binding page's sign-in finds rather than
// replaces.
func TestBindSignInKeepsSignInOfAnotherTab(t *testing.T) {
	e := newBindEnv(t)
	b := phone(t)
	// Tab A: the account page's sign-in shows the login form.
	acct := get(t, b, e.base+"/auth/realms/campus/account?kc_idp_hint=local")
	if acct.status != http.StatusOK || !strings.Contains(acct.body, `name="password"`) {
		t.Fatalf("account page's login form: %d %s", acct.status, acct.body)
	}
	// Tab B: the binding page's sign-in begins (its login form shown, not sent).
	p := e.authorizedAs(t, b, followerA)
	if !strings.Contains(p.body, `href="/bind/signin?idp=local"`) {
		t.Fatalf("binding page: %s", p.body)
	}
	if login := get(t, b, e.base+"/bind/signin?idp=local"); login.status != http.StatusOK {
		t.Fatalf("binding page's login form: %d %s", login.status, login.body)
	}
	// Back in tab A, the user signs in.
	got := submit(t, b, acct, url.Values{"username": {userID}, "password": {userPass}})
	if got.status != http.StatusOK || got.url.Path != "/auth/realms/campus/account" {
		t.Fatalf("tab A's sign-in after the binding page's began in tab B: %d at %s, want the account page: %.300s",
			got.status, got.url.Path, got.body)
	}
}
