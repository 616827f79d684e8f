package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/campus-it/ucs/pkg/config"
)

// slowApp is a relying party on another site whose callback answers after delay (a real
// application exchanging the code before it answers, or a slow phone network); cb is its
// callback address.
func slowApp(t *testing.T, delay time.Duration) (cb string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/cb", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(delay)
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><p id="app">back at the application</p>`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/cb"
}

// TestConsentDoubleClickEndsAtTheApplication: a person who double-clicks "Allow" (as many do
// on buttons) is sent back to the application, signed in, as with one click: the browser posts
// the form twice, and the second post must not leave them on an error page while the code
// of the first is dropped with the navigation the second replaced.
func TestConsentDoubleClickEndsAtTheApplication(t *testing.T) {
	e, cb, tb := slowAppEnv(t)
	auth := e.issuer + "/protocol/openid-connect/auth?" + url.Values{"client_id": {"webapp"}, "response_type": {"code"},
		"redirect_uri": {cb}, "scope": {"openid notification.mp"}, "state": {"s1"}, "kc_idp_hint": {"local"}}.Encode()
	tb.run(chromedp.Navigate(auth),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), userID),
		chromedp.SendKeys(chromedp.ID("password"), userPass),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[name=accept]`)))
	doubleClick(tb, `button[name=accept]`)
	if loc, body, ok := atApplication(tb, cb); !ok {
		t.Fatalf("after a double click on Allow the browser is at %s:\n%s", loc, body)
	}
}

// atApplication waits, up to 5 s, for the browser to show the application's page at cb; it
// returns where the browser is, and what it shows, either way.
func atApplication(tb tab, cb string) (loc, body string, ok bool) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		loc, body = tb.eval(`location.href`), tb.eval(`document.body ? document.body.innerText : ""`)
		if strings.HasPrefix(loc, cb) && strings.Contains(body, "back at the application") {
			return loc, body, true
		}
		if time.Now().After(deadline) {
			return loc, body, false
		}
	}
}

// settled waits for the page the browser is at to have loaded.
func settled(tb tab) {
	tb.t.Helper()
	waitFor(tb.t, func() bool { return tb.eval(`document.readyState`) == "complete" })
}

// slowAppEnv is a sign-in environment with the client webapp, whose callback is a slowApp
// answering in 500 ms, and a Chromium tab.
func slowAppEnv(t *testing.T) (*signInEnv, string, tab) {
	t.Helper()
	cb := slowApp(t, 500*time.Millisecond)
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		c.OAuth.Clients = append(c.OAuth.Clients, config.Client{ClientID: "webapp", ClientSecret: rpSecret,
			Grants: []string{"authorization_code"}, Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{cb}})
	})
	ctx, _ := chromium(t)
	return e, cb, tab{t: t, ctx: ctx}
}

// doubleClick double-clicks the element css selects as a person does: two presses 120 ms apart,
// the second with clickCount 2.
func doubleClick(tb tab, css string) {
	tb.t.Helper()
	xy := tb.eval(`(() => { const r = document.querySelector("` + css + `").getBoundingClientRect(); return (r.x + r.width/2) + " " + (r.y + r.height/2) })()`)
	var x, y float64
	if _, err := fmt.Sscan(xy, &x, &y); err != nil {
		tb.t.Fatal(err)
	}
	tb.run(chromedp.MouseClickXY(x, y), chromedp.Sleep(120*time.Millisecond), chromedp.MouseClickXY(x, y, chromedp.ClickCount(2)))
}

// TestBackAfterSignOutSignsNoOneIn: on a shared computer a person signs in to an application,
// leaves its consent page unanswered, signs out on the account page and walks away. The next
// person presses Back to the page the password's post answered and lets the browser send the
// form again (its "Confirm Form Resubmission"): the previous person's user number and password
// must sign no one in.
func TestBackAfterSignOutSignsNoOneIn(t *testing.T) {
	e := newSignInEnv(t)
	ctx, _ := chromium(t)
	tb := tab{t: t, ctx: ctx}
	tb.run(chromedp.Navigate(e.authURL("portal", "s1")),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), userID),
		chromedp.SendKeys(chromedp.ID("password"), userPass),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[name=accept]`)))
	// Not answered: the person opens the account page instead and signs out there.
	tb.run(chromedp.Navigate(e.issuer+"/account"), chromedp.WaitVisible(chromedp.CSS(`[id^=session-]`)))
	tb.run(chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("[id^=session-]")].find(li => li.textContent.includes("当前浏览器")).querySelector("button").click()`))
	waitFor(t, func() bool {
		return strings.Contains(tb.eval(`document.body ? document.body.innerText : ""`), "You have signed out")
	})
	// The next person: Back twice, to the answer of the password's post, and Reload (resubmit).
	tb.run(chromedp.NavigateBack())
	settled(tb)
	// The answer of a post is not stored (no-store): Chrome shows ERR_CACHE_MISS, which Reload
	// answers by posting the form again.
	if err := chromedp.Do(ctx, chromedp.NavigateBack()); err != nil && !strings.Contains(err.Error(), "ERR_CACHE_MISS") {
		t.Fatal(err)
	}
	settled(tb)
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Logf("reload: %v", err)
	}
	settled(tb)
	// Is this browser signed in as the previous person?
	tb.run(chromedp.Navigate(e.issuer + "/account"))
	settled(tb)
	if body := tb.eval(`document.body ? document.body.innerText : ""`); strings.Contains(body, "Signed in as") || strings.Contains(body, "我的账户") {
		t.Fatalf("after Back and resubmitting the signed-out person's sign-in form, the account page is theirs:\n%s", body)
	}
}

// TestLogoutConfirmDoubleClickEndsAtTheApplication: a double click on the logout
// confirmation's "Sign out" ends at the application's post-logout address, as one click does.
func TestLogoutConfirmDoubleClickEndsAtTheApplication(t *testing.T) {
	e, cb, tb := slowAppEnv(t)
	signInOnAccountPage(t, tb, e.issuer)
	tb.run(chromedp.Navigate(e.issuer+"/protocol/openid-connect/logout?"+url.Values{"client_id": {"webapp"},
		"post_logout_redirect_uri": {cb}}.Encode()), chromedp.WaitVisible(chromedp.CSS(`button[type=submit]`)))
	doubleClick(tb, `button[type=submit]`)
	if loc, body, ok := atApplication(tb, cb); !ok {
		t.Fatalf("after a double click on Sign out the browser is at %s:\n%s", loc, body)
	}
}
