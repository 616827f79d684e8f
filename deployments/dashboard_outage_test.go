package deployments

import (
	"encoding/json"
	"errors"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/campus-it/ucs/pkg/metrics"
)

// TestProcessPanelsSurviveANATSOutage: the dashboard's "Memory" and "Goroutines" panels
// show "each process's memory and goroutines" (README, Monitoring) by joining the Go and
// process collectors with a series of this service. That series must be one each program
// exports whatever NATS does: ucs_consumer_pending, read from NATS at every scrape, reports
// nothing when the read fails (metrics.PendingFunc), and a join on it would blank both panels
// exactly when an operator looks at them.
func TestProcessPanelsSurviveANATSOutage(t *testing.T) {
	var dash map[string]any
	if err := json.Unmarshal(readFile(t, dashboardFile), &dash); err != nil {
		t.Fatal(err)
	}
	natsDown := func() (float64, error) { return 0, errors.New("nats: connection closed") }
	programs := map[string]func(*prometheus.Registry) *metrics.Metrics{
		"front end": metrics.NewFrontEnd, "worker": metrics.NewWorker, "standalone": metrics.New,
	}
	exported := map[string]map[string]bool{}
	for name, build := range programs {
		reg := prometheus.NewRegistry()
		build(reg)
		metrics.PendingFunc(reg, natsDown)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		exported[name] = map[string]bool{}
		for _, mf := range mfs {
			exported[name][mf.GetName()] = true
		}
	}
	join := regexp.MustCompile(`\band\s+on\s*\([^)]*\)\s*(.*)$`)
	checked := 0
	for _, p := range dashboardPanels(dash["panels"]) {
		for _, tg := range list(p["targets"]) {
			expr := str(dig(tg, "expr"))
			m := join.FindStringSubmatch(expr)
			if m == nil {
				continue
			}
			checked++
			right := promMetrics(m[1])
			for prog, names := range exported {
				ok := false
				for _, n := range right {
					ok = ok || names[n]
				}
				if !ok {
					t.Errorf("panel %q: %q keeps a %s's series only while it exports %v, which it does not while NATS cannot be read: the panel shows nothing for any process during a NATS outage",
						str(p["title"]), expr, prog, right)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no panel joins the runtime series on a series of this service: the panels would show every Go program of the job")
	}
}
