package server

import "testing"

// TestOpsTarget: a sign-in for the operations page returns only to its own pages, whatever
// the address asks.
func TestOpsTarget(t *testing.T) {
	for to, want := range map[string]string{
		"/ops": "/ops", "": "/ops", "https://evil.example/ops": "/ops", "//evil.example": "/ops",
		"/ops/history/01M84WQ94FXSQSN4ZWZVA1KF8X":         "/ops/history/01M84WQ94FXSQSN4ZWZVA1KF8X",
		"/ops/history/01M84WQ94FXSQSN4ZWZVA1KF8X/../../x": "/ops",
		"/ops/history/x?y=1":                              "/ops",
		"/ops/../auth/realms/campus/account":              "/ops",
	} {
		if got := opsTarget(to); got != want {
			t.Errorf("opsTarget(%q) = %q, want %q", to, got, want)
		}
	}
}
