package delivery_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
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

// TestRetryAfterIsObeyed: the platform's address, or a gateway on the worker's way to it,
// answers sends 429 Too Many Requests, or 503 Service Unavailable, with Retry-After: 3, for 3 s.
// The worker waits that long before calling again (RFC 9110 §10.2.3, RFC 6585 §4), and a wait
// asked of the worker, not the message's doing, spends none of its attempts: once it ends, the
// message is sent. It called again after each message's own backoff, and gave a message up
// after max_attempts within the 3 s.
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

// TestOneWorkersGatewayLimitStopsOnlyIt: each worker reaches the platform through its own
// egress proxy, and worker A's limits it (429, Retry-After: 3600). The platform's own limits are
// errcodes, which pause every worker; a 429 is a gateway's, perhaps of one worker: worker B,
// whose way is clear, sends every push, A's included, rather than every worker waiting an hour.
func TestOneWorkersGatewayLimitStopsOnlyIt(t *testing.T) {
	r := newRig(t)
	gA, baseA := r.limitingGateway(http.StatusTooManyRequests, "3600")
	gA.limiting.Store(true)
	pcA, pcB := r.platformAt(baseA), r.pc
	p := r.openPause()
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.Pause, c.QuotaReset = pcA, p, quotaInAnHour })
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.Pause, c.QuotaReset = pcB, p, quotaInAnHour })
	var ids []string
	for range 10 {
		ids = append(ids, r.publish("u-follows", "JML", jml))
	}
	embeddedtest.Eventually(t, 15*time.Second, "every push sent, by the worker whose way is clear", func() bool {
		for _, id := range ids {
			if res, _ := r.st.Current(t.Context(), id); res.State != push.StateSent || res.Attempts != 1 {
				return false
			}
		}
		return true
	})
	if st, paused := p.Paused(); paused {
		t.Errorf("one worker's gateway limit paused every worker: %+v", st)
	}
}

// TestTokenEndpointRetryAfterIsObeyed: the token endpoint (a gateway in front of it) answers
// 429 with Retry-After: 3. The worker, whose own pause for a token not to be had is shorter
// (100 ms here, 30 s by default), does not call it again within those 3 s.
func TestTokenEndpointRetryAfterIsObeyed(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var calls []time.Time
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "token") {
			return false
		}
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	})
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.TokenPauseFor = pc, 100*time.Millisecond })
	r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "a second call of the token endpoint", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if gap := calls[1].Sub(calls[0]); gap < 3*time.Second-100*time.Millisecond {
		t.Errorf("the token endpoint answered 429 with Retry-After: 3 and was called again %s later", gap.Round(time.Millisecond))
	}
}

// TestLongerAskedWaitExtendsTheWorkersPause: two sends of one worker are under way through its
// gateway at once; the first is answered 503 with Retry-After: 1, the second, a moment later,
// 429 with Retry-After: 3600. The worker's own pause is the hour, not the second that came
// first: the gateway is not called again once the shorter wait has passed.
func TestLongerAskedWaitExtendsTheWorkersPause(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var sends []time.Time // every call of the send API, as it came
	bothIn := make(chan struct{})
	var once sync.Once
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if req.URL.Path != "/cgi-bin/message/template/send" {
			return false
		}
		mu.Lock()
		sends = append(sends, time.Now())
		n := len(sends)
		mu.Unlock()
		switch n {
		case 1:
			<-bothIn // answered once the second call is under way too
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			once.Do(func() { close(bothIn) })
			time.Sleep(300 * time.Millisecond) // answered after the first
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
		return true
	})
	r.publish("u-follows", "JML", jml)
	r.publish("u-follows", "JML", jml)
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.Concurrency = pc, 4 })
	embeddedtest.Eventually(t, 10*time.Second, "both sends under way and answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sends) >= 2
	})
	// The 1 s pause would have ended within this; the hour holds.
	time.Sleep(3 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(sends) > 2 {
		t.Errorf("the gateway asked this worker to wait 3600 s, and it was called again %s after the first call (%d calls)",
			sends[2].Sub(sends[0]).Round(100*time.Millisecond), len(sends))
	}
}
