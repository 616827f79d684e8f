package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// hopRecorder records every request a browser makes to base, and the status it got.
type hopRecorder struct {
	base string
	mu   sync.Mutex
	hops []string // "METHOD path status"
}

func (h *hopRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && strings.HasPrefix(r.URL.String(), h.base) {
		h.mu.Lock()
		h.hops = append(h.hops, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, resp.StatusCode))
		h.mu.Unlock()
	}
	return resp, err
}

// undeclaredHops checks each recorded hop's status against the served description.
func undeclaredHops(t *testing.T, base, realm string, hops []string) []string {
	t.Helper()
	var bad []string
	seen := map[string]bool{}
	for _, h := range hops {
		if seen[h] {
			continue
		}
		seen[h] = true
		var m, p string
		var st int
		if _, err := fmt.Sscanf(h, "%s %s %d", &m, &p, &st); err != nil {
			t.Fatalf("hop %q: %v", h, err)
		}
		op := strings.Replace(p, "/auth/realms/"+realm+"/", "/auth/realms/{realm}/", 1)
		if strings.HasPrefix(op, "/ops/history/") {
			op = "/ops/history/{ucsId}"
		}
		if !declaredStatuses(t, base, m, op)[fmt.Sprint(st)] {
			bad = append(bad, fmt.Sprintf("%s %s answered %d; declared %v", m, op, st, sortedStatuses(declaredStatuses(t, base, m, op))))
		}
	}
	return bad
}

// TestBindFlowStatusesDescribed: every hop of the ordinary binding flow (the platform's
// authorization, the local sign-in, consent, unbinding) answers a status its operation
// lists in the served description.
func TestBindFlowStatusesDescribed(t *testing.T) {
	e := newBindEnv(t)
	rec := &hopRecorder{base: e.base}
	b := phone(t)
	b.Transport = rec
	p := e.authorizedAs(t, b, followerA)
	consent := e.signedIn(t, b, p)
	done := submitForm(t, b, consent, `name="accept"`, url.Values{"accept": {"yes"}})
	if done.status != 200 || !strings.Contains(done.body, bindBoundMsg) {
		t.Fatalf("after consent: %d", done.status)
	}
	gone := submitForm(t, b, get(t, b, e.base+"/bind"), `id="unbind"`, url.Values{})
	if gone.status != 200 {
		t.Fatalf("unbind: %d", gone.status)
	}
	// With the campus sign-on.
	b2 := phone(t)
	b2.Transport = rec
	e.authorizedAs(t, b2, followerB)
	casForm := get(t, b2, e.base+"/bind/signin?idp=cas")
	c := submit(t, b2, casForm, url.Values{"username": {casUser}, "password": {casUserPass}})
	if !strings.Contains(c.body, `name="accept"`) {
		t.Fatalf("CAS bind consent: %d %s", c.status, c.url)
	}
	submitForm(t, b2, c, `name="accept"`, url.Values{"accept": {"yes"}})
	for _, h := range rec.hops {
		t.Log(h)
	}
	for _, s := range undeclaredHops(t, e.base, "campus", rec.hops) {
		t.Error(s)
	}
}
