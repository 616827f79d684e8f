package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// adminStore opens the sign-in env's store, as the admin commands would.
func adminStore(t *testing.T, e *signInEnv) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URI: e.cfg.MongoDB.URI, Database: e.cfg.MongoDB.Database, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRefreshTokenEndsWithClientDisable: the tokens a client had when it was disabled stay
// refused once it is enabled again: its access tokens, and its refresh tokens, which neither
// refresh nor introspect as active.
func TestRefreshTokenEndsWithClientDisable(t *testing.T) {
	e := newSignInEnv(t)
	tok := e.userTokens(t, "portal")
	access, rt := tok["access_token"].(string), tok["refresh_token"].(string)
	if st := userinfo(t, e.issuer, access); st != 200 {
		t.Fatalf("userinfo before: %d", st)
	}
	e.clock.Advance(2 * time.Second)

	st := adminStore(t, e)
	ctx := context.Background()
	yes, no := true, false
	if _, err := st.UpdateClient(ctx, "portal", store.ClientChange{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	if _, err := st.UpdateClient(ctx, "portal", store.ClientChange{Disabled: &no}); err != nil {
		t.Fatal(err)
	}
	// A front end that reads the registry now (as every one does every ClientsReload).
	r := *e
	r.issuer = e.replica(t, e.cfg.OAuth.Clients)
	issuer := r.issuer
	post := func(path string, form url.Values) (int, map[string]any) { return r.postForm(t, path, "portal", form) }
	// The fix for old access tokens holds:
	if st := userinfo(t, issuer, access); st != http.StatusUnauthorized {
		t.Fatalf("the access token from before the disable: userinfo %d, want 401", st)
	}
	if code, m := post("/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"no-such-token"}}); code != 400 || m["error"] != "invalid_grant" {
		t.Fatalf("the enabled client does not authenticate: %d %v", code, m)
	}
	if _, intro := post("/token/introspect", url.Values{"token": {rt}}); intro["active"] != false {
		t.Errorf("introspection of a refresh token from before the disable: %v", intro)
	}
	if code, got := post("/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}); code != 400 || got["error"] != "invalid_grant" {
		t.Fatalf("a refresh token issued before the client was disabled, after it was enabled again: %d %v", code, got)
	}
}

// TestTokenOfAReplicaAhead: iat is written in whole seconds, and a token issued by one front end
// in the first milliseconds of a second is taken by another whose clock is those milliseconds
// behind (20 ms here, well within what NTP keeps replicas to).
func TestTokenOfAReplicaAhead(t *testing.T) {
	e := newSignInEnv(t)
	// Replica B, same NATS and store, its clock 20 ms behind replica A's.
	cfg := *e.cfg
	api, err := service.NewAPI(context.Background(), &cfg, service.Deps{Now: func() time.Time { return e.clock.Now().Add(-20 * time.Millisecond) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	b := httptest.NewServer(api.Server)
	t.Cleanup(b.Close)

	// Replica A issues a token 10 ms into a second.
	e.clock.Advance(10 * time.Millisecond)
	tok, errc := e.tokenGrant(t, "gateway", url.Values{"grant_type": {"client_credentials"}})
	if errc != "" {
		t.Fatal(errc)
	}
	req, _ := http.NewRequest(http.MethodGet, b.URL+"/v1/infra/notification/mp/01J0000000000000000000000", nil)
	req.Header.Set("Authorization", "Bearer "+tok["access_token"].(string))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		t.Fatalf("a fresh token of replica A is refused by replica B (20 ms behind): %d %s",
			resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}

// TestJWKSRevalidated: the JWKS is served to be revalidated at each use, as Keycloak's certs
// endpoint is: a key that begins to sign after a rotation is never missing from a copy a cache
// takes for fresh.
func TestJWKSRevalidated(t *testing.T) {
	e := newSignInEnv(t)
	resp, err := http.Get(e.issuer + "/protocol/openid-connect/certs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cc := resp.Header.Get("Cache-Control"); resp.StatusCode != http.StatusOK || cc != "no-cache" {
		t.Fatalf("certs: %d, Cache-Control %q", resp.StatusCode, cc)
	}
}

// TestAccessTokenOfTheSecondOfADisableStaysRefused: an operator disables a client (a leaked
// secret, say) and enables it again later. Its tokens from before the disable stay refused,
// an access token issued in the same second as the disable, before it, too.
func TestAccessTokenOfTheSecondOfADisableStaysRefused(t *testing.T) {
	e := newSignInEnv(t)
	// 100 ms into a second.
	now := e.clock.Now()
	e.clock.Advance(now.Truncate(time.Second).Add(time.Second + 100*time.Millisecond).Sub(now))
	tok := e.userTokens(t, "portal")
	access, rt := tok["access_token"].(string), tok["refresh_token"].(string)
	if st := userinfo(t, e.issuer, access); st != http.StatusOK {
		t.Fatalf("userinfo before: %d", st)
	}
	issued := e.clock.Now()
	// 300 ms later, in the same second, the operator disables the client.
	e.clock.Advance(300 * time.Millisecond)
	if e.clock.Now().Unix() != issued.Unix() {
		t.Fatalf("the disable is not in the second of the token: %s vs %s", e.clock.Now(), issued)
	}
	st := adminStore(t, e)
	defer func() { _ = st.Close(context.Background()) }()
	ctx := context.Background()
	yes, no := true, false
	if _, err := st.UpdateClient(ctx, "portal", store.ClientChange{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	if _, err := st.UpdateClient(ctx, "portal", store.ClientChange{Disabled: &no}); err != nil {
		t.Fatal(err)
	}
	r := *e
	r.issuer = e.replica(t, e.cfg.OAuth.Clients)
	code, got := r.postForm(t, "/token", "portal", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
	stAccess := userinfo(t, r.issuer, access)
	_, intro := r.postForm(t, "/token/introspect", "portal", url.Values{"token": {access}})
	if stAccess != http.StatusUnauthorized || intro["active"] != false {
		t.Fatalf("an access token issued 300 ms before the client was disabled, after it was enabled again: "+
			"userinfo %d, introspection active=%v (its refresh token: %d %v)", stAccess, intro["active"], code, got["error"])
	}
}

// TestTokenIssuedWhileDisabledStaysRefusedAfterEnable: an operator disables a client
// (a leaked secret). A front end that has not yet read the registry again (it does every 3 s)
// still issues the client tokens; they are refused once it has, and stay refused when the
// operator enables the client again.
func TestTokenIssuedWhileDisabledStaysRefusedAfterEnable(t *testing.T) {
	e := newSignInEnv(t)
	st := adminStore(t, e)
	defer func() { _ = st.Close(context.Background()) }()
	ctx := context.Background()
	yes, no := true, false

	e.clock.Advance(time.Second)
	// api admin clients disable gateway
	if _, err := st.UpdateClient(ctx, "gateway", store.ClientChange{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	// 200 ms later, at a front end that has not yet read the registry again (e's, which reads it
	// only at its start in these tests; every 3 s in service), the client gets a token.
	e.clock.Advance(200 * time.Millisecond)
	tok, errc := e.tokenGrant(t, "gateway", url.Values{"grant_type": {"client_credentials"}})
	if errc != "" {
		t.Fatalf("the front end that has not read the disable refused the grant: %s", errc)
	}
	access := tok["access_token"].(string)
	// A front end that has read the disable refuses the token.
	disabledView := e.replica(t, e.cfg.OAuth.Clients)
	if _, m := postAs(t, disabledView, "/token/introspect", "portal", url.Values{"token": {access}}); m["active"] != false {
		t.Fatalf("the token issued after the disable is active while the client is disabled: %v", m)
	}
	// Ten minutes later the operator enables the client again (its secret rotated, say).
	e.clock.Advance(10 * time.Minute)
	if _, err := st.UpdateClient(ctx, "gateway", store.ClientChange{Disabled: &no}); err != nil {
		t.Fatal(err)
	}
	r := e.replica(t, e.cfg.OAuth.Clients)
	if _, m := postAs(t, r, "/token/introspect", "gateway", url.Values{"token": {access}}); m["active"] != false {
		t.Fatalf("a token issued 200 ms after the client was disabled (by a front end that had not yet read the disable) "+
			"is active again once the client is enabled: introspection %v", m)
	}
}

// TestTokenAfterEnableOnAReplicaBehind: an operator enables a client again with the admin
// tool on a host whose clock is 10 s ahead of a front end's. A token the front end issues after
// it has read the enable is accepted: tokens_not_before is then 18 s after the disable, not the
// admin tool's time of the enable.
func TestTokenAfterEnableOnAReplicaBehind(t *testing.T) {
	e := newSignInEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := aheadAdminStore(t, e, 10*time.Second)
	yes, no := true, false
	if _, err := admin.UpdateClient(ctx, "gateway", store.ClientChange{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(10 * time.Minute)
	if _, err := admin.UpdateClient(ctx, "gateway", store.ClientChange{Disabled: &no}); err != nil {
		t.Fatal(err)
	}
	// Three seconds later (ClientsReload) a front end that has read the enable issues a token.
	e.clock.Advance(3 * time.Second)
	r := e.replica(t, e.cfg.OAuth.Clients)
	code, tok := postAs(t, r, "/token", "gateway", url.Values{"grant_type": {"client_credentials"}})
	access, _ := tok["access_token"].(string)
	if code != http.StatusOK || access == "" {
		t.Fatalf("client_credentials after the enable: %d %v", code, tok)
	}
	// One more second: the token is used, on the same front end.
	e.clock.Advance(time.Second)
	if _, m := postAs(t, r, "/token/introspect", "gateway", url.Values{"token": {access}}); m["active"] != true {
		t.Fatalf("a token issued 3 s after the client was enabled again, by a front end whose clock is 10 s behind the admin tool's "+
			"(within the 15 s the deployment allows), is refused by the service that issued it: introspection %v", m)
	}
}

// TestNewClientOnAReplicaBehind: an operator registers a client with the admin tool on a host
// whose clock is 10 s ahead of a front end's. What the front end issues to it once it has read
// the registration (a client credentials token, a code, the tokens of the code and of a
// refresh) is accepted, though the front end's clock is still before the registration's time
// (tokens_not_before): it is newer than the registration, which the front end has read.
func TestNewClientOnAReplicaBehind(t *testing.T) {
	e := newSignInEnv(t)
	// The front end's clock is 7 s before the registration's.
	r := e.surveyRegisteredAhead(t, 10*time.Second, "client_credentials", "authorization_code", "refresh_token")
	code, tok := postAs(t, r.issuer, "/token", "survey", url.Values{"grant_type": {"client_credentials"}})
	access, _ := tok["access_token"].(string)
	if code != http.StatusOK || access == "" {
		t.Fatalf("client_credentials of the new client: %d %v", code, tok)
	}
	b := browser(t)
	user, errc := r.exchange(t, "survey", r.signInCode(t, b, "survey"))
	if errc != "" {
		t.Fatalf("the new client's code, issued and exchanged by a front end behind the registration's clock: %s", errc)
	}
	e.clock.Advance(time.Second)
	if _, m := postAs(t, r.issuer, "/token/introspect", "survey", url.Values{"token": {access}}); m["active"] != true {
		t.Fatalf("a token the front end issued to a client it had read is refused by it: introspection %v", m)
	}
	if st := userinfo(t, r.issuer, user["access_token"].(string)); st != http.StatusOK {
		t.Fatalf("the user's access token of the new client: userinfo %d", st)
	}
	if _, errc := r.refresh(t, "survey", user["refresh_token"].(string)); errc != "" {
		t.Fatalf("the user's refresh token of the new client: %s", errc)
	}
}

// TestRevocationCoversTokensStampedAhead: a user signs in to a client the admin tool
// registered on a host whose clock is 10 s ahead: the front end stamps its tokens with the
// client's tokens_not_before, ahead of its own clock. When the user then removes the
// application on the account page, the revocation covers those tokens all the same.
func TestRevocationCoversTokensStampedAhead(t *testing.T) {
	e := newSignInEnv(t)
	r := e.surveyRegisteredAhead(t, 10*time.Second, "authorization_code", "refresh_token")
	b := browser(t)
	tok, errc := r.exchange(t, "survey", r.signInCode(t, b, "survey"))
	if errc != "" {
		t.Fatalf("exchange: %s", errc)
	}
	e.clock.Advance(time.Second)
	r.revokeOnAccountPage(t, b, "survey")
	e.clock.Advance(time.Second)
	st := userinfo(t, r.issuer, tok["access_token"].(string))
	_, m := postAs(t, r.issuer, "/token/introspect", "survey", url.Values{"token": {tok["access_token"].(string)}})
	_, again := r.refresh(t, "survey", tok["refresh_token"].(string))
	if st != http.StatusUnauthorized || again != "invalid_grant" || m["active"] != false {
		t.Fatalf("the user removed survey's access; its tokens stamped ahead of the front end's clock still work: "+
			"userinfo %d (want 401), introspection active %v (want false), refresh %q (want invalid_grant)", st, m["active"], again)
	}
}

// replicaAhead starts another front end on the same NATS and store, its clock ahead of the
// env's by ahead.
func (e *signInEnv) replicaAhead(t *testing.T, ahead time.Duration) string {
	t.Helper()
	return e.replicaAt(t, e.cfg.OAuth.Clients, func() time.Time { return e.clock.Now().Add(ahead) })
}

// TestConsentAgainAfterARevocationOnAReplicaAhead: the user removes an application on the
// account page of a front end whose clock is 10 s ahead, and two seconds later signs in to it
// again through another front end, which asks for consent anew. The consent, the code and the
// tokens come after the revocation: the application is listed again, and its tokens work.
func TestConsentAgainAfterARevocationOnAReplicaAhead(t *testing.T) {
	e := newSignInEnv(t)
	fast := *e
	fast.issuer = e.replicaAhead(t, 10*time.Second)
	b := browser(t)
	e.signedIn(t, b)
	if _, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal")); errc != "" {
		t.Fatal(errc)
	}
	fast.revokeOnAccountPage(t, b, "portal")
	e.clock.Advance(2 * time.Second)
	ask := get(t, b, e.authURL("portal", "again"))
	if !strings.Contains(ask.body, `name="accept"`) {
		t.Fatalf("no consent asked after the revocation: %d %s", ask.status, ask.location)
	}
	code := callback(t, submit(t, b, ask, url.Values{"accept": {"yes"}})).Get("code")
	listed := e.account(t, b).grants
	tok, errc := e.exchange(t, "portal", code)
	if errc != "" || !slices.Contains(listed, "portal") {
		t.Fatalf("the user consented again 2 s after revoking on a front end 10 s ahead: exchange %q (want tokens), account page lists %v (want portal)", errc, listed)
	}
	e.clock.Advance(time.Second)
	if _, errc := e.refresh(t, "portal", tok["refresh_token"].(string)); errc != "" {
		t.Fatalf("the refresh token of the consent given after the revocation: %s", errc)
	}
}

// TestRevocationCoversACodeOfAFrontEndAhead: the user, who consented to portal before, signs
// in to it through a front end whose clock is 10 s ahead, which stamps the code by its clock.
// A second later the user removes portal on the account page of a front end whose clock is
// right. The code, exchanged after, is refused, and the page does not list portal again.
func TestRevocationCoversACodeOfAFrontEndAhead(t *testing.T) {
	e := newSignInEnv(t)
	fast := *e
	fast.issuer = e.replicaAhead(t, 10*time.Second)
	b := browser(t)
	e.signedIn(t, b)
	if _, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal")); errc != "" {
		t.Fatal(errc)
	}
	e.clock.Advance(time.Second)
	code := fast.signInCode(t, b, "portal") // consented before: a code at once
	e.clock.Advance(time.Second)
	e.revokeOnAccountPage(t, b, "portal")
	e.clock.Advance(time.Second)
	tok, errc := e.exchange(t, "portal", code)
	listed := e.account(t, b).grants
	if errc != "invalid_grant" || slices.Contains(listed, "portal") {
		t.Fatalf("a code issued before the user removed portal, exchanged after: %q, tokens %v (want invalid_grant, none), the account page lists %v (want no portal)", errc, tok["access_token"] != nil, listed)
	}
}

// TestTokensStampedPastTheSessionsEnd: the admin tool, on a host 10 s ahead, registers a client
// 8 s before the user's session ends, and the user signs in to it soon after: what the front end
// issues would be stamped with the client's tokens_not_before, past the session's end. The
// exchange is refused as the session's end, rather than answer tokens that outlive it and a
// refresh_expires_in below zero.
func TestTokensStampedPastTheSessionsEnd(t *testing.T) {
	e := newSignInEnvWith(t, nil, func(c *config.Config) {
		c.OAuth.SessionTTL = config.Duration(5 * time.Minute)
		c.OAuth.RefreshTokenTTL = config.Duration(5 * time.Minute)
	})
	b := browser(t)
	e.signedIn(t, b)
	e.clock.Advance(5*time.Minute - 8*time.Second)
	// Registered 8 s before the session's end, by a clock 10 s ahead: what is issued to it is
	// stamped 2 s past the session's end.
	r := e.surveyRegisteredAhead(t, 10*time.Second, "authorization_code", "refresh_token")
	if tok, errc := r.exchange(t, "survey", r.signInCode(t, b, "survey")); errc != "invalid_grant" {
		t.Fatalf("tokens stamped past the session's end: %q, refresh_expires_in %v, want invalid_grant", errc, tok["refresh_expires_in"])
	}
}

// surveyRegisteredAhead registers the client "survey" (an application of the user, with
// grants) with the admin tool on a host whose clock is ahead of the env's by ahead, and
// returns the env as seen through a front end started after it, which has read it.
func (e *signInEnv) surveyRegisteredAhead(t *testing.T, ahead time.Duration, grants ...string) signInEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := aheadAdminStore(t, e, ahead).CreateClient(ctx, store.Client{ID: "survey", SecretSHA256: oauth.Hash(rpSecret),
		Grants: grants, Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{rpRedirect}, Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	// Three seconds later (ClientsReload) a front end has read it.
	e.clock.Advance(3 * time.Second)
	r := *e
	r.issuer = e.replica(t, e.cfg.OAuth.Clients)
	return r
}
