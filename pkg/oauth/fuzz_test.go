package oauth_test

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/oauth"
)

// FuzzTokenRequest feeds the token endpoint's form and HTTP Basic credentials (the store is a
// real one, so the code and refresh grants run their lookups). Nothing panics; a token is
// issued only to a client that gave its own secret; a refusal is an OAuth error with its
// status, and never quotes the secret that was tried.
func FuzzTokenRequest(f *testing.F) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	svc := service(f, clk)
	st := embeddedtest.Store(f, clk.Now)
	svc.Store = st
	secrets := map[string]string{"a": "secret-of-client-a", "long": "secret"}
	for _, seed := range []struct {
		form       string
		id, secret string
		basic      bool
	}{
		{"grant_type=client_credentials&client_id=a&client_secret=secret-of-client-a", "", "", false},
		{"grant_type=client_credentials&scope=fake_api+openid", "a", "secret-of-client-a", true},
		{"grant_type=client_credentials&client_id=a&client_secret=wrong-secret-0001", "", "", false},
		{"grant_type=authorization_code&code=abc&redirect_uri=https%3A%2F%2Fapp%2Fcb&code_verifier=x", "a", "secret-of-client-a", true},
		{"grant_type=refresh_token&refresh_token=r&scope=openid", "a", "secret-of-client-a", true},
		{"grant_type=client_credentials&grant_type=client_credentials", "a%ZZ", "s", true},
		{"grant_type=password&username=u&password=p", "", "", false},
		{"%zz;&=", "", "", false},
	} {
		f.Add(seed.form, seed.id, seed.secret, seed.basic)
	}
	f.Fuzz(func(t *testing.T, raw, basicID, basicSecret string, basic bool) {
		form, _ := url.ParseQuery(raw)
		resp, e := svc.Token(context.Background(), oauth.ClientRequest{Form: form, BasicID: basicID, BasicSecret: basicSecret, Basic: basic, Addr: "192.0.2.1"})
		id, secret := form.Get("client_id"), form.Get("client_secret")
		if basic {
			id, _ = url.QueryUnescape(basicID)
			secret, _ = url.QueryUnescape(basicSecret)
		}
		if e == nil {
			if resp == nil || resp.AccessToken == "" || secrets[id] == "" || secrets[id] != secret {
				t.Fatalf("token issued to %q with secret %q: %+v", id, secret, resp)
			}
			return
		}
		if resp != nil {
			t.Fatalf("an answer and an error: %+v %v", resp, e)
		}
		if e.Code == "" || (e.Status != 0 && (e.Status < 400 || e.Status > 599)) {
			t.Fatalf("error %+v", e)
		}
		b, _ := json.Marshal(e)
		if len(secret) >= 8 && strings.Contains(string(b), secret) {
			t.Fatalf("the error %s quotes the secret %q", b, secret)
		}
	})
}

// FuzzAuthorizeRequest feeds the authorization endpoint's parameters. Nothing panics; an error
// sent back to the client goes only to a redirect_uri registered for it (otherwise the user is
// shown it); an accepted request is for a registered client and redirect_uri, with response
// type code, a known response mode and bounded state and nonce, and the client's scopes only.
func FuzzAuthorizeRequest(f *testing.F) {
	clients := oauth.NewClients([]oauth.Registration{
		{ID: "portal", Grants: []string{"authorization_code"}, Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{"https://app/cb", "http://127.0.0.1:8081/callback"}},
		{ID: "service", Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}, RedirectURIs: []string{"https://app/cb"}},
	}, time.Hour)
	good := "client_id=portal&redirect_uri=https%3A%2F%2Fapp%2Fcb&response_type=code&state=s&scope=openid+notification.mp&kc_idp_hint=cas"
	for _, seed := range []string{
		good,
		good + "&code_challenge=" + strings.Repeat("a", 43) + "&code_challenge_method=S256&nonce=n&response_mode=form_post",
		good + "&prompt=none&max_age=0&id_token_hint=e30.e30.e30",
		good + "&request=x.y.z&response_mode=web_message",
		good + "&client_id=service",
		"client_id=portal&redirect_uri=https%3A%2F%2Fevil%2Fcb&response_type=token",
		"redirect_uri=https%3A%2F%2Fapp%2Fcb&state=" + strings.Repeat("s", 3000),
		"%zz",
	} {
		f.Add(seed)
	}
	registered := func(c *oauth.Client, uri string) bool { return c != nil && slices.Contains(c.RedirectURIs, uri) }
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw)
		ar := oauth.ParseAuthRequest(q)
		c, e := oauth.ValidateAuthRequest(&ar, clients, []string{"cas", "local"}, "cas")
		if e != nil {
			if e.Redirect && !registered(c, ar.RedirectURI) {
				t.Fatalf("error %q redirected to %q, not registered for %v", e.Code, ar.RedirectURI, c)
			}
			return
		}
		if !registered(c, ar.RedirectURI) || c.ID != ar.ClientID || ar.ResponseType != "code" {
			t.Fatalf("accepted %+v for %v", ar, c)
		}
		if !slices.Contains([]string{"", "query", "fragment", "form_post"}, ar.ResponseMode) || len(ar.State) > 2048 || len(ar.Nonce) > 512 {
			t.Fatalf("accepted %+v", ar)
		}
		for _, sc := range strings.Fields(ar.Scope) {
			if !slices.Contains(c.Scopes, sc) && !slices.Contains(oauth.StandardScopes, sc) {
				t.Fatalf("scope %q granted to %s", sc, c.ID)
			}
		}
	})
}
