package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/service"
)

// TestRolloutOfCorrectedSecretEndsThePause follows the operators' guide for a wrong
// platform.secret (40125): fix the configuration, restart the workers, then `worker -resume`.
// The Deployment (maxUnavailable: 0) keeps the old workers until the new ones are ready. The
// old worker, whose own calls met the refusal, is not ready; the new one only waits for the
// pause it set, and is ready, so that the rollout ends; the resume after it delivers every
// message.
func TestRolloutOfCorrectedSecretEndsThePause(t *testing.T) {
	r := newWorkerRig(t)
	r.sim.SetFaults(simulator.Faults{})
	ctx := context.Background()

	// The old worker, with the wrong secret: it pauses sending for every worker (40125).
	oldCfg := *r.cfg
	oldCfg.Platform.Secret = "wrongsecret"
	old, err := service.NewWorker(ctx, &oldCfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	octx, ostop := context.WithCancel(ctx)
	oran := make(chan struct{})
	go func() { _ = old.Run(octx); close(oran) }()
	oldStopped := false
	stopOld := func() {
		if !oldStopped {
			oldStopped = true
			ostop()
			<-oran
			old.Close()
		}
	}
	t.Cleanup(stopOld)

	nc, err := nats.Connect(r.cfg.NATS.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	p, err := sending.OpenPause(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	embeddedtest.Eventually(t, 20*time.Second, "the old worker pauses sending for 40125", func() bool {
		st, ok := p.Paused()
		return ok && strings.Contains(st.Reason, "40125")
	})
	oldProbes := httptest.NewServer(old.Handler())
	t.Cleanup(oldProbes.Close)
	if code, body := readyz(t, oldProbes.URL); code != http.StatusServiceUnavailable || !strings.Contains(body, "sending paused: 40125") {
		t.Fatalf("the old worker's /readyz: %d %q; want 503 naming the 40125 pause", code, body)
	}

	// The rollout's new worker, with the fixed secret, becomes ready while the pause holds.
	nw, err := service.NewWorker(ctx, r.cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	nctx, nstop := context.WithCancel(ctx)
	nran := make(chan struct{})
	go func() { _ = nw.Run(nctx); close(nran) }()
	t.Cleanup(func() { nstop(); <-nran; nw.Close() })
	probes := httptest.NewServer(nw.Handler())
	t.Cleanup(probes.Close)
	embeddedtest.Eventually(t, 20*time.Second, "the new worker is ready while the old worker's pause holds", func() bool {
		code, _ := readyz(t, probes.URL)
		return code == http.StatusOK
	})

	// The rollout ends with the old worker; the operator resumes.
	stopOld()
	if err := service.Resume(ctx, r.cfg, service.Deps{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range r.ids {
		embeddedtest.Eventually(t, 60*time.Second, id+" sent", func() bool {
			res, err := r.st.Current(ctx, id)
			return err == nil && res.State == push.StateSent
		})
	}
}

// readyz is a probe of /readyz at base: its status and body.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestBadAPIBaseRefusedBeforeTouchingNATS: a platform.api_base with a query passes the
// configuration's validation for a worker, and the worker fails only in platform.New, after it
// has connected to MongoDB and NATS and created (or reconfigured) the push stream. Bad values
// should give a clear error naming the key at start, and change nothing.
func TestBadAPIBaseRefusedBeforeTouchingNATS(t *testing.T) {
	natsURL := embeddedtest.NATS(t)
	f := embeddedtest.FerretDB(t)
	yaml := "nats: {url: \"" + natsURL + "\"}\n" +
		"mongodb: {uri: \"" + f.URI() + "\", database: " + embeddedtest.DBName(t) + "}\n" +
		"platform: {api_base: \"https://api.weixin.qq.com/?lang=zh_CN\", appid: wxa, secret: s}\n" +
		"worker: {listen: \"127.0.0.1:0\"}\n"
	path := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), nil, options{path: path, out: io.Discard})
	if err == nil {
		t.Fatal("the worker started")
	}
	nc, cerr := nats.Connect(natsURL)
	if cerr != nil {
		t.Fatal(cerr)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	_, serr := js.Stream(context.Background(), "UCS_PUSH")
	if !strings.Contains(err.Error(), "platform.api_base") || !errors.Is(serr, jetstream.ErrStreamNotFound) {
		t.Fatalf("the error %q does not name platform.api_base, or the stream was touched before it (stream lookup: %v)", err, serr)
	}
}
