package admin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestTimesShownInTheServicesZone: `api admin clients show` prints a client's times in the
// service's time zone (time_zone), as the service shows every time, whatever the zone of the
// terminal it runs in (kubectl exec into the shipped image: UTC).
func TestTimesShownInTheServicesZone(t *testing.T) {
	st := runningStack(t)
	zone := "Asia/Tokyo"
	if _, off := time.Now().Zone(); off == 9*3600 {
		zone = "America/Sao_Paulo"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("time_zone: "+zone+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	mustRun(t, "-config", cfg, "-data", st.DataDir, "clients", "create", "zone-check", "-scopes", "notification.mp")
	o := mustRun(t, "-config", cfg, "-data", st.DataDir, "clients", "show", "zone-check")
	var created string
	for l := range strings.Lines(o.stdout) {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "created:"); ok {
			created = strings.TrimSpace(s)
		}
	}
	at, err := time.ParseInLocation(time.DateTime, created, loc)
	if err != nil {
		t.Fatalf("created %q: %v\n%s", created, err, o.stdout)
	}
	if d := at.Sub(before); d < -time.Minute || d > time.Minute {
		t.Fatalf("created shows %q, %s from the creation read in time_zone %s (%s there)",
			created, d.Round(time.Minute), zone, before.In(loc).Format(time.DateTime))
	}
}

// TestDataOnlyShowsTheStacksZone: a standalone stack started with time_zone set (api
// -standalone -config FILE -data DIR) shows its times in that zone; `api admin -data DIR`, as the
// operations guide runs it, prints a client's times in the stack's zone too, not the default.
func TestDataOnlyShowsTheStacksZone(t *testing.T) {
	zone := "Asia/Tokyo"
	if _, off := time.Now().Zone(); off == 9*3600 {
		zone = "America/Sao_Paulo"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{TimeZone: zone}
	cfg.OAuth.BruteForce.Disabled = true
	st, err := standalone.Start(context.Background(), standalone.Options{
		DataDir: t.TempDir(), Config: cfg, Listen: "127.0.0.1:0", Workers: 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	before := time.Now()
	mustRun(t, "-data", st.DataDir, "clients", "create", "zone-stack", "-scopes", "notification.mp")
	o := mustRun(t, "-data", st.DataDir, "clients", "show", "zone-stack")
	var created string
	for l := range strings.Lines(o.stdout) {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "created:"); ok {
			created = strings.TrimSpace(s)
		}
	}
	at, err := time.ParseInLocation(time.DateTime, created, loc)
	if err != nil {
		t.Fatalf("created %q: %v\n%s", created, err, o.stdout)
	}
	if d := at.Sub(before); d < -time.Minute || d > time.Minute {
		t.Fatalf("the stack runs in time_zone %s (%s there now), but `api admin -data` shows created %q (%s off)",
			zone, before.In(loc).Format(time.DateTime), created, d.Round(time.Minute))
	}
}
