package sending_test

import (
	"context"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/sending"
)

// TestLongerPauseStands: two workers meet different refusals at once, the per-minute limit
// (a pause to the next minute) and the daily quota (a pause to the quota's reset). Whichever
// is written last, the longer pause stands, as every worker sees it; a longer one still
// replaces it, and a resume ends any.
func TestLongerPauseStands(t *testing.T) {
	ctx := context.Background()
	url := embeddedtest.NATS(t)
	open := func() *sending.Pause {
		_, js := embeddedtest.JetStreamAt(t, url)
		p, err := sending.OpenPause(ctx, js, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	a, b := open(), open()
	now := time.Now()
	day := sending.PauseState{Until: now.Add(20 * time.Hour), Reason: "45009: the platform's daily quota is used up"}
	minute := sending.PauseState{Until: now.Add(time.Minute), Reason: "45011: the platform's per-minute limit was hit"}
	account := sending.PauseState{Until: now.Add(24 * time.Hour), Reason: "48001: api unauthorized", Action: "enable the feature"}
	seen := func(want sending.PauseState) {
		t.Helper()
		embeddedtest.Eventually(t, 5*time.Second, "every worker sees the pause of "+want.Reason, func() bool {
			for _, p := range []*sending.Pause{a, b} {
				if st, ok := p.Paused(); !ok || st.Reason != want.Reason || !st.Until.Equal(want.Until) {
					return false
				}
			}
			return true
		})
	}
	if err := a.Set(ctx, day); err != nil {
		t.Fatal(err)
	}
	seen(day)
	if err := b.Set(ctx, minute); err != nil {
		t.Fatal(err)
	}
	// Written after the longer one, the shorter changes nothing.
	if st, _ := b.Paused(); st.Reason != day.Reason {
		t.Fatalf("the minute's pause replaced the day's: %+v", st)
	}
	seen(day)
	if err := b.Set(ctx, account); err != nil {
		t.Fatal(err)
	}
	seen(account)
	if err := a.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the resume seen by every worker", func() bool {
		_, pa := a.Paused()
		_, pb := b.Paused()
		return !pa && !pb
	})
}
