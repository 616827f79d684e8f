package server_test

import (
	"net/http"
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
	casConsent(t, e, friend)
	e.signOutOthers(t, "cas", casUser, casUserPass)
	// The friend, later, on the same phone.
	if p := get(t, friend, e.base+"/bind"); strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("the binding page still offers the consent: %s", p.body)
	}
	requireCASAsksPassword(t, e, friend, "signed out everywhere else")
}

// TestBindCASSignInAfterCancelAsksForAPassword: a student signs in through the campus sign-on on
// a friend's phone's binding page, presses Cancel ("nothing was changed") and hands the phone
// back. The friend presses the campus sign-in button and gets the student's consent page at
// once, with no password: one press binds the student's user number to the friend's WeChat.
func TestBindCASSignInAfterCancelAsksForAPassword(t *testing.T) {
	e := newBindEnv(t)
	friend := phone(t)
	consent := casConsent(t, e, friend)
	if p := submitForm(t, friend, consent, `name="cancel"`, url.Values{"cancel": {"yes"}}); !strings.Contains(p.body, "Cancelled") {
		t.Fatalf("cancel: %s", p.body)
	}
	requireCASAsksPassword(t, e, friend, "cancelled")
}

// casConsent signs the student in through the campus sign-on on the friend's phone's binding
// page, authorized as followerA, and returns the consent page.
func casConsent(t *testing.T, e *bindEnv, friend *http.Client) page {
	t.Helper()
	e.authorizedAs(t, friend, followerA)
	casForm := get(t, friend, e.base+"/bind/signin?idp=cas")
	consent := submit(t, friend, casForm, url.Values{"username": {casUser}, "password": {casUserPass}})
	if !strings.Contains(consent.body, `<strong id="consent-user">`+casUser) {
		t.Fatalf("consent page after CAS: %d %s", consent.status, consent.body)
	}
	return consent
}

// requireCASAsksPassword fails the test when the next press of the campus sign-in on the
// friend's phone, after the student did what, shows the student's consent with no password;
// it then accepts it, to say what that binds.
func requireCASAsksPassword(t *testing.T, e *bindEnv, friend *http.Client, what string) {
	t.Helper()
	again := get(t, friend, e.base+"/bind/signin?idp=cas")
	if strings.Contains(again.body, `<strong id="consent-user">`+casUser) {
		submitForm(t, friend, again, `name="accept"`, url.Values{"accept": {"yes"}})
		bd, bound := e.bindingOf(t, casUser)
		t.Errorf("after %s %s, the next press of the campus sign-in on the phone shows the consent for %s with no password "+
			"(the campus sign-on's single sign-on answered); accepted, %s is bound to %s: %v",
			casUser, what, casUser, casUser, bd.OpenID, bound)
	}
}

// TestBindLeavesNoSignInBehindOnTheFriendsPhone: a student binds on a friend's phone (the
// local sign-in, password typed) and hands the phone back. The sign-in served the binding alone:
// the friend, opening the account page in the same in-app browser, is not the student (their
// sessions, their applications, "Sign out everywhere else"), as they were for the session's
// 10 hours.
func TestBindLeavesNoSignInBehindOnTheFriendsPhone(t *testing.T) {
	e := newBindEnv(t)
	friend := phone(t)
	consent := e.signedIn(t, friend, e.authorizedAs(t, friend, followerA))
	done := submitForm(t, friend, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if !strings.Contains(done.body, "Bound: you will receive") {
		t.Fatalf("after consent: %d %s", done.status, done.body)
	}
	if acc := get(t, friend, e.base+"/auth/realms/campus/account"); strings.Contains(acc.body, "Signed in as <strong>"+userID) {
		t.Errorf("after binding on the friend's phone, the friend's browser opens %s's account page with no password: %d %s",
			userID, acc.status, acc.url)
	}
}

// TestBindSignInUnansweredLeavesNoSignInBehind: a student signs in on a friend's phone's
// binding page (password typed), reads the consent page, and hands the phone back without
// pressing Bind or Cancel (or the in-app browser is closed). The sign-in serves the binding
// alone: the friend, opening the account page or an application's sign-in in the same
// in-app browser, is not the student.
func TestBindSignInUnansweredLeavesNoSignInBehind(t *testing.T) {
	e := newBindEnv(t)
	friend := phone(t)
	consent := e.signedIn(t, friend, e.authorizedAs(t, friend, followerA)) // never answered
	if !strings.Contains(consent.body, `name="accept"`) {
		t.Fatalf("no consent page after the sign-in: %d %s", consent.status, consent.url)
	}
	if acc := get(t, friend, e.base+"/auth/realms/campus/account"); strings.Contains(acc.body, "Signed in as <strong>"+userID) {
		t.Errorf("the binding page's sign-in, its consent unanswered, opens %s's account page in the friend's browser with no password: %d %s",
			userID, acc.status, acc.url)
	}
}

// TestBindCASSignInUnansweredLeavesNoSignInBehind: the same through the campus sign-on. Its
// sign-in, even asked with renew, opens its own single sign-on session in the phone's browser;
// left open while the consent waits, it signed the friend in to the account page as the
// student, no password asked.
func TestBindCASSignInUnansweredLeavesNoSignInBehind(t *testing.T) {
	e := newBindEnv(t)
	friend := phone(t)
	casConsent(t, e, friend) // never answered
	if acc := get(t, friend, e.base+"/auth/realms/campus/account"); strings.Contains(acc.body, "Signed in as <strong>"+casUser) {
		t.Errorf("the binding page's campus sign-in, its consent unanswered, opens %s's account page in the friend's browser with no password: %d %s",
			casUser, acc.status, acc.url)
	}
}
