package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestWrongMethodOnBatchPathsWithoutToken: GET and HEAD on the POST-only concrete paths
// …/mp/batch and …/mp/results are answered 405 with Allow naming POST, with or without a push
// token: a resource's methods do not depend on who asks (GET /v1/infra/notification/mp is 405
// either way). Without a token they were taken for a lookup of a push named "batch" and
// answered 401 with a Bearer challenge.
func TestWrongMethodOnBatchPathsWithoutToken(t *testing.T) {
	e := newEnv(t)
	if a := e.do("GET", "/v1/infra/notification/mp", "", "", ""); a.status != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/infra/notification/mp without a token: %d, want 405", a.status)
	}
	for _, p := range []string{"/v1/infra/notification/mp/batch", "/v1/infra/notification/mp/results"} {
		if a := e.do("OPTIONS", p, "", "", ""); a.header.Get("Allow") != "OPTIONS, POST" {
			t.Fatalf("OPTIONS %s: Allow %q", p, a.header.Get("Allow"))
		}
		for _, m := range []string{"GET", "HEAD"} {
			a := e.do(m, p, "", "", "")
			if a.status != http.StatusMethodNotAllowed || !strings.Contains(a.header.Get("Allow"), "POST") {
				t.Errorf("%s %s without a token: %d Allow %q WWW-Authenticate %q %s; want 405 with Allow naming POST (as with a token, and as GET /v1/infra/notification/mp answers)",
					m, p, a.status, a.header.Get("Allow"), a.header.Get("WWW-Authenticate"), a.body)
			}
		}
	}
}
