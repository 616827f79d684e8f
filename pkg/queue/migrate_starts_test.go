package queue_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// TestMigrateTakesNoPushOfTheEarlierLayoutOnceStarted: during a rolling upgrade a front end of
// the earlier version still publishes singles on ucs.push.mp.<ucsId> and batches as chunks on
// ucs.push.batch.<block> while a new program migrates the stream. From the migration's start
// the stream takes neither (the earlier front end answers 503, handing out no ucsId), so that
// no push is left on a legacy subject where no lookup finds it; every push stored before is
// moved.
func TestMigrateTakesNoPushOfTheEarlierLayoutOnceStarted(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	st, c := legacyStream(t, js, 0)
	// Enough singles that moving them takes a while.
	singles := newPushes("portal", 1500)
	publishSingles(t, js, singles)
	chunk := newPushes("exams.office", 5)
	publishChunk(t, js, "EARLY", chunk)

	done := make(chan error, 1)
	go func() {
		_, err := queue.Migrate(ctx, js, c, nil)
		done <- err
	}()
	embeddedtest.Eventually(t, 20*time.Second, "the moves start", func() bool {
		_, err := st.GetLastMsgForSubject(ctx, queue.Subject(chunk[0].ClientID, chunk[0].UcsID))
		return err == nil
	})
	// The earlier front end's publishes, while the pushes are moved.
	late := msgOf("portal", push.NewID(time.Now()))
	b, _ := late.Encode()
	if _, err := js.Publish(ctx, "ucs.push.mp."+late.UcsID, b); err == nil {
		t.Errorf("a single of the earlier layout stored during the migration")
	}
	if _, err := js.Publish(ctx, "ucs.push.batch.LATE", []byte("[]")); err == nil {
		t.Errorf("a chunk of the earlier layout stored during the migration")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := queue.EnsureStream(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	requireMoved(t, st, append(slices.Clone(singles), chunk...))
	if n := legacyLeft(t, st); n != 0 {
		t.Fatalf("%d messages left on legacy subjects", n)
	}
}

// TestMigrateChunkLeftBehindSubject: a chunk the stream holds on a subject its configuration
// no longer lists (stored in the moment between a start's migration and its EnsureStream) is
// moved by the next start.
func TestMigrateChunkLeftBehindSubject(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	st, c := legacyStream(t, js, 0)
	chunk := newPushes("exams.office", 5)
	publishChunk(t, js, "LATE", chunk)
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.Subjects = []string{"ucs.push.mp.>"} // as EnsureStream leaves it
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if moved, err := queue.Migrate(ctx, js, c, nil); err != nil || moved != len(chunk) {
		t.Fatalf("moved %d of %d: %v", moved, len(chunk), err)
	}
	requireMoved(t, st, chunk)
	if n := legacyLeft(t, st); n != 0 {
		t.Fatalf("%d legacy messages left", n)
	}
}

// TestMigrateTwoProgramsAtOnce: an api and a worker start at the same time on the same
// stream of the earlier version, bounded and nearly full (as after an outage). Each runs what
// connect runs: Migrate, then EnsureStream. Both must start, and every push must wait on its
// own subject once.
func TestMigrateTwoProgramsAtOnce(t *testing.T) {
	t.Run("full", func(t *testing.T) { twoProgramsMigrate(t, 1<<18, 1<<30) })
	// Unbounded: the only race left is the deletion of a legacy message the other program
	// deleted first (the server answers 10057, not "message not found").
	t.Run("unbounded", func(t *testing.T) { twoProgramsMigrate(t, 0, 1000) })
}

func twoProgramsMigrate(t *testing.T, maxBytes int64, n int) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	st, c := legacyStream(t, js, maxBytes)
	chunk := newPushes("exams.office", 50)
	publishChunk(t, js, "BLOCKA", chunk)
	var singles []push.Message
	for len(singles) < n {
		m := msgOf("portal", push.NewID(time.Now()))
		b, _ := m.Encode()
		if _, err := js.Publish(ctx, "ucs.push.mp."+m.UcsID, b); err != nil {
			break // full
		}
		singles = append(singles, m)
	}
	start := func() error {
		if _, err := queue.Migrate(ctx, js, c, nil); err != nil {
			return err
		}
		_, err := queue.EnsureStream(ctx, js, c)
		return err
	}
	errs := make(chan error, 2)
	go func() { errs <- start() }()
	go func() { errs <- start() }()
	var failed []error
	for range 2 {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	all := append(slices.Clone(chunk), singles...)
	missing := 0
	for _, m := range all {
		if _, err := st.GetLastMsgForSubject(ctx, queue.Subject(m.ClientID, m.UcsID)); err != nil {
			missing++
		}
	}
	if len(failed) > 0 || missing > 0 || legacyLeft(t, st) != 0 {
		t.Fatalf("two programs starting at once on a legacy stream of %d pushes: %d failed to start (%v); %d pushes not on their subjects, %d legacy left",
			len(all), len(failed), failed, missing, legacyLeft(t, st))
	}
}

// TestMigrateClusteredStream: a legacy stream of three replicas on a three-node cluster
// is migrated like a single server's, every push moved once, none left on legacy subjects.
func TestMigrateClusteredStream(t *testing.T) {
	cl := embeddedtest.StartCluster(t, "mig")
	_, js := embeddedtest.JetStreamAt(t, cl.URL())
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "S", Subjects: []string{"ucs.push.mp.>", "ucs.push.batch.>"}, Retention: jetstream.WorkQueuePolicy,
		AllowDirect: true, MaxMsgsPerSubject: 1, DiscardNewPerSubject: true, Discard: jetstream.DiscardNew,
		Duplicates: 10 * time.Minute, MaxBytes: 1 << 20, Replicas: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 3, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	chunk := newPushes("exams.office", 100)
	publishChunk(t, js, "BLOCKA", chunk)
	singles := newPushes("portal", 600)
	publishSingles(t, js, singles)
	moved, err := queue.Migrate(ctx, js, c, nil)
	if err != nil || moved != len(chunk)+len(singles) {
		t.Fatalf("moved %d of %d: %v", moved, len(chunk)+len(singles), err)
	}
	if _, err := queue.EnsureStream(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	requireAllMoved(t, st, append(chunk, singles...))
}

// TestMigrateCancelledHalfWay: a start stopped half way (its context cancelled while it
// copies) and the next start leave every push once on its subject and nothing legacy.
func TestMigrateCancelledHalfWay(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	st, c := legacyStream(t, js, 1<<20)
	chunk := newPushes("exams.office", 200)
	publishChunk(t, js, "BLOCKA", chunk)
	singles := newPushes("portal", 800)
	publishSingles(t, js, singles)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := st.GetLastMsgForSubject(context.Background(), queue.Subject(singles[10].ClientID, singles[10].UcsID)); err == nil {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if _, err := queue.Migrate(ctx, js, c, nil); err == nil {
		t.Log("the first run was not cut short")
	}
	cancel()
	if _, err := queue.Migrate(context.Background(), js, c, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.EnsureStream(context.Background(), js, c); err != nil {
		t.Fatal(err)
	}
	requireAllMoved(t, st, append(chunk, singles...))
}

// publishSingles publishes ms as the earlier layout did single pushes, on ucs.push.mp.<ucsId>.
func publishSingles(t *testing.T, js jetstream.JetStream, ms []push.Message) {
	t.Helper()
	for _, m := range ms {
		b, _ := m.Encode()
		if _, err := js.Publish(context.Background(), "ucs.push.mp."+m.UcsID, b); err != nil {
			t.Fatal(err)
		}
	}
}

// requireAllMoved fails t unless the stream holds ms each once on its own subject, and nothing
// else: no legacy message left.
func requireAllMoved(t *testing.T, st jetstream.Stream, ms []push.Message) {
	t.Helper()
	requireMoved(t, st, ms)
	if n := legacyLeft(t, st); n != 0 {
		t.Fatalf("%d legacy messages left", n)
	}
	if n := msgs(t, st); n != uint64(len(ms)) {
		t.Fatalf("stream holds %d, want %d", n, len(ms))
	}
}
