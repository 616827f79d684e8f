package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// TestPushRefusedWhileNATSDownIsNotStoredLater: while the front end's connection to NATS
// is down, a push is answered 503 ("the push queue is unavailable; try again later"): it was
// not accepted, and the caller sends it again. It must then not be stored behind the caller's
// back once the connection comes back; otherwise the user gets it twice (the caller's retry
// and the refused one).
func TestPushRefusedWhileNATSDownIsNotStoredLater(t *testing.T) {
	e, proxy := newEnvBehindProxy(t)
	tok := e.token("pusher", pushSecret)
	if n := e.streamPushes(); n != 0 {
		t.Fatalf("stream holds %d before the test", n)
	}

	proxy.SetDown(true)
	embeddedtest.Eventually(t, 10*time.Second, "the front end notices NATS is down", func() bool {
		return e.do("GET", "/readyz", "", "", "").status == 503
	})
	a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), nil)
	if a.status != 503 {
		t.Fatalf("push while NATS is down: %d %s, want 503", a.status, a.body)
	}
	t.Logf("push while NATS is down answered: %d %s", a.status, a.body)

	proxy.SetDown(false)
	embeddedtest.Eventually(t, 15*time.Second, "the front end reconnects", func() bool {
		return e.do("GET", "/readyz", "", "", "").status == 200
	})
	// The caller does what the 503 told it: it sends the push again, once NATS is back.
	retry := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), nil)
	if retry.status != 200 {
		t.Fatalf("the retry: %d %s", retry.status, retry.body)
	}
	// A refused push kept in the connection's reconnect buffer would be stored by now, or
	// within the next seconds: watch for it with a deadline.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && e.streamPushes() < 2 {
		time.Sleep(50 * time.Millisecond) // a span in which nothing may happen
	}
	if n := e.streamPushes(); n != 1 {
		t.Fatalf("one message sent by the caller (refused with 503, then retried and accepted) is stored %d times in the stream: the push answered 503 was stored after NATS came back, and the user gets it %d times", n, n)
	}
}

// TestReadyWhileTheStoreIsDown: with MongoDB down the front end still accepts pushes, so it
// stays ready (every replica shares the store: failing would take them all out of service at
// once), and says in its answer that the store is unavailable.
func TestReadyWhileTheStoreIsDown(t *testing.T) {
	e, proxy := newEnvStoreBehindProxy(t)
	tok := e.token("pusher", pushSecret)
	proxy.SetDown(true)
	a := e.do("GET", "/readyz", "", "", "")
	if a.status != 200 || !strings.Contains(string(a.body), "mongodb: unavailable") {
		t.Fatalf("/readyz with the store down: %d %s", a.status, a.body)
	}
	if p := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), nil); p.status != 200 {
		t.Fatalf("a push with the store down: %d %s", p.status, p.body)
	}
	proxy.SetDown(false)
	if a := e.do("GET", "/readyz", "", "", ""); a.status != 200 || string(a.body) != "ready\n" {
		t.Fatalf("/readyz with the store back: %d %q", a.status, a.body)
	}
}

// newEnvBehindProxy is newEnv with the front end's NATS connection through a proxy the test
// can slow down or cut.
func newEnvBehindProxy(t *testing.T) (*env, *embeddedtest.Proxy) {
	t.Helper()
	var proxy *embeddedtest.Proxy
	e := newEnvWith(t, func(c *config.Config) {
		proxy = embeddedtest.NewProxy(t, strings.TrimPrefix(c.NATS.URL, "nats://"))
		c.NATS.URL = "nats://" + proxy.Addr()
	})
	return e, proxy
}
