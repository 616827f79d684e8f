package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultOAuthBase is where the platform serves its web authorization page
// (connect/oauth2/authorize), which is not the API's host.
const DefaultOAuthBase = "https://open.weixin.qq.com"

// WebAuthConfig configures a WebAuth.
type WebAuthConfig struct {
	// OAuthBase is the origin of the authorization page, DefaultOAuthBase on
	// the real platform. Required; an absolute http or https URL.
	OAuthBase string
	// APIBase is the platform's API origin, where a code is exchanged
	// (sns/oauth2/access_token). Required; an absolute http or https URL.
	APIBase string
	// AppID and Secret are the official account's. Required. The secret is
	// sent only to the exchange, in its query as the platform requires, and
	// never logged nor put in an error.
	AppID, Secret string
	// HTTPClient makes the exchange. Default: a client with a 10 s timeout.
	HTTPClient *http.Client
}

// WebAuth is the platform's web authorization (网页授权) with scope
// snsapi_base: a page opened in the platform's in-app browser learns, without
// asking the user anything, which follower (openid) opened it. The browser is
// sent to AuthorizeURL; the platform sends it back with a code, which only the
// server exchanges (OpenID), so the openid never passes through the browser.
type WebAuth struct {
	appID, secret string
	authorizeURL  string
	exchangeURL   string
	http          *http.Client
}

// NewWebAuth returns a WebAuth for the account in cfg, after validating cfg.
func NewWebAuth(cfg WebAuthConfig) (*WebAuth, error) {
	var problems []string
	for _, b := range []struct{ name, v string }{{"OAuthBase", cfg.OAuthBase}, {"APIBase", cfg.APIBase}} {
		if u, err := url.Parse(b.v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.RawQuery != "" || u.Fragment != "" {
			problems = append(problems, b.name+" must be an absolute http or https URL without query")
		}
	}
	if cfg.AppID == "" {
		problems = append(problems, "AppID is empty")
	}
	if cfg.Secret == "" {
		problems = append(problems, "Secret is empty")
	}
	if len(problems) > 0 {
		return nil, errors.New("platform: invalid web authorization config: " + strings.Join(problems, "; "))
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: defaultHTTPTimeout}
	}
	return &WebAuth{
		appID: cfg.AppID, secret: cfg.Secret, http: noRedirects(cfg.HTTPClient), // the secret is in the exchange's query
		authorizeURL: strings.TrimRight(cfg.OAuthBase, "/") + "/connect/oauth2/authorize",
		exchangeURL:  strings.TrimRight(cfg.APIBase, "/") + "/sns/oauth2/access_token",
	}, nil
}

// AuthorizeURL is the address that starts a silent (snsapi_base) authorization
// returning to redirectURI with a code and state. The platform matches the
// parameters in exactly this order and needs the #wechat_redirect fragment,
// so the query is written by hand rather than by url.Values (which sorts).
// state must be at most 128 letters and digits, as the platform allows.
func (w *WebAuth) AuthorizeURL(redirectURI, state string) string {
	return w.authorizeURL + "?appid=" + url.QueryEscape(w.appID) +
		"&redirect_uri=" + url.QueryEscape(redirectURI) +
		"&response_type=code&scope=snsapi_base&state=" + url.QueryEscape(state) + "#wechat_redirect"
}

// webAuthAnswer is the answer of sns/oauth2/access_token; of a success, only
// openid is used (snsapi_base grants nothing more), and its access token is
// dropped at once.
type webAuthAnswer struct {
	ErrCode int    `json:"errcode"`
	ErrMsg  string `json:"errmsg"`
	OpenID  string `json:"openid"`
	// IsSnapshotUser is 1 when the page was opened from a Moments snapshot: the openid is a
	// virtual one, of no follower.
	IsSnapshotUser int `json:"is_snapshotuser"`
}

// ErrSnapshotUser is OpenID's answer when the platform says the page was opened from a
// Moments snapshot (is_snapshotuser 1): its openid is virtual, of no follower, and must not be
// bound or used; the user must open the page from the official account itself.
var ErrSnapshotUser = errors.New("platform: web authorization: the page was opened from a Moments snapshot (virtual openid)")

// OpenID exchanges a code of the authorization for the openid of the
// follower who opened the page. A refusal of the platform is an *Error
// (40029 invalid code, 40163 code been used, 42003 code expired, …); a page
// opened from a Moments snapshot is ErrSnapshotUser. Neither the code nor the
// secret appears in an error.
func (w *WebAuth) OpenID(ctx context.Context, code string) (string, error) {
	if code == "" || len(code) > 512 {
		return "", &Error{Code: 41008, Msg: "missing or malformed code"}
	}
	q := "appid=" + url.QueryEscape(w.appID) + "&secret=" + url.QueryEscape(w.secret) +
		"&code=" + url.QueryEscape(code) + "&grant_type=authorization_code"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.exchangeURL+"?"+q, nil)
	if err != nil {
		return "", errors.New("platform: web authorization: cannot build the request")
	}
	resp, err := w.http.Do(req)
	if err != nil {
		// The transport's error names the whole URL, secret and code included: keep only why.
		var ue *url.Error
		if errors.As(err, &ue) {
			return "", &url.Error{Op: ue.Op, URL: redacted(w.exchangeURL), Err: ue.Err}
		}
		return "", errors.New("platform: web authorization: request failed")
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("platform: web authorization: reading the answer: %w", err)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return "", fmt.Errorf("platform: web authorization: HTTP status %s", resp.Status)
	case len(raw) > maxAnswerBytes:
		return "", fmt.Errorf("platform: web authorization: answer longer than %d bytes", maxAnswerBytes)
	}
	var a webAuthAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", errors.New("platform: web authorization: the answer is not JSON")
	}
	if a.ErrCode != 0 {
		return "", &Error{Code: a.ErrCode, Msg: a.ErrMsg}
	}
	if a.IsSnapshotUser == 1 {
		return "", ErrSnapshotUser
	}
	if !validOpenID(a.OpenID) {
		return "", errors.New("platform: web authorization: the answer carries no openid")
	}
	return a.OpenID, nil
}

// CodeRefused reports whether err is the platform's refusal of the code itself (41008 missing,
// 40029 invalid, 40163 already used, 42003 expired): the page's link is at fault, not the
// platform (-1 busy) nor the official account's credentials (40001, 40013, 40125, 40164).
func CodeRefused(err error) bool {
	var pe *Error
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case 41008, 40029, 40163, 42003:
		return true
	}
	return false
}

// validOpenID accepts what the platform's openids are made of (28 URL-safe
// characters on the real platform), with room for other lengths.
func validOpenID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// WebAuthCodeTTL is how long the platform keeps an unused code: five minutes.
const WebAuthCodeTTL = 5 * time.Minute
