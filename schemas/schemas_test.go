package schemas

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestEveryFileCompiles checks that each embedded *.json but the OpenAPI
// description (tested in openapi_test.go) is a JSON Schema that compiles, so
// that a broken file fails here and not at start-up.
func TestEveryFileCompiles(t *testing.T) {
	names, err := fs.Glob(FS, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no schema embedded")
	}
	for _, name := range names {
		if name == "openapi.json" {
			continue
		}
		b, err := FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		c := jsonschema.NewCompiler()
		url := "file:///schemas/" + name
		if err := c.AddResource(url, doc); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if _, err := c.Compile(url); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestPush(t *testing.T) {
	var s struct {
		Schema string `json:"$schema"`
		Title  string `json:"title"`
	}
	if err := json.Unmarshal(Push(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Schema != "https://json-schema.org/draft/2020-12/schema" || s.Title != "Push request body" {
		t.Errorf("Push() is not the push body schema: %+v", s)
	}
	// Callers get their own copy.
	Push()[0] = 'x'
	if Push()[0] != '{' {
		t.Error("Push() returns shared bytes")
	}
}
