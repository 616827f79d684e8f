package standalone_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/standalone"
)

// readInfo reads the stack's standalone.json.
func readInfo(t *testing.T, dir string) standalone.Info {
	t.Helper()
	var info standalone.Info
	raw, err := os.ReadFile(filepath.Join(dir, "standalone.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// TestBatchEndToEnd sends a batch of good and bad items through the whole stack: the good ones
// are delivered and read back with one batch lookup, the bad one is named and never reaches
// the platform.
func TestBatchEndToEnd(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	defer s.Close()
	info := readInfo(t, dir)
	base := info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	good1, _ := bodyFor(push.Types()[0], standalone.DemoUsers[0])
	good2, _ := bodyFor(push.Types()[2], standalone.DemoUsers[1])
	bad := `{"userId":"2020000001","type":"JML","data":{"class":"课程","info":"emoji 😀"}}`
	st, m := call(t, "POST", base+"/v1/infra/notification/mp/batch", "application/json", tok,
		`{"messages":[`+good1+`,`+bad+`,`+good2+`]}`)
	if st != 200 {
		t.Fatalf("batch: %d %v", st, m)
	}
	d := m["data"].(map[string]any)
	results := d["results"].([]any)
	if d["accepted"] != 2.0 || d["rejected"] != 1.0 || len(results) != 3 {
		t.Fatalf("batch: %v", d)
	}
	ids := []string{results[0].(map[string]any)["ucsId"].(string), results[2].(map[string]any)["ucsId"].(string)}
	if errs := results[1].(map[string]any)["errors"].([]any); len(errs) != 1 || errs[0] != "data.info: contains emoji" {
		t.Fatalf("bad item: %v", results[1])
	}
	body, _ := json.Marshal(map[string]any{"ucsIds": ids})
	embeddedtest.Eventually(t, 30*time.Second, "both good items delivered", func() bool {
		st, m := call(t, "POST", base+"/v1/infra/notification/mp/results", "application/json", tok, string(body))
		if st != 200 {
			return false
		}
		for _, r := range m["data"].(map[string]any)["results"].([]any) {
			if r.(map[string]any)["state"] != "delivered" {
				return false
			}
		}
		return true
	})
	sent := s.Sim.Sent()
	if len(sent) != 2 {
		t.Fatalf("the platform got %d messages, want the 2 good ones", len(sent))
	}
	for _, m := range sent {
		if m.ClientMsgID != ids[0] && m.ClientMsgID != ids[1] || strings.Contains(m.Data["thing2"], "😀") {
			t.Errorf("the platform got %+v", m)
		}
	}
}
