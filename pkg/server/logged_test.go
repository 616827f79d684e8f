package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// TestPasswordTypedAsUserNotLogged: a student who types the password into the user
// number field (a common slip: the browser filled the number, or focus jumped) must not have
// that password written to the log. deployments/README.md: security events are "logged at
// warn with the client id or user where known ... never a secret, password or token"; the
// same care is taken for a client secret sent as client_id.
func TestPasswordTypedAsUserNotLogged(t *testing.T) {
	var logs logLines
	e := newSignInEnvLogged(t, logs.logger())
	b := browser(t)
	login := get(t, b, e.authURL("portal", "s1"))
	// The password in the user field, the user number in the password field.
	if p := submit(t, b, login, url.Values{"username": {userPass}, "password": {userID}}); p.status != http.StatusUnauthorized {
		t.Fatalf("swapped fields: %d", p.status)
	}
	if recs := logs.events(t, "login_failed"); len(recs) != 1 {
		t.Fatalf("login_failed records: %v", recs)
	}
	if recs := logs.events(t, "login_failed"); recs[0]["user"] != "(not a user; not logged)" {
		t.Errorf("the name that is no user's is logged as %v", recs[0]["user"])
	}
	if out := logs.String(); strings.Contains(out, userPass) {
		for _, r := range logs.events(t, "login_failed") {
			t.Logf("logged: %v", r)
		}
		t.Fatalf("the log holds the user's password %q, typed into the user number field", userPass)
	}
}

// TestAddressSlowedWithUserLocksOff: deployments/README.md documents oauth.brute_force as
// the "temporary lock of a user of the login form, never of a client or an address", and under
// oauth.rate_limits: "Failed authentications per address (1,000 at once, then 2/s) are fixed".
// An operator who turns Keycloak's user locks off (brute_force.disabled, often done so that
// outsiders cannot lock students out) must keep the fixed slowdown of a guessing address.
func TestAddressSlowedWithUserLocksOff(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.OAuth.TrustedProxies = []string{"127.0.0.0/8"}
		c.OAuth.RateLimits.PerAddress, c.OAuth.RateLimits.PerAddressBurst = 10_000, 10_000
		c.OAuth.BruteForce.Disabled = true
	})
	// With brute_force.disabled the per-address failure limit (fixed: 1,000 at once, then 2/s)
	// still answers 429; guessUntilSlowed fails the test if 1,100 guesses are all refused 401.
	guessUntilSlowed(t, e.url, "pusher", "10.7.0.2")
}
