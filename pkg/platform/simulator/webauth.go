package simulator

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	htmltemplate "html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// The platform's web authorization (网页授权), as its documentation describes it:
//   - GET /connect/oauth2/authorize?appid&redirect_uri&response_type=code&scope&state: on the
//     platform, the in-app browser's user is known and snsapi_base returns at once to
//     redirect_uri with code and state. Here no one is signed in to a phone, so a page lists
//     the account's followers and the person picks who they are (POST of the same address).
//   - GET /sns/oauth2/access_token?appid&secret&code&grant_type=authorization_code: the
//     server's exchange of the code for the openid. A code is single use (40163 once used)
//     and lives five minutes (42003 after); an unknown one is 40029.

// Codes of the web authorization.
const (
	codeRedirectDomain = 10003 // redirect_uri's host is not the account's authorization domain
	codeScopeDenied    = 10005 // the account has no such scope
	codeMissingCode    = 41008
	codeInvalidCode    = 40029
	codeCodeUsed       = 40163
	codeCodeExpired    = 42003
)

// webCodeTTL is how long an unused code lives: five minutes, as documented.
const webCodeTTL = 5 * time.Minute

// maxWebCodes bounds the codes kept: each lives five minutes, so only a flood reaches it.
const maxWebCodes = 100_000

// webCode is an issued code of the web authorization.
type webCode struct {
	openid  string
	expires time.Time
	used    bool
	// snapshot: the page was opened from a Moments snapshot, so the exchange answers a virtual
	// openid with is_snapshotuser 1.
	snapshot bool
}

// webAuth holds the issued codes.
type webAuth struct {
	mu    sync.Mutex
	codes map[string]*webCode
}

func (s *Simulator) webAuthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /connect/oauth2/authorize", s.handleAuthorize)
	mux.HandleFunc("POST /connect/oauth2/authorize", s.handleAuthorize)
	mux.HandleFunc("/sns/oauth2/access_token", s.handleWebAccessToken)
}

// authorizeRequest is a checked authorization request.
type authorizeRequest struct {
	AppID, RedirectURI, Scope, State string
}

// parseAuthorize checks the parameters as the platform does; errcode 0 means fine.
func (s *Simulator) parseAuthorize(q url.Values) (authorizeRequest, int, string) {
	ar := authorizeRequest{AppID: q.Get("appid"), RedirectURI: q.Get("redirect_uri"), Scope: q.Get("scope"), State: q.Get("state")}
	switch {
	case ar.AppID == "":
		return ar, codeMissingAppID, "appid missing"
	case ar.AppID != s.cfg.AppID:
		return ar, codeInvalidAppID, "invalid appid"
	case q.Get("response_type") != "code":
		return ar, codeDataFormat, "response_type must be code"
	case ar.Scope != "snsapi_base" && ar.Scope != "snsapi_userinfo":
		return ar, codeScopeDenied, "scope is not authorized"
	case len(ar.State) > 128 || strings.ContainsFunc(ar.State, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}):
		return ar, codeDataFormat, "state: at most 128 letters and digits"
	}
	u, err := url.Parse(ar.RedirectURI)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ar, codeRedirectDomain, "redirect_uri is not an absolute http(s) URL"
	}
	if len(s.cfg.WebAuthHosts) > 0 && !slices.Contains(s.cfg.WebAuthHosts, u.Host) {
		return ar, codeRedirectDomain, "redirect_uri domain does not match the account's authorization domain"
	}
	return ar, 0, ""
}

// handleAuthorize shows the page where a person picks the follower they are (GET), and takes
// the pick (POST): a redirect to redirect_uri with a fresh code and the state.
func (s *Simulator) handleAuthorize(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	// The authorization's parameters are in the address in both methods; the pick in the form.
	ar, code, msg := s.parseAuthorize(r.URL.Query())
	if code != 0 {
		s.countError(code)
		w.WriteHeader(http.StatusBadRequest)
		s.renderAuthorize(w, authorizePage{Error: msg, Code: code})
		return
	}
	if r.Method == http.MethodGet {
		s.renderAuthorize(w, authorizePage{Action: r.URL.RequestURI(), Followers: s.Followers(), Scope: ar.Scope})
		return
	}
	openid := r.PostForm.Get("openid")
	if !slices.Contains(s.Followers(), openid) {
		w.WriteHeader(http.StatusBadRequest)
		s.renderAuthorize(w, authorizePage{Error: "pick one of the account's followers", Code: codeInvalidOpenID})
		return
	}
	c := s.IssueWebCode(openid)
	target, _ := url.Parse(ar.RedirectURI)
	v := target.Query()
	v.Set("code", c)
	v.Set("state", ar.State)
	target.RawQuery = v.Encode()
	http.Redirect(w, r, target.String(), http.StatusFound)
}

// IssueWebCode issues a code of the web authorization for openid, as the platform does when
// that follower opens an authorization link: tests use it to skip the page.
func (s *Simulator) IssueWebCode(openid string) string { return s.issueWebCode(openid, false) }

// IssueSnapshotWebCode issues a code as the platform does when a page is opened from a Moments
// snapshot (朋友圈快照页): its exchange answers is_snapshotuser 1 and a virtual openid derived
// from openid, which is no follower.
func (s *Simulator) IssueSnapshotWebCode(openid string) string { return s.issueWebCode(openid, true) }

func (s *Simulator) issueWebCode(openid string, snapshot bool) string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	c := base64.RawURLEncoding.EncodeToString(b[:])
	now := s.now()
	s.web.mu.Lock()
	defer s.web.mu.Unlock()
	if s.web.codes == nil {
		s.web.codes = map[string]*webCode{}
	}
	if len(s.web.codes) >= maxWebCodes {
		for k, wc := range s.web.codes {
			if !now.Before(wc.expires) {
				delete(s.web.codes, k)
			}
		}
	}
	s.web.codes[c] = &webCode{openid: openid, expires: now.Add(webCodeTTL), snapshot: snapshot}
	return c
}

// Followers returns the openids that follow the account, sorted.
func (s *Simulator) Followers() []string {
	s.mu.Lock()
	out := make([]string, 0, len(s.followers))
	for id, f := range s.followers {
		if f.following {
			out = append(out, id)
		}
	}
	s.mu.Unlock()
	slices.Sort(out)
	return out
}

// handleWebAccessToken exchanges a code for the openid (and a web access token, which
// snsapi_base callers drop).
func (s *Simulator) handleWebAccessToken(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case !s.checkAccount(w, q.Get("appid"), q.Get("secret")):
		return
	case q.Get("grant_type") != "authorization_code":
		s.answerError(w, codeInvalidGrantType, "invalid grant_type")
		return
	case q.Get("code") == "":
		s.answerError(w, codeMissingCode, "missing code")
		return
	}
	now := s.now()
	s.web.mu.Lock()
	wc := s.web.codes[q.Get("code")]
	var code int
	var msg string
	switch {
	case wc == nil:
		code, msg = codeInvalidCode, "invalid code"
	case wc.used:
		code, msg = codeCodeUsed, "code been used"
	case !now.Before(wc.expires):
		code, msg = codeCodeExpired, "code expired"
	default:
		wc.used = true
	}
	s.web.mu.Unlock()
	if code != 0 {
		s.answerError(w, code, msg)
		return
	}
	answer := map[string]any{
		"access_token": newToken(), "expires_in": 7200, "refresh_token": newToken(),
		"openid": wc.openid, "scope": "snsapi_base",
	}
	if wc.snapshot {
		// The documented answer for a snapshot page: a virtual openid, and the flag.
		answer["openid"], answer["is_snapshotuser"] = "oSnapshot"+strings.TrimPrefix(wc.openid, "o"), 1
	}
	b, _ := json.Marshal(answer)
	writeJSON(w, b)
}

func (s *Simulator) countError(code int) {
	s.mu.Lock()
	s.errors[code]++
	s.mu.Unlock()
}

// authorizePage is what the authorization page shows.
type authorizePage struct {
	Action    string
	Scope     string
	Followers []string
	Error     string
	Code      int
}

func (s *Simulator) renderAuthorize(w http.ResponseWriter, p authorizePage) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = authorizeTmpl.Execute(w, p)
}

// authorizeTmpl stands in for the in-app browser's silent authorization: in the real app the
// phone's own account answers; here the person says which follower they are.
var authorizeTmpl = htmltemplate.Must(htmltemplate.New("authorize").Parse(`<!doctype html>
<html lang="zh-CN"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>微信授权（模拟） WeChat authorization (simulated)</title><link rel="icon" href="data:,">
<style>
body{font-family:system-ui,-apple-system,"PingFang SC","Microsoft YaHei",sans-serif;margin:0;background:#ededed;color:#191919}
main{max-width:420px;margin:0 auto;padding:24px 16px}
h1{font-size:20px;margin:0 0 4px}.en{display:block;color:#666;font-size:13px;font-weight:normal}
p{font-size:15px;line-height:1.5}ul{list-style:none;padding:0;margin:16px 0}
li{margin:8px 0}button{width:100%;padding:12px;font-size:15px;border:0;border-radius:8px;background:#07c160;color:#fff;text-align:left;font-family:ui-monospace,monospace;word-break:break-all}
.error{color:#c00}.sim{color:#888;font-size:12px}
</style></head><body><main>
<h1>微信授权（模拟平台）<span class="en">WeChat authorization (platform simulator)</span></h1>
{{- if .Error}}
<p class="error" role="alert">授权链接无效 The authorization link is invalid: {{.Error}} (errcode {{.Code}})</p>
{{- else}}
<p>在微信中，这一步自动完成（{{.Scope}}）。请选择您扮演的关注者。<span class="en">In the WeChat app this step is silent ({{.Scope}}). Pick the follower you are.</span></p>
{{- if .Followers}}
<ul id="followers">
{{- range .Followers}}
<li><form method="post" action="{{$.Action}}"><input type="hidden" name="openid" value="{{.}}"><button type="submit" data-openid="{{.}}">{{.}}</button></form></li>
{{- end}}
</ul>
{{- else}}
<p class="error">公众号还没有关注者 The account has no followers yet (POST /sim/followers).</p>
{{- end}}
{{- end}}
<p class="sim">ucs platform simulator</p>
</main></body></html>
`))
