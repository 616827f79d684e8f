package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/server"
	"github.com/campus-it/ucs/pkg/standalone"
)

// exampleSecret is the placeholder secret of the examples' client: the tests register demo-app
// with it, so that a token example goes through the real grant.
const exampleSecret = "your-client-secret"

// docsEnv is a service whose clients are those the description's examples name.
func docsEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, func(c *config.Config) {
		c.OAuth.Clients = []config.Client{
			{ClientID: "demo-app", ClientSecret: exampleSecret, Grants: []string{"client_credentials", "authorization_code", "refresh_token"},
				Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{"https://app.example.edu/callback"}},
			{ClientID: "fake-api-test", ClientSecret: fakeSecret, Grants: []string{"client_credentials"}, Scopes: []string{"fake_api"}},
		}
	})
}

// description fetches the served OpenAPI description, without a token.
func (e *env) description(t *testing.T) map[string]any {
	t.Helper()
	a := e.do("GET", server.OpenAPIPath, "", "", "")
	if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
		t.Fatalf("%s: %d %s", server.OpenAPIPath, a.status, a.header.Get("Content-Type"))
	}
	return a.json(t)
}

// operation is one method on one path of the description.
type operation struct {
	method, path string // path as described, {realm} filled in
	op           map[string]any
}

func operations(t *testing.T, doc map[string]any, realm string) []operation {
	t.Helper()
	var ops []operation
	for p, item := range doc["paths"].(map[string]any) {
		for m, op := range item.(map[string]any) {
			if o, ok := op.(map[string]any); ok && m != "parameters" {
				ops = append(ops, operation{strings.ToUpper(m), strings.ReplaceAll(p, "{realm}", realm), o})
			}
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].path+ops[i].method < ops[j].path+ops[j].method })
	return ops
}

// TestOpenAPIDescribesEveryRoute: every route the front end registers is in the description
// with its method and path, and the description describes nothing the front end lacks.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	// The standalone stack registers every route there is: the operations page (its first
	// demo user is an operator) and the sandbox phones, beside the rest.
	st, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e := &env{t: t, url: st.Info.BaseURL, api: st.API, cfg: st.Config}
	var registered []string
	for _, r := range e.api.Server.Echo().Routes() {
		if r.Method == http.MethodHead {
			continue // every GET answers HEAD too, as info.description says (TestHeadOnEveryGet)
		}
		parts := strings.Split(r.Path, "/")
		for i, p := range parts {
			if strings.HasPrefix(p, ":") {
				parts[i] = "{" + p[1:] + "}"
			}
		}
		registered = append(registered, r.Method+" "+strings.Join(parts, "/"))
	}
	var described []string
	for _, o := range operations(t, e.description(t), e.cfg.OAuth.Realm) {
		described = append(described, o.method+" "+o.path)
	}
	var undescribed, missing []string
	for _, r := range registered {
		if !slices.Contains(described, r) {
			undescribed = append(undescribed, r)
		}
	}
	for _, d := range described {
		if !slices.Contains(registered, d) {
			missing = append(missing, d)
		}
	}
	sort.Strings(undescribed)
	sort.Strings(missing)
	if len(undescribed) > 0 {
		t.Errorf("routes not in schemas/openapi.json:\n  %s", strings.Join(undescribed, "\n  "))
	}
	if len(missing) > 0 {
		t.Errorf("described in schemas/openapi.json but not served:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(registered) < 30 {
		t.Errorf("only %d routes seen: %v", len(registered), registered)
	}
}

// TestOpenAPIExamplesHold sends every example of the description through the real server.
// A request example must pass the front end's own checks (push.Parse for a push body and for
// each item of a batch) and be the request of some answer's example. An answer's example that
// names its request (x-request) is what the server really answers to that request: the same
// status, the same body (apart from what differs on every request: time, ucsId,
// access_token) and the headers it names.
func TestOpenAPIExamplesHold(t *testing.T) {
	e := docsEnv(t)
	realm := e.cfg.OAuth.Realm
	tokens := map[string]string{
		"notification.mp": e.token("demo-app", exampleSecret),
		"fake_api":        e.token("fake-api-test", fakeSecret),
	}
	sent := 0
	for _, o := range operations(t, e.description(t), realm) {
		name := o.method + " " + o.path
		var reqType string
		reqExamples := map[string]any{}
		if rb := resolveRef(t, e, o.op["requestBody"]); rb != nil {
			for ct, mt := range rb["content"].(map[string]any) {
				reqType = ct
				m := mt.(map[string]any)
				exs, _ := m["examples"].(map[string]any)
				schema, _ := m["schema"].(map[string]any)
				for n, ex := range exs {
					v := ex.(map[string]any)["value"]
					reqExamples[n] = v
					checkRequestExample(t, name+" example "+n, schema["$ref"], v)
				}
			}
		}
		used := map[string]bool{}
		for status, r := range o.op["responses"].(map[string]any) {
			resp := resolveRef(t, e, r)
			for _, mt := range mapOf(resp["content"]) {
				for n, ex := range mapOf(mt.(map[string]any)["examples"]) {
					exm := resolveRef(t, e, ex)
					x, ok := exm["x-request"].(map[string]any)
					if !ok {
						continue
					}
					where := fmt.Sprintf("%s %s example %s", name, status, n)
					var bodies []any
					if names, ok := x["examples"].([]any); ok {
						for _, rn := range names {
							v, ok := reqExamples[rn.(string)]
							if !ok {
								t.Errorf("%s: no request example %v", where, rn)
							}
							used[rn.(string)] = true
							bodies = append(bodies, v)
						}
					} else {
						bodies = append(bodies, x["body"])
					}
					for _, body := range bodies {
						sent++
						a := e.sendExample(t, o, x, reqType, body, tokens)
						want := exm["value"]
						if fmt.Sprint(a.status) != status {
							t.Errorf("%s: status %d, described %s; body %s", where, a.status, status, a.body)
							continue
						}
						var got any
						if err := json.Unmarshal(a.body, &got); err != nil {
							t.Errorf("%s: answer %q: %v", where, a.body, err)
							continue
						}
						if diffs := sameJSON(want, got, ""); len(diffs) > 0 {
							t.Errorf("%s: the server answers otherwise:\n  %s\n  answer: %s", where, strings.Join(diffs, "\n  "), a.body)
						}
						for h, v := range mapOf(exm["x-response-headers"]) {
							if got := a.header.Get(h); got != v {
								t.Errorf("%s: %s is %q, described %q", where, h, got, v)
							}
						}
					}
				}
			}
		}
		for n := range reqExamples {
			if !used[n] {
				t.Errorf("%s: request example %s is the request of no answer's example (x-request), so nothing checks it", name, n)
			}
		}
	}
	if sent < 30 {
		t.Errorf("only %d examples sent; the walk missed some", sent)
	}
}

func mapOf(v any) map[string]any { m, _ := v.(map[string]any); return m }

// resolveRef follows a "#/components/…" reference of the served description.
func resolveRef(t *testing.T, e *env, v any) map[string]any {
	t.Helper()
	m := mapOf(v)
	ref, ok := m["$ref"].(string)
	if !ok {
		return m
	}
	var cur any = e.description(t)
	for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		cur = mapOf(cur)[p]
	}
	if cur == nil {
		t.Fatalf("%s resolves to nothing", ref)
	}
	return mapOf(cur)
}

// checkRequestExample runs the front end's validation of a push body on a push or batch example.
func checkRequestExample(t *testing.T, where string, schemaRef any, v any) {
	t.Helper()
	var items []any
	switch schemaRef {
	case "#/components/schemas/PushBody":
		items = []any{v}
	case "#/components/schemas/BatchBody":
		items = mapOf(v)["messages"].([]any)
	default:
		return
	}
	for i, it := range items {
		b, _ := json.Marshal(it)
		if _, err := push.Parse(b); err != nil {
			t.Errorf("%s (item %d): push.Parse refuses it: %v", where, i, err)
		}
	}
}

// sendExample sends the request an answer's example names (x-request) to the operation.
func (e *env) sendExample(t *testing.T, o operation, x map[string]any, reqType string, body any, tokens map[string]string) answer {
	t.Helper()
	path := o.path
	for k, v := range mapOf(x["path"]) {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v.(string)))
	}
	ct := reqType
	if c, ok := x["contentType"].(string); ok {
		ct = c
	}
	var raw string
	switch b := body.(type) {
	case nil:
		ct = ""
	case string:
		raw = b
	case map[string]any:
		if ct == "application/x-www-form-urlencoded" {
			f := url.Values{}
			for k, v := range b {
				f.Set(k, v.(string))
			}
			raw = f.Encode()
		} else {
			j, _ := json.Marshal(b)
			raw = string(j)
		}
	}
	headers := map[string]string{}
	for k, v := range mapOf(x["headers"]) {
		headers[k] = v.(string)
	}
	auth, given := headers["Authorization"]
	switch tok, _ := x["token"].(string); {
	case given, tok == "none":
	case tok != "":
		auth = tokens[tok]
	default:
		// a token with the scopes the operation asks for
		for _, req := range o.op["security"].([]any) {
			for _, scopes := range mapOf(req) {
				for _, s := range scopes.([]any) {
					if tk, ok := tokens[s.(string)]; ok {
						auth = tk
					} else {
						t.Fatalf("%s %s: no test client has scope %v", o.method, o.path, s)
					}
				}
			}
		}
	}
	req, err := http.NewRequest(o.method, e.url+path, strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf strings.Builder
	_, _ = fmt.Fprint(&buf, readAll(t, resp))
	return answer{status: resp.StatusCode, header: resp.Header, body: []byte(buf.String())}
}

func readAll(t *testing.T, r *http.Response) string {
	t.Helper()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// varying are the members whose values differ on every request: they must be there, strings,
// but not equal.
var varying = []string{"time", "ucsId", "access_token"}

// sameJSON lists where got differs from want.
func sameJSON(want, got any, at string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v, described %v", at, got, want)}
		}
		var d []string
		for k, wv := range w {
			gv, ok := g[k]
			switch {
			case !ok:
				d = append(d, at+"."+k+": missing")
			case slices.Contains(varying, k):
				if s, ok := gv.(string); !ok || s == "" {
					d = append(d, fmt.Sprintf("%s.%s: %v, want a string", at, k, gv))
				}
			default:
				d = append(d, sameJSON(wv, gv, at+"."+k)...)
			}
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				d = append(d, at+"."+k+": not described")
			}
		}
		return d
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %v, described %v", at, got, want)}
		}
		var d []string
		for i := range w {
			d = append(d, sameJSON(w[i], g[i], fmt.Sprintf("%s[%d]", at, i))...)
		}
		return d
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return []string{fmt.Sprintf("%s: %v, described %v", at, got, want)}
	}
	return nil
}

// TestAPIDocsPageInChromium: the documentation page, in a real browser that enforces its
// Content-Security-Policy on a phone-sized screen, shows a heading for every operation of the
// description and every component schema, styles them, runs no script, fits the screen, and its
// table of contents leads to the operations.
func TestAPIDocsPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser test")
	}
	e := docsEnv(t)
	doc := e.description(t)
	var want []string
	for _, o := range operations(t, doc, "{realm}") {
		want = append(want, o.method+" "+o.path)
	}
	sort.Strings(want)
	var wantSchemas []string
	for n := range doc["components"].(map[string]any)["schemas"].(map[string]any) {
		wantSchemas = append(wantSchemas, n)
	}
	sort.Strings(wantSchemas)

	a := e.do("GET", server.DocsPath, "", "", "")
	if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(a.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("%s: %d, %q, CSP %q", server.DocsPath, a.status, a.header.Get("Content-Type"), a.header.Get("Content-Security-Policy"))
	}

	ctx, problems := chromium(t)
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url+server.DocsPath), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
		t.Fatal(err)
	}
	var headings []string
	if err := json.Unmarshal([]byte(eval(`JSON.stringify([...document.querySelectorAll("h3.operation")].map(h => h.innerText.replace(/\s+/, " ").trim()))`)), &headings); err != nil {
		t.Fatal(err)
	}
	sort.Strings(headings)
	if !slices.Equal(headings, want) {
		t.Errorf("operation headings on the page:\n  %s\nwant:\n  %s", strings.Join(headings, "\n  "), strings.Join(want, "\n  "))
	}
	var schemas []string
	if err := json.Unmarshal([]byte(eval(`JSON.stringify([...document.querySelectorAll("#schemas h3")].map(h => h.id.replace(/^schema-/, "")))`)), &schemas); err != nil {
		t.Fatal(err)
	}
	sort.Strings(schemas)
	if !slices.Equal(schemas, wantSchemas) {
		t.Errorf("schemas on the page %v, want %v", schemas, wantSchemas)
	}
	// The push operation shows its body's fields, an example of each type, and its error codes.
	push := eval(`document.getElementById("op-push").parentElement.textContent`)
	for _, s := range []string{"userId", "Idempotency-Key", "TDL 待办事项", "OPPAN", "A00400", "data.content: 23 characters, at most 20", "WWW-Authenticate", "Bearer, scope notification.mp"} {
		if !strings.Contains(push, s) {
			t.Errorf("the push section lacks %q", s)
		}
	}
	if n := eval(`String(document.scripts.length)`); n != "0" {
		t.Errorf("the page has %s scripts", n)
	}
	// The style ran under the CSP nonce: methods have their badge colours.
	if bg := eval(`getComputedStyle(document.querySelector("h3.operation .method.post")).backgroundColor`); bg != "rgb(29, 90, 166)" {
		t.Errorf("the page's style did not apply (badge %q)", bg)
	}
	if w := eval(`document.documentElement.scrollWidth + " " + window.innerWidth`); strings.Fields(w)[0] != strings.Fields(w)[1] {
		t.Errorf("the page is wider than a phone screen (content, window): %s", w)
	}
	// On a phone the contents are folded; open them and follow the link to the lookup.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".toc-phone summary")),
		chromedp.Click(chromedp.CSS(`.toc-phone a[href="#op-lookup"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return eval(`location.hash + " " + String(Math.abs(document.getElementById("op-lookup").getBoundingClientRect().top) < 40)`) == "#op-lookup true"
	})
	// On a desktop the contents stand beside the text.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 900)); err != nil {
		t.Fatal(err)
	}
	if v := eval(`getComputedStyle(document.querySelector(".toc-desktop")).display + " " + getComputedStyle(document.querySelector(".toc-desktop")).position`); v != "block sticky" {
		t.Errorf("desktop contents: %q", v)
	}
	// With UCS_SCREENSHOTS set to a folder, the top of the page at a desktop's size goes there
	// (the README's apidocs.png).
	if dir := os.Getenv("UCS_SCREENSHOTS"); dir != "" {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 1100)); err != nil {
			t.Fatal(err)
		}
		eval(`window.scrollTo(0, 0); ""`)
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "apidocs.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if errs := problems.all(); len(errs) > 0 {
		t.Fatalf("the browser reported errors: %v", errs)
	}
	_ = context.Background
}
