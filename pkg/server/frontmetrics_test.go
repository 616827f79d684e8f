package server_test

import (
	"regexp"
	"testing"
)

// TestFrontEndExportsItsOwnSeries: a front end exports what it does, not the workers' series
// that would always read 0 there.
func TestFrontEndExportsItsOwnSeries(t *testing.T) {
	e := newEnv(t)
	body := e.do("GET", "/metrics", "", "", "").body
	for _, name := range []string{"ucs_deliveries_total", "ucs_delivery_failures_total", "ucs_delivery_seconds",
		"ucs_platform_request_seconds", "ucs_platform_errors_total", "ucs_dead_letters_total", "ucs_sending_paused"} {
		if regexp.MustCompile(`(?m)^# (HELP|TYPE) ` + name + ` `).Match(body) {
			t.Errorf("the front end exports %s, a worker's series", name)
		}
	}
	for _, name := range []string{"ucs_push_accepted_total", "ucs_security_events_total", "ucs_consumer_pending"} {
		if !regexp.MustCompile(`(?m)^# HELP ` + name + ` `).Match(body) {
			t.Errorf("the front end does not export %s", name)
		}
	}
}
