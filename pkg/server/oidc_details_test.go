package server_test

// The OAuth 2.0 / OpenID Connect protocol in the details a standards-following relying party or
// an attacker relies on.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

func s256Challenge(v string) string {
	s := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(s[:])
}

// jwtClaims decodes a JWT's payload without checking it (the tests check claims only).
func jwtClaims(t *testing.T, jwt string) map[string]any {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", jwt)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// casSignIn signs user 2020000042 in to the client trusted through the campus sign-on, typing
// the password there, in browser b, and returns the tokens of the code.
func (e *signInEnv) casSignIn(t *testing.T, b *http.Client, state string) map[string]any {
	t.Helper()
	casForm := get(t, b, e.authURL("trusted", state, "kc_idp_hint", "cas"))
	if !strings.HasPrefix(casForm.url.String(), e.cas.URL()+"/login") {
		t.Fatalf("not sent to the campus sign-on: %s", casForm.url)
	}
	q := callback(t, submit(t, b, casForm, url.Values{"username": {"2020000042"}, "password": {"cas-password"}}))
	tok, errc := e.exchange(t, "trusted", q.Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}
	return tok
}

// TestCASSingleSignOnKeepsAuthTime: a sign-in that the campus sign-on answered from its
// single sign-on (no password typed: isFromNewLogin=false, authenticationDate in the past)
// keeps the time of that authentication: the ID token's auth_time says it (OpenID Connect
// Core §2: "Time when the End-User authentication occurred"), and a later request with a
// max_age it does not meet sends the user to authenticate again (Core §3.1.2.1).
func TestCASSingleSignOnKeepsAuthTime(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)

	// 1. The user types the password at the campus sign-on, at t0.
	first := e.casSignIn(t, b, "s1")
	t0 := int64(jwtClaims(t, first["id_token"].(string))["auth_time"].(float64))

	// 2. The application's back end signs the user out of this service (the browser goes
	// nowhere, as Keycloak's logout by refresh token): the campus sign-on's own session (its
	// ticket-granting cookie) stays.
	if st, m := e.postForm(t, "/logout", "trusted", url.Values{"refresh_token": {first["refresh_token"].(string)}}); st != http.StatusNoContent {
		t.Fatalf("logout: %d %v", st, m)
	}

	// 3. Two hours later the application signs the user in again. The campus sign-on answers
	// from its single sign-on: no password is typed.
	e.clock.Advance(2 * time.Hour)
	logins := e.cas.Logins()
	q := callback(t, get(t, b, e.authURL("trusted", "s2", "kc_idp_hint", "cas")))
	if e.cas.Logins() != logins {
		t.Fatalf("the campus sign-on asked for the password again")
	}
	second, errc := e.exchange(t, "trusted", q.Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}
	at := int64(jwtClaims(t, second["id_token"].(string))["auth_time"].(float64))
	if at != t0 {
		t.Errorf("auth_time after a single sign-on answer of the campus sign-on: got %d (t0+%ds, the time of the "+
			"callback), want %d (t0, when the user last authenticated; CAS said isFromNewLogin=false with its "+
			"authenticationDate)", at, at-t0, t0)
	}

	// 4. Now the application asks for an authentication no older than 60 s. The user last
	// typed a password two hours ago: the OP must re-authenticate (send to CAS with renew).
	p := get(t, b, e.authURL("trusted", "s3", "kc_idp_hint", "cas", "max_age", "60"))
	if p.location != "" && strings.HasPrefix(p.location, rpRedirect) {
		q, _ := url.ParseQuery(strings.SplitN(p.location, "?", 2)[1])
		t.Errorf("max_age=60, last authentication 7200 s ago: got a code back at once (code present: %v), "+
			"want the campus sign-on's login form (renew=true)", q.Get("code") != "")
	}
}

// TestPKCEVerifierFormat: RFC 7636 §4.1 defines code_verifier as 43 to 128 characters
// of [A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~" (high entropy is what makes the code
// useless to someone who intercepts it, §7.1). Keycloak refuses any other verifier with
// invalid_grant "PKCE invalid code verifier" before comparing it (its PKCE tests A-1-11:
// a 129-character verifier with a matching S256 challenge is refused): one character, 129
// characters, spaces and non-ASCII are refused even when their SHA-256 matches.
func TestPKCEVerifierFormat(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	for name, v := range map[string]string{
		"1 character":         "a",
		"42 characters":       strings.Repeat("A", 42),
		"129 characters":      strings.Repeat("A", 129),
		"space and non-ASCII": strings.Repeat("x", 40) + " é",
	} {
		code := e.signInCode(t, b, "trusted", "code_challenge", s256Challenge(v), "code_challenge_method", "S256")
		tok, errc := e.exchange(t, "trusted", code, "code_verifier", v)
		if errc != "invalid_grant" {
			t.Errorf("code_verifier of %s (S256 challenge matching): got error %q (tokens issued: %v), want invalid_grant",
				name, errc, tok != nil)
		}
	}
}

// TestMissingResponseType: an authorization request without response_type (a required
// parameter, RFC 6749 §4.1.1) is a malformed request: invalid_request (RFC 6749 §4.1.2.1).
// unsupported_response_type is for a response_type the server does not support. Keycloak
// answers invalid_request "Missing parameter: response_type" (AuthorizationEndpointTest).
func TestMissingResponseType(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	u, _ := url.Parse(e.authURL("portal", "st1"))
	q := u.Query()
	q.Del("response_type")
	u.RawQuery = q.Encode()
	back := callback(t, get(t, b, u.String()))
	if back.Get("error") != "invalid_request" || back.Get("state") != "st1" {
		t.Errorf("authorization request without response_type: got error=%q state=%q, want error=invalid_request state=st1",
			back.Get("error"), back.Get("state"))
	}
}

// TestRevokeInvalidTokenIsNotAnError: RFC 7009 §2.2: "invalid tokens do not cause an
// error response since the client cannot handle such an error in a reasonable way. Moreover,
// the purpose of the revocation request, invalidating the particular token, is already
// achieved." A value that is no token of this server (a forged JWT, another issuer's token)
// gets 200 like any other unknown token.
func TestRevokeInvalidTokenIsNotAnError(t *testing.T) {
	e := newSignInEnv(t)
	for name, tok := range map[string]string{
		"a forged JWT":                        "e30.e30.e30",
		"garbage with two dots":               "not.a.token",
		"an unknown refresh-token-like value": "unknown-refresh-token", // the control: 200 today
	} {
		st, m := e.postForm(t, "/revoke", "portal", url.Values{"token": {tok}})
		if st != 200 {
			t.Errorf("revoking %s: got %d %v, want 200 (RFC 7009 §2.2)", name, st, m)
		}
	}
}

// TestDiscoveryListsUserinfoClaims: OpenID Connect Discovery 1.0 §3 claims_supported is
// "a list of the Claim Names of the Claims that the OpenID Provider MAY be able to supply values
// for": every claim the UserInfo endpoint answers is listed.
func TestDiscoveryListsUserinfoClaims(t *testing.T) {
	e := newSignInEnv(t)
	tok := e.userTokens(t, "portal")
	st, info := e.post(t, "/userinfo", "Bearer "+tok["access_token"].(string), url.Values{})
	if st != 200 {
		t.Fatalf("userinfo: %d %v", st, info)
	}
	resp, err := http.Get(e.issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Claims []string `json:"claims_supported"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&d)
	for claim := range info {
		if !slices.Contains(d.Claims, claim) {
			t.Errorf("userinfo supplies claim %q, which claims_supported %v does not list", claim, d.Claims)
		}
	}
}

// TestRefreshDropsRemovedScope: an operator takes a scope away from a client (its entry
// in the configuration changes; every front end loads it). The next refresh drops it, as
// Keycloak does: it recomputes the scopes of a refreshed token from the client's scopes of the moment
// (TokenManager.validateToken: DefaultClientSessionContext.fromClientSessionAndScopeParameter
// keeps only the client scopes still assigned to the client), so a removed scope is gone from
// the next refresh; RFC 6749 §6: the refreshed scope must not exceed what the client may be
// granted.
func TestRefreshDropsRemovedScope(t *testing.T) {
	e := newSignInEnv(t)
	tok := e.userTokens(t, "portal")
	// The operator removes notification.mp from portal.
	clients := slices.Clone(e.cfg.OAuth.Clients)
	for i := range clients {
		if clients[i].ClientID == "portal" {
			clients[i].Scopes = []string{"openid"}
		}
	}
	issuer := e.replica(t, clients)
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)}}
	status, m := postAs(t, issuer, "/token", "portal", form)
	if status != http.StatusOK {
		t.Fatalf("refresh after a scope was removed: %d %v, want the tokens without that scope", status, m)
	}
	access, _ := m["access_token"].(string)
	if sc, _ := jwtClaims(t, access)["scope"].(string); slices.Contains(strings.Fields(sc), "notification.mp") {
		t.Errorf("refresh after notification.mp was removed from the client: access token scope %q (answer scope %v), "+
			"want notification.mp gone", sc, m["scope"])
	}
}
