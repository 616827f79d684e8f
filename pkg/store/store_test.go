package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/event"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func TestReceipt(t *testing.T) {
	sent := push.Result{UcsID: "u", ClientID: "c", State: push.StateSent, MsgID: 1, Attempts: 2, Sent: at(1), Updated: at(1)}
	for _, c := range []struct {
		status string
		state  push.State
		reason string
	}{
		{"success", push.StateDelivered, ""},
		{"failed:user block", push.StateFailed, "failed:user block"},
		{"failed: system failed", push.StateFailed, "failed: system failed"},
	} {
		r := store.Receipt(sent, c.status, at(9))
		if r.State != c.state || r.Reason != c.reason || !r.Finished.Equal(at(9)) || !r.Updated.Equal(at(9)) ||
			r.MsgID != 1 || r.Attempts != 2 || !r.Sent.Equal(at(1)) {
			t.Errorf("%s: got %+v", c.status, r)
		}
	}
}

func TestResultRecords(t *testing.T) {
	st := embeddedtest.Store(t, func() time.Time { return t0 })
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	ctx := context.Background()
	const id = "01JRESULT00000000000000000"
	if _, err := st.Current(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing result: %v", err)
	}
	base := push.Result{UcsID: id, ClientID: "c1", UserID: "2020000001", Type: "TDL", Accepted: at(0)}
	state := func(want push.State, attempts int, lastErr string) push.Result {
		t.Helper()
		r, err := st.Current(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != want || r.Attempts != attempts || r.LastError != lastErr || r.ClientID != "c1" || r.UserID != "2020000001" ||
			r.Type != "TDL" || !r.Accepted.Equal(at(0)) {
			t.Fatalf("want %s attempts=%d lastError=%q, got %+v", want, attempts, lastErr, r)
		}
		return r
	}

	first := base
	first.State, first.Attempts, first.Updated = push.StateSending, 1, at(1)
	if err := w.Write(ctx, store.FirstAttemptRecord(first, at(1))); err != nil {
		t.Fatal(err)
	}
	state(push.StateSending, 1, "")

	retry := first
	retry.State, retry.LastError, retry.RetryAt, retry.Updated = push.StateQueued, "-1 system busy", at(5), at(2)
	if err := w.Write(ctx, store.ProgressRecord(retry, at(2))); err != nil {
		t.Fatal(err)
	}
	if r := state(push.StateQueued, 1, "-1 system busy"); !r.RetryAt.Equal(at(5)) {
		t.Fatalf("retry at %v", r.RetryAt)
	}
	// A first attempt's record written again never hides the retry: the store keeps what it
	// has, and says the push has a history.
	if err := w.Write(ctx, store.FirstAttemptRecord(first, at(1))); !errors.Is(err, store.ErrHistory) {
		t.Fatalf("a first attempt's record over a retry: %v", err)
	}
	state(push.StateQueued, 1, "-1 system busy")

	sent := retry
	sent.State, sent.Attempts, sent.MsgID, sent.Sent, sent.RetryAt = push.StateSent, 2, 4242, at(6), time.Time{}
	if err := w.Write(ctx, store.SentRecords(sent, "oA", at(6))...); err != nil {
		t.Fatal(err)
	}
	if r := state(push.StateSent, 2, "-1 system busy"); r.MsgID != 4242 {
		t.Fatalf("msgid %d", r.MsgID)
	}
	if _, err := st.Final(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("final before the receipt: %v", err)
	}
	got, openID, err := st.SentByMsgID(ctx, 4242)
	if err != nil || got.UcsID != id || openID != "oA" {
		t.Fatalf("by msgid: %+v %q %v", got, openID, err)
	}
	if _, _, err := st.SentByMsgID(ctx, 4243); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown msgid: %v", err)
	}

	if err := w.Write(ctx, store.FinalRecord(store.Receipt(got, "success", at(7)), at(7))); err != nil {
		t.Fatal(err)
	}
	// The platform repeats event pushes: a second, different report changes nothing.
	if err := w.Write(ctx, store.FinalRecord(store.Receipt(got, "failed: system failed", at(8)), at(8))); err != nil {
		t.Fatal(err)
	}
	r, err := st.Final(ctx, id)
	if err != nil || r.State != push.StateDelivered || !r.Finished.Equal(at(7)) || r.MsgID != 4242 || r.Attempts != 2 {
		t.Fatalf("final: %+v %v", r, err)
	}
	state(push.StateDelivered, 2, "-1 system busy")
}

// TestFirstFinalRecord: a final result written after another one of the same push is told so
// (ErrFinalExists), alone or in a batch with others that are written, and the first stays.
func TestFirstFinalRecord(t *testing.T) {
	st := embeddedtest.Store(t, func() time.Time { return t0 })
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	ctx := context.Background()
	const a, b, c = "01JFIRSTA00000000000000000", "01JFIRSTB00000000000000000", "01JFIRSTC00000000000000000"
	sent := func(id string) push.Result {
		return push.Result{UcsID: id, ClientID: "c1", State: push.StateSent, MsgID: 7, Attempts: 1, Sent: at(1)}
	}
	for _, id := range []string{a, b, c} {
		if err := w.Write(ctx, store.SentRecords(sent(id), "o1", at(1))[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(ctx, store.FirstFinalRecord(store.Receipt(sent(a), "success", at(2)), at(2))); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, store.FirstFinalRecord(store.Receipt(sent(a), "failed:user block", at(3)), at(3))); !errors.Is(err, store.ErrFinalExists) {
		t.Fatalf("a second final result: %v, want ErrFinalExists", err)
	}
	// Many at once, as the front end's group commit writes them: each answered for itself.
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, id := range []string{b, a, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.Write(ctx, store.FirstFinalRecord(store.Receipt(sent(id), "failed: system failed", at(4)), at(4)))
		}()
	}
	wg.Wait()
	if errs[0] != nil || !errors.Is(errs[1], store.ErrFinalExists) || errs[2] != nil {
		t.Fatalf("batch answers: %v", errs)
	}
	// FinalRecord keeps answering a repeat as written: the workers rely on it.
	if err := w.Write(ctx, store.FinalRecord(store.Receipt(sent(a), "failed:user block", at(5)), at(5))); err != nil {
		t.Fatalf("FinalRecord of a final push: %v", err)
	}
	if r, err := st.Final(ctx, a); err != nil || r.State != push.StateDelivered || !r.Finished.Equal(at(2)) {
		t.Fatalf("the first final result did not stay: %+v %v", r, err)
	}
}

// TestRetryRacesFirstAttempt: a retry's record replaces a first attempt's record that may be
// inserted at the same moment (by another copy of the message); the replacement never fails
// for it and always wins.
func TestRetryRacesFirstAttempt(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	posts, writes := st.NewWriter(store.WriterOptions{MaxBatch: 1}), st.NewWriter(store.WriterOptions{MaxBatch: 1})
	defer posts.Close()
	defer writes.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for i := range 300 {
		r := push.Result{UcsID: fmt.Sprintf("race%d", i), ClientID: "c", State: push.StateSending, Attempts: 1, Accepted: t0}
		retry := r
		retry.State, retry.LastError = push.StateQueued, "-1 system busy"
		wg.Add(2)
		go func() { defer wg.Done(); _ = posts.Write(ctx, store.FirstAttemptRecord(r, t0)) }() // ErrHistory once the retry is in
		go func() { defer wg.Done(); errs <- writes.Write(ctx, store.ProgressRecord(retry, t0)) }()
	}
	wg.Wait()
	posts.Close()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a retry's record was refused: %v", err)
		}
	}
	for i := range 300 {
		if r, err := st.Current(ctx, fmt.Sprintf("race%d", i)); err != nil || r.LastError != "-1 system busy" {
			t.Fatalf("race%d: %+v %v", i, r, err)
		}
	}
}

func TestBindings(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	if _, err := st.Binding(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing binding: %v", err)
	}
	for _, b := range []store.Binding{{UserID: "2020000001", OpenID: "oA"}, {UserID: "2020000002", OpenID: "oA"}, {UserID: "2020000003", OpenID: "oB"}} {
		if err := st.PutBinding(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	following := func(user string, want bool) {
		t.Helper()
		b, err := st.Binding(ctx, user)
		if err != nil || b.Following != want {
			t.Fatalf("%s: %+v %v, want following=%v", user, b, err, want)
		}
	}
	at := time.Unix(1_700_000_000, 0)
	following("2020000001", true) // no event yet: a binding is taken as following
	if err := st.SetFollowing(ctx, "oA", false, at); err != nil {
		t.Fatal(err)
	}
	following("2020000001", false)
	following("2020000002", false)
	following("2020000003", true)
	if err := st.SetFollowing(ctx, "oA", true, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	following("2020000002", true)
	// Rebinding to another openid follows that openid's state.
	if err := st.SetFollowing(ctx, "oB", false, at); err != nil {
		t.Fatal(err)
	}
	if err := st.PutBinding(ctx, store.Binding{UserID: "2020000001", OpenID: "oB"}); err != nil {
		t.Fatal(err)
	}
	following("2020000001", false)
}

// TestFollowingInEventOrder: subscribe and unsubscribe events apply in the order of their
// CreateTime, not of their arrival; within one second a subscribe wins; a record written before
// events were ordered is read as it was, and the next event replaces it.
func TestFollowingInEventOrder(t *testing.T) {
	f := embeddedtest.FerretDB(t)
	ctx := context.Background()
	db := embeddedtest.DBName(t)
	st, err := store.Open(ctx, store.Options{URI: f.URI(), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	for _, b := range []store.Binding{{UserID: "u1", OpenID: "o1"}, {UserID: "u2", OpenID: "o2"}, {UserID: "u3", OpenID: "o3"}} {
		if err := st.PutBinding(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	following := func(user string) bool {
		t.Helper()
		b, err := st.Binding(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		return b.Following
	}
	at := time.Unix(1_700_000_000, 0)
	set := func(openid string, follow bool, created time.Time) {
		t.Helper()
		if err := st.SetFollowing(ctx, openid, follow, created); err != nil {
			t.Fatal(err)
		}
	}
	set("o1", false, at.Add(10*time.Second))
	set("o1", true, at) // older: arrives late, changes nothing
	if following("u1") {
		t.Fatal("an older subscribe undid a newer unsubscribe")
	}
	set("o1", true, at.Add(20*time.Second))
	set("o1", false, at.Add(15*time.Second))
	if !following("u1") {
		t.Fatal("an older unsubscribe undid a newer subscribe")
	}
	set("o2", true, at)
	set("o2", false, at) // the same second: subscribe wins, in either order
	if !following("u2") {
		t.Fatal("within one second, unsubscribe won")
	}
	// A record of an earlier version: {following: false} without an order.
	mc, err := mongo.Connect(ctx, options.Client().ApplyURI(f.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mc.Disconnect(ctx) }()
	if _, err := mc.Database(db).Collection("followers").InsertOne(ctx, bson.M{"_id": "o3", "following": false, "updated": at}); err != nil {
		t.Fatal(err)
	}
	if following("u3") {
		t.Fatal("an earlier version's unsubscribe was lost")
	}
	set("o3", true, at)
	if !following("u3") {
		t.Fatal("an event did not replace an earlier version's record")
	}
	// Many events of one openid at once, in every order: the newest wins.
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := st.SetFollowing(ctx, "o1", i%2 == 1, at.Add(time.Duration(100+i)*time.Second)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if !following("u1") { // the newest, i = 39, is a subscribe
		t.Fatal("concurrent events: the newest did not win")
	}
}

func TestCurrentSigningKeyOnceAcrossReplicas(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	kids := make([]string, 8)
	errs := make([]error, 8)
	for i := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := st.CurrentSigningKey(ctx, "ES256", func() (store.SigningKey, error) {
				return store.SigningKey{KeyID: fmt.Sprintf("k%d", i), Alg: "ES256", PKCS8: []byte{byte(i)}}, nil
			})
			kids[i], errs[i] = k.KeyID, err
		}()
	}
	wg.Wait()
	for i := range kids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if kids[i] != kids[0] {
			t.Fatalf("replicas got different keys: %v", kids)
		}
	}
}

func queued(id string) store.Write {
	return store.FirstAttemptRecord(push.Result{UcsID: id, ClientID: "c", State: push.StateSending, Attempts: 1, Accepted: t0}, t0)
}

func TestWriterConcurrent(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	w := st.NewWriter(store.WriterOptions{MaxBatch: 100})
	ctx := context.Background()
	var wg sync.WaitGroup
	const goroutines, each = 20, 50
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- w.Write(ctx, queued(fmt.Sprintf("g%d-%d", g, i)))
			}
		}()
	}
	wg.Wait()
	w.Close()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"g0-0", "g19-49", "g7-21"} {
		if r, err := st.Current(ctx, id); err != nil || r.State != push.StateSending {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
	}
	if err := w.Write(ctx, queued("late")); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// final is the final record of a push id that a worker failed, written at: one record.
func final(id string, at time.Time) store.Write {
	return store.FinalRecord(push.Result{UcsID: id, ClientID: "c", State: push.StateFailed, Attempts: 5, Reason: "gave up",
		Accepted: at, Updated: at, Finished: at}, at)
}

// delivered are the records of a push id the platform accepted as msgID and then delivered,
// written at: its sent record, its msgid and its receipt's final result.
func delivered(id string, msgID int64, at time.Time) []store.Write {
	sent := push.Result{UcsID: id, ClientID: "c", State: push.StateSent, Attempts: 1, MsgID: msgID,
		Accepted: at, Updated: at, Sent: at}
	return append(store.SentRecords(sent, "oA", at), store.FinalRecord(store.Receipt(sent, "success", at), at))
}

// sweepRig is a store the sweep has to clear itself (the embedded FerretDB has no TTL index),
// on a test clock, with a writer.
func sweepRig(t *testing.T) (*clocktest.Clock, *store.Store, *store.Writer) {
	t.Helper()
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	if st.ExpiresItself() {
		t.Fatal("FerretDB reported TTL index support; the sweep tests assume it has none")
	}
	w := st.NewWriter(store.WriterOptions{})
	t.Cleanup(w.Close)
	return clk, st, w
}

func TestSweep(t *testing.T) {
	clk, st, w := sweepRig(t)
	ctx := context.Background()
	old := clk.Now().Add(-31 * 24 * time.Hour)
	// More than two steps' worth of old records, then new ones, as time wrote them.
	var recs []store.Write
	const nOld = 2*store.SweepBatch + 7
	for i := range nOld {
		recs = append(recs, final(fmt.Sprintf("old%d", i), old))
	}
	sent := push.Result{UcsID: "oldsent", ClientID: "c", State: push.StateSent, MsgID: 77, Accepted: old, Updated: old}
	recs = append(recs, store.SentRecords(sent, "oA", old)...)
	if err := w.Write(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	recs = nil
	for i := 0; i <= 1000; i += 100 {
		recs = append(recs, final(fmt.Sprintf("new%d", i), clk.Now()))
	}
	if err := w.Write(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	n, err := st.Sweep(ctx)
	if err != nil || n != nOld+2 {
		t.Fatalf("swept %d, %v; want %d", n, err, nOld+2)
	}
	for _, id := range []string{"old0", "old1013", "oldsent"} {
		if _, err := st.Current(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("old record %s kept: %v", id, err)
		}
	}
	if _, _, err := st.SentByMsgID(ctx, 77); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("old msgid kept: %v", err)
	}
	for _, id := range []string{"new0", "new1000"} {
		if _, err := st.Final(ctx, id); err != nil {
			t.Fatalf("new record %s: %v", id, err)
		}
	}
}

// BenchmarkWriter measures records written per second through group commit, from 32
// goroutines.
func BenchmarkWriter(b *testing.B) {
	st := embeddedtest.Store(b, nil)
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	ctx := context.Background()
	b.SetParallelism(32)
	var n sync.Mutex
	i := 0
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Lock()
			i++
			id := fmt.Sprintf("b%d", i)
			n.Unlock()
			if err := w.Write(ctx, final(id, t0)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkFinal measures looking final results up by ucsId among 100,000 live records from 16
// goroutines, the store idle, and while a sweep deletes 60,000 expired ones written before them.
func BenchmarkFinal(b *testing.B) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(b, clk.Now)
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	ctx := context.Background()
	const n = 100_000
	write := func(prefix string, count int, at time.Time) {
		for start := 0; start < count; start += 5000 {
			recs := make([]store.Write, 0, 5000)
			for i := start; i < min(count, start+5000); i++ {
				recs = append(recs, delivered(fmt.Sprintf("%s%06d", prefix, i), at.Unix()*1_000_000+int64(i), at)...)
			}
			if err := w.Write(ctx, recs...); err != nil {
				b.Fatal(err)
			}
		}
	}
	write("old", 60_000, clk.Now().Add(-40*24*time.Hour))
	write("r", n, clk.Now())
	lookups := func(b *testing.B) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i += 7919
				if _, err := st.Final(ctx, fmt.Sprintf("r%06d", i%n)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	}
	b.Run("idle", lookups)
	b.Run("sweeping", func(b *testing.B) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		var swept int64
		go func() {
			defer close(done)
			k, err := st.Sweep(ctx)
			if err != nil && ctx.Err() == nil {
				b.Error(err)
			}
			swept = k
		}()
		lookups(b)
		cancel()
		<-done
		b.ReportMetric(float64(swept)/b.Elapsed().Seconds(), "swept/s")
	})
}

func TestSweepSignInRecords(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	if _, err := st.PutSession(ctx, store.Session{Key: "old", SID: "sid-old", UserID: "u-old", Expires: clk.Now().Add(-48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutSession(ctx, store.Session{Key: "live", SID: "sid-live", UserID: "u-live", Expires: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// The old session, the record of its sid and its user's list of sessions.
	if n, err := st.Sweep(ctx); err != nil || n != 3 {
		t.Fatalf("swept %d, %v", n, err)
	}
	if se, err := st.SessionBySID(ctx, "sid-live"); err != nil || se.Key != "live" {
		t.Fatalf("live session swept: %v", err)
	}
	if _, err := st.SessionBySID(ctx, "sid-old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("old session found: %v", err)
	}
}

// TestSweepKeepsRefreshTokensAsLongAsTheirSession: a refresh token's record, its use marker and
// its family stay past the token's expiry while its session may live (Kept), so that a client's
// server-side logout still names the session by it; a day after the session's end they go, as
// a token without Kept goes a day after its expiry.
func TestSweepKeepsRefreshTokensAsLongAsTheirSession(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	sessionEnds := clk.Now().Add(72 * time.Hour)
	used := store.RefreshToken{Hash: "h-used", Family: "fam", ClientID: "portal", SessionKey: "s", Expires: clk.Now().Add(30 * time.Minute), Kept: sessionEnds, At: clk.Now()}
	next := used
	next.Hash = "h-next"
	plain := store.RefreshToken{Hash: "h-plain", Family: "fam-plain", ClientID: "portal", SessionKey: "s2", Expires: clk.Now().Add(30 * time.Minute), At: clk.Now()}
	for _, tok := range []store.RefreshToken{used, next, plain} {
		if err := st.PutRefreshToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.RotateRefreshToken(ctx, used); err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeFamily(ctx, "fam"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(48 * time.Hour) // every token expired more than a day ago; the session may live on
	if _, err := st.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RefreshToken(ctx, "h-plain"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a token without Kept, a day past its expiry: %v, want swept", err)
	}
	if tok, err := st.RefreshToken(ctx, "h-used"); err != nil || !tok.Rotated {
		t.Fatalf("a used token of a session that may live: %+v %v, want kept and still used", tok, err)
	}
	if _, err := st.RefreshToken(ctx, "h-next"); err != nil {
		t.Fatalf("a token of a session that may live: %v, want kept", err)
	}
	if revoked, err := st.FamilyRevoked(ctx, "fam"); err != nil || !revoked {
		t.Fatalf("the family of kept tokens: revoked %v, %v; want kept, revoked", revoked, err)
	}
	clk.Advance(49 * time.Hour) // a day past the session's end
	if _, err := st.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h-used", "h-next"} {
		if _, err := st.RefreshToken(ctx, h); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s a day past its session's end: %v, want swept", h, err)
		}
	}
	if revoked, err := st.FamilyRevoked(ctx, "fam"); err != nil || revoked {
		t.Fatalf("the family a day past its session's end: revoked %v, %v; want swept", revoked, err)
	}
}

// TestSweepKeepsTokensOfARenewedSession: a refresh token's session, renewed (a sign-in again in
// the same browser), lives on past the token's Kept: the sweep keeps the token, and its use, so
// that a used token whose flag write failed (useOnce logs and goes on) still reads as used; but
// a token of the same session issued before the user revoked its client's access goes, as it
// could end nothing.
func TestSweepKeepsTokensOfARenewedSession(t *testing.T) {
	clk := clocktest.New(at(0))
	st, db := rawRig(t, clk.Now)
	ctx := context.Background()
	se := store.Session{Key: "sk", SID: "sid", UserID: "u1", AuthTime: clk.Now(), Expires: clk.Now().Add(24 * time.Hour),
		Idle: clk.Now().Add(200 * time.Hour), At: clk.Now()}
	if _, err := st.PutSession(ctx, se); err != nil {
		t.Fatal(err)
	}
	tok := store.RefreshToken{Hash: "h-used", Family: "fam", ClientID: "portal", UserID: "u1", SessionKey: "sk", SID: "sid",
		Expires: clk.Now().Add(30 * time.Minute), Kept: se.Expires, At: clk.Now()}
	if err := st.PutRefreshToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := st.RotateRefreshToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	revoked := tok
	revoked.Hash, revoked.Family, revoked.ClientID = "h-revoked", "fam-revoked", "library"
	if err := st.PutRefreshToken(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeGrant(ctx, "u1", "library", clk.Now().Add(time.Minute), clk.Now().Add(200*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// The flag's write failed: only the marker records the use.
	if _, err := db.Collection("refresh_tokens").UpdateOne(ctx, bson.M{"_id": "h-used"}, bson.M{"$set": bson.M{"rotated": false}}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.RefreshToken(ctx, "h-used"); err != nil || !r.Rotated {
		t.Fatalf("before the sweep: %+v %v, want used", r, err)
	}
	// A sign-in again renews the session to t0+120h.
	se2 := se
	se2.Expires = clk.Now().Add(120 * time.Hour)
	if err := st.RenewSession(ctx, se2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(50 * time.Hour) // a day past the token's Kept; the session lives
	if _, err := st.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := st.RefreshToken(ctx, "h-used")
	if err != nil {
		t.Fatalf("the token of a live session: %v, want kept", err)
	}
	if !r.Rotated {
		t.Fatalf("a used refresh token kept by the sweep (its session lives) reads as unused: its use marker was swept")
	}
	if _, err := st.RefreshToken(ctx, "h-revoked"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a token of a live session issued before its grant's revocation: %v, want swept", err)
	}
}

func TestAccountRecords(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	put := func(key string, ttl time.Duration) []store.SessionRef {
		t.Helper()
		refs, err := st.PutSession(ctx, store.Session{Key: key, SID: "sid-" + key, UserID: "u1", AuthTime: clk.Now(), Expires: clk.Now().Add(ttl)})
		if err != nil {
			t.Fatal(err)
		}
		return refs
	}
	put("a", time.Minute)
	clk.Advance(time.Second)
	put("b", time.Hour)
	clk.Advance(2 * time.Minute) // a has expired
	refs := put("c", time.Hour)
	if len(refs) != 2 || refs[0].Key != "b" || refs[1].Key != "c" {
		t.Fatalf("live sessions after a third sign-in: %+v", refs)
	}
	list, err := st.UserSessions(ctx, "u1")
	if err != nil || len(list) != 2 || list[0].Key != "c" || list[1].Key != "b" {
		t.Fatalf("sessions newest first: %+v %v", list, err)
	}
	if _, err := st.EndSession(ctx, list[0]); err != nil {
		t.Fatal(err)
	}
	if list, err = st.UserSessions(ctx, "u1"); err != nil || len(list) != 1 || list[0].Key != "b" {
		t.Fatalf("after ending c: %+v %v", list, err)
	}
	if list, err = st.UserSessions(ctx, "nobody"); err != nil || len(list) != 0 {
		t.Fatalf("a user with no sessions: %+v %v", list, err)
	}

	// Many simultaneous sign-ins of one user each keep their entry.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.PutSession(ctx, store.Session{Key: fmt.Sprint("p", i), SID: fmt.Sprint("sid-p", i), UserID: "u2", Expires: clk.Now().Add(time.Hour)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if list, err = st.UserSessions(ctx, "u2"); err != nil || len(list) != 16 {
		t.Fatalf("16 simultaneous sign-ins listed %d: %v", len(list), err)
	}

	// Grants: consent, use, revocation.
	if err := st.PutConsent(ctx, "u1", "portal", []string{"notification.mp"}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	granted := clk.Now()
	clk.Advance(time.Minute)
	if err := st.UseGrant(ctx, "u1", "portal", "openid notification.mp", clk.Now()); err != nil {
		t.Fatal(err)
	}
	g, err := st.Grant(ctx, "u1", "portal")
	if err != nil || !g.At.Equal(granted) || !g.LastUsed.Equal(clk.Now()) || g.Scope != "openid notification.mp" ||
		!slices.Equal(g.Scopes, []string{"notification.mp"}) {
		t.Fatalf("grant: %+v %v", g, err)
	}
	if err := st.UseGrant(ctx, "u1", "trusted", "openid", clk.Now()); err != nil {
		t.Fatal(err)
	}
	// A consent counts for the client it was given to, not for one registered under its id
	// after it.
	if sc, err := st.Consent(ctx, "u1", "portal", granted); err != nil || !slices.Equal(sc, []string{"notification.mp"}) {
		t.Fatalf("the consent to the client registered before it: %v %v", sc, err)
	}
	if sc, err := st.Consent(ctx, "u1", "portal", granted.Add(time.Millisecond)); err != nil || len(sc) != 0 {
		t.Fatalf("a consent to an earlier client of the same id: %v %v", sc, err)
	}
	if sc, err := st.Consent(ctx, "u1", "trusted", time.Time{}); err != nil || len(sc) != 0 {
		t.Fatalf("a used grant without consent: %v %v", sc, err)
	}
	if at, err := st.GrantRevokedAt(ctx, "u1", "portal"); err != nil || !at.IsZero() {
		t.Fatalf("never revoked: %v %v", at, err)
	}
	if err := st.RevokeGrant(ctx, "u1", "portal", clk.Now(), clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if at, err := st.GrantRevokedAt(ctx, "u1", "portal"); err != nil || !at.Equal(clk.Now()) {
		t.Fatalf("revoked at: %v %v", at, err)
	}
	if _, err := st.Grant(ctx, "u1", "portal"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoked grant still there: %v", err)
	}
	if sc, err := st.Consent(ctx, "u1", "portal", time.Time{}); err != nil || len(sc) != 0 {
		t.Fatalf("consent after revocation: %v %v", sc, err)
	}
}

// insertLog records, in order, each insert the driver starts and each that succeeds, with the
// _ids it carries.
type insertLog struct {
	mu      sync.Mutex
	seq     int
	started map[int64]insertEvent // by request id
	done    []insertEvent
}

type insertEvent struct {
	col        string
	ids        []string
	start, end int
}

func (l *insertLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, ev *event.CommandStartedEvent) {
			if ev.CommandName != "insert" {
				return
			}
			e := insertEvent{col: ev.Command.Lookup("insert").StringValue()}
			docs, _ := ev.Command.Lookup("documents").Array().Values()
			for _, d := range docs {
				e.ids = append(e.ids, d.Document().Lookup("_id").StringValue())
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			l.seq++
			e.start = l.seq
			l.started[ev.RequestID] = e
		},
		Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) {
			l.mu.Lock()
			defer l.mu.Unlock()
			e, ok := l.started[ev.RequestID]
			if !ok {
				return
			}
			l.seq++
			e.end = l.seq
			l.done = append(l.done, e)
		},
	}
}

// TestSentRecordAfterItsMsgID: a push's sent record is inserted only once its msgid's record
// is in, however many workers write at once, so that a worker that finds the sent record
// (a redelivered copy, which then acknowledges the message) leaves no msgid record unwritten.
func TestSentRecordAfterItsMsgID(t *testing.T) {
	log := &insertLog{started: map[int64]insertEvent{}}
	f := embeddedtest.FerretDB(t)
	st, err := store.Open(context.Background(), store.Options{URI: f.URI(), Database: embeddedtest.DBName(t), Monitor: log.monitor()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	ctx := context.Background()
	const writers, each = 32, 10
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				n := int64(g*each + i + 1)
				r := push.Result{UcsID: fmt.Sprintf("u%03d", n), ClientID: "c", State: push.StateSent, Attempts: 1, MsgID: n, Sent: t0}
				if err := w.Write(ctx, store.SentRecords(r, "o", t0)...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	log.mu.Lock()
	defer log.mu.Unlock()
	msgIDIn := map[string]int{}  // msgid → when its insert succeeded
	sentFrom := map[string]int{} // ucsId → when its insert started
	for _, e := range log.done {
		for _, id := range e.ids {
			switch e.col {
			case "push_msgids":
				msgIDIn[id] = e.end
			case "push_results":
				sentFrom[id] = e.start
			}
		}
	}
	if len(sentFrom) != writers*each || len(msgIDIn) != writers*each {
		t.Fatalf("saw %d sent records and %d msgid records inserted, want %d of each", len(sentFrom), len(msgIDIn), writers*each)
	}
	for n := 1; n <= writers*each; n++ {
		id, msg := fmt.Sprintf("u%03d", n), strconv.Itoa(n)
		if sentFrom[id] < msgIDIn[msg] {
			t.Fatalf("the sent record of %s was inserted (step %d) before its msgid's record was in (step %d)", id, sentFrom[id], msgIDIn[msg])
		}
	}
}

// TestSweepPastAReplacedProgressRecord: a push's progress record (<ucsId>/p) is replaced in
// place as its attempts go (a retry waiting, a message held by a pause): its row stays near the
// head of the table while its "at" moves forward. The sweep goes past such a live record and
// removes the expired records written after it.
func TestSweepPastAReplacedProgressRecord(t *testing.T) {
	clk, st, w := sweepRig(t)
	ctx := context.Background()
	day0 := clk.Now().Add(-31 * 24 * time.Hour) // past the retention period of 30 days
	// A push whose first attempt starts, and is retried.
	slow := push.Result{UcsID: "slow", ClientID: "c", State: push.StateSending, Attempts: 1, Accepted: day0, Updated: day0}
	if err := w.Write(ctx, store.FirstAttemptRecord(slow, day0)); err != nil {
		t.Fatal(err)
	}
	// Other pushes finish meanwhile: three steps' worth of records.
	const nOld = 3 * store.SweepBatch
	for start := 0; start < nOld; start += 250 {
		var recs []store.Write
		for i := start; i < start+250; i++ {
			recs = append(recs, final(fmt.Sprintf("old%04d", i), day0))
		}
		if err := w.Write(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	// The slow push's progress is recorded again within the retention period (a message held
	// by a pause or waiting out its retries; the queue keeps it up to nats.max_age, 168h).
	later := day0.Add(6 * 24 * time.Hour)
	slow.State, slow.Attempts, slow.Updated = push.StateQueued, 1, later
	if err := w.Write(ctx, store.ProgressRecord(slow, later)); err != nil {
		t.Fatal(err)
	}
	n, err := st.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, id := range []string{"old0000", "old0499", "old0500", "old1000", "old1499"} {
		if _, err := st.Final(ctx, id); !errors.Is(err, store.ErrNotFound) {
			kept = append(kept, id)
		}
	}
	if n != nOld || len(kept) > 0 {
		t.Fatalf("a sweep removed %d of %d records written 31 days ago (retention 30 days); still there: %v", n, nOld, kept)
	}
}

// A push whose delivery receipt was recorded before its sent record (the worker that sent it
// stopped first; a worker that gets the message hours later completes the records, with other
// pushes' records written between) never reads "sent" again: the late record is the copy of
// the receipt's result, and the sweep may take the receipt's record first.
func TestLateReceiptCopyKeepsTheResult(t *testing.T) {
	clk, st, w := sweepRig(t)
	ctx := context.Background()
	sent := push.Result{UcsID: "late", ClientID: "c", State: push.StateSent, Attempts: 1, MsgID: 4242,
		Accepted: clk.Now(), Updated: clk.Now(), Sent: clk.Now()}
	receipt := store.Receipt(sent, "success", clk.Now())
	if err := w.Write(ctx, store.FirstFinalRecord(receipt, receipt.Finished)); err != nil {
		t.Fatal(err)
	}
	// More than one step of the sweep of other pushes' results, an hour later.
	clk.Advance(time.Hour)
	var others []store.Write
	for i := range store.SweepBatch + 10 {
		others = append(others, final(fmt.Sprintf("other%d", i), clk.Now()))
	}
	if err := w.Write(ctx, others...); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if err := w.Write(ctx, store.ReceiptCopy(receipt, clk.Now())); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Outcome(ctx, sent.UcsID); err != nil || r.State != push.StateDelivered {
		t.Fatalf("before the retention period ends: %v, %v; want delivered", r.State, err)
	}
	// Half an hour past the retention period (30 days) of the receipt's record.
	clk.Advance(30*24*time.Hour - 2*time.Hour + 30*time.Minute)
	if _, err := st.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReceiptResult(ctx, sent.UcsID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the receipt's record, past its retention period: %v; want it swept", err)
	}
	if r, err := st.Outcome(ctx, sent.UcsID); err != nil || r.State != push.StateDelivered || r.MsgID != sent.MsgID {
		t.Fatalf("after the sweep took the receipt's record the push reads %q (%v); want %q", r.State, err, push.StateDelivered)
	}
}

// Open waits for a first answer as long as the URI's serverSelectionTimeoutMS, when it names
// one, rather than ConnectTimeout: a store that answers after 2 s is found with a URI of 15 s
// and a ConnectTimeout of 1 s.
func TestOpenWaitsTheURIsServerSelectionTimeout(t *testing.T) {
	f := embeddedtest.FerretDB(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimSuffix(strings.TrimPrefix(f.URI(), "mongodb://"), "/"))
	proxy.SetDown(true)
	up := time.AfterFunc(2*time.Second, func() { proxy.SetDown(false) })
	defer up.Stop()
	started := time.Now()
	st, err := store.Open(context.Background(), store.Options{
		URI:      "mongodb://" + proxy.Addr() + "/?serverSelectionTimeoutMS=15000",
		Database: embeddedtest.DBName(t), ConnectTimeout: time.Second,
	})
	if err != nil {
		t.Fatalf("the URI waits 15 s for a server, which answered after 2 s; Open gave up after %s: %v", time.Since(started).Round(100*time.Millisecond), err)
	}
	_ = st.Close(context.Background())
}

// serverSelectionTimeoutMS=0 in the URI is the driver's "no limit": Open waits ConnectTimeout
// for the first answer, as without it, rather than not at all.
func TestOpenWithZeroServerSelectionTimeout(t *testing.T) {
	f := embeddedtest.FerretDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	uri := strings.TrimSuffix(f.URI(), "/") + "/?serverSelectionTimeoutMS=0"
	if strings.Contains(f.URI(), "?") {
		t.Fatalf("FerretDB's URI %q has a query already", f.URI())
	}
	st, err := store.Open(ctx, store.Options{URI: uri, Database: embeddedtest.DBName(t)})
	if err != nil {
		t.Fatalf("Open of a running server with serverSelectionTimeoutMS=0: %v", err)
	}
	_ = st.Close(context.Background())
}

// TestSweepKeepsRecordsRenewedUnderIt: the hourly sweep reads the _ids of expired sign-in
// records, then deletes them. A record renewed in place between the two (a user's list of
// sessions at a new sign-in, a revocation of an application revoked again long after the
// first) is no longer expired, and stays.
func TestSweepKeepsRecordsRenewedUnderIt(t *testing.T) {
	clk := clocktest.New(t0)
	type held struct {
		coll    string
		release chan struct{}
	}
	reached := make(chan held)
	var once sync.Map
	var armed atomic.Bool // once the sweep starts
	// The sweep is held once its read of each collection's expired _ids has been answered.
	mon := &event.CommandMonitor{Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) {
		if ev.CommandName != "find" || !armed.Load() {
			return
		}
		coll, _ := ev.Reply.Lookup("cursor", "ns").StringValueOK()
		coll = coll[strings.IndexByte(coll, '.')+1:]
		if coll != "revoked_grants" && coll != "user_sessions" {
			return
		}
		if _, dup := once.LoadOrStore(coll, true); dup {
			return
		}
		h := held{coll: coll, release: make(chan struct{})}
		reached <- h
		<-h.release
	}}
	st := embeddedtest.StoreWith(t, store.Options{Now: clk.Now, Monitor: mon})
	ctx := context.Background()

	// Long ago: the user revoked the application, and signed in once.
	if err := st.RevokeGrant(ctx, "2020000042", "library", t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutSession(ctx, store.Session{Key: "k-old", SID: "sid-old", UserID: "2020000042", AuthTime: t0,
		Expires: t0.Add(time.Hour), At: t0}); err != nil {
		t.Fatal(err)
	}
	// Two days later the sweep runs; both records expired more than a day ago.
	clk.Set(t0.Add(50 * time.Hour))
	now := clk.Now()
	done := make(chan error, 1)
	armed.Store(true)
	go func() { _, err := st.Sweep(ctx); done <- err }()
	deadline := time.After(60 * time.Second)
	for range 2 {
		var h held
		select {
		case h = <-reached:
		case err := <-done:
			t.Fatalf("the sweep ended (%v) without reading revoked_grants and user_sessions", err)
		case <-deadline:
			t.Fatal("the sweep did not read its expired records")
		}
		switch h.coll {
		case "user_sessions": // the user signs in again
			if _, err := st.PutSession(ctx, store.Session{Key: "k-new", SID: "sid-new", UserID: "2020000042", AuthTime: now,
				Expires: now.Add(8 * time.Hour), At: now}); err != nil {
				t.Fatal(err)
			}
		case "revoked_grants": // the user revokes the application's access again
			if err := st.RevokeGrant(ctx, "2020000042", "library", now, now.Add(48*time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		close(h.release)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-deadline:
		t.Fatal("the sweep did not end")
	}
	if at, err := st.GrantRevokedAt(ctx, "2020000042", "library"); err != nil || !at.Equal(now) {
		t.Errorf("the revocation made during the sweep is gone: GrantRevokedAt = %s (%v)", at, err)
	}
	if ss, err := st.UserSessions(ctx, "2020000042"); err != nil || len(ss) == 0 || ss[len(ss)-1].SID != "sid-new" {
		t.Errorf("the session signed in during the sweep is not listed: %+v (%v)", ss, err)
	}
}

// TestSweeperSweepsAtStart: the service runs the sweeper hourly; a process that lives less
// than an hour (a rolling update, a standalone stack run for an afternoon) must still delete
// what expired: the first sweep comes at start (the service waits a minute for it).
func TestSweeperSweepsAtStart(t *testing.T) {
	clk, st, w := sweepRig(t)
	ctx := context.Background()
	if err := w.Write(ctx, final("expired-long-ago", clk.Now().Add(-31*24*time.Hour))); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); st.RunSweeper(rctx, 0, time.Hour) }()
	t.Cleanup(func() { cancel(); <-done })
	embeddedtest.Eventually(t, 15*time.Second, "a result past its retention swept at the sweeper's start", func() bool {
		_, err := st.Current(ctx, "expired-long-ago")
		return errors.Is(err, store.ErrNotFound)
	})
}

// TestOpenErrorHidesURISecrets: mongodb.uri carries the database's password (in its user part)
// and may carry the client key's password (tlsCertificateKeyFilePassword). A URI the driver
// refuses (a password holding a '%' not percent-encoded) does not have its secrets printed in
// Open's error, which the programs write to standard error at start.
func TestOpenErrorHidesURISecrets(t *testing.T) {
	host := strings.TrimPrefix(embeddedtest.MongoURI(t), "mongodb://")
	host = host[:strings.IndexAny(host, "/?")]
	for _, tc := range []struct{ uri, secret string }{
		{"mongodb://ucs:50%off-DbPass@" + host + "/", "%of"},
		{"mongodb://" + host + "/?tls=true&tlsCertificateKeyFilePassword=50%off-KeyPass", "off-KeyPass"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := store.Open(ctx, store.Options{URI: tc.uri, Database: embeddedtest.DBName(t), ConnectTimeout: 2 * time.Second})
		cancel()
		if err == nil {
			t.Errorf("%s: opened", tc.uri)
		} else if strings.Contains(err.Error(), tc.secret) || !strings.Contains(err.Error(), "mongodb.uri does not parse") {
			t.Errorf("Open's error shows the URI's secret %q, or does not name mongodb.uri:\n%v", tc.secret, err)
		}
	}
}
