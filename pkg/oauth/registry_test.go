package oauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

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

// TestAttemptOutOfTimeCountsAsLocked: an attempt whose request ran out of time (or whose client
// left) before the shared record counted it is refused as locked, never checked uncounted:
// hundreds of guesses sent at once made the server slow enough for most of them to pass the
// lock that way (200 at once under the race detector: 101 passwords checked against a lock
// after 30). NATS answering with an error while the request still has time does not lock (an
// outage must not stop sign-ins).
func TestAttemptOutOfTimeCountsAsLocked(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	failures, err := natskv.OpenCache(ctx, js, "failures", time.Hour, 1, 100, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(failures.Close)
	g := &oauth.Guard{BruteForce: oauth.BruteForce{Failures: 30, WaitIncrement: time.Minute, MaxWait: time.Hour,
		QuickLoginCheck: time.Millisecond, FailureReset: time.Hour}, Failures: failures, Logger: slog.New(slog.DiscardHandler), Now: time.Now}
	if g.UserAttempt(ctx, "2020000001") {
		t.Fatal("the first attempt is locked")
	}
	over, cancel := context.WithCancel(ctx)
	cancel()
	if !g.UserAttempt(over, "2020000001") {
		t.Error("an attempt whose request is over, not counted, is let through to the password's check")
	}
}
