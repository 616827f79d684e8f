package server_test

// The HTTP interface as an outside client, a validator or a generated SDK sees it: what the
// server answers agrees with the interface and with the served OpenAPI description.

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/server"
)

// TestEveryAnsweredStatusDescribed: README says the served OpenAPI description "lists every
// operation, body, status and example". A generated SDK or a contract tester (Schemathesis,
// libopenapi-validator) treats a status an operation does not list as a broken contract. These
// requests, each one an ordinary client mistake or a documented refusal (deployments/README.md:
// Content-Encoding is refused with 415; a token given twice to userinfo is 400
// invalid_request; an address that fails client authentication too often gets 429), are
// answered with statuses their operations describe.
func TestEveryAnsweredStatusDescribed(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) { c.OAuth.RateLimits.Disabled = true })
	described := describedStatuses(t, e)
	tok := e.token("pusher", pushSecret)
	oidc := "/auth/realms/" + e.cfg.OAuth.Realm + "/protocol/openid-connect"
	var bad []string
	check := func(method, path string, got int) {
		t.Helper()
		op := method + " " + path
		if _, ok := described[op]; !ok {
			t.Fatalf("%s is not an operation of the description", op)
		}
		if !slices.Contains(described[op], got) {
			list := slices.Sorted(slices.Values(described[op]))
			bad = append(bad, fmt.Sprintf("%s answers %d; the description lists only %v", op, got, list))
		}
	}
	gz := map[string]string{"Content-Encoding": "gzip", "Content-Type": form}
	// 1. A compressed body (deployments/README.md, TestContentEncodingRefused: 415).
	for _, p := range []string{"/v1/token", oidc + "/token", oidc + "/revoke", oidc + "/token/introspect", oidc + "/userinfo"} {
		a := e.doWith("POST", p, "", "x", gz)
		if a.status != http.StatusUnsupportedMediaType {
			t.Fatalf("POST %s with Content-Encoding gzip: %d %s, want 415", p, a.status, a.body)
		}
		check("POST", p, a.status)
	}
	a := e.doWith("POST", callbackPath+"?signature=x&timestamp=1&nonce=n", "", "x", map[string]string{"Content-Encoding": "gzip", "Content-Type": "text/xml"})
	check("POST", callbackPath, a.status)
	// 2. The token in the header and in the form (README: 400 invalid_request, RFC 6750 §3.1).
	a = e.doWith("POST", oidc+"/userinfo", tok, "access_token=abc", map[string]string{"Content-Type": form})
	if a.status != http.StatusBadRequest {
		t.Fatalf("userinfo with the token twice: %d %s", a.status, a.body)
	}
	check("POST", oidc+"/userinfo", a.status)
	// 3. An address that fails client authentication more than 1,000 times
	// (deployments/README.md: "429, Retry-After: for its wrong client secrets").
	wrong := url.Values{"client_id": {"pusher"}, "client_secret": {"wrong-secret"}, "token": {"x"}}.Encode()
	got := 0
	for i := 0; i < 1100 && got != http.StatusTooManyRequests; i++ {
		got = e.doWith("POST", oidc+"/revoke", "", wrong, map[string]string{"Content-Type": form}).status
	}
	if got != http.StatusTooManyRequests {
		t.Fatalf("1,100 wrong secrets at revoke: last status %d, want 429", got)
	}
	check("POST", oidc+"/revoke", got)
	check("POST", oidc+"/token/introspect", e.doWith("POST", oidc+"/token/introspect", "", wrong, map[string]string{"Content-Type": form}).status)
	lo := url.Values{"client_id": {"pusher"}, "client_secret": {"wrong-secret"}, "refresh_token": {"x"}}.Encode()
	check("POST", oidc+"/logout", e.doWith("POST", oidc+"/logout", "", lo, map[string]string{"Content-Type": form}).status)
	if len(bad) > 0 {
		t.Errorf("statuses the served OpenAPI description does not list for the operation (expected: every status answered is described):\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestServersURLKeepsPublicURLPath: the served description's only server is "/",
// described as "the address that served this description (the front end's public_url)".
// public_url may carry a path (config accepts https://gw.example.edu/ucs; the issuer and the
// discovery document then live under /ucs). OpenAPI 3.1 §4.8.5 resolves a relative server URL
// against the document's location, so the server URL carries the path: an SDK generated from
// https://gw.example.edu/ucs/v1/meta/openapi.json calls https://gw.example.edu/ucs/v1/….
func TestServersURLKeepsPublicURLPath(t *testing.T) {
	const public = "https://gw.example.edu/ucs"
	e := newEnvWith(t, func(c *config.Config) { c.PublicURL = public })
	realm := e.cfg.OAuth.Realm
	disc := e.do("GET", "/auth/realms/"+realm+"/.well-known/openid-configuration", "", "", "").json(t)
	wantToken, _ := disc["token_endpoint"].(string)
	if !strings.HasPrefix(wantToken, public+"/") {
		t.Fatalf("discovery token_endpoint %q is not under public_url %s", wantToken, public)
	}
	doc := e.description(t)
	servers, _ := doc["servers"].([]any)
	if len(servers) == 0 {
		t.Fatal("no servers")
	}
	srv, _ := servers[0].(map[string]any)["url"].(string)
	docURL, _ := url.Parse(public + server.OpenAPIPath)
	base, err := docURL.Parse(srv)
	if err != nil {
		t.Fatal(err)
	}
	// OpenAPI: the operation's path is appended to the server URL.
	gotToken := strings.TrimRight(base.String(), "/") + "/auth/realms/" + realm + "/protocol/openid-connect/token"
	gotPush := strings.TrimRight(base.String(), "/") + "/v1/infra/notification/mp"
	if gotToken != wantToken {
		t.Errorf("servers[0].url %q, served at %s, puts the token operation at %s; the discovery document (and public_url) put it at %s. A generated client calls %s for pushes instead of %s",
			srv, docURL, gotToken, wantToken, gotPush, public+"/v1/infra/notification/mp")
	}
}

// TestWrongMethodOnBatchPaths: /v1/infra/notification/mp/batch and …/results are
// concrete paths of the description with POST only. OpenAPI 3.1 §4.8.8.2: "When matching URLs,
// concrete (non-templated) paths would be matched before their templated counterparts", and
// RFC 9110 §15.5.6: a method the target resource does not support is 405 with Allow, as for
// GET /v1/infra/notification/mp; not a lookup of a push named "batch".
func TestWrongMethodOnBatchPaths(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	ref := e.do("GET", "/v1/infra/notification/mp", "", tok, "")
	if ref.status != http.StatusMethodNotAllowed || ref.header.Get("Allow") == "" {
		t.Fatalf("GET /v1/infra/notification/mp: %d Allow %q", ref.status, ref.header.Get("Allow"))
	}
	for _, p := range []string{"/v1/infra/notification/mp/batch", "/v1/infra/notification/mp/results"} {
		for _, m := range []string{"GET", "HEAD"} {
			a := e.do(m, p, "", tok, "")
			if a.status != http.StatusMethodNotAllowed || !strings.Contains(a.header.Get("Allow"), "POST") {
				t.Errorf("%s %s: %d Allow %q %s; want 405 with Allow naming POST, as GET /v1/infra/notification/mp answers", m, p, a.status, a.header.Get("Allow"), a.body)
			}
		}
	}
}

// TestLowerCaseUcsID: the description calls the ucsId "a ULID"; the ULID specification
// (github.com/ulid/spec: "Case insensitive", Crockford's base 32) makes 01m8… and 01M8… the
// same identifier. A client that stores or normalises ids in lower case is told that its own
// push does not exist (404 single, not_found in a batch lookup), nowhere documented.
func TestLowerCaseUcsID(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	a := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, goodItemN(1))
	id := a.json(t)["data"].(map[string]any)["ucsId"].(string)
	if got := e.do("GET", "/v1/infra/notification/mp/"+id, "", tok, ""); got.status != 200 {
		t.Fatalf("own push: %d %s", got.status, got.body)
	}
	low := strings.ToLower(id)
	if got := e.do("GET", "/v1/infra/notification/mp/"+low, "", tok, ""); got.status != 200 {
		t.Errorf("GET …/mp/%s (the caller's own ucsId %s in lower case): %d %s; expected the push's result (ULIDs are case-insensitive)", low, id, got.status, got.body)
	}
	if got := e.do("POST", "/v1/infra/notification/mp/results", "application/json", tok, `{"ucsIds":["`+low+`"]}`); !strings.Contains(string(got.body), `"queued"`) {
		t.Errorf("results for %s: %s; expected state queued", low, got.body)
	}
}
