package notification_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// TestLookupDoesNotGoBackWhenTheConsumerIsMadeAgain: a worker received a push, the platform
// took it and the worker recorded it sent; its ack has not reached the queue yet. An operator
// removes the workers' consumer (`nats consumer rm`, which the delivery package handles: the
// worker makes it again). The push is still in the stream, the store says sent: a lookup must
// keep answering sent, not go back to queued with no attempt.
func TestLookupDoesNotGoBackWhenTheConsumerIsMadeAgain(t *testing.T) {
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
	for range batch.Messages() { // received; its ack is not in yet
	}
	now := time.Now()
	sent := push.Result{UcsID: id, ClientID: "pusher", UserID: "2020000001", Type: "JML", Attempts: 1,
		State: push.StateSent, MsgID: 42, Accepted: now, Updated: now, Sent: now}
	w := r.store.NewWriter(store.WriterOptions{})
	defer w.Close()
	if err := w.Write(ctx, store.SentRecords(sent, "o", now)...); err != nil {
		t.Fatal(err)
	}
	got, err := r.svc.Result(ctx, "pusher", id)
	if err != nil || got.State != push.StateSent {
		t.Fatalf("before: %+v %v; want sent", got, err)
	}
	// The operator removes the consumer; the worker makes it again (Config.Reconsume).
	if err := r.js.DeleteConsumer(ctx, r.qc.Stream, r.qc.Consumer); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past the lookups' 250 ms view of how far the workers got
	got, err = r.svc.Result(ctx, "pusher", id)
	if err != nil || got.State != push.StateSent {
		t.Fatalf("consumer gone: lookup of a push the store records sent answers %s with %d attempts (%v); it answered sent before",
			got.State, got.Attempts, err)
	}
	if _, err := queue.EnsureConsumer(ctx, r.js, r.qc); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	got, err = r.svc.Result(ctx, "pusher", id)
	if err != nil || got.State != push.StateSent {
		t.Fatalf("consumer made again: lookup answers %s with %d attempts (%v); it answered sent before",
			got.State, got.Attempts, err)
	}
}
