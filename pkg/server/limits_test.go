package server_test

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/service"
)

// grant asks base for a client credentials token, from the address xff when it is set (the
// test trusts loopback as a proxy), and returns the answer.
func grant(t *testing.T, base, id, secret, xff string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/token", strings.NewReader(url.Values{
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

// TestNoOneLocksAClientOut: client ids are public, so wrong secrets, slow or quick (two within
// a second imposed a minute's block before), from anywhere, never make the real client's
// correct secret fail, from its own address or the one the failures came from.
func TestNoOneLocksAClientOut(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) { c.OAuth.TrustedProxies = []string{"127.0.0.0/8"} })
	for i := range 40 {
		if a := grant(t, e.url, "pusher", "wrong-secret-"+strconv.Itoa(i), "10.9.0."+strconv.Itoa(i%3)); a.status != http.StatusUnauthorized {
			t.Fatalf("wrong secret %d: %d %s", i, a.status, a.body)
		}
	}
	for _, addr := range []string{"10.9.0.1", "10.9.1.1"} {
		if a := grant(t, e.url, "pusher", pushSecret, addr); a.status != 200 {
			t.Fatalf("the right secret from %s after others' failures: %d %s", addr, a.status, a.body)
		}
	}
	grant(t, e.url, "other", "wrong-1", "10.9.2.1")
	e.clock.Advance(500 * time.Millisecond)
	grant(t, e.url, "other", "wrong-2", "10.9.2.2")
	if a := grant(t, e.url, "other", pushSecret, "10.9.2.3"); a.status != 200 {
		t.Fatalf("the right secret after two quick failures: %d %s", a.status, a.body)
	}
}

// TestAddressSlowed: an address that fails to authenticate faster than a NAT of people ever
// does is answered 429 with Retry-After for its wrong attempts, for a while, never locked;
// the right secret still works from it; other addresses are not touched; and failures at a
// NAT's rate (2,000 in ten minutes) are never slowed.
func TestAddressSlowed(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.OAuth.TrustedProxies = []string{"127.0.0.0/8"}
		c.OAuth.RateLimits.PerAddress, c.OAuth.RateLimits.PerAddressBurst = 10_000, 10_000
	})
	for i := range 2000 {
		if a := grant(t, e.url, "pusher", "mistyped", "10.7.0.1"); a.status != http.StatusUnauthorized {
			t.Fatalf("failure %d at a NAT's rate: %d %s", i, a.status, a.body)
		}
		e.clock.Advance(300 * time.Millisecond)
	}
	e.clock.Advance(time.Hour)
	n, slowed := guessUntilSlowed(t, e.url, "pusher", "10.7.0.2")
	if n < 1000 {
		t.Fatalf("slowed after %d failures, the burst is 1000", n)
	}
	if ra, err := strconv.Atoi(slowed.header.Get("Retry-After")); err != nil || ra < 1 || !strings.Contains(string(slowed.body), "too_many_requests") {
		t.Fatalf("a guessing address: %d, Retry-After %q, %s", slowed.status, slowed.header.Get("Retry-After"), slowed.body)
	}
	if a := grant(t, e.url, "pusher", pushSecret, "10.7.0.2"); a.status != 200 {
		t.Fatalf("the right secret from a slowed address: %d %s", a.status, a.body)
	}
	if a := grant(t, e.url, "pusher", "wrong", "10.7.0.3"); a.status != http.StatusUnauthorized {
		t.Fatalf("another address: %d %s", a.status, a.body)
	}
	e.clock.Advance(time.Second)
	if a := grant(t, e.url, "pusher", "wrong", "10.7.0.2"); a.status != http.StatusUnauthorized {
		t.Fatalf("a second later the address may fail again: %d %s", a.status, a.body)
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
	e.clock.Advance(time.Second)
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
	e.clock.Advance(time.Hour)
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
	e.clock.Advance(time.Hour)
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

// TestBruteForceLoginForm: the login form locks a user after repeated wrong passwords, with
// the generic answer, until the wait passes; meanwhile another user signs in from the same
// address (a campus NAT), and made-up user names leave no record.
func TestBruteForceLoginForm(t *testing.T) {
	const other, otherPass = "2020000002", "another good password"
	e := newSignInEnvLogged(t, nil, func(c *config.Config) {
		c.Directory.Users = append(c.Directory.Users, config.User{UserID: other, Password: otherPass})
	})
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
	// Six quick wrong passwords of one user do not shut another out of the same address.
	for range 6 {
		blocked = submit(t, b, blocked, url.Values{"username": {userID}, "password": {"wrong"}})
	}
	if q := callback(t, submit(t, b, blocked, url.Values{"username": {other}, "password": {otherPass}})); q.Get("code") == "" {
		t.Fatalf("another user from the same address: %v", q)
	}
	e.clock.Advance(61 * time.Second)
	b = browser(t) // the other user's browser is signed in
	if q := callback(t, submit(t, b, get(t, b, e.authURL("trusted", "st2")), url.Values{"username": {userID}, "password": {userPass}})); q.Get("code") == "" {
		t.Fatalf("after the wait: %v", q)
	}
}

// TestLoginQuickFailures: two wrong passwords of a user less than a second apart lock that
// user for the minimum quick login wait (60 s), as Keycloak's quick-login check does.
func TestLoginQuickFailures(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	login := get(t, b, e.authURL("trusted", "st"))
	login = submit(t, b, login, url.Values{"username": {userID}, "password": {"wrong-1"}})
	e.clock.Advance(500 * time.Millisecond)
	login = submit(t, b, login, url.Values{"username": {userID}, "password": {"wrong-2"}})
	if p := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}}); p.status != http.StatusUnauthorized {
		t.Fatalf("after quick failures: %d", p.status)
	}
	e.clock.Advance(61 * time.Second)
	if q := callback(t, submit(t, b, get(t, b, e.authURL("trusted", "st2")), url.Values{"username": {userID}, "password": {userPass}})); q.Get("code") == "" {
		t.Fatalf("after the quick-login wait: %v", q)
	}
}

// TestLoginFormSlowedAddress: a made-up user name leaves no failure record; an address slowed
// by its failures is answered 429 with Retry-After at the login form before any password is
// checked, even the right one, until it is back under the rate.
func TestLoginFormSlowedAddress(t *testing.T) {
	e := newSignInEnvLogged(t, nil, func(c *config.Config) {
		c.OAuth.RateLimits.PerAddress, c.OAuth.RateLimits.PerAddressBurst = 10_000, 10_000
	})
	b := browser(t)
	login := get(t, b, e.authURL("trusted", "st"))
	for i := range 5 {
		login = submit(t, b, login, url.Values{"username": {"made-up-" + strconv.Itoa(i)}, "password": {"x"}})
		if login.status != http.StatusUnauthorized {
			t.Fatalf("unknown user: %d", login.status)
		}
	}
	nc, err := nats.Connect(e.cfg.NATS.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(t.Context(), service.FailuresBucket)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.ListKeys(t.Context()); err != nil {
		t.Fatal(err)
	} else {
		var n int
		for range keys.Keys() {
			n++
		}
		if n != 0 {
			t.Fatalf("made-up user names left %d failure records", n)
		}
	}
	guessUntilSlowed(t, e.base, "gateway", "")
	fields := url.Values{"username": {userID}, "password": {userPass}}
	for _, h := range hidden.FindAllStringSubmatch(login.body, -1) {
		fields.Set(h[1], html.UnescapeString(h[2]))
	}
	action, _ := login.url.Parse(html.UnescapeString(formAction.FindStringSubmatch(login.body)[1]))
	resp, err := b.PostForm(action.String(), fields)
	if err != nil {
		t.Fatal(err)
	}
	p := read(t, resp)
	if p.status != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(p.body, "too_many_requests") {
		t.Fatalf("the login form from a slowed address: %d, Retry-After %q", p.status, resp.Header.Get("Retry-After"))
	}
	e.clock.Advance(time.Second)
	if q := callback(t, submit(t, b, get(t, b, e.authURL("trusted", "st2")), url.Values{"username": {userID}, "password": {userPass}})); q.Get("code") == "" {
		t.Fatalf("a second later: %v", q)
	}
}

// TestCASCallbackSlowedAddress: every ticket brought to the campus sign-on's return costs a
// validation call there, so made-up tickets count against the address as wrong passwords do at
// the login form: past the address's failures, the return answers 429 with Retry-After and
// calls the campus sign-on no more. A campus sign-on that fails counts against no one.
func TestCASCallbackSlowedAddress(t *testing.T) {
	var validations atomic.Int64
	var failing atomic.Bool
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "serviceValidate") {
			_, _ = io.WriteString(w, "login")
			return
		}
		validations.Add(1)
		if failing.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		_, _ = io.WriteString(w, `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas"><cas:authenticationFailure code="INVALID_TICKET">no</cas:authenticationFailure></cas:serviceResponse>`)
	}))
	t.Cleanup(fake.Close)
	e := newSignInEnvWith(t, nil, func(c *config.Config) { c.OAuth.IdentityProviders.CAS.URL = fake.URL })
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := b.Get(e.authURL("trusted", "s", "kc_idp_hint", "cas"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.String(), fake.URL) {
		t.Fatalf("not sent to the campus sign-on: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	service := loc.Query().Get("service")
	// ret brings ticket back to the return and answers its status and Retry-After.
	ret := func(ticket string) (int, string) {
		t.Helper()
		resp, err := b.Get(service + "&ticket=" + ticket)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	// The campus sign-on failing: 50 returns, each tried there, none counted.
	failing.Store(true)
	for i := range 50 {
		if status, _ := ret("ST-" + strconv.Itoa(i)); status != http.StatusUnauthorized {
			t.Fatalf("return %d while the campus sign-on fails: %d", i, status)
		}
	}
	failing.Store(false)
	before := validations.Load()
	refused := 0
	for i := 0; ; i++ {
		status, retryAfter := ret("ST-made-up-" + strconv.Itoa(i))
		if status == http.StatusTooManyRequests {
			if retryAfter == "" {
				t.Fatal("429 without Retry-After")
			}
			break
		}
		if status != http.StatusUnauthorized || i > 1100 {
			t.Fatalf("made-up ticket %d: %d", i, status)
		}
		refused++
	}
	if refused < 900 {
		t.Fatalf("slowed after %d refused tickets, and 50 returns while the campus sign-on failed: those counted", refused)
	}
	n := validations.Load()
	for i := range 20 {
		if status, _ := ret("ST-later-" + strconv.Itoa(i)); status != http.StatusTooManyRequests {
			t.Fatalf("a return from the slowed address: %d", status)
		}
	}
	// Each refused ticket was validated, and the return answered 429 was at most: the one that
	// went over the limit is validated unless the shared count already said so.
	if after := validations.Load(); after != n || n-before < int64(refused) || n-before > int64(refused)+1 {
		t.Fatalf("validations at the campus sign-on: %d for %d refused tickets, then %d more from the slowed address", n-before, refused, after-n)
	}
}

// guessUntilSlowed sends wrong secrets of client to the token endpoint at base, from addr (""
// for the connection's own), until the address is answered 429, and returns how many were
// refused before it and that answer. Past 1,100 guesses, or at any other answer, it fails t.
func guessUntilSlowed(t *testing.T, base, client, addr string) (int, answer) {
	t.Helper()
	for i := range 1101 {
		a := grant(t, base, client, "guess-"+strconv.Itoa(i), addr)
		if a.status == http.StatusTooManyRequests {
			return i, a
		}
		if a.status != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %s", i, a.status, a.body)
		}
	}
	t.Fatalf("1100 wrong secrets of %s from one address, none answered 429", client)
	return 0, answer{}
}
