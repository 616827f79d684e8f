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
