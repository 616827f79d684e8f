package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/service"
)

// eventApplier is a front end applying kept platform events, which the test stops.
type eventApplier struct {
	api  *service.API
	url  string
	stop func()
}

// handoverEnv is newEnv whose front end does not apply events; the test starts appliers. Its
// front end applies one event before it stops, as a front end that has applied any does, so
// that it hands the stream over at once when it stops.
func handoverEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	if a := e.callback(e.plainQuery(cbToken, "warm"), followEvent("oWarm", "subscribe", e.clock.Now().Unix())); a.status != http.StatusOK {
		t.Fatalf("callback: %d %s", a.status, a.body)
	}
	cons, err := e.js.Consumer(context.Background(), queue.PlatformEventStream(e.cfg.NATS.Stream), "apply")
	if err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the event applied", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.Delivered.Stream >= 1 && info.NumAckPending == 0 && info.NumPending == 0
	})
	e.stopKept()
	return e
}

// eventApplier starts a front end (api, or a new replica when nil) applying kept events.
func (e *env) eventApplier(api *service.API) *eventApplier {
	e.t.Helper()
	u := e.url
	if api == nil {
		var err error
		api, err = service.NewAPI(context.Background(), e.cfg, service.Deps{Now: e.clock.Now})
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(api.Close)
		ts := httptest.NewServer(api.Server)
		e.t.Cleanup(ts.Close)
		u = ts.URL
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = api.ApplyKeptEvents(ctx) }()
	a := &eventApplier{api: api, url: u}
	a.stop = func() { cancel(); <-done }
	e.t.Cleanup(a.stop)
	return a
}

// TestGracefulStopHandsOverHeldReceipts: the front end applying events holds a receipt
// waiting for its msgid and stops (a rolling update). deployments/README.md: "When that front
// end stops, it hands over at once". The other front end must hold the receipt (and apply a
// new event) within a few seconds, not after the 30 s of AckWait / PinnedTTL.
func TestGracefulStopHandsOverHeldReceipts(t *testing.T) {
	e := handoverEnv(t)
	a := e.eventApplier(e.api)
	postReceiptAt(t, e, e.url, "r1", 555001, simulator.StatusSuccess)
	embeddedtest.Eventually(t, 20*time.Second, "first front end holds the receipt", func() bool {
		return a.api.Notify.ReceiptsWaiting() == 1
	})
	b := e.eventApplier(nil)
	a.stop()
	postReceiptAt(t, e, e.url, "r2", 555002, simulator.StatusSuccess)
	embeddedtest.Eventually(t, 10*time.Second, "the other front end holds both receipts (not after the 30 s ack wait)", func() bool {
		return b.api.Notify.ReceiptsWaiting() == 2
	})
}

// TestHeldReceiptWaitSurvivesHandover: a receipt for a msgid no message has is held up to
// ReceiptWait (11 min) from when it came, then dropped and counted. When the front end holding it
// stops after 10 minutes, the next one must not hold it for 11 more.
func TestHeldReceiptWaitSurvivesHandover(t *testing.T) {
	e := handoverEnv(t)
	a := e.eventApplier(e.api)
	postReceiptAt(t, e, e.url, "r1", 556001, simulator.StatusSuccess)
	embeddedtest.Eventually(t, 20*time.Second, "first front end holds the receipt", func() bool {
		return a.api.Notify.ReceiptsWaiting() == 1
	})
	e.clock.Advance(10 * time.Minute)
	b := e.eventApplier(nil)
	a.stop()
	embeddedtest.Eventually(t, 60*time.Second, "the other front end holds the receipt", func() bool {
		return b.api.Notify.ReceiptsWaiting() == 1
	})
	// 12 minutes after the receipt came: past its wait.
	e.clock.Advance(2 * time.Minute)
	embeddedtest.Eventually(t, 5*time.Second, "the receipt dropped 12 minutes after it came: its wait did not begin again at the handover", func() bool {
		return b.api.Notify.ReceiptsWaiting() == 0
	})
}

// TestHandoverKeepsReceiptOrder: TestReceiptsOfOneMessageInOrder across a graceful
// handover. The first receipt (success) waits for its msgid at the front end applying events;
// the sent record is written; that front end stops; the second receipt (user block) comes. The
// first receipt is the push's result, as it is without the handover.
func TestHandoverKeepsReceiptOrder(t *testing.T) {
	e := handoverEnv(t)
	a := e.eventApplier(e.api)
	const id = "01KRRRRRRRRRRRRRRRRRRRRRRR"
	postReceiptAt(t, e, e.url, "o1", 4712, simulator.StatusSuccess)
	embeddedtest.Eventually(t, 20*time.Second, "first front end holds the receipt", func() bool {
		return a.api.Notify.ReceiptsWaiting() == 1
	})
	e.markSent(id, 4712, "oA")
	e.eventApplier(nil)
	a.stop()
	postReceiptAt(t, e, e.url, "o2", 4712, simulator.StatusUserBlock)
	var got string
	embeddedtest.Eventually(t, 60*time.Second, "a final result", func() bool {
		r, err := e.api.Store.Final(context.Background(), id)
		got = string(r.State) + " " + r.Reason
		return err == nil
	})
	if got != "delivered " {
		t.Fatalf("the push's result is %q: the second receipt (user block) won over the first (success) across the handover", got)
	}
}

// TestHandoverLosesNoPrefetchedEvents: the front end applying events stops while the stream
// holds a backlog (a receipt flood). Its pull had already fetched events past the batch it
// handed to the applier: when it stops, every one of them reaches the next front end at once,
// not after the 30 s ack wait.
func TestHandoverLosesNoPrefetchedEvents(t *testing.T) {
	e := handoverEnv(t)
	const n = 3000
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				postReceiptAt(t, e, e.url, "flood"+strconv.Itoa(i), int64(700000+i), simulator.StatusSuccess)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	a := e.eventApplier(e.api)
	embeddedtest.Eventually(t, 30*time.Second, "the first front end holds some receipts", func() bool {
		return a.api.Notify.ReceiptsWaiting() >= 300
	})
	b := e.eventApplier(nil)
	a.stop()
	embeddedtest.Eventually(t, 15*time.Second, "the next front end holds every receipt (not after the 30 s ack wait)", func() bool {
		return b.api.Notify.ReceiptsWaiting() == n
	})
}
