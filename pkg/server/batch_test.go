package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/server"
	"github.com/campus-it/ucs/pkg/service"
)

const goodItem = `{"userId":"2020000001","type":"JML","data":{"class":"高等数学","info":"第三章习题%d"}}`

func goodItemN(i int) string { return fmt.Sprintf(goodItem, i) }

const badItem = `{"userId":"2020000001","type":"JML","data":{"class":"高等数学","info":"这一条作业提醒的内容一共有二十三个字那么长啊呀"}}`

func batchBody(items ...string) string { return `{"messages":[` + strings.Join(items, ",") + `]}` }

type batchResult struct {
	Index  int      `json:"index"`
	UcsID  string   `json:"ucsId"`
	Errors []string `json:"errors"`
}

type batchData struct {
	Accepted int           `json:"accepted"`
	Rejected int           `json:"rejected"`
	Results  []batchResult `json:"results"`
}

func (e *env) doWith(method, path, auth, body string, header map[string]string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", auth)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: []byte(b.String())}
}

func (a answer) batch(t testing.TB) batchData {
	t.Helper()
	var env struct {
		Data batchData `json:"data"`
		Code string    `json:"code"`
	}
	if err := json.Unmarshal(a.body, &env); err != nil {
		t.Fatalf("batch answer %q: %v", a.body, err)
	}
	return env.Data
}

// TestBatchPush sends good and bad items together: the good ones get ucsIds and are published,
// the bad ones are named with their problems, in request order; a batch over the limit, or
// not shaped as one, publishes nothing.
func TestBatchPush(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(0), badItem, goodItemN(2)), nil)
	if a.status != 200 {
		t.Fatalf("batch: %d %s", a.status, a.body)
	}
	d := a.batch(t)
	if d.Accepted != 2 || d.Rejected != 1 || len(d.Results) != 3 {
		t.Fatalf("batch: %+v", d)
	}
	for i, r := range d.Results {
		if r.Index != i {
			t.Errorf("result %d has index %d", i, r.Index)
		}
	}
	if !push.ValidID(d.Results[0].UcsID) || !push.ValidID(d.Results[2].UcsID) || d.Results[0].UcsID == d.Results[2].UcsID {
		t.Errorf("good items' ucsIds: %+v", d.Results)
	}
	if d.Results[1].UcsID != "" || len(d.Results[1].Errors) != 1 || d.Results[1].Errors[0] != "data.info: 23 characters, at most 20" {
		t.Errorf("bad item: %+v", d.Results[1])
	}
	if n := e.streamPushes(); n != 2 {
		t.Fatalf("stream holds %d pushes, want the 2 good ones", n)
	}
	// Each is a message of its own, on the caller's subject of its ucsId.
	for _, i := range []int{0, 2} {
		m, err := e.limitStream(-1).GetLastMsgForSubject(context.Background(), queue.Subject("pusher", d.Results[i].UcsID))
		if err != nil || !strings.Contains(string(m.Data), d.Results[i].UcsID) {
			t.Errorf("item %d in the stream: %v", i, err)
		}
	}
	// Each accepted item is a push like any other: looked up by its ucsId.
	for _, i := range []int{0, 2} {
		l := e.do("GET", "/v1/infra/notification/mp/"+d.Results[i].UcsID, "", tok, "")
		if l.status != 200 || l.json(t)["data"].(map[string]any)["state"] != "queued" {
			t.Errorf("lookup of item %d: %d %s", i, l.status, l.body)
		}
	}

	over := make([]string, 1001)
	for i := range over {
		over[i] = goodItemN(i)
	}
	for name, c := range map[string]struct {
		body, want string
	}{
		"over the limit": {batchBody(over...), "messages: 1001 items, must be 1 to 1000"},
		"empty":          {batchBody(), "messages: 0 items, must be 1 to 1000"},
		"not a list":     {`{"messages":{"a":1}}`, "messages: must be an array"},
		"other keys":     {`{"messages":[` + goodItemN(1) + `],"extra":1}`, `body: must be {"messages": [ … ]} and nothing else`},
		"not JSON":       {`{"messages":[`, "body: not valid JSON"},
	} {
		a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, c.body, nil)
		if a.status != 400 || a.json(t)["msg"] != c.want {
			t.Errorf("%s: %d %s, want 400 %q", name, a.status, a.body, c.want)
		}
	}
	if n := e.streamPushes(); n != 2 {
		t.Fatalf("refused batches published: stream holds %d pushes", n)
	}
	// The same token rules as a single push.
	if a := e.doWith("POST", "/v1/infra/notification/mp/batch", e.token("fake-api-test", fakeSecret), batchBody(goodItemN(1)), nil); a.status != 401 {
		t.Errorf("batch with a token without notification.mp: %d", a.status)
	}
}

// TestBatchQueueRefusesWhole fills the stream so that it cannot take a whole batch: the batch
// is atomic, so no item is stored, no item has a ucsId, each says to retry it, and the status
// is 503 saying the queue is full, with the single push's Retry-After. Sent again once there is room, the batch is stored whole.
func TestBatchQueueRefusesWhole(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	e.limitStream(4)
	items := make([]string, 6)
	for i := range items {
		items[i] = goodItemN(i)
	}
	a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(items...), nil)
	if a.status != 503 || a.header.Get("Retry-After") != "30" || !strings.Contains(string(a.body), "the push queue is full") {
		t.Fatalf("batch into a full stream: %d, Retry-After %q, %s; want 503 saying the queue is full, Retry-After 30 as for a single push",
			a.status, a.header.Get("Retry-After"), a.body)
	}
	d := a.batch(t)
	if d.Accepted != 0 || d.Rejected != 6 {
		t.Fatalf("accepted %d rejected %d, want 0 and 6: %s", d.Accepted, d.Rejected, a.body)
	}
	for _, r := range d.Results {
		if r.UcsID != "" || len(r.Errors) != 1 || r.Errors[0] != "queue unavailable; retry this item" {
			t.Errorf("item %d: %+v", r.Index, r)
		}
	}
	if n := e.streamMsgs(); n != 0 {
		t.Fatalf("the stream holds %d pushes of a refused batch", n)
	}
	e.limitStream(-1)
	if a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(items...), nil); a.status != 200 || a.batch(t).Accepted != 6 {
		t.Fatalf("the batch sent again: %d %s", a.status, a.body)
	}
	if n := e.streamMsgs(); n != 6 {
		t.Fatalf("the stream holds %d, want 6", n)
	}
}

// TestBatchResults looks up the caller's own, another client's and unknown ucsIds at once.
func TestBatchResults(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	other := e.token("other", pushSecret)
	d := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(0), goodItemN(1)), nil).batch(t)
	foreign := e.doWith("POST", "/v1/infra/notification/mp", other, goodItemN(9), nil).json(t)["data"].(map[string]any)["ucsId"].(string)
	unknown := push.NewID(time.Now())
	ids := []string{d.Results[1].UcsID, foreign, unknown, "not-an-id", d.Results[0].UcsID}
	b, _ := json.Marshal(map[string]any{"ucsIds": ids})
	a := e.doWith("POST", "/v1/infra/notification/mp/results", tok, string(b), nil)
	if a.status != 200 {
		t.Fatalf("results: %d %s", a.status, a.body)
	}
	var got struct {
		Data struct {
			Results []map[string]any `json:"results"`
		} `json:"data"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	rs := got.Data.Results
	if len(rs) != len(ids) {
		t.Fatalf("%d results for %d ids", len(rs), len(ids))
	}
	for i, id := range ids {
		if rs[i]["ucsId"] != id {
			t.Errorf("result %d is for %v, want %s", i, rs[i]["ucsId"], id)
		}
	}
	for _, i := range []int{0, 4} {
		if rs[i]["state"] != "queued" || rs[i]["userId"] != "2020000001" || rs[i]["type"] != "JML" {
			t.Errorf("own push %d: %v", i, rs[i])
		}
		single := e.do("GET", "/v1/infra/notification/mp/"+ids[i], "", tok, "").json(t)["data"].(map[string]any)
		if fmt.Sprint(single) != fmt.Sprint(rs[i]) {
			t.Errorf("batch result %v differs from the single lookup's %v", rs[i], single)
		}
	}
	for _, i := range []int{1, 2, 3} {
		if len(rs[i]) != 2 || rs[i]["state"] != "not_found" {
			t.Errorf("result %d (%s) = %v, want only ucsId and state not_found", i, ids[i], rs[i])
		}
	}
	many := make([]string, 1001)
	for i := range many {
		many[i] = unknown
	}
	for name, body := range map[string]string{
		"none":     `{"ucsIds":[]}`,
		"too many": `{"ucsIds":["` + strings.Join(many, `","`) + `"]}`,
		"numbers":  `{"ucsIds":[1,2]}`,
	} {
		if a := e.doWith("POST", "/v1/infra/notification/mp/results", tok, body, nil); a.status != 400 {
			t.Errorf("%s: %d %s", name, a.status, a.body)
		}
	}
}

// TestIdempotencyKey retries a push and a batch with their Idempotency-Key, through this front
// end and through another one started on the same queue and store (a replica, or this one
// after a restart): the same ucsIds come back and nothing new is published; the key with
// another body is a 422 (as the IETF draft of the header answers it: not 409, which says to
// try again), and another client's same key is its own.
func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	key := map[string]string{"Idempotency-Key": "exam-notice-2026-11-23/42"}
	first := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), key)
	if first.status != 200 {
		t.Fatalf("push: %d %s", first.status, first.body)
	}
	id := first.json(t)["data"].(map[string]any)["ucsId"].(string)
	batchKey := map[string]string{"Idempotency-Key": "exam-notice-batch"}
	b1 := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(2), badItem, goodItemN(3)), batchKey)
	if b1.status != 200 {
		t.Fatalf("batch: %d %s", b1.status, b1.body)
	}
	if n := e.streamPushes(); n != 3 {
		t.Fatalf("stream holds %d pushes, want 3", n)
	}

	// Another front end on the same NATS and MongoDB.
	api2, err := service.NewAPI(context.Background(), e.cfg, service.Deps{Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api2.Close)
	e2 := &env{t: t, url: serve(t, api2), api: api2, js: e.js, nats: e.nats, clock: e.clock, cfg: e.cfg}
	for _, fe := range []*env{e, e2} {
		again := fe.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(1), key)
		if again.status != 200 || again.json(t)["data"].(map[string]any)["ucsId"] != id {
			t.Errorf("retried push: %d %s, want ucsId %s", again.status, again.body, id)
		}
		b2 := fe.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(2), badItem, goodItemN(3)), batchKey)
		if b2.status != 200 || b2.json(t)["data"].(map[string]any)["results"].([]any)[0].(map[string]any)["ucsId"].(string) == "" ||
			fmt.Sprint(b2.batch(t)) != fmt.Sprint(b1.batch(t)) {
			t.Errorf("retried batch: %d %s, want %s", b2.status, b2.body, b1.body)
		}
	}
	if n := e.streamPushes(); n != 3 {
		t.Fatalf("retries published: stream holds %d pushes, want 3", n)
	}

	conflict := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(7), key)
	if conflict.status != 422 || conflict.json(t)["code"] != "A00422" {
		t.Errorf("same key, other body: %d %s", conflict.status, conflict.body)
	}
	if c := e2.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(2)), batchKey); c.status != 422 {
		t.Errorf("same batch key, other body: %d %s", c.status, c.body)
	}
	other := e.doWith("POST", "/v1/infra/notification/mp", e.token("other", pushSecret), goodItemN(1), key)
	if other.status != 200 || other.json(t)["data"].(map[string]any)["ucsId"] == id {
		t.Errorf("another client's same key: %d %s", other.status, other.body)
	}
	for _, bad := range []string{strings.Repeat("k", 129), "schlüssel", "tab\there"} {
		a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(8), map[string]string{"Idempotency-Key": bad})
		if a.status != 400 {
			t.Errorf("Idempotency-Key %q: %d %s", bad, a.status, a.body)
		}
	}
	if n := e.streamPushes(); n != 4 {
		t.Fatalf("stream holds %d pushes, want 4 (the other client's push)", n)
	}
}

// TestIdempotentRetryAfterQueueFailure retries a batch the queue refused: the retry with the
// same key stores its items once, and answers every item.
func TestIdempotentRetryAfterQueueFailure(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	e.limitStream(2) // room for half the batch: none of it is stored
	key := map[string]string{"Idempotency-Key": "retry-me"}
	body := batchBody(goodItemN(0), goodItemN(1), goodItemN(2), goodItemN(3))
	first := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, key)
	if first.status != 503 || first.batch(t).Accepted != 0 || e.streamPushes() != 0 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	e.limitStream(-1)
	again := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, key)
	if again.status != 200 {
		t.Fatalf("retry: %d %s", again.status, again.body)
	}
	d := again.batch(t)
	if d.Accepted != 4 {
		t.Fatalf("retry: %s", again.body)
	}
	for i, r := range first.batch(t).Results {
		if r.UcsID != "" && d.Results[i].UcsID != r.UcsID {
			t.Errorf("item %d: ucsId %s, first answer %s", i, d.Results[i].UcsID, r.UcsID)
		}
	}
	if n := e.streamPushes(); n != 4 {
		t.Fatalf("stream holds %d pushes, want 4", n)
	}
	third := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, key)
	if fmt.Sprint(third.batch(t)) != fmt.Sprint(d) || e.streamPushes() != 4 {
		t.Errorf("third: %s", third.body)
	}
}

// limitStream lets the push stream hold at most n messages (-1: no limit), so that it refuses
// the ones beyond.
func (e *env) limitStream(n int64) jetstream.Stream {
	e.t.Helper()
	ctx := context.Background()
	st, err := e.js.Stream(ctx, e.cfg.NATS.Stream)
	if err != nil {
		e.t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.MaxMsgs = n
	if _, err := e.js.UpdateStream(ctx, sc); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// serve answers HTTP with api's front end until the test ends.
func serve(t *testing.T, api *service.API) string {
	ts := httptest.NewServer(api.Server)
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestBatchWithNoGoodItemTakesNoKey sends, under fresh Idempotency-Keys, batches whose every item
// is refused for its content: nothing is queued, so no key is taken and nothing is kept for a
// day (a client could otherwise fill the keys' bucket with requests that store nothing). The
// same key then serves a good batch, which is stored and whose retry is answered from its key.
func TestBatchWithNoGoodItemTakesNoKey(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	bad := batchBody(`{}`, `{"userId":"2020000001"}`)
	for i := range 20 {
		a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, bad, map[string]string{"Idempotency-Key": fmt.Sprintf("nothing-%d", i)})
		if d := a.batch(t); a.status != 200 || d.Accepted != 0 || d.Rejected != 2 {
			t.Fatalf("batch %d: %d %s", i, a.status, a.body)
		}
	}
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, service.IdempotencyBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Values() != 0 {
		t.Fatalf("20 batches that queued nothing left %d key records (%d bytes)", st.Values(), st.Bytes())
	}
	key := map[string]string{"Idempotency-Key": "nothing-0"}
	good := batchBody(goodItemN(0), `{}`)
	first := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, good, key)
	if d := first.batch(t); first.status != 200 || d.Accepted != 1 {
		t.Fatalf("a good batch under a key an empty one used: %d %s", first.status, first.body)
	}
	again := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, good, key)
	if again.status != 200 || fmt.Sprint(again.batch(t)) != fmt.Sprint(first.batch(t)) || e.streamPushes() != 1 {
		t.Fatalf("its retry: %d %s (first %s), %d pushes stored", again.status, again.body, first.body, e.streamPushes())
	}
}

// TestBatchBodiesShareARoom: the bodies of the batches under way are bounded together. While a
// batch's body is still arriving it holds the room of what it declared, up to 64 KiB before
// its first bytes; another batch that does not fit beside it waits, and past the wait is 503
// with Retry-After, storing nothing; once the first is answered, the same batch is taken.
func TestBatchBodiesShareARoom(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	items := goodItems(50)
	body := batchBody(items...)
	server.SetBatchRoom(e.api.Server, int64(len(body))*3/2, 200*time.Millisecond)

	// A batch whose body comes in two halves, the second when the test sends it.
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.CloseWithError(errors.New("the test ended")) }) // before the server closes
	req, err := http.NewRequest(http.MethodPost, e.url+"/v1/infra/notification/mp/batch", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", tok)
	slow := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			slow <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(body[:len(body)/2])); err != nil {
		t.Fatal(err)
	}

	var refused answer
	before := 0
	embeddedtest.Eventually(t, 10*time.Second, "a batch refused for room while another's body arrives", func() bool {
		before = e.streamPushes()
		refused = e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, nil)
		return refused.status == http.StatusServiceUnavailable
	})
	if got := refused.json(t)["code"]; got != "A00503" || refused.header.Get("Retry-After") != "5" {
		t.Errorf("the batch without room: code %v, Retry-After %q: %s", got, refused.header.Get("Retry-After"), refused.body)
	}
	if n := e.streamPushes(); n != before {
		t.Errorf("the batch refused for room stored %d pushes", n-before)
	}
	// A batch that could never be taken is told so at once, room or not.
	if a := e.do("POST", "/v1/infra/notification/mp/batch", "text/plain", tok, body); a.status != http.StatusUnsupportedMediaType {
		t.Errorf("a batch sent as text/plain while the room is taken: %d %s", a.status, a.body)
	}

	if _, err := pw.Write([]byte(body[len(body)/2:])); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	if st := <-slow; st != http.StatusOK {
		t.Fatalf("the batch whose body came slowly: %d", st)
	}
	after := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, nil)
	if d := after.batch(t); after.status != http.StatusOK || d.Accepted != len(items) {
		t.Fatalf("the batch once the room was free: %d %s", after.status, after.body)
	}
}

// TestKeyRecordsBounded: the Idempotency-Key records are bounded, to a quarter of
// nats.max_bytes, and each client to a share of them. A client that used up its share is
// refused a new key with 503 before anything is published, while another client still takes
// new keys; once the records are nearly full, every new key is refused the same way, rather than
// the bucket growing. The requests that took a key are answered from their records on retry,
// and a request without a key is served as before.
func TestKeyRecordsBounded(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) { c.NATS.MaxBytes = 1 << 20 })
	tok, otherTok := e.token("pusher", pushSecret), e.token("other", pushSecret)
	st := e.limitStream(-1)
	sc := st.CachedInfo().Config
	sc.MaxBytes = -1 // the pushes fit; the key records are what fills
	if _, err := e.js.UpdateStream(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	body := batchBody(goodItems(1000)...)
	batch := func(tok, key string) answer {
		return e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, map[string]string{"Idempotency-Key": key})
	}
	var first []answer
	shareUsed := false
	for i := 0; i < 10 && !shareUsed; i++ {
		a := batch(tok, fmt.Sprintf("share-%d", i))
		shareUsed = strings.Contains(string(a.body), "this client's share of the records of keys is used up")
		switch {
		case shareUsed && (a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == ""):
			t.Errorf("refused for a used-up share: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
		case !shareUsed && a.status != http.StatusOK:
			t.Fatalf("batch %d: %d %.200s", i, a.status, a.body)
		case !shareUsed:
			first = append(first, a)
		}
	}
	stored := e.streamPushes()
	if !shareUsed || len(first) == 0 || stored != 1000*len(first) {
		t.Fatalf("10 batches of 1,000 under fresh keys from one client: %d taken, share used up: %v; %d pushes stored", len(first), shareUsed, stored)
	}
	if a := batch(otherTok, "other-0"); a.status != http.StatusOK {
		t.Fatalf("another client's batch under a new key, the first client's share used up: %d %.200s", a.status, a.body)
	}

	// Every client's new key is refused once the records are nearly full.
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, service.IdempotencyBucket)
	if err != nil {
		t.Fatal(err)
	}
	bound := service.KeyRecordBytes(e.cfg)
	filler := []byte(strings.Repeat("x", 900))
	for i := 0; ; i++ {
		status, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if int64(status.Bytes()) >= bound-2_000 {
			break
		}
		if _, err := kv.Put(ctx, fmt.Sprintf("filler-%d", i), filler); err != nil {
			t.Fatal(err)
		}
	}
	if a := batch(otherTok, "other-1"); a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "30" ||
		!strings.Contains(string(a.body), "records of keys are full") {
		t.Errorf("a new key with the records full: %d, Retry-After %q %.200s", a.status, a.header.Get("Retry-After"), a.body)
	}
	if status, err := kv.Status(ctx); err != nil || int64(status.Bytes()) > bound {
		t.Fatalf("the key records: %v, %v; bound %d", status, err, bound)
	}
	stored = e.streamPushes()
	for i, a := range first {
		again := batch(tok, fmt.Sprintf("share-%d", i))
		if again.status != http.StatusOK || fmt.Sprint(again.batch(t)) != fmt.Sprint(a.batch(t)) {
			t.Fatalf("the retry of key share-%d with the records full: %d %.200s", i, again.status, again.body)
		}
	}
	plain := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(0), nil)
	if plain.status != http.StatusOK || e.streamPushes() != stored+1 {
		t.Fatalf("a push without a key: %d %s; %d pushes stored, want %d", plain.status, plain.body, e.streamPushes(), stored+1)
	}
}

// TestFullQueueKeepsNoKeyRecords: a request the full queue refuses stored nothing and was
// answered no ucsId, so its key keeps no record: one client's refused requests take no room
// among the records of every client's keys, and its retry, still refused, is told the queue
// is full, and once there is room it is taken.
func TestFullQueueKeepsNoKeyRecords(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	e.limitStream(1)
	if a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(99), nil); a.status != http.StatusOK {
		t.Fatalf("the push that fills the queue: %d %s", a.status, a.body)
	}
	body := batchBody(goodItemN(0), goodItemN(1))
	for i := range 20 {
		for _, path := range []string{"/v1/infra/notification/mp/batch", "/v1/infra/notification/mp"} {
			b := body
			if path == "/v1/infra/notification/mp" {
				b = goodItemN(i)
			}
			a := e.doWith("POST", path, tok, b, map[string]string{"Idempotency-Key": fmt.Sprintf("refused-%d-%d", i, len(path))})
			if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "30" {
				t.Fatalf("%s %d to a full queue: %d Retry-After %q %s", path, i, a.status, a.header.Get("Retry-After"), a.body)
			}
		}
	}
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, service.IdempotencyBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Values() != 0 || st.Bytes() != 0 {
		t.Fatalf("40 requests the full queue refused left %d messages in the key records, %d bytes", st.Values(), st.Bytes())
	}
	e.limitStream(-1)
	a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, map[string]string{"Idempotency-Key": fmt.Sprintf("refused-0-%d", len("/v1/infra/notification/mp/batch"))})
	if d := a.batch(t); a.status != http.StatusOK || d.Accepted != 2 || e.streamPushes() != 3 {
		t.Fatalf("the refused batch sent again once the queue has room: %d %s, %d pushes stored", a.status, a.body, e.streamPushes())
	}
}

// stallBatch opens a batch of client tok that declares a body of contentLength bytes (or, with
// contentLength < 0, a chunked one), sends its first bytes and no more, and keeps the
// connection open until the test ends.
func stallBatch(t *testing.T, e *env, tok string, contentLength int) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	head := "POST /v1/infra/notification/mp/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: " + tok + "\r\n"
	if contentLength >= 0 {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n{\"messages\":[", contentLength)
	} else {
		head += "Transfer-Encoding: chunked\r\n\r\nd\r\n{\"messages\":[\r\n"
	}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
}

// TestStalledBatchesLockNoOneOut: one client's batches, here 16 that declare the largest body
// or come chunked and then stall, hold at most its quarter of the room: another client's batch
// is answered at once.
func TestStalledBatchesLockNoOneOut(t *testing.T) {
	e := newEnv(t)
	server.SetBatchRoom(e.api.Server, server.BatchRoom, time.Second)
	other := e.token("other", pushSecret)
	tok := e.token("pusher", pushSecret)
	for i := range 16 {
		size := 8 << 20
		if i%2 == 1 {
			size = -1
		}
		stallBatch(t, e, other, size)
	}
	embeddedtest.Eventually(t, 10*time.Second, "a stalled batch holds its room", func() bool {
		return !server.BatchRoomFree(e.api.Server, server.BatchRoom-8<<20)
	})
	a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, batchBody(goodItemN(0), goodItemN(1)), nil)
	if d := a.batch(t); a.status != http.StatusOK || d.Accepted != 2 {
		t.Fatalf("a batch of two beside 16 stalled ones of another client: %d %s", a.status, a.body)
	}
}

// paddedBatch is a batch of n good items padded with white space to exactly size bytes.
func paddedBatch(t *testing.T, n, size int) string {
	t.Helper()
	items := goodItems(n)
	b := `{"messages":[` + strings.Join(items, ",") + `]`
	if len(b)+1 > size {
		t.Fatalf("body too small: %d", len(b))
	}
	return b + strings.Repeat(" ", size-len(b)-1) + "}"
}

// TestConcurrentBatchesShareTheRoom: batches whose bodies arrive together and together need
// more than the room cannot hold it between them: each takes its room whole, and waits holding
// none, so they are taken in turn.
func TestConcurrentBatchesShareTheRoom(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	other := e.token("other", pushSecret)
	const size = 256 << 10
	body := paddedBatch(t, 100, size)
	const room = 8 * (128 << 10) // holds 3 of the bodies whole
	server.SetBatchRoom(e.api.Server, room, 5*time.Second)
	const n = 8
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[i] = c
		auth := tok
		if i%2 == 1 {
			auth = other
		}
		head := fmt.Sprintf("POST /v1/infra/notification/mp/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: %s\r\nContent-Length: %d\r\n\r\n", auth, size)
		if _, err := io.WriteString(c, head+body[:100<<10]); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.Eventually(t, 10*time.Second, "the batches hold room", func() bool {
		return !server.BatchRoomFree(e.api.Server, room-size)
	})
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := io.WriteString(c, body[100<<10:]); err != nil {
				t.Error(err)
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	for i, st := range statuses {
		if st != http.StatusOK {
			t.Errorf("batch %d of %d, %d bytes each, a room of %d: %d (all: %v)", i, n, size, room, st, statuses)
		}
	}
}

// TestKeyTakenNearTheBoundRecordsItsAnswer: with the key records filled to just below their
// bound, a batch that takes a new key and is then refused by the queue (here for its size)
// still records its answer, so that its retry is answered (refused for the full records, or
// published from the record), never 409 "still under way" for a request that ended.
func TestKeyTakenNearTheBoundRecordsItsAnswer(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) { c.NATS.MaxBytes = 1 << 20 })
	tok := e.token("pusher", pushSecret)
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, service.IdempotencyBucket)
	if err != nil {
		t.Fatal(err)
	}
	// Leave room for a claim of 1,000 ucsIds (about 29 KB), and not for 4 KB more.
	bound := service.KeyRecordBytes(e.cfg)
	filler := []byte(strings.Repeat("x", 900))
	for i := 0; ; i++ {
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if int64(st.Bytes()) >= bound-31_000 {
			break
		}
		if _, err := kv.Put(ctx, fmt.Sprintf("filler-%d", i), filler); err != nil {
			t.Fatal(err)
		}
	}
	restore := e.refuseEveryPush()
	items := goodItems(1000)
	body := batchBody(items...)
	key := map[string]string{"Idempotency-Key": "near-the-bound"}
	if a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, key); a.status != http.StatusServiceUnavailable {
		t.Fatalf("a batch the queue refuses: %d %.200s", a.status, a.body)
	}
	restore()
	again := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, key)
	switch {
	case again.status == http.StatusOK && again.batch(t).Accepted == len(items):
	case again.status == http.StatusServiceUnavailable && strings.Contains(string(again.body), "records of keys are full"):
	default:
		t.Fatalf("its retry, the queue taking pushes again: %d %.200s", again.status, again.body)
	}
}

// TestKeyedRetryToAFullQueue: a keyed batch and a keyed push the queue refused (not for being
// full) keep their records; retried while the queue is full, they are told it is full, with
// the longer Retry-After, as a request without a key is.
func TestKeyedRetryToAFullQueue(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	restore := e.refuseEveryPush()
	requests := []struct{ path, body string }{
		{"/v1/infra/notification/mp/batch", batchBody(goodItemN(0), goodItemN(1))},
		{"/v1/infra/notification/mp", goodItemN(2)},
	}
	for _, r := range requests {
		a := e.doWith("POST", r.path, tok, r.body, map[string]string{"Idempotency-Key": "retried" + r.path})
		if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "5" {
			t.Fatalf("%s refused for its size: %d Retry-After %q %s", r.path, a.status, a.header.Get("Retry-After"), a.body)
		}
	}
	restore()
	if a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(99), nil); a.status != http.StatusOK {
		t.Fatalf("the push that fills the queue: %d %s", a.status, a.body)
	}
	e.limitStream(1)
	for _, r := range requests {
		a := e.doWith("POST", r.path, tok, r.body, map[string]string{"Idempotency-Key": "retried" + r.path})
		if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "30" || !strings.Contains(string(a.body), "full") {
			t.Errorf("%s retried to a full queue: %d Retry-After %q %s", r.path, a.status, a.header.Get("Retry-After"), a.body)
		}
	}
}

// goodItems is n good batch items.
func goodItems(n int) []string {
	items := make([]string, n)
	for i := range items {
		items[i] = goodItemN(i)
	}
	return items
}

// refuseEveryPush makes the push stream refuse every push, and not for being full (each is
// larger than the stream takes); restore takes its configuration back.
func (e *env) refuseEveryPush() (restore func()) {
	e.t.Helper()
	ctx := context.Background()
	stream, err := e.js.Stream(ctx, e.cfg.NATS.Stream)
	if err != nil {
		e.t.Fatal(err)
	}
	sc := stream.CachedInfo().Config
	small := sc
	small.MaxMsgSize = 100
	if _, err := e.js.UpdateStream(ctx, small); err != nil {
		e.t.Fatal(err)
	}
	return func() {
		e.t.Helper()
		if _, err := e.js.UpdateStream(context.Background(), sc); err != nil {
			e.t.Fatal(err)
		}
	}
}

// keysOfAngles is a push body of 20 unknown keys besides valid fields, each 62 '<' and two
// digits, which the batch's answer quotes back (cut to 64 runes) as its problems.
func keysOfAngles() string {
	var b strings.Builder
	b.WriteString(`{"userId":"2020000001","type":"JML","data":{"class":"高等数学","info":"第三章习题"}`)
	for j := range 20 {
		fmt.Fprintf(&b, `,"%s%02d":0`, strings.Repeat("<", 62), j)
	}
	b.WriteString("}")
	return b.String()
}

// TestBatchAnswerWithinTheRoomsBound: the batch room charges a batch its body, which it holds
// about two and a half times until answered (BatchRoom). The answer, built whole before it is
// written, stays within that even for refused items whose unknown keys it quotes back: '<' is
// written as it is, not as \u003c, six bytes for one.
func TestBatchAnswerWithinTheRoomsBound(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	items := make([]string, 1000)
	for i := range items {
		items[i] = keysOfAngles()
	}
	body := batchBody(items...)
	a := e.doWith("POST", "/v1/infra/notification/mp/batch", tok, body, nil)
	if a.status != http.StatusOK {
		t.Fatalf("batch: %d %.300s", a.status, a.body)
	}
	if limit := len(body) * 5 / 2; len(a.body) > limit {
		t.Fatalf("a batch of %d bytes (the room it is charged) is answered with %d bytes, %.1f times its body: past the 2.5× the room assumes",
			len(body), len(a.body), float64(len(a.body))/float64(len(body)))
	}
}

// TestTwoChunkedBatchesFitAQuarter: one client's batches hold at most a quarter of the room
// (16 MiB), and a batch of unknown length (chunked) takes 8 MiB of it: two such batches of one
// client are read at once.
func TestTwoChunkedBatchesFitAQuarter(t *testing.T) {
	e := newEnv(t)
	server.SetBatchRoom(e.api.Server, server.BatchRoom, 500*time.Millisecond)
	tok := e.token("pusher", pushSecret)
	stallBatch(t, e, tok, -1) // a chunked batch whose body is still coming
	embeddedtest.Eventually(t, 10*time.Second, "the stalled batch holds its room", func() bool {
		return !server.BatchRoomFree(e.api.Server, server.BatchRoom-8<<20+1)
	})
	body := batchBody(goodItemN(0), goodItemN(1))
	req, err := http.NewRequest(http.MethodPost, e.url+"/v1/infra/notification/mp/batch", io.MultiReader(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a second chunked batch of the client (2 × 8 MiB = its quarter, 16 MiB): %d %s", resp.StatusCode, b)
	}
}

// TestSlowBodyIsStillAnswered: a push or a batch whose body comes slowly (a large batch over a
// slow link) has used the server's write time-out, counted from its headers, by the time it is
// read: it is stored, and answered all the same, so that its caller does not send it again.
func TestSlowBodyIsStillAnswered(t *testing.T) {
	e := newEnv(t)
	ts := httptest.NewUnstartedServer(e.api.Server)
	ts.Config.WriteTimeout = time.Second
	ts.Start()
	t.Cleanup(ts.Close)
	tok := e.token("pusher", pushSecret)
	for i, c := range []struct{ path, body string }{
		{"/v1/infra/notification/mp/batch", batchBody(goodItemN(0), goodItemN(1))},
		{"/v1/infra/notification/mp", goodItemN(2)},
	} {
		before := e.streamPushes()
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, c.body[:len(c.body)/2])
			time.Sleep(1500 * time.Millisecond) // the slow link: past the write time-out
			_, _ = io.WriteString(pw, c.body[len(c.body)/2:])
			_ = pw.Close()
		}()
		req, err := http.NewRequest(http.MethodPost, ts.URL+c.path, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(c.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s, a body that took 1.5 s, the write time-out 1 s: %v; %d pushes stored, not answered", c.path, err, e.streamPushes()-before)
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if want := 2 - i; resp.StatusCode != http.StatusOK || e.streamPushes() != before+want {
			t.Fatalf("%s, a slow body: %d %s; %d pushes stored, want %d", c.path, resp.StatusCode, raw, e.streamPushes()-before, want)
		}
	}
}

// TestResultsLookupBodyLimit: a results lookup of 1,000 malformed ids of 64 characters is
// answered, each not_found; a body over the 129,536 bytes the description states is refused
// with 413, and the description says so.
func TestResultsLookupBodyLimit(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	lookup := func(n int) answer {
		ids := make([]string, 1000)
		for i := range ids {
			ids[i] = strings.Repeat("x", n)
		}
		b, _ := json.Marshal(map[string]any{"ucsIds": ids})
		return e.doWith("POST", "/v1/infra/notification/mp/results", tok, string(b), nil)
	}
	a := lookup(64)
	var got struct {
		Data struct {
			Results []map[string]any `json:"results"`
		} `json:"data"`
	}
	if err := json.Unmarshal(a.body, &got); a.status != 200 || err != nil || len(got.Data.Results) != 1000 || got.Data.Results[999]["state"] != "not_found" {
		t.Fatalf("1,000 ids of 64 characters: %d %.300s", a.status, a.body)
	}
	if a := lookup(140); a.status != 413 || !bytes.Contains(a.body, []byte("larger than 129536 bytes")) {
		t.Fatalf("1,000 ids of 140 characters: %d %.300s, want 413", a.status, a.body)
	}
	spec := e.do("GET", server.OpenAPIPath, "", "", "")
	if !bytes.Contains(spec.body, []byte("at most 129,536 bytes")) || !bytes.Contains(spec.body, []byte("129,536 bytes for a results lookup")) {
		t.Fatal("the description does not state the results lookup's body limit")
	}
}
