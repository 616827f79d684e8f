package store_test

import (
	"context"
	"testing"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// TestProgressLog: a push's progress is the entry of its progress record with the greatest key.
// An entry that reaches the store after a greater one (a stopped worker's write, late on a slow
// store) changes nothing; each write drops the one its delivery wrote before; the first
// attempt's record, inserted whole, is the progress until the first entry.
func TestProgressLog(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	ctx := context.Background()
	const id = "01JPROGRESS000000000000000"
	base := push.Result{UcsID: id, ClientID: "c1", UserID: "2020000001", Type: "TDL", Accepted: at(0)}
	write := func(r push.Result) {
		t.Helper()
		if err := w.Write(ctx, store.ProgressRecord(r, r.Updated)); err != nil {
			t.Fatal(err)
		}
	}
	progress := func(want push.State, attempts int, rev string) {
		t.Helper()
		p, err := st.InProgress(ctx, id)
		if err != nil || p.State != want || p.Attempts != attempts || p.Rev != rev {
			t.Fatalf("progress %+v (%v), want %s with %d attempt(s) at %q", p, err, want, attempts, rev)
		}
	}

	first := base
	first.State, first.Attempts, first.Updated = push.StateSending, 1, at(1)
	if err := w.Write(ctx, store.FirstAttemptRecord(first, at(1))); err != nil {
		t.Fatal(err)
	}
	progress(push.StateSending, 1, "")

	// Delivery 1 writes a retry after its call, then marks attempt 2.
	rev := store.DeliveryRev(1)
	retry := base
	rev = store.NextRev(rev)
	retry.State, retry.Attempts, retry.Updated, retry.Rev = push.StateQueued, 1, at(2), rev
	write(retry)
	progress(push.StateQueued, 1, rev)
	mark := retry
	rev = store.NextRev(rev)
	mark.State, mark.Attempts, mark.Updated, mark.Rev = push.StateSending, 2, at(3), rev
	// The mark is slow: the worker stops and puts the progress back with its next entry,
	// which the store takes first.
	back := retry
	back.Updated, back.Rev = at(4), store.NextRev(rev)
	write(back)
	write(mark) // reaches the store late
	progress(push.StateQueued, 1, back.Rev)

	// The next delivery (3: the second was handed back unread) writes above all of it, even
	// when a late entry of delivery 1 lands after.
	d3 := store.DeliveryRev(3)
	next := store.Rebase(d3, back.Rev)
	if next != d3 {
		t.Fatalf("delivery 3 after delivery 1's entries: %q, want %q", next, d3)
	}
	mark3 := back
	mark3.State, mark3.Attempts, mark3.Updated, mark3.Rev = push.StateSending, 2, at(5), store.NextRev(next)
	write(mark3)
	late := back
	late.State, late.Updated, late.Rev = push.StateSending, at(6), store.NextRev(back.Rev)
	write(late)
	progress(push.StateSending, 2, mark3.Rev)

	// A delivery counted from one again (a consumer made anew) moves to the next epoch, above
	// what it read, and the deliveries after it follow it there; an entry of its own, or the
	// whole first record read by a delivery after the first, moves nothing.
	again := store.Rebase(store.DeliveryRev(1), mark3.Rev)
	if again <= mark3.Rev {
		t.Fatalf("delivery 1 after delivery 3's entry: %q, not above %q", again, mark3.Rev)
	}
	againEntry := store.NextRev(again)
	if got := store.Rebase(again, againEntry); got != again {
		t.Fatalf("delivery 1 reading its own entry moved to %q", got)
	}
	if other := store.DeliveryRev(1); store.Rebase(other, store.NextRev(store.DeliveryRev(1))) <= store.NextRev(store.NextRev(other)) {
		t.Fatal("a delivery 1 reading another delivery 1's entry (a count started again) did not move above it")
	}
	second := store.Rebase(store.DeliveryRev(2), againEntry)
	if second <= store.NextRev(store.NextRev(againEntry)) || store.Rebase(second, mark3.Rev) != second {
		t.Fatalf("delivery 2 after the moved delivery 1: %q", second)
	}
	if d2 := store.DeliveryRev(2); store.Rebase(d2, "") != d2 {
		t.Fatalf("delivery 2 after a first attempt's record moved")
	}
	if d1 := store.DeliveryRev(1); store.Rebase(d1, "") <= store.NextRev(d1) {
		t.Fatalf("delivery 1 after a first attempt's record not its own (a count started again) did not move above it")
	}

	// Each delivery keeps only its latest entry, and the history shows the progress.
	var d struct {
		Log map[string]push.Result `bson:"log"`
	}
	if err := st.RawResult(ctx, id+"/p", &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Log) != 3 { // delivery 1's put-back and late entry, delivery 3's mark
		t.Errorf("log entries: %d, want 3: %v", len(d.Log), d.Log)
	}
	h, err := st.History(ctx, id)
	if err != nil || len(h) != 1 || h[0].Kind != store.RecordProgress || h[0].Result.Attempts != 2 || h[0].Result.State != push.StateSending {
		t.Fatalf("history: %+v %v", h, err)
	}

	// An entry of a push with no record yet (its first attempt's record not written) makes one.
	const other = "01JPROGRESS000000000000001"
	o := base
	o.UcsID, o.State, o.Attempts, o.Updated, o.Rev = other, push.StateQueued, 0, at(7), store.NextRev(store.DeliveryRev(2))
	if err := w.Write(ctx, store.ProgressRecord(o, o.Updated)); err != nil {
		t.Fatal(err)
	}
	if p, err := st.Current(ctx, other); err != nil || p.State != push.StateQueued || p.Rev != o.Rev {
		t.Fatalf("current of a push with one entry: %+v %v", p, err)
	}
	if err := w.Write(ctx, store.FirstAttemptRecord(o, o.Updated)); err == nil {
		t.Fatal("a first attempt's record was taken beside a progress entry")
	}
}
