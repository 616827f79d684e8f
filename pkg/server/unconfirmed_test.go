package server_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestUnconfirmedPushNamesItsUcsID: the queue stores a push, but neither its acknowledgement nor
// the answer to the front end's question whether it holds it comes (every answer of NATS held
// past the publisher's waits). The front end cannot say the push was refused, as a caller told
// so would send it again and the user would get it twice: it answers 503 with the ucsId the
// push may be stored under, which a lookup finds once NATS answers again. The answer is valid
// for the served description.
func TestUnconfirmedPushNamesItsUcsID(t *testing.T) {
	e, proxy := newEnvBehindProxy(t)
	tok := e.token("pusher", pushSecret)
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("PUB ucs.push.mp.")) })
	a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), nil)
	proxy.Release()
	j := a.json(t)
	data, _ := j["data"].(map[string]any)
	id, _ := data["ucsId"].(string)
	if a.status != http.StatusServiceUnavailable || id == "" || !strings.Contains(j["msg"].(string), "may be stored") || a.header.Get("Retry-After") == "" {
		t.Fatalf("a push stored without its acknowledgement: %d %s, want 503 naming the ucsId it may be stored under", a.status, a.body)
	}
	resp := &http.Response{StatusCode: a.status, Header: a.header, Body: io.NopCloser(bytes.NewReader(a.body))}
	req, _ := http.NewRequest(http.MethodPost, "http://x/v1/infra/notification/mp", strings.NewReader(goodItemN(1)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", tok)
	if ok, errs := servedValidator(t, e).ValidateHttpResponse(req, resp); !ok {
		t.Errorf("the answer is not valid for the served description: %v", errs)
	}
	if st := e.doWith("GET", "/v1/infra/notification/mp/"+id, tok, "", nil); st.status != http.StatusOK || !strings.Contains(string(st.body), `"queued"`) {
		t.Fatalf("lookup of the unconfirmed push %s: %d %s, want it found queued", id, st.status, st.body)
	}
	if n := e.streamPushes(); n != 1 {
		t.Fatalf("the stream holds %d pushes, want the one", n)
	}
}
