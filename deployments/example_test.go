package deployments

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/campus-it/ucs/pkg/metrics"
)

// TestConfigExampleHasEveryKey: "config.example.yaml | every configuration key with an
// example value" (deployments/README.md). Every key the configuration's JSON Schema (the programs' own
// vocabulary: a key not in it is refused) knows must appear in it.
func TestConfigExampleHasEveryKey(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(readFile(t, "../schemas/config.schema.json"), &schema); err != nil {
		t.Fatal(err)
	}
	defs := mapping(schema["$defs"])
	want := map[string]bool{}
	var walk func(node map[string]any, prefix string)
	walk = func(node map[string]any, prefix string) {
		if ref := str(node["$ref"]); strings.HasPrefix(ref, "#/$defs/") {
			node = mapping(defs[strings.TrimPrefix(ref, "#/$defs/")])
		}
		if str(node["type"]) == "array" {
			walk(mapping(node["items"]), prefix+"[]")
			return
		}
		for k, v := range mapping(node["properties"]) {
			want[prefix+"."+k] = true
			walk(mapping(v), prefix+"."+k)
		}
		if ap := mapping(node["additionalProperties"]); ap != nil && prefix == ".platform.templates" {
			walk(ap, prefix+".<type>")
		}
	}
	walk(schema, "")

	docs := decodeAll(t, "config.example.yaml", readFile(t, "config.example.yaml"))
	have := map[string]bool{}
	var seen func(v any, prefix string)
	seen = func(v any, prefix string) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				key := k
				if prefix == ".platform.templates" {
					key = "<type>"
				}
				have[prefix+"."+key] = true
				if prefix+"."+key == ".platform.templates.<type>.fields" {
					continue // field names are the template's, not keys of the configuration
				}
				seen(e, prefix+"."+key)
			}
		case []any:
			for _, e := range x {
				seen(e, prefix+"[]")
			}
		}
	}
	seen(docs[0], "")
	raw := string(readFile(t, "config.example.yaml"))
	var missing []string
	for k := range want {
		// A key shown in a comment ("# encoding_aes_key: ...") counts as shown. password and
		// password_hash are exclusive, and README.md says never password.
		last := k[strings.LastIndexAny(k, ".]")+1:]
		if !have[k] && !strings.Contains(raw, last+":") && k != ".directory.users[].password" {
			missing = append(missing, strings.TrimPrefix(k, "."))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("config.example.yaml, \"every configuration key with an example value\", lacks %d key(s) the programs take: %s",
			len(missing), strings.Join(missing, ", "))
	}
}

// TestSendingPanelNamesNoSingleCause: ucs_sending_paused is 1 for every pause of
// sending (its help: "the platform's daily quota, 45009, or a refusal of the account such as
// 48001, or the platform refusing this worker's address (40164)"; README.md, Pauses of
// sending: 45009, 45011, 48001, 40037, 40036, 48004, 50002, 40125, 40013, 41004, 40243, and a
// worker's own pause). The dashboard's "Sending" panel, which README.md says "turns red" for
// every one of them, must not tell the on-call engineer the cause is the daily quota, which
// ends by itself: most of the others last until an operator acts and runs `worker -resume`.
func TestSendingPanelNamesNoSingleCause(t *testing.T) {
	var dash map[string]any
	if err := json.Unmarshal(readFile(t, dashboardFile), &dash); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg)
	m.Paused(true)
	help := ""
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ucs_sending_paused" {
			help = mf.GetHelp()
		}
	}
	if !strings.Contains(help, "48001") || !strings.Contains(help, "40164") {
		t.Fatalf("ucs_sending_paused's help no longer names other causes than the quota: %q", help)
	}
	found := false
	for _, p := range dashboardPanels(dash["panels"]) {
		for _, tg := range list(p["targets"]) {
			if !strings.Contains(str(dig(tg, "expr")), "ucs_sending_paused") || strings.Contains(str(dig(tg, "expr")), " and on ") {
				continue
			}
			found = true
			for _, mp := range list(dig(p, "fieldConfig", "defaults", "mappings")) {
				text := str(dig(mp, "options", "1", "text"))
				if strings.Contains(strings.ToLower(text), "quota") {
					t.Errorf("panel %q shows ucs_sending_paused = 1 as %q, but the metric is 1 for every pause (%s): "+
						"a pause for 48001, 40037, 48004, 40125 or this worker's 40164 reads as the daily quota, which ends by itself, "+
						"while those last until an operator acts", str(p["title"]), text, help)
				}
			}
			if d := str(p["description"]); strings.Contains(d, "45009") && !strings.Contains(d, "48001") {
				t.Errorf("panel %q is described as %q: it names only the daily quota", str(p["title"]), d)
			}
		}
	}
	if !found {
		t.Fatal("no panel shows ucs_sending_paused")
	}
}
