package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
)

// heldBudget holds the first message that asks it until release is closed, and says when one
// is there (at): a message waiting at the gate for the send budget.
type heldBudget struct {
	once    sync.Once
	at      chan struct{}
	release chan struct{}
}

func (b *heldBudget) Wait(context.Context) error {
	b.once.Do(func() { close(b.at) })
	<-b.release
	return nil
}

// TestPauseKeepsAnAttemptInDoubt: the platform takes a push's last allowed call, and its worker
// dies before the answer: the record says sending, the outcome unknown. The next worker holds
// the push at the gate when the daily quota's pause begins, and is stopped (scaled down) during
// the pause. The record keeps saying sending, not queued with its attempts used up: the worker
// that gets the push after the pause asks the platform again and records it sent under the
// msgid of the call that was taken, rather than failed for a quota it never met.
func TestPauseKeepsAnAttemptInDoubt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.killedDuringCall(lastOnly)
	msgID := r.msgIDOf(id)
	if res, err := r.st.Current(ctx, id); err != nil || res.State != push.StateSending || msgID == 0 {
		t.Fatalf("the killed call: record %+v %v, platform msgid %d", res, err, msgID)
	}
	p := r.openPause()
	b := &heldBudget{at: make(chan struct{}), release: make(chan struct{})}
	reset := func(now time.Time) time.Time { return now.Add(time.Hour) }
	stop := r.startWorkerWith(lastOnly, func(c *delivery.Config) { c.Pause, c.QuotaReset, c.Budget = p, reset, b })
	select {
	case <-b.at:
	case <-time.After(30 * time.Second):
		t.Fatal("the second worker never got the push to the gate")
	}
	// The daily quota runs out (another worker's send met 45009) while the push waits.
	if err := p.Set(ctx, sending.PauseState{Until: time.Now().Add(time.Hour), Reason: "45009: the platform's daily quota is used up"}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the pause seen", func() bool { _, paused := p.Paused(); return paused })
	close(b.release) // the budget lets it through, into the pause
	stop()           // scaled down during the pause: the push is handed back
	if res, err := r.st.Current(ctx, id); err != nil || res.State != push.StateSending || res.Attempts != 1 {
		t.Fatalf("after the pause and the stop, the record is %+v (%v), want sending, attempt 1 in doubt", res, err)
	}
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	r.startWorker(lastOnly)
	var res push.Result
	embeddedtest.Eventually(t, 30*time.Second, "the push has an outcome", func() bool {
		var err error
		res, err = r.st.Current(ctx, id)
		return err == nil && (res.State == push.StateSent || res.State.Final())
	})
	if res.State != push.StateSent || res.MsgID != msgID {
		t.Fatalf("the platform took push %s (msgid %d); after a pause and a scale-down it ends state=%s reason=%q msgId=%d attempts=%d",
			id, msgID, res.State, res.Reason, res.MsgID, res.Attempts)
	}
}

// countingBudget counts the places asked of a budget.
type countingBudget struct {
	delivery.Budget
	n atomic.Int64
}

func (b *countingBudget) Wait(ctx context.Context) error { b.n.Add(1); return b.Budget.Wait(ctx) }

// TestExpiredBacklogSpendsNoBudget: pushes older than max_age fail without a call, and so
// without asking for a place in the send budget: a fresh push behind a backlog of them is not
// held back at the budget's rate.
func TestExpiredBacklogSpendsNoBudget(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	sb, err := sending.OpenBudget(ctx, r.js, 5, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &countingBudget{Budget: sb}
	const n = 25
	old := time.Now().Add(-2 * time.Hour).UnixMilli()
	var ids []string
	for i := range n {
		id := push.NewID(time.Now())
		m := push.Message{UcsID: id, ClientID: "c1", UserID: "u-follows", Type: "JML",
			Data: map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)}, Accepted: old}
		if err := r.pub.Publish(ctx, m, queue.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	fresh := r.publish("u-follows", "JML", jml)
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Budget, c.MaxAge = b, time.Hour })
	r.waitState(fresh, push.StateSent)
	for _, id := range ids {
		res, err := r.st.Current(ctx, id)
		if err != nil || res.State != push.StateFailed || !strings.HasPrefix(res.Reason, "expired") {
			t.Fatalf("expired push %s: %+v %v", id, res, err)
		}
	}
	if sends := r.sim.Stats().Sends; sends != 1 {
		t.Fatalf("platform sends %d, want 1 (the fresh push)", sends)
	}
	if got := b.n.Load(); got != 1 {
		t.Fatalf("%d places asked of the send budget for %d expired pushes and one fresh one, want 1", got, n)
	}
}
