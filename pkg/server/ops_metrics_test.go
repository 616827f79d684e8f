package server_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// redteamPanels returns every panel of a Grafana dashboard, those inside rows included.
func redteamPanels(v any) []map[string]any {
	var out []map[string]any
	ps, _ := v.([]any)
	for _, p := range ps {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		out = append(out, pm)
		out = append(out, redteamPanels(pm["panels"])...)
	}
	return out
}

// TestDashboardShowsFrontEndMemory: the Grafana dashboard shows each process's memory and
// goroutines (deployments/README.md). Its Memory and Goroutines panels keep the series of the
// processes that export a given ucs_* metric ("… and on (job, instance) M"), and its job variable
// lists label_values(M, job): M must be one that a front end exports too.
func TestDashboardShowsFrontEndMemory(t *testing.T) {
	e := newEnv(t)
	scrape := e.do("GET", "/metrics", "", "", "").body
	exports := func(name string) bool {
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `[ {]`).Match(scrape)
	}
	raw, err := os.ReadFile("../../deployments/grafana/ucs-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	andOn := regexp.MustCompile(`^\s*([a-z_:][a-z0-9_:]*)\{[^}]*\}\s+and\s+on\s*\([^)]*\)\s*([a-z_:][a-z0-9_:]*)`)
	checked := 0
	for _, p := range redteamPanels(dash["panels"]) {
		targets, _ := p["targets"].([]any)
		for _, tg := range targets {
			expr, _ := tg.(map[string]any)["expr"].(string)
			m := andOn.FindStringSubmatch(expr)
			if m == nil {
				continue
			}
			checked++
			if exports(m[1]) && !exports(m[2]) {
				t.Errorf("panel %q: %q keeps only processes that export %s; the front end exports %s but not %s, "+
					"so the api's series never show: want every process's %s on the panel", p["title"], expr, m[2], m[1], m[2], m[1])
			}
		}
	}
	if checked == 0 {
		t.Log("no panel filters processes with 'and on'")
	}
	vars, _ := dash["templating"].(map[string]any)["list"].([]any)
	labelValues := regexp.MustCompile(`label_values\(\s*([a-z_:][a-z0-9_:]*)\s*,\s*job\s*\)`)
	for _, v := range vars {
		vm := v.(map[string]any)
		def, _ := vm["definition"].(string)
		if m := labelValues.FindStringSubmatch(def); m != nil && !exports(m[1]) {
			t.Errorf("variable %q is %q: the front end does not export %s, so a scrape job of api pods is not listed "+
				"(want a metric every ucs process exports, e.g. ucs_consumer_pending); front end ucs_* series: %s",
				vm["name"], def, m[1], strings.Join(ucsNames(scrape), ", "))
		}
	}
}

func ucsNames(scrape []byte) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (ucs_[a-z0-9_]+) `).FindAllSubmatch(scrape, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// TestOversizePushCountedAsRejected: ucs_push_rejected_total{rule} counts pushes refused, each
// once, by the first rule they broke, rule "body" being the body as a whole (size, UTF-8, JSON):
// a single push over 65536 bytes (413) counts as the same push as a batch item does.
func TestOversizePushCountedAsRejected(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	big := `{"userId":"2020000001","type":"JML","data":{"class":"a","info":"b"},"url":"https://x.example.edu/` + strings.Repeat("a", 70000) + `"}`
	b := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, `{"messages":[`+big+`]}`, nil)
	if v := e.metricValue(`ucs_push_rejected_total{rule="body"}`); v != 1 {
		t.Fatalf(`the oversize push as a batch item (%d): ucs_push_rejected_total{rule="body"} = %v, want 1`, b.status, v)
	}
	a := e.doWith("POST", "/v1/infra/notification/mp", tok, big, nil)
	if a.status != 413 {
		t.Fatalf("oversize push: %d %s, want 413", a.status, a.body)
	}
	if v := e.metricValue(`ucs_push_rejected_total{rule="body"}`); v != 2 {
		t.Fatalf(`after the same push as a batch item (counted) and alone (413): ucs_push_rejected_total{rule="body"} = %v, want 2`, v)
	}
}
