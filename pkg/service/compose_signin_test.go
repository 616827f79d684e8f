package service_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// TestComposeDemoUserCanSignIn: the compose configuration, served with compose's connections,
// shows demo-app's authorization request the sign-in form, and the binding page is there.
func TestComposeDemoUserCanSignIn(t *testing.T) {
	cfg, err := config.Load("../../deployments/config.compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NATS_URL": embeddedtest.NATS(t), "MONGODB_URI": embeddedtest.MongoURI(t)}
	cfg.ApplyEnv(func(k string) string { return env[k] })
	cfg.MongoDB.Database = embeddedtest.DBName(t)
	_, base, stop := serving(t, cfg)
	defer func() { _ = stop() }()
	q := url.Values{"client_id": {"demo-app"}, "redirect_uri": {"http://localhost:3000/oauth/callback"},
		"response_type": {"code"}, "scope": {"openid"}, "state": {"s1"}}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(base + "/auth/realms/campus/protocol/openid-connect/auth?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if r, err := c.Get(base + "/bind"); err != nil {
		t.Error(err)
	} else {
		bb, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode == http.StatusNotFound {
			t.Errorf("GET /bind (the menu button of `platform menu set -bind`): %d, not configured: %v",
				r.StatusCode, strings.Contains(string(bb), "not configured"))
		}
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "password") {
		t.Fatalf("demo-app's authorization request for the demo user: %d Location=%q, no sign-in form:\n%.600s",
			resp.StatusCode, loc, b)
	}
}
