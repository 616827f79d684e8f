package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/admin"
)

// TestCreateClientWithoutRefreshTokens: a client of the authorization code grant gets refresh
// tokens unless they are turned off, as in Keycloak. clients create can turn them off
// (-refresh-tokens=false), as the configuration file's refresh_tokens: false does, and
// clients show says whether the client gets them: it showed the grants as listed, so an
// operator who left refresh_token out (a kiosk application) did not learn that the client got
// long-lived refresh tokens all the same.
func TestCreateClientWithoutRefreshTokens(t *testing.T) {
	cfgPath, _, st := bindingsEnv(t)
	create := func(id string, extra ...string) {
		t.Helper()
		args := append([]string{"-config", cfgPath, "clients", "create", id, "-grants", "authorization_code",
			"-scopes", "openid", "-redirect-uri", "https://kiosk.example.edu/cb"}, extra...)
		if o := runAdmin(t, nil, args...); o.code != admin.ExitOK {
			t.Fatalf("create %s: exit %d\n%s", id, o.code, o.stderr)
		}
	}
	create("portal")
	create("kiosk", "-refresh-tokens=false")
	for id, want := range map[string]bool{"portal": true, "kiosk": false} {
		o := runAdmin(t, nil, "-config", cfgPath, "clients", "show", id, "--json")
		var v struct {
			RefreshTokens *bool `json:"refresh_tokens"`
		}
		if err := json.Unmarshal([]byte(o.stdout), &v); err != nil || v.RefreshTokens == nil || *v.RefreshTokens != want {
			t.Errorf("clients show %s --json: refresh_tokens %v (%v), want %v\n%s", id, v.RefreshTokens, err, want, o.stdout)
		}
		if o := runAdmin(t, nil, "-config", cfgPath, "clients", "show", id); !strings.Contains(o.stdout, "refresh_tokens:") {
			t.Errorf("clients show %s does not say whether it gets refresh tokens:\n%s", id, o.stdout)
		}
	}
	c, err := st.Client(context.Background(), "kiosk")
	if err != nil {
		t.Fatal(err)
	}
	if c.RefreshTokens == nil || *c.RefreshTokens {
		t.Errorf("the kiosk's record: refresh_tokens %v, want false", c.RefreshTokens)
	}
	if o := runAdmin(t, nil, "-config", cfgPath, "clients", "create", "both", "-grants", "authorization_code,refresh_token",
		"-scopes", "openid", "-redirect-uri", "https://kiosk.example.edu/cb", "-refresh-tokens=false"); o.code != admin.ExitUsage {
		t.Errorf("refresh tokens turned off with the refresh_token grant listed: exit %d, want %d\n%s", o.code, admin.ExitUsage, o.stderr)
	}
}
