package standalone_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/standalone"
)

// browserPage is a headless Chromium on a phone- or desktop-sized screen, with what the page
// reported as errors (a CSP violation among them).
type browserPage struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// newBrowser starts a headless Chromium (Debian's chromium package; .ci/run installs it). The
// tests are skipped under -short only: without Chromium they fail and say so.
func newBrowser(t *testing.T, width, height int) *browserPage {
	t.Helper()
	if testing.Short() {
		t.Skip("drives Chromium; skipped under -short")
	}
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
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	b := &browserPage{t: t, ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, m.String())
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func (b *browserPage) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browserPage) eval(js string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// text is the visible text of the first element css selects, "" when there is none.
func (b *browserPage) text(css string) string {
	b.t.Helper()
	q, _ := json.Marshal(css)
	return b.eval(fmt.Sprintf(`(document.querySelector(%s) || {innerText: ""}).innerText`, q))
}

// until polls cond, in the page as it is (no reload), for at most 20 seconds.
func (b *browserPage) until(what string, cond func() bool) {
	b.t.Helper()
	held := false
	defer func() {
		if !held { // Eventually failed the test: show what the page says instead
			b.t.Logf("the page says:\n%s", b.eval(`document.body ? document.body.innerText : ""`))
		}
	}()
	embeddedtest.Eventually(b.t, 20*time.Second, what, cond)
	held = true
}

func (b *browserPage) noErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		b.t.Fatalf("the browser reported errors: %v", b.errors)
	}
}

// screenshot saves the page to $UCS_SCREENSHOTS/name (the README's pictures, in
// pkg/pages/screenshots/) when that variable names a folder.
func (b *browserPage) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("UCS_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // quality 100 makes a PNG
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn fills the built-in directory's login form the page was sent to.
func (b *browserPage) signIn(user, password string) {
	b.t.Helper()
	b.run(chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), user),
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)))
}

func password(t *testing.T, info standalone.Info, user string) string {
	for _, u := range info.Users {
		if u.UserID == user {
			return u.Password
		}
	}
	t.Fatalf("no user %s in standalone.json", user)
	return ""
}

// pushTo pushes a to-do item to user and returns its ucsId.
func pushTo(t *testing.T, base, tok, user string, data map[string]string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"userId": user, "type": "TDL", "url": "https://portal.example.edu/todo/1", "data": data})
	st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, string(b))
	if st != 200 {
		t.Fatalf("push: %d %v", st, m)
	}
	return m["data"].(map[string]any)["ucsId"].(string)
}

// final waits for the push to reach a final state, read through the interface, and returns it.
func final(t *testing.T, base, tok, id string) string {
	t.Helper()
	var st string
	embeddedtest.Eventually(t, 20*time.Second, id+" has a final state", func() bool {
		st = lookup(t, base, tok, id)["state"].(string)
		return st == "delivered" || st == "failed"
	})
	return st
}

var todo = map[string]string{"header": "您有一条待办", "type": "请假审批", "list": "学生请假", "step": "辅导员审批",
	"content": "张三的请假申请待您审批", "remark": "请尽快处理"}

// TestSandboxPhonesInChromium: on the sandbox page a message pushed through the interface
// appears on its user's phone without a reload, drawn after the platform's rules (no first
// line, no remark, no emoji), with its delivery state as it changes, and a message that
// fails shows why. The stack's TDL template carries the first line and the remark as keywords,
// as templates made before the platform's rules did, so the simulator receives them and the
// phone must leave them out.
func TestSandboxPhonesInChromium(t *testing.T) {
	cfg := &config.Config{Platform: config.Platform{Templates: map[string]config.Template{
		"TDL": {TemplateID: "tpl-TDL-legacy", Fields: map[string]string{"header": "first", "type": "thing1", "list": "thing2",
			"step": "thing3", "content": "thing4", "remark": "remark"}},
	}}}
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Workers: 1, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, base := s.Info, s.Info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	b := newBrowser(t, 1280, 900)
	b.run(chromedp.Navigate(base+"/sandbox"), chromedp.WaitVisible(chromedp.ID("phone-2020000001")))
	if n := b.eval(`String(document.querySelectorAll(".phone").length)`); n != "3" {
		t.Fatalf("%s phones, want one per demo user", n)
	}
	if got := b.text("#phone-2020000001 .messages"); !strings.Contains(got, "还没有消息") {
		t.Fatalf("an empty phone shows %q", got)
	}

	// A push through the interface: it appears while the page stays open.
	id := pushTo(t, base, tok, "2020000001", todo)
	msg := fmt.Sprintf(`#phone-2020000001 li.msg[data-ucs=%q]`, id)
	b.until("the pushed message on the phone, delivered", func() bool {
		return b.eval(fmt.Sprintf(`document.querySelector(%q)?.dataset.state || ""`, msg+" .state")) == "delivered"
	})
	got := b.text(msg)
	for _, want := range []string{"待办事项", "待办类型", "请假审批", "学生请假", "辅导员审批", "张三的请假申请待您审批", "详情", "已送达"} {
		if !strings.Contains(got, want) {
			t.Errorf("the message lacks %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"您有一条待办", "请尽快处理"} {
		if strings.Contains(got, gone) {
			t.Errorf("the phone shows %q, which the platform drops:\n%s", gone, got)
		}
	}
	// The simulator did receive them: the phone's rules, not the worker, left them out.
	if sent := s.Sim.Recent(info.Bindings[0].OpenID, 1); len(sent) != 1 || sent[0].Data["first"] != "您有一条待办" || sent[0].Data["remark"] != "请尽快处理" {
		t.Fatalf("the simulator received %+v", sent)
	}

	// Emoji: the front end refuses them, but the platform takes them from any sender and
	// removes them. A message sent straight to the simulated platform, over HTTP.
	platformSend(t, info, map[string]any{"touser": info.Bindings[1].OpenID, "template_id": "tpl-TDL-legacy",
		"client_msg_id": "01M00000000000000000000000", "data": map[string]any{
			"first": map[string]string{"value": "😀新消息"}, "thing1": map[string]string{"value": "会议😀通知"},
			"thing2": map[string]string{"value": "🎉年会"}, "thing3": map[string]string{"value": "报名"},
			"thing4": map[string]string{"value": "请在周五前报名", "color": "#FF0000"}, "remark": map[string]string{"value": "谢谢"}}})
	emoji := `#phone-2020000002 li.msg[data-ucs="01M00000000000000000000000"]`
	b.until("the message sent to the platform directly", func() bool { return b.text(emoji) != "" })
	got = b.text(emoji)
	if !strings.Contains(got, "会议通知") || !strings.Contains(got, "年会") || strings.ContainsAny(got, "😀🎉") ||
		strings.Contains(got, "新消息") || strings.Contains(got, "谢谢") || !strings.Contains(got, "已发送") {
		t.Errorf("the message as drawn:\n%s", got)
	}
	if color := b.eval(fmt.Sprintf(`getComputedStyle(document.querySelector(%q + " dd:last-of-type")).color`, emoji)); color == "rgb(255, 0, 0)" {
		t.Error("the value is drawn in the sender's colour")
	}

	// A message the platform accepts and then fails to deliver: the phone says so.
	s.Sim.SetFaults(simBlockAll)
	failed := pushTo(t, base, tok, "2020000003", todo)
	if st := final(t, base, tok, failed); st != "failed" {
		t.Fatalf("the blocked push ended %s", st)
	}
	s.Sim.SetFaults(simNoFaults)
	state := fmt.Sprintf(`#phone-2020000003 li.msg[data-ucs=%q] .state`, failed)
	b.until("the failed message with its reason", func() bool { return strings.Contains(b.text(state), "user block") })
	if b.eval(fmt.Sprintf(`document.querySelector(%q).dataset.state`, state)) != "failed" {
		t.Error("the failed message is not marked failed")
	}
	b.noErrors()
	b.screenshot("sandbox.png")

	// Only the standalone stack has the page: its headers are the pages' strict ones.
	resp, err := http.Get(base + "/sandbox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'nonce-") ||
		!strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
}

// TestOpsPageInChromium: an operator signs in through the usual sign-in and sees the counts
// after pushes, the charts, a failure by reason linked to its history page, and the pause of
// sending once the platform's daily quota is used up; a user who is not an operator gets 403.
func TestOpsPageInChromium(t *testing.T) {
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, base := s.Info, s.Info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	var ids []string
	for range 3 {
		ids = append(ids, pushTo(t, base, tok, "2020000001", todo))
	}
	unbound := pushTo(t, base, tok, standalone.UnboundUser, todo)
	for _, id := range ids {
		if st := final(t, base, tok, id); st != "delivered" {
			t.Fatalf("%s ended %s", id, st)
		}
	}
	if st := final(t, base, tok, unbound); st != "failed" {
		t.Fatalf("the push to a user without a binding ended %s", st)
	}

	b := newBrowser(t, 1280, 1000)
	b.run(chromedp.Navigate(base + "/ops"))
	b.signIn(standalone.DemoUsers[0], password(t, info, standalone.DemoUsers[0]))
	b.run(chromedp.WaitVisible(chromedp.ID("counts")))
	count := func(state string) string { return b.text(fmt.Sprintf(`#counts [data-state=%q] .n`, state)) }
	// The final results are announced on NATS; the page counts them as they arrive.
	b.until("the counts after the pushes", func() bool {
		b.run(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("counts")))
		return count("delivered") == "3" && count("failed") == "1"
	})
	if count("accepted") != "4" || count("queued") != "0" || count("sent") != "0" {
		t.Errorf("counts: accepted %s, queued %s, sent %s", count("accepted"), count("queued"), count("sent"))
	}
	if got := b.text(`#chart-throughput [data-series=accepted]`); !strings.Contains(got, "4") {
		t.Errorf("the throughput chart's legend: %q", got)
	}
	if n := b.eval(`String(document.querySelectorAll("#chart-throughput polyline").length)`); n == "0" {
		t.Error("the throughput chart draws no line")
	}
	if n := b.eval(`String(document.querySelectorAll("#chart-latency polyline").length)`); n == "0" {
		t.Error("the latency chart draws no line for the delivered pushes")
	}
	if got := b.text(`#kinds [data-kind=no_binding]`); !strings.Contains(got, "1") {
		t.Errorf("failures by reason: %q", b.text("#kinds"))
	}
	if got := b.text("#pause"); !strings.Contains(got, "Sending normally") {
		t.Errorf("pause state: %q", got)
	}
	b.noErrors()

	// The failure links to its history: the store's records of that ucsId.
	link := fmt.Sprintf(`#failures a[href="/ops/history/%s"]`, unbound)
	b.run(chromedp.Click(chromedp.CSS(link)), chromedp.WaitVisible(chromedp.ID("records")))
	if got := b.text(`#records [data-record=final]`); !strings.Contains(got, "failed") || !strings.Contains(got, "no binding") ||
		!strings.Contains(got, standalone.UnboundUser) {
		t.Errorf("history of %s:\n%s", unbound, b.text("main"))
	}
	b.run(chromedp.Navigate(base+"/ops/history/"+ids[0]), chromedp.WaitVisible(chromedp.ID("records")))
	// No progress record is asked for: an attempt the platform answers at once is recorded by
	// its outcome alone.
	for _, rec := range []string{"final", "sent"} {
		if b.text(fmt.Sprintf(`#records [data-record=%q]`, rec)) == "" {
			t.Errorf("the history of a delivered push lacks its %s record:\n%s", rec, b.text("main"))
		}
	}

	// The platform's daily quota is used up: sending pauses, and the page says until when.
	s.Sim.SetFaults(simQuotaUsedUp)
	pushTo(t, base, tok, "2020000002", todo)
	b.run(chromedp.Navigate(base + "/ops"))
	b.until("the pause on the page", func() bool {
		b.run(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("pause")))
		return strings.Contains(b.text("#pause"), "Sending is paused")
	})
	if got := b.text("#pause"); !strings.Contains(got, "45009") || count("queued") != "1" {
		t.Errorf("paused: %q, queued %s", got, count("queued"))
	}
	b.screenshot("ops.png")
	b.noErrors()

	// Someone signed in who is not an operator: 403, on every page of the console.
	if _, err := chromedp.Call(b.ctx, network.ClearBrowserCookies, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	b.run(chromedp.Navigate(base + "/ops"))
	b.signIn(standalone.DemoUsers[1], password(t, info, standalone.DemoUsers[1]))
	b.until("the refusal", func() bool { return strings.Contains(b.text("main"), "Forbidden") })
	if strings.Contains(b.text("main"), "Counts by state") {
		t.Fatal("a non-operator sees the page")
	}
	b.run(chromedp.Navigate(base + "/ops/history/" + unbound))
	b.until("the refusal of the history", func() bool { return strings.Contains(b.text("main"), "Forbidden") })
	if strings.Contains(b.text("main"), standalone.UnboundUser) {
		t.Fatal("a non-operator sees a push's history")
	}

	// Without a sign-in nothing is shown: the browser is sent to sign in.
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(base + "/ops/history/" + unbound)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "/ops-signin?to=%2Fops%2Fhistory%2F"+unbound) {
		t.Errorf("not signed in: %d to %q", resp.StatusCode, loc)
	}
}

var (
	simNoFaults    = simulator.Faults{}
	simBlockAll    = simulator.Faults{BlockRate: 1}
	simQuotaUsedUp = simulator.Faults{QuotaUsedUp: true}
)

// platformSend sends a template message straight to the simulated platform, over HTTP, as
// another sender of the account would.
func platformSend(t *testing.T, info standalone.Info, msg map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"grant_type": "client_credential", "appid": info.Platform.AppID, "secret": info.Platform.Secret})
	st, m := call(t, "POST", info.PlatformURL+"/cgi-bin/stable_token", "application/json", "", string(body))
	if st != 200 || m["access_token"] == nil {
		t.Fatalf("platform token: %d %v", st, m)
	}
	body, _ = json.Marshal(msg)
	st, m = call(t, "POST", info.PlatformURL+"/cgi-bin/message/template/send?access_token="+m["access_token"].(string), "application/json", "", string(body))
	if st != 200 || m["errcode"] != float64(0) {
		t.Fatalf("platform send: %d %v", st, m)
	}
}
