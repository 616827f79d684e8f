package server_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// TestSecurityEventsLoggedAndCounted: each refused sign-in, client authentication and form is
// logged at warn, naming the user or client and the source address and never the secret,
// password or ticket tried, and counted in ucs_security_events_total by event.
func TestSecurityEventsLoggedAndCounted(t *testing.T) {
	var logs logLines
	e := newSignInEnvLogged(t, logs.logger())
	const wrongPassword = "wrong-password-Xq7"
	const wrongSecret = "wrong-secret-Zk9-0123456789"
	const forgedTicket = "ST-forged-ticket-Wm3"

	// login_failed: a wrong password at the login form, for a user who exists.
	b := browser(t)
	login := get(t, b, e.authURL("portal", "s1"))
	if p := submit(t, b, login, url.Values{"username": {userID}, "password": {wrongPassword}}); p.status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", p.status)
	}
	// login_failed: a ticket the campus sign-on does not confirm.
	casForm := get(t, b, e.authURL("portal", "s2", "kc_idp_hint", "cas"))
	service := casForm.url.Query().Get("service")
	if service == "" {
		t.Fatalf("not sent to CAS: %s", casForm.url)
	}
	if p := get(t, b, service+"&ticket="+forgedTicket); p.status != http.StatusUnauthorized {
		t.Fatalf("forged ticket: %d %s", p.status, p.body)
	}
	// csrf_refused: the login form without its CSRF value, and from another browser.
	login = get(t, b, e.authURL("portal", "s3"))
	if p := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}, "csrf": {"forged"}}); p.status != http.StatusForbidden {
		t.Fatalf("forged csrf: %d", p.status)
	}
	if p := submit(t, browser(t), login, url.Values{"username": {userID}, "password": {userPass}}); p.status != http.StatusForbidden {
		t.Fatalf("another browser: %d", p.status)
	}
	// csrf_refused: an account form without the page's value.
	a := browser(t)
	e.signedIn(t, a)
	if p := e.accountPost(t, a, "/grants/revoke", url.Values{"client_id": {"portal"}, "csrf": {"forged"}}); p.status != http.StatusForbidden {
		t.Fatalf("account form with a forged csrf: %d %s", p.status, p.body)
	}
	// client_auth_failed: a wrong secret, an unknown client, Basic credentials that do not decode.
	token := func(form url.Values, basic string) int {
		req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/token", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if basic != "" {
			req.Header.Set("Authorization", "Basic "+basic)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := token(url.Values{"grant_type": {"client_credentials"}, "client_id": {"gateway"}, "client_secret": {wrongSecret}}, ""); st != 401 {
		t.Fatalf("wrong secret: %d", st)
	}
	if st := token(url.Values{"grant_type": {"client_credentials"}, "client_id": {"nobody"}, "client_secret": {wrongSecret}}, ""); st != 401 {
		t.Fatalf("unknown client: %d", st)
	}
	if st := token(url.Values{"grant_type": {"client_credentials"}}, "Z2F0ZXdheTolWlo="); st != 401 { // gateway:%ZZ
		t.Fatalf("malformed Basic: %d", st)
	}
	// The secret in the id's place and the id in the secret's (a swapped curl -u).
	if st := token(url.Values{"grant_type": {"client_credentials"}}, base64.StdEncoding.EncodeToString([]byte(rpSecret+":portal"))); st != 401 {
		t.Fatalf("swapped Basic credentials: %d", st)
	}

	for _, c := range []struct {
		event string
		n     int
		attrs []string // attribute=value every record of the event carries
	}{
		{"login_failed", 2, []string{"client=portal"}},
		{"csrf_refused", 3, nil},
		{"client_auth_failed", 4, nil},
	} {
		recs := logs.events(t, c.event)
		if len(recs) != c.n {
			t.Errorf("%s: %d records logged, want %d: %v", c.event, len(recs), c.n, recs)
			continue
		}
		for _, r := range recs {
			if r["level"] != "WARN" || r["addr"] != "127.0.0.1" {
				t.Errorf("%s: %v, want level WARN and the source address", c.event, r)
			}
			for _, kv := range c.attrs {
				k, v, _ := strings.Cut(kv, "=")
				if r[k] != v {
					t.Errorf("%s: %s is %v, want %s", c.event, k, r[k], v)
				}
			}
		}
		if got := securityCount(t, e, c.event); got != float64(c.n) {
			t.Errorf("%s: counted %v, want %d", c.event, got, c.n)
		}
	}
	if recs := logs.events(t, "login_failed"); len(recs) == 2 && (recs[0]["user"] != userID || recs[1]["idp"] != "cas") {
		t.Errorf("login failures name the user and the provider: %v", recs)
	}
	clients := map[string]bool{}
	for _, r := range logs.events(t, "client_auth_failed") {
		clients[r["client"].(string)] = true
	}
	if !clients["gateway"] || !clients["nobody"] || !clients["(a client secret, not logged)"] {
		t.Errorf("client authentication failures name the client: %v", clients)
	}
	out := logs.String()
	for _, secret := range []string{wrongPassword, userPass, wrongSecret, rpSecret, forgedTicket, "forged-ticket"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
}

// securityCount reads ucs_security_events_total{event} from the front end's /metrics.
func securityCount(t *testing.T, e *signInEnv, event string) float64 {
	t.Helper()
	resp, err := http.Get(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	prefix := `ucs_security_events_total{event="` + event + `"} `
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", prefix)
	return 0
}
