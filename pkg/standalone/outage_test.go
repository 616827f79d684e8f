package standalone_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
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
