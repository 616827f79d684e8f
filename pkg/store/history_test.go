package store_test

import (
	"context"
	"testing"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// TestHistory checks that every record of a push is read back, the most advanced first, and
// that a push with none has an empty history.
func TestHistory(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	const id = "01JHISTORY0000000000000000"
	if h, err := st.History(ctx, id); err != nil || len(h) != 0 {
		t.Fatalf("no records yet: %v %v", h, err)
	}
	base := push.Result{UcsID: id, ClientID: "c1", UserID: "2020000001", Type: "TDL", Accepted: at(0)}
	first := base
	first.State, first.Attempts = push.StateSending, 1
	sent := base
	sent.State, sent.Attempts, sent.MsgID, sent.Sent = push.StateSent, 1, 42, at(1)
	final := store.Receipt(sent, "failed:user block", at(2))
	ws := append([]store.Write{store.FirstAttemptRecord(first, at(0)), store.FinalRecord(final, at(2))}, store.SentRecords(sent, "o1", at(1))...)
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	if err := w.Write(ctx, ws...); err != nil {
		t.Fatal(err)
	}
	h, err := st.History(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 || h[0].Kind != store.RecordFinal || h[1].Kind != store.RecordSent || h[2].Kind != store.RecordProgress {
		t.Fatalf("history: %+v", h)
	}
	if h[0].Result.Reason != "failed:user block" || h[1].Result.MsgID != 42 || h[2].Result.State != push.StateSending {
		t.Errorf("records: %+v", h)
	}
}

// TestLaterAttemptCountsWhileItsProgressStands: a later attempt is recorded in two writes, the
// progress before it and then the attempt. The attempt reads as under way (in progress, in the
// history) while the progress it follows is the one written; once the progress is written
// again (the attempt put back, or its retry recorded), the attempt's record counts for
// nothing, even if it reaches the store only then.
func TestLaterAttemptCountsWhileItsProgressStands(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	const id = "01JLATERATTEMPT00000000000"
	before := push.Result{UcsID: id, ClientID: "c1", UserID: "2020000001", Type: "TDL", Accepted: at(0),
		State: push.StateQueued, Attempts: 1, LastError: "errcode -1", Updated: at(1)}
	attempt := before
	attempt.State, attempt.Attempts, attempt.Updated, attempt.To = push.StateSending, 2, at(2), "o1"
	read := func(want push.State, attempts int) {
		t.Helper()
		p, err := st.InProgress(ctx, id)
		if err != nil || p.State != want || p.Attempts != attempts {
			t.Fatalf("in progress: %s with %d attempt(s) (%v), want %s with %d", p.State, p.Attempts, err, want, attempts)
		}
		if p.Rev != 0 {
			t.Errorf("a read shows the progress record's revision %d", p.Rev)
		}
		h, err := st.History(ctx, id)
		if err != nil || len(h) != 1 || h[0].Result.State != want || h[0].Result.Attempts != attempts {
			t.Fatalf("history: %+v (%v), want one record, %s with %d attempt(s)", h, err, want, attempts)
		}
	}

	progress, mark := store.AttemptRecords(before, attempt, at(2))
	if err := w.Write(ctx, progress); err != nil {
		t.Fatal(err)
	}
	read(push.StateQueued, 1) // the attempt's record is not written yet
	if err := w.Write(ctx, mark); err != nil {
		t.Fatal(err)
	}
	read(push.StateSending, 2)
	if err := w.Write(ctx, mark); err != nil { // written again, its answer lost
		t.Fatalf("the attempt's record written again: %v", err)
	}
	read(push.StateSending, 2)

	// The attempt is put back, then the records of another try land late.
	back := before
	back.Updated = at(3)
	if err := w.Write(ctx, store.ProgressRecord(back, at(3))); err != nil {
		t.Fatal(err)
	}
	read(push.StateQueued, 1)
	_, mark2 := store.AttemptRecords(before, attempt, at(2)) // its progress never taken
	if err := w.Write(ctx, mark2); err != nil {
		t.Fatal(err)
	}
	read(push.StateQueued, 1)
	if err := w.Write(ctx, mark); err != nil {
		t.Fatal(err)
	}
	read(push.StateQueued, 1)
}
