package delivery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
)

// TestPauseExplainedInTheServicesZone: a message held by the platform's per-minute limit (45011)
// says until when in its lastError, which a lookup answers: in the service's time zone
// (Config.Location, from time_zone), as every other time the service shows, whatever the
// process's own zone (the shipped image's is UTC).
func TestPauseExplainedInTheServicesZone(t *testing.T) {
	_, off := time.Now().Zone()
	zone := time.FixedZone("service", off+5*3600+30*60) // not the process's zone
	r := newRig(t)
	ctx := context.Background()
	p := r.openPause()
	sender := &refusingSender{Sender: r.pc, refuse: true, code: platform.CodeMinuteQuota,
		msg: "api minute-quota reach limit  mush slower  retry next minute"}
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Pause, c.Platform, c.QuotaReset, c.Location = p, sender, quotaInAnHour, zone
	})
	id := r.publish("u-follows", "JML", jml)
	var last string
	embeddedtest.Eventually(t, 10*time.Second, "the message held by the 45011 pause", func() bool {
		res, err := r.st.Current(ctx, id)
		last = res.LastError
		return err == nil && res.State == push.StateQueued && strings.Contains(res.LastError, "paused until")
	})
	st, _ := p.Paused()
	if want := st.Until.In(zone).Format(time.RFC3339); !strings.HasSuffix(last, "paused until "+want) {
		t.Fatalf("lastError %q: want the pause's end in the service's zone, %s", last, want)
	}
}
