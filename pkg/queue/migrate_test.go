package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// legacyStream makes the push stream as the earlier version did, bounded to maxBytes (0: no
// bound), with its 10-minute dedupe window, and returns it with the configuration the present
// version starts with.
func legacyStream(t *testing.T, js jetstream.JetStream, maxBytes int64) (jetstream.Stream, queue.Config) {
	t.Helper()
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "S", Subjects: []string{"ucs.push.mp.>", "ucs.push.batch.>"}, Retention: jetstream.WorkQueuePolicy,
		AllowDirect: true, MaxMsgsPerSubject: 1, DiscardNewPerSubject: true, Discard: jetstream.DiscardNew,
		Duplicates: 10 * time.Minute, MaxBytes: maxBytes,
	})
	if err != nil {
		t.Fatal(err)
	}
	bound := maxBytes
	if bound <= 0 {
		bound = 1 << 24
	}
	return st, queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: bound, MaxAge: time.Hour, AckWait: 5 * time.Second}
}

// publishChunk publishes ms as one legacy chunk on ucs.push.batch.<block>, with extra items
// (raw JSON) after them.
func publishChunk(t *testing.T, js jetstream.JetStream, block string, ms []push.Message, extra ...string) {
	t.Helper()
	var items []json.RawMessage
	for _, m := range ms {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, b)
	}
	for _, e := range extra {
		items = append(items, json.RawMessage(e))
	}
	body, _ := json.Marshal(items)
	if _, err := js.Publish(context.Background(), "ucs.push.batch."+block, body); err != nil {
		t.Fatal(err)
	}
}

// newPushes returns n pushes of client.
func newPushes(client string, n int) []push.Message {
	var ms []push.Message
	for range n {
		ms = append(ms, msgOf(client, push.NewID(time.Now())))
	}
	return ms
}

// requireMoved fails unless every push of ms waits on its own subject, marked as moved.
func requireMoved(t *testing.T, st jetstream.Stream, ms []push.Message) {
	t.Helper()
	for _, m := range ms {
		raw, err := st.GetLastMsgForSubject(context.Background(), queue.Subject(m.ClientID, m.UcsID))
		if err != nil {
			t.Fatalf("push %s is not on its subject: %v", m.UcsID, err)
		}
		got, err := push.DecodeMessage(raw.Data)
		if err != nil || got.UcsID != m.UcsID || raw.Header.Get(queue.HeaderMigrated) == "" {
			t.Fatalf("push %s: %+v %v, header %v", m.UcsID, got, err, raw.Header)
		}
	}
}

// legacyLeft is how many messages wait on the legacy subjects.
func legacyLeft(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	var n uint64
	for _, filter := range []string{"ucs.push.mp.*", "ucs.push.batch.>"} {
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range info.State.Subjects {
			n += c
		}
	}
	return n
}

// TestMigrateKeepsDedupedPushes: the earlier version published a push sent under an
// Idempotency-Key with its ucsId as message id, which the legacy stream still remembers while
// Migrate runs. The copy must be stored all the same (not taken for a duplicate, with the
// original deleted), and a legacy message met again within the window (a run that stopped
// before deleting it) is moved without a second copy.
func TestMigrateKeepsDedupedPushes(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	st, c := legacyStream(t, js, 0)
	single := msgOf("portal", push.NewID(time.Now()))
	b, _ := single.Encode()
	if _, err := js.Publish(ctx, "ucs.push.mp."+single.UcsID, b, jetstream.WithMsgID(single.UcsID)); err != nil {
		t.Fatal(err)
	}

	moved, err := queue.Migrate(ctx, js, c, nil)
	if err != nil || moved != 1 {
		t.Fatalf("moved %d: %v", moved, err)
	}
	requireMoved(t, st, []push.Message{single})
	if n := msgs(t, st); n != 1 {
		t.Fatalf("stream holds %d messages, want the one copy", n)
	}

	// The legacy message again, as a run that stopped before deleting it leaves it (the
	// legacy subject, which the migration took away, given back for the publish).
	if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{
		Name: "S", Subjects: []string{"ucs.push.mp.>"}, Retention: jetstream.WorkQueuePolicy,
		AllowDirect: true, MaxMsgsPerSubject: 1, DiscardNewPerSubject: true, Discard: jetstream.DiscardNew,
		Duplicates: 10 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "ucs.push.mp."+single.UcsID, b); err != nil {
		t.Fatal(err)
	}
	if moved, err := queue.Migrate(ctx, js, c, nil); err != nil || moved != 1 {
		t.Fatalf("second run moved %d: %v", moved, err)
	}
	requireMoved(t, st, []push.Message{single})
	if n := msgs(t, st); n != 1 || legacyLeft(t, st) != 0 {
		t.Fatalf("stream holds %d messages, %d legacy, want the one copy", n, legacyLeft(t, st))
	}
}

// TestMigrateFullStream: a legacy stream full (DiscardNew, its byte bound reached, as after an
// outage) is migrated all the same, and EnsureStream, which runs next, puts the configured
// bound back: the converted stream, still full, refuses a new push. A bound a killed run left
// lifted is put back the same way.
func TestMigrateFullStream(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	st, c := legacyStream(t, js, 1<<16)
	chunk := newPushes("exams.office", 20)
	publishChunk(t, js, "BLOCKA", chunk)
	var singles []push.Message
	for {
		m := msgOf("portal", push.NewID(time.Now()))
		b, _ := m.Encode()
		if _, err := js.Publish(ctx, "ucs.push.mp."+m.UcsID, b); err != nil {
			break // full
		}
		singles = append(singles, m)
	}
	if len(singles) < 10 {
		t.Fatalf("the legacy stream filled with %d singles", len(singles))
	}

	moved, err := queue.Migrate(ctx, js, c, nil)
	if err != nil || moved != len(chunk)+len(singles) {
		t.Fatalf("moved %d of %d: %v", moved, len(chunk)+len(singles), err)
	}
	requireMoved(t, st, append(chunk, singles...))
	if n := legacyLeft(t, st); n != 0 {
		t.Fatalf("%d legacy messages left", n)
	}
	st, err = queue.EnsureStream(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != c.MaxBytes {
		t.Fatalf("the stream's byte bound is %d after EnsureStream, want %d", got, c.MaxBytes)
	}
	if err := publisher(t, js).Publish(ctx, msg(push.NewID(time.Now())), queue.PublishOptions{}); !errors.Is(err, queue.ErrFull) {
		t.Fatalf("a full converted stream took a new push: %v", err)
	}

	// A run killed after lifting the bound leaves it lifted: the next start puts it back.
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = -1
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Migrate(ctx, js, c, nil); err != nil {
		t.Fatal(err)
	}
	if st, err = queue.EnsureStream(ctx, js, c); err != nil || st.CachedInfo().Config.MaxBytes != c.MaxBytes {
		t.Fatalf("the bound left lifted is not put back: %v", err)
	}
}

// TestMigrateAfterPartialRun: a run that copied a chunk's first push and stopped before
// deleting the chunk, met again after the dedupe window forgot the copy's id (the copy here
// has none): the copy still waiting on its subject refuses a second one, and the push counts
// as moved. The rest of the chunk is moved, the chunk deleted, and the stream holds each push
// once.
func TestMigrateAfterPartialRun(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	st, c := legacyStream(t, js, 0)
	chunk := newPushes("exams.office", 3)
	publishChunk(t, js, "BLOCKA", chunk)
	b, _ := chunk[0].Encode()
	if _, err := js.Publish(ctx, queue.Subject(chunk[0].ClientID, chunk[0].UcsID), b); err != nil {
		t.Fatal(err)
	}

	moved, err := queue.Migrate(ctx, js, c, nil)
	if err != nil || moved != len(chunk) {
		t.Fatalf("moved %d of %d: %v", moved, len(chunk), err)
	}
	requireMoved(t, st, chunk[1:])
	if n := msgs(t, st); n != uint64(len(chunk)) || legacyLeft(t, st) != 0 {
		t.Fatalf("stream holds %d messages, %d legacy, want %d copies", n, legacyLeft(t, st), len(chunk))
	}
}

// TestMigrateKeepsPushWhenSubjectHoldsAnother: when a push's subject refuses its copy and holds
// something that is not that push, the legacy message stays, Migrate fails, and the legacy
// stream keeps its byte bound.
func TestMigrateKeepsPushWhenSubjectHoldsAnother(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	st, c := legacyStream(t, js, 1<<20)
	m := msgOf("portal", push.NewID(time.Now()))
	b, _ := m.Encode()
	if _, err := js.Publish(ctx, "ucs.push.mp."+m.UcsID, b); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, queue.Subject(m.ClientID, m.UcsID), []byte("\x00not a push")); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Migrate(ctx, js, c, nil); err == nil {
		t.Fatal("Migrate took another message for the push")
	}
	if _, err := st.GetLastMsgForSubject(ctx, "ucs.push.mp."+m.UcsID); err != nil {
		t.Fatalf("the legacy message is gone: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.Config.MaxBytes != 1<<20 {
		t.Fatalf("the legacy stream's bound after a failed migration: %v", err)
	}
}

// TestMigrateChunkWithUndecodableItem: a chunk with an item that holds no push has its pushes
// moved, its undecodable item copied to the dead letters (as a worker does with a message it
// cannot decode), and goes; so does a chunk that is no JSON array.
func TestMigrateChunkWithUndecodableItem(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	st, c := legacyStream(t, js, 0)
	chunk := newPushes("exams.office", 3)
	publishChunk(t, js, "BLOCKA", chunk, `{"ucsId":"nonsense"}`)
	if _, err := js.Publish(ctx, "ucs.push.batch.BLOCKB", []byte("\x00not a chunk")); err != nil {
		t.Fatal(err)
	}

	moved, err := queue.Migrate(ctx, js, c, nil)
	if err != nil || moved != len(chunk) {
		t.Fatalf("moved %d of %d: %v", moved, len(chunk), err)
	}
	requireMoved(t, st, chunk)
	if n := legacyLeft(t, st); n != 0 {
		t.Fatalf("%d legacy messages left", n)
	}
	dlq, err := js.Stream(ctx, queue.DeadLetterStream("S"))
	if err != nil {
		t.Fatal(err)
	}
	for subject, data := range map[string]string{
		queue.DeadLetterPrefix + "batch.BLOCKA.3": `{"ucsId":"nonsense"}`,
		queue.DeadLetterPrefix + "batch.BLOCKB":   "\x00not a chunk",
	} {
		dead, err := dlq.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		if string(dead.Data) != data || dead.Header.Get(queue.HeaderReason) == "" {
			t.Fatalf("%s: %q, reason %q", subject, dead.Data, dead.Header.Get(queue.HeaderReason))
		}
	}
}

// TestEarlierFrontEndRefusedAfterMigration: once a new front end has converted the stream, a
// front end of the earlier layout still running during the upgrade cannot store a push: its
// single (ucs.push.mp.<ucsId>) and its chunk are refused, so it answers 503 rather than a
// ucsId that no lookup of the new layout would find while the push waits.
func TestEarlierFrontEndRefusedAfterMigration(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	_, c := legacyStream(t, js, 0)
	if _, err := queue.Migrate(ctx, js, c, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.EnsureStream(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	m := msgOf("portal", push.NewID(time.Now()))
	b, _ := m.Encode()
	for _, subject := range []string{"ucs.push.mp." + m.UcsID, "ucs.push.batch.1"} {
		if _, err := js.Publish(ctx, subject, b); err == nil {
			t.Errorf("an earlier front end's publish on %s was stored", subject)
		}
	}
	if _, err := js.Publish(ctx, queue.Subject(m.ClientID, m.UcsID), b); err != nil {
		t.Fatalf("a push on its own subject: %v", err)
	}
}

// TestKeepStreamUndoesAnEarlierStart: during an upgrade a program of the earlier version
// starts (the autoscaler adds a worker) and configures the stream as that version did: its
// subjects, no atomic batches, a 10-minute dedupe window, an age limit. An earlier front end
// publishes a chunk meanwhile. KeepStream configures the stream again and moves the chunk's
// pushes, and batches are stored again.
func TestKeepStreamUndoesAnEarlierStart(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 24, MaxAge: time.Hour, AckWait: 5 * time.Second}
	if _, err := queue.EnsureStream(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	// The earlier version's EnsureStream, at its start.
	if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{
		Name: "S", Subjects: []string{"ucs.push.mp.>", "ucs.push.batch.>"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Replicas: 1, MaxBytes: 1 << 24, MaxAge: 168 * time.Hour, Discard: jetstream.DiscardNew,
		AllowDirect: true, MaxMsgsPerSubject: 1, DiscardNewPerSubject: true, Duplicates: 10 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	chunk := newPushes("portal", 2)
	publishChunk(t, js, "7", chunk)
	p, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.PublishBatch(ctx, newPushes("portal", 2), queue.PublishOptions{}); err == nil {
		t.Fatal("a batch was stored in the earlier version's configuration, which has no atomic batches")
	}

	kctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { queue.KeepStream(kctx, js, c, 20*time.Millisecond, nil); close(done) }()
	defer func() { cancel(); <-done }()
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the stream configured again", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.Config.AllowAtomicPublish && info.Config.MaxAge == 0 &&
			info.Config.Duplicates == time.Hour && len(info.Config.Subjects) == 1 && info.Config.Subjects[0] == "ucs.push.mp.*.*"
	})
	requireMoved(t, st, chunk)
	if n := legacyLeft(t, st); n != 0 {
		t.Fatalf("%d messages left on the earlier subjects", n)
	}
	if err := p.PublishBatch(ctx, newPushes("portal", 2), queue.PublishOptions{}); err != nil {
		t.Fatalf("a batch once the stream is configured again: %v", err)
	}
}

// TestKeepStreamMakesAGoneStreamAgain: the push stream is deleted (an operator's mistake, or
// NATS restarted without its data): every push would be refused until a restart. KeepStream
// makes it again, as configured, and pushes are stored again.
func TestKeepStreamMakesAGoneStreamAgain(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 24, MaxAge: time.Hour, AckWait: 5 * time.Second}
	if _, err := queue.EnsureStream(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	p, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "S"); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, newPushes("portal", 1)[0], queue.PublishOptions{}); err == nil {
		t.Fatal("a push was stored with the stream gone")
	}
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { queue.KeepStream(kctx, js, c, 20*time.Millisecond, nil); close(done) }()
	defer func() { cancel(); <-done }()
	embeddedtest.Eventually(t, 10*time.Second, "the stream made again, as configured", func() bool {
		st, err := js.Stream(ctx, "S")
		return err == nil && st.CachedInfo().Config.AllowAtomicPublish && st.CachedInfo().Config.Retention == jetstream.WorkQueuePolicy
	})
	if err := p.Publish(ctx, newPushes("portal", 1)[0], queue.PublishOptions{}); err != nil {
		t.Fatalf("a push once the stream is made again: %v", err)
	}
}

// TestDeadLetterStreamMadeAgain: the dead-letter stream is lost (NATS restarted without its
// data). A copy would fail until the worker restarted, and every push that spent its attempts
// would be handed back without end; the copy makes the stream again and is kept.
func TestDeadLetterStreamMadeAgain(t *testing.T) {
	js, c, _ := newStream(t)
	ctx := context.Background()
	dl, err := queue.EnsureDeadLetters(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	p := publisher(t, js)
	if err := p.Publish(ctx, newPushes("portal", 1)[0], queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	cons, err := queue.EnsureConsumer(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, queue.DeadLetterStream(c.Stream)); err != nil {
		t.Fatal(err)
	}
	if err := dl.Copy(ctx, m, "gave up", 5); err != nil {
		t.Fatalf("a dead letter after its stream was lost: %v", err)
	}
	st, err := js.Stream(ctx, queue.DeadLetterStream(c.Stream))
	if err != nil {
		t.Fatal(err)
	}
	if n := msgs(t, st); n != 1 {
		t.Fatalf("the dead-letter stream made again holds %d messages, want 1", n)
	}
	if got := st.CachedInfo().Config.MaxAge; got != queue.DeadLetterMaxAge {
		t.Fatalf("made again with max age %v, want %v", got, queue.DeadLetterMaxAge)
	}
}

// TestPlatformEventKeptAfterItsStreamWasLost: the stream of platform events is lost (NATS
// restarted without its data). The callback would answer the platform 503 until the consumer
// was made again, and the platform gives up on an event after a few repeats; keeping an event
// makes the stream again at once.
func TestPlatformEventKeptAfterItsStreamWasLost(t *testing.T) {
	js, c, _ := newStream(t)
	ctx := context.Background()
	events, err := queue.OpenPlatformEvents(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, queue.PlatformEventStream(c.Stream)); err != nil {
		t.Fatal(err)
	}
	if err := events.Keep(ctx, "1001", "receipt-1001", []byte("event")); err != nil {
		t.Fatalf("an event kept after its stream was lost: %v", err)
	}
	st, err := js.Stream(ctx, queue.PlatformEventStream(c.Stream))
	if err != nil {
		t.Fatal(err)
	}
	if n := msgs(t, st); n != 1 {
		t.Fatalf("the stream made again holds %d events, want 1", n)
	}
	if got := st.CachedInfo().Config.Retention; got != jetstream.WorkQueuePolicy {
		t.Fatalf("made again with retention %v", got)
	}
}

// TestMigrateWithoutAnAnswerIsNoEnd: a page of legacy messages whose read gets no answer in time
// (the stream's leader slow or away) is not the end of them: Migrate fails, and says so,
// rather than report the stream converted with its pushes left on the legacy subjects.
func TestMigrateWithoutAnAnswerIsNoEnd(t *testing.T) {
	url := embeddedtest.NATS(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimPrefix(url, "nats://"))
	_, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr())
	st, c := legacyStream(t, js, 0)
	publishChunk(t, js, "BLOCKA", newPushes("exams.office", 3))
	// The read's own wait (the connection's request time-out, 2 s) ends first; the stream
	// answers again after it.
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("DIRECT.GET")) })
	release := time.AfterFunc(3*time.Second, proxy.Release)
	defer release.Stop()
	_, err := queue.Migrate(context.Background(), js, c, nil)
	if err == nil {
		t.Fatalf("Migrate without an answer to its read: nil error, %d legacy messages left", legacyLeft(t, st))
	}
}
