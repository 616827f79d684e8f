package pages_test

import (
	"bytes"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/pages"
)

const (
	nonce    = "bm9uY2Utbm9uY2Utbm9uY2U="
	viewport = `<meta name="viewport" content="width=device-width, initial-scale=1">`
	hostile  = `"><script>alert(1)</script>`
)

// tag is one start tag of a rendered page. The pages come from html/template, which quotes every
// attribute value and escapes '>' inside it, so a regexp reads them reliably.
type tag struct {
	name  string
	attrs map[string]string
}

var (
	tagRe  = regexp.MustCompile(`<(input|button|form|style|script|a)\b([^>]*)>`)
	attrRe = regexp.MustCompile(`([a-zA-Z-]+)(?:="([^"]*)")?`)
)

func tags(html, name string) []tag {
	var out []tag
	for _, m := range tagRe.FindAllStringSubmatch(html, -1) {
		if m[1] != name {
			continue
		}
		t := tag{name: m[1], attrs: map[string]string{}}
		for _, a := range attrRe.FindAllStringSubmatch(m[2], -1) {
			t.attrs[a[1]] = a[2]
		}
		out = append(out, t)
	}
	return out
}

func render(t *testing.T, f func(io.Writer) error) string {
	t.Helper()
	var b bytes.Buffer
	if err := f(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func scopes(names ...string) []pages.ScopeText {
	out := make([]pages.ScopeText, len(names))
	for i, n := range names {
		out[i] = pages.DescribeScope(n)
	}
	return out
}

// TestPagesRender checks what every page owes a phone user and the CSP: the viewport, both
// languages, the nonce on its style (and script), and nothing loaded from elsewhere.
func TestPagesRender(t *testing.T) {
	tests := []struct {
		name   string
		render func(io.Writer) error
		zh, en string
		script bool
	}{
		{"login", func(w io.Writer) error {
			return pages.Login(w, pages.LoginData{Action: "/login", CSRF: "c", Client: "portal", Nonce: nonce})
		}, "登录", "Sign in", false},
		{"consent", func(w io.Writer) error {
			return pages.Consent(w, pages.ConsentData{Action: "/consent", CSRF: "c", Client: "portal", UserID: "2021001", Scopes: scopes("openid"), Nonce: nonce})
		}, "授权", "Allow access", false},
		{"error", func(w io.Writer) error {
			return pages.Error(w, pages.ErrorData{Title: "无效的请求 Invalid request", Message: "m", Nonce: nonce})
		}, "无效的请求", "Invalid request", false},
		{"error without title", func(w io.Writer) error {
			return pages.Error(w, pages.ErrorData{Nonce: nonce})
		}, "出错了", "Something went wrong", false},
		{"form post", func(w io.Writer) error {
			return pages.FormPost(w, pages.FormPostData{Action: "https://app.campus.edu/cb", Fields: []pages.Field{{Name: "code", Value: "x"}}, Nonce: nonce})
		}, "继续", "Continue", true},
		{"logged out", func(w io.Writer) error {
			return pages.LoggedOut(w, pages.LoggedOutData{Nonce: nonce})
		}, "您已退出", "You have signed out", false},
		{"logged out with link", func(w io.Writer) error {
			return pages.LoggedOut(w, pages.LoggedOutData{Redirect: "https://app.campus.edu/", Nonce: nonce})
		}, "返回应用", "Return to the application", false},
		{"account", func(w io.Writer) error {
			at := time.Date(2026, 11, 23, 1, 30, 0, 0, time.UTC).In(time.FixedZone("CST", 8*60*60)) // as the front end gives it
			return pages.Account(w, pages.AccountData{UserID: "2021001", CSRF: "c", RevokeAction: "/r", EndAction: "/e", Nonce: nonce,
				Notice:   "会话已结束。 The session has ended.",
				Grants:   []pages.AccountGrant{{Client: "portal", Scopes: scopes("notification.mp"), Granted: at, LastUsed: at}},
				Sessions: []pages.AccountSession{{SID: "s1", Current: true, Started: at, Expires: at}, {SID: "s2", Started: at, Expires: at, Agent: hostile}}})
		}, "2026-11-23 09:30", "Remove access", false},
		{"account with nothing granted", func(w io.Writer) error {
			return pages.Account(w, pages.AccountData{UserID: "2021001", CSRF: "c", RevokeAction: "/r", EndAction: "/e", Nonce: nonce})
		}, "我的账户", "No application has access yet", false},
		{"sign-out confirmation", func(w io.Writer) error {
			return pages.LogoutConfirm(w, pages.LogoutConfirmData{Action: "/auth/realms/campus/protocol/openid-connect/logout", Confirm: "sealed", Nonce: nonce})
		}, "确定要退出", "Do you want to sign out", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := render(t, tt.render)
			for _, want := range []string{"<!DOCTYPE html>", `<html lang="zh-CN">`, viewport, tt.zh, tt.en, "</html>"} {
				if !strings.Contains(out, want) {
					t.Errorf("missing %q in\n%s", want, out)
				}
			}
			if st := tags(out, "style"); len(st) != 1 || st[0].attrs["nonce"] != nonce {
				t.Errorf("style tags %+v, want one with the nonce", st)
			}
			// Every page's once-only posting of its forms, and the page's own script.
			sc := tags(out, "script")
			want := 1
			if tt.script {
				want = 2
			}
			if len(sc) != want || slices.ContainsFunc(sc, func(x tag) bool { return x.attrs["nonce"] != nonce }) {
				t.Errorf("script tags %+v, want %d, each with the nonce", sc, want)
			}
			// Nothing from outside: no linked sheets, images, scripts or CSS imports.
			for _, bad := range []string{"<link", " src=", "@import", "url("} {
				if strings.Contains(out, bad) {
					t.Errorf("page loads an outside resource: %q", bad)
				}
			}
		})
	}
}

func TestLoginForm(t *testing.T) {
	tests := []struct {
		name      string
		d         pages.LoginData
		wantAlert []string // texts of the error box; nil when none is shown
		focus     string   // the field that gets autofocus
	}{
		{"first visit", pages.LoginData{Action: "/login?x=1", CSRF: "tok"}, nil, "username"},
		{"failed attempt", pages.LoginData{Action: "/login", CSRF: "tok", Username: "2021001", Error: "学工号或密码错误。 Wrong user number or password."},
			[]string{`学工号或密码错误。<span class="en" lang="en">Wrong user number or password.</span>`}, "password"},
		{"English only error", pages.LoginData{Action: "/login", CSRF: "tok", Error: "Too many attempts"},
			[]string{`role="alert">Too many attempts</p>`}, "username"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := render(t, func(w io.Writer) error { return pages.Login(w, tt.d) })
			forms := tags(out, "form")
			if len(forms) != 1 || forms[0].attrs["method"] != "post" || forms[0].attrs["action"] != tt.d.Action {
				t.Fatalf("forms %+v", forms)
			}
			inputs := map[string]map[string]string{}
			for _, in := range tags(out, "input") {
				inputs[in.attrs["name"]] = in.attrs
			}
			if len(inputs) != 3 {
				t.Errorf("inputs %v, want username, password, csrf", inputs)
			}
			if in := inputs["csrf"]; in["type"] != "hidden" || in["value"] != tt.d.CSRF {
				t.Errorf("csrf input %v", in)
			}
			if in := inputs["username"]; in["type"] != "text" || in["value"] != tt.d.Username || in["autocomplete"] != "username" {
				t.Errorf("username input %v", in)
			}
			if in := inputs["password"]; in["type"] != "password" || in["autocomplete"] != "current-password" || in["value"] != "" {
				t.Errorf("password input %v", in)
			}
			if _, ok := inputs[tt.focus]["autofocus"]; !ok {
				t.Errorf("%s has no autofocus", tt.focus)
			}
			if b := tags(out, "button"); len(b) != 1 || b[0].attrs["type"] != "submit" {
				t.Errorf("buttons %+v, want one submit", b)
			}
			if got := strings.Contains(out, `role="alert"`); got != (tt.wantAlert != nil) {
				t.Errorf("error box shown %v", got)
			}
			for _, want := range tt.wantAlert {
				if !strings.Contains(out, want) {
					t.Errorf("missing %q in\n%s", want, out)
				}
			}
		})
	}
}

func TestConsentForm(t *testing.T) {
	d := pages.ConsentData{Action: "/consent", CSRF: "tok", Client: "portal", UserID: "2021001",
		Scopes: scopes("openid", "notification.mp", "fake_api", "calendar.read"), Nonce: nonce}
	out := render(t, func(w io.Writer) error { return pages.Consent(w, d) })

	if f := tags(out, "form"); len(f) != 1 || f[0].attrs["action"] != "/consent" || f[0].attrs["method"] != "post" {
		t.Fatalf("forms %+v", f)
	}
	if in := tags(out, "input"); len(in) != 1 || in[0].attrs["name"] != "csrf" || in[0].attrs["value"] != "tok" {
		t.Errorf("inputs %+v", in)
	}
	b := tags(out, "button")
	if len(b) != 2 || b[0].attrs["name"] != "accept" || b[0].attrs["value"] != "yes" ||
		b[1].attrs["name"] != "cancel" || b[1].attrs["value"] != "yes" {
		t.Fatalf("buttons %+v, want accept then cancel", b)
	}
	for _, want := range []string{"同意", "Allow", "拒绝", "Deny", "portal", "2021001"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	for _, s := range d.Scopes[:3] {
		for _, text := range []string{s.ZH, s.EN} {
			if !strings.Contains(out, strings.ReplaceAll(text, "'", "&#39;")) {
				t.Errorf("scope %s: missing %q", s.Name, text)
			}
		}
	}
	// An unknown scope is listed once by its name, not as "name name".
	if n := strings.Count(out, "calendar.read"); n != 1 {
		t.Errorf("unknown scope shown %d times", n)
	}
}

func TestFormPostFields(t *testing.T) {
	fields := []pages.Field{{Name: "code", Value: "c0de"}, {Name: "state", Value: "s t&a"}, {Name: "iss", Value: "https://ucs.campus.edu"}}
	out := render(t, func(w io.Writer) error {
		return pages.FormPost(w, pages.FormPostData{Action: "https://app.campus.edu/cb?x=1", Fields: fields, Nonce: nonce})
	})
	f := tags(out, "form")
	if len(f) != 1 || f[0].attrs["method"] != "post" || f[0].attrs["action"] != "https://app.campus.edu/cb?x=1" {
		t.Fatalf("forms %+v", f)
	}
	in := tags(out, "input")
	if len(in) != len(fields) {
		t.Fatalf("inputs %+v", in)
	}
	for i, want := range fields {
		value := strings.ReplaceAll(want.Value, "&", "&amp;")
		if a := in[i].attrs; a["type"] != "hidden" || a["name"] != want.Name || a["value"] != value {
			t.Errorf("input %d = %v, want %+v", i, a, want)
		}
	}
	// The fallback button is for browsers without scripts only.
	ns := out[strings.Index(out, "<noscript>"):strings.Index(out, "</noscript>")]
	if !strings.Contains(ns, `<button type="submit">继续 <span class="en" lang="en">Continue</span></button>`) {
		t.Errorf("noscript fallback %q", ns)
	}
	if b := tags(out, "button"); len(b) != 1 {
		t.Errorf("buttons %+v", b)
	}
}

// TestHostileValuesEscaped puts markup and script URLs in every caller value: none may become
// markup, and URL attributes must be defused to html/template's #ZgotmplZ.
func TestHostileValuesEscaped(t *testing.T) {
	tests := []struct {
		name    string
		render  func(io.Writer) error
		defused string // the URL attribute that must read #ZgotmplZ
		scripts int
	}{
		{"login", func(w io.Writer) error {
			return pages.Login(w, pages.LoginData{Action: "javascript:alert(1)", CSRF: hostile, Username: hostile, Error: "错误 " + hostile, Client: hostile, Nonce: hostile})
		}, `action="#ZgotmplZ"`, 0},
		{"consent", func(w io.Writer) error {
			return pages.Consent(w, pages.ConsentData{Action: "javascript:alert(1)", CSRF: hostile, Client: hostile, UserID: hostile,
				Scopes: []pages.ScopeText{{Name: hostile, ZH: hostile, EN: hostile}, pages.DescribeScope(hostile)}, Nonce: hostile})
		}, `action="#ZgotmplZ"`, 0},
		{"error", func(w io.Writer) error {
			return pages.Error(w, pages.ErrorData{Title: hostile, Message: "说明 " + hostile, Code: hostile, Nonce: hostile})
		}, "", 0},
		{"form post", func(w io.Writer) error {
			return pages.FormPost(w, pages.FormPostData{Action: " JavaScript:alert(1)", Fields: []pages.Field{{Name: hostile, Value: hostile}}, Nonce: hostile})
		}, `action="#ZgotmplZ"`, 1},
		{"logged out", func(w io.Writer) error {
			return pages.LoggedOut(w, pages.LoggedOutData{Redirect: "javascript:alert(1)", Nonce: hostile})
		}, `href="#ZgotmplZ"`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := render(t, tt.render)
			if strings.Contains(out, "<script>alert") {
				t.Errorf("hostile value became markup:\n%s", out)
			}
			if !strings.Contains(out, "&lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Errorf("hostile value not shown escaped:\n%s", out)
			}
			// The page's own, besides every page's once-only posting of its forms.
			if n := strings.Count(out, "<script"); n != tt.scripts+1 {
				t.Errorf("%d script tags, want %d", n, tt.scripts+1)
			}
			if tt.defused != "" && !strings.Contains(out, tt.defused) {
				t.Errorf("missing %s:\n%s", tt.defused, out)
			}
			if strings.Contains(strings.ToLower(out), "javascript:") {
				t.Errorf("javascript: URL kept:\n%s", out)
			}
		})
	}
}

func TestDescribeScope(t *testing.T) {
	tests := []struct {
		name string
		want pages.ScopeText
	}{
		{"openid", pages.ScopeText{Name: "openid", ZH: "读取您的学工号（校园统一身份）", EN: "Read your campus user number"}},
		{"notification.mp", pages.ScopeText{Name: "notification.mp", ZH: "通过信息化公众号向您发送消息", EN: "Send you messages through the IT department's official account"}},
		{"fake_api", pages.ScopeText{Name: "fake_api", ZH: "访问测试接口", EN: "Use the test interface"}},
		{"calendar.read", pages.ScopeText{Name: "calendar.read", ZH: "calendar.read", EN: "calendar.read"}},
		{"", pages.ScopeText{}},
	}
	for _, tt := range tests {
		if got := pages.DescribeScope(tt.name); got != tt.want {
			t.Errorf("DescribeScope(%q) = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func BenchmarkLogin(b *testing.B) {
	d := pages.LoginData{Action: "/login", CSRF: "tok", Username: "2021001", Error: "学工号或密码错误。 Wrong user number or password.", Client: "portal", Nonce: nonce}
	b.ReportAllocs()
	for b.Loop() {
		if err := pages.Login(io.Discard, d); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOpsNamesTheOperatorsAction: a pause for a refusal of the account says what the operator
// must do; a pause for the daily quota or the per-minute limit says when it ends, and its cause.
func TestOpsNamesTheOperatorsAction(t *testing.T) {
	var b bytes.Buffer
	d := pages.OpsData{Paused: true, PausedUntil: time.Now().Add(time.Hour), PauseReason: "40164 invalid ip, not in whitelist",
		PauseAction: "add the workers' outgoing IP addresses to the official account's IP whitelist"}
	if err := pages.Ops(&b, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "until an operator acts") || !strings.Contains(b.String(), "IP whitelist") || strings.Contains(b.String(), "daily quota") {
		t.Fatalf("account pause banner: %s", b.String())
	}
	b.Reset()
	d.PauseAction, d.PauseReason = "", "45009: the platform's daily quota is used up"
	if err := pages.Ops(&b, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "daily quota") || strings.Contains(b.String(), "until an operator acts") {
		t.Fatalf("quota pause banner: %s", b.String())
	}
	// The per-minute limit's pause, which ends by itself within the minute, is not called the
	// daily quota's.
	b.Reset()
	d.PauseReason = "45011: the platform's per-minute limit was hit"
	if err := pages.Ops(&b, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "45011") || strings.Contains(b.String(), "daily quota") {
		t.Fatalf("per-minute pause banner: %s", b.String())
	}
}
