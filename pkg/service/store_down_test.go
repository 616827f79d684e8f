package service_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// TestTokenEndpointAnswersWhileTheStoreIsDown: a relying party refreshes its user's tokens
// while MongoDB is down, through the front end served as production serves it (api.Serve, the
// HTTP server's 30 s write time-out). The driver waits for a server up to 30 s by default; the
// request's work is bounded inside the write time-out, so the client gets RFC 6749 §5.2 JSON
// it can act on, not a connection closed with no answer.
func TestTokenEndpointAnswersWhileTheStoreIsDown(t *testing.T) {
	f := embeddedtest.FerretDB(t)
	u, err := url.Parse(f.URI())
	if err != nil {
		t.Fatal(err)
	}
	proxy := embeddedtest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	cfg := &config.Config{
		NATS:    config.NATS{URL: embeddedtest.NATS(t)},
		MongoDB: config.MongoDB{URI: u.String(), Database: embeddedtest.DBName(t)},
		OAuth: config.OAuth{
			IdentityProviders: config.IdentityProviders{Default: "local", Local: config.LocalProvider{Enabled: true}},
			Clients: []config.Client{{ClientID: "portal", ClientSecret: "relying-party-secret-01",
				Grants: []string{"authorization_code", "refresh_token"}, Scopes: []string{"openid"},
				RedirectURIs: []string{"https://app.example.edu/cb"}}}},
		Directory: config.Directory{Users: []config.User{{UserID: "2020000001", Password: "correct horse battery"}}},
	}
	api, base, stop := serving(t, cfg)
	t.Cleanup(api.Close)
	t.Cleanup(func() {
		proxy.SetDown(false)
		_ = stop()
	})

	proxy.SetDown(true)
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"a-refresh-token-the-store-must-read"},
		"client_id": {"portal"}, "client_secret": {"relying-party-secret-01"}}
	client := &http.Client{Timeout: 90 * time.Second}
	start := time.Now()
	resp, err := client.PostForm(base+"/auth/realms/campus/protocol/openid-connect/token", form)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("token request with the store down: no answer after %s: %v", took.Round(100*time.Millisecond), err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"error":"server_error"`) || took > 25*time.Second {
		t.Fatalf("token request with the store down: %d after %s: %s; want server_error within the write time-out", resp.StatusCode, took.Round(100*time.Millisecond), body)
	}
}
