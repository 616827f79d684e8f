package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/admin"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// platformConfig starts a simulator with the templates given and writes a configuration
// that maps push types onto them as mapping (YAML of platform.templates) says.
func platformConfig(t *testing.T, templates map[string][]string, mapping string) (*simulator.Simulator, string) {
	t.Helper()
	sim := simulator.New(simulator.Config{AppID: "wx-admin", Secret: "admin-secret-0123456789", Seed: 1})
	for id, kws := range templates {
		sim.AddTemplate(id, kws)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { srv.Close(); sim.Close() })
	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "public_url: https://ucs.example.edu\nplatform:\n  api_base: " + srv.URL +
		"\n  appid: wx-admin\n  secret: admin-secret-0123456789\n  templates:\n" + mapping
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return sim, path
}

func TestPlatformTemplatesChecksTheMapping(t *testing.T) {
	templates := map[string][]string{
		"tpl-EN":  {"thing1", "character_string2", "time3"},
		"tpl-TDL": {"thing1", "thing2", "thing3", "thing4"},
	}
	_, good := platformConfig(t, templates,
		"    EN: {template_id: tpl-EN, fields: {name: thing1, class: character_string2, time: time3}}\n"+
			"    TDL: {template_id: tpl-TDL, fields: {type: thing1, list: thing2, step: thing3, content: thing4}}\n")
	o := mustRun(t, "platform", "templates", "-config", good)
	for _, want := range []string{"tpl-EN", "(for EN)", "character_string2", "character_string allows only letters, digits and symbols, at most 32"} {
		if !strings.Contains(o.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, o.stdout)
		}
	}

	_, bad := platformConfig(t, templates,
		"    EN: {template_id: tpl-EN, fields: {name: thing1, class: character_string9, time: time3}}\n"+
			"    AR: {template_id: tpl-AR, fields: {title: thing1}}\n"+
			"    JML: {template_id: tpl-TDL, fields: {class: things1, info: thing2}}\n")
	o = wantExit(t, admin.ExitFailure, "platform", "templates", "-config", bad, "--json")
	var r struct{ Problems []string }
	if err := json.Unmarshal([]byte(o.stdout), &r); err != nil {
		t.Fatalf("%v: %s", err, o.stdout)
	}
	want := []string{
		`platform.templates.AR.template_id: "tpl-AR" is not a template of the account`,
		`platform.templates.EN.fields.class: template tpl-EN has no keyword "character_string9" (it has thing1, character_string2, time3)`,
		`platform.templates.JML.fields.class: keyword "things1" is of no known kind`,
		`platform.templates.JML.fields.class: template tpl-TDL has no keyword "things1" (it has thing1, thing2, thing3, thing4)`,
	}
	if len(r.Problems) != len(want) {
		t.Fatalf("problems %q, want %q", r.Problems, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(r.Problems[i], w) {
			t.Errorf("problem %d: %q, want %q", i, r.Problems[i], w)
		}
	}
}

func TestPlatformMenu(t *testing.T) {
	sim, cfg := platformConfig(t, map[string][]string{"tpl-EN": {"thing1"}}, "    EN: {template_id: tpl-EN, fields: {name: thing1}}\n")
	if o := mustRun(t, "platform", "menu", "show", "-config", cfg); !strings.Contains(o.stdout, "no custom menu") {
		t.Fatalf("show: %s", o.stdout)
	}
	mustRun(t, "platform", "menu", "set", "-bind", "-config", cfg)
	var m struct {
		Button []struct{ Type, Name, URL string }
	}
	if err := json.Unmarshal(sim.MenuJSON(), &m); err != nil || len(m.Button) != 1 ||
		m.Button[0].URL != "https://ucs.example.edu/bind" || m.Button[0].Type != "view" || m.Button[0].Name != "绑定学号" {
		t.Fatalf("menu %s", sim.MenuJSON())
	}
	if o := mustRun(t, "platform", "menu", "show", "-config", cfg); !strings.Contains(o.stdout, "https://ucs.example.edu/bind") {
		t.Fatalf("show: %s", o.stdout)
	}
	file := filepath.Join(t.TempDir(), "menu.json")
	_ = os.WriteFile(file, []byte(`{"button":[{"type":"view","name":"课表","url":"https://ucs.example.edu/t"},{"type":"click","name":"帮助","key":"help"}]}`), 0o600)
	mustRun(t, "platform", "menu", "set", "-file", file, "-config", cfg)
	if !strings.Contains(string(sim.MenuJSON()), "帮助") {
		t.Fatalf("menu %s", sim.MenuJSON())
	}
	_ = os.WriteFile(file, []byte(`{"button":[]}`), 0o600)
	if o := wantExit(t, admin.ExitFailure, "platform", "menu", "set", "-file", file, "-config", cfg); !strings.Contains(o.stderr, "40016") {
		t.Fatalf("empty menu: %s", o.stderr)
	}
	wantExit(t, admin.ExitUsage, "platform", "menu", "set", "-config", cfg)
}

// TestPlatformTemplatesStandalone: the standalone stack's simulator holds the templates its
// configuration maps, so the check passes.
func TestPlatformTemplatesStandalone(t *testing.T) {
	runningStack(t)
	o := mustRun(t, "platform", "templates", "-data", stackDir)
	if !strings.Contains(o.stdout, "tpl-TDL") || strings.Contains(o.stdout, "problem:") {
		t.Fatalf("%s", o.stdout)
	}
}

// TestPlatformCallsTimeOutAfter10s: each call of the admin commands to the platform times out
// after 10 s, as the guide says (not the 15 s of the client that talks to the front end).
func TestPlatformCallsTimeOutAfter10s(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a platform that never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "public_url: https://ucs.example.edu\nplatform:\n  api_base: " + srv.URL + "\n  appid: wx-admin\n  secret: admin-secret-0123456789\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	o := runAdmin(t, nil, "-config", path, "platform", "templates")
	took := time.Since(start)
	if o.code != admin.ExitFailure {
		t.Fatalf("exit %d, want 1: %s %s", o.code, o.stdout, o.stderr)
	}
	if took < 9*time.Second || took > 12*time.Second {
		t.Errorf("platform templates against a platform that does not answer gave up after %s, want 10 s (%s)",
			took.Round(100*time.Millisecond), strings.TrimSpace(o.stderr))
	}
}
