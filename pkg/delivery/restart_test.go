package delivery_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// cutStore is a store the worker reaches through a proxy the test can cut, and the same store
// read directly.
type cutStore struct {
	proxy  *embeddedtest.Proxy
	direct *store.Store
	ws     *store.Store
}

func newCutStore(t *testing.T) *cutStore {
	t.Helper()
	ctx := context.Background()
	f := embeddedtest.FerretDB(t)
	u, err := url.Parse(f.URI())
	if err != nil {
		t.Fatal(err)
	}
	proxy := embeddedtest.NewProxy(t, u.Host)
	db := embeddedtest.DBName(t)
	direct, err := store.Open(ctx, store.Options{URI: f.URI(), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close(context.Background()) })
	ws, err := store.Open(ctx, store.Options{URI: "mongodb://" + proxy.Addr() + "/?serverSelectionTimeoutMS=300", Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close(context.Background()) })
	if err := direct.PutBinding(ctx, store.Binding{UserID: "u-follows", OpenID: "oFollower", Following: true}); err != nil {
		t.Fatal(err)
	}
	return &cutStore{proxy: proxy, direct: direct, ws: ws}
}

// restartOn starts a second worker (after a rolling restart) on the store read directly.
func (r *rig) restartOn(cs *cutStore, policy delivery.RetryPolicy) {
	wr := cs.direct.NewWriter(store.WriterOptions{})
	r.t.Cleanup(wr.Close)
	r.startWorkerWith(policy, func(c *delivery.Config) {
		c.Store, c.Events = cs.direct, wr
		c.StoreRetry = 100 * time.Millisecond
	})
}

// startOnCut starts a worker that calls the platform through pc and reaches the store through
// cs's proxy; logs holds what it warns of. stop stops it.
func (r *rig) startOnCut(cs *cutStore, pc delivery.Sender, policy delivery.RetryPolicy) (stop func(), logs *embeddedtest.SyncBuffer) {
	logs = &embeddedtest.SyncBuffer{}
	wr := cs.ws.NewWriter(store.WriterOptions{Timeout: 500 * time.Millisecond})
	r.t.Cleanup(wr.Close)
	stop = r.startWorkerWith(policy, func(c *delivery.Config) {
		c.Platform, c.Store, c.Events = pc, cs.ws, wr
		c.StoreRetry, c.TokenPauseFor = 100*time.Millisecond, 100*time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	return stop, logs
}

// platformBehind is a platform client whose requests reach the rig's simulator through
// intercept, which answers a request itself when it returns true.
func (r *rig) platformBehind(intercept func(w http.ResponseWriter, req *http.Request) bool) *platform.Client {
	r.t.Helper()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !intercept(w, req) {
			r.sim.Handler().ServeHTTP(w, req)
		}
	}))
	r.t.Cleanup(front.Close)
	return r.platformAt(front.URL)
}

// tokenRefused is a platform client whose token endpoint answers 502 while down is set; each
// token request calls onToken first (nil: nothing).
func (r *rig) tokenRefused(down *atomic.Bool, onToken func()) *platform.Client {
	return r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "token") {
			return false
		}
		if onToken != nil {
			onToken()
		}
		if !down.Load() {
			return false
		}
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return true
	})
}

// outcomeAfterRestart stops a worker, brings its store back, starts another on the store read
// directly, and returns the push's result once it is sent or final.
func (r *rig) outcomeAfterRestart(cs *cutStore, stop func(), id string) push.Result {
	r.t.Helper()
	stop()
	cs.proxy.SetDown(false)
	r.restartOn(cs, lastOnly)
	var res push.Result
	embeddedtest.Eventually(r.t, 20*time.Second, id+" has an outcome", func() bool {
		var err error
		res, err = cs.direct.Current(context.Background(), id)
		return err == nil && (res.State == push.StateSent || res.State.Final())
	})
	return res
}

// takeBackFailing starts a worker under policy whose platform gives no access token, and whose
// store (cs) goes away with the first refusal, and returns a push's ucsId once taking back its
// attempt has failed to be written; the worker is still trying. tokenDown ends the refusals.
func (r *rig) takeBackFailing(cs *cutStore, policy delivery.RetryPolicy) (id string, stop func(), tokenDown *atomic.Bool) {
	r.t.Helper()
	var tokenCalls atomic.Int64
	tokenDown = &atomic.Bool{}
	tokenDown.Store(true)
	pc := r.tokenRefused(tokenDown, func() {
		if tokenCalls.Add(1) == 1 {
			cs.proxy.SetDown(true)
		}
	})
	stop, logs := r.startOnCut(cs, pc, policy)
	id = r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(r.t, 20*time.Second, "taking the attempt back cannot be written", func() bool {
		return strings.Contains(logs.String(), "recording a call that did not count failed")
	})
	return id, stop, tokenDown
}

var lastOnly = delivery.RetryPolicy{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, MaxAttempts: 1}

// TestAcceptedLastAttemptSentOnRedelivery: the platform accepts a message's last allowed
// attempt, but its worker stops before the store takes the outcome (a store outage during a
// rolling restart). The record says the attempt was under way: its outcome is unknown. The
// worker that gets the message next calls again with the same client_msg_id, which the platform
// answers with the first send's msgid, sending nothing twice: the push ends sent.
func TestAcceptedLastAttemptSentOnRedelivery(t *testing.T) {
	r := newRig(t)
	cs := newCutStore(t)
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "template/send") {
			return false
		}
		// The platform takes the message; the store goes down before the worker hears so.
		rec := httptest.NewRecorder()
		r.sim.Handler().ServeHTTP(rec, req)
		cs.proxy.SetDown(true)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	})
	stop, logs := r.startOnCut(cs, pc, lastOnly)
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "the accepted send's outcome cannot be recorded", func() bool {
		return strings.Contains(logs.String(), "recording an outcome failed")
	})
	if n := r.sim.Stats().Sends; n != 1 {
		t.Fatalf("platform sends before the stop: %d, want 1", n)
	}
	// A rolling restart while the store is away.
	if res := r.outcomeAfterRestart(cs, stop, id); res.State == push.StateFailed {
		t.Fatalf("the platform accepted the message (sends %d, simulator messages to oFollower), yet the push ends %s: %q",
			r.sim.Stats().Sends, res.State, res.Reason)
	}
}

// TestTakeBackInterruptedStillSends: a message's only allowed attempt meets no access token
// (nothing goes to the platform). Taking the attempt back cannot be written (the store is away)
// before the worker stops, so the record says an attempt under way. The next worker takes its
// outcome for unknown and calls: the message is sent, not failed unsent.
func TestTakeBackInterruptedStillSends(t *testing.T) {
	r := newRig(t)
	cs := newCutStore(t)
	id, stop, tokenDown := r.takeBackFailing(cs, lastOnly)
	tokenDown.Store(false)
	if res := r.outcomeAfterRestart(cs, stop, id); res.State == push.StateFailed {
		t.Fatalf("never offered to the platform (sends %d), yet the push ends %s with %d attempts: %q",
			r.sim.Stats().Sends, res.State, res.Attempts, res.Reason)
	}
}
