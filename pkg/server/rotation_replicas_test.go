package server_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/campus-it/ucs/pkg/keys"
)

// TestKeyRotationSeenByEveryReplica: once one front end signs with a rotated key (it
// rotated, or started after another did), the other front ends must accept its tokens and
// publish its key, or a relying party that fetches the JWKS from one of them cannot verify the
// ID token the first issued. A replica reads the keys again every minute: a new key signs only
// once every replica holds it (keys.PublishAhead).
func TestKeyRotationSeenByEveryReplica(t *testing.T) {
	e := newSignInEnv(t) // replica A, signing with the first keys
	ctx := context.Background()
	st := adminStore(t, e)
	for _, alg := range []string{"ES256", "RS256"} {
		ks, err := keys.Load(ctx, st, alg, e.clock.Now)
		if err != nil {
			t.Fatal(err)
		}
		// The rotation another replica's ticker makes when the key is due.
		if err := ks.Refresh(ctx, st, 0, e.clock.Now); err != nil {
			t.Fatal(err)
		}
	}
	other := e.replica(t, e.cfg.OAuth.Clients) // replica B, signing with the rotated keys

	// A user signs in; the load balancer sends the client's code exchange to replica B.
	code := e.signInCode(t, browser(t), "portal")
	st2, tok := postAs(t, other, "/token", "portal", url.Values{"grant_type": {"authorization_code"},
		"code": {code}, "redirect_uri": {rpRedirect}})
	if st2 != http.StatusOK {
		t.Fatalf("exchange at replica B: %d %v", st2, tok)
	}
	// The relying party verifies the ID token with the JWKS the load balancer got from A.
	r := newRP(t, e)
	if _, err := r.verifier.Verify(ctx, tok["id_token"].(string)); err != nil {
		t.Errorf("go-oidc cannot verify an ID token of replica B with the JWKS of replica A: %v", err)
	}
	if s := userinfo(t, e.issuer, tok["access_token"].(string)); s != http.StatusOK {
		t.Errorf("replica A refuses an access token replica B issued after the rotation: userinfo %d", s)
	}
}
