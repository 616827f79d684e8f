package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// The test binary doubles as the worker program: started with this variable set, it runs the
// worker's main code path, so the test can kill a real worker process.
const childEnv = "UCS_TEST_WORKER_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		err := run(ctx, log, options{path: path, listen: "127.0.0.1:0"})
		stop()
		if err != nil {
			log.Error("worker", "err", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// workerRig is a queue full of messages for a worker process to deliver through a slow
// simulated platform, and what the test needs to check them.
type workerRig struct {
	cfg     *config.Config
	cfgPath string
	st      *store.Store
	sim     *simulator.Simulator
	ids     []string
}

func newWorkerRig(t *testing.T) *workerRig {
	t.Helper()
	natsURL := embeddedtest.NATS(t)
	f := embeddedtest.FerretDB(t)
	db := embeddedtest.DBName(t)
	sim := simulator.New(simulator.Config{AppID: "wxkill", Secret: "wxkillsecret"})
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	sim.AddTemplate("tpl-JML", []string{"thing1", "thing2"})
	sim.AddFollower("oKill")
	// Slow sends: the worker holds many messages when it is killed.
	sim.SetFaults(simulator.Faults{Latency: 400 * time.Millisecond})

	cfg := &config.Config{
		NATS:     config.NATS{URL: natsURL},
		MongoDB:  config.MongoDB{URI: f.URI(), Database: db},
		Bindings: []config.Binding{{UserID: "2020000001", OpenID: "oKill"}},
		Platform: config.Platform{APIBase: srv.URL, AppID: "wxkill", Secret: "wxkillsecret", CallbackToken: "cbt",
			Templates: map[string]config.Template{"JML": {TemplateID: "tpl-JML", Fields: map[string]string{"class": "thing1", "info": "thing2"}}}},
		Worker:        config.Worker{Concurrency: 8, AckWait: config.Duration(5 * time.Second)},
		ShutdownGrace: config.Duration(10 * time.Second),
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleWorker); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`nats: {url: %q}
mongodb: {uri: %q, database: %q}
platform:
  api_base: %q
  appid: wxkill
  secret: wxkillsecret
  callback_token: cbt
  templates:
    JML: {template_id: tpl-JML, fields: {class: thing1, info: thing2}}
worker: {concurrency: 8, ack_wait: 5s}
shutdown_grace: 10s
`, natsURL, f.URI(), db, srv.URL)
	cfgPath := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{URI: f.URI(), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	if err := service.LoadBindings(ctx, st, cfg.Bindings, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if _, err := queue.EnsureStream(ctx, js, service.QueueConfig(cfg)); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	const total = 40
	ids := make([]string, total)
	for i := range ids {
		ids[i] = push.NewID(time.Now())
		m := push.Message{UcsID: ids[i], ClientID: "c", UserID: "2020000001", Type: "JML",
			Data: map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)}, Accepted: time.Now().UnixMilli()}
		if err := pub.Publish(ctx, m, queue.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	return &workerRig{cfg: cfg, cfgPath: cfgPath, st: st, sim: sim, ids: ids}
}

// startChild starts a worker process from the rig's configuration file.
func (r *workerRig) startChild(t *testing.T) (*exec.Cmd, chan error) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+r.cfgPath)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	return child, exited
}

// finish runs a worker in the test until every message is sent, and checks that each reached
// the platform once.
func (r *workerRig) finish(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	r.sim.SetFaults(simulator.Faults{})
	w, err := service.NewWorker(ctx, r.cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = w.Run(wctx); close(done) }()
	defer func() { cancel(); <-done; w.Close() }()
	for _, id := range r.ids {
		embeddedtest.Eventually(t, 60*time.Second, id+" sent", func() bool {
			res, err := r.st.Current(ctx, id)
			return err == nil && res.State == push.StateSent
		})
	}
	count := map[string]int{}
	for _, m := range r.sim.Sent() {
		count[m.ClientMsgID]++
	}
	for _, id := range r.ids {
		if count[id] != 1 {
			t.Errorf("%s reached the user %d times", id, count[id])
		}
	}
}

// TestKilledWorkerLosesNothing kills a worker process (SIGKILL) while it is delivering and
// checks that another worker delivers every message it held, each reaching the platform once.
func TestKilledWorkerLosesNothing(t *testing.T) {
	r := newWorkerRig(t)
	total := len(r.ids)
	child, exited := r.startChild(t)
	// Kill it mid-delivery: some messages are sent, and it holds more in flight.
	embeddedtest.Eventually(t, 30*time.Second, "the child worker sends its first messages", func() bool { return len(r.sim.Sent()) >= 3 })
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("the killed worker: %v", <-exited)
	before := len(r.sim.Sent())
	if before >= total {
		t.Fatalf("the child delivered everything (%d) before it was killed; the test proves nothing", before)
	}
	t.Logf("killed the worker after %d of %d messages reached the platform", before, total)
	r.finish(t)
	t.Logf("repeated sends absorbed by client_msg_id: %d", r.sim.Stats().Deduplicated)
}

// TestSigtermLosesNothing stops a worker process with SIGTERM while it holds messages: it
// exits cleanly within the grace, every message the platform took from it is recorded, and
// another worker delivers the rest without the platform seeing any message twice.
func TestSigtermLosesNothing(t *testing.T) {
	r := newWorkerRig(t)
	child, exited := r.startChild(t)
	embeddedtest.Eventually(t, 30*time.Second, "the child worker sends its first messages", func() bool { return len(r.sim.Sent()) >= 3 })
	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the worker did not exit cleanly: %v", err)
		}
	case <-time.After(r.cfg.ShutdownGrace.D() + 5*time.Second):
		t.Fatal("the worker did not exit within its shutdown grace")
	}
	sent := r.sim.Sent()
	if len(sent) >= len(r.ids) {
		t.Fatalf("the child delivered everything (%d) before it stopped; the test proves nothing", len(sent))
	}
	ctx := context.Background()
	for _, m := range sent {
		res, err := r.st.Current(ctx, m.ClientMsgID)
		if err != nil || res.State != push.StateSent {
			t.Errorf("%s reached the platform but the stopped worker recorded %+v (%v)", m.ClientMsgID, res, err)
		}
	}
	t.Logf("the worker stopped after %d of %d messages", len(sent), len(r.ids))
	r.finish(t)
	if d := r.sim.Stats().Deduplicated; d != 0 {
		t.Errorf("the platform saw %d repeated sends after a graceful stop", d)
	}
}

// TestWorkerProbes: a worker's /readyz is 200 while NATS, MongoDB and the platform's token are
// reachable and 503 naming NATS once it stops; /metrics serves the worker's metrics.
func TestWorkerProbes(t *testing.T) {
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	f := embeddedtest.FerretDB(t)
	sim := simulator.New(simulator.Config{AppID: "wxprobe", Secret: "wxprobesecret"})
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	cfg := &config.Config{
		NATS:     config.NATS{URL: n.URL()},
		MongoDB:  config.MongoDB{URI: f.URI(), Database: embeddedtest.DBName(t)},
		Platform: config.Platform{APIBase: srv.URL, AppID: "wxprobe", Secret: "wxprobesecret"},
	}
	cfg.Defaults()
	w, err := service.NewWorker(context.Background(), cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	probes := httptest.NewServer(w.Handler())
	t.Cleanup(probes.Close)
	get := func(path string) (int, string) {
		resp, err := http.Get(probes.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("/readyz"); st != 200 {
		t.Fatalf("/readyz: %d %s", st, body)
	}
	if st, body := get("/metrics"); st != 200 || !strings.Contains(body, "ucs_dead_letters_total 0") || !strings.Contains(body, "ucs_consumer_pending 0") {
		t.Fatalf("/metrics: %d %s", st, body)
	}
	// A pause of sending (the daily quota) is not a fault of the worker: it stays ready.
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	p, err := sending.OpenPause(context.Background(), js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Set(context.Background(), sending.PauseState{Until: time.Now().Add(time.Hour), Reason: "45009"}); err != nil {
		t.Fatal(err)
	}
	if st, body := get("/readyz"); st != 200 {
		t.Fatalf("/readyz while paused: %d %s", st, body)
	}
	// Nor is a refusal of the account that another worker met: this one may run the corrected
	// configuration (a worker whose own call met it is not ready: TestRolloutOfCorrectedSecretEndsThePause).
	account := sending.PauseState{Until: time.Now().Add(time.Hour), Reason: "48001 api unauthorized",
		Action: "enable the template message feature for the account, then run `worker -resume`"}
	if err := p.Set(context.Background(), account); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the pause is set", func() bool {
		st, paused := p.Paused()
		return paused && st.Action != ""
	})
	if st, body := get("/readyz"); st != 200 {
		t.Fatalf("/readyz while another worker's refusal of the account pauses sending: %d %s", st, body)
	}
	if err := p.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.Shutdown()
	embeddedtest.Eventually(t, 10*time.Second, "/readyz fails", func() bool { st, _ := get("/readyz"); return st == 503 })
	if _, body := get("/readyz"); !strings.HasPrefix(body, "nats") {
		t.Errorf("/readyz says %q, want it to name nats", body)
	}
	if st, _ := get("/healthz"); st != 200 {
		t.Errorf("/healthz: %d", st)
	}
}

// TestCloseAwaitsDeliveries: sends slower than the shutdown grace are still under way when Run
// returns; Close waits for them (up to 2 s past the grace), so that each one the platform
// accepted is recorded before the store is closed, rather than given to another worker to send
// again.
func TestCloseAwaitsDeliveries(t *testing.T) {
	r := newWorkerRig(t)
	r.sim.SetFaults(simulator.Faults{Latency: 1500 * time.Millisecond}) // within the grace and Close's 2 s past it
	cfg := *r.cfg
	cfg.ShutdownGrace = config.Duration(500 * time.Millisecond)
	w, err := service.NewWorker(context.Background(), &cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	embeddedtest.Eventually(t, 10*time.Second, "sends under way", func() bool { return r.sim.Stats().Sends > 0 })
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if r.sim.Stats().Accepted != 0 {
		t.Fatal("a send ended within the grace; the test needs sends slower than it")
	}
	w.Close()
	sent := r.sim.Sent()
	if len(sent) == 0 {
		t.Fatal("Close returned before any send under way ended")
	}
	for _, m := range sent {
		res, err := r.st.Current(context.Background(), m.ClientMsgID)
		if err != nil || res.State != push.StateSent {
			t.Errorf("%s: the platform accepted it, the store says %+v %v", m.ClientMsgID, res, err)
		}
	}
}

// TestAddressRefusedWorkerNotReady: a worker whose address the platform refuses (40164) says
// so on /readyz, as its own pause, not every worker's; the messages it met wait queued, their
// refused calls not counted.
func TestAddressRefusedWorkerNotReady(t *testing.T) {
	r := newWorkerRig(t)
	r.sim.SetFaults(simulator.Faults{AddressRefused: true})
	w, err := service.NewWorker(context.Background(), r.cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Error(err)
		}
		w.Close()
	})
	probes := httptest.NewServer(w.Handler())
	t.Cleanup(probes.Close)
	var body string
	embeddedtest.Eventually(t, 10*time.Second, "/readyz names the refused address", func() bool {
		resp, err := http.Get(probes.URL + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, "40164")
	})
	if !strings.Contains(body, "this worker's sending paused") || !strings.Contains(body, "IP whitelist") {
		t.Fatalf("/readyz says %q", body)
	}
	if r.sim.Stats().Accepted != 0 {
		t.Fatal("the platform accepted a send from a refused address")
	}
	embeddedtest.Eventually(t, 10*time.Second, "a refused message shown queued, its call not counted", func() bool {
		for _, id := range r.ids {
			res, err := r.st.Current(context.Background(), id)
			if err == nil && res.State == push.StateQueued && res.Attempts == 0 && strings.Contains(res.LastError, "40164") {
				return true
			}
		}
		return false
	})
}

// TestResumeWhileMongoDBIsDown: the pause lives in NATS alone, and `worker -resume` ends it
// while MongoDB is away too (an account refused during a store outage), touching nothing else.
func TestResumeWhileMongoDBIsDown(t *testing.T) {
	natsURL := embeddedtest.NATS(t)
	// Nothing listens at MongoDB's address; a short server selection keeps a failure quick.
	deadMongo := fmt.Sprintf("mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=2000", embeddedtest.FreePort(t))
	cfgPath := filepath.Join(t.TempDir(), "worker.yaml")
	yaml := fmt.Sprintf("nats: {url: %q}\nmongodb: {uri: %q}\nplatform:\n  api_base: http://127.0.0.1:1\n  appid: wxresume\n  secret: wxresumesecret\n  callback_token: cbt\n", natsURL, deadMongo)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	p, err := sending.OpenPause(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Set(ctx, sending.PauseState{Until: time.Now().Add(time.Hour), Reason: "48001 api unauthorized",
		Action: "enable the template message feature for the account, then run `worker -resume`"}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the pause is set", func() bool { _, paused := p.Paused(); return paused })
	if err := run(ctx, slog.New(slog.DiscardHandler), options{path: cfgPath, resume: true}); err != nil {
		t.Fatalf("worker -resume with MongoDB down: %v", err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the pause is ended", func() bool { _, paused := p.Paused(); return !paused })
	if _, err := js.Stream(ctx, config.DefaultStream); err == nil {
		t.Error("worker -resume made the push stream: it should touch nothing but the pause")
	}
}
