package admin_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/campus-it/ucs/pkg/admin"
)

// TestPushTestFollowsNoRedirect: push test -client posts the client's secret to the front
// end's token endpoint. A gateway in front of it that answers a 307 to another host must not
// have the secret posted there again: the command fails, and the other host hears nothing.
func TestPushTestFollowsNoRedirect(t *testing.T) {
	cfgPath, _, _ := bindingsEnv(t)
	var reached atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer other.Close()
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer gateway.Close()
	o := runAdmin(t, map[string]string{"UCS_CLIENT_SECRET": "s3cr3t-of-the-reports-app"},
		"-config", cfgPath, "push", "test", "2020000001", "-client", "reports-app", "-url", gateway.URL)
	if o.code == admin.ExitOK {
		t.Errorf("push test through a redirecting gateway: exit 0\n%s", o.stdout)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the host the gateway redirected to received %d requests: the client's secret was posted there", n)
	}
}
