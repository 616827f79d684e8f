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

// otherZone is a time zone whose offset now is not the process's, and its location.
func otherZone(t *testing.T) (string, *time.Location) {
	t.Helper()
	zone := "Asia/Tokyo"
	if _, off := time.Now().Zone(); off == 9*3600 {
		zone = "America/Sao_Paulo"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return zone, loc
}

// checkCreatedShownIn creates client id with `api admin args… clients create`, and checks that
// `clients show` prints its creation time as read in loc.
func checkCreatedShownIn(t *testing.T, loc *time.Location, id string, args ...string) {
	t.Helper()
	before := time.Now()
	mustRun(t, append(args, "clients", "create", id, "-scopes", "notification.mp")...)
	o := mustRun(t, append(args, "clients", "show", id)...)
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
			created, d.Round(time.Minute), loc, before.In(loc).Format(time.DateTime))
	}
}

// TestTimesShownInTheServicesZone: `api admin clients show` prints a client's times in the
// service's time zone (time_zone), as the service shows every time, whatever the zone of the
// terminal it runs in (kubectl exec into the shipped image: UTC).
func TestTimesShownInTheServicesZone(t *testing.T) {
	st := runningStack(t)
	zone, loc := otherZone(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("time_zone: "+zone+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkCreatedShownIn(t, loc, "zone-check", "-config", cfg, "-data", st.DataDir)
}

// TestDataOnlyShowsTheStacksZone: a standalone stack started with time_zone set (api
// -standalone -config FILE -data DIR) shows its times in that zone; `api admin -data DIR`, as the
// operations guide runs it, prints a client's times in the stack's zone too, not the default.
func TestDataOnlyShowsTheStacksZone(t *testing.T) {
	zone, loc := otherZone(t)
	cfg := &config.Config{TimeZone: zone}
	cfg.OAuth.BruteForce.Disabled = true
	st, err := standalone.Start(context.Background(), standalone.Options{
		DataDir: t.TempDir(), Config: cfg, Listen: "127.0.0.1:0", Workers: 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	checkCreatedShownIn(t, loc, "zone-stack", "-data", st.DataDir)
}
