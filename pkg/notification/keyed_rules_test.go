package notification_test

import (
	"context"
	"errors"
	"testing"

	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// twoItems is a batch of two good pushes, as a front end parses the body; refuseSecond gives
// the second item the refusal another front end's rules (another version, another template
// mapping, during a rolling update) give the same bytes.
func twoItems(t *testing.T, refuseSecond bool) []notification.Item {
	t.Helper()
	second := `{"userId":"2020000002","type":"JML","data":{"class":"线性代数","info":"第四章习题"}}`
	items := []notification.Item{{Req: request(t, body)}, {Req: request(t, second)}}
	if refuseSecond {
		_, refused := push.Parse([]byte(`{"userId":"2020000002"}`))
		items[1] = notification.Item{Err: refused}
	}
	return items
}

// TestReplayTrustsTheRecordNotTheRules: a keyed batch is stored whole; its retry (same key,
// same bytes) reaches a front end whose rules refuse the second item. The key's record gave
// both items their ucsIds and the queue holds both: the retry answers both accepted, under
// those ucsIds.
func TestReplayTrustsTheRecordNotTheRules(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	key := notification.Key{Name: "rolling-update", Body: []byte(`{"messages":["the same bytes"]}`)}
	first, err := r.svc.PushBatch(ctx, "pusher", twoItems(t, false), key)
	if err != nil || first.Accepted != 2 || first.Unavailable {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := r.svc.PushBatch(ctx, "pusher", twoItems(t, true), key)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.msgs(t); n != 2 {
		t.Fatalf("the queue holds %d pushes, want 2", n)
	}
	if again.Items[1].UcsID != first.Items[1].UcsID || again.Accepted != 2 {
		t.Fatalf("retry under the key answers item 1 as %+v (accepted %d), but the first request stored it as %s",
			again.Items[1], again.Accepted, first.Items[1].UcsID)
	}
}

// TestReplayPublishesAllOrNone: a keyed batch is refused by the queue (not full: the stream is
// away), and the key's record holds both items to publish again. A retry reaching a front end
// whose rules refuse the second item publishes neither, and accepts neither; a later retry on
// a front end that takes both publishes both, under their recorded ucsIds: no ucsId is ever
// answered for a push that was not stored.
func TestReplayPublishesAllOrNone(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	key := notification.Key{Name: "rolling-update-503", Body: []byte(`{"messages":["the same bytes"]}`)}
	if err := r.js.DeleteStream(ctx, r.qc.Stream); err != nil {
		t.Fatal(err)
	}
	first, err := r.svc.PushBatch(ctx, "pusher", twoItems(t, false), key)
	if err != nil || !first.Unavailable || first.Accepted != 0 {
		t.Fatalf("first: %+v, %v; want unavailable", first, err)
	}
	if _, err := queue.EnsureStream(ctx, r.js, r.qc); err != nil {
		t.Fatal(err)
	}

	second, err := r.svc.PushBatch(ctx, "pusher", twoItems(t, true), key)
	if err != nil || !second.Unavailable || second.Accepted != 0 || second.Items[0].UcsID != "" ||
		!errors.Is(second.Items[0].Err, notification.ErrNotTaken) || second.Items[1].Err == nil {
		t.Fatalf("retry on a front end refusing item 1: %+v, %v; want nothing accepted, item 0 not taken, item 1 refused", second, err)
	}
	if n := r.msgs(t); n != 0 {
		t.Fatalf("the queue holds %d pushes after a retry that accepted none", n)
	}

	third, err := r.svc.PushBatch(ctx, "pusher", twoItems(t, false), key)
	if err != nil || third.Unavailable || third.Accepted != 2 {
		t.Fatalf("third: %+v, %v; want both accepted", third, err)
	}
	for i, it := range third.Items {
		if _, err := r.svc.Result(ctx, "pusher", it.UcsID); err != nil {
			t.Errorf("item %d answered accepted with ucsId %s, but its lookup says %v (the queue holds %d)", i, it.UcsID, err, r.msgs(t))
		}
	}
}
