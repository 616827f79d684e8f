package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestBindPageInChromium is the binding end to end, as a student does it on a phone-sized
// screen, against the whole standalone stack (front end, worker, simulator): the simulator's
// authorization page (a follower picked), the campus sign-in, consent, the binding shown; a
// push to that user number is delivered to that follower; after unbinding, a push fails with
// "no binding". With UCS_SCREENSHOTS set to a folder, it saves the pages there (the README's
// pictures, in pkg/pages/screenshots/).
func TestBindPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser against the whole stack")
	}
	stack, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.Close)
	openid := stack.Info.UnboundFollowers[0] // the follower the stack keeps unbound for this step
	user, password := standalone.UnboundUser, ""
	for _, u := range stack.Info.Users {
		if u.UserID == user {
			password = u.Password
		}
	}
	base := stack.Info.BaseURL

	ctx, problems := chromium(t)
	tb := tab{t: t, ctx: ctx}
	run, text, eval := tb.run, tb.text, tb.eval
	screenshot := func(name string) {
		t.Helper()
		dir := os.Getenv("UCS_SCREENSHOTS")
		if dir == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	phoneSized := func(page string) {
		t.Helper()
		if w := strings.Fields(eval(`document.documentElement.scrollWidth + " " + window.innerWidth`)); w[0] != w[1] {
			t.Errorf("the %s page is wider than a phone screen (content, window): %v", page, w)
		}
	}

	// The platform's authorization: the simulator lists its followers; the student is one.
	run(chromedp.Navigate(base+"/bind"), chromedp.WaitVisible(chromedp.CSS(`button[data-openid="`+openid+`"]`)))
	listed := eval(`[...document.querySelectorAll("#followers button")].map(b => b.dataset.openid).join(" ")`)
	if got := strings.Fields(listed); !slices.Contains(got, openid) || len(got) != len(stack.Info.Bindings)+len(stack.Info.UnboundFollowers) {
		t.Fatalf("the authorization page lists %v", got)
	}
	run(chromedp.Click(chromedp.CSS(`button[data-openid="`+openid+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/bind/signin?idp=local"]`)))
	if body := text("main"); !strings.Contains(body, "尚未绑定") || !strings.Contains(body, openid[len(openid)-4:]) {
		t.Fatalf("the binding page before the sign-in:\n%s", body)
	}
	phoneSized("sign-in")

	// The campus sign-in, then consent.
	run(chromedp.Click(chromedp.CSS(`a[href="/bind/signin?idp=local"]`)),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), user),
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("accept")))
	if got := text("#consent-user"); got != user {
		t.Fatalf("consent for %q", got)
	}
	if body := text("#consent"); !strings.Contains(body, "通过信息化公众号向您发送消息") || !strings.Contains(body, "Send you messages") {
		t.Fatalf("the consent does not say what is agreed to:\n%s", body)
	}
	phoneSized("consent")
	screenshot("bind-consent.png")
	run(chromedp.Click(chromedp.ID("accept")), chromedp.WaitVisible(chromedp.ID("bound-user")))
	if got, follower := text("#bound-user"), text("#bound-follower"); got != user || !strings.HasSuffix(follower, openid[len(openid)-4:]) {
		t.Fatalf("the page shows %q bound to %q", got, follower)
	}
	if notice := text(".notice"); !strings.Contains(notice, "绑定成功") {
		t.Fatalf("notice %q", notice)
	}
	// The page's style ran under its CSP nonce.
	if color := eval(`getComputedStyle(document.querySelector("#unbind")).borderTopColor`); color != "rgb(29, 90, 166)" {
		t.Errorf("the page's style did not apply (border %q)", color)
	}
	phoneSized("bound")
	screenshot("bind.png")

	// A push to the user number reaches the follower.
	push := newPusher(t, stack)
	ucsID := push.send(t, user)
	if r := push.final(t, ucsID); r.State != "delivered" {
		t.Fatalf("push after binding: %+v", r)
	}
	if !slices.ContainsFunc(stack.Sim.Sent(), func(m simulator.SentMessage) bool { return m.ClientMsgID == ucsID && m.ToUser == openid }) {
		t.Fatalf("the platform did not receive %s for %s", ucsID, openid)
	}

	// Unbind: the next push fails at once.
	run(chromedp.Click(chromedp.ID("unbind")), chromedp.WaitVisible(chromedp.ID("signin")))
	if notice := text(".notice"); !strings.Contains(notice, "已解除绑定") {
		t.Fatalf("notice %q", notice)
	}
	ucsID = push.send(t, user)
	if r := push.final(t, ucsID); r.State != "failed" || !strings.HasPrefix(r.Reason, "no binding") {
		t.Fatalf("push after unbinding: %+v", r)
	}
	if errs := problems.all(); len(errs) > 0 {
		t.Fatalf("the browser reported errors: %v", errs)
	}
}

// pusher pushes through the stack's front end with the demo client.
type pusher struct {
	base, token string
}

func newPusher(t *testing.T, stack *standalone.Stack) *pusher {
	t.Helper()
	secret := ""
	for _, c := range stack.Info.Clients {
		if c.ClientID == standalone.DemoClient {
			secret = c.ClientSecret
		}
	}
	resp, err := http.PostForm(stack.Info.BaseURL+"/v1/token", url.Values{"grant_type": {"client_credentials"},
		"client_id": {standalone.DemoClient}, "client_secret": {secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("token: %d %v", resp.StatusCode, err)
	}
	return &pusher{base: stack.Info.BaseURL, token: tok.AccessToken}
}

func (p *pusher) call(t *testing.T, method, path, body string, into any) {
	t.Helper()
	req, _ := http.NewRequest(method, p.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}

func (p *pusher) send(t *testing.T, user string) string {
	t.Helper()
	var a struct{ Data struct{ UcsID string } }
	p.call(t, "POST", "/v1/infra/notification/mp",
		`{"userId":"`+user+`","type":"JML","data":{"header":"作业提醒","class":"软件工程","info":"第三次作业已发布","remark":""}}`, &a)
	if a.Data.UcsID == "" {
		t.Fatal("no ucsId")
	}
	return a.Data.UcsID
}

type result struct {
	State, Reason string
}

// final polls the push's result until it is final, for at most 20 seconds.
func (p *pusher) final(t *testing.T, ucsID string) result {
	t.Helper()
	var a struct{ Data result }
	embeddedtest.Eventually(t, 20*time.Second, "push "+ucsID+" has a final result", func() bool {
		a.Data = result{}
		p.call(t, "GET", "/v1/infra/notification/mp/"+ucsID, "", &a)
		return a.Data.State == "delivered" || a.Data.State == "failed"
	})
	return a.Data
}

// TestBindConsentThroughCASInChromium: a student binds on the binding page with the campus
// sign-on (the default provider) in a real browser. The consent's answer is now a redirect to
// the campus sign-on's /logout (and back to /bind?done=bound); Chromium checks the redirect
// that answers a form against the page's form-action, so the binding page must allow the
// campus sign-on there, as the account and consent pages do (casFormActions). Otherwise the
// student, having pressed "Bind", is left on a blocked page and never sees "Bound".
func TestBindConsentThroughCASInChromium(t *testing.T) {
	e := newBindEnv(t)
	ctx, problems := chromium(t)
	tb := tab{t: t, ctx: ctx}
	tb.run(chromedp.Navigate(e.base+"/bind"), chromedp.WaitVisible(chromedp.CSS(`button[data-openid="`+followerA+`"]`)))
	tb.run(chromedp.Click(chromedp.CSS(`button[data-openid="`+followerA+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/bind/signin?idp=cas"]`)))
	tb.run(chromedp.Click(chromedp.CSS(`a[href="/bind/signin?idp=cas"]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=username]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=username]`), casUser),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), casUserPass),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("accept")))
	tb.run(chromedp.Click(chromedp.ID("accept")))
	shown := waitUntil(10*time.Second, func() bool { return strings.Contains(tb.bodyText(), "Bound: you will receive") })
	var blocked []string
	for _, m := range problems.all() {
		if strings.Contains(m, "form-action") || strings.Contains(m, "Content Security Policy") {
			blocked = append(blocked, m)
		}
	}
	bd, bound := e.bindingOf(t, casUser)
	if !shown || len(blocked) > 0 {
		t.Fatalf("pressing Bind after a campus sign-on sign-in: stored %v (%s); the page \"Bound\" shown %v, at %q; the browser refused: %v",
			bound, bd.OpenID, shown, tb.eval(`location.href`), blocked)
	}
}
