package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/server"
	"github.com/campus-it/ucs/pkg/service"
)

// pendingKey writes the record a request holding Idempotency-Key name for client would
// have written while it is under way (notification.keyRecord, pending since now).
func pendingKey(t *testing.T, e *env, client, name, body string) {
	t.Helper()
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, service.IdempotencyBucket)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(client + "\x00" + name))
	bh := sha256.Sum256([]byte(body))
	rec, _ := json.Marshal(map[string]any{"h": hex.EncodeToString(bh[:]), "ids": []string{"01KAAAAAAAAAAAAAAAAAAAAAAA"}, "pending": e.clock.Now().UnixMilli()})
	if _, err := kv.Create(ctx, hex.EncodeToString(sum[:]), rec); err != nil {
		t.Fatal(err)
	}
}

// describedHeaders returns the header names the description declares for op's status.
func describedHeaders(t *testing.T, e *env, method, path, status string) []string {
	t.Helper()
	doc := e.description(t)
	op := mapOf(mapOf(mapOf(doc["paths"])[path])[strings.ToLower(method)])
	r := resolveRef(t, e, mapOf(op["responses"])[status])
	if r == nil {
		t.Fatalf("%s %s: no response %s", method, path, status)
	}
	var out []string
	for h := range mapOf(r["headers"]) {
		out = append(out, http.CanonicalHeaderKey(h))
	}
	return out
}

// TestKeyInUseRetryAfterDescribed: a push or batch whose Idempotency-Key's first request is
// still under way is answered 409 with Retry-After (pkg/server/push.go notificationError); the
// served description's 409 (components/responses/Conflict) declares no header, so a client
// generated from it never learns when to retry.
func TestKeyInUseRetryAfterDescribed(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	for _, c := range []struct{ path, body string }{
		{"/v1/infra/notification/mp", goodItemN(1)},
		{"/v1/infra/notification/mp/batch", batchBody(goodItemN(2))},
	} {
		name := "review-in-use-" + fmt.Sprint(len(c.path))
		pendingKey(t, e, "pusher", name, c.body)
		a := e.doWith("POST", c.path, tok, c.body, map[string]string{"Idempotency-Key": name})
		if a.status != http.StatusConflict || a.header.Get("Retry-After") == "" {
			t.Fatalf("POST %s with a key under way: %d Retry-After %q %s; want 409 with Retry-After", c.path, a.status, a.header.Get("Retry-After"), a.body)
		}
		t.Logf("POST %s: %d Retry-After %q %s", c.path, a.status, a.header.Get("Retry-After"), a.body)
		hs := describedHeaders(t, e, "POST", c.path, "409")
		found := false
		for _, h := range hs {
			found = found || h == "Retry-After"
		}
		if !found {
			t.Errorf("POST %s answers 409 with Retry-After: %s, but the served description's 409 declares headers %v", c.path, a.header.Get("Retry-After"), hs)
		}
	}
}

// servedValidator is libopenapi-validator with the description the front end serves.
func servedValidator(t *testing.T, e *env) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(e.do("GET", server.OpenAPIPath, "", "", "").body)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return v
}

// agreesWithValidator sends each body to path and checks that the front end takes it (200)
// exactly when the served description's validator does.
func agreesWithValidator(t *testing.T, e *env, tok, path string, bodies []string) {
	t.Helper()
	v := servedValidator(t, e)
	for _, b := range bodies {
		a := e.do("POST", path, "application/json", tok, b)
		req, _ := http.NewRequest(http.MethodPost, "http://x"+path, strings.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", tok)
		ok, verrs := v.ValidateHttpRequest(req)
		if (a.status == http.StatusOK) != ok {
			var msgs []string
			for _, ve := range verrs {
				msgs = append(msgs, ve.Message+": "+ve.Reason)
				for _, f := range ve.SchemaValidationErrors {
					msgs = append(msgs, "  "+f.FieldPath+": "+f.Reason)
				}
			}
			t.Errorf("%s: the front end answers %d %s; the served description's validator accepts %v %v", b, a.status, a.body, ok, msgs)
		}
	}
}

// checkDescribed sends each request and checks the answer with libopenapi-validator against
// the served description.
func checkDescribed(t *testing.T, e *env, reqs []describedReq) []string {
	t.Helper()
	v := servedValidator(t, e)
	var bad []string
	desc := e.description(t)
	for _, r := range reqs {
		req, _ := http.NewRequest(r.m, e.url+r.p, strings.NewReader(r.body))
		if r.ct != "" {
			req.Header.Set("Content-Type", r.ct)
		}
		if r.auth != "" {
			req.Header.Set("Authorization", r.auth)
		}
		for k, val := range r.h {
			req.Header.Set(k, val)
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		vreq, _ := http.NewRequest(r.m, "http://x"+r.p, strings.NewReader(r.body))
		vreq.Header = req.Header.Clone()
		op := r.op
		if op == "" {
			op = describedPath(desc, strings.SplitN(r.p, "?", 2)[0])
		}
		if o := mapOf(mapOf(mapOf(desc["paths"])[op])[strings.ToLower(r.m)]); o != nil {
			if d := mapOf(o["responses"])[fmt.Sprint(resp.StatusCode)]; d != nil {
				declared := map[string]bool{}
				for h := range mapOf(resolveRef(t, e, d)["headers"]) {
					declared[http.CanonicalHeaderKey(h)] = true
				}
				for _, h := range []string{"Retry-After", "Www-Authenticate"} {
					if resp.Header.Get(h) != "" && !declared[h] {
						bad = append(bad, fmt.Sprintf("%s %s -> %d carries %s: %s, which the description's %d does not declare", r.m, r.p, resp.StatusCode, h, resp.Header.Get(h), resp.StatusCode))
					}
					if resp.Header.Get(h) == "" && declared[h] && h == "Retry-After" && resp.StatusCode == http.StatusServiceUnavailable { // a 409 has it only for a key under way
						bad = append(bad, fmt.Sprintf("%s %s -> %d: the description's %d declares %s; the answer has none (%s)", r.m, r.p, resp.StatusCode, resp.StatusCode, h, b))
					}
				}
			}
		}
		if ok, verrs := v.ValidateHttpResponse(vreq, resp); !ok {
			var msgs []string
			for _, ve := range verrs {
				m := ve.Message + ": " + ve.Reason
				for _, f := range ve.SchemaValidationErrors {
					m += " [" + f.FieldPath + ": " + f.Reason + "]"
				}
				msgs = append(msgs, m)
			}
			body := string(b)
			if len(body) > 200 {
				body = body[:200] + "…"
			}
			bad = append(bad, fmt.Sprintf("%s %s -> %d %s\n      %s", r.m, r.p, resp.StatusCode, body, strings.Join(msgs, "\n      ")))
		}
	}
	return bad
}

// describedPath is the key in the description's paths of the concrete path p: p itself, or
// the template it matches ("/auth/realms/{realm}/…").
func describedPath(desc map[string]any, p string) string {
	if _, ok := mapOf(desc["paths"])[p]; ok {
		return p
	}
	parts := strings.Split(p, "/")
	for tmpl := range mapOf(desc["paths"]) {
		tp := strings.Split(tmpl, "/")
		if len(tp) != len(parts) {
			continue
		}
		match := true
		for i := range tp {
			if tp[i] != parts[i] && !(strings.HasPrefix(tp[i], "{") && strings.HasSuffix(tp[i], "}")) {
				match = false
				break
			}
		}
		if match {
			return tmpl
		}
	}
	return p
}

type describedReq struct {
	m, p, ct, auth, body string
	h                    map[string]string
	op                   string // the operation's path in the description, if not p
}

// TestAnswersDescribed: ordinary answers of the interfaces (successes, client mistakes,
// refusals, body-size refusals) are valid for the served description, as libopenapi-validator
// reads it, and carry the Retry-After and WWW-Authenticate headers it declares.
func TestAnswersDescribed(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	fake := e.token("fake-api-test", fakeSecret)
	id := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, goodItemN(1)).json(t)["data"].(map[string]any)["ucsId"].(string)
	oidc := "/auth/realms/" + e.cfg.OAuth.Realm + "/protocol/openid-connect"
	j := "application/json"
	reqs := []describedReq{
		{m: "POST", p: "/v1/token", ct: form, body: "grant_type=client_credentials&client_id=pusher&client_secret=" + pushSecret},
		{m: "POST", p: "/v1/token", ct: form, body: "grant_type=client_credentials&client_id=pusher&client_secret=x"},
		{m: "POST", p: "/v1/token", ct: form, body: "grant_type=password&client_id=pusher&client_secret=" + pushSecret},
		{m: "POST", p: "/v1/token", ct: j, body: "{}"},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: goodItemN(2)},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: goodItemN(3), h: map[string]string{"Idempotency-Key": "abc"}},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: goodItemN(3), h: map[string]string{"Idempotency-Key": "abc"}},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: goodItemN(4), h: map[string]string{"Idempotency-Key": "abc"}},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: goodItemN(4), h: map[string]string{"Idempotency-Key": "a b"}},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: `{}`},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: `[]`},
		{m: "POST", p: "/v1/infra/notification/mp", ct: "text/plain", auth: tok, body: `{}`},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: "", body: goodItemN(5)},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: fake, body: goodItemN(5)},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: "Bearer x", body: goodItemN(5)},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: strings.Repeat(" ", 70000)},
		{m: "POST", p: "/v1/infra/notification/mp/batch", ct: j, auth: tok, body: batchBody(goodItemN(6), badItem)},
		{m: "POST", p: "/v1/infra/notification/mp/batch", ct: j, auth: tok, body: batchBody(badItem)},
		{m: "POST", p: "/v1/infra/notification/mp/batch", ct: j, auth: tok, body: batchBody()},
		{m: "POST", p: "/v1/infra/notification/mp/batch", ct: j, auth: tok, body: `{"messages":[1,"x",null]}`},
		{m: "POST", p: "/v1/infra/notification/mp/batch", ct: j, auth: tok, body: `{}`},
		{m: "POST", p: "/v1/infra/notification/mp/results", ct: j, auth: tok, body: `{"ucsIds":["` + id + `","x",""]}`},
		{m: "POST", p: "/v1/infra/notification/mp/results", ct: j, auth: tok, body: `{"ucsIds":[]}`},
		{m: "POST", p: "/v1/infra/notification/mp/results", ct: j, auth: tok, body: `{"ucsIds":[1]}`},
		{m: "GET", p: "/v1/infra/notification/mp/" + id, auth: tok},
		{m: "GET", p: "/v1/infra/notification/mp/01KAAAAAAAAAAAAAAAAAAAAAAA", auth: tok},
		{m: "GET", p: "/v1/infra/notification/mp/x", auth: tok},
		{m: "GET", p: "/v1/meta/notification/mp/types"},
		{m: "GET", p: "/v1/meta/notification/mp/schema"},
		{m: "GET", p: "/v1/meta/openapi.json"},
		{m: "GET", p: "/v1/fake_api/user", auth: fake},
		{m: "GET", p: "/v1/fake_api/user", auth: tok},
		{m: "GET", p: "/auth/realms/" + e.cfg.OAuth.Realm + "/.well-known/openid-configuration"},
		{m: "GET", p: oidc + "/certs"},
		{m: "GET", p: oidc + "/userinfo", auth: tok},
		{m: "POST", p: oidc + "/token/introspect", ct: form, body: "client_id=pusher&client_secret=" + pushSecret + "&token=" + strings.TrimPrefix(tok, "Bearer ")},
		{m: "POST", p: oidc + "/token/introspect", ct: form, body: "client_id=pusher&client_secret=" + pushSecret + "&token=x"},
		{m: "POST", p: oidc + "/revoke", ct: form, body: "client_id=pusher&client_secret=" + pushSecret + "&token=x"},
		{m: "GET", p: "/healthz"},
		{m: "GET", p: oidc + "/userinfo"},
		{m: "GET", p: oidc + "/userinfo", auth: fake},
		{m: "GET", p: oidc + "/userinfo", auth: "Bearer x"},
		{m: "POST", p: oidc + "/userinfo", ct: form, body: "access_token=" + strings.TrimPrefix(tok, "Bearer ")},
		{m: "POST", p: oidc + "/userinfo", ct: form, body: ""},
		{m: "POST", p: oidc + "/userinfo", ct: form, auth: fake, body: ""},
		{m: "POST", p: oidc + "/token/introspect", ct: form, body: "token=x"},
		{m: "POST", p: oidc + "/revoke", ct: form, body: "token=x"},
		{m: "POST", p: oidc + "/revoke", ct: form, auth: "Basic cHVzaGVyOng=", body: "token=x"},
		{m: "POST", p: oidc + "/token", ct: form, auth: "Basic cHVzaGVyOng=", body: "grant_type=client_credentials"},
		{m: "POST", p: oidc + "/token", ct: form, body: "grant_type=refresh_token&client_id=pusher&client_secret=" + pushSecret + "&refresh_token=x"},
		{m: "POST", p: oidc + "/token", ct: form, body: "grant_type=authorization_code&client_id=webapp&client_secret=" + userSecret + "&code=x&redirect_uri=https://app.example.edu/cb"},
		{m: "POST", p: oidc + "/token", ct: "text/plain", body: "grant_type=client_credentials&client_id=pusher&client_secret=" + pushSecret},
		{m: "POST", p: oidc + "/token", ct: form, body: strings.Repeat("a", 20000)},
		{m: "POST", p: oidc + "/logout", ct: form, body: "client_id=pusher&client_secret=" + pushSecret + "&refresh_token=x"},
		{m: "POST", p: oidc + "/logout", ct: form, body: ""},
		{m: "GET", p: oidc + "/logout"},
		{m: "GET", p: oidc + "/auth?client_id=webapp&response_type=code&redirect_uri=https://app.example.edu/cb"},
		{m: "GET", p: oidc + "/auth"},
		{m: "GET", p: "/v1/fake_api/user", auth: "Bearer"},
		{m: "GET", p: "/v1/fake_api/user", auth: "Basic eDp5"},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: goodItemN(7), h: map[string]string{"Content-Encoding": "gzip"}},
		{m: "POST", p: "/v1/infra/notification/mp/batch", ct: j, auth: tok, body: strings.Repeat(" ", 9<<20)},
		{m: "POST", p: "/v1/infra/notification/mp/results", ct: j, auth: tok, body: strings.Repeat(" ", 200000)},
		{m: "POST", p: callbackPath + "?signature=x&timestamp=1&nonce=n", ct: "text/xml", body: strings.Repeat(" ", 70000), op: callbackPath},
		{m: "GET", p: "/readyz"},
		{m: "GET", p: "/metrics"},
		{m: "GET", p: callbackPath},
		{m: "POST", p: callbackPath, ct: "text/xml", body: "<xml/>"},
	}
	for _, s := range checkDescribed(t, e, reqs) {
		t.Error(s)
	}
}

// TestNATSDownAnswersDescribed: while the front end's NATS is down, every answer of the
// data interfaces is one the served description describes, with the headers it declares.
func TestNATSDownAnswersDescribed(t *testing.T) {
	e, proxy := newEnvBehindProxy(t)
	tok := e.token("pusher", pushSecret)
	id := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, goodItemN(1)).json(t)["data"].(map[string]any)["ucsId"].(string)
	proxy.SetDown(true)
	embeddedtest.Eventually(t, 10*time.Second, "the front end notices NATS is down", func() bool {
		return e.do("GET", "/readyz", "", "", "").status == 503
	})
	j := "application/json"
	reqs := []describedReq{
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: goodItemN(2)},
		{m: "POST", p: "/v1/infra/notification/mp", ct: j, auth: tok, body: goodItemN(3), h: map[string]string{"Idempotency-Key": "down-1"}},
		{m: "POST", p: "/v1/infra/notification/mp/batch", ct: j, auth: tok, body: batchBody(goodItemN(4))},
		{m: "POST", p: "/v1/infra/notification/mp/batch", ct: j, auth: tok, body: batchBody(goodItemN(5)), h: map[string]string{"Idempotency-Key": "down-2"}},
		{m: "POST", p: "/v1/infra/notification/mp/results", ct: j, auth: tok, body: `{"ucsIds":["` + id + `"]}`},
		{m: "GET", p: "/v1/infra/notification/mp/" + id, auth: tok, op: "/v1/infra/notification/mp/{ucsId}"},
		{m: "GET", p: callbackPath + "?" + e.plainQuery(cbToken, "down-check") + "&echostr=abc", op: callbackPath},
		// An event push is left unanswered instead (TestCallbackUnansweredWhileNATSSlow).
		{m: "GET", p: "/readyz"},
	}
	for _, s := range checkDescribed(t, e, reqs) {
		t.Error(s)
	}
}

// metricsNow reads /metrics as name{labels} -> value.
func metricsNow(t *testing.T, e *env) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, l := range strings.Split(string(e.do("GET", "/metrics", "", "", "").body), "\n") {
		if strings.HasPrefix(l, "ucs_") {
			i := strings.LastIndexByte(l, ' ')
			var v float64
			if _, err := fmt.Sscan(l[i+1:], &v); err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			out[l[:i]] = v
		}
	}
	return out
}

// TestMetricsMove: the front end's counters move as deployments/README.md (Monitoring)
// says, by one, with the documented labels.
func TestMetricsMove(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	step := func(what string, f func(), want ...string) {
		before := metricsNow(t, e)
		f()
		after := metricsNow(t, e)
		var moved []string
		for k, v := range after {
			if v != before[k] && !strings.HasPrefix(k, "ucs_consumer_pending") {
				moved = append(moved, fmt.Sprintf("%s %+g", k, v-before[k]))
			}
		}
		sort.Strings(moved)
		sort.Strings(want)
		if strings.Join(moved, ",") != strings.Join(want, ",") {
			t.Errorf("%s: moved %v, want %v", what, moved, want)
		}
	}
	j := "application/json"
	step("push", func() { e.do("POST", "/v1/infra/notification/mp", j, tok, goodItemN(1)) }, "ucs_push_accepted_total +1")
	step("push key", func() {
		e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(2), map[string]string{"Idempotency-Key": "m1"})
	}, "ucs_push_accepted_total +1")
	step("push key replay", func() {
		e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(2), map[string]string{"Idempotency-Key": "m1"})
	}, "ucs_push_idempotent_replays_total +1")
	step("push key other body", func() {
		e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(3), map[string]string{"Idempotency-Key": "m1"})
	})
	step("batch key", func() {
		e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(4), badItem), map[string]string{"Idempotency-Key": "m2"})
	}, "ucs_push_accepted_total +1", `ucs_push_rejected_total{rule="length"} +1`)
	step("batch key replay", func() {
		e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(4), badItem), map[string]string{"Idempotency-Key": "m2"})
	}, "ucs_push_idempotent_replays_total +1")
	step("push unknown field", func() {
		e.do("POST", "/v1/infra/notification/mp", j, tok, `{"userId":"1","type":"TDL","data":{},"x":1}`)
	}, `ucs_push_rejected_total{rule="required"} +1`)
	step("push not json", func() { e.do("POST", "/v1/infra/notification/mp", j, tok, `{`) }, `ucs_push_rejected_total{rule="body"} +1`)
	step("push too large", func() { e.do("POST", "/v1/infra/notification/mp", j, tok, strings.Repeat(" ", 70000)) }, `ucs_push_rejected_total{rule="body"} +1`)
	step("batch item too large", func() {
		e.do("POST", "/v1/infra/notification/mp/batch", j, tok, batchBody(`{"userId":"1"`+strings.Repeat(" ", 70000)+`}`))
	}, `ucs_push_rejected_total{rule="body"} +1`)
	step("token wrong secret", func() {
		e.do("POST", "/v1/token", form, "", "grant_type=client_credentials&client_id=pusher&client_secret=x")
	}, `ucs_security_events_total{event="client_auth_failed"} +1`)
	step("token basic wrong", func() {
		e.doWith("POST", "/v1/token", "Basic cHVzaGVyOng=", "grant_type=client_credentials", map[string]string{"Content-Type": form})
	}, `ucs_security_events_total{event="client_auth_failed"} +1`)
	step("token ok", func() { e.token("pusher", pushSecret) }, `ucs_token_grants_total{grant="client_credentials"} +1`)
	step("token realm ok", func() {
		e.do("POST", "/auth/realms/"+e.cfg.OAuth.Realm+"/protocol/openid-connect/token", form, "", "grant_type=client_credentials&client_id=pusher&client_secret="+pushSecret)
	}, `ucs_token_grants_total{grant="client_credentials"} +1`)
	step("token unsupported grant", func() {
		e.do("POST", "/v1/token", form, "", "grant_type=password&client_id=pusher&client_secret="+pushSecret)
	})
	step("callback bad sig", func() { e.callback("signature=x&timestamp=1&nonce=n", followEvent("oA", "subscribe", 1)) }, `ucs_security_events_total{event="callback_signature_invalid"} +1`)
	step("callback get bad sig", func() { e.do("GET", callbackPath+"?signature=x&timestamp=1&nonce=n&echostr=a", "", "", "") }, `ucs_security_events_total{event="callback_signature_invalid"} +1`)
	q := e.plainQuery(cbToken, "m-1")
	step("callback ok", func() { e.callback(q, followEvent("oA", "subscribe", e.clock.Now().Unix())) })
	check := e.plainQuery(cbToken, "m-2")
	step("callback check ok", func() { e.do("GET", callbackPath+"?"+check+"&echostr=a", "", "", "") })
	step("callback check replayed", func() { e.do("GET", callbackPath+"?"+check+"&echostr=a", "", "", "") }, `ucs_security_events_total{event="callback_replayed"} +1`)
	step("callback signed by a check", func() { e.callback(check, followEvent("oA", "subscribe", e.clock.Now().Unix()+1)) }, `ucs_security_events_total{event="callback_replayed"} +1`)
	step("bearer wrong", func() { e.do("POST", "/v1/infra/notification/mp", j, "Bearer x", goodItemN(9)) })
}

// TestPushBodyValidatorAgrees: push bodies that the front end accepts and refuses, judged
// by libopenapi-validator with the served description, as a gateway or a contract tester does.
func TestPushBodyValidatorAgrees(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	data := func(content string) string {
		b, _ := json.Marshal(map[string]string{"type": "请假", "list": "学生", "step": "审批", "content": content})
		return string(b)
	}
	var bodies []string
	for _, c := range []string{"张三的请假申请", "a\u200bb", "\u3000x", "x\U0001F600", "x\u00a9", "\U00020000", "\U0001D400", "x\u200d", "x\ufe0f", "𝐀𝐁", "\u00ad\u00adx",
		"一二三四五六七八九十一二三四五六七八九十", "一二三四五六七八九十一二三四五六七八九十一", "\u3164", "x\U000E0041", "\U00010000"} {
		bodies = append(bodies, `{"userId":"2020000001","type":"TDL","time":1700000000,"data":`+data(c)+`}`)
	}
	bodies = append(bodies, `{"userId":"2020000001","type":"TDL","time":"1700000000000","url":"https://a.b/c?d#e","data":`+data("x")+`}`,
		`{"userId":"2020000001","type":"TDL","time":1.7e9,"data":`+data("x")+`}`,
		`{"userId":"2020000001","type":"TDL","url":null,"time":null,"data":`+data("x")+`}`)
	agreesWithValidator(t, e, tok, "/v1/infra/notification/mp", bodies)
}

// TestResultsBodyAgreesWithDescription: the served description says ucsIds is an array of
// strings; the server and the description's validator judge each body the same way (a null
// id, like a number, is refused).
func TestResultsBodyAgreesWithDescription(t *testing.T) {
	e := newEnv(t)
	agreesWithValidator(t, e, e.token("pusher", pushSecret), "/v1/infra/notification/mp/results", []string{
		`{"ucsIds":["01KAW3J5M7Q9S2V4X6Z8B0D2F4"]}`,
		`{"ucsIds":[1]}`,
		`{"ucsIds":[null]}`,
		`{"ucsIds":["01KAW3J5M7Q9S2V4X6Z8B0D2F4",null]}`,
	})
}

// TestHeadWithToken: HEAD of the GETs that need a token, called with one, answers as
// the GET does, without a body.
func TestHeadWithToken(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	fake := e.token("fake-api-test", fakeSecret)
	id := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, goodItemN(1)).json(t)["data"].(map[string]any)["ucsId"].(string)
	oidc := "/auth/realms/" + e.cfg.OAuth.Realm + "/protocol/openid-connect"
	volatile := map[string]bool{"Date": true, "Content-Length": true}
	for _, c := range []struct {
		p, auth string
		h       map[string]string
	}{
		{"/v1/infra/notification/mp/" + id, tok, nil},
		{"/v1/infra/notification/mp/" + strings.ToLower(id), tok, nil},
		{"/v1/infra/notification/mp/" + id, fake, nil},
		{"/v1/fake_api/user", fake, nil},
		{"/v1/fake_api/user", tok, nil},
		{oidc + "/userinfo", tok, nil},
		{oidc + "/userinfo", "Bearer x", nil},
		{"/metrics", "", map[string]string{"Accept-Encoding": "gzip"}},
		{"/v1/meta/openapi.json", "", map[string]string{"If-None-Match": "*"}},
		{"/v1/meta/docs", "", nil},
		{"/v1/meta/notification/mp/types?x=1", "", nil},
		{"/healthz/", "", nil},
	} {
		get := e.doWith("GET", c.p, c.auth, "", c.h)
		head := e.doWith("HEAD", c.p, c.auth, "", c.h)
		if get.status != head.status || len(head.body) != 0 {
			t.Errorf("%s: GET %d, HEAD %d with %d bytes", c.p, get.status, head.status, len(head.body))
			continue
		}
		for k := range mergeKeys(get.header, head.header) {
			if volatile[k] || k == "Content-Security-Policy" {
				continue
			}
			if g, h := strings.Join(get.header.Values(k), ", "), strings.Join(head.header.Values(k), ", "); g != h {
				t.Errorf("%s %s: GET %q, HEAD %q", c.p, k, g, h)
			}
		}
	}
}

// TestClientEndpoints415AndUserinfo400AreDescribed: a compressed form at the token,
// introspection and revocation endpoints is answered 415 in OAuth's shape, and userinfo's
// malformed requests (the token in the header and the form, given twice, a form too large to
// read) 400 invalid_request in OAuth's shape too (RFC 6750 §3.1): each as the served
// description gives it, so that a client generated from it, or an OpenID Connect library
// reading "error", decodes the answer.
func TestClientEndpoints415AndUserinfo400AreDescribed(t *testing.T) {
	e := newEnv(t)
	oidc := "/auth/realms/" + e.cfg.OAuth.Realm + "/protocol/openid-connect"
	gz := map[string]string{"Content-Encoding": "gzip"}
	creds := "client_id=pusher&client_secret=" + pushSecret
	tok := e.token("pusher", pushSecret)
	reqs := []describedReq{
		{m: "POST", p: "/v1/token", ct: form, h: gz, body: "grant_type=client_credentials&" + creds},
		{m: "POST", p: oidc + "/token", ct: form, h: gz, body: "grant_type=client_credentials&" + creds},
		{m: "POST", p: oidc + "/token/introspect", ct: form, h: gz, body: creds + "&token=x"},
		{m: "POST", p: oidc + "/revoke", ct: form, h: gz, body: creds + "&token=x"},
		{m: "POST", p: oidc + "/userinfo", ct: form, auth: tok, body: "access_token=x"},
		{m: "POST", p: oidc + "/userinfo", ct: form, body: "access_token=x&access_token=y"},
		{m: "POST", p: oidc + "/userinfo", ct: form, body: "access_token=" + strings.Repeat("a", 2<<20)},
	}
	for _, s := range checkDescribed(t, e, reqs) {
		t.Error(s)
	}
}

// TestBrowserForms415AndAccountOff404AreDescribed: the browser forms (authorization, sign-in,
// consent, logout, the account page's two forms) refuse a compressed body with 415, and the
// account page, sign-in not configured, answers 404 with a page saying so: both as the served
// description lists them.
func TestBrowserForms415AndAccountOff404AreDescribed(t *testing.T) {
	e := newEnv(t)
	realm := "/auth/realms/" + e.cfg.OAuth.Realm
	gz := map[string]string{"Content-Encoding": "gzip"}
	reqs := []describedReq{{m: "GET", p: realm + "/account"}}
	for _, p := range []string{realm + "/protocol/openid-connect/auth", realm + "/login-actions/authenticate", realm + "/login-actions/consent",
		realm + "/protocol/openid-connect/logout", realm + "/account/grants/revoke", realm + "/account/sessions/end"} {
		reqs = append(reqs, describedReq{m: "POST", p: p, ct: form, h: gz, body: "a=b"})
	}
	for _, s := range checkDescribed(t, e, reqs) {
		t.Error(s)
	}
}
