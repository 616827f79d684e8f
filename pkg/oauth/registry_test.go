package oauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/store"
)

func hashHex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// The registry follows the store: a disabled client is neither found nor authenticated, a
// rotated secret replaces the old one, and a damaged record leaves the others registered.
func TestClientsReload(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	for _, c := range []store.Client{
		{ID: "a", SecretSHA256: hashHex("secret-of-a-0000"), Grants: []string{oauth.GrantClientCredentials}, Scopes: []string{oauth.ScopeFakeAPI}, AccessTokenTTL: 600},
		{ID: "b", SecretSHA256: hashHex("secret-of-b-0000"), Grants: []string{oauth.GrantClientCredentials}, Scopes: []string{oauth.ScopeFakeAPI}, Disabled: true},
		{ID: "damaged", SecretSHA256: "not hex", Grants: []string{oauth.GrantClientCredentials}, Scopes: []string{oauth.ScopeFakeAPI}},
	} {
		if err := st.CreateClient(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	r := oauth.NewClients(nil, 2*time.Hour)
	err := r.Reload(ctx, st)
	if err == nil || !strings.Contains(err.Error(), "client damaged") {
		t.Fatalf("reload with a damaged record: %v", err)
	}
	if c, ok := r.Authenticate("a", "secret-of-a-0000"); !ok || c.AccessTokenTTL != 10*time.Minute {
		t.Fatalf("a: %+v %v", c, ok)
	}
	if _, ok := r.Lookup("b"); ok || !r.Disabled("b") {
		t.Fatal("a disabled client is registered")
	}
	if _, ok := r.Authenticate("b", "secret-of-b-0000"); ok {
		t.Fatal("a disabled client authenticated")
	}
	if _, ok := r.Lookup("damaged"); ok {
		t.Fatal("a damaged record was registered")
	}

	h, no := hashHex("new-secret-of-a-0000"), false
	if _, err := st.UpdateClient(ctx, "a", store.ClientChange{SecretSHA256: &h}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateClient(ctx, "b", store.ClientChange{Disabled: &no}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteClient(ctx, "damaged"); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Authenticate("a", "secret-of-a-0000"); ok {
		t.Fatal("the old secret still works after a rotation")
	}
	if _, ok := r.Authenticate("a", "new-secret-of-a-0000"); !ok {
		t.Fatal("the new secret does not work")
	}
	if c, ok := r.Lookup("b"); !ok || r.Disabled("b") || c.AccessTokenTTL != 2*time.Hour {
		t.Fatalf("b enabled again: %+v %v", c, ok)
	}
	if ids := r.IDs(); strings.Join(ids, ",") != "a,b" {
		t.Fatalf("ids: %v", ids)
	}
}

// TestRegisteredLoopbackAnyPort: an address is registered as written, or, on the loopback
// interface over http, with any port where the registered one gives none (RFC 8252, 7.3);
// nothing else is widened.
func TestRegisteredLoopbackAnyPort(t *testing.T) {
	reg := []string{"http://127.0.0.1/cb", "http://[::1]/cb", "http://localhost/cb?x=1", "http://127.0.0.1:8080/fixed", "https://app.example.edu/cb"}
	for uri, want := range map[string]bool{
		"http://127.0.0.1/cb":             true,
		"http://127.0.0.1:53682/cb":       true,
		"http://[::1]:53682/cb":           true,
		"http://localhost:1/cb?x=1":       true,
		"http://127.0.0.1:53682/cb/":      false, // the path must match
		"http://127.0.0.1:53682/cb#x":     false,
		"http://u@127.0.0.1:53682/cb":     false,
		"https://127.0.0.1:53682/cb":      false, // the scheme as registered
		"http://127.0.0.1:9090/fixed":     false, // a registered port is kept
		"http://127.0.0.2:53682/cb":       false,
		"https://app.example.edu:8443/cb": false,
		"http://127.0.0.1:/cb":            false,
		"http://127.0.0.1:53682/cb#":      false, // an empty fragment: the code would go after it
		"http://[::1]:53682/cb#":          false,
		"http://localhost:1/cb?x=1#":      false,
		"HTTP://127.0.0.1:53682/cb":       false,
	} {
		if got := oauth.Registered(reg, uri); got != want {
			t.Errorf("Registered(%q) = %v, want %v", uri, got, want)
		}
	}
}

// TestAttemptOfARequestOverIsCounted: an attempt whose request is over (its time ran out under
// load, or its client half-closed the connection, which ends the request's context at once) is
// counted all the same, never checked uncounted: hundreds of guesses sent at once made the
// server slow enough for most of them to pass the lock that way (200 at once under the race
// detector: 101 passwords checked against a lock after 30).
func TestAttemptOfARequestOverIsCounted(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	failures, err := natskv.OpenCache(ctx, js, "failures", time.Hour, 1, 100, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(failures.Close)
	g := &oauth.Guard{BruteForce: oauth.BruteForce{Failures: 30, WaitIncrement: time.Minute, MaxWait: time.Hour,
		QuickLoginCheck: time.Millisecond, FailureReset: time.Hour}, Failures: failures, Logger: slog.New(slog.DiscardHandler), Now: time.Now}
	over, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 30 {
		if g.UserAttempt(over, "2020000001") {
			t.Fatalf("attempt %d is locked", i+1)
		}
	}
	if !g.UserAttempt(ctx, "2020000001") {
		t.Error("after 30 attempts of requests that were over, the 31st is not locked: they went uncounted")
	}
}

// TestRateLimitsHoldForARequestOutOfTime: a token request or sign-in whose request context is
// over (its deadline passed under load, or its client half-closed the connection) does not pass
// the rate limits or the slowing of an address uncounted: that is not NATS being away. Each
// replica here is a Guard of its own over the same bucket, as two front ends.
func TestRateLimitsHoldForARequestOutOfTime(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	kv, err := natskv.OpenCounters(ctx, js, "limits", time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	replica := func() *oauth.Guard {
		return &oauth.Guard{
			Limits:     oauth.RateLimits{PerAddress: 0.001, PerAddressBurst: 1, PerClient: 0.001, PerClientBurst: 1},
			BruteForce: oauth.BruteForce{Disabled: true, AddressFailures: 0.001, AddressFailureBurst: 1},
			Buckets:    natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{}),
			Logger:     slog.New(slog.DiscardHandler), Now: time.Now,
		}
	}
	a, b := replica(), replica()
	over, cancel := context.WithCancel(ctx)
	cancel()
	const addr = "192.0.2.7"
	client := &oauth.Client{ID: "app"}
	// Each limit allows one, taken by a live request at replica a.
	if e := a.AllowAddress(ctx, addr); e != nil {
		t.Fatal(e)
	}
	if e := a.AllowClient(ctx, client); e != nil {
		t.Fatal(e)
	}
	if e := a.AddressFailed(ctx, addr); e != nil {
		t.Fatal(e)
	}
	passed := map[string]int{}
	for range 20 {
		for _, g := range []*oauth.Guard{a, b} {
			if g.AllowAddress(over, addr) == nil {
				passed["AllowAddress"]++
			}
			if g.AllowClient(over, client) == nil {
				passed["AllowClient"]++
			}
			if g.AddressFailed(over, addr) == nil {
				passed["AddressFailed"]++
			}
		}
	}
	if b.Slowed(over, addr) == nil {
		passed["Slowed"]++
	}
	for what, n := range passed {
		t.Errorf("%s: %d requests whose context was over passed a limit of 1 (used up)", what, n)
	}
	if b.AllowAddress(ctx, addr) == nil || b.Slowed(ctx, addr) == nil {
		t.Error("the live request passed too")
	}
}

// TestSlowSharedRecordsRefuseAwayOnesAllow: NATS too slow to count an attempt or a token request
// within the request's time refuses them (guesses sent at once by the hundred made the server
// that slow, and passed the lock uncounted); NATS away (the connection down) lets them through,
// as an outage must not stop sign-ins.
func TestSlowSharedRecordsRefuseAwayOnesAllow(t *testing.T) {
	proxy := embeddedtest.NewProxy(t, strings.TrimPrefix(embeddedtest.NATS(t), "nats://"))
	// As the programs connect: while the connection is down, a request fails at once rather
	// than waiting in a buffer for the connection to come back.
	nc, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr(), nats.ReconnectBufSize(-1), nats.MaxReconnects(-1))
	ctx := context.Background()
	failures, err := natskv.OpenCache(ctx, js, "failures", time.Hour, 1, 100, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(failures.Close)
	kv, err := natskv.OpenCounters(ctx, js, "limits", time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	g := &oauth.Guard{BruteForce: oauth.BruteForce{Failures: 30, WaitIncrement: time.Minute, MaxWait: time.Hour,
		QuickLoginCheck: time.Millisecond, FailureReset: time.Hour}, Failures: failures,
		Limits:  oauth.RateLimits{PerAddress: 1000, PerAddressBurst: 1000},
		Buckets: natskv.NewTokenBuckets(kv, natskv.TokenBucketsConfig{}),
		Logger:  slog.New(slog.DiscardHandler), Now: time.Now}
	if g.UserAttempt(ctx, "2020000001") || g.AllowAddress(ctx, "192.0.2.7") != nil {
		t.Fatal("refused with NATS quick")
	}
	proxy.SetDelay(3 * time.Second)
	if !g.UserAttempt(ctx, "2020000001") {
		t.Error("an attempt NATS was too slow to count is let through to the password's check")
	}
	if g.AllowAddress(ctx, "192.0.2.7") == nil {
		t.Error("a token request NATS was too slow to count passes the limit")
	}
	proxy.SetDelay(0)
	proxy.SetDown(true)
	embeddedtest.Eventually(t, 10*time.Second, "the connection down", func() bool { return !nc.IsConnected() })
	if g.UserAttempt(ctx, "2020000001") || g.AllowAddress(ctx, "192.0.2.7") != nil {
		t.Error("with NATS away, sign-ins are refused: an outage must not stop them")
	}
}
