package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// TestWorkerAnnouncesMetrics: a worker listening on port 0 prints its metrics address in one
// line and writes it next to worker.yaml; the address serves the worker's series, not the
// front end's; the file goes when the worker stops.
func TestWorkerAnnouncesMetrics(t *testing.T) {
	r := newWorkerRig(t)
	var out embeddedtest.SyncBuffer // what run prints, read while it runs
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, options{path: r.cfgPath, listen: "127.0.0.1:0", out: &out}) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			// The test has failed already: wait so the worker stops first, and say how it ended.
			if err := <-done; err != nil {
				t.Logf("the worker stopped: %v", err)
			}
		}
	}()
	file := filepath.Join(filepath.Dir(r.cfgPath), "worker.metrics-url")
	var addr string
	embeddedtest.Eventually(t, 30*time.Second, "worker.metrics-url written", func() bool {
		b, err := os.ReadFile(file)
		addr = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	if !strings.HasPrefix(addr, "http://127.0.0.1:") || !strings.HasSuffix(addr, "/metrics") || strings.HasSuffix(addr, ":0/metrics") {
		t.Fatalf("worker.metrics-url holds %q", addr)
	}
	// Like every file of a standalone stack's data folder, readable by its owner only.
	if fi, err := os.Stat(file); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("worker.metrics-url has mode %v, want 0600", fi.Mode().Perm())
	}
	if got := out.String(); got != "metrics: "+addr+"\n" {
		t.Errorf("printed %q, want one line naming %s", got, addr)
	}
	resp, err := http.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"# HELP ucs_delivery_seconds ", "# HELP ucs_dead_letters_total ", "# HELP ucs_consumer_pending "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the worker's /metrics lacks %q", want)
		}
	}
	for _, not := range []string{"ucs_push_accepted_total", "ucs_token_grants_total", "ucs_security_events_total"} {
		if strings.Contains(string(body), not) {
			t.Errorf("the worker exports %s, a front end's series", not)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("worker.metrics-url left behind after the worker stopped (%v)", err)
	}
}
