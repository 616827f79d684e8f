package delivery_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// tokenRejectedWithoutNew starts a worker (with the shared pause and dead letters) whose
// platform, once broken is set, rejects the access token it holds at every send (40001: the
// token was invalidated) and answers the token endpoint with tokenAnswer (nil: the platform's
// own answers, new tokens the sends then reject as well). A first push is sent
// with the good token before broken is set; the push returned is published after. tokenCalls
// counts the calls of the token endpoint while broken.
func (r *rig) tokenRejectedWithoutNew(t *testing.T, tokenAnswer func(w http.ResponseWriter)) (id string, broken *atomic.Bool, p *sending.Pause, tokenCalls *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	broken, tokenCalls = &atomic.Bool{}, &atomic.Int64{}
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !broken.Load() {
			return false
		}
		if strings.Contains(req.URL.Path, "token") {
			tokenCalls.Add(1)
			if tokenAnswer == nil {
				return false // the platform's token endpoint answers: new tokens, rejected too
			}
			tokenAnswer(w)
			return true
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest rid: 1"}`))
		return true
	})
	p = r.openPause()
	dl, err := queue.EnsureDeadLetters(ctx, r.js, r.qcfg)
	if err != nil {
		t.Fatal(err)
	}
	policy := delivery.RetryPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2, MaxAttempts: 3}
	r.startWorkerWith(policy, func(c *delivery.Config) {
		c.Platform, c.Pause, c.QuotaReset, c.TokenPauseFor = pc, p, quotaInAnHour, 100*time.Millisecond
		c.DeadLetter = dl.Copy
	})
	r.waitState(r.publish("u-follows", "JML", jml), push.StateSent)
	broken.Store(true)
	return r.publish("u-follows", "JML", jml), broken, p, tokenCalls
}

// deadLetters counts the messages of the dead-letter stream.
func (r *rig) deadLetters(t *testing.T) uint64 {
	t.Helper()
	s, err := r.js.Stream(context.Background(), queue.DeadLetterStream(r.qcfg.Stream))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestRejectedTokenSendsLater: the platform rejects the access token a worker holds (40001),
// and then either its token endpoint fails (502), or it hands out a new token that it rejects
// too (something else invalidates the account's tokens). No message can be sent until a token
// is had and taken again, which is no message's doing: each waits without spending an attempt
// (through more tries than max_attempts), none fails or is dead-lettered, and each is sent with
// its first attempt once the tokens work.
func TestRejectedTokenSendsLater(t *testing.T) {
	for _, c := range []struct {
		name        string
		tokenAnswer func(w http.ResponseWriter) // nil: the platform's, new tokens rejected too
		tokenCalls  int64
		lastError   string
	}{
		{"no new token", func(w http.ResponseWriter) { http.Error(w, "bad gateway", http.StatusBadGateway) }, 9, "no access token"},
		{"new token rejected", nil, 2, "a new access token rejected too"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			ctx := context.Background()
			id, broken, _, tokenCalls := r.tokenRejectedWithoutNew(t, c.tokenAnswer)
			before := r.sim.Stats().Sends
			embeddedtest.Eventually(t, 30*time.Second, "the push held without an attempt", func() bool {
				res, err := r.st.Current(ctx, id)
				if err == nil && res.State.Final() {
					t.Fatalf("the push ended %s after %d attempts: %q", res.State, res.Attempts, res.Reason)
				}
				return tokenCalls.Load() >= c.tokenCalls && err == nil && res.State == push.StateQueued && res.Attempts == 0 &&
					strings.Contains(res.LastError, c.lastError)
			})
			if n := r.deadLetters(t); n != 0 {
				t.Fatalf("%d dead letters while no token could be used", n)
			}
			broken.Store(false)
			if res := r.waitState(id, push.StateSent); res.Attempts != 1 || r.sim.Stats().Sends != before+1 {
				t.Fatalf("sent with %d attempts after %d sends, want 1 and 1", res.Attempts, r.sim.Stats().Sends-before)
			}
		})
	}
}

// TestRejectedTokenWithWrongSecretPausesForTheOperator: as above, but the token endpoint
// answers 40125 (platform.secret is no longer the account's AppSecret: an administrator reset
// it). That is a problem of the account: sending pauses for every worker, with the operator's
// action, as when the token endpoint says so first, and the push waits without an attempt.
func TestRejectedTokenWithWrongSecretPausesForTheOperator(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id, _, p, _ := r.tokenRejectedWithoutNew(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"errcode":40125,"errmsg":"invalid appsecret rid: 2"}`))
	})
	embeddedtest.Eventually(t, 10*time.Second, "sending paused for the operator, the push held without an attempt", func() bool {
		st, paused := p.Paused()
		res, err := r.st.Current(ctx, id)
		return paused && strings.HasPrefix(st.Reason, "40125") && st.Action != "" &&
			err == nil && res.State == push.StateQueued && res.Attempts == 0
	})
	if n := r.deadLetters(t); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// TestRejectedTokenSendCounted: the platform rejects the access token a worker holds
// (40001) and its token endpoint then fails. Each try makes one real template send, which the
// platform refuses with 40001; ucs_platform_errors_total{errcode} counts "sends the platform
// refused, by errcode", and ucs_platform_request_seconds "one template send to the platform"
// (deployments/README.md): each refused send counts there, though the message spends no
// attempt on it.
func TestRejectedTokenSendCounted(t *testing.T) {
	r := newRig(t)
	m := metrics.NewWorker(prometheus.NewRegistry())
	broken := &atomic.Bool{}
	rejected := &atomic.Int64{}
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !broken.Load() {
			return false
		}
		if strings.Contains(req.URL.Path, "token") {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return true
		}
		rejected.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest rid: 1"}`))
		return true
	})
	r.countCalls(m)
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Platform, c.Metrics, c.TokenPauseFor = pc, m, 50*time.Millisecond
	})
	r.waitState(r.publish("u-follows", "JML", jml), push.StateSent)
	okSends := histogramCount(t, m)
	broken.Store(true)
	r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "3 template sends refused with 40001", func() bool {
		return rejected.Load() >= 3
	})
	broken.Store(false) // no more refusals from here on: the counts below are stable
	n := rejected.Load()
	embeddedtest.Eventually(t, 5*time.Second, "each refused send counted", func() bool {
		errs, observed := testutil.ToFloat64(m.PlatformErrors.WithLabelValues("40001")), histogramCount(t, m)-okSends
		if errs > 0 && observed >= n && errs >= float64(n) {
			return true
		}
		t.Logf("%d template sends refused with 40001; ucs_platform_errors_total{errcode=\"40001\"} = %v, ucs_platform_request_seconds observed %d", n, errs, observed)
		return false
	})
}

// TestRejectedTokenThenSentCountsTwoCalls: the platform rejects the access token a worker
// holds (40001) once, the worker fetches a new one and the send made again with it is taken.
// That is two template sends, one refused: ucs_platform_request_seconds observes both and
// ucs_platform_errors_total{errcode="40001"} counts the refusal, which tells the operator that
// something else fetches the account's tokens.
func TestRejectedTokenThenSentCountsTwoCalls(t *testing.T) {
	r := newRig(t)
	m := metrics.NewWorker(prometheus.NewRegistry())
	rejectNext := &atomic.Bool{}
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if strings.Contains(req.URL.Path, "token") || !rejectNext.CompareAndSwap(true, false) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest rid: 1"}`))
		return true
	})
	r.countCalls(m)
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.Metrics = pc, m })
	r.waitState(r.publish("u-follows", "JML", jml), push.StateSent)
	okSends := histogramCount(t, m)
	rejectNext.Store(true)
	if res := r.waitState(r.publish("u-follows", "JML", jml), push.StateSent); res.Attempts != 1 {
		t.Fatalf("sent with %d attempts, want 1", res.Attempts)
	}
	errs, observed := testutil.ToFloat64(m.PlatformErrors.WithLabelValues("40001")), histogramCount(t, m)-okSends
	if errs != 1 || observed != 2 {
		t.Fatalf("a send refused with 40001 and made again with a new token: ucs_platform_errors_total{errcode=\"40001\"} = %v, "+
			"ucs_platform_request_seconds observed %d; want 1 and 2", errs, observed)
	}
}

func histogramCount(t *testing.T, m *metrics.Metrics) int64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	m.PlatformSeconds.Collect(ch)
	var d dto.Metric
	if err := (<-ch).Write(&d); err != nil {
		t.Fatal(err)
	}
	return int64(d.GetHistogram().GetSampleCount())
}
