package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/sending"
)

// metricValue reads one sample of the Prometheus text at /metrics; -1 when it is absent.
func (e *env) metricValue(series string) float64 {
	e.t.Helper()
	a := e.do("GET", "/metrics", "", "", "")
	if a.status != 200 {
		e.t.Fatalf("/metrics: %d", a.status)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(a.body)
	if m == nil {
		return -1
	}
	var v float64
	if _, err := fmt.Sscan(string(m[1]), &v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

// TestFrontEndMetrics checks that each front-end metric moves when its event happens.
func TestFrontEndMetrics(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	if v := e.metricValue(`ucs_token_grants_total{grant="client_credentials"}`); v != 1 {
		t.Errorf("token grants: %v", v)
	}
	if v := e.metricValue("ucs_push_accepted_total"); v != 0 {
		t.Errorf("accepted before any push: %v", v)
	}
	e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), nil)
	e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(2), badItem, goodItemN(3)), nil)
	e.doWith("POST", "/v1/infra/notification/mp", tok, `{"userId":"2020000001","type":"JML","data":{"class":"😀","info":"x"}}`, nil)
	for series, want := range map[string]float64{
		"ucs_push_accepted_total":                            3,
		`ucs_push_rejected_total{rule="length"}`:             1, // the batch's bad item
		`ucs_push_rejected_total{rule="emoji"}`:              1,
		"ucs_consumer_pending":                               3, // every push waits until a worker finishes it
		"ucs_push_idempotent_replays_total":                  0,
		`ucs_token_grants_total{grant="client_credentials"}`: 1,
	} {
		if v := e.metricValue(series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
	key := map[string]string{"Idempotency-Key": "k1"}
	e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(4), key)
	e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(4), key)
	if v := e.metricValue("ucs_push_idempotent_replays_total"); v != 1 {
		t.Errorf("replays: %v", v)
	}
	if v := e.metricValue("go_goroutines"); v <= 0 {
		t.Errorf("the Go runtime collector is missing: go_goroutines %v", v)
	}
}

// TestReadyWhenNATSStops: /readyz answers 200 while NATS and MongoDB answer, and 503 naming
// NATS once it stops, while /healthz (the process is alive) stays 200.
func TestReadyWhenNATSStops(t *testing.T) {
	e := newEnv(t)
	if a := e.do("GET", "/readyz", "", "", ""); a.status != 200 {
		t.Fatalf("/readyz: %d %s", a.status, a.body)
	}
	e.nats.Shutdown()
	embeddedtest.Eventually(t, 10*time.Second, "/readyz fails", func() bool {
		return e.do("GET", "/readyz", "", "", "").status == 503
	})
	a := e.do("GET", "/readyz", "", "", "")
	if msg, _ := a.json(t)["msg"].(string); !strings.HasPrefix(msg, "nats") {
		t.Errorf("/readyz names %q, want nats", msg)
	}
	if a := e.do("GET", "/healthz", "", "", ""); a.status != 200 {
		t.Errorf("/healthz: %d", a.status)
	}
}

// TestLookupWhilePaused: while sending is paused for the platform's daily quota, a push
// waiting in the queue reads queued with the pause's reason and end.
func TestLookupWhilePaused(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	id := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), nil).json(t)["data"].(map[string]any)["ucsId"].(string)
	p, err := sending.OpenPause(context.Background(), e.js, 1, e.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	until := e.clock.Now().Add(3 * time.Hour)
	if err := p.Set(context.Background(), sending.PauseState{Until: until, Reason: "45009: the platform's daily quota is used up"}); err != nil {
		t.Fatal(err)
	}
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	var d map[string]any
	embeddedtest.Eventually(t, 5*time.Second, "the lookup names the pause", func() bool {
		d = e.do("GET", "/v1/infra/notification/mp/"+id, "", tok, "").json(t)["data"].(map[string]any)
		return d["lastError"] != nil
	})
	if d["state"] != "queued" || !strings.HasPrefix(d["lastError"].(string), "45009") || d["nextAttemptAt"] != until.In(shanghai).Format("2006-01-02 15:04:05.000") {
		t.Errorf("queued while paused: %v", d)
	}
	if err := p.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the lookup no longer names the pause", func() bool {
		d = e.do("GET", "/v1/infra/notification/mp/"+id, "", tok, "").json(t)["data"].(map[string]any)
		return d["lastError"] == nil && d["state"] == "queued"
	})
}

// TestGracefulStop stops a front end: /readyz fails at once while requests are still served
// for the drain delay, then the listener closes and Serve returns.
func TestGracefulStop(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.api.DrainDelay = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.api.Serve(ctx, ln) }()
	e.url = "http://" + ln.Addr().String()
	embeddedtest.Eventually(t, 5*time.Second, "ready", func() bool { return e.do("GET", "/readyz", "", "", "").status == 200 })
	cancel()
	embeddedtest.Eventually(t, 5*time.Second, "/readyz fails", func() bool { return e.do("GET", "/readyz", "", "", "").status == 503 })
	if msg := e.do("GET", "/readyz", "", "", "").json(t)["msg"]; msg != "stopping" {
		t.Errorf("/readyz while stopping: %v", msg)
	}
	if a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), nil); a.status != 200 {
		t.Errorf("a push while draining: %d %s", a.status, a.body)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
	}
	if resp, err := http.Get(e.url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("the listener still answers after Serve returned")
	}
}
