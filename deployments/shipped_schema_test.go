package deployments

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// TestShippedConfigsPassTheSchema: every configuration the deployments ship (compose's, the
// k8s Secret's, the example) passes schemas/config.schema.json, as an operator's editor or CI
// checks it.
func TestShippedConfigsPassTheSchema(t *testing.T) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(readFile(t, "../schemas/config.schema.json")))
	if err != nil {
		t.Fatal(err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("config.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := comp.Compile("config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	m := loadK8s(t)
	k8s, _ := m.secretValue("ucs-config", "config.yaml")
	for where, text := range map[string][]byte{
		"config.example.yaml": readFile(t, "config.example.yaml"),
		composeConfig:         readFile(t, composeConfig),
		"k8s ucs-config":      []byte(k8s),
	} {
		var v any
		if err := yaml.Unmarshal(text, &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v)
		j, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(j); err != nil {
			t.Errorf("%s: the schema refuses it: %v", where, err)
		}
	}
}
