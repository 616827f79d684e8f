package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

func msg(id string) push.Message {
	return push.Message{UcsID: id, ClientID: "c", UserID: "u", Type: "JML",
		Data: map[string]string{"class": "课程", "info": strings.Repeat("作", 20)}, Accepted: 1}
}

// newStream starts a NATS server and makes a 1 MiB stream on it, with its consumer named d.
func newStream(t *testing.T) (jetstream.JetStream, queue.Config, jetstream.Stream) {
	t.Helper()
	_, js := embeddedtest.JetStream(t)
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(context.Background(), js, c)
	if err != nil {
		t.Fatal(err)
	}
	return js, c, st
}

// TestFullStreamRefusesNew: a full stream refuses new pushes with ErrFull and keeps every
// message it already holds.
func TestFullStreamRefusesNew(t *testing.T) {
	js, _, st := newStream(t)
	ctx := context.Background()
	p := queue.NewPublisher(js)
	first := push.NewID(time.Now())
	if err := p.Publish(ctx, msg(first)); err != nil {
		t.Fatal(err)
	}
	var accepted int
	for i := 0; ; i++ {
		err := p.Publish(ctx, msg(push.NewID(time.Now())))
		if errors.Is(err, queue.ErrFull) {
			break
		}
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		accepted++
		if i > 100_000 {
			t.Fatal("a 1 MiB stream never filled up")
		}
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(accepted+1) || info.State.FirstSeq != 1 {
		t.Fatalf("stream holds %d from seq %d, accepted %d: messages were dropped", info.State.Msgs, info.State.FirstSeq, accepted+1)
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil || m.Subject != queue.Subject(first) {
		t.Fatalf("first message: %v", err)
	}
}

// TestRepublishIsStoredOnce: a push's subject is its ucsId and holds one message, so a publish
// repeated under the same ucsId is refused rather than queued twice.
func TestRepublishIsStoredOnce(t *testing.T) {
	js, _, st := newStream(t)
	ctx := context.Background()
	p := queue.NewPublisher(js)
	id := push.NewID(time.Now())
	if err := p.Publish(ctx, msg(id)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Publish(ctx, msg(id)); err == nil {
			t.Fatal("a repeated ucsId was accepted")
		}
	}
	info, _ := st.Info(ctx)
	if info.State.Msgs != 1 {
		t.Fatalf("stored %d times", info.State.Msgs)
	}
	if got := queue.Subject("TDL"); got != "ucs.push.mp.TDL" {
		t.Fatalf("subject %q", got)
	}
}

// TestWaiting: a waiting push is read back by its ucsId from any replica (a direct get) and
// from the stream's leader; a push a worker took and acknowledged, or one never published, is
// not waiting. A push behind every message the consumer handed out has not been reached.
func TestWaiting(t *testing.T) {
	js, cfg, st := newStream(t)
	ctx := context.Background()
	p := queue.NewPublisher(js)
	w := queue.NewWaiting(js, st, cfg.Consumer)
	first, second := push.NewID(time.Now()), push.NewID(time.Now())
	for _, id := range []string{first, second} {
		if err := p.Publish(ctx, msg(id)); err != nil {
			t.Fatal(err)
		}
	}
	m, reached, err := w.Get(ctx, first)
	if err != nil || m.UcsID != first || reached {
		t.Fatalf("before any worker: %+v reached=%v %v", m, reached, err)
	}
	if m, err := w.FromLeader(ctx, second); err != nil || m.UcsID != second {
		t.Fatalf("from the leader: %+v %v", m, err)
	}
	unknown := push.NewID(time.Now())
	if _, _, err := w.Get(ctx, unknown); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("unknown push: %v", err)
	}
	if _, err := w.FromLeader(ctx, unknown); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("unknown push from the leader: %v", err)
	}

	// A worker takes the first message and finishes it.
	cons, err := queue.EnsureConsumer(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.Eventually(t, 5*time.Second, "the finished push leaves the queue, the other is reached or not as the consumer says", func() bool {
		_, _, err1 := w.Get(ctx, first)
		_, reached, err2 := w.Get(ctx, second)
		return errors.Is(err1, queue.ErrNotWaiting) && err2 == nil && !reached
	})
}
