package drills_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// report logs a drill's figures on one line that scripts/drills.sh collects for the
// reliability table of deployments/README.md.
func report(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("DRILL "+t.Name()+": "+format, args...)
}

// checkLoad fails the drill on any push that was answered with anything but a ucsId or a 503.
func checkLoad(t *testing.T, p *pushes) {
	t.Helper()
	for _, f := range p.failures {
		t.Errorf("push: %s", f)
	}
	if len(p.ids) == 0 {
		t.Fatal("no push was accepted")
	}
}

// A worker process is killed (SIGKILL) in the middle of deliveries; the messages it held are
// delivered by the others once the queue's ack wait gives them back.
func TestDrillWorkerKilled(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.stack.Sim.SetFaults(simulator.Faults{Latency: 300 * time.Millisecond}) // many in flight
	victim := r.startWorker()
	r.startWorker()
	stop := make(chan struct{})
	p := r.load(16, 200, stop)
	run := pick(4*time.Second, 20*time.Second)
	time.Sleep(run / 3) // the load runs on its own; this is the drill's timeline
	inFlight := r.stack.Sim.Stats().Sends
	victim.kill()
	killed := time.Now()
	t.Logf("worker killed after %d sends", inFlight)
	r.startWorker()
	time.Sleep(run * 2 / 3)
	close(stop)
	<-p.wait
	checkLoad(t, p)
	r.stack.Sim.SetFaults(simulator.Faults{})
	ids := p.all()
	took := r.verify(ids, 3*time.Minute)
	report(t, "pushed %d, lost 0 of them, sent twice 0 (repeats absorbed by client_msg_id: %d), all final %s after the load ended (%s after the kill)",
		len(ids), r.stack.Sim.Stats().Deduplicated, took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
}

// The store (FerretDB) stops while pushes flow and deliveries run. Pushes keep being
// accepted; workers hold what they cannot record and retry; everything is final once it is
// back.
func TestDrillStoreDown(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.startWorker()
	r.startWorker()
	stop := make(chan struct{})
	p := r.load(16, 200, stop)
	time.Sleep(2 * time.Second)
	before := len(p.all())
	r.stopFerretDB()
	// Long enough, even short, that the platform's three pushes of a receipt all fail.
	down := pick(20*time.Second, 30*time.Second)
	t.Logf("store stopped after %d pushes, for %s", before, down)
	time.Sleep(down)
	during := len(p.all()) - before
	r.startFerretDB()
	back := time.Now()
	time.Sleep(2 * time.Second)
	close(stop)
	<-p.wait
	checkLoad(t, p)
	if during == 0 {
		t.Errorf("no push was accepted while the store was down")
	}
	ids := p.all()
	r.verify(ids, 3*time.Minute)
	// Attempts count platform calls, and only those: the outage handed messages back without
	// counting one.
	res, err := r.results(ids)
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, id := range ids {
		if a := res[id].Attempts; a < 1 {
			t.Errorf("%s delivered after %d attempts", id, a)
		}
		attempts += res[id].Attempts
	}
	if calls := r.stack.Sim.Stats().Sends; int64(attempts) != calls {
		t.Errorf("the pushes count %d attempts in all, the platform saw %d calls (%+v)", attempts, calls, r.stack.Sim.Stats())
	}
	report(t, "pushed %d (%d while the store was down %s, %d answered 503 and retried), lost 0, sent twice 0, all final %s after the store came back; %d attempts = %d platform calls",
		len(ids), during, down, p.refused, time.Since(back).Round(time.Millisecond), attempts, r.stack.Sim.Stats().Sends)
}

// The platform answers -1, then HTTP 502, then nothing in time, for a while. Deliveries back
// off (the calls are counted: no retry storm), and every message is delivered once it
// recovers.
func TestDrillPlatformOutage(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.startWorker()
	stop := make(chan struct{})
	p := r.load(8, 50, stop)
	out := pick(6*time.Second, time.Minute)
	before := r.stack.Sim.Stats().Sends
	start := time.Now()
	for _, f := range []simulator.Faults{{BusyRate: 1}, {ServerErrorRate: 1}, {Latency: 20 * time.Second}} {
		r.stack.Sim.SetFaults(f)
		time.Sleep(out / 3)
	}
	calls := r.stack.Sim.Stats().Sends - before
	r.stack.Sim.SetFaults(simulator.Faults{})
	close(stop)
	<-p.wait
	checkLoad(t, p)
	ids := p.all()
	// Each message may be tried about once per doubling of the backoff within the outage
	// (200 ms doubling to at most 2 s): a storm would be a call per message per few
	// milliseconds.
	perMessage := float64(calls) / float64(len(ids))
	if limit := out.Seconds()/0.2 + 1; perMessage > limit {
		t.Errorf("%d calls for %d messages in a %s outage: %.1f a message, more than %.0f", calls, len(ids), out, perMessage, limit)
	}
	took := r.verify(ids, 3*time.Minute)
	report(t, "pushed %d during a %s outage (-1, 502, time-outs), %d calls to the platform during it (%.1f a message), lost 0, sent twice 0, all final %s after it ended",
		len(ids), time.Since(start).Round(time.Second), calls, perMessage, took.Round(time.Millisecond))
}

// A message a worker cannot decode (written to the stream by something other than the front
// end) ends failed with a reason, and the messages behind it are delivered.
func TestDrillPoisonMessage(t *testing.T) {
	r := newRig(t, rigOptions{})
	nc, err := nats.Connect(r.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	poison := push.NewID(time.Now())
	if err := nc.Publish(queue.Subject("unknown-client", poison), []byte("\x00not a push{")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := &pushes{}
	for n := range 20 {
		r.push(p, n)
	}
	checkLoad(t, p)
	r.startWorker()
	r.verify(p.all(), time.Minute)
	res, err := r.results([]string{poison})
	if err != nil {
		t.Fatal(err)
	}
	// The poison has no client: no caller can look it up, but the store says how it ended.
	got, err := r.stack.API.Store.Current(context.Background(), poison)
	if err != nil || got.State != "failed" || got.Reason == "" {
		t.Fatalf("the poison message ended %+v (%v); lookup %+v", got, err, res[poison])
	}
	report(t, "a message no worker can decode ended failed (%q); the %d pushes behind it were delivered", got.Reason, len(p.ids))
}

// The front end stops while a batch is in flight and starts again; the client retries the
// batch with the same Idempotency-Key and gets the same ucsIds, and each message is sent once.
func TestDrillFrontEndRestart(t *testing.T) {
	r := newRig(t, rigOptions{})
	items := make([]string, 500)
	for i := range items {
		items[i] = body(1000 + i)
	}
	batch := `{"messages":[` + strings.Join(items, ",") + `]}`
	key := http.Header{"Idempotency-Key": {"drill-batch-1"}}
	type answer struct {
		status int
		body   []byte
		err    error
	}
	first := make(chan answer, 1)
	go func() {
		st, b, err := r.do("POST", "/v1/infra/notification/mp/batch", key, batch)
		first <- answer{st, b, err}
	}()
	// Stop the front end as soon as the batch is being published.
	deadline := time.Now().Add(10 * time.Second)
	for r.streamMsgs(t) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling with a deadline
	}
	r.stack.Close()
	a := <-first
	t.Logf("first attempt: status %d, err %v", a.status, a.err)
	r.startStack()
	var ids []string
	restarted := time.Now()
	for try := 0; ; try++ {
		st, b, err := r.do("POST", "/v1/infra/notification/mp/batch", key, batch)
		if err == nil && st == 200 {
			ids = batchIDs(t, b)
			break
		}
		// 409 while the interrupted request's claim is fresh: the stale claim is taken over
		// after 30 s.
		if try == 100 {
			t.Fatalf("retry: %d %s %v", st, b, err)
		}
		time.Sleep(200 * time.Millisecond) // a client's pause between retries (409 while the claim is fresh)
	}
	retried := time.Since(restarted)
	if a.err == nil && a.status == 200 {
		if got := batchIDs(t, a.body); strings.Join(got, ",") != strings.Join(ids, ",") {
			t.Fatalf("the retry answered other ucsIds than the first attempt")
		}
	}
	if len(ids) != len(items) {
		t.Fatalf("%d ucsIds for %d items", len(ids), len(items))
	}
	r.startWorker()
	took := r.verify(ids, 2*time.Minute)
	if n := len(r.stack.Sim.Sent()); n != len(items) {
		t.Errorf("the platform received %d messages for a batch of %d", n, len(items))
	}
	report(t, "a batch of %d in flight when the front end stopped (first answer: status %d, %v); retried with its Idempotency-Key after the restart, answered %s later with %d ucsIds, each sent once, all final %s after that",
		len(items), a.status, a.err, retried.Round(time.Millisecond), len(ids), took.Round(time.Millisecond))
}

func batchIDs(t *testing.T, b []byte) []string {
	t.Helper()
	var a struct {
		Data struct {
			Results []struct {
				UcsID string `json:"ucsId"`
			} `json:"results"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(a.Data.Results))
	for _, x := range a.Data.Results {
		ids = append(ids, x.UcsID)
	}
	return ids
}

// streamMsgs is how many messages the push stream holds.
func (r *rig) streamMsgs(t *testing.T) uint64 {
	t.Helper()
	nc, err := nats.Connect(r.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	si, err := js.StreamInfo(r.stack.Config.NATS.Stream)
	if err != nil {
		return 0
	}
	return si.State.Msgs
}

// natsCluster is three embedded NATS servers routed into one JetStream cluster.
type natsCluster struct {
	t *testing.T
	*embeddedtest.Cluster
}

func startCluster(t *testing.T) *natsCluster {
	t.Helper()
	return &natsCluster{t: t, Cluster: embeddedtest.StartCluster(t, "drill")}
}

func (c *natsCluster) url() string { return c.URL() }

// A node of a 3-node NATS cluster (streams of 3 replicas) stops while pushes flow, then comes
// back. Pushes keep being accepted or get a 503 the client retries; nothing acknowledged is
// lost.
func TestDrillNATSNodeDown(t *testing.T) {
	c := startCluster(t)
	r := newRig(t, rigOptions{natsURL: c.url(), mod: func(cfg *config.Config) { cfg.NATS.Replicas = 3 }})
	r.startWorker()
	stop := make(chan struct{})
	p := r.load(16, 200, stop)
	time.Sleep(2 * time.Second)
	// Stop the node that leads the push stream: the hardest case, a new leader is elected.
	victim := c.streamLeader(r.stack.Config.NATS.Stream)
	before := len(p.all())
	c.Servers[victim].Shutdown()
	c.Servers[victim] = nil
	down := pick(5*time.Second, 30*time.Second)
	t.Logf("stopped node %d (the stream's leader) after %d pushes, for %s", victim, before, down)
	time.Sleep(down)
	during := len(p.all()) - before
	n, err := embedded.StartNATS(c.Opts[victim])
	if err != nil {
		t.Fatal(err)
	}
	c.Servers[victim] = n
	time.Sleep(2 * time.Second)
	close(stop)
	<-p.wait
	checkLoad(t, p)
	if during == 0 {
		t.Errorf("no push was accepted while a node was down")
	}
	ids := p.all()
	took := r.verify(ids, 3*time.Minute)
	report(t, "pushed %d (%d while the stream's leader was down %s; %d answers were 503 and retried), lost 0, sent twice 0, all final %s after the load ended",
		len(ids), during, down, p.refused, took.Round(time.Millisecond))
}

// streamLeader is the index of the node that leads stream.
func (c *natsCluster) streamLeader(stream string) int {
	c.t.Helper()
	nc, err := nats.Connect(c.url())
	if err != nil {
		c.t.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	si, err := js.StreamInfo(stream)
	if err != nil || si.Cluster == nil {
		c.t.Fatalf("stream info: %v", err)
	}
	for i, o := range c.Opts {
		if o.Name == si.Cluster.Leader {
			return i
		}
	}
	c.t.Fatalf("leader %q is none of the nodes", si.Cluster.Leader)
	return 0
}
