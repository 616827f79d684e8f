package standalone_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/standalone"
)

// lookupExample returns the data of the named example of GET /v1/infra/notification/mp/{ucsId}'s
// 200 answer in the description the stack serves.
func lookupExample(t *testing.T, base, name string) map[string]any {
	t.Helper()
	resp, err := http.Get(base + "/v1/meta/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	m := func(v any, k string) map[string]any { x, _ := v.(map[string]any)[k].(map[string]any); return x }
	ex := m(m(m(m(m(m(m(doc, "paths"), "/v1/infra/notification/mp/{ucsId}"), "get"), "responses"), "200"), "content"), "application/json")
	ex = m(m(ex, "examples"), name)
	if ex == nil {
		t.Fatalf("no example %s", name)
	}
	return m(ex, "value")["data"].(map[string]any)
}

// withoutRequestID drops the " rid: …" the platform appends to its error messages.
func withoutRequestID(s any) string {
	text, _ := s.(string)
	before, _, _ := strings.Cut(text, " rid: ")
	return before
}

// TestLookupExamplesAreAnswers: the served description's lookup examples "failed" (a push to
// the demo user without a binding: no platform call, so no attempt) and "retrying" (the
// platform busy, errcode -1) are what the stack answers in those cases.
func TestLookupExamplesAreAnswers(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	defer s.Close()
	info := readInfo(t, dir)
	base := info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))

	want := lookupExample(t, base, "failed")
	user := want["userId"].(string)
	for _, b := range info.Bindings {
		if b.UserID == user {
			t.Fatalf("the example's user %s has a binding in the stack", user)
		}
	}
	id := pushTo(t, base, tok, user, todo)
	if st := final(t, base, tok, id); st != "failed" {
		t.Fatalf("push to %s: %s, want failed", user, st)
	}
	got := lookup(t, base, tok, id)
	for _, k := range []string{"state", "type", "userId", "attempts", "reason"} {
		if g, w := jsonOf(got[k]), jsonOf(want[k]); g != w {
			t.Errorf("failed: %s is %s, the example's %s", k, g, w)
		}
	}

	want = lookupExample(t, base, "retrying")
	resp, err := http.Post(info.PlatformURL+"/sim/faults", "application/json", strings.NewReader(`{"busy_rate":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id = pushTo(t, base, tok, "2020000001", todo)
	embeddedtest.Eventually(t, 20*time.Second, id+" waits for a retry", func() bool {
		got = lookup(t, base, tok, id)
		return got["state"] == "queued" && got["lastError"] != nil
	})
	if g, w := withoutRequestID(got["lastError"]), withoutRequestID(want["lastError"]); g != w || g == "" {
		t.Errorf("retrying: lastError is %q, the example's %q", got["lastError"], want["lastError"])
	}
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }
