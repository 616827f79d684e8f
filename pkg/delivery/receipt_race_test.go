package delivery_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// TestLateReceiptAfterMissedFailureKeepsIt: worker A sends (msgid M), announces it as sent and
// is killed before its sent record. Worker B gets the message after the ack wait, asks the
// platform again and is refused (refusedAfter): that failure is the push's first final
// result, in the store. Its announcement does not reach the front end that applies receipts
// (best effort: that front end's NATS connection was down a moment, or B died right after its
// ack). The platform's receipt for M then comes (a repeat of a callback it got no success for).
// Every front end must answer the same result, and the first final result must stay the
// push's result.
func TestLateReceiptAfterMissedFailureKeepsIt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	svc, st := r.receiptFrontEnd(t)
	id, msgID := r.sentThenDied(t, svc) // worker A: svc heard of the send
	// Worker B; its announcement of the failure is lost on the way to svc.
	pc := r.refusedAfter(func() {})
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.AnnounceSent = pc, svc.RememberSent })
	embeddedtest.Eventually(t, 30*time.Second, "worker B fails the push", func() bool {
		res, err := r.st.Outcome(ctx, id)
		return err == nil && res.State == push.StateFailed
	})
	embeddedtest.Eventually(t, 20*time.Second, "the queue lets go of the push", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	// The platform's (repeated) receipt.
	if err := svc.KeepEvent(ctx, receipt(msgID, "success")); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the receipt is applied", func() bool { return svc.ReceiptsWaiting() == 0 && receiptApplied(ctx, r.st, id) })
	e := r.resultsOnceDone(t, st, svc, id)
	if e.mem.State != e.fresh.State || e.mem.State != e.stored.State {
		t.Fatalf("push %s: front ends disagree on its final result:\n"+
			"  store Outcome: %s %q (err %v)\n  front end that applied the receipt: %s (err %v)\n  front end started since: %s %q (err %v)",
			id, e.stored.State, e.stored.Reason, e.storedErr, e.mem.State, e.memErr, e.fresh.State, e.fresh.Reason, e.freshErr)
	}
}

// receiptApplied reports whether a final result is recorded where a receipt puts it (<ucsId>/f).
func receiptApplied(ctx context.Context, st *store.Store, id string) bool {
	_, err := st.ReceiptResult(ctx, id)
	return err == nil
}

// lookupAfterFirstWrite passes records to the real writer; right after the first write
// (worker B's failure of the push) it runs look, as a client's lookup at a front end arriving
// at that moment.
type lookupAfterFirstWrite struct {
	delivery.Events
	once sync.Once
	look func()
}

func (w *lookupAfterFirstWrite) Write(ctx context.Context, ws ...store.Write) error {
	err := w.Events.Write(ctx, ws...)
	w.once.Do(w.look)
	return err
}

// TestLookupWhileFailureMeetsReceipt: as TestReceiptDuringRedeliveryStaysFirstFinal (the
// receipt, delivered, is recorded while worker B decides to fail the push, and wins), with a client's lookup reaching a front end
// that has no result of the push in memory (started since, or its memory full) right after B's
// first write of its failure. That front end must not keep answering a result the store does
// not have.
func TestLookupWhileFailureMeetsReceipt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	svc, st := r.receiptFrontEnd(t)
	id, msgID := r.sentThenDied(t, svc)
	other, err := notification.New(notification.Config{Publisher: r.pub, Waiting: queue.NewWaiting(r.js, st, r.qcfg.Consumer), Store: r.st})
	if err != nil {
		t.Fatal(err)
	}
	pc := r.refusedAfter(func() {
		if err := svc.KeepEvent(ctx, receipt(msgID, "success")); err != nil {
			t.Error(err)
			return
		}
		embeddedtest.Eventually(t, 10*time.Second, "the receipt is recorded", func() bool { return receiptApplied(ctx, r.st, id) })
	})
	var during push.Result
	var duringErr error
	looked := make(chan struct{})
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Platform = pc
		c.AnnounceSent, c.Announce = svc.RememberSent, svc.Remember
		c.Events = &lookupAfterFirstWrite{Events: c.Events, look: func() {
			defer close(looked)
			during, duringErr = other.Result(ctx, "c1", id)
		}}
	})
	select {
	case <-looked:
	case <-time.After(30 * time.Second):
		t.Fatal("worker B never wrote")
	}
	e := r.resultsOnceDone(t, st, svc, id)
	later, laterErr := other.Result(ctx, "c1", id)
	if later.State != e.stored.State || e.mem.State != e.stored.State {
		t.Fatalf("push %s: the store says %s (err %v), the front end that applied the receipt %s (err %v), "+
			"the front end looked up in between %s %q (err %v; in between it answered %s, err %v)",
			id, e.stored.State, e.storedErr, e.mem.State, e.memErr, later.State, later.Reason, laterErr, during.State, duringErr)
	}
}
