package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// declaredStatuses reads the served description and returns the statuses it declares for the
// operation method path.
func declaredStatuses(t *testing.T, base, method, path string) map[string]bool {
	t.Helper()
	resp, err := http.Get(base + "/v1/meta/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var op struct {
		Responses map[string]json.RawMessage `json:"responses"`
	}
	if err := json.Unmarshal(doc.Paths[path][strings.ToLower(method)], &op); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	out := map[string]bool{}
	for s := range op.Responses {
		out[s] = true
	}
	return out
}

func sortedStatuses(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestSignInPageStatusesDescribed: the served description, which README calls the reference of
// every status, lists what the sign-in pages answer: the platform's return to the binding page
// (303 back to /bind, 403 for a Moments snapshot, 502 when the platform is busy) and the
// campus sign-on's return (401 for a ticket it does not confirm).
func TestSignInPageStatusesDescribed(t *testing.T) {
	var busy atomic.Bool
	e, _ := newBindEnvVia(t, false, func(w http.ResponseWriter, r *http.Request) bool {
		if !busy.Load() || r.URL.Path != "/sns/oauth2/access_token" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"errcode":-1,"errmsg":"system error"}`)
		return true
	})
	var bad []string
	check := func(op, what string, got int, declared map[string]bool) {
		if !declared[fmt.Sprint(got)] {
			bad = append(bad, fmt.Sprintf("GET %s (%s) answers %d; the served description declares only %v", op, what, got, sortedStatuses(declared)))
		}
	}

	bindOp := "/bind/platform"
	bindDeclared := declaredStatuses(t, e.base, "GET", bindOp)

	// A Moments snapshot: 403.
	b, state := e.startAuthorization(t)
	p := e.returned(t, b, e.sim.IssueSnapshotWebCode(followerA), state, nil)
	if p.status != http.StatusForbidden {
		t.Fatalf("snapshot: %d %s", p.status, p.body)
	}
	check(bindOp, "a Moments snapshot's code", p.status, bindDeclared)

	// The platform busy at the code exchange: 502.
	b, state = e.startAuthorization(t)
	busy.Store(true)
	p = e.returned(t, b, e.sim.IssueWebCode(followerA), state, nil)
	busy.Store(false)
	if p.status != http.StatusBadGateway {
		t.Fatalf("platform busy: %d %s", p.status, p.body)
	}
	check(bindOp, "the platform busy", p.status, bindDeclared)

	// The ordinary return: 303 to /bind (the description says 302).
	p = e.returned(t, b, e.sim.IssueWebCode(followerA), state, nil)
	if p.status/100 != 3 || p.location != "/bind" {
		t.Fatalf("ordinary return: %d %q", p.status, p.location)
	}
	check(bindOp, "the ordinary return to /bind", p.status, bindDeclared)

	// The campus sign-on's return with a ticket CAS refuses: 401.
	casOp := "/auth/realms/{realm}/broker/cas/endpoint"
	casDeclared := declaredStatuses(t, e.base, "GET", casOp)
	p = get(t, b, e.base+"/bind/signin?idp=cas")
	loc, err := url.Parse(p.location)
	if p.status/100 != 3 || err != nil || loc.Query().Get("service") == "" {
		t.Fatalf("bind sign-in with CAS: %d %q", p.status, p.location)
	}
	p = get(t, b, loc.Query().Get("service")+"&ticket=ST-1-made-up")
	if p.status < 400 {
		t.Fatalf("a made-up ticket: %d %q", p.status, p.location)
	}
	check(casOp, "a ticket the campus sign-on refuses", p.status, casDeclared)

	for _, s := range bad {
		t.Error(s)
	}
}
