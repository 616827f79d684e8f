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

// TestUnconfirmedKeyedRetryNamesItsUcsID: a keyed push the queue refused (503, nothing stored)
// is sent again with its Idempotency-Key, and this time the queue stores it but neither its
// acknowledgement nor the read-back answers. As for a first request, the 503 names the ucsId
// the push may be stored under: the one the key recorded, which it is delivered under.
func TestUnconfirmedKeyedRetryNamesItsUcsID(t *testing.T) {
	e, proxy := newEnvBehindProxy(t)
	tok := e.token("pusher", pushSecret)
	key := map[string]string{"Idempotency-Key": "unconfirmed-retry"}
	restore := e.refuseEveryPush()
	first := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), key)
	restore()
	if first.status != 503 {
		t.Fatalf("first push into a refusing queue: %d %s", first.status, first.body)
	}
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("PUB ucs.push.mp.")) })
	a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), key)
	proxy.Release()
	if n := e.streamPushes(); n != 1 {
		t.Fatalf("the stream holds %d pushes, want the one the retry stored", n)
	}
	data, _ := a.json(t)["data"].(map[string]any)
	id, _ := data["ucsId"].(string)
	if a.status != 503 || id == "" {
		t.Fatalf("the retry stored without its acknowledgement: %d %s; want 503 naming the ucsId it may be stored under", a.status, a.body)
	}
	if st := e.doWith("GET", "/v1/infra/notification/mp/"+id, tok, "", nil); st.status != 200 {
		t.Fatalf("lookup of %q: %d %s", id, st.status, st.body)
	}
}

// TestUnconfirmedKeyedBatchRetry: the same for a batch. Every good item has its ucsId and the
// error "unconfirmed: …", as for a first request, not "no item was accepted": the batch may be
// stored, and is then delivered.
func TestUnconfirmedKeyedBatchRetry(t *testing.T) {
	e, proxy := newEnvBehindProxy(t)
	tok := e.token("pusher", pushSecret)
	key := map[string]string{"Idempotency-Key": "unconfirmed-batch-retry"}
	body := batchBody(goodItemN(1), goodItemN(2))
	restore := e.refuseEveryPush()
	first := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, key)
	restore()
	if first.status != 503 {
		t.Fatalf("first batch into a refusing queue: %d %s", first.status, first.body)
	}
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("Nats-Batch-Commit")) })
	a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, key)
	proxy.Release()
	if n := e.streamPushes(); n != 2 {
		t.Fatalf("the stream holds %d pushes, want the two the retry stored", n)
	}
	if a.status != 503 || bytes.Contains(a.body, []byte("no item was accepted")) {
		t.Fatalf("the retry stored without its acknowledgement: %d %s", a.status, a.body)
	}
	for _, r := range a.batch(t).Results {
		if r.UcsID == "" || len(r.Errors) != 1 || !strings.HasPrefix(r.Errors[0], "unconfirmed:") {
			t.Errorf("item %d: %+v; want its ucsId and the error unconfirmed: …", r.Index, r)
		}
	}
}
