package server_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestAuthorizationWithoutScopeGetsTheClientsScopes: the interface lists scope as optional in
// the authorization request (section 2, "scope | no"), takes tokens of the authorization code
// grant at the push interface (section 6), and answers the code exchange with an ID token
// (section 3). A request without scope gets every scope the client is registered for, as
// Keycloak applies a client's default scopes (RFC 6749 §3.3's pre-defined default): the
// consent step asks for them, and the token pushes and carries an ID token.
func TestAuthorizationWithoutScopeGetsTheClientsScopes(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	// Only the parameters the interface marks required, and the recommended state.
	v := url.Values{"client_id": {"portal"}, "response_type": {"code"}, "redirect_uri": {rpRedirect},
		"kc_idp_hint": {"local"}, "state": {"s1"}}
	p := get(t, b, e.issuer+"/protocol/openid-connect/auth?"+v.Encode())
	p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("no consent step for the client's interface scope: %d %.300s", p.status, p.body)
	}
	p = submit(t, b, p, url.Values{"accept": {"yes"}})
	q := callback(t, p)
	if q.Get("error") != "" || q.Get("state") != "s1" {
		t.Fatalf("authorization without scope: %v", q)
	}
	// The exchange exactly as the interface shows it: POST {base_url}/v1/token, credentials in the form.
	f := url.Values{"grant_type": {"authorization_code"}, "client_id": {"portal"}, "client_secret": {rpSecret},
		"code": {q.Get("code")}, "redirect_uri": {rpRedirect}}
	req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/token", strings.NewReader(f.Encode()))
	req.Header.Set("Content-Type", form)
	st, _, tok := sendReq(t, req)
	if st != 200 {
		t.Fatalf("exchange: %d %v", st, tok)
	}
	var registered []string
	for _, c := range e.cfg.OAuth.Clients {
		if c.ClientID == "portal" {
			registered = slices.Sorted(slices.Values(c.Scopes))
		}
	}
	scope, _ := tok["scope"].(string)
	if got := slices.Sorted(strings.FieldsSeq(scope)); !slices.Equal(got, registered) || !slices.Contains(got, "openid") {
		t.Errorf("scope %q, want the client's registered scopes %v", scope, registered)
	}
	if tok["id_token"] == nil {
		t.Errorf("no ID token: %v", tok)
	}
	if code, www := pushAs(t, e.base, tok["access_token"].(string)); code != 200 {
		t.Errorf("the push interface refuses the token: %d %s", code, www)
	}
}
