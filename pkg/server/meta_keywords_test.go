package server_test

import (
	"encoding/json"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// TestMetaShowsKeywordKinds: the dictionary shows, per type, the keyword each
// field is mapped to, its kind and the kind's rule, as configured.
func TestMetaShowsKeywordKinds(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.Platform.Templates = map[string]config.Template{
			"EN": {TemplateID: "tpl-EN", Fields: map[string]string{"name": "thing1", "class": "character_string2", "time": "time3"}},
			"AR": {TemplateID: "tpl-AR", Fields: map[string]string{"title": "const1"}},
		}
	})
	a := e.do("GET", "/v1/meta/notification/mp/types", "", "", "")
	var m struct {
		Data struct {
			Types []struct {
				Type   string
				Fields []struct {
					Name    string
					Keyword *struct {
						Name, Kind, Rule, RuleZh string
						MaxChars                 int
						Checked                  bool
					}
				}
			}
		}
	}
	if err := json.Unmarshal(a.body, &m); err != nil || a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	got := map[string]string{}
	for _, ty := range m.Data.Types {
		for _, f := range ty.Fields {
			if k := f.Keyword; k != nil {
				if k.RuleZh == "" || k.MaxChars == 0 {
					t.Errorf("%s.%s: %+v", ty.Type, f.Name, k)
				}
				got[ty.Type+"."+f.Name] = k.Name + " " + k.Kind + " " + k.Rule
				if k.Kind == "const" && k.Checked {
					t.Errorf("const said to be checked")
				}
			}
		}
	}
	want := map[string]string{
		"EN.name":  "thing1 thing allows Chinese, letters, digits and symbols, at most 20",
		"EN.class": "character_string2 character_string allows only letters, digits and symbols, at most 32",
		"EN.time":  "time3 time allows a 24-hour time (15:01 or 15:01:59), a date may precede it (2019年10月1日 15:01, 2019-10-01 15:01); a period joins two with ~",
		"AR.title": "const1 const allows only the values approved for the template, which only the platform can check; here at most 20 characters",
	}
	if len(got) != len(want) {
		t.Fatalf("keywords %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}
