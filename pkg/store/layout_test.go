package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// idAt is a ucsId of a push accepted at t.
func idAt(t time.Time) string { return ulid.MustNew(ulid.Timestamp(t), ulid.DefaultEntropy()).String() }

// openStore opens the store of database db on f with the clock clk, counting its reads of
// push_results in reads.
func openStore(t *testing.T, uri, db string, clk *clocktest.Clock, reads *embeddedtest.Finds) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{URI: uri, Database: db, Now: clk.Now, Monitor: reads.Monitor()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return st
}

// TestOutcomeReads: what a lookup of a push that left the queue costs, by what became of it and
// by the order of the reads. Read as ReceiptFirst (the lookup of one push), a delivered push
// costs one read, and anything else two; as OutcomeFirst (a batch lookup), a ucsId the service
// never gave out costs one, as does a push a worker failed, and a sent or delivered push two.
// Both orders answer the same, and another client's push costs what an unknown ucsId does.
func TestOutcomeReads(t *testing.T) {
	clk := clocktest.New(at(0))
	f := embeddedtest.FerretDB(t)
	reads := embeddedtest.CountFinds("push_results")
	st := openStore(t, f.URI(), embeddedtest.DBName(t), clk, reads)
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	ctx := context.Background()
	failed, sentID, deliveredID := idAt(at(-60)), idAt(at(-50)), idAt(at(-40))
	sent := push.Result{UcsID: sentID, ClientID: "c", State: push.StateSent, Attempts: 1, MsgID: 41, Sent: at(-1)}
	recs := append(store.SentRecords(sent, "oA", at(-1)), delivered(deliveredID, 42, at(-1))...)
	recs = append(recs, store.FirstFinalRecord(push.Result{UcsID: failed, ClientID: "c", State: push.StateFailed, Attempts: 5}, at(-1)))
	if err := w.Write(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id    string
		state push.State
		// reads by store.ReceiptFirst and by store.OutcomeFirst
		receiptFirst, outcomeFirst int64
	}{
		// Unknown, whenever its ULID says it was made: a store that held no results when its
		// layout came has no earlier one to read.
		{idAt(at(-3600 * 24 * 365)), "", 2, 1},
		{idAt(at(0)), "", 2, 1},
		{failed, push.StateFailed, 2, 1},
		{sentID, push.StateSent, 2, 2},
		{deliveredID, push.StateDelivered, 1, 2},
	} {
		for order, want := range map[store.Order]int64{store.ReceiptFirst: c.receiptFirst, store.OutcomeFirst: c.outcomeFirst} {
			for _, client := range []string{"c", "another"} {
				var r push.Result
				var err error
				if client != "c" {
					// another client's push costs what an unknown ucsId does by the same order
					want = map[store.Order]int64{store.ReceiptFirst: 2, store.OutcomeFirst: 1}[order]
				}
				if n := reads.During(func() { r, err = st.OutcomeOf(ctx, client, c.id, order) }); n != want {
					t.Errorf("%s (%s) by order %d for client %s: %d reads, want %d", c.id, c.state, order, client, n, want)
				}
				switch {
				case (c.state == "" || client != "c") && !errors.Is(err, store.ErrNotFound):
					t.Errorf("%s by order %d for client %s: %+v %v, want ErrNotFound", c.id, order, client, r, err)
				case c.state != "" && client == "c" && (err != nil || r.State != c.state):
					t.Errorf("%s by order %d: %+v %v, want %s", c.id, order, r, err, c.state)
				}
			}
		}
	}
	// A worker's failure of a push that was sent changes nothing: the sent record stays, and
	// the receipt decides.
	if err := w.Write(ctx, store.FirstFinalRecord(push.Result{UcsID: sentID, ClientID: "c", State: push.StateFailed}, at(0))); !errors.Is(err, store.ErrFinalExists) {
		t.Fatalf("a worker's failure of a sent push: %v, want ErrFinalExists", err)
	}
	if r, err := st.Current(ctx, sentID); err != nil || r.State != push.StateSent {
		t.Fatalf("sent push after a late failure: %+v %v", r, err)
	}
}

// TestEarlierLayout: a store written by an earlier version, which kept a push's sent record at
// <ucsId>/s and every final result at <ucsId>, is read as written: its pushes are found, sent,
// delivered by a receipt that comes after the upgrade, or final, by every process that opens
// the store. A ucsId made after the upgrade, and any ucsId once the earlier records have
// expired, costs two reads when unknown.
func TestEarlierLayout(t *testing.T) {
	clk := clocktest.New(at(0))
	f := embeddedtest.FerretDB(t)
	db := embeddedtest.DBName(t)
	ctx := context.Background()
	client, err := mongo.Connect(ctx, options.Client().ApplyURI(f.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	// The records an earlier version wrote: a sent push awaiting its receipt, a delivered one.
	sentID, doneID := idAt(at(-7200)), idAt(at(-7100))
	old := client.Database(db).Collection("push_results")
	type doc struct {
		ID          string `bson:"_id"`
		push.Result `bson:",inline"`
		At          time.Time `bson:"at"`
	}
	sent := func(id string, msgID int64) push.Result {
		return push.Result{UcsID: id, ClientID: "c", State: push.StateSent, Attempts: 1, MsgID: msgID, Sent: at(-7000)}
	}
	if _, err := old.InsertMany(ctx, []any{
		doc{ID: sentID + "/s", Result: sent(sentID, 51), At: at(-7000)},
		doc{ID: doneID + "/s", Result: sent(doneID, 52), At: at(-7000)},
		doc{ID: doneID, Result: store.Receipt(sent(doneID, 52), "success", at(-6000)), At: at(-6000)},
	}); err != nil {
		t.Fatal(err)
	}
	// An operator's tool of the new version, run three days before the upgrade, does not
	// start the upgrade's window.
	toolClock := clocktest.New(at(-3 * 24 * 3600))
	tool, err := store.Open(ctx, store.Options{URI: f.URI(), Database: db, Now: toolClock.Now, Tool: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = tool.Close(ctx)
	st := openStore(t, f.URI(), db, clk, embeddedtest.CountFinds("push_results"))
	for id, want := range map[string]push.State{sentID: push.StateSent, doneID: push.StateDelivered} {
		if r, err := st.Outcome(ctx, id); err != nil || r.State != want || r.ClientID != "c" {
			t.Fatalf("earlier record %s: %+v %v, want %s", id, r, err, want)
		}
	}
	// The receipt of the sent push comes after the upgrade.
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	// The platform repeats the delivered push's receipt with another status: the store keeps
	// the first final result, which an earlier front end wrote at <ucsId>, and says so.
	again := store.Receipt(sent(doneID, 52), "failed:user block", at(1))
	if err := w.Write(ctx, store.FirstFinalRecord(again, at(1))); !errors.Is(err, store.ErrFinalExists) {
		t.Errorf("a second receipt of a push delivered before the upgrade: %v, want ErrFinalExists (the front end would take it for the result)", err)
	}
	if r, err := st.Current(ctx, doneID); err != nil || r.State != push.StateDelivered {
		t.Errorf("the push delivered before the upgrade after a second receipt: %+v %v, want delivered", r, err)
	}
	got, err := st.Outcome(ctx, sentID)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, store.FirstFinalRecord(store.Receipt(got, "success", at(1)), at(1))); err != nil {
		t.Fatal(err)
	}
	// Another process opens the store later: the upgrade's time stays the first one's. A worker
	// of the earlier version, still running during the upgrade, sends a push accepted after it.
	clk.Advance(time.Hour)
	reads2 := embeddedtest.CountFinds("push_results")
	st2 := openStore(t, f.URI(), db, clk, reads2)
	if r, err := st2.Outcome(ctx, sentID); err != nil || r.State != push.StateDelivered {
		t.Fatalf("earlier sent push after its receipt: %+v %v", r, err)
	}
	lateID := idAt(at(600))
	if _, err := old.InsertOne(ctx, doc{ID: lateID + "/s", Result: sent(lateID, 53), At: at(700)}); err != nil {
		t.Fatal(err)
	}
	if r, err := st2.Outcome(ctx, lateID); err != nil || r.State != push.StateSent {
		t.Fatalf("a push an earlier worker sent during the upgrade: %+v %v", r, err)
	}
	unknown := func(what string, id string, want int64) {
		t.Helper()
		var err error
		if n := reads2.During(func() { _, err = st2.Outcome(ctx, id) }); n != want || !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s, unknown: %d reads, %v; want %d, ErrNotFound", what, n, err, want)
		}
	}
	unknown("a ucsId made before the upgrade", idAt(at(-10)), 3)
	unknown("a ucsId made during the upgrade", idAt(clk.Now()), 3)
	clk.Advance(24 * time.Hour)
	unknown("a ucsId made a day after the upgrade", idAt(clk.Now()), 2)
	// Once the earlier records have surely expired (the default retention is 30 days), the
	// earlier layout is read no more.
	clk.Advance(61 * 24 * time.Hour)
	unknown("a ucsId made before the upgrade, after the retention", idAt(at(-10)), 2)
}

// TestEarlierLayoutWithoutResults: a store of an earlier version may hold no result at the
// upgrade (none kept past the retention after a quiet spell) while it holds bindings: workers
// of the earlier version, still running during the upgrade, send to them and write their sent
// records where they did, at <ucsId>/s, which every process reads. A new store (no result, no
// binding) reads no earlier layout: an unknown ucsId costs two reads (<ucsId>/f and <ucsId>).
func TestEarlierLayoutWithoutResults(t *testing.T) {
	clk := clocktest.New(at(0))
	f := embeddedtest.FerretDB(t)
	ctx := context.Background()
	client, err := mongo.Connect(ctx, options.Client().ApplyURI(f.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	type doc struct {
		ID          string `bson:"_id"`
		push.Result `bson:",inline"`
		At          time.Time `bson:"at"`
	}

	db := embeddedtest.DBName(t)
	if _, err := client.Database(db).Collection("bindings").InsertOne(ctx, store.Binding{UserID: "2020000001", OpenID: "oA", Updated: at(-3600)}); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, f.URI(), db, clk, embeddedtest.CountFinds("push_results"))
	clk.Advance(10 * time.Minute)
	id := idAt(clk.Now())
	sent := push.Result{UcsID: id, ClientID: "c", State: push.StateSent, Attempts: 1, MsgID: 77, Sent: clk.Now()}
	if _, err := client.Database(db).Collection("push_results").InsertOne(ctx, doc{ID: id + "/s", Result: sent, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Outcome(ctx, id); err != nil || r.State != push.StateSent {
		t.Fatalf("a push an earlier worker sent during the upgrade of a store without results: %+v %v, want sent", r, err)
	}
	if r, err := openStore(t, f.URI(), db, clk, embeddedtest.CountFinds("push_results")).Outcome(ctx, id); err != nil || r.State != push.StateSent {
		t.Fatalf("the next process: %+v %v, want sent", r, err)
	}

	reads := embeddedtest.CountFinds("push_results")
	fresh := openStore(t, f.URI(), embeddedtest.DBName(t)+"_new", clk, reads)
	if n := reads.During(func() { _, err = fresh.Outcome(ctx, idAt(clk.Now())) }); n != 2 || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a new store, unknown ucsId: %d reads, %v; want 2, ErrNotFound", n, err)
	}
}
