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
// gateways ask with HEAD among them.
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
	for _, p := range paths {
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
