package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/service"
)

// grant asks base for a client credentials token, from the address xff when it is set (the
// test trusts loopback as a proxy), and returns the answer.
func grant(t *testing.T, base, id, secret, xff string) answer {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/token", strings.NewReader(url.Values{
		"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}.Encode()))
	req.Header.Set("Content-Type", form)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: body}
}

// TestBruteForceBlocksClient: after 40 wrong secrets the right one is refused with the very
// answer a wrong one gets, until the wait (60 s after 30 failures, Keycloak's default) passes.
func TestBruteForceBlocksClient(t *testing.T) {
	e := newEnv(t)
	var wrong answer
	for i := range 40 {
		wrong = grant(t, e.url, "pusher", "wrong-secret-"+strconv.Itoa(i), "")
		if wrong.status != http.StatusUnauthorized {
			t.Fatalf("wrong secret %d: %d %s", i, wrong.status, wrong.body)
		}
	}
	blocked := grant(t, e.url, "pusher", pushSecret, "")
	if blocked.status != wrong.status || string(blocked.body) != string(wrong.body) {
		t.Fatalf("the right secret during a block: %d %s, a wrong one: %d %s", blocked.status, blocked.body, wrong.status, wrong.body)
	}
	// Another client from another address is not affected... but this address is blocked too.
	if a := grant(t, e.url, "other", pushSecret, ""); a.status != http.StatusUnauthorized {
		t.Fatalf("the blocked address got a token: %d", a.status)
	}
	e.clock.Add(59 * time.Second)
	if a := grant(t, e.url, "pusher", pushSecret, ""); a.status != http.StatusUnauthorized {
		t.Fatalf("the block lifted early: %d", a.status)
	}
	e.clock.Add(2 * time.Second)
	if a := grant(t, e.url, "pusher", pushSecret, ""); a.status != 200 {
		t.Fatalf("after the wait: %d %s", a.status, a.body)
	}
}

// TestBruteForceQuickFailures: two failures less than a second apart impose the minimum quick
// login wait (60 s), as Keycloak's quick-login check does.
func TestBruteForceQuickFailures(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) { c.OAuth.TrustedProxies = []string{"127.0.0.0/8"} })
	grant(t, e.url, "pusher", "wrong-1", "10.0.0.1")
	e.clock.Add(500 * time.Millisecond)
	grant(t, e.url, "pusher", "wrong-2", "10.0.0.2")
	if a := grant(t, e.url, "pusher", pushSecret, "10.0.0.3"); a.status != http.StatusUnauthorized {
		t.Fatalf("after quick failures: %d", a.status)
	}
	e.clock.Add(61 * time.Second)
	if a := grant(t, e.url, "pusher", pushSecret, "10.0.0.3"); a.status != 200 {
		t.Fatalf("after the quick-login wait: %d", a.status)
	}
}

// TestRateLimits: a flood gets 429 with Retry-After once the client's bucket is empty; a
// second of refill lets a second's worth through; each address has its own bucket; and the
// bucket is one for every replica.
func TestRateLimits(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.OAuth.TrustedProxies = []string{"127.0.0.0/8"}
		c.OAuth.RateLimits.PerClient, c.OAuth.RateLimits.PerClientBurst = 5, 10
		c.OAuth.RateLimits.PerAddress, c.OAuth.RateLimits.PerAddressBurst = 3, 6
	})
	ok, limited := 0, 0
	var last answer
	for i := range 30 {
		a := grant(t, e.url, "pusher", pushSecret, "10.1.0."+strconv.Itoa(i%6))
		switch a.status {
		case 200:
			ok++
		case http.StatusTooManyRequests:
			limited++
			last = a
		default:
			t.Fatalf("%d %s", a.status, a.body)
		}
	}
	if ok != 10 || limited != 20 {
		t.Fatalf("a burst of 10: %d granted, %d limited", ok, limited)
	}
	if ra, err := strconv.Atoi(last.header.Get("Retry-After")); err != nil || ra < 1 || !strings.Contains(string(last.body), "too_many_requests") {
		t.Fatalf("429 answer: Retry-After %q, %s", last.header.Get("Retry-After"), last.body)
	}
	e.clock.Add(time.Second)
	ok = 0
	for i := range 10 {
		if grant(t, e.url, "pusher", pushSecret, "10.2.0."+strconv.Itoa(i)).status == 200 {
			ok++
		}
	}
	if ok != 5 {
		t.Fatalf("after a second at 5/s: %d granted", ok)
	}

	// Per address: one address gets its burst of 6, another is not held back by it.
	e.clock.Add(time.Hour)
	ok = 0
	for range 10 {
		if grant(t, e.url, "other", pushSecret, "10.3.0.1").status == 200 {
			ok++
		}
	}
	if ok != 6 {
		t.Fatalf("one address, burst 6: %d granted", ok)
	}
	if a := grant(t, e.url, "other", pushSecret, "10.3.0.2"); a.status != 200 {
		t.Fatalf("another address: %d", a.status)
	}

	// Shared: a second front end on the same NATS draws from the same buckets.
	cfg := *e.cfg
	api, err := service.NewAPI(t.Context(), &cfg, service.Deps{Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	ts := httptest.NewServer(api.Server)
	t.Cleanup(ts.Close)
	e.clock.Add(time.Hour)
	ok = 0
	for i := range 20 {
		base := e.url
		if i%2 == 1 {
			base = ts.URL
		}
		if grant(t, base, "pusher", pushSecret, "10.4.0."+strconv.Itoa(i)).status == 200 {
			ok++
		}
	}
	if ok != 10 {
		t.Fatalf("two front ends, one bucket of 10: %d granted", ok)
	}
}

// TestBruteForceLoginForm: the login form blocks a user after repeated wrong passwords, with
// the generic answer, until the wait passes.
func TestBruteForceLoginForm(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	login := get(t, b, e.authURL("trusted", "st"))
	for range 30 {
		login = submit(t, b, login, url.Values{"username": {userID}, "password": {"wrong"}})
		if login.status != http.StatusUnauthorized {
			t.Fatalf("wrong password: %d", login.status)
		}
	}
	blocked := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
	if blocked.status != http.StatusUnauthorized || blocked.location != "" || !strings.Contains(blocked.body, "Wrong user number or password") {
		t.Fatalf("the right password during a block: %d %q", blocked.status, blocked.location)
	}
	e.clock.Add(61 * time.Second)
	if q := callback(t, submit(t, b, get(t, b, e.authURL("trusted", "st2")), url.Values{"username": {userID}, "password": {userPass}})); q.Get("code") == "" {
		t.Fatalf("after the wait: %v", q)
	}
}
