package server_test

import "testing"

// TestConsolePagesOffByDefault: a front end configured with no ops.users serves no operations
// page, and one outside the standalone stack no sandbox: every path of them is 404.
func TestConsolePagesOffByDefault(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/ops", "/ops/history/01M84WQ94FXSQSN4ZWZVA1KF8X", "/auth/realms/campus/ops-signin",
		"/sandbox", "/sandbox/feed", "/sandbox/sandbox.js"} {
		if a := e.do("GET", p, "", "", ""); a.status != 404 {
			t.Errorf("GET %s: %d, want 404", p, a.status)
		}
	}
}
