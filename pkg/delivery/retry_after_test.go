package delivery_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
)

// limitingGateway is a gateway in front of the rig's simulator (an egress API gateway, or the
// platform's own front) that answers the template send endpoint with status and
// Retry-After: retryAfter while limiting is set; everything else passes through.
type limitingGateway struct {
	limiting atomic.Bool
	mu       sync.Mutex
	limited  []time.Time // the calls of the send endpoint answered status
}

func (r *rig) limitingGateway(status int, retryAfter string) (*limitingGateway, string) {
	r.t.Helper()
	simSrv := httptest.NewServer(r.sim.Handler())
	r.t.Cleanup(simSrv.Close)
	target, _ := url.Parse(simSrv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	g := &limitingGateway{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/cgi-bin/message/template/send" {
			g.mu.Lock()
			lim := g.limiting.Load()
			if lim {
				g.limited = append(g.limited, time.Now())
			}
			g.mu.Unlock()
			if lim {
				w.Header().Set("Retry-After", retryAfter)
				w.WriteHeader(status)
				return
			}
		}
		proxy.ServeHTTP(w, req)
	}))
	r.t.Cleanup(srv.Close)
	return g, srv.URL
}

// TestRetryAfterIsObeyed: the platform, or a gateway in front of it, answers sends 429 Too
// Many Requests, or 503 Service Unavailable, with Retry-After: 3, for 3 s. The workers wait
// that long before calling again (RFC 9110 §10.2.3, RFC 6585 §4), all of them (the pause of
// sending), and a wait asked of every caller, not the message's doing, spends none of its
// attempts: once it ends, the message is sent. They called again after each message's own
// backoff, and gave a message up after max_attempts within the 3 s.
func TestRetryAfterIsObeyed(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			r := newRig(t)
			g, base := r.limitingGateway(status, "3")
			r.pc = r.platformAt(base)
			g.limiting.Store(true)
			time.AfterFunc(3*time.Second, func() { g.limiting.Store(false) })
			p := r.openPause()
			r.runWorker(delivery.RetryPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2, MaxAttempts: 5},
				func(c *delivery.Config) { c.Pause, c.QuotaReset = p, quotaInAnHour })
			id := r.publish("u-follows", "JML", jml)
			var res push.Result
			embeddedtest.Eventually(t, 20*time.Second, "the message sent or given up", func() bool {
				res, _ = r.st.Current(t.Context(), id)
				return res.State == push.StateSent || res.State.Final()
			})
			g.mu.Lock()
			limited := len(g.limited)
			g.mu.Unlock()
			if limited > 1 {
				t.Errorf("the send endpoint was called %d times within the Retry-After of 3 s after its first %d", limited, status)
			}
			if res.State != push.StateSent || res.Attempts != 1 {
				t.Errorf("a message refused %d for 3 s ended %s: %q (attempts %d), want sent at its first counted attempt", status, res.State, res.Reason, res.Attempts)
			}
		})
	}
}
