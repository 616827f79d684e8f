package pages_test

import (
	"bytes"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/pages"
)

// TestChartGeometry checks the layout of a chart: the y axis is rounded up, a gap splits a
// line, a lone point is drawn as a dot, and the x axis is labelled in the zone the times
// carry (the front end's time_zone).
func TestChartGeometry(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC).In(berlin) // 10:00 in Berlin
	var at []time.Time
	for i := range 5 {
		at = append(at, start.Add(time.Duration(i)*time.Minute))
	}
	c := pages.NewChart("x", "中", "en", at, pages.CountAxis,
		pages.Series{Name: "a", Values: []float64{0, 7, math.NaN(), 3, math.NaN()}})
	if got := []string{c.YTicks[0].Label, c.YTicks[1].Label, c.YTicks[2].Label}; got[2] != "10" || got[1] != "5" || got[0] != "0" {
		t.Errorf("y labels %v, want 0 5 10", got)
	}
	if c.XTicks[0].Label != "10:00" || c.XTicks[4].Label != "10:04" {
		t.Errorf("x labels %+v", c.XTicks)
	}
	segs := c.Lines[0].Segments
	if len(segs) != 2 || strings.Count(segs[0], ",") != 2 || segs[1] != "485.0,138.8 485.0,138.8" {
		t.Errorf("segments %q", segs)
	}
	if c.Lines[0].Class != "s1" {
		t.Errorf("class %q", c.Lines[0].Class)
	}
	lat := pages.NewChart("l", "中", "en", at, pages.SecondsAxis, pages.Series{Values: []float64{0.064}})
	if top := lat.YTicks[2].Label; top != "100ms" {
		t.Errorf("a latency of 64ms is charted up to %s, want 100ms", top)
	}
	if lat.XTicks[0].Anchor != "start" || lat.XTicks[2].Anchor != "middle" || lat.XTicks[4].Anchor != "end" {
		t.Errorf("x labels would leave the picture: %+v", lat.XTicks)
	}
	for v, want := range map[float64]string{0: "0", 0.25: "250ms", 1.5: "1.5s", 600: "10min"} {
		if got := pages.FormatSeconds(v); got != want {
			t.Errorf("FormatSeconds(%v) = %q, want %q", v, got, want)
		}
	}
	if got := pages.FormatCount(20000); got != "20k" {
		t.Errorf("FormatCount(20000) = %q", got)
	}
}

// TestConsolePagesEscape renders the console pages with hostile text wherever outside input
// can reach them (a message's values, a failure's reason, a user number) and checks that it
// comes out as text.
func TestConsolePagesEscape(t *testing.T) {
	var b bytes.Buffer
	now := time.Now()
	err := pages.Ops(&b, pages.OpsData{UserID: hostile, Since: now, Now: now, HistoryBase: "/ops/history/",
		Counts:   []pages.OpsCount{{State: "accepted", ZH: "已受理", EN: "accepted", N: 3}},
		Kinds:    []pages.OpsKind{{Kind: hostile, Count: 1}},
		Failures: []pages.OpsFailure{{UcsID: "01JX", Reason: hostile, At: now}},
		Charts:   []pages.Chart{pages.NewChart("c", "中", hostile, []time.Time{now}, pages.CountAxis, pages.Series{Name: "a", Label: hostile, Values: []float64{1}})},
		Nonce:    nonce})
	if err != nil {
		t.Fatal(err)
	}
	b2 := b.String()
	b.Reset()
	if err := pages.Sandbox(&b, pages.SandboxData{Feed: "/sandbox/feed", Script: "/sandbox/sandbox.js", Nonce: nonce,
		Phones: []pages.Phone{{UserID: "u1", OpenID: hostile, Messages: []pages.PhoneMessage{{UcsID: "01JX", Title: hostile,
			Items: []pages.PhoneItem{{Label: hostile, Value: hostile}}, State: "sent", StateText: hostile}}}}}); err != nil {
		t.Fatal(err)
	}
	b3 := b.String()
	b.Reset()
	if err := pages.History(&b, pages.HistoryData{UcsID: "01JX", Back: "/ops", Nonce: nonce, Queue: hostile,
		Records: []pages.HistoryRecord{{Kind: "final", Result: pages.HistoryResult{State: "failed", Reason: hostile}}}}); err != nil {
		t.Fatal(err)
	}
	for name, html := range map[string]string{"ops": b2, "sandbox": b3, "history": b.String()} {
		if strings.Contains(html, "<script>alert") {
			t.Errorf("%s: hostile text reached the page as markup", name)
		}
		if !strings.Contains(html, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s: hostile text is not shown as text", name)
		}
		for _, s := range tags(html, "script") {
			if s.attrs["nonce"] != nonce || s.attrs["src"] == "" {
				t.Errorf("%s: a script without the nonce or inline: %+v", name, s.attrs)
			}
		}
	}
	if !strings.Contains(b2, `href="/ops/history/01JX"`) {
		t.Error("ops: the failure is not linked to its history")
	}
	h := http.Header{}
	pages.LiveHeaders(h, nonce)
	if csp := h.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'") || !strings.HasSuffix(csp, "; connect-src 'self'") {
		t.Errorf("live CSP: %s", csp)
	}
}
