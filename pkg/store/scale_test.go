package store_test

// The store with many records of a kind, on the embedded FerretDB.

import (
	"context"
	"errors"
	"fmt"
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
	for i := range nSlow {
		r := push.Result{UcsID: fmt.Sprintf("slow%04d", i), ClientID: "c", State: push.StateSending, Attempts: 1, Accepted: day0, Updated: day0}
		recs = append(recs, store.FirstAttemptRecord(r, day0))
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
		r := push.Result{UcsID: fmt.Sprintf("slow%04d", i), ClientID: "c", State: push.StateQueued, Attempts: 9, Accepted: day0, Updated: later}
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
// one batch (up to MaxBatch, 500), and writes the replaced ones (progress records) as one
// ordered BulkWrite. 150 workers recording a retry of their pushes at once (a platform outage)
// must have their records written, and the store must go on answering.
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
				LastError: "system error", Accepted: clk.Now(), Updated: clk.Now(), RetryAt: clk.Now().Add(time.Minute)}
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
