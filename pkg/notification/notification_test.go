package notification_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

type rig struct {
	svc      *notification.Service
	stream   jetstream.Stream
	js       jetstream.JetStream
	qc       queue.Config
	store    *store.Store
	records  *natskv.Records
	accepted int
	replayed int
	rejected int
	kinds    []string
	finals   []push.Result
	sent     []push.Result
}

// newRig builds the service on a real NATS server (stream, waiting reader, key records) and
// a real store; withRecords false leaves the service without key records.
func newRig(t *testing.T, withRecords bool) *rig {
	t.Helper()
	_, js := embeddedtest.JetStream(t)
	return newRigOn(t, js, withRecords)
}

// newRigOn is newRig on the NATS server js is connected to.
func newRigOn(t *testing.T, js jetstream.JetStream, withRecords bool) *rig {
	t.Helper()
	ctx := context.Background()
	qc := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(ctx, js, qc)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{stream: st, js: js, qc: qc}
	pub, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	r.store = embeddedtest.Store(t, nil)
	cfg := notification.Config{
		Publisher: pub, Waiting: queue.NewWaiting(js, st, qc.Consumer),
		Store:    r.store,
		Accepted: func(n int) { r.accepted += n }, Replayed: func() { r.replayed++ }, Rejected: func(kind string) { r.rejected++; r.kinds = append(r.kinds, kind) },
		Final: func(f push.Result) { r.finals = append(r.finals, f) }, Sent: func(f push.Result) { r.sent = append(r.sent, f) },
	}
	if withRecords {
		if r.records, err = natskv.OpenRecords(ctx, js, "keys", notification.KeyTTL, 1, 0); err != nil {
			t.Fatal(err)
		}
		cfg.Records = r.records
	}
	if r.svc, err = notification.New(cfg); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) msgs(t *testing.T) uint64 {
	t.Helper()
	info, err := r.stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

const body = `{"userId":"2020000001","type":"JML","data":{"class":"高等数学","info":"第三章习题"}}`

func request(t *testing.T, b string) push.Request {
	t.Helper()
	req, err := push.Parse([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// A push is accepted once the queue stores it, and its result is the caller's only: another
// client, or a ucsId that is no push's, is ErrNotFound.
func TestPushAndResult(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	id, err := r.svc.Push(ctx, "pusher", request(t, body), notification.Key{})
	if err != nil {
		t.Fatal(err)
	}
	if r.accepted != 1 || r.msgs(t) != 1 {
		t.Errorf("accepted %d, stream holds %d; want 1 and 1", r.accepted, r.msgs(t))
	}
	res, err := r.svc.Result(ctx, "pusher", id)
	if err != nil || res.State != push.StateQueued || res.UcsID != id {
		t.Errorf("own result: %+v, %v; want queued", res, err)
	}
	for _, c := range []struct{ client, id string }{{"other", id}, {"pusher", push.NewID(time.Now())}, {"pusher", "not-an-id"}} {
		if _, err := r.svc.Result(ctx, c.client, c.id); !errors.Is(err, notification.ErrNotFound) {
			t.Errorf("result of %s for %s: %v, want ErrNotFound", c.id, c.client, err)
		}
	}
	got, err := r.svc.Results(ctx, "pusher", []string{id, "not-an-id"})
	if err != nil || len(got) != 2 || !got[0].Found || got[0].Result.UcsID != id || got[1].Found {
		t.Errorf("results: %+v, %v", got, err)
	}
	if _, err := r.svc.Push(ctx, "pusher", request(t, body), notification.Key{Name: "k", Body: []byte(body)}); !errors.Is(err, notification.ErrKeysUnsupported) {
		t.Errorf("a key without records: %v, want ErrKeysUnsupported", err)
	}
}

// A retry with the key answers the first ucsId and stores nothing again; the key with another
// body is ErrKeyReused.
func TestKeyedPush(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	key := notification.Key{Name: "exam-42", Body: []byte(body)}
	first, err := r.svc.Push(ctx, "pusher", request(t, body), key)
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.svc.Push(ctx, "pusher", request(t, body), key)
	if err != nil || again != first {
		t.Fatalf("retry: %q, %v; want %q", again, err, first)
	}
	if r.msgs(t) != 1 || r.replayed != 1 {
		t.Errorf("stream holds %d, replayed %d; want 1 and 1", r.msgs(t), r.replayed)
	}
	other := `{"userId":"2020000001","type":"JML","data":{"class":"线性代数","info":"第三章习题"}}`
	if _, err := r.svc.Push(ctx, "pusher", request(t, other), notification.Key{Name: "exam-42", Body: []byte(other)}); !errors.Is(err, notification.ErrKeyReused) {
		t.Errorf("the key with another body: %v, want ErrKeyReused", err)
	}
	// Keys are the client's own: another client's same key is a new push.
	if id, err := r.svc.Push(ctx, "other", request(t, body), key); err != nil || id == first {
		t.Errorf("another client's key: %q, %v", id, err)
	}
}

// A batch's refused items are told once, not again when a retry with the key is answered from
// its record.
func TestBatchCountsRejectedOnce(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	_, refused := push.Parse([]byte(`{"userId":"2020000001"}`))
	items := []notification.Item{{Req: request(t, body)}, {Err: refused}}
	key := notification.Key{Name: "batch", Body: []byte("the batch's body")}
	b, err := r.svc.PushBatch(ctx, "pusher", items, key)
	if err != nil || b.Accepted != 1 || b.Rejected != 1 || b.Items[0].UcsID == "" || b.Items[1].Err == nil || b.Unavailable {
		t.Fatalf("batch: %+v, %v", b, err)
	}
	again, err := r.svc.PushBatch(ctx, "pusher", items, key)
	if err != nil || again.Items[0].UcsID != b.Items[0].UcsID || again.Accepted != 1 || again.Rejected != 1 {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	if r.rejected != 1 || r.accepted != 1 || r.msgs(t) != 1 {
		t.Errorf("rejected told %d, accepted %d, stream holds %d; want 1, 1, 1", r.rejected, r.accepted, r.msgs(t))
	}
	if want := string(push.RuleKindRequired); len(r.kinds) != 1 || r.kinds[0] != want {
		t.Errorf("rejected told kinds %q, want [%q]", r.kinds, want)
	}
}

// The memory keeps the first final result of a push: a later, different one (a receipt the
// platform pushed twice with other statuses, an announcement that comes late) changes nothing,
// and the operations page hears of each push and each sent message once. Lookups answer from it,
// for the push's own client only.
func TestMemoryKeepsTheFirstFinal(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	id := push.NewID(time.Now())
	at := time.Now().UTC().Truncate(time.Millisecond)
	base := push.Result{UcsID: id, ClientID: "pusher", UserID: "2020000001", Type: "JML", Accepted: at, Updated: at}
	sent := base
	sent.State, sent.MsgID, sent.Attempts, sent.Sent = push.StateSent, 42, 1, at
	r.svc.Remember(sent) // not final: ignored
	if _, ok := r.svc.Remembered(id); ok {
		t.Fatal("a sent result was kept as final")
	}
	r.svc.RememberSent(sent, "oFollower")
	r.svc.RememberSent(sent, "oFollower")
	delivered := sent
	delivered.State, delivered.Finished = push.StateDelivered, at.Add(time.Second)
	failed := sent
	failed.State, failed.Reason, failed.Finished = push.StateFailed, "failed:user block", at.Add(2*time.Second)
	r.svc.Remember(delivered)
	r.svc.Remember(failed)
	r.svc.Remember(delivered)
	if got, ok := r.svc.Remembered(id); !ok || got.State != push.StateDelivered {
		t.Fatalf("kept %+v (%v), want the first final, delivered", got, ok)
	}
	if len(r.finals) != 1 || r.finals[0].State != push.StateDelivered || len(r.sent) != 1 {
		t.Fatalf("told of %d finals %v and %d sends, want 1 delivered and 1", len(r.finals), r.finals, len(r.sent))
	}
	if got, err := r.svc.Result(ctx, "pusher", id); err != nil || got.State != push.StateDelivered {
		t.Fatalf("lookup: %+v, %v", got, err)
	}
	if _, err := r.svc.Result(ctx, "other", id); !errors.Is(err, notification.ErrNotFound) {
		t.Fatalf("another client's lookup: %v, want ErrNotFound", err)
	}
}

// A push a worker sent and whose receipt came, but which is still in the queue (the worker's
// acknowledgement is still to come, or was lost), is looked up as the store has it, delivered:
// never as the attempt under way that the progress record last said.
func TestReachedPushAnswersItsMostAdvancedRecord(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	id, err := r.svc.Push(ctx, "pusher", request(t, body), notification.Key{})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := queue.EnsureConsumer(ctx, r.js, r.qc)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() { // received, never acknowledged
	}
	now := time.Now()
	res := push.Result{UcsID: id, ClientID: "pusher", UserID: "2020000001", Type: "JML", Attempts: 1, Accepted: now, Updated: now}
	sending, sent, delivered := res, res, res
	sending.State = push.StateSending
	sent.State, sent.MsgID, sent.Sent = push.StateSent, 42, now
	delivered.State, delivered.MsgID, delivered.Sent, delivered.Finished = push.StateDelivered, 42, now, now
	w := r.store.NewWriter(store.WriterOptions{})
	defer w.Close()
	recs := append([]store.Write{store.ProgressRecord(sending, now)}, store.SentRecords(sent, "o", now)...)
	if err := w.Write(ctx, append(recs, store.FirstFinalRecord(delivered, now))...); err != nil {
		t.Fatal(err)
	}
	many, err := r.svc.Results(ctx, "pusher", []string{id})
	if err != nil || len(many) != 1 || many[0].Result.State != push.StateDelivered {
		t.Fatalf("batch lookup of a delivered push still in the queue: %+v, %v; want delivered", many, err)
	}
	// The final result is kept in memory from then on. The operations page is not told of it:
	// it counts results announced as they came about, and one a lookup read may be of any age.
	got, err := r.svc.Result(ctx, "pusher", id)
	if err != nil || got.State != push.StateDelivered || len(r.finals) != 0 {
		t.Fatalf("lookup of it: %+v, %v, the operations page told %d times; want delivered, not told", got, err, len(r.finals))
	}
}
