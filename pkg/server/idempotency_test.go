package server_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/campus-it/ucs/schemas"
)

// TestIdempotencyKeyAsDescribed: the front end accepts exactly the Idempotency-Key values
// that the served description's pattern allows (printable ASCII without space).
func TestIdempotencyKeyAsDescribed(t *testing.T) {
	var doc struct {
		Components struct {
			Parameters map[string]struct {
				Schema struct {
					Pattern string `json:"pattern"`
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(schemas.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	described := regexp.MustCompile(doc.Components.Parameters["IdempotencyKey"].Schema.Pattern)
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	for i, key := range []string{"a b", "exam notice", "!", "~", "k~!{}", strings.Repeat("k", 128), strings.Repeat("k", 129), "é", "a\tb"} {
		a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(i+1), map[string]string{"Idempotency-Key": key})
		if accepted, want := a.status == 200, described.MatchString(key); accepted != want {
			t.Errorf("Idempotency-Key %q: %d %s; the description's pattern %s matches: %v", key, a.status, a.body, described, want)
		}
	}
}

// TestKeyedRetryWhileTheStoreIsDown: a keyed push and a keyed batch that the queue did not take
// (503) are sent again with their keys while the queue is back and the store is down. Whether
// the first requests went through after all (a PubAck lost, the pushes delivered since) only
// the store can tell: the retries are 503 saying so, not blaming the queue, and publish
// nothing; once the store is back, they are accepted, each push stored once.
func TestKeyedRetryWhileTheStoreIsDown(t *testing.T) {
	e, mongo := newEnvStoreBehindProxy(t)
	tok := e.token("pusher", pushSecret)
	requests := []struct{ path, body string }{
		{"/v1/infra/notification/mp", goodItemN(1)},
		{"/v1/infra/notification/mp/batch", batchBody(goodItemN(2))},
	}
	send := func(i int) answer {
		return e.doWith("POST", requests[i].path, tok, requests[i].body, map[string]string{"Idempotency-Key": "retry-" + strconv.Itoa(i)})
	}
	// The queue takes nothing for a moment: its stream listens on other subjects.
	ctx := context.Background()
	st, err := e.js.Stream(ctx, e.cfg.NATS.Stream)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	subjects := sc.Subjects
	sc.Subjects = []string{"elsewhere.>"}
	if _, err := e.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	for i := range requests {
		if a := send(i); a.status != 503 {
			t.Fatalf("%s while the queue takes nothing: %d %s", requests[i].path, a.status, a.body)
		}
	}
	sc.Subjects = subjects
	if _, err := e.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	mongo.SetDown(true)
	for i := range requests {
		a := send(i)
		if msg, _ := a.json(t)["msg"].(string); a.status != 503 || a.header.Get("Retry-After") == "" ||
			!strings.Contains(msg, "cannot be checked now (the store is unavailable)") || strings.Contains(string(a.body), "queue unavailable") {
			t.Fatalf("%s retried while the store is down: %d %s", requests[i].path, a.status, a.body)
		}
	}
	if n := e.streamPushes(); n != 0 {
		t.Fatalf("the retries while the store is down stored %d pushes", n)
	}
	mongo.SetDown(false)
	ids := map[string]bool{}
	for range 2 {
		for i := range requests {
			a := send(i)
			if a.status != 200 {
				t.Fatalf("%s retried once the store is back: %d %s", requests[i].path, a.status, a.body)
			}
			for _, id := range regexp.MustCompile(`"ucsId":"(\w+)"`).FindAllStringSubmatch(string(a.body), -1) {
				ids[id[1]] = true
			}
		}
	}
	if n := e.streamPushes(); n != 2 || len(ids) != 2 {
		t.Fatalf("after the retries: %d pushes stored, ucsIds answered %v; want the two pushes once each", n, ids)
	}
}
