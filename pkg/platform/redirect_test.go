package platform_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/campus-it/ucs/pkg/platform"
)

// TestRedirectsNotFollowed: the platform's API never redirects. A gateway in front of it
// (api_base) that answers a redirect to another host must not make the client send that host
// the AppSecret (a 307 posts the token request's body again; the code exchange has it in its
// query, which the Referer carries) or the access token (in the Referer, with the send
// address's query). The redirect is answered as any status that is not 2xx.
func TestRedirectsNotFollowed(t *testing.T) {
	var reached atomic.Int32 // requests the host redirected to received
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer other.Close()
	var redirect sync.Map // the paths redirected
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := redirect.Load(r.URL.Path); ok {
				http.Redirect(w, r, other.URL+"/elsewhere", http.StatusTemporaryRedirect)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	e := newEnv(t, envOptions{wrap: wrap})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "r1")); err != nil {
		t.Fatal(err)
	}

	redirect.Store("/cgi-bin/message/template/send", true)
	var he *platform.HTTPError
	if _, err := e.client.SendTemplate(ctx, exam(follower, "r2")); !errors.As(err, &he) || he.Code != http.StatusTemporaryRedirect {
		t.Errorf("a send redirected: %v, want the 307 as an HTTPError", err)
	}
	redirect.Delete("/cgi-bin/message/template/send")

	e.platformToken(t, true) // the held token is revoked: the next send fetches one
	redirect.Store("/cgi-bin/stable_token", true)
	var ns *platform.NotSentError
	if _, err := e.client.SendTemplate(ctx, exam(follower, "r3")); !errors.As(err, &ns) {
		t.Errorf("a send whose token request was redirected: %v, want a NotSentError", err)
	}

	redirect.Store("/sns/oauth2/access_token", true)
	wa, err := platform.NewWebAuth(platform.WebAuthConfig{OAuthBase: platform.DefaultOAuthBase, APIBase: e.srv.URL, AppID: appID, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wa.OpenID(ctx, "code-of-the-platform"); err == nil {
		t.Error("a code exchange redirected succeeded")
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the host the platform's address redirected to received %d requests, with the AppSecret or an access token", n)
	}
}
