package server_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/server"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestHeadOnEveryGet: every GET route of the front end answers HEAD with the GET's status and
// headers and no body (RFC 9110 §9.1 and §9.3.2), the probes and documents that monitoring and
// gateways ask with HEAD among them; but the GETs that use up a one-time value or end a
// session, where HEAD is 405 (TestHeadUsesUpNothing).
func TestHeadOnEveryGet(t *testing.T) {
	st, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	realm := "/auth/realms/" + st.Config.OAuth.Realm
	var paths []string
	for _, r := range st.API.Server.Echo().Routes() {
		if r.Method != http.MethodGet {
			continue
		}
		parts := strings.Split(r.Path, "/")
		for i, p := range parts {
			if strings.HasPrefix(p, ":") {
				parts[i] = "0123456789abcdef" // a parameter no record has
			}
		}
		paths = append(paths, strings.Join(parts, "/"))
	}
	sort.Strings(paths)
	for _, must := range []string{"/healthz", "/readyz", "/metrics", server.OpenAPIPath, realm + "/.well-known/openid-configuration", realm + "/protocol/openid-connect/certs"} {
		if !slices.Contains(paths, must) {
			t.Errorf("%s is not a GET route", must)
		}
	}
	// Headers whose value differs from one request to the next.
	volatile := map[string]bool{"Date": true, "Content-Length": true, "Set-Cookie": true, "Content-Security-Policy": true, "Location": true}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, st.Info.BaseURL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	once := []string{"/v1/infra/notification/mp/callback", realm + "/broker/cas/endpoint", realm + "/login-actions/signed-in", realm + "/protocol/openid-connect/logout",
		"/bind/platform", "/bind/signed-in"}
	for _, p := range paths {
		if slices.Contains(once, p) {
			if head, _ := do(http.MethodHead, p); head.StatusCode != http.StatusMethodNotAllowed { //nolint:bodyclose // do closes the body before it returns
				t.Errorf("HEAD %s: %d, want 405", p, head.StatusCode)
			}
			continue
		}
		get, getBody := do(http.MethodGet, p)    //nolint:bodyclose // do closes the body before it returns
		head, headBody := do(http.MethodHead, p) //nolint:bodyclose // do closes the body before it returns
		if head.StatusCode != get.StatusCode {
			t.Errorf("HEAD %s: %d, GET: %d", p, head.StatusCode, get.StatusCode)
			continue
		}
		if len(headBody) != 0 {
			t.Errorf("HEAD %s: a body of %d bytes", p, len(headBody))
		}
		if len(getBody) == 0 && get.StatusCode == http.StatusOK {
			t.Errorf("GET %s: 200 without a body", p)
		}
		for k := range mergeKeys(get.Header, head.Header) {
			if volatile[k] {
				if (get.Header.Get(k) == "") != (head.Header.Get(k) == "") && k != "Content-Length" {
					t.Errorf("%s %s: GET %q, HEAD %q", p, k, get.Header.Get(k), head.Header.Get(k))
				}
				continue
			}
			if g, h := strings.Join(get.Header.Values(k), ", "), strings.Join(head.Header.Values(k), ", "); g != h {
				t.Errorf("%s %s: GET %q, HEAD %q", p, k, g, h)
			}
		}
	}
	if len(paths) < 20 {
		t.Errorf("only %d GET routes: %v", len(paths), paths)
	}
}

func mergeKeys(a, b http.Header) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// TestHeadUsesUpNothing: HEAD is safe (RFC 9110 §9.2.1): a GET that uses up a one-time value
// (the platform's signed address check, whose nonce is taken; the return from the campus
// sign-on or the platform with its one-time ticket or code; a sign-out; a binding's sign-in
// ticket) is not run for a HEAD, which a link preview or a prefetching proxy may send first:
// HEAD there is 405, and the GET that follows still works.
func TestHeadUsesUpNothing(t *testing.T) {
	e := newEnv(t)
	q := e.plainQuery(cbToken, "head-check")
	if a := e.do(http.MethodHead, callbackPath+"?"+q+"&echostr=abc", "", "", ""); a.status != http.StatusMethodNotAllowed || !strings.Contains(a.header.Get("Allow"), "GET") {
		t.Fatalf("HEAD of the signed address check: %d, Allow %q; want 405 naming GET", a.status, a.header.Get("Allow"))
	}
	if a := e.do(http.MethodGet, callbackPath+"?"+q+"&echostr=abc", "", "", ""); a.status != http.StatusOK || string(a.body) != "abc" {
		t.Fatalf("the address check after a HEAD of it: %d %s; want 200 abc", a.status, a.body)
	}
	realm := "/auth/realms/" + e.cfg.OAuth.Realm
	for _, p := range []string{realm + "/broker/cas/endpoint", realm + "/protocol/openid-connect/logout", "/bind/platform", "/bind/signed-in"} {
		if a := e.do(http.MethodHead, p, "", "", ""); a.status != http.StatusMethodNotAllowed {
			t.Errorf("HEAD %s: %d; want 405", p, a.status)
		}
	}
}
