package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// The test binary doubles as the worker program: started with this variable set, it runs the
// worker's main code path, so the test can kill a real worker process.
const childEnv = "UCS_TEST_WORKER_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if err := run(context.Background(), log, options{path: path, listen: "127.0.0.1:0"}); err != nil {
			log.Error("worker", "err", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestKilledWorkerLosesNothing kills a worker process (SIGKILL) while it is delivering and
// checks that another worker delivers every message it held, each reaching the platform once.
func TestKilledWorkerLosesNothing(t *testing.T) {
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
		Worker: config.Worker{Concurrency: 8, AckWait: config.Duration(5 * time.Second)},
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
	defer st.Close(ctx)
	if err := service.LoadBindings(ctx, st, cfg.Bindings); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := queue.EnsureStream(ctx, js, service.QueueConfig(cfg)); err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(js)
	const total = 40
	ids := make([]string, total)
	for i := range ids {
		ids[i] = push.NewID(time.Now())
		m := push.Message{UcsID: ids[i], ClientID: "c", UserID: "2020000001", Type: "JML",
			Data: map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)}, Accepted: time.Now().UnixMilli()}
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+cfgPath)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	// Kill it mid-delivery: some messages are sent, and it holds more in flight.
	embeddedtest.Eventually(t, 30*time.Second, "the child worker sends its first messages", func() bool { return len(sim.Sent()) >= 3 })
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	before := len(sim.Sent())
	if before >= total {
		t.Fatalf("the child delivered everything (%d) before it was killed; the test proves nothing", before)
	}
	t.Logf("killed the worker after %d of %d messages reached the platform", before, total)

	// A second worker takes over.
	sim.SetFaults(simulator.Faults{})
	w, err := service.NewWorker(ctx, cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = w.Run(wctx); close(done) }()
	defer func() { cancel(); <-done; w.Close() }()

	for _, id := range ids {
		embeddedtest.Eventually(t, 60*time.Second, id+" sent", func() bool {
			r, err := st.Current(ctx, id)
			return err == nil && r.State == store.StateSent
		})
	}
	count := map[string]int{}
	for _, m := range sim.Sent() {
		count[m.ClientMsgID]++
	}
	for _, id := range ids {
		if count[id] != 1 {
			t.Errorf("%s reached the user %d times", id, count[id])
		}
	}
	t.Logf("repeated sends absorbed by client_msg_id: %d", sim.Stats().Deduplicated)
}
