package server_test

import (
	"net/url"
	"strings"
	"testing"
)

// TestBindCASSignInAfterSessionsEndedElsewhereAsksForAPassword: a student signs in through the
// campus sign-on (the default provider) on a friend's phone's binding page, then, from their own
// laptop, presses "Sign out everywhere else" on the account page, as deployments/README.md says
// protects them ("is asked to sign in again"). The friend then opens the binding page and presses
// "Sign in with the campus single sign-on": the campus sign-on's session still open in the
// phone's in-app browser answers at once, with no password, and the friend binds the student's
// user number to their own WeChat account.
func TestBindCASSignInAfterSessionsEndedElsewhereAsksForAPassword(t *testing.T) {
	e := newBindEnv(t)
	friend := phone(t)
	e.authorizedAs(t, friend, followerA)
	casForm := get(t, friend, e.base+"/bind/signin?idp=cas")
	consent := submit(t, friend, casForm, url.Values{"username": {casUser}, "password": {casUserPass}})
	if !strings.Contains(consent.body, `<strong id="consent-user">`+casUser) {
		t.Fatalf("consent page after CAS: %d %s", consent.status, consent.body)
	}

	// On the laptop: the account page, "Sign out everywhere else".
	laptop := phone(t)
	login := get(t, laptop, e.base+"/auth/realms/campus/account?kc_idp_hint=cas")
	acc := parseAccount(t, submit(t, laptop, login, url.Values{"username": {casUser}, "password": {casUserPass}}))
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

	// The friend, later, on the same phone.
	if p := get(t, friend, e.base+"/bind"); strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("the binding page still offers the consent: %s", p.body)
	}
	again := get(t, friend, e.base+"/bind/signin?idp=cas")
	if strings.Contains(again.body, `<strong id="consent-user">`+casUser) {
		submitForm(t, friend, again, `name="accept"`, url.Values{"accept": {"yes"}})
		bd, bound := e.bindingOf(t, casUser)
		t.Errorf("after %s signed out everywhere else, the friend's phone got the consent page for %s with no password "+
			"(the campus sign-on's single sign-on answered); accepted, %s is bound to %s: %v",
			casUser, casUser, casUser, bd.OpenID, bound)
	}
}

// TestBindCASSignInAfterCancelAsksForAPassword: a student signs in through the campus sign-on on
// a friend's phone's binding page, presses Cancel ("nothing was changed") and hands the phone
// back. The friend presses the campus sign-in button and gets the student's consent page at
// once, with no password: one press binds the student's user number to the friend's WeChat.
func TestBindCASSignInAfterCancelAsksForAPassword(t *testing.T) {
	e := newBindEnv(t)
	friend := phone(t)
	e.authorizedAs(t, friend, followerA)
	casForm := get(t, friend, e.base+"/bind/signin?idp=cas")
	consent := submit(t, friend, casForm, url.Values{"username": {casUser}, "password": {casUserPass}})
	if !strings.Contains(consent.body, `<strong id="consent-user">`+casUser) {
		t.Fatalf("consent page after CAS: %d %s", consent.status, consent.body)
	}
	if p := submitForm(t, friend, consent, `name="cancel"`, url.Values{"cancel": {"yes"}}); !strings.Contains(p.body, "Cancelled") {
		t.Fatalf("cancel: %s", p.body)
	}

	again := get(t, friend, e.base+"/bind/signin?idp=cas")
	if strings.Contains(again.body, `<strong id="consent-user">`+casUser) {
		submitForm(t, friend, again, `name="accept"`, url.Values{"accept": {"yes"}})
		bd, bound := e.bindingOf(t, casUser)
		t.Errorf("after %s cancelled, the next press of the campus sign-in on the phone shows the consent for %s with no password; "+
			"accepted, %s is bound to %s: %v", casUser, casUser, casUser, bd.OpenID, bound)
	}
}

// TestBindLeavesNoSignInBehindOnTheFriendsPhone: a student binds on a friend's phone (the
// local sign-in, password typed) and hands the phone back. The binding page never says that
// the phone is now signed in as the student, and offers no sign-out, though
// deployments/README.md counts on the student signing out "there"; the friend then opens the
// account page in the same in-app browser and is the student (their sessions, their
// applications, "Sign out everywhere else"), with no password, for the session's 10 hours.
func TestBindLeavesNoSignInBehindOnTheFriendsPhone(t *testing.T) {
	e := newBindEnv(t)
	friend := phone(t)
	consent := e.signedIn(t, friend, e.authorizedAs(t, friend, followerA))
	done := submitForm(t, friend, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if !strings.Contains(done.body, "Bound: you will receive") {
		t.Fatalf("after consent: %d %s", done.status, done.body)
	}
	offersSignOut := strings.Contains(done.body, "openid-connect/logout")
	acc := get(t, friend, e.base+"/auth/realms/campus/account")
	if !offersSignOut && strings.Contains(acc.body, "Signed in as <strong>"+userID) {
		t.Errorf("after binding on the friend's phone, the binding page offers no sign-out, and the friend's browser "+
			"opens %s's account page with no password: %d %s", userID, acc.status, acc.url)
	}
}
