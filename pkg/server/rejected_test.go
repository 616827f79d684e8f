package server_test

import (
	"strings"
	"testing"
)

// TestPushRejectedCountsEachPushOnce: ucs_push_rejected_total counts each refused push once,
// by the first rule it broke, as its HELP says; an unknown key is unknown_field whether it is
// at the top level or inside data.
func TestPushRejectedCountsEachPushOnce(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	// An emoji and 23 characters: two rules broken, one push refused.
	e.doWith("POST", "/v1/infra/notification/mp", tok, `{"userId":"2020000001","type":"JML","data":{"class":"a","info":"😀`+strings.Repeat("x", 22)+`"}}`, nil)
	e.doWith("POST", "/v1/infra/notification/mp", tok, `{"userId":"2020000001","type":"JML","data":{"class":"a","info":"b","room":"1"}}`, nil)
	e.doWith("POST", "/v1/infra/notification/mp", tok, `{"userId":"2020000001","type":"JML","data":{"class":"a","info":"b"},"room":"1"}`, nil)
	for series, want := range map[string]float64{
		`ucs_push_rejected_total{rule="emoji"}`:         1,
		`ucs_push_rejected_total{rule="length"}`:        -1, // not exported: no push broke it first
		`ucs_push_rejected_total{rule="unknown_field"}`: 2,
		`ucs_push_rejected_total{rule="other"}`:         -1,
	} {
		if v := e.metricValue(series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
	if h := e.do("GET", "/metrics", "", "", "").body; !strings.Contains(string(h), "# HELP ucs_push_rejected_total Pushes refused") ||
		!strings.Contains(string(h), "once per push, by the first rule broken") {
		t.Errorf("the HELP of ucs_push_rejected_total does not say what it counts")
	}
}
