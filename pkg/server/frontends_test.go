package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// doAt sends a request to the front end at base.
func doAt(t *testing.T, method, base, path, auth, body string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// lookupAt is GET …/mp/{id} at base: the status and the data.
func lookupAt(t *testing.T, base, tok, id string) (int, map[string]any) {
	t.Helper()
	st, b := doAt(t, "GET", base, "/v1/infra/notification/mp/"+id, tok, "", nil)
	var m struct{ Data map[string]any }
	_ = json.Unmarshal(b, &m)
	return st, m.Data
}

// TestReceiptAfterWorkerFailureKeepsIt: a worker sent a push (the platform took it and gave
// msgid 555; the worker announced it as sent) and stopped before writing the sent record; the
// copy handed to the next worker failed on its own (the follower left meanwhile) and was
// recorded failed, as workers record the failure of a push that made calls, its announcement
// lost (the front end's NATS connection was down, or the worker died after its ack). The
// platform's receipt for msgid 555 comes afterwards (the platform repeats a callback it got no
// success for). The failure was first: every front end answers it.
func TestReceiptAfterWorkerFailureKeepsIt(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	ctx := context.Background()
	const id = "01KJJJJJJJJJJJJJJJJJJJJJJJ"
	now := e.clock.Now()

	w := e.api.Store.NewWriter(store.WriterOptions{})
	defer w.Close()
	failed := push.Result{UcsID: id, ClientID: "pusher", UserID: "2020000001", Type: "TDL", State: push.StateFailed,
		Attempts: 1, Reason: "not following: user 2020000001 does not follow the official account",
		Accepted: now, Updated: now, Finished: now}
	for _, rec := range []store.Write{store.FirstFailureAfterCalls(failed, now), store.FirstFinalRecord(failed, now)} {
		if err := w.Write(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	e.announceSent(id, 555, "oA", 1) // the first worker's announcement of the send it never recorded
	if a := e.callback(e.plainQuery(cbToken, "late1"), receiptEvent("oA", 555, simulator.StatusSuccess)); a.status != 200 {
		t.Fatalf("receipt: %d %s", a.status, a.body)
	}
	e.applied(0)

	fresh := e.replica() // a front end started (or restarted) now
	answers := map[string]string{}
	for name, base := range map[string]string{"applying front end": e.url, "fresh front end": fresh} {
		st, d := lookupAt(t, base, tok, id)
		answers[name] = fmt.Sprintf("%d %v (reason %v)", st, d["state"], d["reason"])
	}
	stored, serr := e.api.Store.Outcome(ctx, id)
	if answers["applying front end"] != answers["fresh front end"] {
		t.Fatalf("front ends disagree on a final result: %v; the store's outcome: %s %v", answers, stored.State, serr)
	}
	if !strings.Contains(answers["fresh front end"], "failed") {
		t.Fatalf("the first final result (failed) was replaced: %v", answers)
	}
}

// TestIdempotencyKeyAcrossFrontEnds: the same key and body sent to two front ends at once:
// every request answered 200 carries the same ucsId, and the queue holds exactly one push.
func TestIdempotencyKeyAcrossFrontEnds(t *testing.T) {
	e := newEnv(t)
	other := e.replica()
	tok := e.token("pusher", pushSecret)
	body := goodItemN(1)
	for round := range 3 {
		key := "key-" + strconv.Itoa(round)
		before := e.streamPushes()
		var (
			mu      sync.Mutex
			ids     = map[string]int{}
			codes   = map[int]int{}
			wg      sync.WaitGroup
			barrier = make(chan struct{})
		)
		for i := range 8 {
			base := e.url
			if i%2 == 1 {
				base = other
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-barrier
				st, b := doAt(t, "POST", base, "/v1/infra/notification/mp", tok, body, map[string]string{"Idempotency-Key": key})
				mu.Lock()
				defer mu.Unlock()
				codes[st]++
				if st == 200 {
					var m struct{ Data struct{ UcsID string } }
					_ = json.Unmarshal(b, &m)
					ids[m.Data.UcsID]++
				}
			}()
		}
		close(barrier)
		wg.Wait()
		// Retry the ones refused as under way: they must answer the same ucsId.
		for range 3 {
			for _, base := range []string{e.url, other} {
				st, b := doAt(t, "POST", base, "/v1/infra/notification/mp", tok, body, map[string]string{"Idempotency-Key": key})
				if st == 200 {
					var m struct{ Data struct{ UcsID string } }
					_ = json.Unmarshal(b, &m)
					ids[m.Data.UcsID]++
				}
			}
		}
		if len(ids) != 1 {
			t.Fatalf("round %d: ucsIds answered %v (statuses %v)", round, ids, codes)
		}
		if got := e.streamPushes() - before; got != 1 {
			t.Fatalf("round %d: %d pushes stored for one key (statuses %v)", round, got, codes)
		}
		t.Logf("round %d: statuses %v", round, codes)
	}
}

// sendAllAsWorker does what a worker does for every push waiting in the queue: records it sent
// (msgid base+i, to oA) and acknowledges it. It returns the ucsIds by msgid.
func sendAllAsWorker(t *testing.T, e *env, n int, base int64) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	cons, err := queue.EnsureConsumer(ctx, e.js, service.QueueConfig(e.cfg))
	if err != nil {
		t.Fatal(err)
	}
	w := e.api.Store.NewWriter(store.WriterOptions{})
	defer w.Close()
	out := map[string]int64{}
	for len(out) < n {
		batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			m, err := push.DecodeMessage(msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			now := e.clock.Now()
			msgID := base + int64(len(out))
			r := push.Result{UcsID: m.UcsID, ClientID: m.ClientID, UserID: m.UserID, Type: string(m.Type), State: push.StateSent,
				Attempts: 1, MsgID: msgID, Accepted: time.UnixMilli(m.Accepted), Updated: now, Sent: now}
			if err := w.Write(ctx, store.SentRecords(r, "oA", now)...); err != nil {
				t.Fatal(err)
			}
			if err := msg.Ack(); err != nil {
				t.Fatal(err)
			}
			out[m.UcsID] = msgID
		}
		if got == 0 {
			t.Fatalf("the queue gave %d of %d pushes", len(out), n)
		}
	}
	return out
}

// TestBatchLookupOnAnotherFrontEnd: the batch lookup on the front end that did not accept
// the pushes, nor apply their receipts, answers as single lookups on both front ends do, for a
// mix of own (delivered, failed, sent, queued), foreign and unknown ids.
func TestBatchLookupOnAnotherFrontEnd(t *testing.T) {
	e := newEnv(t)
	other := e.replica()
	tok := e.token("pusher", pushSecret)
	otok := e.token("other", pushSecret)
	push1 := func(tk string, i int) string {
		st, b := doAt(t, "POST", e.url, "/v1/infra/notification/mp", tk, goodItemN(i), nil)
		if st != 200 {
			t.Fatalf("push: %d %s", st, b)
		}
		var m struct{ Data struct{ UcsID string } }
		_ = json.Unmarshal(b, &m)
		return m.Data.UcsID
	}
	a, b, c := push1(tok, 1), push1(tok, 2), push1(tok, 3)
	foreign := push1(otok, 4)
	sent := sendAllAsWorker(t, e, 4, 7000)
	// Receipts for a (success), b (failed) and the foreign one, at the front end that did not
	// accept the pushes.
	for i, r := range []struct {
		id     string
		status string
	}{{a, simulator.StatusSuccess}, {b, simulator.StatusUserBlock}, {foreign, simulator.StatusSuccess}} {
		q := e.plainQuery(cbToken, "b"+strconv.Itoa(i))
		resp, err := http.Post(other+callbackPath+"?"+q, "text/xml", strings.NewReader(receiptEvent("oA", sent[r.id], r.status)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	e.applied(0)
	d := push1(tok, 5) // queued: no worker got it
	unknown := "01KZZZZZZZZZZZZZZZZZZZZZZZ"
	ids := []string{a, b, c, d, foreign, unknown, strings.ToLower(a)}
	want := map[string]string{a: "delivered", b: "failed", c: "sent", d: "queued", foreign: "not_found", unknown: "not_found", strings.ToLower(a): "delivered"}
	// Twice: the second time the front ends answer finals from memory.
	for round := range 2 {
		for _, base := range []string{other, e.url} {
			body, _ := json.Marshal(map[string]any{"ucsIds": ids})
			st, raw := doAt(t, "POST", base, "/v1/infra/notification/mp/results", tok, string(body), nil)
			if st != 200 {
				t.Fatalf("batch lookup at %s: %d %s", base, st, raw)
			}
			var m struct {
				Data struct {
					Results []map[string]any `json:"results"`
				}
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			if len(m.Data.Results) != len(ids) {
				t.Fatalf("%d results for %d ids: %s", len(m.Data.Results), len(ids), raw)
			}
			for i, id := range ids {
				if got := m.Data.Results[i]["state"]; got != want[id] {
					t.Errorf("round %d, batch lookup at %s: %s is %v, want %s", round, base, id, got, want[id])
				}
				sst, sd := lookupAt(t, base, tok, id)
				single := "not_found"
				if sst == 200 {
					single = fmt.Sprint(sd["state"])
				}
				if single != want[id] {
					t.Errorf("round %d, single lookup at %s: %s is %d %v, want %s", round, base, id, sst, sd["state"], want[id])
				}
			}
		}
	}
}

// postReceiptAt posts a receipt for msgID to the front end at base, with its own nonce.
func postReceiptAt(t *testing.T, e *env, base, nonce string, msgID int64, status string) {
	t.Helper()
	resp, err := http.Post(base+callbackPath+"?"+e.plainQuery(cbToken, nonce), "text/xml", strings.NewReader(receiptEvent("oA", msgID, status)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "success" {
		t.Fatalf("receipt %d at %s: %d %s", msgID, base, resp.StatusCode, b)
	}
}

// TestReceiptBurstAcrossFrontEnds: thousands of receipts, each posted twice (the platform's repeat, at
// the other front end), a third of them before their message's sent record is written (and
// never announced): every push ends delivered, none is dropped.
func TestReceiptBurstAcrossFrontEnds(t *testing.T) {
	e := newEnv(t)
	other := e.replica()
	ctx := context.Background()
	const n = 1500
	now := e.clock.Now()
	ids := make([]string, n)
	recs := make([][]store.Write, n)
	for i := range ids {
		ids[i] = push.NewID(now.Add(time.Duration(i) * time.Millisecond))
		r := push.Result{UcsID: ids[i], ClientID: "pusher", UserID: "2020000001", Type: "TDL", State: push.StateSent,
			Attempts: 1, MsgID: int64(100000 + i), Accepted: now, Updated: now, Sent: now}
		recs[i] = store.SentRecords(r, "oA", now)
	}
	w := e.api.Store.NewWriter(store.WriterOptions{})
	defer w.Close()
	write := func(from, to int) {
		var all []store.Write
		for i := from; i < to; i++ {
			all = append(all, recs[i]...)
		}
		for len(all) > 0 {
			k := min(len(all), 400)
			if err := w.Write(ctx, all[:k]...); err != nil {
				t.Fatal(err)
			}
			all = all[k:]
		}
	}
	late := n / 3
	write(late, n)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 4 {
				postReceiptAt(t, e, e.url, fmt.Sprintf("a%d", i), int64(100000+i), simulator.StatusSuccess)
				postReceiptAt(t, e, other, fmt.Sprintf("b%d", i), int64(100000+i), simulator.StatusSuccess)
			}
		}()
	}
	wg.Wait()
	write(0, late)
	e.applied(2 * late)
	e.clock.Advance(notification.DefaultReceiptWait + time.Second)
	e.applied(0)
	missing := 0
	for _, id := range ids {
		r, err := e.api.Store.Final(ctx, id)
		if err != nil || r.State != push.StateDelivered {
			missing++
			if missing < 5 {
				t.Errorf("%s: %+v %v", id, r, err)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d pushes without their receipt's result", missing, n)
	}
	if v := e.metricValue("ucs_callback_receipts_unknown_total"); v > 0 {
		t.Fatalf("%v receipts dropped as unknown", v)
	}
}

// TestReceiptsOfOneMessageInOrder: two receipts for one message, the first one before its sent
// record is in the store (the front end applying events did not get the worker's announcement:
// it started since), the second a moment after the record was written. The events are applied
// in the order the stream holds them, so the first one is the push's result.
func TestReceiptsOfOneMessageInOrder(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	const id = "01KKKKKKKKKKKKKKKKKKKKKKKK"
	postReceiptAt(t, e, e.url, "o1", 4711, simulator.StatusSuccess)
	e.applied(1) // held: msgid unknown
	e.markSent(id, 4711, "oA")
	postReceiptAt(t, e, e.url, "o2", 4711, simulator.StatusUserBlock)
	e.applied(0) // the first one goes with the second, ahead of it
	r, err := e.api.Store.Final(context.Background(), id)
	if err != nil || r.State != push.StateDelivered {
		t.Fatalf("the first receipt (success) lost to the second (user block): stored %s %q %v; lookup %v",
			r.State, r.Reason, err, e.result(tok, id))
	}
}

// TestIdempotentBatchAcrossFrontEnds: the same batch with the same key sent to two front
// ends at once, and retried: every answer 200 carries the same ucsIds, and the queue holds each
// push once.
func TestIdempotentBatchAcrossFrontEnds(t *testing.T) {
	e := newEnv(t)
	other := e.replica()
	tok := e.token("pusher", pushSecret)
	body := batchBody(goodItemN(1), badItem, goodItemN(2), goodItemN(3))
	before := e.streamPushes()
	var (
		mu      sync.Mutex
		answers = map[string]int{}
		codes   = map[int]int{}
		wg      sync.WaitGroup
		barrier = make(chan struct{})
	)
	send := func(base string) {
		st, b := doAt(t, "POST", base, "/v1/infra/notification/mp/batch", tok, body, map[string]string{"Idempotency-Key": "batch-key"})
		mu.Lock()
		defer mu.Unlock()
		codes[st]++
		if st == 200 {
			var m struct{ Data batchData }
			_ = json.Unmarshal(b, &m)
			var ids []string
			for _, r := range m.Data.Results {
				ids = append(ids, r.UcsID)
			}
			answers[strings.Join(ids, ",")]++
		}
	}
	for i := range 8 {
		base := e.url
		if i%2 == 1 {
			base = other
		}
		wg.Add(1)
		go func() { defer wg.Done(); <-barrier; send(base) }()
	}
	close(barrier)
	wg.Wait()
	for range 2 {
		send(e.url)
		send(other)
	}
	if len(answers) != 1 {
		t.Fatalf("different answers: %v (statuses %v)", answers, codes)
	}
	if got := e.streamPushes() - before; got != 3 {
		t.Fatalf("%d pushes stored for a batch of 3 good items (statuses %v)", got, codes)
	}
	t.Logf("statuses %v, answer %v", codes, answers)
}
