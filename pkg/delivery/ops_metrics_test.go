package delivery_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/platform/simulator"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// TestPoisonDeadLetterCountedOnce: ucs_dead_letters_total counts messages copied to the
// dead-letter stream. A message no worker can decode, met while MongoDB is down, is copied at
// each redelivery (the stream keeps one copy), and counted once, when it ends.
func TestPoisonDeadLetterCountedOnce(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	dl, err := queue.EnsureDeadLetters(ctx, r.js, r.qcfg)
	if err != nil {
		t.Fatal(err)
	}
	cs := newCutStore(t)
	cs.proxy.SetDown(true) // the store is down before the poison arrives
	m := metrics.NewWorker(prometheus.NewRegistry())
	wr := cs.ws.NewWriter(store.WriterOptions{Timeout: 300 * time.Millisecond})
	t.Cleanup(wr.Close)
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Store, c.Events = cs.ws, wr
		c.StoreRetry = 100 * time.Millisecond
		c.DeadLetter = dl.Copy
		c.Metrics = m
	})
	poison := push.NewID(time.Now())
	if _, err := r.js.Publish(ctx, queue.Subject("c1", poison), []byte("\x00not a push{")); err != nil {
		t.Fatal(err)
	}
	// The worker meets the poison several times while the store is down: it copies it to the
	// dead letters each time, and hands it back.
	dlq, err := r.js.Stream(ctx, queue.DeadLetterStream(r.qcfg.Stream))
	if err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 20*time.Second, "the poison copied to the dead letters and handed back 3 times", func() bool {
		d, derr := dlq.Info(ctx)
		c, cerr := r.js.Consumer(ctx, r.qcfg.Stream, r.qcfg.Consumer)
		if derr != nil || cerr != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && d.State.Msgs == 1 && ci.NumRedelivered >= 1 && ci.Delivered.Consumer >= 3
	})
	cs.proxy.SetDown(false)
	embeddedtest.Eventually(t, 30*time.Second, "the poison recorded failed", func() bool {
		res, err := cs.direct.Current(ctx, poison)
		return err == nil && res.State == push.StateFailed
	})
	// Its client looks it up as any other push of theirs.
	if res, err := cs.direct.OutcomeOf(ctx, "c1", poison, store.ReceiptFirst); err != nil || res.State != push.StateFailed {
		t.Errorf("the poison's client looks it up: %s (%v), want failed", res.State, err)
	}
	waitCounted(t, "the poison's failure", m.DeliveryFailures.WithLabelValues("undecodable"), 1)
	info, err := dlq.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := testutil.ToFloat64(m.DeadLetters)
	failed := testutil.ToFloat64(m.DeliveryFailures.WithLabelValues("undecodable"))
	if got != float64(info.State.Msgs) {
		t.Fatalf("ucs_dead_letters_total = %v, but the dead-letter stream holds %d message(s) (ucs_delivery_failures_total{reason=\"undecodable\"} = %v): "+
			"one poison message met during a store outage is counted as a dead letter at every redelivery; want %d",
			got, info.State.Msgs, failed, info.State.Msgs)
	}
}

// TestDeliveryLogLinesCarryUcsID: every delivery line carries ucsId (deployments/README.md,
// Logs), the lines written while the store refuses an outcome among them.
func TestDeliveryLogLinesCarryUcsID(t *testing.T) {
	r := newRig(t)
	cs := newCutStore(t)
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if strings.Contains(req.URL.Path, "template/send") {
			cs.proxy.SetDown(true) // the store goes away while the platform takes the message
		}
		return false
	})
	_, logs := r.startOnCut(cs, pc, quick)
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "the worker warns about the push", func() bool {
		return strings.Contains(logs.String(), id)
	})
	cs.proxy.SetDown(false)
	embeddedtest.Eventually(t, 20*time.Second, id+" sent", func() bool {
		res, err := cs.direct.Current(context.Background(), id)
		return err == nil && res.State == push.StateSent
	})
	var bad []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, id) && !strings.Contains(line, "ucsId="+id) {
			bad = append(bad, line)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d log line(s) about push %s without the field ucsId (a collector filtering on ucsId misses them):\n%s",
			len(bad), id, strings.Join(bad, "\n"))
	}
}

// TestRetryCountedOncePerAttempt: ucs_deliveries_total counts the ends of deliveries, one per
// attempt, also when the platform answers 45009 and the shared pause cannot be set (its bucket
// unreachable), so that the attempt goes the ordinary retry's way.
func TestRetryCountedOncePerAttempt(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{QuotaUsedUp: true})
	m := metrics.NewWorker(prometheus.NewRegistry())
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Pause = brokenPause{}
		c.QuotaReset = quotaInAnHour
		c.Metrics = m
	})
	id := r.publish("u-follows", "JML", jml)
	r.waitState(id, push.StateFailed)
	waitCounted(t, "the failure", m.Deliveries.WithLabelValues(metrics.OutcomeFailed), 1)
	calls := r.sim.Stats().Sends
	retry := testutil.ToFloat64(m.Deliveries.WithLabelValues(metrics.OutcomeRetry))
	failed := testutil.ToFloat64(m.Deliveries.WithLabelValues(metrics.OutcomeFailed))
	if retry+failed != float64(calls) {
		t.Fatalf("%d platform calls (attempts) for the push, but ucs_deliveries_total{outcome=\"retry\"} = %v and {outcome=\"failed\"} = %v: "+
			"want retry %d, failed 1", calls, retry, failed, calls-1)
	}
}

// TestTokenOutageCountsNoDelivery: while the platform's token endpoint fails, no template send
// is made and no attempt counted; neither is a delivery retry (a message handed back without an
// attempt is not counted) nor a platform error (sends the platform refused).
func TestTokenOutageCountsNoDelivery(t *testing.T) {
	r := newRig(t)
	m := metrics.NewWorker(prometheus.NewRegistry())
	tokenDown, p, tokenCalls := r.tokenOutage(t, m, 50*time.Millisecond)
	var ids []string
	for range 5 {
		ids = append(ids, r.publish("u-follows", "JML", jml))
	}
	// Let the messages meet the outage several times: one call a second or so, as the worker
	// pauses itself at each failure, and the messages waiting to call are held meanwhile.
	embeddedtest.Eventually(t, 30*time.Second, "the token endpoint refused more often than there are messages", func() bool {
		return tokenCalls.Load() > int64(len(ids)+2)
	})
	if st, paused := p.Paused(); paused {
		t.Fatalf("a token outage set the shared pause: %+v", st)
	}
	tokenDown.Store(false)
	for _, id := range ids {
		if res := r.waitState(id, push.StateSent); res.Attempts != 1 {
			t.Fatalf("%s sent with %d attempts", id, res.Attempts)
		}
	}
	waitCounted(t, "the sends", m.Deliveries.WithLabelValues(metrics.OutcomeSent), float64(len(ids)))
	sends := r.sim.Stats().Sends
	retry := testutil.ToFloat64(m.Deliveries.WithLabelValues(metrics.OutcomeRetry))
	sent := testutil.ToFloat64(m.Deliveries.WithLabelValues(metrics.OutcomeSent))
	perr := testutil.ToFloat64(m.PlatformErrors.WithLabelValues("http"))
	if retry != 0 || perr != 0 {
		t.Fatalf("%d pushes, %d template sends, each push sent with 1 attempt; but ucs_deliveries_total{outcome=\"retry\"} = %v "+
			"(sent %v) and ucs_platform_errors_total{errcode=\"http\"} = %v: want retry 0 and no platform error, "+
			"no send having been made or refused during the token outage", len(ids), sends, retry, sent, perr)
	}
}
