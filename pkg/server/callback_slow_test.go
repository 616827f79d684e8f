package server_test

import (
	"net/http"
	"testing"
	"time"
)

// TestCallbackAnsweredWithin5sWhileNATSSlow: the platform waits 5 s for a callback's answer and
// pushes again a callback it got none for. With every answer of NATS held back 2.6 s, recording
// the callback's pair and keeping its event take longer than that together: the answer (a 503,
// the event not kept) still comes within 5 s.
func TestCallbackAnsweredWithin5sWhileNATSSlow(t *testing.T) {
	e, proxy := newEnvBehindProxy(t)
	const delay = 2600 * time.Millisecond
	proxy.SetDelay(delay)
	start := time.Now()
	a := e.callback(e.plainQuery(cbToken, "slow"), followEvent("oA", "unsubscribe", e.clock.Now().Unix()))
	took := time.Since(start)
	proxy.SetDelay(0)
	if took >= 5*time.Second {
		t.Errorf("NATS answers held back %s: the callback was answered %d after %s; the platform stops waiting at 5 s", delay, a.status, took)
	}
	if a.status != http.StatusOK && (a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "") {
		t.Errorf("the callback's answer: %d %s", a.status, a.body)
	}
}
