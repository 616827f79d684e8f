package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/campus-it/ucs/pkg/config"
)

// logoutReceiver is a client's back-channel logout endpoint: it refuses the first post with
// 503, so that the sender's retry is exercised, and hands every logout token it takes over.
type logoutReceiver struct {
	*httptest.Server
	posts  atomic.Int32
	tokens chan string
}

func newLogoutReceiver(t *testing.T) *logoutReceiver {
	r := &logoutReceiver{tokens: make(chan string, 16)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.posts.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.tokens <- req.PostFormValue("logout_token")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.Close)
	return r
}

// next waits for a logout token, with a deadline.
func (r *logoutReceiver) next(t *testing.T) string {
	t.Helper()
	select {
	case tok := <-r.tokens:
		return tok
	case <-time.After(20 * time.Second):
		t.Fatal("no logout token arrived")
		return ""
	}
}

// checkLogoutToken verifies tok's signature with the provider's JWKS and its claims: a logout
// token of this issuer for client, naming the session sid of userID.
func checkLogoutToken(t *testing.T, e *signInEnv, tok, client, sid string) {
	t.Helper()
	ctx := context.Background()
	payload, err := oidc.NewRemoteKeySet(ctx, e.issuer+"/protocol/openid-connect/certs").VerifySignature(ctx, tok)
	if err != nil {
		t.Fatalf("the logout token's signature: %v", err)
	}
	hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	var h struct{ Typ, Alg, Kid string }
	_ = json.Unmarshal(hdr, &h)
	if h.Typ != "logout+jwt" || h.Kid == "" {
		t.Fatalf("logout token header %s", hdr)
	}
	var c map[string]any
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	ev, _ := c["events"].(map[string]any)
	member, ok := ev["http://schemas.openid.net/event/backchannel-logout"].(map[string]any)
	aud, _ := c["aud"].([]any)
	iat, _ := c["iat"].(float64)
	exp, _ := c["exp"].(float64)
	if !ok || len(member) != 0 || c["iss"] != e.issuer || len(aud) != 1 || aud[0] != client || c["sub"] != userID ||
		c["sid"] != sid || c["jti"] == nil || iat == 0 || exp <= iat || c["nonce"] != nil {
		t.Fatalf("logout token claims %s", payload)
	}
}

func idTokenSID(t *testing.T, idt string) string {
	t.Helper()
	b, _ := base64.RawURLEncoding.DecodeString(strings.Split(idt, ".")[1])
	var c struct{ SID string }
	_ = json.Unmarshal(b, &c)
	return c.SID
}

// TestBackchannelLogout: OpenID Connect Back-Channel Logout 1.0. Discovery says so; when a
// session ends (logout, the account page) each client that received tokens in it and
// registered an address gets a signed logout token by POST, retried after a failure; the
// user's logout does not wait for it; a logout token is no ID token hint.
func TestBackchannelLogout(t *testing.T) {
	rs256, es256 := newLogoutReceiver(t), newLogoutReceiver(t)
	e := newSignInEnvWith(t, nil, func(cfg *config.Config) {
		cfg.OAuth.Clients = append(cfg.OAuth.Clients,
			config.Client{ClientID: "bc-app", ClientSecret: rpSecret, Grants: []string{"authorization_code"},
				Scopes: []string{"openid"}, RedirectURIs: []string{rpRedirect}, SkipConsent: true,
				BackchannelLogoutURI: rs256.URL + "/logout", BackchannelLogoutSessionRequired: true},
			config.Client{ClientID: "bc-es", ClientSecret: rpSecret, Grants: []string{"authorization_code"}, IDTokenAlg: "ES256",
				Scopes: []string{"openid"}, RedirectURIs: []string{rpRedirect}, SkipConsent: true,
				BackchannelLogoutURI: es256.URL + "/logout"})
	})
	var disc map[string]any
	resp, err := http.Get(e.issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&disc)
	resp.Body.Close()
	if disc["backchannel_logout_supported"] != true || disc["backchannel_logout_session_supported"] != true {
		t.Fatalf("discovery: %v %v", disc["backchannel_logout_supported"], disc["backchannel_logout_session_supported"])
	}

	b := browser(t)
	tok, errc := e.exchange(t, "bc-app", e.signInCode(t, b, "bc-app", "scope", "openid"))
	if errc != "" {
		t.Fatal(errc)
	}
	if _, errc := e.exchange(t, "bc-es", e.signInCode(t, b, "bc-es", "scope", "openid")); errc != "" {
		t.Fatal(errc)
	}
	e.signInCode(t, b, "trusted") // no address registered: told nothing
	sid := idTokenSID(t, tok["id_token"].(string))

	out := get(t, b, e.issuer+"/protocol/openid-connect/logout?"+url.Values{"id_token_hint": {tok["id_token"].(string)},
		"post_logout_redirect_uri": {rpRedirect}}.Encode())
	if out.status != http.StatusFound {
		t.Fatalf("logout: %d %s", out.status, out.body)
	}
	lt := rs256.next(t)
	checkLogoutToken(t, e, lt, "bc-app", sid)
	checkLogoutToken(t, e, es256.next(t), "bc-es", sid)
	if rs256.posts.Load() < 2 {
		t.Fatalf("the 503 was not retried: %d posts", rs256.posts.Load())
	}
	// A logout token passes for no ID token.
	b2 := browser(t)
	e.signInCode(t, b2, "trusted")
	if p := get(t, b2, e.issuer+"/protocol/openid-connect/logout?id_token_hint="+lt); p.status != http.StatusBadRequest {
		t.Fatalf("a logout token as id_token_hint: %d", p.status)
	}

	// Ending a session on the account page tells its clients too.
	b3 := browser(t)
	acct := e.signedIn(t, b3)
	tok3, _ := e.exchange(t, "bc-app", e.signInCode(t, b3, "bc-app", "scope", "openid"))
	own := acct.own()
	if p := e.accountPost(t, b3, "/sessions/end", url.Values{"csrf": {acct.csrf}, "sid": {own}}); p.status != http.StatusOK {
		t.Fatalf("ending the session on the account page: %d", p.status)
	}
	checkLogoutToken(t, e, rs256.next(t), "bc-app", idTokenSID(t, tok3["id_token"].(string)))
	if !slices.Contains([]string{own}, idTokenSID(t, tok3["id_token"].(string))) {
		t.Fatal("the account page's session is not the token's")
	}
}
