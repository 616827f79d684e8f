package oauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/keys"
	"github.com/campus-it/ucs/pkg/oauth"
)

func service(t testing.TB, clk *clocktest.Clock) *oauth.Service {
	t.Helper()
	sk, err := keys.Generate("ES256", clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	ks, err := keys.FromStored(sk)
	if err != nil {
		t.Fatal(err)
	}
	clients := oauth.NewClients([]oauth.Registration{
		{ID: "a", SecretHash: sha256.Sum256([]byte("secret-of-client-a")), Grants: []string{"client_credentials"}, Scopes: []string{"openid", "notification.mp", "fake_api"}},
		{ID: "long", SecretHash: sha256.Sum256([]byte("secret")), Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}, AccessTokenTTL: 24 * time.Hour},
	}, 2*time.Hour)
	return &oauth.Service{Issuer: "https://ucs.example.edu/auth/realms/campus", Clients: clients, Keys: ks, Now: clk.Now}
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

func TestGrantScopeAndLifetime(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	s := service(t, clk)
	cases := []struct {
		name      string
		form      url.Values
		scope     string
		expiresIn int64
		err       string
	}{
		{"all scopes but openid by default", form("grant_type", "client_credentials", "client_id", "a", "client_secret", "secret-of-client-a"), "notification.mp fake_api", 7200, ""},
		{"asked scopes, deduplicated", form("grant_type", "client_credentials", "client_id", "a", "client_secret", "secret-of-client-a", "scope", "fake_api  fake_api openid"), "fake_api openid", 7200, ""},
		{"scope not allowed", form("grant_type", "client_credentials", "client_id", "long", "client_secret", "secret", "scope", "fake_api"), "", 0, "invalid_scope"},
		{"per-client lifetime, hashed secret", form("grant_type", "client_credentials", "client_id", "long", "client_secret", "secret"), "notification.mp", 86400, ""},
		{"secret of another client", form("grant_type", "client_credentials", "client_id", "long", "client_secret", "secret-of-client-a"), "", 0, "invalid_client"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, e := s.Token(context.Background(), oauth.ClientRequest{Form: c.form})
			if c.err != "" {
				if e == nil || e.Code != c.err {
					t.Fatalf("got %+v %+v", r, e)
				}
				return
			}
			if e != nil || r.Scope != c.scope || r.ExpiresIn != c.expiresIn || r.TokenType != "Bearer" || r.RefreshExpiresIn != 0 {
				t.Fatalf("got %+v %+v", r, e)
			}
		})
	}
}

func TestBasicCredentials(t *testing.T) {
	s := service(t, clocktest.New(time.Now()))
	grant := form("grant_type", "client_credentials")
	if _, e := s.Token(context.Background(), oauth.ClientRequest{Form: grant, BasicID: "a", BasicSecret: "secret-of-client-a", Basic: true}); e != nil {
		t.Fatalf("basic: %v", e)
	}
	// RFC 6749 §2.3.1: Basic credentials are form-encoded.
	if _, e := s.Token(context.Background(), oauth.ClientRequest{Form: grant, BasicID: "a", BasicSecret: "secret%2Dof%2Dclient%2Da", Basic: true}); e != nil {
		t.Fatalf("encoded basic: %v", e)
	}
	both := form("grant_type", "client_credentials", "client_secret", "secret-of-client-a")
	if _, e := s.Token(context.Background(), oauth.ClientRequest{Form: both, BasicID: "a", BasicSecret: "secret-of-client-a", Basic: true}); e == nil || e.Code != "invalid_request" {
		t.Fatalf("credentials twice: %v", e)
	}
	mismatch := form("grant_type", "client_credentials", "client_id", "long")
	if _, e := s.Token(context.Background(), oauth.ClientRequest{Form: mismatch, BasicID: "a", BasicSecret: "secret-of-client-a", Basic: true}); e == nil || e.Code != "invalid_request" {
		t.Fatalf("two client ids: %v", e)
	}
}

func TestVerifierCachesUntilExpiry(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	s := service(t, clk)
	v := oauth.NewVerifier(s, 2)
	tok := func() string {
		r, e := s.Token(context.Background(), oauth.ClientRequest{Form: form("grant_type", "client_credentials", "client_id", "a", "client_secret", "secret-of-client-a")})
		if e != nil {
			t.Fatal(e)
		}
		return "Bearer " + r.AccessToken
	}
	req := oauth.Requirement{Scope: "notification.mp", Grants: []string{"client_credentials"}}
	t1, t2, t3 := tok(), tok(), tok()
	for i, h := range []string{t1, t2, t3, t1, t3} {
		if c, e := v.Verify(h, req); e != nil || c.Azp != "a" {
			t.Fatalf("token %d: %v", i, e)
		}
	}
	if _, e := v.Verify(t1, oauth.Requirement{Scope: "fake_api", Grants: []string{"authorization_code"}}); e == nil || e.Code != "insufficient_scope" {
		t.Fatalf("grant check: %v", e)
	}
	if _, e := v.Verify(strings.Replace(t1, "Bearer ", "bearer ", 1), req); e != nil {
		t.Fatalf("the scheme is case-insensitive: %v", e)
	}
	clk.Advance(2*time.Hour + time.Second)
	for _, h := range []string{t1, t2, t3} {
		if _, e := v.Verify(h, req); e == nil || e.Code != "invalid_token" || !strings.Contains(e.Description, "expired") {
			t.Fatalf("expired token: %v", e)
		}
	}
}

// TestVerifyParallel checks the bearer cache under concurrent use (run it with -race): many
// goroutines verify the same tokens, user tokens among them that are rechecked against their
// session, while the clock passes the recheck interval and, at last, the tokens' expiry.
func TestVerifyParallel(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	s := service(t, clk)
	v := oauth.NewVerifier(s, 4) // smaller than the tokens in use: entries are evicted too
	var headers []string
	for i := range 6 {
		now := clk.Now()
		c := &oauth.Claims{
			RegisteredClaims: jwt.RegisteredClaims{Issuer: s.Issuer, Subject: "2020000001",
				IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))},
			Typ: "Bearer", Azp: "a", Scope: "openid notification.mp", Grant: "authorization_code", UserID: "2020000001",
		}
		if i%2 == 0 {
			c.SID = fmt.Sprintf("sid-%d", i)
		}
		tok, err := s.Keys.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		headers = append(headers, "Bearer "+tok)
	}
	req := oauth.Requirement{Scope: "notification.mp"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				if g == 0 && i%50 == 49 {
					clk.Advance(oauth.SessionRecheck / 2)
				}
				if c, e := v.Verify(headers[(g+i)%len(headers)], req); e != nil || c.Azp != "a" {
					t.Errorf("verify: %v", e)
					return
				}
			}
		}()
	}
	wg.Wait()
	clk.Advance(time.Hour)
	for _, h := range headers {
		if _, e := v.Verify(h, req); e == nil || e.Code != "invalid_token" {
			t.Fatalf("expired token accepted: %v", e)
		}
	}
}

// BenchmarkVerifyCached is the bearer check on the push hot path: a token already verified.
func BenchmarkVerifyCached(b *testing.B) {
	clk := clocktest.New(time.Now())
	s := service(&testing.T{}, clk)
	v := oauth.NewVerifier(s, 0)
	r, _ := s.Token(context.Background(), oauth.ClientRequest{Form: form("grant_type", "client_credentials", "client_id", "a", "client_secret", "secret-of-client-a")})
	h := "Bearer " + r.AccessToken
	req := oauth.Requirement{Scope: "notification.mp"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, e := v.Verify(h, req); e != nil {
				b.Fatal(e)
			}
		}
	})
}

func TestValidateAuthRequest(t *testing.T) {
	clients := oauth.NewClients([]oauth.Registration{
		{ID: "portal", Grants: []string{"authorization_code"}, Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{"https://app/cb"}},
		{ID: "service", Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}, RedirectURIs: []string{"https://app/cb"}},
	}, time.Hour)
	good := "client_id=portal&redirect_uri=https%3A%2F%2Fapp%2Fcb&response_type=code&state=s&scope=openid+notification.mp+openid"
	challenge := strings.Repeat("a", 43)
	tests := []struct {
		name, query string
		idps        []string
		code        string // "" for valid
		redirect    bool
		mode, state string // as settled for the answer
	}{
		{"valid", good, nil, "", false, "", "s"},
		{"client_id twice", good + "&client_id=portal", nil, "invalid_request", false, "", "s"},
		{"unknown client", strings.Replace(good, "portal", "nobody", 1), nil, "invalid_client", false, "", "s"},
		{"redirect_uri not registered", strings.Replace(good, "app%2Fcb", "evil%2Fcb", 1), nil, "invalid_redirect_uri", false, "", "s"},
		{"redirect_uri missing", "client_id=portal&response_type=code", nil, "invalid_redirect_uri", false, "", ""},
		{"response_mode unknown", good + "&response_mode=web_message", nil, "invalid_request", true, "query", "s"},
		{"state too long", strings.Replace(good, "state=s", "state="+strings.Repeat("s", 2049), 1), nil, "invalid_request", true, "", ""},
		{"state twice", good + "&state=t", nil, "invalid_request", true, "", ""},
		{"a parameter twice", good + "&nonce=a&nonce=b", nil, "invalid_request", true, "", "s"},
		{"request object", good + "&request=x.y.z", nil, "request_not_supported", true, "", "s"},
		{"request_uri", good + "&request_uri=https%3A%2F%2Fx", nil, "request_uri_not_supported", true, "", "s"},
		{"no identity provider", good, []string{}, "temporarily_unavailable", true, "", "s"},
		{"response_type token", strings.Replace(good, "response_type=code", "response_type=token", 1), nil, "unsupported_response_type", true, "", "s"},
		{"client without the grant", strings.Replace(good, "portal", "service", 1), nil, "unauthorized_client", true, "", "s"},
		{"scope not the client's", good + "+fake_api", nil, "invalid_scope", true, "", "s"},
		{"standard scopes", good + "+profile+email", nil, "", false, "", "s"},
		{"nonce too long", good + "&nonce=" + strings.Repeat("n", 513), nil, "invalid_request", true, "", "s"},
		{"PKCE plain", good + "&code_challenge=" + challenge + "&code_challenge_method=plain", nil, "invalid_request", true, "", "s"},
		{"PKCE short", good + "&code_challenge=abc&code_challenge_method=S256", nil, "invalid_request", true, "", "s"},
		{"PKCE bad character", good + "&code_challenge=" + challenge + "%2B&code_challenge_method=S256", nil, "invalid_request", true, "", "s"},
		{"PKCE", good + "&code_challenge=" + challenge + "&code_challenge_method=S256", nil, "", false, "", "s"},
		{"identity provider not offered: only a hint", good + "&kc_idp_hint=cas", nil, "", false, "", "s"},
		{"prompt none with login", good + "&prompt=none+login", nil, "invalid_request", true, "", "s"},
		{"max_age negative", good + "&max_age=-1", nil, "invalid_request", true, "", "s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			idps := tt.idps
			if idps == nil {
				idps = []string{"local"}
			}
			ar := oauth.ParseAuthRequest(q)
			c, e := oauth.ValidateAuthRequest(&ar, clients, idps, "local")
			if tt.code == "" {
				if e != nil || c == nil || c.ID != ar.ClientID {
					t.Fatalf("refused: %v", e)
				}
				return
			}
			if e == nil || e.Code != tt.code || e.Redirect != tt.redirect || ar.ResponseMode != tt.mode || ar.State != tt.state {
				t.Fatalf("got %+v (mode %q, state %q), want %s redirect=%v mode %q state %q", e, ar.ResponseMode, ar.State, tt.code, tt.redirect, tt.mode, tt.state)
			}
			if e.Redirect && e.Status != http.StatusBadRequest {
				t.Fatalf("status %d", e.Status)
			}
		})
	}

	// A valid request is settled: scope sorted without repeats, the default provider, prompt.
	q, _ := url.ParseQuery(good + "&prompt=select_account&max_age=60")
	ar := oauth.ParseAuthRequest(q)
	if _, e := oauth.ValidateAuthRequest(&ar, clients, []string{"local", "cas"}, "cas"); e != nil {
		t.Fatal(e)
	}
	if ar.Scope != "notification.mp openid" || ar.IDP != "cas" || ar.Prompt != "login" || ar.MaxAge != 60 {
		t.Fatalf("settled: %+v", ar)
	}
	// kc_idp_hint naming no provider on offer is only a hint, as in Keycloak: the default one.
	for _, hint := range []string{"campus-sso", "CAS", "local"} {
		q, _ := url.ParseQuery(good + "&kc_idp_hint=" + hint)
		ar := oauth.ParseAuthRequest(q)
		if _, e := oauth.ValidateAuthRequest(&ar, clients, []string{"cas"}, "cas"); e != nil || ar.IDP != "cas" {
			t.Errorf("kc_idp_hint=%s: provider %q, %v; want the default, cas", hint, ar.IDP, e)
		}
	}
	at := time.Unix(1_800_000_000, 0)
	if !ar.SignInFresh(at, at.Add(60*time.Second)) || ar.SignInFresh(at, at.Add(61*time.Second)) {
		t.Fatal("max_age 60 s")
	}
}

func TestErrorKeepsItsCauseFromTheClient(t *testing.T) {
	cause := errors.New("store: connection refused to 10.0.0.5")
	e := &oauth.Error{Code: oauth.ErrServerError, Description: "the token could not be issued", Status: 500, Cause: cause}
	if !errors.Is(e, cause) || !strings.Contains(e.Error(), "connection refused") {
		t.Fatalf("the cause is lost: %v", e)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"error":"server_error","error_description":"the token could not be issued"}` {
		t.Fatalf("the client reads %s", b)
	}
}

func TestConsentNeeded(t *testing.T) {
	clients := oauth.NewClients([]oauth.Registration{
		{ID: "portal", Scopes: []string{"openid", "notification.mp"}},
		{ID: "trusted", Scopes: []string{"openid", "notification.mp"}, SkipConsent: true},
	}, time.Hour)
	portal, _ := clients.Lookup("portal")
	trusted, _ := clients.Lookup("trusted")
	tests := []struct {
		name    string
		c       *oauth.Client
		scope   string
		prompt  string
		granted []string
		want    bool
	}{
		{"not granted yet", portal, "openid notification.mp", "", nil, true},
		{"granted before", portal, "openid notification.mp", "", []string{"notification.mp"}, false},
		{"prompt=consent asks again", portal, "openid notification.mp", "consent", []string{"notification.mp"}, true},
		{"only openid and standard scopes", portal, "openid profile email", "consent", nil, false},
		{"client skips consent", trusted, "openid notification.mp", "consent", nil, false},
	}
	for _, tt := range tests {
		if got := oauth.ConsentNeeded(tt.c, tt.scope, tt.prompt, tt.granted); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestParseLogout checks a logout request's parameters without a session: where it may return,
// and whether the user confirms. (Hints of real ID tokens are tried through the front end.)
func TestParseLogout(t *testing.T) {
	s := service(t, clocktest.New(time.Now()))
	s.Clients = oauth.NewClients([]oauth.Registration{
		{ID: "portal", Grants: []string{"authorization_code"}, Scopes: []string{"openid"}, PostLogoutRedirectURIs: []string{"https://app/bye"}},
		{ID: "other", Grants: []string{"authorization_code"}, Scopes: []string{"openid"}, PostLogoutRedirectURIs: []string{"https://other/bye"}},
	}, time.Hour)
	tests := []struct {
		name, query string
		code        string // "" for valid
		target      string
		confirm     bool
	}{
		{"nothing: the signed-out page, confirmed", "", "", "", true},
		{"post_logout_redirect_uri with client_id", "post_logout_redirect_uri=https%3A%2F%2Fapp%2Fbye&client_id=portal&state=s", "", "https://app/bye", true},
		{"post_logout_redirect_uri alone", "post_logout_redirect_uri=https%3A%2F%2Fapp%2Fbye", "invalid_request", "", false},
		{"another client's address", "post_logout_redirect_uri=https%3A%2F%2Fother%2Fbye&client_id=portal", "invalid_redirect_uri", "", false},
		{"unregistered address", "post_logout_redirect_uri=https%3A%2F%2Fevil%2Fbye&client_id=portal", "invalid_redirect_uri", "", false},
		{"the interface's redirect_uri, registered for some client", "redirect_uri=https%3A%2F%2Fother%2Fbye", "", "https://other/bye", false},
		{"redirect_uri not registered", "redirect_uri=https%3A%2F%2Fevil%2Fbye", "invalid_redirect_uri", "", false},
		{"a parameter twice", "client_id=portal&client_id=other", "invalid_request", "", false},
		{"a hint that is no ID token of this server", "id_token_hint=a.b.c", "invalid_request", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			lr, e := s.ParseLogout(q)
			switch {
			case tt.code != "":
				if e == nil || e.Code != tt.code {
					t.Fatalf("error %v, want %s", e, tt.code)
				}
			case e != nil:
				t.Fatalf("refused: %v", e)
			case lr.Target != tt.target || lr.Confirm != tt.confirm || lr.State != q.Get("state"):
				t.Fatalf("got %+v, want target %q, confirm %v", lr, tt.target, tt.confirm)
			}
		})
	}
}
