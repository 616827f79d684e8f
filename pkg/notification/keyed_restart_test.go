package notification_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// TestKeyedRetryAfterDeliveryAndRestart: a push sent with an Idempotency-Key whose PubAck came
// too late for its request (the caller gave up) is recorded as not taken, although the stream
// stored it. A worker delivers it, records it sent and acknowledges it: the work queue holds it
// no more. The NATS server restarts (an upgrade), which leaves the stream's dedupe with only
// the message ids of messages it still holds, and the caller retries with the same key within
// its 24 hours. The retry answers the push's ucsId and stores nothing again: the user gets it
// once. Without the restart the stream's dedupe alone suffices.
func TestKeyedRetryAfterDeliveryAndRestart(t *testing.T) {
	t.Run("restart", func(t *testing.T) { keyedRetry(t, true) })
	t.Run("no restart", func(t *testing.T) { keyedRetry(t, false) })
}

func keyedRetry(t *testing.T, restart bool) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nats")
	port := embeddedtest.FreePort(t)
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	proxy := embeddedtest.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", port))

	// The front end's connection goes through the proxy; the test's "worker" connects directly.
	nc, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr())
	r := newRigOn(t, js, true)
	svc, stor, records, qc := r.svc, r.store, r.records, r.qc
	key := notification.Key{Name: "exam-week-notice-7", Body: []byte(body)}

	// The stream stores the push, but its PubAck, and every answer after it, is held until the
	// caller has given up.
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("PUB ucs.push.")) })
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	go func() { <-rctx.Done(); proxy.Release() }()
	_, err = svc.Push(rctx, "pusher", request(t, body), key)
	cancel()
	if !errors.Is(err, notification.ErrQueueUnavailable) {
		t.Fatalf("first request: %v, want ErrQueueUnavailable (the caller was told 503)", err)
	}

	// The stream stored it all the same; a worker delivers it, records it sent and acknowledges
	// it, as workers do.
	events := stor.NewWriter(store.WriterOptions{})
	t.Cleanup(events.Close)
	_, wjs := embeddedtest.JetStreamAt(t, n.URL())
	wst, err := wjs.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the push is stored", func() bool {
		info, err := wst.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	cons, err := queue.EnsureConsumer(ctx, wjs, qc)
	if err != nil {
		t.Fatal(err)
	}
	fetched, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	delivered := 0
	for m := range fetched.Messages() {
		pm, err := push.DecodeMessage(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		r := push.Result{UcsID: pm.UcsID, ClientID: pm.ClientID, UserID: pm.UserID, Type: string(pm.Type),
			State: push.StateSent, Attempts: 1, MsgID: 4242, Accepted: time.UnixMilli(pm.Accepted), Updated: now, Sent: now}
		if err := events.Write(ctx, store.SentRecords(r, "oOpenID", now)...); err != nil {
			t.Fatal(err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		delivered++
	}
	if delivered != 1 {
		t.Fatalf("worker got %d pushes, want 1", delivered)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the delivered push leaves the stream", func() bool {
		info, err := wst.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	// Wait until the first request's answer is recorded in the key's record: not taken.
	sum := sha256.Sum256([]byte("pusher\x00" + key.Name))
	embeddedtest.Eventually(t, 10*time.Second, "the key's record says the push was not taken", func() bool {
		raw, _, err := records.Get(ctx, hex.EncodeToString(sum[:]))
		return err == nil && !strings.Contains(string(raw), `"pending"`) && strings.Contains(string(raw), `"failed":[0]`)
	})
	lastBefore, _ := wst.Info(ctx)

	// NATS restarts (an upgrade); the front end reconnects.
	if restart {
		n.Shutdown()
		n, err = embedded.StartNATS(embedded.NATSOptions{Dir: dir, Port: port})
		if err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.Eventually(t, 20*time.Second, "the front end reconnects", func() bool { return nc.IsConnected() })

	// The caller retries with the same key, as the 503 told it.
	var id string
	embeddedtest.Eventually(t, 20*time.Second, "the retry is answered", func() bool {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		id, err = svc.Push(rctx, "pusher", request(t, body), key)
		return err == nil
	})
	_, wjs2 := embeddedtest.JetStreamAt(t, n.URL())
	wst2, err := wjs2.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	info, err := wst2.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 || info.State.LastSeq != lastBefore.State.LastSeq {
		m, gerr := wst2.GetLastMsgForSubject(ctx, queue.Subject("pusher", id))
		t.Fatalf("the retry with the Idempotency-Key stored push %s again after it was delivered once: stream holds %d (last seq %d, was %d); on its subject: %v %v",
			id, info.State.Msgs, info.State.LastSeq, lastBefore.State.LastSeq, m != nil, gerr)
	}
}
