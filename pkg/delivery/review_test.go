package delivery_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// refusedAfter is worker B's platform: B asks again of the follower the call that worker A
// made, whose answer A never recorded (its outcome in doubt); the platform runs before at that
// call, once, and refuses it 43101: the user, having got A's message, has since refused the
// official account's messages. B then fails the push, after a call.
func (r *rig) refusedAfter(before func()) *platform.Client {
	var once sync.Once
	return r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "/message/template/send") {
			return false
		}
		once.Do(before)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"errcode":43101,"errmsg":"user refuse to accept the msg"}`)
		return true
	})
}

// TestReceiptDuringRedeliveryStaysFirstFinal: worker A sends (msgid M), announces it and is
// killed before its sent record. Worker B gets the message after the ack wait, reads its
// history (attempt 1 under way, no receipt yet) and asks the platform again. Right then the
// platform's receipt for M, "success", is recorded (at <ucsId>/f). The user has since refused
// the account's messages, and B's call is refused 43101: B fails the push, and its failure meets
// the receipt there, which wins: the first final result of a push stays its result, in the
// store and in every front end.
func TestReceiptDuringRedeliveryStaysFirstFinal(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	svc, st := r.receiptFrontEnd(t)
	id, msgID := r.sentThenDied(t, svc) // worker A
	applied := make(chan struct{})
	pc := r.refusedAfter(func() {
		defer close(applied)
		if err := svc.KeepEvent(ctx, receipt(msgID, "success")); err != nil {
			t.Error(err)
			return
		}
		embeddedtest.Eventually(t, 10*time.Second, "the receipt is recorded: delivered", func() bool {
			res, err := r.st.Current(ctx, id)
			return err == nil && res.State == push.StateDelivered
		})
	})
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Platform = pc
		c.AnnounceSent, c.Announce = svc.RememberSent, svc.Remember
	})
	select {
	case <-applied:
	case <-time.After(30 * time.Second):
		t.Fatal("worker B never got the message")
	}
	e := r.resultsOnceDone(t, st, svc, id)
	if e.storedErr != nil || e.stored.State != push.StateDelivered || e.freshErr != nil || e.fresh.State != push.StateDelivered || e.mem.State != push.StateDelivered {
		t.Fatalf("push %s, delivered by msgid %d, whose receipt \"success\" was recorded as its first final result before worker B wrote its own:\n"+
			"  expected: delivered everywhere (first final result wins)\n"+
			"  store Outcome: state=%s reason=%q msgId=%d (err %v)\n"+
			"  front end that applied the receipt: %s (err %v)\n"+
			"  front end started since: %s reason=%q (err %v)",
			id, msgID, e.stored.State, e.stored.Reason, e.stored.MsgID, e.storedErr, e.mem.State, e.memErr, e.fresh.State, e.fresh.Reason, e.freshErr)
	}
}

// TestExpiryOfAnAttemptInDoubt: a worker calls the platform, which takes the message, and is
// killed before the answer: attempt 1 under way, outcome unknown. The next worker gets the
// message past nats.max_age (2 s here). It does not fail it as expired, "not sent": it calls
// again, and the platform's duplicate check answers with the msgid it gave.
func TestExpiryOfAnAttemptInDoubt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.killedDuringCall(quick)
	msgID := r.msgIDOf(id)
	if msgID == 0 {
		t.Fatal("the platform did not take the message")
	}
	if res, err := r.st.Current(ctx, id); err != nil || res.State != push.StateSending {
		t.Fatalf("record of the attempt under way: %+v %v", res, err)
	}
	r.startWorkerWith(quick, func(c *delivery.Config) { c.MaxAge = 2 * time.Second })
	var res push.Result
	embeddedtest.Eventually(t, 20*time.Second, "the push leaves the queue with an outcome", func() bool {
		var err error
		res, err = r.st.Current(ctx, id)
		return err == nil && (res.State == push.StateSent || res.State.Final())
	})
	if res.State != push.StateSent || res.MsgID != msgID {
		t.Fatalf("push %s, taken by the platform as msgid %d within max_age (its worker killed before the answer):\n"+
			"  expected: sent, msgId %d (the re-asked call within the platform's 10-minute duplicate check answers it)\n"+
			"  got: state=%s reason=%q msgId=%d attempts=%d (expired reason: %v); platform sends %d",
			id, msgID, msgID, res.State, res.Reason, res.MsgID, res.Attempts, strings.HasPrefix(res.Reason, "expired"), r.sim.Stats().Sends)
	}
}

// TestExpiredBacklogLeavesTheDeadLetters: the workers were stopped for longer than
// nats.max_age while pushes queued up. Each push ends failed, expired, with its record; none is
// copied to the dead letters, which are capped at an eighth of the push stream and keep the
// poison and exhausted messages operators look at: a whole backlog expiring would push those out.
func TestExpiredBacklogLeavesTheDeadLetters(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	// A stream of 256 KiB (8 GiB in production), as the worker and front end ensure it.
	r.qcfg.MaxBytes = 256 << 10
	if _, err := queue.EnsureStream(ctx, r.js, r.qcfg); err != nil {
		t.Fatal(err)
	}
	dl, err := queue.EnsureDeadLetters(ctx, r.js, r.qcfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300 // well within the stream's bound
	ids := make([]string, n)
	for i := range ids {
		ids[i] = r.publish("u-follows", "JML", jml)
	}
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.MaxAge = time.Millisecond // every waiting push is past it
		c.DeadLetter = dl.Copy
	})
	embeddedtest.Eventually(t, 60*time.Second, "every push ends failed", func() bool {
		res, err := r.st.Current(ctx, ids[n-1])
		if err != nil || res.State != push.StateFailed {
			return false
		}
		res, err = r.st.Current(ctx, ids[0])
		return err == nil && res.State == push.StateFailed
	})
	dlq, err := r.js.Stream(ctx, queue.DeadLetterStream(r.qcfg.Stream))
	if err != nil {
		t.Fatal(err)
	}
	var kept uint64
	embeddedtest.Eventually(t, 30*time.Second, "the queue is empty", func() bool {
		st, err := r.js.Stream(ctx, r.qcfg.Stream)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	info, err := dlq.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept = info.State.Msgs
	for _, id := range []string{ids[0], ids[n/2], ids[n-1]} {
		if res, err := r.st.Current(ctx, id); err != nil || !strings.HasPrefix(res.Reason, "expired: ") {
			t.Fatalf("push %s: %+v %v; want failed, expired", id, res, err)
		}
	}
	if kept != 0 {
		t.Fatalf("%d expired pushes put %d copies in the dead-letter stream, which would push out the poison and exhausted ones it keeps for operators; want none", n, kept)
	}
}
