package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// authTime is the auth_time of the ID token of a token answer.
func authTime(t *testing.T, r *rp, tok map[string]any) int64 {
	t.Helper()
	idt, err := r.verifier.Verify(context.Background(), tok["id_token"].(string))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AuthTime int64 `json:"auth_time"`
	}
	_ = idt.Claims(&c)
	return c.AuthTime
}

func TestConformancePromptAndMaxAge(t *testing.T) {
	e := newSignInEnv(t)
	r := newRP(t, e)
	b := browser(t)

	// prompt=none before any sign-in: login_required back to the client, with state and iss.
	q := callback(t, get(t, b, e.authURL("portal", "pn", "prompt", "none")))
	if q.Get("error") != "login_required" || q.Get("state") != "pn" || q.Get("iss") != e.issuer || q.Has("code") {
		t.Fatalf("prompt=none, signed out: %v", q)
	}
	// Signed in to trusted (no consent needed there); portal's consent is not given yet.
	first, errc := e.exchange(t, "trusted", e.signInCode(t, b, "trusted"))
	if errc != "" {
		t.Fatal(errc)
	}
	q = callback(t, get(t, b, e.authURL("portal", "pc", "prompt", "none")))
	if q.Get("error") != "consent_required" || q.Get("state") != "pc" {
		t.Fatalf("prompt=none, no consent: %v", q)
	}
	e.signInCode(t, b, "portal") // consents
	q = callback(t, get(t, b, e.authURL("portal", "ok", "prompt", "none", "id_token_hint", first["id_token"].(string))))
	if q.Get("code") == "" {
		t.Fatalf("prompt=none with consent and a matching id_token_hint: %v", q)
	}
	q = callback(t, get(t, b, e.authURL("portal", "bad", "prompt", "none", "id_token_hint", "e30.e30.e30")))
	if q.Get("error") != "invalid_request" {
		t.Fatalf("a forged id_token_hint: %v", q)
	}
	// prompt=consent asks again though consent was given.
	if p := get(t, b, e.authURL("portal", "c", "prompt", "consent")); !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("prompt=consent: %d %q", p.status, p.location)
	}

	// auth_time changes only on a real sign-in: single sign-on keeps it; prompt=login and an
	// exceeded max_age show the login form and make a new one.
	cfg := r.conf
	cfg.ClientID = "trusted"
	trustedRP := &rp{provider: r.provider, conf: cfg, verifier: r.provider.Verifier(&oidc.Config{ClientID: "trusted", Now: e.clock.Now})}
	at0 := authTime(t, trustedRP, first)
	e.clock.Advance(30 * time.Second)
	sso, _ := e.exchange(t, "trusted", e.signInCode(t, b, "trusted"))
	if at := authTime(t, trustedRP, sso); at != at0 {
		t.Fatalf("single sign-on changed auth_time: %d, was %d", at, at0)
	}
	if p := get(t, b, e.authURL("trusted", "ma", "max_age", "60")); p.location == "" {
		t.Fatalf("max_age not yet exceeded asked for a login: %d", p.status)
	}
	e.clock.Advance(31 * time.Second)
	if p := get(t, b, e.authURL("trusted", "ma", "max_age", "60")); !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("max_age exceeded: %d %q", p.status, p.location)
	}
	if q := callback(t, get(t, b, e.authURL("trusted", "ma", "max_age", "60", "prompt", "none"))); q.Get("error") != "login_required" {
		t.Fatalf("max_age exceeded, prompt=none: %v", q)
	}
	relogin, _ := e.exchange(t, "trusted", e.signInCode(t, b, "trusted", "prompt", "login"))
	if at := authTime(t, trustedRP, relogin); at <= at0 {
		t.Fatalf("prompt=login kept auth_time %d", at)
	}
}

func TestConformanceRequests(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	t.Run("standard scopes accepted and listed", func(t *testing.T) {
		code := e.signInCode(t, b, "portal", "scope", "openid profile email address phone notification.mp")
		tok, errc := e.exchange(t, "portal", code)
		if errc != "" || !strings.Contains(tok["scope"].(string), "profile") {
			t.Fatalf("%q %v", errc, tok)
		}
		if a := grant(t, e.base, "gateway", rpSecret, ""); a.status != 200 {
			t.Fatalf("client credentials: %d", a.status)
		}
		req := url.Values{"grant_type": {"client_credentials"}, "scope": {"notification.mp email"}}
		if st, m := e.postForm(t, "/token", "gateway", req); st != 200 {
			t.Fatalf("client credentials with a standard scope: %d %v", st, m)
		}
		resp, err := http.Get(e.issuer + "/.well-known/openid-configuration")
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Scopes      []string `json:"scopes_supported"`
			Request     *bool    `json:"request_parameter_supported"`
			RequestURI  *bool    `json:"request_uri_parameter_supported"`
			PromptValue []string `json:"prompt_values_supported"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		for _, sc := range []string{"openid", "profile", "email", "address", "phone"} {
			if !slices.Contains(d.Scopes, sc) {
				t.Errorf("discovery lacks scope %s", sc)
			}
		}
		if d.Request == nil || *d.Request || d.RequestURI == nil || *d.RequestURI || !slices.Contains(d.PromptValue, "none") {
			t.Errorf("discovery: %+v", d)
		}
	})
	t.Run("request and request_uri refused", func(t *testing.T) {
		q := callback(t, get(t, b, e.authURL("portal", "r", "request", "e30.e30.")))
		if q.Get("error") != "request_not_supported" || q.Get("state") != "r" || q.Get("iss") != e.issuer {
			t.Fatalf("%v", q)
		}
		q = callback(t, get(t, b, e.authURL("portal", "ru", "request_uri", "https://app.example.edu/req")))
		if q.Get("error") != "request_uri_not_supported" || q.Get("state") != "ru" {
			t.Fatalf("%v", q)
		}
	})
	t.Run("a parameter given twice", func(t *testing.T) {
		p := get(t, b, e.authURL("portal", "d")+"&scope=openid")
		if q := callback(t, p); q.Get("error") != "invalid_request" || q.Has("code") {
			t.Fatalf("authorization: %v", q)
		}
		p = get(t, b, e.authURL("portal", "d")+"&client_id=trusted")
		if p.status != http.StatusBadRequest || p.location != "" {
			t.Fatalf("client_id twice: %d %q", p.status, p.location)
		}
		code := e.signInCode(t, b, "portal")
		f := url.Values{"grant_type": {"authorization_code"}, "code": {code, code}, "redirect_uri": {rpRedirect}}
		if st, m := e.postForm(t, "/token", "portal", f); st != 400 || m["error"] != "invalid_request" {
			t.Fatalf("token: %d %v", st, m)
		}
		// Refused before anything was used: the code still works.
		if _, errc := e.exchange(t, "portal", code); errc != "" {
			t.Fatalf("the code after a refused request: %q", errc)
		}
	})
	t.Run("userinfo with the token in a form body", func(t *testing.T) {
		tok, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
		if errc != "" {
			t.Fatal(errc)
		}
		body := url.Values{"access_token": {tok["access_token"].(string)}}
		post := func(auth string) (int, map[string]any) { return e.post(t, "/userinfo", auth, body) }
		if st, m := post(""); st != 200 || m["userid"] != userID {
			t.Fatalf("%d %v", st, m)
		}
		// A malformed request: 400 invalid_request (RFC 6750 §3.1), not a refused token.
		if st, m := post("Bearer " + tok["access_token"].(string)); st != http.StatusBadRequest {
			t.Fatalf("token in the header and the body: %d %v", st, m)
		}
	})
	t.Run("refresh tokens by default, not for refresh_tokens: false", func(t *testing.T) {
		tok, errc := e.exchange(t, "trusted", e.signInCode(t, b, "trusted"))
		if errc != "" || tok["refresh_token"] == nil || tok["refresh_expires_in"].(float64) <= 0 {
			t.Fatalf("trusted (authorization_code only): %q %v", errc, tok)
		}
		tok, errc = e.exchange(t, "kiosk", e.signInCode(t, b, "kiosk", "scope", "openid"))
		if errc != "" || tok["refresh_token"] != nil {
			t.Fatalf("kiosk (refresh_tokens: false): %q %v", errc, tok)
		}
	})
	t.Run("ID tokens RS256 by default, ES256 when the client chose it; access tokens ES256", func(t *testing.T) {
		ctx := context.Background()
		p, err := oidc.NewProvider(ctx, e.issuer)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Algs []string `json:"id_token_signing_alg_values_supported"`
		}
		_ = p.Claims(&d)
		if !slices.Contains(d.Algs, "RS256") || !slices.Contains(d.Algs, "ES256") {
			t.Fatalf("discovery: %v", d.Algs)
		}
		header := func(jwt string) string {
			var h struct{ Alg string }
			raw, _ := base64.RawURLEncoding.DecodeString(strings.Split(jwt, ".")[0])
			_ = json.Unmarshal(raw, &h)
			return h.Alg
		}
		for _, c := range []struct{ client, alg, scope string }{{"portal", "RS256", "openid notification.mp"}, {"kiosk", "ES256", "openid"}} {
			tok, errc := e.exchange(t, c.client, e.signInCode(t, b, c.client, "scope", c.scope))
			if errc != "" {
				t.Fatal(errc)
			}
			id := tok["id_token"].(string)
			if header(id) != c.alg || header(tok["access_token"].(string)) != "ES256" {
				t.Fatalf("%s: ID token %s, access token %s", c.client, header(id), header(tok["access_token"].(string)))
			}
			v := p.Verifier(&oidc.Config{ClientID: c.client, Now: e.clock.Now, SupportedSigningAlgs: []string{c.alg}})
			if _, err := v.Verify(ctx, id); err != nil {
				t.Fatalf("%s: %v", c.client, err)
			}
		}
	})
	t.Run("error_description quotes no input and stays in RFC 6749's characters", func(t *testing.T) {
		marker := "\"<x>\\\x01\u00e9zz"
		check := func(where, desc string) {
			t.Helper()
			if strings.Contains(desc, "<x>") || strings.Contains(desc, "zz") {
				t.Errorf("%s echoes the input: %q", where, desc)
			}
			for _, r := range desc {
				if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
					t.Errorf("%s: character %q outside RFC 6749's set in %q", where, r, desc)
				}
			}
		}
		for _, f := range []url.Values{
			{"grant_type": {marker}},
			{"grant_type": {"client_credentials"}, "scope": {marker}},
			{"grant_type": {"authorization_code"}, "code": {marker}, "redirect_uri": {marker}},
			{"grant_type": {"refresh_token"}, "refresh_token": {marker}},
		} {
			_, m := e.postForm(t, "/token", "gateway", f)
			desc, _ := m["error_description"].(string)
			check("token "+f.Get("grant_type")[:4], desc)
		}
		for _, extra := range [][]string{{"scope", marker}, {"prompt", marker}, {"max_age", marker},
			{"response_mode", marker}, {"code_challenge_method", marker}} {
			q := callback(t, get(t, b, e.authURL("portal", "e", extra...)))
			if q.Get("error") == "" {
				t.Fatalf("%s accepted", extra[0])
			}
			check("authorization "+extra[0], q.Get("error_description"))
		}
	})
}

// TestConformanceLogout: the interface's logout (redirect_uri alone) returns at once; otherwise
// Keycloak 18's rules: confirmation without id_token_hint, 400 for post_logout_redirect_uri with
// neither id_token_hint nor client_id, an error page for a forged id_token_hint.
func TestConformanceLogout(t *testing.T) {
	e := newSignInEnv(t)
	logout := e.issuer + "/protocol/openid-connect/logout"
	signedIn := func(b *http.Client) bool {
		t.Helper()
		return get(t, b, e.authURL("trusted", "s")).location != ""
	}
	b := browser(t)
	_, errc := e.exchange(t, "trusted", e.signInCode(t, b, "trusted"))
	if errc != "" {
		t.Fatal(errc)
	}

	// A plain GET (a link or an image elsewhere) only shows a form.
	p := get(t, b, logout)
	if p.status != 200 || !strings.Contains(p.body, `name="confirm"`) || !signedIn(b) {
		t.Fatalf("logout without id_token_hint: %d, signed in %v", p.status, signedIn(b))
	}
	if other := submit(t, browser(t), p, url.Values{}); other.status != http.StatusBadRequest || !signedIn(b) {
		t.Fatalf("the confirmation from another browser: %d", other.status)
	}
	if done := submit(t, b, p, url.Values{}); done.status != 200 || !strings.Contains(done.body, "You have signed out") || signedIn(b) {
		t.Fatalf("confirmed: %d, signed in %v", done.status, signedIn(b))
	}

	b = browser(t)
	e.signInCode(t, b, "trusted")
	for name, u := range map[string]string{
		"post_logout_redirect_uri alone":       logout + "?post_logout_redirect_uri=" + url.QueryEscape(rpRedirect),
		"forged id_token_hint":                 logout + "?id_token_hint=e30.e30.e30",
		"forged id_token_hint with an address": logout + "?id_token_hint=e30.e30.e30&post_logout_redirect_uri=" + url.QueryEscape(rpRedirect),
		"unregistered address":                 logout + "?client_id=trusted&post_logout_redirect_uri=" + url.QueryEscape("https://evil.example.com/"),
	} {
		if p := get(t, b, u); p.status != http.StatusBadRequest || p.location != "" || !signedIn(b) {
			t.Fatalf("%s: %d %q, signed in %v", name, p.status, p.location, signedIn(b))
		}
	}
	// client_id and a registered address: confirmed, then back to the application with state.
	p = get(t, b, logout+"?client_id=trusted&state=st&post_logout_redirect_uri="+url.QueryEscape(rpRedirect))
	if !strings.Contains(p.body, `name="confirm"`) {
		t.Fatalf("client_id without id_token_hint: %d %q", p.status, p.location)
	}
	if back := submit(t, b, p, url.Values{}); back.location != rpRedirect+"?state=st" || signedIn(b) {
		t.Fatalf("after confirming: %d %q", back.status, back.location)
	}

	// With id_token_hint no confirmation is asked.
	b = browser(t)
	tok, _ := e.exchange(t, "trusted", e.signInCode(t, b, "trusted"))
	if p := get(t, b, logout+"?id_token_hint="+tok["id_token"].(string)); p.status != 200 || !strings.Contains(p.body, "You have signed out") || signedIn(b) {
		t.Fatalf("with id_token_hint: %d", p.status)
	}
	// The interface's form: redirect_uri alone, registered, returns at once.
	b = browser(t)
	e.signInCode(t, b, "trusted")
	if p := get(t, b, logout+"?redirect_uri="+url.QueryEscape(rpRedirect)); p.status != http.StatusFound || p.location != rpRedirect || signedIn(b) {
		t.Fatalf("the interface's logout: %d %q", p.status, p.location)
	}
}
