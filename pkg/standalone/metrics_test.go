package standalone_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestStandaloneMetricsShowWorkers: the standalone process is a front end with workers inside,
// and its /metrics shows both: a delivered push moves the front end's series and the
// in-process workers' ones (deliveries, their duration, the platform's answers).
func TestStandaloneMetricsShowWorkers(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	t.Cleanup(s.Close)
	info := readInfo(t, dir)
	base := info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	id := pushTo(t, base, tok, standalone.DemoUsers[0], todo)
	if st := final(t, base, tok, id); st != "delivered" {
		t.Fatalf("push %s: %s", id, st)
	}
	value := func(body []byte, series string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	scrape := func() []byte {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	// The worker counts its outcome as it records it: poll until the scrape shows it.
	embeddedtest.Eventually(t, 10*time.Second, "the in-process worker's delivery in /metrics", func() bool {
		return value(scrape(), `ucs_deliveries_total{outcome="sent"}`) >= 1
	})
	body := scrape()
	for series, atLeast := range map[string]float64{
		"ucs_push_accepted_total":                            1,
		"ucs_delivery_seconds_count":                         1,
		"ucs_platform_request_seconds_count":                 1,
		"ucs_dead_letters_total":                             0,
		"ucs_sending_paused":                                 0,
		`ucs_token_grants_total{grant="client_credentials"}`: 1,
	} {
		if v := value(body, series); v < atLeast {
			t.Errorf("%s = %v, want at least %v", series, v, atLeast)
		}
	}
}
