// Package pages renders the HTML of the sign-in flow: the login form, the consent page, the
// error page shown instead of redirecting to an unverified address, the form post response
// (OAuth 2.0 Form Post Response Mode) and the signed-out page, and sets the security headers
// they are sent with.
//
// Every page is Chinese first with English beside it, fits a phone screen, loads nothing from
// outside (inline CSS with a CSP nonce, system fonts) and works without JavaScript; only the form
// post page uses a script, with a button for browsers that run none.
package pages

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

//go:embed templates/*.html
var templateFS embed.FS

// The templates are static files compiled into the binary, so a parse failure is a build
// mistake that every test run catches; failing at init keeps the render path free of it.
var (
	loginTmpl     = parse("login.html")
	consentTmpl   = parse("consent.html")
	errorTmpl     = parse("error.html")
	formPostTmpl  = parse("formpost.html")
	loggedOutTmpl = parse("loggedout.html")
	confirmTmpl   = parse("logoutconfirm.html")
	accountTmpl   = parse("account.html")
)

// parse builds one page as its own template set over the shared layout, so each page's
// "title" and "content" definitions cannot collide with another page's.
func parse(page string) *template.Template {
	return template.Must(template.New(page).
		Funcs(template.FuncMap{"split": splitLanguages, "when": when,
			"describeNotifications": func() ScopeText { return DescribeScope("notification.mp") }}).
		ParseFS(templateFS, "templates/layout.html", "templates/"+page))
}

// when shows a time to the minute. Pages show every time in the zone it carries: the front end
// gives them in its configured time zone (time_zone), as its answers' time fields.
func when(t time.Time) string { return t.Format("2006-01-02 15:04") }

// bilingual is a caller's text cut into its Chinese part and the English that follows it, so
// the page can set the English smaller like its own labels.
type bilingual struct{ ZH, EN string }

// splitLanguages cuts text written "中文 English" after its last Chinese character. Text with
// no Chinese, or with nothing in Latin letters after the Chinese, is kept whole in ZH: the split
// only changes how the text looks, never what it says.
func splitLanguages(s string) bilingual {
	last := strings.LastIndexFunc(s, isChinese)
	if last < 0 {
		return bilingual{ZH: s}
	}
	_, size := utf8.DecodeRuneInString(s[last:])
	zh, en := strings.TrimSpace(s[:last+size]), strings.TrimSpace(s[last+size:])
	if !strings.ContainsFunc(en, isLatinLetter) {
		return bilingual{ZH: s}
	}
	return bilingual{ZH: zh, EN: en}
}

// isChinese reports Han characters and the CJK and full-width punctuation written with them;
// other non-ASCII runes (’, é) occur in English too and must not move the cut.
func isChinese(r rune) bool {
	return unicode.Is(unicode.Han, r) || (r >= 0x3000 && r <= 0x303f) || (r >= 0xff00 && r <= 0xffef)
}

func isLatinLetter(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }

// bufs holds render buffers: a page is rendered whole before any byte reaches the client so a
// failed render lets the handler answer with an error instead of half a page, and reusing the
// buffer keeps that from costing an allocation per request.
var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooled keeps an unusually large page from pinning its buffer in the pool.
const maxPooled = 64 << 10

func render(w io.Writer, t *template.Template, data any) error {
	buf := bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooled {
			bufs.Put(buf)
		}
	}()
	if err := t.ExecuteTemplate(buf, "layout", data); err != nil {
		return fmt.Errorf("pages: render %s: %w", t.Name(), err)
	}
	if _, err := buf.WriteTo(w); err != nil {
		return fmt.Errorf("pages: write %s: %w", t.Name(), err)
	}
	return nil
}

// ScopeText is one scope as the consent page lists it: its name and what it lets the
// application do, in Chinese and in English.
type ScopeText struct {
	Name, ZH, EN string
}

// DescribeScope returns the words the consent page shows for the scope name. A scope it does not
// know is shown by its name in both languages, so a new scope is still listed rather than hidden.
func DescribeScope(name string) ScopeText {
	switch name {
	case "openid":
		return ScopeText{Name: name, ZH: "读取您的学工号（校园统一身份）", EN: "Read your campus user number"}
	case "notification.mp":
		return ScopeText{Name: name, ZH: "通过信息化公众号向您发送消息", EN: "Send you messages through the IT department's official account"}
	case "fake_api":
		return ScopeText{Name: name, ZH: "访问测试接口", EN: "Use the test interface"}
	}
	return ScopeText{Name: name, ZH: name, EN: name}
}

// LoginData is what the login page shows.
type LoginData struct {
	Action   string // URL the form POSTs to
	CSRF     string // value of the hidden field named "csrf"
	Username string // prefilled after a failed attempt
	Error    string // shown when not empty; already localized by the caller
	Client   string // client_id of the application asking
	Nonce    string // CSP nonce of the page's <style>; the one given to Headers
}

// Login writes the login page: a form with the fields "username", "password" and "csrf" and
// one submit button, posting to d.Action.
func Login(w io.Writer, d LoginData) error { return render(w, loginTmpl, d) }

// ConsentData is what the consent page shows.
type ConsentData struct {
	Action string      // URL the form POSTs to
	CSRF   string      // value of the hidden field named "csrf"
	Client string      // client_id of the application asking
	UserID string      // campus user number of the signed-in user
	Scopes []ScopeText // scopes requested, listed in words
	Nonce  string      // CSP nonce of the page's <style>; the one given to Headers
}

// Consent writes the consent page: the scopes the application asks for and one form with two
// submit buttons, name="accept" value="yes" (同意 Allow) and name="cancel" value="yes"
// (拒绝 Deny).
func Consent(w io.Writer, d ConsentData) error { return render(w, consentTmpl, d) }

// ErrorData is what the error page shows.
type ErrorData struct {
	Title   string // short, e.g. "无效的请求 Invalid request"; a generic title when empty
	Message string // explanation for the user, shown as text; never internal error text
	Code    string // optional OAuth error code shown small, e.g. "invalid_redirect_uri"
	Nonce   string // CSP nonce of the page's <style>; the one given to Headers
}

// Error writes the error page, shown when the flow cannot redirect back to the client because
// the address to redirect to is not verified.
func Error(w io.Writer, d ErrorData) error { return render(w, errorTmpl, d) }

// Field is one name/value pair of a form post response.
type Field struct {
	Name, Value string
}

// FormPostData is the response a form post page carries back to the client.
type FormPostData struct {
	Action string  // the client's redirect_uri, already validated by the caller
	Fields []Field // in order: code, state, error, error_description…
	Nonce  string  // CSP nonce of the page's <style> and <script>; the one given to Headers
}

// FormPost writes the page of the OAuth 2.0 Form Post Response Mode: a form of hidden fields
// posting to d.Action that an inline script submits on load, with a visible "继续 Continue"
// button for browsers that run no script. The redirect_uri's origin must be among Headers'
// formActions or the browser refuses the post.
func FormPost(w io.Writer, d FormPostData) error { return render(w, formPostTmpl, d) }

// LoggedOutData is what the signed-out page shows.
type LoggedOutData struct {
	Redirect string // optional link back to the application
	Nonce    string // CSP nonce of the page's <style>; the one given to Headers
}

// LoggedOut writes the "您已退出 You have signed out" page, with a link to d.Redirect when set.
func LoggedOut(w io.Writer, d LoggedOutData) error { return render(w, loggedOutTmpl, d) }

// LogoutConfirmData is what the sign-out confirmation page carries.
type LogoutConfirmData struct {
	Action  string // the logout endpoint
	Confirm string // the sealed confirmation, posted back as "confirm"
	Nonce   string // CSP nonce of the page's <style>; the one given to Headers
}

// LogoutConfirm writes the "退出登录 Sign out" page: a logout request that cannot show it comes
// from the application (no id_token_hint) is confirmed by the user with a form, so a link or an
// image on another site cannot sign anyone out.
func LogoutConfirm(w io.Writer, d LogoutConfirmData) error { return render(w, confirmTmpl, d) }

// AccountData is what the account page shows a signed-in user.
type AccountData struct {
	UserID   string           // campus user number of the signed-in user
	Notice   string           // the outcome of the last change, "中文 English"; empty for none
	Grants   []AccountGrant   // applications with access
	Sessions []AccountSession // live sign-in sessions, newest first
	// RevokeAction and EndAction are where the forms post: "client_id" and "csrf" to revoke
	// an application's access; "sid" ("others" for every session but this one) and "csrf" to
	// end sessions.
	RevokeAction, EndAction string
	CSRF                    string // value of the hidden field named "csrf"
	Nonce                   string // CSP nonce of the page's <style>; the one given to Headers
}

// AccountGrant is one application with access.
type AccountGrant struct {
	Client            string      // client_id
	Scopes            []ScopeText // what it may do, in words
	Granted, LastUsed time.Time   // LastUsed zero: never used
}

// AccountSession is one sign-in session.
type AccountSession struct {
	SID              string // the session's public id, posted back to end it
	Current          bool   // the session of the browser showing the page
	Started, Expires time.Time
	Address, Agent   string // where the sign-in came from
	Method           string // how the user signed in, e.g. "CAS"
}

// Account writes the account page: the applications the user has granted, each with a form to
// remove its access, and the user's sign-in sessions, each with a form to end it.
func Account(w io.Writer, d AccountData) error { return render(w, accountTmpl, d) }
