package standalone_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestHotPathsReadByID records every command the MongoDB driver sends while the service
// accepts pushes, delivers them (with retries and redeliveries), takes the platform's receipts
// and an unsubscribe, checks bearer tokens, looks up bindings and answers lookups of queued,
// retrying and finished pushes, and fails on any read, update or delete whose filter is not a
// single _id equality, and on any command at all while pushes are accepted.
func TestHotPathsReadByID(t *testing.T) {
	rec := &embeddedtest.Commands{Skip: func(c embeddedtest.Command) bool {
		// The registered clients are read whole at a front end's start and every
		// oauth.ClientsReload in the background, never for a request, and they are tens of
		// records: not a hot path, and not at a time the test can foresee.
		return c.Name == "find" && c.Collection == "clients"
	}}
	dir := t.TempDir()
	s, err := standalone.Start(context.Background(), standalone.Options{
		DataDir: dir, Listen: "127.0.0.1:0", Workers: 0, MongoMonitor: rec.Monitor(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	base := s.Info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	body, _ := bodyFor(push.Types()[0], standalone.DemoUsers[0])
	leaving, _ := bodyFor(push.Types()[1], standalone.DemoUsers[1])
	unbound, _ := bodyFor(push.Types()[2], standalone.UnboundUser)
	// The bearer check of this token happens here, before recording: it is served from memory
	// afterwards, which the accept check below relies on.
	if st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, body); st != 200 {
		t.Fatalf("push: %d %v", st, m)
	}

	// Accept: no command at all.
	rec.Record(true)
	var ids []string
	for _, b := range []string{body, body, body, leaving, unbound} {
		st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, b)
		if st != 200 {
			t.Fatalf("push: %d %v", st, m)
		}
		ids = append(ids, m["data"].(map[string]any)["ucsId"].(string))
	}
	if cmds := rec.Take(); len(cmds) != 0 {
		t.Fatalf("accepting pushes sent %d commands to the store, the first %s on %s", len(cmds), cmds[0].Name, cmds[0].Collection)
	}
	result := func(id string) map[string]any { return lookup(t, base, tok, id) }
	// Queued, with no worker running: answered by the queue alone.
	for _, id := range ids {
		if r := result(id); r["state"] != "queued" || r["attempts"] != 0.0 || r["acceptedAt"] == "" {
			t.Fatalf("queued: %v", r)
		}
	}
	reads := func(cmds []embeddedtest.Command) int {
		n := 0
		for _, c := range cmds {
			if _, ok := c.Filters(); ok {
				n++
			}
		}
		return n
	}
	rec.Take()
	result(ids[0])
	if n := reads(rec.Take()); n != 0 {
		t.Fatalf("the lookup of a push no worker has received made %d store reads, want none", n)
	}

	// The second user leaves the official account.
	var openID string
	for _, b := range s.Info.Bindings {
		if b.UserID == standalone.DemoUsers[1] {
			openID = b.OpenID
		}
	}
	if err := s.Sim.Unsubscribe(ctx, openID); err != nil {
		t.Fatal(err)
	}

	// A worker process's configuration, as `go run ./worker -config <data>/worker.yaml` reads it,
	// joins the stack while the platform is busy: every delivery is retried, then goes through.
	s.Sim.SetFaults(simulator.Faults{BusyRate: 1})
	cfg := workerConfig(t, dir)
	cfg.Worker.BackoffInitial, cfg.Worker.BackoffMax = config.Duration(100*time.Millisecond), config.Duration(300*time.Millisecond)
	w, err := service.NewWorker(ctx, cfg, service.Deps{MongoMonitor: rec.Monitor()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	defer func() { stop(); <-done; w.Close() }()

	for _, id := range ids[:3] {
		embeddedtest.Eventually(t, 20*time.Second, id+"'s retry is visible", func() bool {
			r := result(id)
			return r["state"] == "queued" && strings.Contains(fmt.Sprint(r["lastError"]), "-1") && r["nextAttemptAt"] != nil
		})
	}
	s.Sim.SetFaults(simulator.Faults{})
	for _, id := range ids[:3] {
		embeddedtest.Eventually(t, 30*time.Second, id+" delivered", func() bool { return result(id)["state"] == "delivered" })
		if r := result(id); r["attempts"].(float64) < 2 || r["lastError"] == nil || r["msgId"] == "" {
			t.Fatalf("delivered after a retry: %v", r)
		}
	}
	embeddedtest.Eventually(t, 20*time.Second, "the leaver's push fails", func() bool { return result(ids[3])["state"] == "failed" })
	if r := result(ids[3]); !strings.HasPrefix(fmt.Sprint(r["reason"]), "not following") {
		t.Fatalf("leaver: %v", r)
	}
	embeddedtest.Eventually(t, 20*time.Second, "the unbound push fails", func() bool { return result(ids[4])["state"] == "failed" })

	cmds := rec.Take()

	// A delivered push costs one store read at most: none in the front end that took its
	// receipt (or heard of it); in a front end that did not, its receipt's final result, and
	// none after that. (A ucsId the store has no record of costs two.)
	other, err := service.NewAPI(ctx, s.Config, service.Deps{MongoMonitor: rec.Monitor()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	srv := httptest.NewServer(other.Server)
	defer srv.Close()
	cmds = append(cmds, rec.Take()...)
	for _, front := range []struct {
		url  string
		want int
	}{{srv.URL, 1}, {srv.URL, 0}, {base, 0}} {
		if st, m := call(t, "GET", front.url+"/v1/infra/notification/mp/"+ids[1], "", tok, ""); st != 200 || m["data"].(map[string]any)["state"] != "delivered" {
			t.Fatalf("lookup: %d %v", st, m)
		}
		got := rec.Take()
		if n := reads(got); n != front.want {
			t.Fatalf("a delivered push's lookup made %d store reads, want %d", n, front.want)
		}
		cmds = append(cmds, got...)
	}

	// A batch lookup of ucsIds the service never gave out: one store read each, by _id (and
	// one read of the queue for all of them).
	var unknown []string
	for i := range 200 {
		unknown = append(unknown, push.NewID(time.Now().Add(-time.Duration(i)*time.Minute)))
	}
	req, _ := json.Marshal(map[string]any{"ucsIds": unknown})
	if st, m := call(t, "POST", srv.URL+"/v1/infra/notification/mp/results", "application/json", tok, string(req)); st != 200 ||
		len(m["data"].(map[string]any)["results"].([]any)) != len(unknown) {
		t.Fatalf("batch lookup of unknown ucsIds: %d %v", st, m)
	}
	got := rec.Take()
	if n := reads(got); n != len(unknown) {
		t.Fatalf("a batch lookup of %d unknown ucsIds made %d store reads, want one each", len(unknown), n)
	}
	cmds = append(cmds, got...)

	seen := map[string]int{}
	for _, c := range cmds {
		if _, reads := c.Filters(); !reads {
			continue
		}
		for _, s := range c.NotByID() {
			t.Error(s)
		}
		seen[c.Name+" "+c.Collection]++
	}
	// The run went through every path the test means to check. A receipt reads push_msgids only
	// when the worker's announcement of the sent message was missed, which a healthy run never
	// sees; such a read, when it happens, is checked above like every other.
	for _, want := range []string{"find push_results", "find bindings", "find followers", "update push_results", "update followers"} {
		if seen[want] == 0 {
			t.Errorf("no %q was recorded; recorded %v", want, seen)
		}
	}
}
