package schemas

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/campus-it/ucs/pkg/platform/keyword"
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

// TestKeywordKindsDescribed: the type dictionary's keyword kinds, as the description lists
// them, are the kinds the service knows, no more and no fewer: an answer naming a kind the
// description leaves out is invalid under it.
func TestKeywordKindsDescribed(t *testing.T) {
	var d any
	if err := json.Unmarshal(OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	var described []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["enum"].([]any); ok && slices.Contains(e, any("short_thing")) {
				for _, k := range e {
					described = append(described, k.(string))
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(d)
	var known []string
	for _, k := range keyword.Kinds() {
		known = append(known, k.Name)
	}
	slices.Sort(described)
	slices.Sort(known)
	if !slices.Equal(described, known) {
		t.Fatalf("described keyword kinds %v, known %v", described, known)
	}
}
