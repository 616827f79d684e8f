package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
)

// replicaWithAlg starts another front end on e's store and NATS whose configuration differs
// from e's only in oauth.signing_alg, as during a rolling restart that changes it, and returns
// its issuer.
func replicaWithAlg(t *testing.T, e *signInEnv, alg string) string {
	t.Helper()
	cfg := *e.cfg
	cfg.OAuth.SigningAlg = alg
	api, err := service.NewAPI(context.Background(), &cfg, service.Deps{Now: e.deps.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	ts := httptest.NewServer(api.Server)
	t.Cleanup(ts.Close)
	return ts.URL + "/auth/realms/campus"
}

// publishedAlgs returns the algorithm of each key of the issuer's JWKS, by kid.
func publishedAlgs(t *testing.T, issuer string) map[string]string {
	t.Helper()
	resp, err := http.Get(issuer + "/protocol/openid-connect/certs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var set struct {
		Keys []struct{ Kid, Alg string }
	}
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range set.Keys {
		out[k.Kid] = k.Alg
	}
	return out
}

// tokenKey returns the alg and kid of a JWT's header.
func tokenKey(t *testing.T, tok string) (alg, kid string) {
	t.Helper()
	hdr, _, err := jwt.NewParser().ParseUnverified(tok, &jwt.RegisteredClaims{})
	if err != nil {
		t.Fatal(err)
	}
	kid, _ = hdr.Header["kid"].(string)
	return hdr.Method.Alg(), kid
}

// TestAccessTokensHoldAcrossASigningAlgChange: an operator switches oauth.signing_alg from
// ES256 to RS256. Every front end publishes both keys, so an unexpired access token signed by
// either holds at every front end, through the rolling restart and after it, for the data
// interfaces, userinfo and revocation alike.
func TestAccessTokensHoldAcrossASigningAlgChange(t *testing.T) {
	e := newSignInEnv(t) // signing_alg ES256 (the default)
	access := e.userTokens(t, "portal")["access_token"].(string)
	alg, kid := tokenKey(t, access)
	if alg != "ES256" {
		t.Fatalf("access token alg %s", alg)
	}
	if st := userinfo(t, e.issuer, access); st != http.StatusOK {
		t.Fatalf("userinfo on the issuing front end: %d", st)
	}
	other := replicaWithAlg(t, e, "RS256")
	if algs := publishedAlgs(t, other); algs[kid] != "ES256" {
		t.Fatalf("the RS256 front end does not publish the token's key %s: %v", kid, algs)
	}
	if st := userinfo(t, other, access); st != http.StatusOK {
		t.Errorf("the RS256 front end refuses an ES256 access token whose key it publishes: userinfo %d", st)
	}
	if st, body := pushAs(t, strings.TrimSuffix(other, "/auth/realms/campus"), access); st == http.StatusUnauthorized {
		t.Errorf("the RS256 front end's push endpoint refuses the ES256 access token: %d %s", st, body)
	}

	// The other way: a token of the restarted front end at one not yet restarted.
	code := e.signInCode(t, browser(t), "portal")
	st, tok := postAs(t, other, "/token", "portal", url.Values{"grant_type": {"authorization_code"},
		"code": {code}, "redirect_uri": {rpRedirect}})
	if st != http.StatusOK {
		t.Fatalf("exchange at the RS256 front end: %d %v", st, tok)
	}
	access2 := tok["access_token"].(string)
	if alg, kid := tokenKey(t, access2); alg != "RS256" || publishedAlgs(t, e.issuer)[kid] != "RS256" {
		t.Fatalf("the RS256 front end's token: %s %s, not published by the ES256 one", alg, kid)
	}
	if st := userinfo(t, e.issuer, access2); st != http.StatusOK {
		t.Errorf("the ES256 front end refuses an RS256 access token whose key it publishes: userinfo %d", st)
	}

	// Revoked at the front end of the other algorithm, the ES256 token is refused everywhere.
	if st, ans := postAs(t, other, "/revoke", "portal", url.Values{"token": {access}}); st != http.StatusOK {
		t.Fatalf("revocation at the RS256 front end: %d %v", st, ans)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the ES256 token refused at its own front end after its revocation at the other", func() bool {
		return userinfo(t, e.issuer, access) == http.StatusUnauthorized
	})
	if st := userinfo(t, other, access); st != http.StatusUnauthorized {
		t.Errorf("the revoked token at the RS256 front end: userinfo %d", st)
	}
}
