package standalone_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestStoreOutage: with MongoDB slow, and then unreachable, pushes are still accepted and are
// visible as queued at once (the queue answers for them); once the store is back, every one of
// them is delivered.
func TestStoreOutage(t *testing.T) {
	f := embeddedtest.FerretDB(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimSuffix(strings.TrimPrefix(f.URI(), "mongodb://"), "/"))
	cfg := &config.Config{MongoDB: config.MongoDB{URI: "mongodb://" + proxy.Addr() + "/", Database: embeddedtest.DBName(t)}}
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Config: cfg, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := s.Info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	body, _ := bodyFor(push.Types()[0], standalone.DemoUsers[0])
	pushOne := func() string {
		t.Helper()
		st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, body)
		if st != 200 {
			t.Fatalf("push: %d %v", st, m)
		}
		return m["data"].(map[string]any)["ucsId"].(string)
	}
	lookup := func(id string) (int, map[string]any, time.Duration) {
		t0 := time.Now()
		st, m := call(t, "GET", base+"/v1/infra/notification/mp/"+id, "", tok, "")
		d, _ := m["data"].(map[string]any)
		return st, d, time.Since(t0)
	}
	first := pushOne()
	embeddedtest.Eventually(t, 20*time.Second, "the first push is delivered", func() bool {
		_, d, _ := lookup(first)
		return d["state"] == "delivered"
	})

	// Slow: every answer of the store takes 3 s. A lookup of a push the worker holds up answers
	// from the queue, well before the store could have.
	const slow = 3 * time.Second
	proxy.SetDelay(slow)
	ids := []string{pushOne()}
	st, d, took := lookup(ids[0])
	if st != 200 || d["state"] != "queued" || took >= slow {
		t.Fatalf("lookup with the store slow: %d %v after %s", st, d, took)
	}
	t.Logf("lookup with the store slow answered %s in %s", d["state"], took)

	// Unreachable: accepted all the same, and visible as queued.
	proxy.SetDelay(0)
	proxy.SetDown(true)
	for range 3 {
		ids = append(ids, pushOne())
	}
	for _, id := range ids[1:] {
		st, d, took := lookup(id)
		if st != 200 || d["state"] != "queued" {
			t.Fatalf("lookup with the store down: %d %v", st, d)
		}
		t.Logf("lookup with the store down answered %s in %s", d["state"], took)
	}

	// A follower who leaves while the store is down: the platform is told the event arrived
	// (it would push it only three times), and it is applied once the store is back.
	var leaver string
	for _, b := range s.Info.Bindings {
		if b.UserID == standalone.DemoUsers[2] {
			leaver = b.OpenID
		}
	}
	if err := s.Sim.Unsubscribe(context.Background(), leaver); err != nil {
		t.Fatalf("unsubscribe with the store down: %v", err)
	}

	// Back: every push accepted meanwhile is delivered.
	proxy.SetDown(false)
	embeddedtest.Eventually(t, 60*time.Second, "the unsubscribe kept through the outage is applied", func() bool {
		b, err := s.API.Store.Binding(context.Background(), standalone.DemoUsers[2])
		return err == nil && !b.Following
	})
	for _, id := range ids {
		embeddedtest.Eventually(t, 60*time.Second, id+" delivered after the outage", func() bool {
			_, d, _ := lookup(id)
			return d["state"] == "delivered"
		})
	}
	count := map[string]int{}
	for _, m := range s.Sim.Sent() {
		count[m.ClientMsgID]++
	}
	for _, id := range append(ids, first) {
		if count[id] != 1 {
			t.Errorf("%s reached the platform %d times", id, count[id])
		}
	}
}

// TestStopKeepsTheReceiptsOfTheLastSends: `api -standalone` is stopped (Ctrl-C, Stack.Close)
// while its in-process worker has a send under way. The worker finishes that send within the
// shutdown grace, as documented, and the platform takes it; the platform then pushes the
// message's delivery receipt to the stack's callback. That receipt must not be lost: after a
// restart on the same data folder the push must reach its final state (delivered), as every
// push the platform took does.
func TestStopKeepsTheReceiptsOfTheLastSends(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	info := readInfo(t, dir)
	base := info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	// A platform that answers sends slowly: the send is still under way when the stack stops.
	s.Sim.SetFaults(simulator.Faults{Latency: 2 * time.Second})
	id := pushTo(t, base, tok, standalone.DemoUsers[0], todo)
	embeddedtest.Eventually(t, 20*time.Second, "the send is under way", func() bool { return s.Sim.Stats().Sends > 0 })
	sim := s.Sim
	s.Close()
	if len(sim.Sent()) != 1 {
		t.Fatalf("the platform took %d sends; the test needs the one under way at the stop to be taken", len(sim.Sent()))
	}
	if st := sim.Stats(); st.CallbacksDelivered != 1 || st.CallbacksFailed != 0 || st.CallbacksPending != 0 {
		t.Fatalf("the simulator's pushes of events after the stop: delivered %d, failed %d, pending %d; want its receipt delivered",
			st.CallbacksDelivered, st.CallbacksFailed, st.CallbacksPending)
	}

	s2 := start(t, dir)
	defer s2.Close()
	info = readInfo(t, dir)
	base = info.BaseURL
	tok = token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	// The receipt is applied from the stream of platform events at once, not once the stopped
	// front end's hold on it has run out (queue.PlatformEventAckWait).
	embeddedtest.Eventually(t, queue.PlatformEventAckWait/2, "the push the platform took during the stop has its receipt's result", func() bool {
		state, _ := lookup(t, base, tok, id)["state"].(string)
		return state == "delivered"
	})
}

// TestReceiptsTakenAsTheStackStopsAppliedAfterTheRestart: `api -standalone` answers a push
// and is stopped (SIGTERM: Start's context ends, then Close) while the receipt of its send is
// on its way. The platform's push of the receipt is answered during the stop; the front end
// hands back what it did not apply, and the stack's NATS server stops with it. After a restart
// on the same data folder each push reads delivered at once, not once the events' ack wait has
// passed (the server that started again forgot they were handed back).
func TestReceiptsTakenAsTheStackStopsAppliedAfterTheRestart(t *testing.T) {
	dir := t.TempDir()
	var ids []string
	for i := range 6 {
		ctx, sigterm := context.WithCancel(context.Background())
		s, err := standalone.Start(ctx, standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		tok := token(t, s.Info.BaseURL, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
		ids = append(ids, pushTo(t, s.Info.BaseURL, tok, standalone.DemoUsers[0], todo))
		embeddedtest.Eventually(t, 20*time.Second, "the platform took the send", func() bool { return s.Sim.Stats().Accepted == 1 })
		// The stop comes at different points of the receipt's way.
		time.Sleep(time.Duration(i) * 2 * time.Millisecond)
		sigterm()
		s.Close()
		if st := s.Sim.Stats(); st.Accepted != 1 || st.CallbacksDelivered != 1 {
			t.Fatalf("simulator after Close: %+v, want one send and its receipt pushed", st)
		}
	}
	s := start(t, dir)
	defer s.Close()
	tok := token(t, s.Info.BaseURL, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	embeddedtest.Eventually(t, queue.PlatformEventAckWait/2, "every push answered just before a stop delivered", func() bool {
		for _, id := range ids {
			if lookup(t, s.Info.BaseURL, tok, id)["state"] != "delivered" {
				return false
			}
		}
		return true
	})
}
