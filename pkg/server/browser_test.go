package server_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// chromium starts a headless Chromium for a test and returns its context. The page tests need
// Debian's chromium package (.ci/run installs it); without it they fail and say so.
func chromium(t *testing.T) (context.Context, *console) {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("the page tests need Chromium: apt-get install chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(390, 844)) // a phone
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })

	return ctx, watchConsole(ctx)
}

// tab drives one browser tab in a test; a step that fails ends the test.
type tab struct {
	t   *testing.T
	ctx context.Context
}

func (b tab) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

// text is the text of the first element css selects.
func (b tab) text(css string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// eval is the string a script evaluates to.
func (b tab) eval(js string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// console is what a page wrote to the console as errors, and the browser's log entries of
// level error (a CSP violation among them).
type console struct {
	mu     sync.Mutex
	errors []string
}

func (c *console) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.errors)
}

func watchConsole(ctx context.Context) *console {
	c := &console{}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				c.mu.Lock()
				c.errors = append(c.errors, m.String())
				c.mu.Unlock()
			}
		}
	}()
	return c
}

// TestAccountPageInChromium: a person on a phone-sized screen signs in on the account page,
// sees the application they granted, removes its access and signs out, in a real browser that
// enforces the pages' Content-Security-Policy and cookies.
func TestAccountPageInChromium(t *testing.T) {
	e := newSignInEnv(t)
	ctx, problems := chromium(t)
	// The user granted portal access from another device.
	if _, errc := e.exchange(t, "portal", e.signInCode(t, browser(t), "portal")); errc != "" {
		t.Fatal(errc)
	}

	tb := tab{t: t, ctx: ctx}
	run, text, eval := tb.run, tb.text, tb.eval

	run(chromedp.Navigate(e.issuer+"/account"),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), userID),
		chromedp.SendKeys(chromedp.ID("password"), userPass),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("grant-portal")))
	body := text("main")
	for _, want := range []string{"我的账户", "My account", userID, "portal", "Send you messages", "当前浏览器", "Go-http-client"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	// The inline style ran under the CSP nonce: buttons have the page's colours.
	if color := eval(`getComputedStyle(document.querySelector("#grant-portal button")).borderTopColor`); color != "rgb(29, 90, 166)" {
		t.Errorf("the page's style did not apply (border %q)", color)
	}
	if w := eval(`document.documentElement.scrollWidth + " " + window.innerWidth`); strings.Fields(w)[0] != strings.Fields(w)[1] {
		t.Errorf("the page is wider than a phone screen (content, window): %s", w)
	}

	run(chromedp.Click(chromedp.CSS(`#grant-portal button`)), chromedp.WaitVisible(chromedp.CSS(`.notice`)))
	waitFor(t, func() bool { return eval(`String(document.querySelectorAll("[id^=grant-]").length)`) == "0" })
	if notice, n := text(".notice"), eval(`String(document.querySelectorAll("[id^=grant-]").length)`); !strings.Contains(notice, "access is removed") || n != "0" {
		t.Fatalf("after removing access: notice %q, %s grants listed", notice, n)
	}

	// This browser's session, signed out from its own row.
	run(chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("[id^=session-]")].find(li => li.textContent.includes("当前浏览器")).querySelector("button").click()`))
	waitFor(t, func() bool {
		return strings.Contains(eval(`document.body ? document.body.innerText : ""`), "You have signed out")
	})
	if errs := problems.all(); len(errs) > 0 {
		t.Fatalf("the browser reported errors: %v", errs)
	}

	// The watch above can see a refusal: an image the CSP forbids is reported.
	run(chromedp.Evaluate[chromedp.Void](`document.body.appendChild(Object.assign(document.createElement("img"), {src: "/forbidden.png"}))`))
	waitFor(t, func() bool { return len(problems.all()) > 0 })
	if errs := problems.all(); len(errs) == 0 || !strings.Contains(strings.Join(errs, " "), "Content Security Policy") {
		t.Fatalf("a CSP violation was not reported: %v", errs)
	}
}

// waitFor polls cond until it holds, for at most 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	embeddedtest.Eventually(t, 10*time.Second, "the page gets there", cond)
}
