package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// casSignInChromium signs the Chromium tab in through the campus sign-on, at the account page.
func (e *signInEnv) casSignInChromium(t *testing.T, tb tab) {
	t.Helper()
	tb.run(chromedp.Navigate(e.issuer+"/account?kc_idp_hint=cas"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=username]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=username]`), "2020000042"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "cas-password"),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[id^=session-]`)))
}

// bodyText is the page's text, "" while there is no body.
func (b tab) bodyText() string {
	return b.eval(`document.body ? document.body.innerText : ""`)
}

// waitUntil polls cond for at most d; it reports whether cond held.
func waitUntil(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cond()
}

// TestAccountSignOutOfCASSessionInChromium: a student signed in through the campus single
// sign-on presses "退出登录 Sign out" on the account page, in their own session's row. The
// server ends the session and redirects to the campus sign-on's /logout, so that the next
// person at the computer is not signed in as them. Chromium checks the redirect that answers a
// form against the page's form-action, so the account page must allow the campus sign-on's
// origin there: the browser reaches the signed-out page, and the next sign-in asks for the
// password.
func TestAccountSignOutOfCASSessionInChromium(t *testing.T) {
	e := newSignInEnv(t)
	ctx, problems := chromium(t)
	tb := tab{t: t, ctx: ctx}
	e.casSignInChromium(t, tb)

	tb.run(chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("[id^=session-]")].find(li => li.textContent.includes("当前浏览器")).querySelector("button").click()`))
	signedOut := waitUntil(10*time.Second, func() bool { return strings.Contains(tb.bodyText(), "You have signed out") })
	var blocked []string
	for _, m := range problems.all() {
		if strings.Contains(m, "form-action") || strings.Contains(m, "Content Security Policy") {
			blocked = append(blocked, m)
		}
	}
	if !signedOut || len(blocked) > 0 {
		at := tb.eval(`location.href`)
		// What the next person at this computer gets on pressing "sign in".
		tb.run(chromedp.Navigate(e.issuer + "/account?kc_idp_hint=cas"))
		next := "the campus password form"
		if waitUntil(5*time.Second, func() bool { return strings.Contains(tb.bodyText(), "My account") }) {
			next = "the account page of 2020000042, no password asked"
		}
		t.Fatalf("signing out of a campus sign-on session from the account page: signed-out page reached %v, "+
			"at %q; the browser refused: %v; the next sign-in on this browser gets %s", signedOut, at, blocked, next)
	}
	// The campus single sign-on ended too: the next sign-in asks for the campus password.
	tb.run(chromedp.Navigate(e.issuer+"/account?kc_idp_hint=cas"), chromedp.WaitVisible(chromedp.CSS(`input[name=password]`)))
}

// TestConsentRenewThroughCASInChromium: an application asks with max_age=60 and the campus
// sign-on as provider; the student, signed in 30 s before, reads the consent page for 5
// minutes. "Allow" is answered with a new sign-in at the campus sign-on (a redirect to its
// /login?renew=true; TestMaxAgeRecheckedAtConsent shows the same for the local form), which
// the consent page's form-action must allow for Chromium to follow it.
func TestConsentRenewThroughCASInChromium(t *testing.T) {
	e := newSignInEnv(t)
	ctx, problems := chromium(t)
	tb := tab{t: t, ctx: ctx}
	e.casSignInChromium(t, tb) // a campus sign-on session in this browser
	e.clock.Advance(30 * time.Second)
	tb.run(chromedp.Navigate(e.authURL("portal", "ma", "max_age", "60", "kc_idp_hint", "cas")),
		chromedp.WaitVisible(chromedp.CSS(`button[name=accept]`)))
	e.clock.Advance(5 * time.Minute) // the student reads the consent page
	tb.run(chromedp.Click(chromedp.CSS(`button[name=accept]`)))
	atCAS := waitUntil(10*time.Second, func() bool {
		return strings.HasPrefix(tb.eval(`location.href`), e.cas.URL()+"/login")
	})
	var blocked []string
	for _, m := range problems.all() {
		if strings.Contains(m, "Content Security Policy") {
			blocked = append(blocked, m)
		}
	}
	if !atCAS || len(blocked) > 0 {
		t.Fatalf("allowing after max_age passed: at the campus sign-on %v, at %q; the browser refused: %v",
			atCAS, tb.eval(`location.href`), blocked)
	}
}

// TestFormAddressesOpenedAsPagesAnswerHTML: after a wrong password the browser shows the
// login form again at the form's own address (/login-actions/authenticate?req=…), and the
// consent page is shown there too. A person who opens that address with a GET (WeChat's
// "在浏览器打开 open in browser", pressing Enter in the address bar), or opens the account
// forms' addresses, is a browser asking for a page, and gets one, as Keycloak's
// LoginActionsService answers GET on login-actions/authenticate with the flow's page or its
// "page has expired" page; never the data interfaces' JSON envelope.
func TestFormAddressesOpenedAsPagesAnswerHTML(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	login := get(t, b, e.authURL("portal", "st"))
	wrong := submit(t, b, login, url.Values{"username": {userID}, "password": {"nope"}})
	if wrong.status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", wrong.status)
	}
	for _, u := range []string{
		wrong.url.String(), // the address bar after the wrong password
		e.issuer + "/login-actions/consent?req=x",
		e.issuer + "/account/sessions/end",
		e.issuer + "/account/grants/revoke",
	} {
		if p, ct := openAsPage(t, b, u); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("GET %s in a browser: %d %s %.120s; want an HTML page (the login form again or an expired page)",
				strings.TrimPrefix(u, e.base), p.status, ct, p.body)
		}
	}
}

// TestErrorPageExplanationInChineseAndMarkedEnglish: the pages are "Chinese first with
// English beside it" (package pages), in a document of lang="zh-CN". An error page's
// explanation (here: an unknown client) is given in Chinese, and its English part is marked
// lang="en", so that a screen reader reads each in its language (WCAG 3.1.2 Language of
// Parts). Chromium shows it.
func TestErrorPageExplanationInChineseAndMarkedEnglish(t *testing.T) {
	e := newSignInEnv(t)
	ctx, _ := chromium(t)
	tb := tab{t: t, ctx: ctx}
	tb.run(chromedp.Navigate(e.issuer+"/protocol/openid-connect/auth?"+url.Values{"client_id": {"no-such-app"},
		"response_type": {"code"}, "redirect_uri": {rpRedirect}}.Encode()),
		chromedp.WaitVisible(chromedp.CSS(`.message`)))
	msg := tb.text(".message")
	lang := tb.eval(`document.querySelector(".message").closest("[lang]").lang`)
	hasChinese := strings.ContainsFunc(msg, func(r rune) bool { return r >= 0x4e00 && r <= 0x9fff })
	if !hasChinese || lang != "en" && !strings.Contains(tb.eval(`[...document.querySelectorAll(".message [lang=en]")].length + ""`), "1") {
		t.Fatalf("the error page's explanation %q: Chinese given %v; its language as the browser sees it %q", msg, hasChinese, lang)
	}
}

// TestStepOpenedForFinishedRequestShowsExpired: after a wrong password the browser shows
// /login-actions/authenticate?req=…; the student then signs in and is sent back to the
// application, which finishes the request (once only). Opening that address again shows the
// expired page at once, not a login form that could never finish (its password would be
// answered "此次登录已经完成 This sign-in was already finished").
func TestStepOpenedForFinishedRequestShowsExpired(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	login := get(t, b, e.authURL("trusted", "st"))
	wrong := submit(t, b, login, url.Values{"username": {userID}, "password": {"nope"}})
	if wrong.status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", wrong.status)
	}
	callback(t, submit(t, b, wrong, url.Values{"username": {userID}, "password": {userPass}})) // finished

	again := get(t, b, wrong.url.String())
	if again.status != http.StatusBadRequest || !strings.Contains(again.body, "登录已过期") || strings.Contains(again.body, `name="password"`) {
		t.Fatalf("GET of a finished request's step: %d %.300s; want the expired page", again.status, again.body)
	}
}

// TestBindUnbindAddressOpenedAsPage: the binding page's unbind form address, /bind/unbind,
// opened with GET in WeChat's in-app browser (a copied link, a reload) shows a page, the
// binding page, as the account forms' addresses do; never the data interfaces' JSON.
func TestBindUnbindAddressOpenedAsPage(t *testing.T) {
	e := newBindEnv(t)
	b := phone(t)
	e.authorizedAs(t, b, followerA)
	if p, ct := openAsPage(t, b, e.base+"/bind/unbind"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("GET /bind/unbind in the in-app browser: %d %s %.120s; want a page (the binding page)", p.status, ct, p.body)
	}
}

// csrfRefused reads ucs_security_events_total{event="csrf_refused"} from the front end's /metrics.
func csrfRefused(t *testing.T, base string) string {
	t.Helper()
	p := get(t, http.DefaultClient, base+"/metrics")
	for _, line := range strings.Split(p.body, "\n") {
		if strings.HasPrefix(line, `ucs_security_events_total{event="csrf_refused"}`) {
			return strings.TrimSpace(strings.TrimPrefix(line, `ucs_security_events_total{event="csrf_refused"}`))
		}
	}
	t.Fatalf("no csrf_refused series in /metrics")
	return ""
}

// TestStepOpenedInAnotherBrowserIsNoForgery: the sign-in address opened in another browser
// (WeChat's "在浏览器打开 open in browser" moves it to the system browser) is a plain
// navigation that posts no form: it gets the expired page, and is neither logged nor counted
// as a forged request (ucs_security_events_total{event="csrf_refused"}, which operators watch
// for attacks).
func TestStepOpenedInAnotherBrowserIsNoForgery(t *testing.T) {
	e := newSignInEnv(t)
	wechat := browser(t)
	login := get(t, wechat, e.authURL("portal", "st"))
	wrong := submit(t, wechat, login, url.Values{"username": {userID}, "password": {"nope"}})
	if wrong.status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", wrong.status)
	}
	before := csrfRefused(t, e.base)
	other := browser(t) // the system browser: no cookies of the in-app one
	p := get(t, other, wrong.url.String())
	after := csrfRefused(t, e.base)
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "登录已过期") {
		t.Fatalf("the login address opened in another browser: %d %.300s; want the expired page", p.status, p.body)
	}
	if before != after {
		t.Fatalf("opening the login address in another browser (answered %d): csrf_refused went from %s to %s; "+
			"a navigation that posts no form is no forged request", p.status, before, after)
	}
}

// openAsPage opens u as a browser opens an address typed or followed: a GET asking for HTML.
// It returns the answer and its Content-Type.
func openAsPage(t *testing.T, b *http.Client, u string) (page, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, resp), resp.Header.Get("Content-Type")
}

// TestFinishedLoginFormPostedAgainSignsNoOneIn: on a shared computer a student signs in to an
// application with the login form (the code went back: the request is finished) and signs out.
// The next person goes Back to the login step and lets the browser send the form again, with
// the student's user number and password: the answer is the expired page, no password is
// checked, and the browser holds no session afterwards.
func TestFinishedLoginFormPostedAgainSignsNoOneIn(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	login := get(t, b, e.authURL("trusted", "st"))
	if !strings.Contains(login.body, `name="password"`) {
		t.Fatalf("login page: %d %.200s", login.status, login.body)
	}
	creds := url.Values{"username": {userID}, "password": {userPass}}
	callback(t, submit(t, b, login, creds))
	acc := e.account(t, b)
	if out := e.accountPost(t, b, "/sessions/end", url.Values{"sid": {acc.own()}, "csrf": {acc.csrf}}); out.status != http.StatusOK {
		t.Fatalf("sign-out: %d %.200s", out.status, out.body)
	}
	if p := get(t, b, e.issuer+"/account"); !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("after the sign-out the account page asks for no password: %d %.200s", p.status, p.body)
	}
	// Refused: the sign-out gave the browser a new value, which the form was not opened under
	// (403), as a form of a finished request is refused anyway (400, expired).
	again := submit(t, b, login, creds)
	if again.status != http.StatusForbidden && (again.status != http.StatusBadRequest || !strings.Contains(again.body, "Sign-in expired")) {
		t.Errorf("the finished request's form posted again: %d %.200s, want a refusal", again.status, again.body)
	}
	if p := get(t, b, e.issuer+"/account"); !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("the finished request's form posted again signed the browser in: the account page asks for no password: %d %.200s", p.status, p.body)
	}
}
