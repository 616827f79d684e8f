package notification_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// meetingRecords are real key records whose first two reads wait for each other: two requests
// with the same Idempotency-Key that arrive together (a client's retry after a time-out while
// the first is still under way, or two front ends behind a load balancer) both find no record.
type meetingRecords struct {
	*natskv.Records
	reads atomic.Int32
	met   sync.WaitGroup
}

func (m *meetingRecords) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	raw, rev, err := m.Records.Get(ctx, key)
	if m.reads.Add(1) <= 2 {
		m.met.Done()
		done := make(chan struct{})
		go func() { m.met.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	return raw, rev, err
}

// TestConcurrentKeyedBatchCountsRejectedOnce: ucs_push_rejected_total counts "pushes
// refused, each once" (deployments/README.md). Two requests of the same keyed batch (one good
// item, one refused) arrive together: one takes the key; the other is refused whole with
// ErrKeyInUse (409, "still under way"), or answered from the record when the first finished
// meanwhile; a retry is answered from the record. The refused item is counted once, by the
// request that took the key, as for a plain sequential retry (TestBatchCountsRejectedOnce).
func TestConcurrentKeyedBatchCountsRejectedOnce(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	qc := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(ctx, js, qc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := natskv.OpenRecords(ctx, js, "keys", notification.KeyTTL, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	mr := &meetingRecords{Records: recs}
	mr.met.Add(2)
	var mu sync.Mutex
	rejected, replayed, accepted := 0, 0, 0
	svc, err := notification.New(notification.Config{
		Publisher: pub, Waiting: queue.NewWaiting(js, st, qc.Consumer), Store: embeddedtest.Store(t, nil),
		Records:  mr,
		Accepted: func(n int) { mu.Lock(); accepted += n; mu.Unlock() },
		Replayed: func() { mu.Lock(); replayed++; mu.Unlock() },
		Rejected: func(string) { mu.Lock(); rejected++; mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	_, refused := push.Parse([]byte(`{"userId":"2020000001"}`))
	items := []notification.Item{{Req: request(t, body)}, {Err: refused}}
	key := notification.Key{Name: "together", Body: []byte("the batch's body")}
	var wg sync.WaitGroup
	answers := make([]notification.Batch, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { answers[i], errs[i] = svc.PushBatch(ctx, "pusher", items, key) })
	}
	wg.Wait()
	// One takes the key; the other is refused whole, as a request whose key is still under way
	// (409): nothing of it was accepted or refused for its content, and the client sends it
	// again, answered from the record.
	won := 0
	if errs[0] != nil {
		won = 1
	}
	if errs[won] != nil || answers[won].Accepted != 1 || answers[won].Rejected != 1 {
		t.Fatalf("the request that took the key: %+v, %v", answers[won], errs[won])
	}
	// The other is refused as under way, or, when the first finished meanwhile, answered from
	// the record; either way it must not count the refused item again.
	if lost := errs[1-won]; lost != nil && !errors.Is(lost, notification.ErrKeyInUse) ||
		lost == nil && answers[1-won].Items[0].UcsID != answers[won].Items[0].UcsID {
		t.Fatalf("the other request: %+v, %v; want ErrKeyInUse or the first's answer", answers[1-won], lost)
	}
	again, err := svc.PushBatch(ctx, "pusher", items, key)
	if err != nil || again.Accepted != 1 || again.Rejected != 1 || again.Items[0].UcsID != answers[won].Items[0].UcsID {
		t.Fatalf("the retry: %+v, %v", again, err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("accepted %d, replayed %d, rejected %d", accepted, replayed, rejected)
	if rejected != 1 {
		t.Errorf("ucs_push_rejected_total counted %d for the one refused push of a keyed batch sent twice at once (the second refused as under way or answered from the record, then retried: replays %d); want 1",
			rejected, replayed)
	}
}
