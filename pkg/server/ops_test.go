package server_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
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
		`ucs_push_rejected_total{rule="length"}`:             1,
		`ucs_push_rejected_total{rule="emoji"}`:              1,
		"ucs_consumer_pending":                               3,
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
