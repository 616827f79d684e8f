package admin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
