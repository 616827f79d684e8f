package delivery_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// dieAfterRetryRecord passes records to the real writer; once the store has taken the retry
// record of the push id (queued, one attempt, a retry time), the handler's goroutine ends, as a
// worker process killed between the retry's record and its delayed nak.
type dieAfterRetryRecord struct {
	delivery.Events
	st   *store.Store
	id   atomic.Value // string
	once sync.Once
	died chan struct{}
	rec  atomic.Pointer[push.Result]
}

func (d *dieAfterRetryRecord) Write(ctx context.Context, ws ...store.Write) error {
	if err := d.Events.Write(ctx, ws...); err != nil {
		return err
	}
	id, _ := d.id.Load().(string)
	if id == "" {
		return nil
	}
	cur, err := d.st.Current(ctx, id)
	if err != nil {
		return nil //nolint:nilerr // the write went through; a record not read yet is not the retry's
	}
	if cur.State != push.StateQueued || cur.Attempts != 1 || cur.RetryAt.IsZero() {
		return nil
	}
	fired := false
	d.once.Do(func() { fired = true })
	if !fired {
		return nil
	}
	d.rec.Store(&cur)
	close(d.died)
	runtime.Goexit()
	return nil
}

// TestKilledBeforeTheRetrysNakKeepsTheBackoff: a push's first call meets an HTTP 502; its worker
// records the retry (attempt 1, the next at the backoff's end, 10 s later) and dies before its
// delayed nak reaches the queue. The queue gives the push out again after its ack wait (5 s):
// the next worker waits for the retry time the record shows (and a lookup answers) before it
// calls the platform, and the call then counts as the second attempt.
func TestKilledBeforeTheRetrysNakKeepsTheBackoff(t *testing.T) {
	r := newRig(t)
	policy := delivery.RetryPolicy{Initial: 10 * time.Second, Max: 10 * time.Second, Multiplier: 2, MaxAttempts: 5}
	wr := r.st.NewWriter(store.WriterOptions{})
	t.Cleanup(wr.Close)
	dying := &dieAfterRetryRecord{Events: wr, st: r.st, died: make(chan struct{})}
	r.startWorkerWith(policy, func(c *delivery.Config) {
		c.Events, c.Concurrency = dying, 1
		c.Platform = &flakySender{Sender: r.pc, fails: 1}
	})
	id := r.publish("u-follows", "JML", jml)
	dying.id.Store(id)
	select {
	case <-dying.died:
	case <-time.After(20 * time.Second):
		t.Fatal("the retry was never recorded")
	}
	retry := dying.rec.Load()
	r.startWorker(policy) // the worker that gets the push next
	for time.Now().Before(retry.RetryAt.Add(-2 * time.Second)) {
		if sends := r.sim.Stats().Sends; sends > 0 {
			cur, _ := r.st.Current(context.Background(), id)
			t.Fatalf("the platform was called again %s before the retry time the record shows (%s, attempt %d): backoff skipped",
				time.Until(retry.RetryAt).Round(time.Millisecond), cur.State, cur.Attempts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	embeddedtest.Eventually(t, 15*time.Second, "the push sent at its retry time, as its second attempt", func() bool {
		cur, err := r.st.Current(context.Background(), id)
		return err == nil && cur.State == push.StateSent && cur.Attempts == 2
	})
}
