package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCertifiedRelyingParty drives the provider with panva's openid-client (OpenID Certified,
// pinned in scripts/rp/package-lock.json) under node: discovery, client credentials, the code
// flow with PKCE and nonce and ID token validation (signatures checked against the JWKS),
// userinfo, refresh rotation, introspection, revocation, RP-initiated logout, the client's own
// logout, and the replays the sign-in must refuse. It installs the pinned packages itself when
// they are missing (npm ci): it never skips.
func TestCertifiedRelyingParty(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "scripts", "rp"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("this test needs node (and npm) on the PATH: ", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openid-client", "package.json")); err != nil {
		npm := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = dir
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	e := newSignInEnv(t)
	cmd := exec.CommandContext(ctx, node, "rp.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"RP_ISSUER="+e.issuer, "RP_CLIENT_ID=portal", "RP_CLIENT_SECRET="+rpSecret,
		"RP_CC_CLIENT_ID=gateway", "RP_CC_CLIENT_SECRET="+rpSecret,
		"RP_REDIRECT_URI="+rpRedirect, "RP_USERNAME="+userID, "RP_PASSWORD="+userPass)
	out, err := cmd.CombinedOutput()
	t.Logf("openid-client:\n%s", out)
	if err != nil || strings.Contains(string(out), "FAIL") {
		t.Fatalf("the relying party failed: %v", err)
	}
}
