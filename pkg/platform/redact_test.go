package platform_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// TestGatewayPasswordOfAPIBaseStaysOutOfErrors: platform.api_base may name a gateway that wants
// HTTP Basic credentials in its user info (https://user:password@host/, which net/http sends).
// A call that fails on the way (the connection dropped) names the address without the password
// in its error, which the worker logs and stores as the push's lastError that the pushing
// application reads.
func TestGatewayPasswordOfAPIBaseStaysOutOfErrors(t *testing.T) {
	const proxyUser, proxyPass = "egress", "Pr0xyPassw0rd-7f3a9c"
	sim := simulator.New(simulator.Config{AppID: appID, Secret: secret, Seed: 1})
	sim.AddTemplate(tplExam, []string{"thing1", "time2", "character_string3"})
	sim.AddFollower(follower)
	h := sim.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != proxyUser || p != proxyPass {
			http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/message/template/send") {
			// The proxy drops the connection of the send: a transport error, retried.
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("no hijacker")
				return
			}
			conn, _, _ := hj.Hijack()
			_ = conn.Close()
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer sim.Close()

	base, _ := url.Parse(srv.URL)
	base.User = url.UserPassword(proxyUser, proxyPass)
	logs := &embeddedtest.SyncBuffer{}
	cfg := platform.Config{APIBase: base.String(), AppID: appID, Secret: secret,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the proxy's address is refused by the configuration's check: %v", err)
	}
	c, err := platform.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(context.Background()); err != nil {
		t.Fatalf("the token through the proxy: %v", err)
	}
	_, err = c.SendTemplate(context.Background(), exam(follower, "01JREVIEWPROXY0000000000001"))
	if err == nil {
		t.Fatal("the dropped send succeeded")
	}
	if reason, permanent := platform.Permanent(err); permanent {
		t.Fatalf("a dropped connection is permanent: %s", reason)
	}
	if strings.Contains(err.Error(), proxyPass) {
		t.Errorf("the send's error, which becomes the push's lastError, carries the proxy's password:\n%s", err)
	}
	if strings.Contains(logs.String(), proxyPass) {
		t.Errorf("the log carries the proxy's password:\n%s", logs.String())
	}
}

// TestGatewayPasswordOfAPIBaseStaysOutOfWebAuthErrors: the same for the binding page's code
// exchange at api_base (sns/oauth2/access_token): its error is logged by the front end
// ("binding: the platform's web authorization failed").
func TestGatewayPasswordOfAPIBaseStaysOutOfWebAuthErrors(t *testing.T) {
	const proxyUser, proxyPass = "egress", "Pr0xyPassw0rd-7f3a9c"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		conn, _, _ := hj.Hijack()
		_ = conn.Close()
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	base.User = url.UserPassword(proxyUser, proxyPass)
	wa, err := platform.NewWebAuth(platform.WebAuthConfig{OAuthBase: platform.DefaultOAuthBase, APIBase: base.String(), AppID: appID, Secret: secret})
	if err != nil {
		t.Fatalf("the proxy's address is refused: %v", err)
	}
	_, err = wa.OpenID(context.Background(), "code-of-the-platform")
	if err == nil {
		t.Fatal("the dropped exchange succeeded")
	}
	if strings.Contains(err.Error(), proxyPass) || strings.Contains(err.Error(), secret) {
		t.Errorf("the exchange's error, which the front end logs, carries the proxy's password:\n%s", err)
	}
}
