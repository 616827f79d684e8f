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

// subjects lists the subjects of the messages st holds, with the Ucs-Again header of each.
func subjects(t *testing.T, st jetstream.Stream) map[string]string {
	t.Helper()
	ctx := context.Background()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[m.Subject]; dup {
			t.Fatalf("subject %s holds two messages", m.Subject)
		}
		out[m.Subject] = m.Header.Get(queue.HeaderAgain)
	}
	return out
}

// TestChunks: a run of pushes numbered by one block is stored as one chunk, read back by any of
// its ucsIds while it waits, and expanded into single pushes on their own subjects; a chunk
// expanded again stores no second copy of a push still waiting and marks a copy of one already
// delivered, so that its worker looks the first copy's outcome up.
func TestChunks(t *testing.T) {
	js, cfg, st := newStream(t)
	ctx := context.Background()
	p := queue.NewPublisher(js)
	w := queue.NewWaiting(js, st, cfg.Consumer)
	now := time.Now()
	before := push.NewID(now)
	block := push.NewBlock(now, 5)
	after := push.NewID(now)
	ms := []push.Message{msg(before)}
	for _, id := range block {
		ms = append(ms, msg(id))
	}
	ms = append(ms, msg(after))
	for i, err := range p.PublishBatch(ctx, ms, queue.PublishOptions{}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	want := map[string]string{queue.Subject(before): "", queue.ChunkSubject(block[0]): "", queue.Subject(after): ""}
	if got := subjects(t, st); len(got) != 3 || got[queue.ChunkSubject(block[0])] != "" || !sameKeys(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}

	// While the chunk waits, its pushes are read from it, and none has been reached.
	for _, id := range block {
		m, reached, err := w.Get(ctx, id)
		if err != nil || m.UcsID != id || reached {
			t.Fatalf("push %s in its chunk: %+v reached=%v %v", id, m, reached, err)
		}
		if m, err := w.FromLeader(ctx, id); err != nil || m.UcsID != id {
			t.Fatalf("push %s in its chunk, from the leader: %+v %v", id, m, err)
		}
	}
	beyond := push.BlockID(push.BlockOf(block[0]), 7)
	if _, _, err := w.Get(ctx, beyond); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("an index past the chunk's end: %v", err)
	}
	if _, err := w.FromLeader(ctx, beyond); !errors.Is(err, queue.ErrNotWaiting) {
		t.Fatalf("an index past the chunk's end, from the leader: %v", err)
	}

	// Expanded: each push on its own subject, the chunk gone.
	chunks, err := queue.EnsureExpandConsumer(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ex := queue.NewExpander(js, chunks)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ex.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("expander: %v", err)
		}
	})
	want = map[string]string{queue.Subject(before): "", queue.Subject(after): ""}
	for _, id := range block {
		want[queue.Subject(id)] = ""
	}
	embeddedtest.Eventually(t, 5*time.Second, "the chunk leaves the stream once expanded", func() bool {
		got := subjects(t, st)
		return len(got) == len(want) && sameKeys(got, want)
	})
	for _, id := range block {
		if m, _, err := w.Get(ctx, id); err != nil || m.UcsID != id {
			t.Fatalf("expanded push %s: %+v %v", id, m, err)
		}
	}
	for sub, again := range subjects(t, st) {
		if again != "" {
			t.Errorf("%s is marked as published again on its first expansion", sub)
		}
	}

	// A worker delivers the first push of the block; the same chunk is then published again.
	cons, err := queue.EnsureConsumer(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cons.Fetch(len(want))
	if err != nil {
		t.Fatal(err)
	}
	delivered := false
	for m := range got.Messages() {
		if m.Subject() == queue.Subject(block[0]) {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			delivered = true
		} else if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	if !delivered {
		t.Fatal("the worker's consumer did not hand out the block's first push")
	}
	for i, err := range p.PublishBatch(ctx, ms[1:6], queue.PublishOptions{Again: true}) {
		if err != nil {
			t.Fatalf("again: message %d: %v", i, err)
		}
	}
	embeddedtest.Eventually(t, 5*time.Second, "the chunk expanded again leaves the stream", func() bool {
		got := subjects(t, st)
		return len(got) == len(want) && sameKeys(got, want)
	})
	for sub, again := range subjects(t, st) {
		if (again != "") != (sub == queue.Subject(block[0])) {
			t.Errorf("%s: Ucs-Again %q; only the copy of the delivered push is new, and marked", sub, again)
		}
	}
}

// grow lets st hold maxBytes.
func grow(t *testing.T, js jetstream.JetStream, st jetstream.Stream, maxBytes int64) {
	t.Helper()
	sc := st.CachedInfo().Config
	sc.MaxBytes = maxBytes
	if _, err := js.UpdateStream(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
}

func sameKeys(a, b map[string]string) bool {
	for k := range b {
		if _, ok := a[k]; !ok {
			return false
		}
	}
	return len(a) == len(b)
}

// TestUnreadableChunk: a chunk that cannot be read goes to the dead letters and leaves the
// queue, rather than coming back forever.
func TestUnreadableChunk(t *testing.T) {
	js, cfg, st := newStream(t)
	ctx := context.Background()
	if err := queue.EnsureDeadLetters(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	blk := push.BlockOf(push.NewBlock(time.Now(), 2)[0])
	if _, err := js.Publish(ctx, queue.ChunkPrefix+blk, []byte(`[{"ucsId":`)); err != nil {
		t.Fatal(err)
	}
	chunks, err := queue.EnsureExpandConsumer(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ex := queue.NewExpander(js, chunks)
	ex.DeadLetter = queue.NewDeadLetters(js).Copy
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ex.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	dlq, err := js.Stream(ctx, queue.DeadLetterStream(cfg.Stream))
	if err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the unreadable chunk is dead-lettered and leaves the queue", func() bool {
		di, err1 := dlq.Info(ctx)
		si, err2 := st.Info(ctx)
		return err1 == nil && err2 == nil && di.State.Msgs == 1 && si.State.Msgs == 0
	})
	m, err := dlq.GetLastMsgForSubject(ctx, queue.DeadLetterPrefix+"batch."+blk)
	if err != nil || !strings.HasPrefix(m.Header.Get(queue.HeaderReason), "unreadable chunk") {
		t.Fatalf("dead letter: %+v %v", m, err)
	}
}

// TestChunkTooLargeForOneMessage: a block whose chunk would pass the server's largest message
// is stored as single pushes, each read back by its ucsId.
func TestChunkTooLargeForOneMessage(t *testing.T) {
	js, cfg, st := newStream(t)
	ctx := context.Background()
	grow(t, js, st, 16<<20)
	ids := push.NewBlock(time.Now(), 12)
	var ms []push.Message
	for _, id := range ids {
		m := msg(id)
		m.Data["info"] = strings.Repeat("作", 40_000) // 120 KB: the twelve pass 1 MiB
		ms = append(ms, m)
	}
	for i, err := range queue.NewPublisher(js).PublishBatch(ctx, ms, queue.PublishOptions{}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := subjects(t, st)
	w := queue.NewWaiting(js, st, cfg.Consumer)
	for _, id := range ids {
		if _, ok := got[queue.Subject(id)]; !ok {
			t.Errorf("push %s is not on its own subject: %v", id, got)
		}
		if m, _, err := w.Get(ctx, id); err != nil || m.UcsID != id {
			t.Errorf("push %s: %v", id, err)
		}
	}
	if len(got) != len(ids) {
		t.Errorf("stream holds %d messages, want %d", len(got), len(ids))
	}
}

// BenchmarkExpand: chunks of 160 pushes (a thousand-push batch makes about six) expanded into
// single pushes, the NATS server in the same process; reported per push.
func BenchmarkExpand(b *testing.B) {
	_, js := embeddedtest.JetStream(b)
	ctx := context.Background()
	cfg := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 4 << 30, MaxAge: time.Hour, AckWait: 30 * time.Second}
	if _, err := queue.EnsureStream(ctx, js, cfg); err != nil {
		b.Fatal(err)
	}
	chunks, err := queue.EnsureExpandConsumer(ctx, js, cfg)
	if err != nil {
		b.Fatal(err)
	}
	const per = 160
	p := queue.NewPublisher(js)
	n := (b.N + per - 1) / per
	for range n {
		var ms []push.Message
		for _, id := range push.NewBlock(time.Now(), per) {
			ms = append(ms, msg(id))
		}
		for _, err := range p.PublishBatch(ctx, ms, queue.PublishOptions{}) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	ex := queue.NewExpander(js, chunks)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	b.ResetTimer()
	go func() { _ = ex.Run(runCtx) }()
	for {
		info, err := chunks.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*per), "ns/push")
}

// TestGather: pushes published at once from many goroutines, for two clients, are each stored
// once, under the ucsId Gather answered, most of them together with others, never in a block
// with another client's; each is read back by its ucsId. After Close, Gather refuses.
func TestGather(t *testing.T) {
	js, cfg, st := newStream(t)
	ctx := context.Background()
	grow(t, js, st, 64<<20)
	p := queue.NewPublisher(js)
	const senders, each = 64, 50
	ids := make(chan string, senders*each)
	errs := make(chan error, senders)
	for k := range senders {
		go func() {
			for range each {
				m := msg("")
				m.ClientID = []string{"c", "d"}[k%2]
				m.Accepted = time.Now().UnixMilli()
				id, err := p.Gather(ctx, m)
				if err != nil {
					errs <- err
					return
				}
				ids <- id
			}
			errs <- nil
		}()
	}
	for range senders {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(ids)
	w := queue.NewWaiting(js, st, cfg.Consumer)
	seen := map[string]bool{}
	clients := map[string]string{} // of each block
	for id := range ids {
		if seen[id] || !push.ValidID(id) {
			t.Fatalf("ucsId %q repeated or malformed", id)
		}
		seen[id] = true
		m, _, err := w.Get(ctx, id)
		if err != nil || m.UcsID != id {
			t.Fatalf("push %s: %+v %v", id, m, err)
		}
		if c, ok := clients[push.BlockOf(id)]; ok && c != m.ClientID {
			t.Fatalf("block %s holds pushes of clients %s and %s", push.BlockOf(id), c, m.ClientID)
		}
		clients[push.BlockOf(id)] = m.ClientID
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != senders*each || info.State.Msgs >= senders*each {
		t.Fatalf("%d pushes stored in %d messages: none were gathered", len(seen), info.State.Msgs)
	}
	t.Logf("%d pushes stored in %d messages", len(seen), info.State.Msgs)
	p.Close()
	if _, err := p.Gather(ctx, msg("")); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Gather after Close: %v", err)
	}
}

// TestNumber: a request's messages are numbered in runs of at most ChunkBytes of bodies (a body
// larger than that alone), each run a block from index 0, so PublishBatch stores each as one
// chunk.
func TestNumber(t *testing.T) {
	third := queue.ChunkBytes / 3
	sizes := []int{third, third, third, third, queue.ChunkBytes + 1, 10, 10}
	ms := make([]push.Message, len(sizes))
	queue.Number(ms, sizes, time.Now())
	runs := [][]int{{0, 1, 2}, {3}, {4}, {5, 6}}
	for _, run := range runs {
		for j, i := range run {
			if push.BlockOf(ms[i].UcsID) != push.BlockOf(ms[run[0]].UcsID) || push.BlockIndex(ms[i].UcsID) != j {
				t.Errorf("message %d: %s, want index %d of the block of message %d", i, ms[i].UcsID, j, run[0])
			}
		}
	}
	for k := 1; k < len(runs); k++ {
		if push.BlockOf(ms[runs[k][0]].UcsID) == push.BlockOf(ms[runs[k-1][0]].UcsID) {
			t.Errorf("runs %d and %d share a block", k-1, k)
		}
	}
}
