package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
)

// pauseScriptSender: call 1 blocks until release, then answers 40164 (this worker's address);
// call 2 answers 48001 (the account: shared pause for the operator); later calls go to the
// simulator.
type pauseScriptSender struct {
	delivery.Sender
	mu      sync.Mutex
	calls   int
	first   chan struct{} // closed when call 1 arrived
	release chan struct{}
	later   []string // ClientMsgIDs of calls after the second
}

func (s *pauseScriptSender) SendTemplate(ctx context.Context, m platform.TemplateMessage) (int64, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	if n > 2 {
		s.later = append(s.later, m.ClientMsgID)
	}
	s.mu.Unlock()
	switch n {
	case 1:
		close(s.first)
		<-s.release
		return 0, fmt.Errorf("send template: %w", &platform.Error{Code: platform.CodeIPNotWhitelisted,
			Msg: "invalid ip 10.0.0.7, not in whitelist"})
	case 2:
		return 0, fmt.Errorf("send template: %w", &platform.Error{Code: platform.CodeAPIUnauthorized, Msg: "api unauthorized"})
	}
	return s.Sender.SendTemplate(ctx, m)
}

// TestAddressRefusalDuringSharedPauseHoldsTheMessage: message B waits at the gate under a shared
// pause set by a 48001 (the operator must resume). Meanwhile the same worker's call for A is
// answered 40164: its address pause begins. B goes back to the queue, for a worker that obeys
// the shared pause too; it is not sent while sending is paused for every worker.
func TestAddressRefusalDuringSharedPauseHoldsTheMessage(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	p := r.openPause()
	s := &pauseScriptSender{Sender: r.pc, first: make(chan struct{}), release: make(chan struct{})}
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Pause, c.Platform, c.AddressPauseFor = p, s, 2*time.Second
		c.QuotaReset = quotaInAnHour
	})
	a := r.publish("u-follows", "JML", jml)
	select {
	case <-s.first:
	case <-time.After(10 * time.Second):
		t.Fatal("A was never sent")
	}
	b := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "B's 48001 paused sending for every worker", func() bool {
		_, paused := p.Paused()
		return paused
	})
	// The pause is set before B's record is written back: B's record reads "sending" (the
	// refused call) until then. It goes back to the queue, that call not counted.
	embeddedtest.Eventually(t, 10*time.Second, "B handed back for the pause, its refused call not counted", func() bool {
		res, err := r.st.Current(ctx, b)
		return err == nil && res.State == push.StateQueued && res.Attempts == 0
	})
	// B now waits at the gate; A's call is answered 40164. B goes back to the queue, and the
	// worker fetches nothing more while either pause holds: nothing positive to wait for, so B
	// is watched for the 5 s in which it used to be sent.
	close(s.release)
	watch := time.NewTicker(50 * time.Millisecond)
	defer watch.Stop()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); <-watch.C {
		if res, err := r.st.Current(ctx, b); err == nil && (res.State == push.StateSent || res.State == push.StateSending) {
			st, paused := p.Paused()
			t.Fatalf("B %s (attempts %d) while sending is paused for every worker (paused=%v, %q)", res.State, res.Attempts, paused, st.Reason)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.later) > 0 {
		t.Fatalf("the platform was called %d times during the shared pause: %v (A=%s B=%s)", len(s.later), s.later, a, b)
	}
}

// TestAddressRefusalCountsNoRetry: a message a worker hands back for its refused address (40164)
// counts no retry in ucs_deliveries_total, as the operators' guide says of every message handed
// back without an attempt.
func TestAddressRefusalCountsNoRetry(t *testing.T) {
	r := newRig(t)
	m := metrics.New(prometheus.NewRegistry())
	refused := &refusingSender{Sender: r.pc, refuse: true}
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Metrics, c.Platform, c.AddressPauseFor = m, refused, time.Minute
	})
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "handed back for the refused address", func() bool {
		res, err := r.st.Current(context.Background(), id)
		return err == nil && res.State == push.StateQueued && res.Attempts == 0 && strings.Contains(res.LastError, "40164")
	})
	if n := testutil.ToFloat64(m.Deliveries.WithLabelValues("retry")); n != 0 {
		t.Fatalf("ucs_deliveries_total{outcome=\"retry\"} = %v for a message handed back without an attempt", n)
	}
}
