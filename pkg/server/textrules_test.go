package server_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/campus-it/ucs/pkg/server"
)

type ecmaRegexp struct{ re *regexp2.Regexp }

func (e ecmaRegexp) String() string { return e.re.String() }
func (e ecmaRegexp) MatchString(s string) bool {
	ok, err := e.re.MatchString(s)
	return err == nil && ok
}

// servedSchemas compiles components.schemas.<name> of the description the front end
// serves, as an outside validator reads it (2020-12, ECMA-262 u-mode patterns, formats asserted).
func servedSchemas(t *testing.T, e *env, names ...string) map[string]*jsonschema.Schema {
	t.Helper()
	a := e.do("GET", server.OpenAPIPath, "", "", "")
	if a.status != 200 {
		t.Fatalf("GET %s: %d", server.OpenAPIPath, a.status)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(a.body))
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://ucs.example.edu/v1/meta/openapi.json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseRegexpEngine(func(p string) (jsonschema.Regexp, error) {
		re, err := regexp2.Compile(p, regexp2.ECMAScript|regexp2.Unicode)
		if err != nil {
			return nil, err
		}
		return ecmaRegexp{re}, nil
	})
	if err := c.AddResource(base, doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]*jsonschema.Schema{}
	for _, n := range names {
		s, err := c.Compile(base + "#/components/schemas/" + n)
		if err != nil {
			t.Fatalf("compile %s: %v", n, err)
		}
		out[n] = s
	}
	return out
}

func schemaValid(s *jsonschema.Schema, body string) bool {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
	if err != nil {
		return false
	}
	return s.Validate(inst) == nil
}

// TestBatchAndResultsTextRulesDescribed: a batch or results body that the served BatchBody or
// ResultsBody schema accepts but whose JSON text the service refuses (a member name twice, a
// lone surrogate escape) must be refused in words somewhere a client reads: the schema's or
// the operation's description (as PushBody's description says it for a push body).
func TestBatchAndResultsTextRulesDescribed(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	s := servedSchemas(t, e, "BatchBody", "ResultsBody")
	var doc struct {
		Paths      map[string]struct{ Post struct{ Description string } } `json:"paths"`
		Components struct {
			Schemas map[string]struct{ Description string } `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(e.do("GET", server.OpenAPIPath, "", "", "").body, &doc); err != nil {
		t.Fatal(err)
	}
	item := `{"userId":"2020000001","type":"JML","data":{"class":"大学物理","info":"习题"}}`
	for _, c := range []struct{ path, schema, rule, body string }{
		{"/v1/infra/notification/mp/batch", "BatchBody", "duplicate", `{"messages":[` + item + `],"messages":[` + item + `]}`},
		{"/v1/infra/notification/mp/results", "ResultsBody", "duplicate", `{"ucsIds":["01KAW3J5M7Q9S2V4X6Z8B0D2F4"],"ucsIds":["01KAW3J5M7Q9S2V4X6Z8B0D2F4"]}`},
		{"/v1/infra/notification/mp/results", "ResultsBody", "surrogate", `{"ucsIds":["\ud800"]}`},
	} {
		a := e.do("POST", c.path, "application/json", tok, c.body)
		bySchema := schemaValid(s[c.schema], c.body)
		words := strings.ToLower(doc.Paths[c.path].Post.Description + " " + doc.Components.Schemas[c.schema].Description)
		if bySchema && a.status != 200 && !strings.Contains(words, c.rule) {
			t.Errorf("%s: served %s accepts %s, the service answers %d (%s), and neither description says so (%q)",
				c.path, c.schema, c.body, a.status, strings.TrimSpace(string(a.body)), c.rule)
		}
	}
}
