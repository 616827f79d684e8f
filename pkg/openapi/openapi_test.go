package openapi

import (
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"testing"
)

func TestParseMarshalKeepsOrder(t *testing.T) {
	in := `{"z": 1, "a": [true, null, "x", 1.50], "m": {"b": {}, "a": []}}`
	v, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(string(out)), "")
	if flat != `{"z":1,"a":[true,null,"x",1.50],"m":{"b":{},"a":[]}}` {
		t.Errorf("round trip: %s", out)
	}
	for _, bad := range []string{`{"a":1} {}`, `{"a":`, `[1,]`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

func TestBundle(t *testing.T) {
	doc := `{"openapi":"3.1.0","components":{"schemas":{
		"A":{"type":"string"},
		"Body":{"$ref":"body.schema.json"},
		"C":{"$ref":"#/components/schemas/A"}}}}`
	files := map[string]string{"body.schema.json": `{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://x/body.schema.json",
		"type":"object","properties":{"k":{"$ref":"#/$defs/kind"}},"$defs":{"kind":{"enum":["a","b"]}}}`}
	read := func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	out, err := Bundle([]byte(doc), read)
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(string(out)), "")
	want := `{"openapi":"3.1.0","components":{"schemas":{"A":{"type":"string"},` +
		`"Body":{"type":"object","properties":{"k":{"$ref":"#/components/schemas/Body.kind"}}},` +
		`"Body.kind":{"enum":["a","b"]},"C":{"$ref":"#/components/schemas/A"}}}}`
	if flat != want {
		t.Errorf("bundled:\n%s\nwant\n%s", flat, want)
	}
	if _, err := Bundle([]byte(`{"components":{"schemas":{"X":{"$ref":"missing.json"}}}}`), read); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

func TestPageEscapesAndGroups(t *testing.T) {
	doc := `{"openapi":"3.1.0","info":{"title":"T","version":"1","description":"*hi* <b>b</b>\n\n<script>alert(1)</script>\n\n[x](javascript:alert(1))"},
		"tags":[{"name":"b","x-displayName":"Bee"},{"name":"a"}],
		"paths":{"/x/{id}":{"parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],
			"post":{"operationId":"px","tags":["a"],"security":[{"bearerAuth":["s1"]}],"responses":{"200":{"description":"ok"}}},
			"get":{"operationId":"gx","tags":["b"],"responses":{"404":{"$ref":"#/components/responses/NF"}}}}},
		"components":{"responses":{"NF":{"description":"not found","content":{"application/json":{"schema":{"$ref":"#/components/schemas/E"},
			"examples":{"e":{"value":{"code":"A00404"},"x-request":{"token":"none","path":{"id":"7"}},"x-response-headers":{"H":"v"}}}}}}},
			"schemas":{"E":{"type":"object","required":["code"],"properties":{"code":{"type":"string","description":"the code"}}}}}}`
	p, err := Page([]byte(doc), "/spec")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(p.Intro), "<script") || strings.Contains(string(p.Intro), "<b>") || strings.Contains(string(p.Intro), "javascript:") || !strings.Contains(string(p.Intro), "<em>hi</em>") {
		t.Errorf("intro: %s", p.Intro)
	}
	if len(p.Tags) != 2 || p.Tags[0].Name != "Bee" || p.Tags[0].Operations[0].ID != "op-gx" || p.Tags[1].Operations[0].Method != http.MethodPost {
		t.Fatalf("tags: %+v", p.Tags)
	}
	get := p.Tags[0].Operations[0]
	if len(get.Params) != 1 || get.Params[0].Name != "id" || !get.Params[0].Required || get.Security != "" {
		t.Errorf("get: %+v", get)
	}
	r := get.Responses[0]
	if r.Status != "404" || r.Content.Schema != "E" || r.Content.Fields[0].Name != "code" || !r.Content.Fields[0].Required {
		t.Errorf("response: %+v", r)
	}
	ex := r.Content.Examples[0]
	if !strings.Contains(ex.Request, "{id} = 7") || !strings.Contains(ex.Request, "no Authorization") || ex.Headers[0] != "H: v" || !strings.Contains(ex.Value, `"A00404"`) {
		t.Errorf("example: %+v", ex)
	}
	if s := p.Tags[1].Operations[0].Security; s != "Bearer, scope s1" {
		t.Errorf("security %q", s)
	}
}
