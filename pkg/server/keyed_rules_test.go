package server_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/service"
)

// TestKeyedPushRetryOnFrontEndWithOtherRules: a single push with an Idempotency-Key
// is stored by one front end, which answers its ucsId; the retry (same key, same bytes)
// reaches a front end whose rules refuse the body (another version or template mapping,
// during a rolling update). The same key answers the first request's ucsId, whichever front
// end answers, as a batch's does: not 400 for a push that was accepted and will be sent. It
// is counted as a request answered from an earlier one with the same key.
func TestKeyedPushRetryOnFrontEndWithOtherRules(t *testing.T) {
	e := newEnv(t)
	// A second front end on the same NATS and store, whose rules refuse "class" as a number.
	other := *e.cfg
	other.Platform.Templates = map[string]config.Template{
		"JML": {TemplateID: "tpl-JML", Fields: map[string]string{"class": "number1", "info": "thing2"}},
	}
	m := metrics.NewFrontEnd(prometheus.NewRegistry())
	api, err := service.NewAPI(context.Background(), &other, service.Deps{Now: e.clock.Now, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	ts := httptest.NewServer(api.Server)
	t.Cleanup(ts.Close)

	tok := e.token("pusher", pushSecret)
	body := goodItemN(7)
	hdr := map[string]string{"Idempotency-Key": "rolling-single"}
	st, b := doAt(t, "POST", e.url, "/v1/infra/notification/mp", tok, body, hdr)
	var first struct{ Data struct{ UcsID string } }
	_ = json.Unmarshal(b, &first)
	if st != 200 || first.Data.UcsID == "" {
		t.Fatalf("first request: %d %s", st, b)
	}
	st, b = doAt(t, "POST", ts.URL, "/v1/infra/notification/mp", tok, body, hdr)
	var again struct{ Data struct{ UcsID string } }
	_ = json.Unmarshal(b, &again)
	if st != 200 || again.Data.UcsID != first.Data.UcsID {
		t.Fatalf("the retry under the same key on the other front end answers %d %s; the first request stored the push as %s (the queue holds %d)",
			st, b, first.Data.UcsID, e.streamPushes())
	}
	if n := testutil.ToFloat64(m.IdempotentReplay); n != 1 {
		t.Fatalf("the retry answered from the key's record: ucs_push_idempotent_replays_total = %v on that front end, want 1", n)
	}
}

// TestSingleEndpointAnswersNoBatchKey: a client sends a batch of one push under an
// Idempotency-Key, then sends the same bytes (a batch body, {"messages":[…]}) to the single
// push endpoint under the same key. That body is no push: the single endpoint refuses it
// with 400, as it does without a key, rather than answer the batch's ucsId as if it had been
// accepted as a push.
func TestSingleEndpointAnswersNoBatchKey(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	body := batchBody(goodItemN(3))
	hdr := map[string]string{"Idempotency-Key": "one-key-two-endpoints"}
	st, b := doAt(t, "POST", e.url, "/v1/infra/notification/mp/batch", tok, body, hdr)
	if st != 200 {
		t.Fatalf("batch: %d %s", st, b)
	}
	if st, b := doAt(t, "POST", e.url, "/v1/infra/notification/mp", tok, body, nil); st != 400 {
		t.Fatalf("the batch body at the single endpoint without a key: %d %s, want 400", st, b)
	}
	if st, b := doAt(t, "POST", e.url, "/v1/infra/notification/mp", tok, body, hdr); st != 400 {
		t.Fatalf("the batch body at the single push endpoint under the batch's key answers %d %s: a ucsId for a body that is no push", st, b)
	}
}
