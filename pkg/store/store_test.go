package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/store"
)

var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func TestFold(t *testing.T) {
	ev := func(k store.Kind, s, attempt int, extra ...func(*store.Event)) store.Event {
		e := store.Event{UcsID: "u", ClientID: "c", Kind: k, At: at(s), Attempt: attempt}
		for _, f := range extra {
			f(&e)
		}
		return e
	}
	withErr := func(msg string) func(*store.Event) { return func(e *store.Event) { e.Error = msg } }
	withMsg := func(id int64) func(*store.Event) { return func(e *store.Event) { e.MsgID = id } }
	retryAt := func(s int) func(*store.Event) { return func(e *store.Event) { e.RetryAt = at(s) } }
	cases := []struct {
		name     string
		evs      []store.Event
		state    store.State
		attempts int
		lastErr  string
		reason   string
		msgID    int64
		retryAt  time.Time
	}{
		{"queued", []store.Event{ev(store.KindQueued, 0, 0)}, store.StateQueued, 0, "", "", 0, time.Time{}},
		{"sending", []store.Event{ev(store.KindQueued, 0, 0), ev(store.KindAttempt, 1, 1)}, store.StateSending, 1, "", "", 0, time.Time{}},
		{"waiting for retry", []store.Event{ev(store.KindQueued, 0, 0), ev(store.KindAttempt, 1, 1), ev(store.KindRetry, 2, 1, withErr("busy"), retryAt(4))},
			store.StateQueued, 1, "busy", "", 0, at(4)},
		{"retrying", []store.Event{ev(store.KindQueued, 0, 0), ev(store.KindAttempt, 1, 1), ev(store.KindRetry, 2, 1, withErr("busy"), retryAt(4)), ev(store.KindAttempt, 4, 2)},
			store.StateSending, 2, "busy", "", 0, time.Time{}},
		{"sent after retry", []store.Event{ev(store.KindQueued, 0, 0), ev(store.KindRetry, 2, 1, withErr("busy")), ev(store.KindSent, 5, 2, withMsg(77))},
			store.StateSent, 2, "busy", "", 77, time.Time{}},
		{"failed", []store.Event{ev(store.KindQueued, 0, 0), ev(store.KindFailed, 1, 1, withErr("no binding"))}, store.StateFailed, 1, "", "no binding", 0, time.Time{}},
		{"queued stamped late by a skewed clock", []store.Event{ev(store.KindAttempt, 1, 1), ev(store.KindSent, 2, 1, withMsg(5)), ev(store.KindQueued, 3, 0)},
			store.StateSent, 1, "", "", 5, time.Time{}},
		{"redelivered attempt after sent", []store.Event{ev(store.KindQueued, 0, 0), ev(store.KindSent, 2, 1, withMsg(5)), ev(store.KindAttempt, 3, 2)},
			store.StateSent, 2, "", "", 5, time.Time{}},
		{"final is sticky", []store.Event{ev(store.KindFailed, 1, 1, withErr("43004 require subscribe")), ev(store.KindSent, 2, 2, withMsg(9))},
			store.StateFailed, 2, "", "43004 require subscribe", 0, time.Time{}},
		{"events out of order", []store.Event{ev(store.KindSent, 5, 1, withMsg(3)), ev(store.KindAttempt, 4, 1), ev(store.KindQueued, 0, 0)},
			store.StateSent, 1, "", "", 3, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := store.Fold("u", c.evs)
			if r.State != c.state || r.Attempts != c.attempts || r.LastError != c.lastErr || r.Reason != c.reason || r.MsgID != c.msgID || !r.RetryAt.Equal(c.retryAt) {
				t.Fatalf("got state=%s attempts=%d lastErr=%q reason=%q msgid=%d retryAt=%v", r.State, r.Attempts, r.LastError, r.Reason, r.MsgID, r.RetryAt)
			}
			if r.ClientID != "c" {
				t.Fatalf("client %q", r.ClientID)
			}
		})
	}
}

func TestApplyReceipt(t *testing.T) {
	for _, c := range []struct {
		status string
		state  store.State
		reason string
	}{
		{"success", store.StateDelivered, ""},
		{"failed:user block", store.StateFailed, "failed:user block"},
		{"failed: system failed", store.StateFailed, "failed: system failed"},
	} {
		r := store.Result{State: store.StateSent, MsgID: 1}
		r.ApplyReceipt(store.Receipt{MsgID: 1, Status: c.status, At: at(9)})
		if r.State != c.state || r.Reason != c.reason || !r.Finished.Equal(at(9)) {
			t.Errorf("%s: got %s %q", c.status, r.State, r.Reason)
		}
	}
	r := store.Result{State: store.StateFailed, Reason: "x"}
	r.ApplyReceipt(store.Receipt{Status: "success"})
	if r.State != store.StateFailed {
		t.Error("a receipt changed a final state")
	}
}

func TestResultFromStore(t *testing.T) {
	st := embeddedtest.Store(t, func() time.Time { return t0 })
	ctx := context.Background()
	if _, err := st.Result(ctx, "01JNOTHERE0000000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing result: %v", err)
	}
	evs := []store.Event{
		{UcsID: "A", ClientID: "c1", Kind: store.KindQueued, At: at(0), UserID: "2020000001", Type: "TDL"},
		{UcsID: "A", ClientID: "c1", Kind: store.KindAttempt, At: at(1), Attempt: 1},
		{UcsID: "A", ClientID: "c1", Kind: store.KindSent, At: at(2), Attempt: 1, MsgID: 4242},
		{UcsID: "B", ClientID: "c2", Kind: store.KindQueued, At: at(0)},
	}
	if err := st.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	r, err := st.Result(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.StateSent || r.MsgID != 4242 || r.ClientID != "c1" || r.UserID != "2020000001" || r.Type != "TDL" || !r.Accepted.Equal(at(0)) {
		t.Fatalf("result %+v", r)
	}
	if err := st.PutReceipt(ctx, store.Receipt{MsgID: 4242, Status: "success", At: at(3)}); err != nil {
		t.Fatal(err)
	}
	// The platform repeats event pushes: a second, different report changes nothing.
	if err := st.PutReceipt(ctx, store.Receipt{MsgID: 4242, Status: "failed: system failed", At: at(4)}); err != nil {
		t.Fatal(err)
	}
	r, err = st.Result(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.StateDelivered || !r.Finished.Equal(at(3)) {
		t.Fatalf("after receipt: %+v", r)
	}
	rb, _ := st.Result(ctx, "B")
	if rb.State != store.StateQueued || rb.ClientID != "c2" {
		t.Fatalf("B: %+v", rb)
	}
}

func TestBindings(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	if _, err := st.Binding(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing binding: %v", err)
	}
	if err := st.PutBinding(ctx, store.Binding{UserID: "2020000001", OpenID: "oA", Following: true}); err != nil {
		t.Fatal(err)
	}
	n, err := st.SetFollowing(ctx, "oA", false)
	if err != nil || n != 1 {
		t.Fatalf("unfollow: %d %v", n, err)
	}
	b, err := st.Binding(ctx, "2020000001")
	if err != nil || b.Following || b.OpenID != "oA" {
		t.Fatalf("binding %+v %v", b, err)
	}
	if n, _ := st.SetFollowing(ctx, "unknown", true); n != 0 {
		t.Fatalf("unknown openid changed %d bindings", n)
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
				errs <- w.Write(ctx, store.Event{UcsID: fmt.Sprintf("g%d-%d", g, i), ClientID: "c", Kind: store.KindQueued, At: at(0)})
			}
		}()
	}
	w.Post(store.Event{UcsID: "posted", ClientID: "c", Kind: store.KindQueued, At: at(0)})
	wg.Wait()
	w.Close()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"g0-0", "g19-49", "g7-21", "posted"} {
		if r, err := st.Result(ctx, id); err != nil || r.State != store.StateQueued {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
	}
	if err := w.Write(ctx, store.Event{UcsID: "late"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

func TestSweep(t *testing.T) {
	now := at(0)
	st := embeddedtest.Store(t, func() time.Time { return now })
	ctx := context.Background()
	if st.ExpiresItself() {
		t.Fatal("FerretDB reported TTL index support; the sweep test assumes it has none")
	}
	old := now.Add(-31 * 24 * time.Hour)
	if err := st.AppendEvents(ctx, []store.Event{
		{UcsID: "old", ClientID: "c", Kind: store.KindQueued, At: old},
		{UcsID: "new", ClientID: "c", Kind: store.KindQueued, At: now},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutReceipt(ctx, store.Receipt{MsgID: 1, Status: "success", At: old}); err != nil {
		t.Fatal(err)
	}
	n, err := st.Sweep(ctx)
	if err != nil || n != 2 {
		t.Fatalf("swept %d, %v", n, err)
	}
	if _, err := st.Result(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("old record kept: %v", err)
	}
	if _, err := st.Result(ctx, "new"); err != nil {
		t.Fatalf("new record: %v", err)
	}
}

// BenchmarkWriter measures events recorded per second through group commit, from 64
// goroutines (a worker's default concurrency).
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
			if err := w.Write(ctx, store.Event{UcsID: id, ClientID: "c", Kind: store.KindQueued, At: t0}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkResult measures looking a result up by ucsId.
func BenchmarkResult(b *testing.B) {
	st := embeddedtest.Store(b, nil)
	ctx := context.Background()
	var evs []store.Event
	for i := range 1000 {
		id := fmt.Sprintf("r%d", i)
		evs = append(evs,
			store.Event{UcsID: id, ClientID: "c", Kind: store.KindQueued, At: at(0)},
			store.Event{UcsID: id, ClientID: "c", Kind: store.KindAttempt, At: at(1), Attempt: 1},
			store.Event{UcsID: id, ClientID: "c", Kind: store.KindSent, At: at(2), Attempt: 1, MsgID: int64(i + 1)})
	}
	if err := st.AppendEvents(ctx, evs); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := st.Result(ctx, fmt.Sprintf("r%d", i%1000)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

func TestSweepSignInRecords(t *testing.T) {
	now := at(0)
	st := embeddedtest.Store(t, func() time.Time { return now })
	ctx := context.Background()
	if err := st.PutSession(ctx, store.Session{Key: "old", SID: "sid-old", Expires: now.Add(-48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSession(ctx, store.Session{Key: "live", SID: "sid-live", Expires: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// The old session and the record of its sid.
	if n, err := st.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("swept %d, %v", n, err)
	}
	if se, err := st.SessionBySID(ctx, "sid-live"); err != nil || se.Key != "live" {
		t.Fatalf("live session swept: %v", err)
	}
	if _, err := st.SessionBySID(ctx, "sid-old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("old session found: %v", err)
	}
}
