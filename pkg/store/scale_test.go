package store_test

// The store with many records of a kind, on the embedded FerretDB.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// rawRig is a store on the embedded FerretDB (with its _id lookup indexes, as standalone
// makes them) plus a raw handle on the same database, for bulk seeding in the stored shape.
func rawRig(t testing.TB, now func() time.Time) (*store.Store, *mongo.Database) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := embeddedtest.FerretDB(t)
	name := embeddedtest.DBName(t)
	st, err := store.Open(ctx, store.Options{URI: f.URI(), Database: name, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	if err := f.IndexIDs(ctx, name); err != nil {
		t.Fatal(err)
	}
	cl, err := mongo.Connect(ctx, options.Client().ApplyURI(f.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
	return st, cl.Database(name)
}

// bulk inserts docs in unordered batches of 5,000.
func bulk(t testing.TB, c *mongo.Collection, docs []any) {
	t.Helper()
	for i := 0; i < len(docs); i += 5000 {
		if _, err := c.InsertMany(context.Background(), docs[i:min(len(docs), i+5000)], options.InsertMany().SetOrdered(false)); err != nil {
			t.Fatalf("seed %s: %v", c.Name(), err)
		}
	}
}

// answering reports whether the embedded server still answers a lookup by _id within 3 s.
func answering(st *store.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := st.Current(ctx, "anything"); !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// TestSweepPastLiveProgressRecords: during a platform outage every push's progress
// record is written at its first attempt and then replaced in place as it is retried for days
// (the queue keeps a push up to nats.max_age, 7 days): the head of push_results is then a run
// of rows whose "at" moved on. A sweep after the retention period must still remove the expired
// records written after them.
func TestSweepPastLiveProgressRecords(t *testing.T) {
	clk := clocktest.New(at(0))
	st, _ := rawRig(t, clk.Now)
	w := st.NewWriter(store.WriterOptions{MaxBatch: 3000})
	t.Cleanup(w.Close)
	ctx := context.Background()
	day0 := clk.Now().Add(-31 * 24 * time.Hour)
	const nSlow = store.SweepBatch + 100 // an outage of a few minutes on a busy service
	var recs []store.Write
	revs := make([]int64, nSlow)
	for i := range nSlow {
		r := push.Result{UcsID: fmt.Sprintf("slow%04d", i), ClientID: "c", State: push.StateSending, Attempts: 1, Accepted: day0, Updated: day0}
		recs = append(recs, store.FirstAttemptRecord(r, day0))
		revs[i] = recs[i].Rev()
	}
	if err := w.Write(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	// Pushes that ended that day.
	const nOld = 2_000
	for s := 0; s < nOld; s += 1000 {
		recs = recs[:0]
		for i := s; i < s+1000; i++ {
			recs = append(recs, final(fmt.Sprintf("old%05d", i), day0.Add(time.Hour)))
		}
		if err := w.Write(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	// The slow pushes are retried for six days.
	later := day0.Add(6 * 24 * time.Hour)
	recs = recs[:0]
	for i := range nSlow {
		r := push.Result{UcsID: fmt.Sprintf("slow%04d", i), ClientID: "c", State: push.StateQueued, Attempts: 9, Accepted: day0, Updated: later, Rev: revs[i]}
		recs = append(recs, store.ProgressRecord(r, later))
	}
	for s := 0; s < len(recs); s += 50 {
		if err := w.Write(ctx, recs[s:min(len(recs), s+50)]...); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	n, err := st.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Sweep removed %d in %s", n, time.Since(t0))
	var kept []string
	for _, id := range []string{"old00000", "old01000", "old01999"} {
		if _, err := st.Final(ctx, id); !errors.Is(err, store.ErrNotFound) {
			kept = append(kept, id)
		}
	}
	for _, id := range []string{"slow0000", fmt.Sprintf("slow%04d", nSlow-1)} {
		if _, err := st.InProgress(ctx, id); err != nil {
			t.Fatalf("progress of %s, retried 25 days ago, swept: %v", id, err)
		}
	}
	if n != nOld || len(kept) > 0 {
		t.Fatalf("a sweep removed %d of %d records written 31 days ago (retention 30 days), behind %d live progress records; still there: %v",
			n, nOld, nSlow, kept)
	}
}

// TestWriterManyProgressRecords: under load the Writer gathers the records of many workers into
// one batch (up to MaxBatch, 500), and writes the replaced ones (progress records) in bulk
// writes. 150 workers recording a retry of their pushes at once (a platform outage) must have
// their records written, and the store must go on answering; the records of every third,
// whose writes come late (their records have changed since they were read), are refused each
// with ErrHistory, the others in the same bulk writes taken all the same.
func TestWriterManyProgressRecords(t *testing.T) {
	clk := clocktest.New(at(0))
	st, _ := rawRig(t, clk.Now)
	w := st.NewWriter(store.WriterOptions{}) // defaults: MaxBatch 500, 2 flushers, 10 s
	t.Cleanup(w.Close)
	ctx := context.Background()
	const nWorkers = 150
	// Each push's first attempt is recorded (inserted).
	var first []store.Write
	for i := range nWorkers {
		r := push.Result{UcsID: fmt.Sprintf("out%04d", i), ClientID: "c", State: push.StateSending, Attempts: 1, Accepted: clk.Now(), Updated: clk.Now()}
		first = append(first, store.FirstAttemptRecord(r, clk.Now()))
	}
	if err := w.Write(ctx, first...); err != nil {
		t.Fatal(err)
	}
	// The platform fails them all; every worker records its retry at once.
	start := make(chan struct{})
	errs := make([]error, nWorkers)
	var wg sync.WaitGroup
	for i := range nWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := push.Result{UcsID: fmt.Sprintf("out%04d", i), ClientID: "c", State: push.StateQueued, Attempts: 1,
				LastError: "system error", Accepted: clk.Now(), Updated: clk.Now(), RetryAt: clk.Now().Add(time.Minute), Rev: first[i].Rev()}
			if i%3 == 0 {
				r.Rev, r.LastError = 0, "late"
				if errs[i] = w.Write(ctx, store.ProgressRecord(r, clk.Now())); errors.Is(errs[i], store.ErrHistory) {
					errs[i] = nil
				} else {
					errs[i] = fmt.Errorf("a late write answered %w, want ErrHistory", errs[i])
				}
				return
			}
			errs[i] = w.Write(ctx, store.ProgressRecord(r, clk.Now()))
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(t0)
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	after := answering(st)
	t.Logf("%d progress writes took %s; %d failed; a lookup afterwards: %v", nWorkers, took, len(failed), after)
	if len(failed) > 0 || after != nil {
		first := error(nil)
		if len(failed) > 0 {
			first = failed[0]
		}
		t.Fatalf("%d of %d workers' progress records failed (first: %v); a lookup by _id afterwards: %v", len(failed), nWorkers, first, after)
	}
	for i := range nWorkers {
		want, lastError := push.StateQueued, "system error"
		if i%3 == 0 {
			want, lastError = push.StateSending, ""
		}
		if r, err := st.Current(ctx, fmt.Sprintf("out%04d", i)); err != nil || r.State != want || r.LastError != lastError {
			t.Fatalf("out%04d: %+v %v, want %s %q", i, r, err, want, lastError)
		}
	}
}

// TestImportManyChangedBindings: an import that changes the openid of bindings already stored
// (a re-export from the campus system after followers re-bound) replaces them in batches of
// ImportReplaceBatch (500) and updates their followers' records likewise.
func TestImportManyChangedBindings(t *testing.T) {
	clk := clocktest.New(at(0))
	st, _ := rawRig(t, clk.Now)
	ctx := context.Background()
	const n = 1_000
	rows := make([]store.Binding, 0, n)
	for i := range n {
		rows = append(rows, store.Binding{UserID: fmt.Sprintf("u%06d", i), OpenID: fmt.Sprintf("oA%06d", i)})
	}
	if res, err := st.ImportBindings(ctx, rows, nil); err != nil || res.Inserted != n {
		t.Fatalf("first import: %+v, %v", res, err)
	}
	for i := range rows {
		rows[i].OpenID = fmt.Sprintf("oB%06d", i)
	}
	if res := importAnswering(t, st, rows); res.Updated != n {
		t.Fatalf("import of %d changed bindings: %+v", n, res)
	}
}

// TestSweepTokenFamilies: the sweep drops a sign-in's records once expired; the token
// family of an expired refresh token goes with it (one family is made per code exchange).
func TestSweepTokenFamilies(t *testing.T) {
	clk := clocktest.New(at(0))
	st, db := rawRig(t, clk.Now)
	ctx := context.Background()
	old := clk.Now().Add(-60 * 24 * time.Hour)
	for i := range 3 {
		if err := st.PutRefreshToken(ctx, store.RefreshToken{Hash: fmt.Sprintf("rt%d", i), Family: fmt.Sprintf("fam%d", i), ClientID: "c",
			UserID: "u", SessionKey: "k", SID: "s", Scope: "openid", AuthTime: old, Expires: old.Add(30 * 24 * time.Hour), At: old}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := db.Collection("refresh_tokens").CountDocuments(ctx, bson.D{})
	fam, _ := db.Collection("token_families").CountDocuments(ctx, bson.D{})
	t.Logf("swept %d; left: refresh_tokens %d, token_families %d", n, rt, fam)
	if rt != 0 || fam != 0 {
		t.Fatalf("refresh tokens expired 30 days ago: %d left, and %d of their token families (never swept)", rt, fam)
	}
}

// TestImportBindingsOfManyFollowers: the usual first import: followers subscribed to the
// account before their bindings are imported (their follower records exist, from the
// subscribe events), so the import updates those records, ImportReplaceBatch at a time.
func TestImportBindingsOfManyFollowers(t *testing.T) {
	clk := clocktest.New(at(0))
	st, _ := rawRig(t, clk.Now)
	ctx := context.Background()
	const n = 150
	rows := make([]store.Binding, 0, n)
	for i := range n {
		o := fmt.Sprintf("o%06d", i)
		if err := st.SetFollowing(ctx, o, true, clk.Now()); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, store.Binding{UserID: fmt.Sprintf("u%06d", i), OpenID: o})
	}
	if res := importAnswering(t, st, rows); res.Inserted != n {
		t.Fatalf("import of %d bindings of existing followers: %+v", n, res)
	}
}

// importAnswering imports rows within 60 s and fails t unless the import succeeds and the store
// answers a read afterwards.
func importAnswering(t *testing.T, st *store.Store, rows []store.Binding) store.ImportResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	res, err := st.ImportBindings(ctx, rows, nil)
	after := answering(st)
	t.Logf("import of %d rows: %+v, %v in %s; a lookup afterwards: %v", len(rows), res, err, time.Since(t0), after)
	if err != nil || after != nil {
		t.Fatalf("import of %d rows: %+v, err %v; a lookup by _id afterwards: %v", len(rows), res, err, after)
	}
	return res
}

// BenchmarkSweepPast25kLiveProgressRecords: after a platform outage in which pushes were
// retried for days (the queue keeps them up to 7 days), their progress records sit at the head
// of push_results with a later "at" than the records behind them. The sweep reads them once on
// its way to the expired records behind. Here 100,000 records: 25,000 live progress records at
// the head, 1,000 expired results behind them, then 74,000 live results. Run it with
// -benchtime=1x: the setup writes the 100,000 records once.
func BenchmarkSweepPast25kLiveProgressRecords(b *testing.B) {
	clk := clocktest.New(at(0))
	st, _ := rawRig(b, clk.Now)
	w := st.NewWriter(store.WriterOptions{MaxBatch: 5000})
	b.Cleanup(w.Close)
	ctx := context.Background()
	now := clk.Now()
	retried := now.Add(-23 * 24 * time.Hour) // last retry; live (retention 30 days)
	old := now.Add(-31 * 24 * time.Hour)
	const nLive, nOld, nNew = 25_000, 1_000, 74_000
	write := func(recs []store.Write) {
		for s := 0; s < len(recs); s += 5000 {
			if err := w.Write(ctx, recs[s:min(len(recs), s+5000)]...); err != nil {
				b.Fatal(err)
			}
		}
	}
	var recs []store.Write
	for i := range nLive {
		r := push.Result{UcsID: fmt.Sprintf("slow%06d", i), ClientID: "c", State: push.StateQueued, Attempts: 40, Accepted: old, Updated: retried}
		recs = append(recs, store.FirstAttemptRecord(r, retried))
	}
	write(recs)
	recs = recs[:0]
	for i := range nOld {
		recs = append(recs, final(fmt.Sprintf("old%06d", i), old))
	}
	write(recs)
	recs = recs[:0]
	for i := range nNew {
		recs = append(recs, final(fmt.Sprintf("new%06d", i), now))
	}
	write(recs)
	for b.Loop() {
		t0 := time.Now()
		n, err := st.Sweep(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("Sweep past %d live progress records removed %d in %s", nLive, n, time.Since(t0))
		if n != nOld {
			b.Fatalf("removed %d, want %d", n, nOld)
		}
	}
}

// BenchmarkSignInSweep100k times the hourly sweep of sign-in records on the embedded store
// with 100,000 live sessions and none expired, and the slowest session lookup made meanwhile
// (every request of a signed-in user makes one). Run it with -benchtime=1x.
func BenchmarkSignInSweep100k(b *testing.B) {
	clk := clocktest.New(at(0))
	st, db := rawRig(b, clk.Now)
	ctx := context.Background()
	const n = 100_000
	now := clk.Now()
	docs := make([]any, 0, n)
	for i := range n {
		docs = append(docs, store.Session{Key: fmt.Sprintf("key%07d", i), SID: fmt.Sprintf("sid%07d", i), UserID: fmt.Sprintf("20%08d", i),
			IDP: "cas", AuthTime: now, Expires: now.Add(10 * time.Hour), Idle: now.Add(30 * time.Minute), At: now,
			Address: "10.1.2.3", Agent: "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36"})
	}
	bulk(b, db.Collection("sso_sessions"), docs)

	// A reader meanwhile: a session lookup (every request of a signed-in user) by _id.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			t1 := time.Now()
			if _, err := st.Session(ctx, fmt.Sprintf("key%07d", i%n)); err != nil {
				b.Errorf("session lookup: %v", err)
				return
			}
			d := time.Since(t1)
			mu.Lock()
			worst = max(worst, d)
			mu.Unlock()
		}
	}()
	b.ResetTimer()
	t0 := time.Now()
	removed, err := st.Sweep(ctx)
	took := time.Since(t0)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	b.Logf("Sweep with %d live sessions, none expired: removed %d in %s; slowest session lookup meanwhile %s", n, removed, took, worst)
}

// TestLateProgressRecordsDoNotHoldUpTheirBatch: a slow store (every command 250 ms late) is when
// late progress records happen; such records, refused, share a batch with the records of other
// pushes, each at the revision read. Every writer gets its own answer (ErrHistory for a late
// one), well within the writer's time-out (10 s): finding the refused ones costs a few round
// trips' time, not one per record.
func TestLateProgressRecordsDoNotHoldUpTheirBatch(t *testing.T) {
	t.Run("one of 51", func(t *testing.T) { lateRecordsInABatch(t, func(i int) bool { return i == 25 }) })
	t.Run("eight of 51", func(t *testing.T) { lateRecordsInABatch(t, func(i int) bool { return i%6 == 5 }) })
}

func lateRecordsInABatch(t *testing.T, late func(i int) bool) {
	f := embeddedtest.FerretDB(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimSuffix(strings.TrimPrefix(f.URI(), "mongodb://"), "/"))
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{URI: "mongodb://" + proxy.Addr() + "/", Database: embeddedtest.DBName(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	// One flusher, so that the records queued behind a held write make one batch, as they do
	// under load with the default two.
	w := st.NewWriter(store.WriterOptions{Flushers: 1})
	defer w.Close()
	const n = 51
	now := time.Now()
	revs := make([]int64, n)
	var first []store.Write
	for i := range n {
		r := push.Result{UcsID: fmt.Sprintf("slow%03d", i), ClientID: "c", State: push.StateSending, Attempts: 1, Accepted: now, Updated: now}
		first = append(first, store.FirstAttemptRecord(r, now))
		revs[i] = first[i].Rev()
	}
	if err := w.Write(ctx, first...); err != nil {
		t.Fatal(err)
	}
	// The flusher is held on a write whose answer waits, while the records queue behind it.
	proxy.HoldAnswersAfter(func(b []byte) bool { return bytes.Contains(b, []byte("blocker")) })
	blocked := make(chan error, 1)
	go func() {
		blocked <- w.Write(ctx, store.FirstAttemptRecord(push.Result{UcsID: "blocker", ClientID: "c", State: push.StateSending, Attempts: 1}, now))
	}()
	embeddedtest.Eventually(t, 10*time.Second, "the flusher held", func() bool { return stacksWith("store.(*Store).write(") == 1 })
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := push.Result{UcsID: fmt.Sprintf("slow%03d", i), ClientID: "c", State: push.StateQueued, Attempts: 1,
				LastError: "-1 system busy", Accepted: now, Updated: now, Rev: revs[i]}
			if late(i) {
				r.Rev = 12345 // a late write: the record is no longer the one it read
			}
			errs[i] = w.Write(ctx, store.ProgressRecord(r, now))
		}()
		// Queued in order, behind the held write.
		embeddedtest.Eventually(t, 10*time.Second, "the records queued", func() bool { return stacksWith("store.(*Writer).Write(") == i+2 })
	}
	proxy.SetDelay(250 * time.Millisecond)
	began := time.Now()
	proxy.Release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	took := time.Since(began)
	bad := 0
	var firstBad error
	for i := range n {
		want := error(nil)
		if late(i) {
			want = store.ErrHistory
		}
		if !errors.Is(errs[i], want) || (want == nil && errs[i] != nil) {
			bad++
			if firstBad == nil {
				firstBad = fmt.Errorf("record %d: %w, want %w", i, errs[i], want)
			}
		}
	}
	t.Logf("%d of %d writers answered wrongly; took %s", bad, n, took.Round(time.Millisecond))
	if bad > 0 {
		t.Fatalf("%d of %d writers got a wrong answer on a store answering every command in 250 ms, late records in the batch (took %s); first: %v",
			bad, n, took.Round(time.Millisecond), firstBad)
	}
}

// stacksWith counts the goroutines whose stack holds s.
func stacksWith(s string) int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(s)) {
			n++
		}
	}
	return n
}
