package main

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
)

// TestStopWithinShutdownGrace stops a delivering worker while MongoDB stops answering in time
// (a primary election during a rollout): Run returns at the shutdown grace, and Close, which
// waits for the deliveries under way and then disconnects, ends a moment later, so that the
// whole stop stays within the pod's termination grace period (the grace plus a few seconds).
func TestStopWithinShutdownGrace(t *testing.T) {
	r := newWorkerRig(t)
	u, err := url.Parse(r.cfg.MongoDB.URI)
	if err != nil {
		t.Fatal(err)
	}
	proxy := embeddedtest.NewProxy(t, u.Host)
	cfg := *r.cfg
	cfg.MongoDB.URI = "mongodb://" + proxy.Addr() + "/"
	const grace = 3 * time.Second
	cfg.ShutdownGrace = config.Duration(grace)
	w, err := service.NewWorker(context.Background(), &cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	embeddedtest.Eventually(t, 30*time.Second, "the worker delivers", func() bool { return len(r.sim.Sent()) >= 3 })
	proxy.SetDelay(60 * time.Second)
	t.Cleanup(func() { proxy.SetDelay(0) })
	start := time.Now()
	stop() // SIGTERM
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	runFor := time.Since(start)
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("Close still running after 60 s")
	}
	if total := time.Since(start); total > grace+5*time.Second { // Close: at most 4 s
		t.Fatalf("with shutdown_grace %s the stop took %s (Run %s, then Close %s)", grace,
			total.Round(100*time.Millisecond), runFor.Round(100*time.Millisecond), (total - runFor).Round(100*time.Millisecond))
	}
}
