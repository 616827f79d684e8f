package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/push"
)

// unknownKeys is a push body with n unknown top-level keys after valid fields.
func unknownKeys(n int) string {
	var b strings.Builder
	b.WriteString(`{"userId":"2020000001","type":"JML","data":{"class":"高等数学","info":"第三章习题"}`)
	for i := range n {
		fmt.Fprintf(&b, `,"k%04d":0`, i)
	}
	b.WriteString("}")
	return b.String()
}

// TestErrorListsAreCapped: 5,000 unknown keys in a 49 KB body used to give a 174 KB error.
// Now a push's message and a batch item's errors list the first 20 problems and count the
// rest, in the same envelope.
func TestErrorListsAreCapped(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	body := unknownKeys(5000)
	if len(body) > push.MaxBodyBytes {
		t.Fatalf("test body of %d bytes is over the push limit", len(body))
	}
	a := e.doWith("POST", "/v1/infra/notification/mp", tok, body, nil)
	m := a.json(t)
	msg, _ := m["msg"].(string)
	parts := strings.Split(msg, "; ")
	if a.status != 400 || m["code"] != "A00400" || m["data"] != nil || len(parts) != push.MaxListedProblems+1 {
		t.Fatalf("%d, %d parts: %.300s", a.status, len(parts), a.body)
	}
	if parts[0] != "k0000: not a field of a push body" || parts[19] != "k0019: not a field of a push body" || parts[20] != "… and 4980 more problems" {
		t.Fatalf("message %q … %q", parts[0], parts[19:])
	}
	if len(a.body) > 2048 {
		t.Fatalf("error body of %d bytes", len(a.body))
	}

	a = e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(0), unknownKeys(5000)), nil)
	d := a.batch(t)
	if a.status != 200 || d.Accepted != 1 || d.Rejected != 1 {
		t.Fatalf("batch: %d %.300s", a.status, a.body)
	}
	errs := d.Results[1].Errors
	if len(errs) != push.MaxListedProblems+1 || errs[0] != "k0000: not a field of a push body" || errs[20] != "… and 4980 more problems" {
		t.Fatalf("batch item errors: %d, %q … %q", len(errs), errs[0], errs[len(errs)-1])
	}
	if len(a.body) > 4096 {
		t.Fatalf("batch answer of %d bytes", len(a.body))
	}
	// 21 problems: the twenty-first is counted, not listed.
	if msg := e.doWith("POST", "/v1/infra/notification/mp", tok, unknownKeys(21), nil).json(t)["msg"].(string); !strings.HasSuffix(msg, "k0019: not a field of a push body; … and 1 more problem") {
		t.Fatalf("21 problems: %q", msg)
	}
	if n := e.streamMsgs(); n != 1 {
		t.Fatalf("stream holds %d messages, want the one good item", n)
	}
}

func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestContentEncodingRefused: a body with a Content-Encoding the service does not decode used to
// be parsed as compressed bytes. Every interface that takes a body answers 415, in the envelope
// on the data interfaces and in OAuth's shape at the token endpoint, and names identity in
// Accept-Encoding; nothing is published. identity, or no header, is the body as sent.
func TestContentEncodingRefused(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	results, _ := json.Marshal(map[string][]string{"ucsIds": {push.NewID(e.clock.Now())}})
	data := map[string]string{
		"/v1/infra/notification/mp":         goodBody,
		"/v1/infra/notification/mp/batch":   batchBody(goodItemN(0)),
		"/v1/infra/notification/mp/results": string(results),
	}
	for path, body := range data {
		for _, enc := range []string{"gzip", "br", "deflate", "zstd", "identity, gzip", "x-unknown"} {
			a := e.doWith("POST", path, tok, gzipped(t, body), map[string]string{"Content-Encoding": enc})
			m := a.json(t)
			if a.status != 415 || m["code"] != "A00415" || m["data"] != nil || m["msg"] != "Content-Encoding is not supported: send the body uncompressed" ||
				a.header.Get("Accept-Encoding") != "identity" {
				t.Errorf("%s with %s: %d %s", path, enc, a.status, a.body)
			}
		}
		for _, enc := range []string{"identity", "IDENTITY", ""} {
			if a := e.doWith("POST", path, tok, body, map[string]string{"Content-Encoding": enc}); a.status != 200 {
				t.Errorf("%s with Content-Encoding %q: %d %s", path, enc, a.status, a.body)
			}
		}
	}
	if n := e.streamMsgs(); n != 6 {
		t.Fatalf("stream holds %d messages, want the 6 sent uncompressed", n)
	}

	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {"pusher"}, "client_secret": {pushSecret}}.Encode()
	for _, path := range []string{"/v1/token", "/auth/realms/campus/protocol/openid-connect/token"} {
		req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(gzipped(t, form)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var oerr map[string]any
		err = json.NewDecoder(resp.Body).Decode(&oerr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusUnsupportedMediaType || oerr["error"] != "invalid_request" || oerr["code"] != nil ||
			oerr["error_description"] != "Content-Encoding is not supported: send the form uncompressed" || resp.Header.Get("Accept-Encoding") != "identity" {
			t.Errorf("%s with gzip: %d %v %v", path, resp.StatusCode, oerr, err)
		}
	}

	// The platform's callback and the sign-in forms refuse it too, before reading anything.
	for _, path := range []string{
		"/v1/infra/notification/mp/callback?signature=x&timestamp=1&nonce=n",
		"/auth/realms/campus/login-actions/authenticate",
		"/auth/realms/campus/login-actions/consent",
		"/auth/realms/campus/protocol/openid-connect/logout",
		"/auth/realms/campus/protocol/openid-connect/auth",
	} {
		a := e.doWith("POST", path, "", gzipped(t, "a=b"), map[string]string{"Content-Encoding": "gzip", "Content-Type": "application/x-www-form-urlencoded"})
		if a.status != 415 || a.header.Get("Accept-Encoding") != "identity" {
			t.Errorf("%s with gzip: %d %s", path, a.status, a.body)
		}
	}
}

// TestBatchBodiesAreJSONTextAsAPushIs: a batch or results body is read as strictly as a single
// push: a lone surrogate escape anywhere, invalid UTF-8 or the list's key given twice refuse
// the whole body with 400 and publish nothing, while a duplicate key inside an item is that
// item's problem.
func TestBatchBodiesAreJSONTextAsAPushIs(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	loneInItem := batchBody(goodItemN(0), strings.Replace(goodItemN(1), "第三章", `\ud800第三章`, 1))
	for name, c := range map[string]struct{ path, body, want string }{
		"lone surrogate in an item": {"/batch", loneInItem, fmt.Sprintf(
			`body: not valid JSON: \ud800 at byte %d is a lone surrogate escape, half of a UTF-16 pair, which stands for no character`,
			strings.Index(loneInItem, `\ud800`))},
		"lone low surrogate in a key": {"/batch", `{"messages":[` + goodItemN(0) + `],"\udc00":1}`, `body: not valid JSON: \udc00 at byte`},
		"lone surrogate in an id":     {"/results", `{"ucsIds":["\udbff"]}`, `body: not valid JSON: \udbff at byte 12 is a lone surrogate escape`},
		"invalid UTF-8":               {"/results", "{\"ucsIds\":[\"\xff\"]}", "body: not valid UTF-8"},
		"key twice":                   {"/batch", `{"messages":[` + goodItemN(0) + `],"messages":[` + goodItemN(1) + `]}`, `body: must be {"messages": [ … ]} and nothing else`},
		"ids not strings":             {"/results", `{"ucsIds":[1]}`, "ucsIds: must be an array of strings"},
		"trailing text":               {"/results", `{"ucsIds":["a"]} x`, "body: not valid JSON"},
		"array":                       {"/batch", `[` + goodItemN(0) + `]`, "body: not a JSON object"},
	} {
		a := e.doWith("POST", "/v1/infra/notification/mp"+c.path, tok, c.body, nil)
		m := a.json(t)
		if msg, _ := m["msg"].(string); a.status != 400 || m["code"] != "A00400" || !strings.HasPrefix(msg, c.want) {
			t.Errorf("%s: %d %s, want 400 %q", name, a.status, a.body, c.want)
		}
	}
	if n := e.streamMsgs(); n != 0 {
		t.Fatalf("refused batches published %d messages", n)
	}
	dup := `{"userId":"2020000001","userId":"2020000002","type":"JML","data":{"class":"a","info":"b"}}`
	a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(0), dup), nil)
	if d := a.batch(t); a.status != 200 || d.Accepted != 1 || len(d.Results[1].Errors) != 1 || d.Results[1].Errors[0] != "userId: duplicate key" {
		t.Fatalf("duplicate key in an item: %d %s", a.status, a.body)
	}
	// A null id is no string, as the description says.
	a = e.doWith("POST", "/v1/infra/notification/mp/results", tok, `{"ucsIds":[null]}`, nil)
	if a.status != 400 || !strings.Contains(string(a.body), "ucsIds: must be an array of strings") {
		t.Fatalf("null id: %d %s", a.status, a.body)
	}
}
