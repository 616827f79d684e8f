package server_test

import (
	"encoding/json"
	"strings"
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

// TestPushRefusedForKeywordKind: with EN's class mapped to a character_string keyword and its
// time to a time keyword, the front end refuses what the platform would refuse (47003), naming
// the field, the keyword's kind and its rule, and publishes nothing; a push within the kinds'
// rules is accepted.
func TestPushRefusedForKeywordKind(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.Platform.Templates = map[string]config.Template{
			"EN": {TemplateID: "tpl-EN", Fields: map[string]string{"name": "thing1", "class": "character_string2", "time": "time3"}},
		}
	})
	tok := e.token("pusher", pushSecret)
	bad := `{"userId":"2020000001","type":"EN","data":{"name":"高等数学期末考试","class":"高等数学一班","time":"下周一上午第三节"}}`
	a := e.doWith("POST", "/v1/infra/notification/mp", tok, bad, nil)
	msg, _ := a.json(t)["msg"].(string)
	for _, want := range []string{
		"data.class: character_string allows only letters, digits and symbols, at most 32",
		"data.time: time allows a 24-hour time",
	} {
		if a.status != 400 || !strings.Contains(msg, want) {
			t.Errorf("push refused for its keywords: %d %q, want it to name %q", a.status, msg, want)
		}
	}
	if n := e.streamPushes(); n != 0 {
		t.Fatalf("a refused push was published: the stream holds %d", n)
	}
	good := `{"userId":"2020000001","type":"EN","data":{"name":"高等数学期末考试","class":"MATH-101/A","time":"2026年1月12日 09:00"}}`
	if a := e.doWith("POST", "/v1/infra/notification/mp", tok, good, nil); a.status != 200 {
		t.Fatalf("a push within the kinds' rules: %d %s", a.status, a.body)
	}
}
