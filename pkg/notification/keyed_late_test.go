package notification_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// gatedPub is the real publisher; the first PublishBatch that the queue refuses as full is
// held (after the refusal) until gate is closed, so that its request handles the refusal late.
type gatedPub struct {
	inner   *queue.Publisher
	once    sync.Once
	refused chan struct{}
	gate    chan struct{}
}

func (g *gatedPub) Publish(ctx context.Context, m push.Message, o queue.PublishOptions) error {
	return g.inner.Publish(ctx, m, o)
}

func (g *gatedPub) PublishBatch(ctx context.Context, ms []push.Message, o queue.PublishOptions) error {
	err := g.inner.PublishBatch(ctx, ms, o)
	if errors.Is(err, queue.ErrFull) {
		held := false
		g.once.Do(func() { held = true })
		if held {
			close(g.refused)
			<-g.gate
		}
	}
	return err
}

// fullQueueService is a front end's push service on the queue js and stream st, publishing
// through pub and keeping its keys in records, with the queue filled to its bound.
func fullQueueService(t *testing.T, js jetstream.JetStream, st jetstream.Stream, pub notification.Publisher,
	records notification.Records, now func() time.Time) *notification.Service {
	t.Helper()
	svc, err := notification.New(notification.Config{
		Publisher: pub, Waiting: queue.NewWaiting(js, st, "d"),
		Store: embeddedtest.Store(t, nil), Records: records, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, js)
	return svc
}

// TestRefusedLateKeepsATakeOverRecord: a request that took a key and handles the full queue's
// refusal only after its claim went stale, when a retry has taken the key over and stored the
// batch, keeps the take-over's record: the next retry under the key is answered the ucsIds
// that were stored, not fresh ones the stream's dedupe would never store.
func TestRefusedLateKeepsATakeOverRecord(t *testing.T) {
	ctx := context.Background()
	js, st, inner := smallQueue(t)
	pub := &gatedPub{inner: inner, refused: make(chan struct{}), gate: make(chan struct{})}
	records, err := natskv.OpenRecords(ctx, js, "keys", notification.KeyTTL, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Now())
	svc := fullQueueService(t, js, st, pub, records, clock.Now)
	items := []notification.Item{{Req: request(t, body)}, {Req: request(t, body)}}
	key := notification.Key{Name: "late-key", Body: []byte("the batch body")}

	type res struct {
		b   notification.Batch
		err error
	}
	r1 := make(chan res, 1)
	go func() {
		b, err := svc.PushBatch(ctx, "pusher", items, key)
		r1 <- res{b, err}
	}()
	select {
	case <-pub.refused:
	case <-time.After(20 * time.Second):
		t.Fatal("the first request was never refused as full")
	}
	// The first request is slow to handle its refusal: its claim goes stale, the queue
	// drains, and a retry takes over.
	clock.Advance(notification.KeyStale + time.Second)
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	b2, err := svc.PushBatch(ctx, "pusher", items, key)
	if err != nil || b2.Unavailable || b2.Accepted != 2 {
		t.Fatalf("take-over: %+v, %v", b2, err)
	}
	t.Logf("take-over answered %s %s", b2.Items[0].UcsID, b2.Items[1].UcsID)
	close(pub.gate)
	got1 := <-r1
	t.Logf("first request: unavailable=%v full=%v err=%v", got1.b.Unavailable, got1.b.Full, got1.err)

	b3, err := svc.PushBatch(ctx, "pusher", items, key)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	t.Logf("retry answered %s %s (accepted %d)", b3.Items[0].UcsID, b3.Items[1].UcsID, b3.Accepted)
	info, _ := st.Info(ctx)
	t.Logf("stream holds %d messages", info.State.Msgs)
	for i := range b3.Items {
		id := b3.Items[i].UcsID
		if id == "" {
			continue
		}
		if _, err := svc.Result(ctx, "pusher", id); errors.Is(err, notification.ErrNotFound) {
			t.Errorf("retry answered ucsId %s, which no push has (never stored)", id)
		}
		if id != b2.Items[i].UcsID {
			t.Errorf("item %d: retry under the same key answered %s, the take-over %s", i, id, b2.Items[i].UcsID)
		}
	}
}

func fill(t *testing.T, js jetstream.JetStream) {
	ctx := context.Background()
	for _, size := range []int{512, 64, 0} {
		for i := 0; ; i++ {
			if i > 1000 {
				t.Fatal("stream never filled")
			}
			if _, err := js.Publish(ctx, queue.SubjectPrefix+"filler."+push.NewID(time.Now()), make([]byte, size)); err != nil {
				break
			}
		}
	}
}

// TestReviewForgetThenFreshClaim: a keyed request refused by a full queue forgets its key; once
// the queue drains, a fresh request under the key must have its pushes stored (the refused

// hookPub is the real publisher; after each PublishBatch, hook sees its result (and may hold it).
type hookPub struct {
	inner *queue.Publisher
	hook  func(ms []push.Message, err error)
}

func (h *hookPub) Publish(ctx context.Context, m push.Message, o queue.PublishOptions) error {
	return h.inner.Publish(ctx, m, o)
}

func (h *hookPub) PublishBatch(ctx context.Context, ms []push.Message, o queue.PublishOptions) error {
	err := h.inner.PublishBatch(ctx, ms, o)
	h.hook(ms, err)
	return err
}

// slowCreate is the real records; a Create takes slow of the clock (the key-value write is slow).
type slowCreate struct {
	*natskv.Records
	slow func()
}

func (s *slowCreate) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	s.slow()
	return s.Records.Create(ctx, key, value)
}

// TestSlowClaimKeepsATakenOverKey: a request whose claim write was slow (20 s between the
// pending time it wrote and the return of its write) is refused by the full queue 31 s after
// that time, when a retry has taken the key over and stored the pushes under the key's message
// id. The late request does not forget the record, and the next request under the key is
// answered the ucsIds that were stored.
func TestSlowClaimKeepsATakenOverKey(t *testing.T) {
	ctx := context.Background()
	js, st, inner := smallQueue(t)
	recs, err := natskv.OpenRecords(ctx, js, "keys", notification.KeyTTL, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Now())
	var mu sync.Mutex // guards calls
	slowOnce := true
	records := &slowCreate{Records: recs, slow: func() {
		if slowOnce {
			slowOnce = false
			clock.Advance(20 * time.Second)
		}
	}}
	refusedA, gateA := make(chan struct{}), make(chan struct{})
	storedB, gateB := make(chan struct{}), make(chan struct{})
	var calls int
	pub := &hookPub{inner: inner, hook: func(ms []push.Message, err error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch n {
		case 1: // A: refused as full
			if !errors.Is(err, queue.ErrFull) {
				t.Errorf("A: %v", err)
			}
			close(refusedA)
			<-gateA
		case 2: // B: the take-over, stored
			if err != nil {
				t.Errorf("B: %v", err)
			}
			close(storedB)
			<-gateB
		}
	}}
	svc := fullQueueService(t, js, st, pub, records, clock.Now)
	items := []notification.Item{{Req: request(t, body)}, {Req: request(t, body)}}
	key := notification.Key{Name: "slow-key", Body: []byte("the batch body")}
	type res struct {
		b   notification.Batch
		err error
	}
	rA, rB := make(chan res, 1), make(chan res, 1)
	go func() { b, err := svc.PushBatch(ctx, "pusher", items, key); rA <- res{b, err} }()
	<-refusedA
	clock.Advance(11 * time.Second) // 31 s after A's Pending stamp, 11 s after its Create returned
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { b, err := svc.PushBatch(ctx, "pusher", items, key); rB <- res{b, err} }()
	select {
	case <-storedB:
	case <-time.After(20 * time.Second):
		t.Fatal("the retry did not take the key over")
	}
	close(gateA)
	a := <-rA
	t.Logf("A: unavailable=%v full=%v err=%v", a.b.Unavailable, a.b.Full, a.err)
	d, err := svc.PushBatch(ctx, "pusher", items, key)
	close(gateB)
	b := <-rB
	if err != nil {
		t.Fatalf("D: %v", err)
	}
	t.Logf("B (take-over) answered %s %s", b.b.Items[0].UcsID, b.b.Items[1].UcsID)
	t.Logf("D (next request, same key) answered %s %s, accepted %d", d.Items[0].UcsID, d.Items[1].UcsID, d.Accepted)
	for i, it := range d.Items {
		if it.UcsID == "" {
			continue
		}
		if _, err := svc.Result(ctx, "pusher", it.UcsID); errors.Is(err, notification.ErrNotFound) {
			t.Errorf("D: item %d answered ucsId %s, which was never stored", i, it.UcsID)
		}
		if it.UcsID != b.b.Items[i].UcsID {
			t.Errorf("item %d: two requests under one key answered %s and %s", i, b.b.Items[i].UcsID, it.UcsID)
		}
	}
}

// smallQueue starts NATS with a push stream of 8 KiB, consumer "d", and the real publisher.
func smallQueue(t *testing.T) (jetstream.JetStream, jetstream.Stream, *queue.Publisher) {
	t.Helper()
	_, js := embeddedtest.JetStream(t)
	qc := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 8 << 10, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(context.Background(), js, qc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	return js, st, pub
}

// flakyPub is the real publisher, whose first publish meets NATS unreachable (nothing sent)
// and whose second loses its PubAck (the push is stored, the caller told an error), as a
// leader change does.
type flakyPub struct {
	inner *queue.Publisher
	calls atomic.Int32
}

func (f *flakyPub) Publish(ctx context.Context, m push.Message, o queue.PublishOptions) error {
	switch f.calls.Add(1) {
	case 1:
		return nats.ErrNoResponders
	case 2:
		if err := f.inner.Publish(ctx, m, o); err != nil {
			return err
		}
		return nats.ErrTimeout
	}
	return f.inner.Publish(ctx, m, o)
}

func (f *flakyPub) PublishBatch(ctx context.Context, ms []push.Message, o queue.PublishOptions) error {
	if len(ms) == 1 { // as the real publisher does
		return f.Publish(ctx, ms[0], o)
	}
	return f.inner.PublishBatch(ctx, ms, o)
}

// A key's record lives at least as long as the stream's memory of its message id: a retry that
// publishes again from the record (its first request got no PubAck) writes the record again
// even when that publish fails, since it may have been stored, its PubAck lost. Once the record
// ends, a request under the key is a new push, stored and looked up, not one the stream drops
// as a duplicate of the retry's. The key's life is scaled down: records kept 4 s, the stream's
// dedupe window 4 s (both are 24 h in the service).
func TestKeyRecordOutlivesTheStreamsMemory(t *testing.T) {
	ctx := context.Background()
	life := 4 * time.Second
	_, js := embeddedtest.JetStream(t)
	qc := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: life, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(ctx, js, qc)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	records, err := natskv.OpenRecords(ctx, js, "keys", life, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := notification.New(notification.Config{
		Publisher: &flakyPub{inner: inner}, Waiting: queue.NewWaiting(js, st, "d"),
		Store: embeddedtest.Store(t, nil), Records: records,
	})
	if err != nil {
		t.Fatal(err)
	}
	key := notification.Key{Name: "order-8812-reminder-1", Body: []byte(body)}

	// The first request: NATS unreachable, 503, its record lists the push to publish again.
	if _, err := svc.Push(ctx, "pusher", request(t, body), key); !errors.Is(err, notification.ErrQueueUnavailable) {
		t.Fatalf("first request: %v, want the queue unavailable", err)
	}
	// Halfway through the key's life, the retry publishes it again; the push is stored, its
	// PubAck lost: 503 again.
	time.Sleep(life / 2) // half of the key's life passes: the scenario's time, not a wait for readiness
	if _, err := svc.Push(ctx, "pusher", request(t, body), key); !errors.Is(err, notification.ErrQueueUnavailable) {
		t.Fatalf("retry: %v, want the queue unavailable", err)
	}
	stored := func() uint64 {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	if n := stored(); n != 1 {
		t.Fatalf("the retry's push is not in the stream (%d)", n)
	}
	// The key's record ends (its life counted from its last write, the first request's).
	embeddedtest.Eventually(t, 3*life, "the key's record expires", func() bool {
		_, _, err := records.Get(ctx, keyRecordKey("pusher", key.Name))
		return errors.Is(err, natskv.ErrNoRecord)
	})
	// The key's life is over: a request under it is a new push (here a new message).
	other := `{"userId":"2020000001","type":"JML","data":{"class":"线性代数","info":"期中考试"}}`
	id, err := svc.Push(ctx, "pusher", request(t, other), notification.Key{Name: key.Name, Body: []byte(other)})
	if err != nil {
		t.Fatalf("a request under the key after its record ended: %v", err)
	}
	_, lerr := svc.Result(ctx, "pusher", id)
	if n := stored(); n != 2 || lerr != nil {
		t.Fatalf("a request under the key after its record ended was answered 200 with ucsId %s, but the stream holds %d pushes (want 2) and the lookup of %s says %v: the stream still remembered the key's message id from the retry's publish and dropped the new push as a duplicate; it will never be sent", id, n, id, lerr)
	}
}

// keyRecordKey is the records' key of client's Idempotency-Key name.
func keyRecordKey(client, name string) string {
	sum := sha256.Sum256([]byte(client + "\x00" + name))
	return hex.EncodeToString(sum[:])
}
