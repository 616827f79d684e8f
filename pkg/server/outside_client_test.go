package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// TestForeignSentIDCostsAsUnknown: another client's ucsId reads as unknown and costs what an
// unknown one does (TestOtherClientsIDCostsAsUnknown states the rule), or the time a lookup
// takes would tell a client that a ucsId it holds is someone else's push, and that it was
// sent or delivered. A foreign push whose sent record is in the store, and one whose receipt's
// final result is too (the one read a lookup of a delivered push makes), cost the reads of the
// results an unknown ucsId costs, in a lookup of one push and in a batch lookup.
func TestForeignSentIDCostsAsUnknown(t *testing.T) {
	reads := embeddedtest.CountFinds("push_results")
	e := newEnvDeps(t, nil, service.Deps{MongoMonitor: reads.Monitor()})
	other := e.token("other", pushSecret)
	now := e.clock.Now()
	foreign := push.NewID(now)
	w := e.api.Store.NewWriter(store.WriterOptions{})
	r := push.Result{UcsID: foreign, ClientID: "pusher", State: push.StateSent, Attempts: 1, MsgID: 4242, Accepted: now, Updated: now, Sent: now}
	if err := w.Write(context.Background(), store.SentRecords(r, "oA", now)...); err != nil {
		t.Fatal(err)
	}
	delivered := r
	delivered.UcsID, delivered.MsgID = push.NewID(now), 4243
	if err := w.Write(context.Background(), store.SentRecords(delivered, "oA", now)...); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(context.Background(), store.FinalRecord(store.Receipt(delivered, "success", now), now)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	unknown := push.NewID(now)
	lookup := func(id string) (int64, answer) {
		var a answer
		n := reads.During(func() { a = e.do("GET", "/v1/infra/notification/mp/"+id, "", other, "") })
		return n, a
	}
	nForeign, aForeign := lookup(foreign)
	nDelivered, aDelivered := lookup(delivered.UcsID)
	nUnknown, aUnknown := lookup(unknown)
	if aForeign.status != http.StatusNotFound || aDelivered.status != http.StatusNotFound || aUnknown.status != http.StatusNotFound {
		t.Fatalf("lookups: foreign sent %d %s, foreign delivered %d %s, unknown %d %s",
			aForeign.status, aForeign.body, aDelivered.status, aDelivered.body, aUnknown.status, aUnknown.body)
	}
	if nForeign != nUnknown || nDelivered != nUnknown {
		t.Fatalf("another client's sent push costs %d reads of the results, its delivered push %d, an unknown ucsId %d",
			nForeign, nDelivered, nUnknown)
	}
	// A batch lookup reads the store in the other order; the same holds there.
	inBatch := func(id string) int64 {
		var a answer
		n := reads.During(func() {
			a = e.do("POST", "/v1/infra/notification/mp/results", "application/json", other, `{"ucsIds":["`+id+`"]}`)
		})
		if a.status != http.StatusOK || !strings.Contains(string(a.body), "not_found") {
			t.Fatalf("batch lookup of %s: %d %s, want it not found", id, a.status, a.body)
		}
		return n
	}
	if nForeign, nDelivered, nUnknown := inBatch(foreign), inBatch(delivered.UcsID), inBatch(unknown); nForeign != nUnknown || nDelivered != nUnknown {
		t.Fatalf("in a batch lookup, another client's sent push costs %d reads of the results, its delivered push %d, an unknown ucsId %d",
			nForeign, nDelivered, nUnknown)
	}
}

// TestInvisibleNoteheadIsBlank: a required data value that shows nothing is blank (DESIGN:
// every string free of what the platform removes; push.showsNothing lists the characters
// "that show nothing by themselves"). U+1D159 MUSICAL SYMBOL NULL NOTEHEAD is one (a spacing
// glyph with no ink, used with U+3164 and U+2800 to send "empty" messages): a main item of it
// alone is refused, as those are.
func TestInvisibleNoteheadIsBlank(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	for _, v := range []string{"\u3164", "\u2800", "\U0001D159\U0001D159"} {
		body := fmt.Sprintf(`{"userId":"2020000001","type":"JML","data":{"class":"%s","info":"x"}}`, v)
		a := e.doWith("POST", "/v1/infra/notification/mp", tok, body, nil)
		if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "data.class: must not be blank") {
			t.Errorf("data.class %+q: %d %s; want 400 data.class: must not be blank", v, a.status, a.body)
		}
	}
}
