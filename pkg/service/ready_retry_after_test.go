package service_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// TestReadyzObeysTokenEndpointRetryAfter: a gateway in front of the token endpoint answers
// 429 with Retry-After: 3600. The worker's delivery pauses itself for that hour (the token
// endpoint's wait is obeyed, as TestTokenEndpointRetryAfterIsObeyed checks); its /readyz, which
// kubelet asks every 10 s, must not call the token endpoint again meanwhile either.
func TestReadyzObeysTokenEndpointRetryAfter(t *testing.T) {
	var tokenCalls atomic.Int64
	h := heldPush(t, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/cgi-bin/stable_token" {
				tokenCalls.Add(1)
				w.Header().Set("Retry-After", "3600")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			inner.ServeHTTP(w, r)
		})
	})
	embeddedtest.Eventually(t, 20*time.Second, "the worker's delivery pauses itself for the token endpoint's 429", func() bool {
		r, err := h.st.Current(context.Background(), h.id)
		return err == nil && strings.Contains(r.LastError, "429")
	})
	before := tokenCalls.Load()
	for range 3 { // 30 s of kubelet's probes
		code, body := probeReadyz(t, h.probes)
		t.Logf("/readyz: %d %q", code, body)
	}
	if n := tokenCalls.Load() - before; n > 0 {
		t.Errorf("the token endpoint asked to wait an hour (429, Retry-After: 3600); /readyz called it %d more times in 3 probes", n)
	}
}
