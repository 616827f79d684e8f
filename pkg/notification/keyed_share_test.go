package notification_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/queue"
)

// tokenShares are the clients' shares of the key records in token buckets, as the service
// wires them.
type tokenShares struct {
	tb   *natskv.TokenBuckets
	rate natskv.Rate
}

func (s tokenShares) Take(ctx context.Context, client string, n int) (bool, time.Duration, error) {
	return s.tb.TakeN(ctx, "share."+client, n, s.rate)
}

func (s tokenShares) Give(ctx context.Context, client string, n int) error {
	return s.tb.GiveN(ctx, "share."+client, n, s.rate)
}

// TestFullQueueRetriesKeepTheKeyShare: a keyed push that the full queue refuses keeps no record
// (forget), and takes nothing from its client's share of the records either: retried under
// the same key as its Retry-After says while the queue stays full, and then once it has room,
// it is accepted, not refused for a share used up by records never kept.
func TestFullQueueRetriesKeepTheKeyShare(t *testing.T) {
	ctx := context.Background()
	js, st, pub := smallQueue(t)
	records, err := natskv.OpenRecords(ctx, js, "keys", notification.KeyTTL, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	sharesKV, err := natskv.OpenCounters(ctx, js, "shares", notification.KeyTTL, 1)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Now())
	shares := natskv.NewTokenBuckets(sharesKV, natskv.TokenBucketsConfig{Now: clock.Now})
	// Room for about three records of one push (each about 300 bytes), refilled over a day
	// as service.KeyShare does.
	rate := natskv.Rate{PerSecond: 1000.0 / notification.KeyTTL.Seconds(), Burst: 1000}
	svc, err := notification.New(notification.Config{
		Publisher: pub, Waiting: queue.NewWaiting(js, st, "d"),
		Store: embeddedtest.Store(t, nil), Records: records, Now: clock.Now,
		KeyShares: tokenShares{tb: shares, rate: rate},
	})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, js)
	key := notification.Key{Name: "retried-key", Body: []byte(body)}
	sum := sha256.Sum256([]byte("pusher\x00" + key.Name))
	recKey := hex.EncodeToString(sum[:])
	for i := range 6 {
		_, err := svc.Push(ctx, "pusher", request(t, body), key)
		var used *notification.KeyShareUsedError
		if errors.As(err, &used) {
			t.Logf("try %d while the queue is full: %v", i, err)
			break
		}
		if !errors.Is(err, notification.ErrQueueFull) {
			t.Fatalf("try %d while the queue is full: %v, want the queue full", i, err)
		}
		if _, _, err := records.Get(ctx, recKey); !errors.Is(err, natskv.ErrNoRecord) {
			t.Fatalf("try %d: the refused request's record: %v, want none (forgotten)", i, err)
		}
		clock.Advance(30 * time.Second) // Retry-After: 30
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := svc.Push(ctx, "pusher", request(t, body), key)
	if err != nil {
		t.Fatalf("the same keyed push once the queue has room, the client holding no record: %v; "+
			"want it accepted (the refused tries kept no record, so they must not use the share)", err)
	}
	t.Logf("accepted %s", id)
}
