package schemas

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"
)

// TestPatternsPortable: every pattern of every schema file and of the served description
// compiles both with Go's regexp (RE2) and with an ECMA-262 engine in u-flag mode, the
// dialect JSON Schema 2020-12 §6.3.3 names and ajv, redocly and browsers use. Neither
// \x{…} (RE2 only) nor \u{…} (ECMA-262 only) is written: characters are written as
// themselves. The push patterns are also run on the push body cases by package push
// (TestSchemaAgreement), where both engines must agree with push.Parse.
func TestPatternsPortable(t *testing.T) {
	docs := map[string][]byte{"served openapi.json": OpenAPI()}
	for _, name := range []string{"push.schema.json", "config.schema.json", "openapi.json"} {
		b, err := FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		docs[name] = b
	}
	for name, b := range docs {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := 0
		eachPattern(v, "", func(at, p string) {
			n++
			if _, err := regexp.Compile(p); err != nil {
				t.Errorf("%s %s: RE2: %v", name, at, err)
			}
			if _, err := regexp2.Compile(p, regexp2.ECMAScript|regexp2.Unicode); err != nil {
				t.Errorf("%s %s: ECMA-262: %v", name, at, err)
			}
			if strings.Contains(p, `\x`) || strings.Contains(p, `\u`) || strings.Contains(p, `\p`) {
				t.Errorf("%s %s: an escape the three dialects do not read alike: %.80q", name, at, p)
			}
		})
		if n == 0 && name != "config.schema.json" {
			t.Errorf("%s: no pattern found", name)
		}
	}
}

// eachPattern calls f with each string value of a "pattern" member of a schema in v.
func eachPattern(v any, at string, f func(at, pattern string)) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && k == "pattern" {
				f(at, s)
				continue
			}
			eachPattern(x, at+"/"+k, f)
		}
	case []any:
		for _, x := range t {
			eachPattern(x, at+"/[]", f)
		}
	}
}
