package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

func msg(id string) push.Message { return msgOf("c", id) }

func msgOf(client, id string) push.Message {
	return push.Message{UcsID: id, ClientID: client, UserID: "u", Type: "JML",
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

func publisher(t *testing.T, js jetstream.JetStream) *queue.Publisher {
	t.Helper()
	p, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func msgs(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestSubjects(t *testing.T) {
	for _, c := range []struct{ client, want string }{
		{"app-1_x", "ucs.push.mp.app-1_x.01J0000000000000000000000A"},
		{"campus.portal", "ucs.push.mp.campus~2Eportal.01J0000000000000000000000A"},
		{"a~b", "ucs.push.mp.a~7Eb.01J0000000000000000000000A"},
		{"", "ucs.push.mp.~.01J0000000000000000000000A"},
	} {
		got := queue.Subject(c.client, "01J0000000000000000000000A")
		if got != c.want {
			t.Errorf("Subject(%q) = %q, want %q", c.client, got, c.want)
		}
		if id := queue.IDOfSubject(got); id != "01J0000000000000000000000A" {
			t.Errorf("IDOfSubject(%q) = %q", got, id)
		}
		if client := queue.ClientOfSubject(got); client != c.client {
			t.Errorf("ClientOfSubject(%q) = %q, want %q", got, client, c.client)
		}
	}
	for _, s := range []string{"ucs.push.mp.c.not-an-id", "other.c.01J0000000000000000000000A", "ucs.push.mp."} {
		if id := queue.IDOfSubject(s); id != "" {
			t.Errorf("IDOfSubject(%q) = %q, want none", s, id)
		}
	}
	for _, s := range []string{"other.c.01J0000000000000000000000A", "ucs.push.mp.", "ucs.push.mp.c", "ucs.push.mp.a~2.x", "ucs.push.mp.a~ZZ.x"} {
		if client := queue.ClientOfSubject(s); client != "" {
			t.Errorf("ClientOfSubject(%q) = %q, want none", s, client)
		}
	}
}

// TestFullStreamRefusesNew: a full stream refuses new pushes with ErrFull and keeps every
// message it already holds.
func TestFullStreamRefusesNew(t *testing.T) {
	js, _, st := newStream(t)
	ctx := context.Background()
	p := publisher(t, js)
	first := push.NewID(time.Now())
	if err := p.Publish(ctx, msg(first), queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	var accepted int
	for i := 0; ; i++ {
		err := p.Publish(ctx, msg(push.NewID(time.Now())), queue.PublishOptions{})
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
	if err != nil || m.Subject != queue.Subject("c", first) {
		t.Fatalf("first message: %v", err)
	}
	// A full stream refuses a batch whole.
	batch := []push.Message{msg(push.NewID(time.Now())), msg(push.NewID(time.Now()))}
	if err := p.PublishBatch(ctx, batch, queue.PublishOptions{}); err == nil {
		t.Fatal("a full stream took a batch")
	}
	if n := msgs(t, st); n != uint64(accepted+1) {
		t.Fatalf("stream holds %d after a refused batch, want %d", n, accepted+1)
	}
}

// TestRepublishIsStoredOnce: a push published again under the same message id (a retried
// Idempotency-Key) is stored once, and so is a batch; without an id, a second copy of a
// waiting push is refused rather than queued twice.
func TestRepublishIsStoredOnce(t *testing.T) {
	js, _, st := newStream(t)
	ctx := context.Background()
	p := publisher(t, js)
	id := push.NewID(time.Now())
	for range 2 {
		if err := p.Publish(ctx, msg(id), queue.PublishOptions{MsgID: "key-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := msgs(t, st); n != 1 {
		t.Fatalf("stored %d times", n)
	}
	if err := p.Publish(ctx, msg(id), queue.PublishOptions{}); err == nil {
		t.Fatal("a second copy of a waiting push was accepted")
	}

	batch := []push.Message{msg(push.NewID(time.Now())), msg(push.NewID(time.Now())), msg(push.NewID(time.Now()))}
	for range 2 {
		if err := p.PublishBatch(ctx, batch, queue.PublishOptions{MsgID: "key-2"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := msgs(t, st); n != 4 {
		t.Fatalf("stream holds %d, want 4: the batch was stored twice", n)
	}
}

// TestBatchIsAtomic: a batch whose one push the stream refuses (its subject already holds a
// push) is stored not at all; a good batch is stored whole.
func TestBatchIsAtomic(t *testing.T) {
	js, _, st := newStream(t)
	ctx := context.Background()
	p := publisher(t, js)
	taken := push.NewID(time.Now())
	if err := p.Publish(ctx, msg(taken), queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := []push.Message{msg(push.NewID(time.Now())), msg(taken), msg(push.NewID(time.Now()))}
	if err := p.PublishBatch(ctx, bad, queue.PublishOptions{}); err == nil {
		t.Fatal("a batch with a refused push was accepted")
	}
	if n := msgs(t, st); n != 1 {
		t.Fatalf("stream holds %d after a refused batch: part of it was stored", n)
	}
	var good []push.Message
	for range 1000 {
		good = append(good, msg(push.NewID(time.Now())))
	}
	if err := p.PublishBatch(ctx, good, queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := msgs(t, st); n != uint64(1+1000) {
		t.Fatalf("stream holds %d, want %d", n, 1+1000)
	}
}

// TestWaiting: a waiting push is read back by its client and ucsId, alone or many at once; a
// push of another client, one a worker took and acknowledged, or one never published, is not
// waiting.
func TestWaiting(t *testing.T) {
	js, cfg, st := newStream(t)
	ctx := context.Background()
	p := publisher(t, js)
	w := queue.NewWaiting(js, st, "d")
	first, second, other := push.NewID(time.Now()), push.NewID(time.Now()), push.NewID(time.Now())
	for _, m := range []push.Message{msgOf("a.b", first), msgOf("a.b", second), msgOf("z", other)} {
		if err := p.Publish(ctx, m, queue.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// No consumer (none made yet, or one removed): a worker may have had it, the store tells.
	if m, err := w.Get(ctx, "a.b", first); err != nil || m.UcsID != first || !m.Reached {
		t.Fatalf("waiting push, no consumer: %+v %v", m, err)
	}
	if _, err := w.Get(ctx, "a.b", other); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("another client's push: %v", err)
	}
	unknown := push.NewID(time.Now())
	got, err := w.GetMany(ctx, "a.b", []string{first, other, unknown, second})
	if err != nil || len(got) != 2 || got[first].UcsID != first || got[second].UcsID != second {
		t.Fatalf("many: %v %v", got, err)
	}
	if m, err := w.Find(ctx, other); err != nil || m.ClientID != "z" {
		t.Fatalf("found by an operator: %+v %v", m, err)
	}
	if _, err := w.Find(ctx, unknown); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("unknown push found: %v", err)
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
	if _, err := w.Get(ctx, "a.b", first); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("finished push: %v", err)
	}
	// A push stored after the consumer was made, and not handed out yet, has not reached a
	// worker; one stored before it may have reached an earlier consumer of the name.
	third := push.NewID(time.Now())
	if err := p.Publish(ctx, msgOf("a.b", third), queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the push behind the handed out ones is not reached", func() bool {
		m, err := w.Get(ctx, "a.b", third)
		return err == nil && !m.Reached
	})
	if m, err := w.Get(ctx, "a.b", second); err != nil || !m.Reached {
		t.Fatalf("a push stored before the consumer was made: %+v %v", m, err)
	}
	// Once the consumer hands it out, it is.
	more, err := cons.Fetch(3) // second, other's and third
	if err != nil {
		t.Fatal(err)
	}
	for range more.Messages() {
	}
	embeddedtest.Eventually(t, 5*time.Second, "the push handed out is reached", func() bool {
		m, err := w.Get(ctx, "a.b", third)
		return err == nil && m.Reached
	})
}

// TestMigrate: a stream written in the earlier layout (single pushes on ucs.push.mp.<ucsId>,
// a batch's pushes in a chunk on ucs.push.batch.<block>, and the chunks' own consumer) is
// converted when the service starts on it: every push is on its own subject, marked as moved,
// nothing is lost, nothing is left on the old subjects, and a second run changes nothing.
func TestMigrate(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 24, MaxAge: time.Hour, AckWait: 5 * time.Second}
	old, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "S", Subjects: []string{"ucs.push.mp.>", "ucs.push.batch.>"}, Retention: jetstream.WorkQueuePolicy,
		AllowDirect: true, MaxMsgsPerSubject: 1, DiscardNewPerSubject: true, Discard: jetstream.DiscardNew,
		Duplicates: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "d_expand", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: "ucs.push.batch.>"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // ucsId → client
	var singles []string
	for range 3 {
		id := push.NewID(time.Now())
		m := msgOf("portal", id)
		b, _ := m.Encode()
		if _, err := js.Publish(ctx, "ucs.push.mp."+id, b); err != nil {
			t.Fatal(err)
		}
		want[id], singles = "portal", append(singles, id)
	}
	for chunk := range 2 {
		var items []json.RawMessage
		for range 50 {
			id := push.NewID(time.Now())
			b, _ := msgOf("exams.office", id).Encode()
			items = append(items, b)
			want[id] = "exams.office"
		}
		body, _ := json.Marshal(items)
		if _, err := js.Publish(ctx, "ucs.push.batch.BLOCK"+string(rune('A'+chunk)), body); err != nil {
			t.Fatal(err)
		}
	}
	// A legacy message that holds no push stays where it is, for a worker to fail.
	if _, err := js.Publish(ctx, "ucs.push.mp.01J0000000000000000000000Z", []byte("\x00not a push")); err != nil {
		t.Fatal(err)
	}

	moved, err := queue.Migrate(ctx, js, c, nil)
	if err != nil || moved != len(want) {
		t.Fatalf("moved %d of %d: %v", moved, len(want), err)
	}
	st, err := queue.EnsureStream(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	if n := msgs(t, old); n != uint64(len(want)+1) {
		t.Fatalf("stream holds %d, want %d", n, len(want)+1)
	}
	w := queue.NewWaiting(js, st, "d")
	for id, client := range want {
		raw, err := st.GetLastMsgForSubject(ctx, queue.Subject(client, id))
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if raw.Header.Get(queue.HeaderMigrated) == "" {
			t.Fatalf("%s is not marked as moved", id)
		}
		if m, err := w.Get(ctx, client, id); err != nil || m.UcsID != id {
			t.Fatalf("%s: %+v %v", id, m, err)
		}
	}
	for _, id := range singles {
		if _, err := st.GetLastMsgForSubject(ctx, "ucs.push.mp."+id); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("%s left on its old subject: %v", id, err)
		}
	}
	if _, err := js.Consumer(ctx, "S", "d_expand"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the chunks' consumer is still there: %v", err)
	}
	if again, err := queue.Migrate(ctx, js, c, nil); err != nil || again != 0 {
		t.Fatalf("second run moved %d: %v", again, err)
	}
	// The workers' consumer gets every push, the one that is none included.
	cons, err := queue.EnsureConsumer(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	batch, err := cons.Fetch(len(want)+1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		got++
		_ = m.Ack()
	}
	if got != len(want)+1 {
		t.Fatalf("workers got %d messages, want %d", got, len(want)+1)
	}
}

// TestLostPubAcksFreeTheirPlace: a push whose PubAck never comes is refused after the ack
// wait, and costs nothing more. A connection holds at most 4,000 publishes waiting for their
// PubAck; once more pushes than that lost theirs, a push to a stream that answers is still
// stored.
func TestLostPubAcksFreeTheirPlace(t *testing.T) {
	nc, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	// No stream yet: a subscriber takes the pushes and answers none of them.
	sub, err := nc.SubscribeSync(queue.SubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	const wait = 200 * time.Millisecond
	p, err := queue.NewPublisherWaiting(js, wait)
	if err != nil {
		t.Fatal(err)
	}
	const lost = 4100
	errs := make(chan error, lost)
	var wg sync.WaitGroup
	for range lost {
		wg.Go(func() { errs <- p.Publish(ctx, msg(push.NewID(time.Now())), queue.PublishOptions{}) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil {
			t.Fatal("a push without a PubAck was taken as stored")
		}
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, msg(push.NewID(time.Now())), queue.PublishOptions{}); err != nil {
		t.Fatalf("a push after %d lost PubAcks: %v", lost, err)
	}
	if n := msgs(t, st); n != 1 {
		t.Errorf("the stream holds %d messages, want 1", n)
	}
}

// TestFromLeader: a push is read back from the leader of a stream of three replicas, and one
// never published is not there; a stream of one replica is its own leader, and is not asked
// again.
func TestFromLeader(t *testing.T) {
	ctx := context.Background()
	_, js := embeddedtest.JetStreamAt(t, embeddedtest.StartCluster(t, "leader").URL())
	cfg := queue.Config{Stream: "S", Consumer: "d", Replicas: 3, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := push.NewID(time.Now())
	if err := publisher(t, js).Publish(ctx, msgOf("c", id), queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	w := queue.NewWaiting(js, st, cfg.Consumer)
	if got, err := w.FromLeader(ctx, "c", id); err != nil || got.UcsID != id {
		t.Fatalf("from the leader: %+v %v", got, err)
	}
	for _, c := range []struct{ client, id string }{{"c", push.NewID(time.Now())}, {"other", id}} {
		if _, err := w.FromLeader(ctx, c.client, c.id); !errors.Is(err, queue.ErrNotWaiting) {
			t.Fatalf("%s of %s from the leader: %v, want ErrNotWaiting", c.id, c.client, err)
		}
	}

	js1, cfg1, st1 := newStream(t)
	id1 := push.NewID(time.Now())
	if err := publisher(t, js1).Publish(ctx, msgOf("c", id1), queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.NewWaiting(js1, st1, cfg1.Consumer).FromLeader(ctx, "c", id1); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("one replica: %v, want ErrNotWaiting without asking", err)
	}
}

// TestPublishWithoutItsAckIsConfirmed: the stream stores a push (or a batch) but its
// acknowledgement does not come within the ack wait (a slow leader, a lost answer). The
// publisher asks the stream whether it holds it before calling the push refused: stored, it
// is answered as stored (the caller, told it was refused, would send it again and its user
// would get it twice); when the stream cannot be asked either, the error is ErrUnconfirmed,
// which says the push may be stored.
func TestPublishWithoutItsAckIsConfirmed(t *testing.T) {
	url := embeddedtest.NATS(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimPrefix(url, "nats://"))
	_, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr())
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(context.Background(), js, c)
	if err != nil {
		t.Fatal(err)
	}
	p, err := queue.NewPublisherWaiting(js, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stored := func(m push.Message) bool {
		_, err := st.GetLastMsgForSubject(ctx, queue.Subject(m.ClientID, m.UcsID))
		return err == nil
	}
	batch := func() []push.Message {
		return []push.Message{msg(push.NewID(time.Now())), msg(push.NewID(time.Now())), msg(push.NewID(time.Now()))}
	}
	for _, tc := range []struct {
		name    string
		trigger string // what the held answers follow
		publish func(ms []push.Message) error
		ms      []push.Message
	}{
		{"a push", "PUB " + queue.SubjectPrefix, func(ms []push.Message) error { return p.Publish(ctx, ms[0], queue.PublishOptions{}) },
			[]push.Message{msg(push.NewID(time.Now()))}},
		{"a batch", "Nats-Batch-Commit", func(ms []push.Message) error { return p.PublishBatch(ctx, ms, queue.PublishOptions{}) }, batch()},
	} {
		t.Run(tc.name+", its answer lost, read back", func(t *testing.T) {
			proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte(tc.trigger)) })
			defer queue.BeforeConfirm(proxy.Release)()
			if err := tc.publish(tc.ms); err != nil {
				t.Fatalf("stored, its answer late: %v, want it taken as stored", err)
			}
			for _, m := range tc.ms {
				if !stored(m) {
					t.Fatalf("%s answered stored and not in the stream", m.UcsID)
				}
			}
		})
	}
	for _, tc := range []struct {
		name    string
		trigger string
		publish func(ms []push.Message) error
		ms      []push.Message
	}{
		{"a push", "PUB " + queue.SubjectPrefix, func(ms []push.Message) error { return p.Publish(ctx, ms[0], queue.PublishOptions{}) },
			[]push.Message{msg(push.NewID(time.Now()))}},
		{"a batch", "Nats-Batch-Commit", func(ms []push.Message) error { return p.PublishBatch(ctx, ms, queue.PublishOptions{}) }, batch()},
	} {
		t.Run(tc.name+", the stream not answering", func(t *testing.T) {
			proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte(tc.trigger)) })
			err := tc.publish(tc.ms)
			proxy.Release()
			if !errors.Is(err, queue.ErrUnconfirmed) {
				t.Fatalf("stored, no answer to the publish nor to the read back: %v, want ErrUnconfirmed", err)
			}
			embeddedtest.Eventually(t, 5*time.Second, "the pushes stored", func() bool { return stored(tc.ms[len(tc.ms)-1]) })
		})
	}
}

// TestLostAcknowledgementsAreReadBackAFewAtATime: when many publishes lose their
// acknowledgement at once (a stream leader too slow to answer), at most MaxConfirms of them ask
// the stream whether it stored their push; the others are answered ErrUnconfirmed at once
// rather than adding their questions to a stream already slow.
func TestLostAcknowledgementsAreReadBackAFewAtATime(t *testing.T) {
	url := embeddedtest.NATS(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimPrefix(url, "nats://"))
	_, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr())
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	if _, err := queue.EnsureStream(context.Background(), js, c); err != nil {
		t.Fatal(err)
	}
	p, err := queue.NewPublisherWaiting(js, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}, queue.MaxConfirms+1), make(chan struct{})
	defer queue.BeforeConfirm(func() { entered <- struct{}{}; <-release })()
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("PUB "+queue.SubjectPrefix)) })
	errs := make(chan error, queue.MaxConfirms+1)
	for range queue.MaxConfirms + 1 {
		m := msg(push.NewID(time.Now()))
		go func() { errs <- p.Publish(context.Background(), m, queue.PublishOptions{}) }()
	}
	for i := range queue.MaxConfirms {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d read-backs began, want %d", i, queue.MaxConfirms)
		}
	}
	select {
	case err := <-errs:
		if !errors.Is(err, queue.ErrUnconfirmed) {
			t.Errorf("a publish past the read-backs' bound: %v, want ErrUnconfirmed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a publish past the read-backs' bound waited for a read-back of its own")
	}
	proxy.Release()
	close(release)
	for range queue.MaxConfirms {
		if err := <-errs; err != nil {
			t.Errorf("a push read back: %v, want it taken as stored", err)
		}
	}
	if n := len(entered); n != 0 {
		t.Errorf("%d read-backs past the bound of %d", n, queue.MaxConfirms)
	}
}

// TestFindWithoutAnAnswerIsNoAnswer: a push waits in the stream; while the stream does not
// answer (a partition, a leader election), Find ends with an error, not ErrNotWaiting: the
// operations page then says the queue did not answer, rather than that the push is in no queue.
func TestFindWithoutAnAnswerIsNoAnswer(t *testing.T) {
	url := embeddedtest.NATS(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimPrefix(url, "nats://"))
	_, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr())
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	ctx := context.Background()
	st, err := queue.EnsureStream(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	p, err := queue.NewPublisherWaiting(js, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m := msg(push.NewID(time.Now()))
	if err := p.Publish(ctx, m, queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	w := queue.NewWaiting(js, st, c.Consumer)
	if _, err := w.Find(ctx, m.UcsID); err != nil {
		t.Fatalf("Find of a waiting push: %v", err)
	}
	if _, err := w.Find(ctx, push.NewID(time.Now())); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("Find of a push not in the stream: %v, want ErrNotWaiting", err)
	}
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("DIRECT.GET")) })
	defer proxy.Release()
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := w.Find(fctx, m.UcsID); err == nil || errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("Find while the stream does not answer: %v, want an error other than ErrNotWaiting", err)
	}
}
