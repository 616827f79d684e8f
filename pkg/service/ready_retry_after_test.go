package service_test

import (
	"context"
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
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// TestReadyzObeysTokenEndpointRetryAfter: a gateway in front of the token endpoint answers
// 429 with Retry-After: 3600. The worker's delivery pauses itself for that hour (the token
// endpoint's wait is obeyed, as TestTokenEndpointRetryAfterIsObeyed checks); its /readyz, which
// kubelet asks every 10 s, must not call the token endpoint again meanwhile either.
func TestReadyzObeysTokenEndpointRetryAfter(t *testing.T) {
	ctx := context.Background()
	natsURL := embeddedtest.NATS(t)
	f := embeddedtest.FerretDB(t)
	db := embeddedtest.DBName(t)
	sim := simulator.New(simulator.Config{AppID: "wxrev", Secret: "wxrevsecret"})
	t.Cleanup(sim.Close)
	sim.AddTemplate("tpl-JML", []string{"thing1", "thing2"})
	sim.AddFollower("oRev")
	var tokenCalls atomic.Int64
	inner := sim.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cgi-bin/stable_token" {
			tokenCalls.Add(1)
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		inner.ServeHTTP(w, r)
	}))
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
	m := push.Message{UcsID: push.NewID(time.Now()), ClientID: "c", UserID: "2020000001", Type: "JML",
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

	embeddedtest.Eventually(t, 20*time.Second, "the worker's delivery pauses itself for the token endpoint's 429", func() bool {
		r, err := st.Current(ctx, m.UcsID)
		return err == nil && strings.Contains(r.LastError, "429")
	})
	before := tokenCalls.Load()
	for range 3 { // 30 s of kubelet's probes
		code, body := probeReadyz(t, probes.URL)
		t.Logf("/readyz: %d %q", code, body)
	}
	if n := tokenCalls.Load() - before; n > 0 {
		t.Errorf("the token endpoint asked to wait an hour (429, Retry-After: 3600); /readyz called it %d more times in 3 probes", n)
	}
}
