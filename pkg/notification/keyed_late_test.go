package notification_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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

// TestRefusedLateKeepsATakeOverRecord: a request that took a key and handles the full queue's
// refusal only after its claim went stale, when a retry has taken the key over and stored the
// batch, keeps the take-over's record: the next retry under the key is answered the ucsIds
// that were stored, not fresh ones the stream's dedupe would never store.
func TestRefusedLateKeepsATakeOverRecord(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	qc := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 8 << 10, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(ctx, js, qc)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	pub := &gatedPub{inner: inner, refused: make(chan struct{}), gate: make(chan struct{})}
	records, err := natskv.OpenRecords(ctx, js, "keys", notification.KeyTTL, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	svc, err := notification.New(notification.Config{
		Publisher: pub, Waiting: queue.NewWaiting(js, st, qc.Consumer),
		Store: embeddedtest.Store(t, nil), Records: records, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Fill the stream until it refuses.
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("stream never filled")
		}
		_, err := js.Publish(ctx, queue.SubjectPrefix+"filler."+push.NewID(time.Now()), make([]byte, 512))
		if err != nil {
			break
		}
	}
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
	mu.Lock()
	clock = clock.Add(notification.KeyStale + time.Second)
	mu.Unlock()
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
