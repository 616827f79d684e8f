package service_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// TestWorkerReadyAfterResumeWhenHeldPushFails follows the operators' guide for 48001, a fix
// that needs no restart: enable the template message feature in the platform's console, then
// `worker -resume`. The worker whose own call met the refusal held one push at the gate and is
// not ready while the pause lasts; after the resume that push fails for its own reason (its
// user stopped following meanwhile: 43004), and the queue holds nothing else. The pause no
// longer holds, so the worker is ready again, though it has sent nothing since.
func TestWorkerReadyAfterResumeWhenHeldPushFails(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	h := heldPush(t, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if refuse.Load() && r.URL.Path == "/cgi-bin/message/template/send" {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"errcode":48001,"errmsg":"api unauthorized rid: 1-2-3"}`)
				return
			}
			inner.ServeHTTP(w, r)
		})
	})
	ctx, cfg, sim, st, id, probes := context.Background(), h.cfg, h.sim, h.st, h.id, h.probes

	p, err := sending.OpenPause(ctx, h.js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	embeddedtest.Eventually(t, 20*time.Second, "the worker's call meets 48001 and pauses sending", func() bool {
		st, ok := p.Paused()
		return ok && strings.Contains(st.Reason, "48001")
	})
	if code, body := probeReadyz(t, probes); code != http.StatusServiceUnavailable || !strings.Contains(body, "48001") {
		t.Fatalf("during the pause /readyz: %d %q; want 503 naming 48001", code, body)
	}

	// Meanwhile the push's user stops following; the operator enables the feature in the
	// platform's console (no restart needed) and resumes.
	sim.RemoveFollower("oRev")
	refuse.Store(false)
	if err := service.Resume(ctx, cfg, service.Deps{}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 20*time.Second, "the held push ends (failed, 43004)", func() bool {
		r, err := st.Current(ctx, id)
		return err == nil && r.State == push.StateFailed
	})
	if _, paused := p.Paused(); paused {
		t.Fatal("still paused after the resume")
	}
	embeddedtest.Eventually(t, 10*time.Second, "/readyz 200 after the resume, with no pause in force and nothing to send", func() bool {
		code, _ := probeReadyz(t, probes)
		return code == http.StatusOK
	})
}

// heldPushStack is a worker running on the embedded NATS and FerretDB, with one push for user
// 2020000001 (follower oRev) queued before it started, and its probes served at probes.
type heldPushStack struct {
	cfg    *config.Config
	sim    *simulator.Simulator
	st     *store.Store
	js     jetstream.JetStream
	id     string
	probes string
}

// heldPush starts a heldPushStack whose platform is the simulator behind front (a test's way
// to answer in the platform's place).
func heldPush(t *testing.T, front func(inner http.Handler) http.Handler) heldPushStack {
	t.Helper()
	ctx := context.Background()
	natsURL := embeddedtest.NATS(t)
	f := embeddedtest.FerretDB(t)
	db := embeddedtest.DBName(t)
	sim := simulator.New(simulator.Config{AppID: "wxrev", Secret: "wxrevsecret"})
	t.Cleanup(sim.Close)
	sim.AddTemplate("tpl-JML", []string{"thing1", "thing2"})
	sim.AddFollower("oRev")
	srv := httptest.NewServer(front(sim.Handler()))
	t.Cleanup(srv.Close)
	cfg := &config.Config{
		NATS:     config.NATS{URL: natsURL},
		MongoDB:  config.MongoDB{URI: f.URI(), Database: db},
		Bindings: []config.Binding{{UserID: "2020000001", OpenID: "oRev"}},
		Platform: config.Platform{APIBase: srv.URL, AppID: "wxrev", Secret: "wxrevsecret", CallbackToken: "cbt",
			Templates: map[string]config.Template{"JML": {TemplateID: "tpl-JML", Fields: map[string]string{"class": "thing1", "info": "thing2"}}}},
		Worker:        config.Worker{Concurrency: 2, AckWait: config.Duration(5 * time.Second)},
		ShutdownGrace: config.Duration(5 * time.Second),
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleWorker); err != nil {
		t.Fatal(err)
	}
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
	id := push.NewID(time.Now())
	m := push.Message{UcsID: id, ClientID: "c", UserID: "2020000001", Type: "JML",
		Data: map[string]string{"class": "课程", "info": "作业"}, Accepted: time.Now().UnixMilli()}
	if err := pub.Publish(ctx, m, queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := service.NewWorker(ctx, cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wstop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { _ = w.Run(wctx); close(ran) }()
	t.Cleanup(func() { wstop(); <-ran; w.Close() })
	probes := httptest.NewServer(w.Handler())
	t.Cleanup(probes.Close)
	return heldPushStack{cfg: cfg, sim: sim, st: st, js: js, id: id, probes: probes.URL}
}

// probeReadyz is a probe of /readyz at base: its status and body.
func probeReadyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}
