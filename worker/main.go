// Command worker delivers accepted pushes to the messaging platform. Any number of worker
// processes share one durable consumer; scale them on the consumer's backlog.
//
// At start a worker prints where its probes and metrics are, in one line an operator can copy
// ("metrics: http://127.0.0.1:9091/metrics"), and writes that address to worker.metrics-url
// next to its configuration file (named after it: a.yaml gives a.metrics-url), so that a
// worker listening on port 0 can be found; the file is removed when the worker stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	_ "time/tzdata"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/service"
)

func main() {
	configPath := flag.String("config", "", "YAML configuration file (required)")
	listen := flag.String("listen", "", "address of /healthz, /readyz and /metrics, overriding worker.listen (default 127.0.0.1:9091)")
	verbose := flag.Bool("v", false, "log debug messages")
	resume := flag.Bool("resume", false, "end a pause of sending (the platform's daily quota, 45009, or a refusal of the account) for every worker now, and exit")
	pprofAddr := flag.String("pprof", "", "serve Go's profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6061; off by default")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	opts := options{path: *configPath, listen: *listen, verbose: *verbose, resume: *resume}
	err := run(ctx, nil, opts, func(log *slog.Logger) { service.ServeProfiles(*pprofAddr, log) })
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker stopped:", err)
		os.Exit(1)
	}
}

type options struct {
	path    string
	listen  string
	verbose bool
	resume  bool
	out     io.Writer // where the metrics line goes; nil means standard output
}

// run loads the configuration and delivers until ctx ends; log, when nil, is made as the
// configuration's log section says.
func run(ctx context.Context, log *slog.Logger, o options, started ...func(*slog.Logger)) error {
	cfg := &config.Config{}
	if o.path != "" {
		c, err := config.Load(o.path)
		if err != nil {
			return err
		}
		cfg = c
	}
	cfg.ApplyEnv(os.Getenv)
	if o.listen != "" {
		cfg.Worker.Listen = o.listen
	}
	cfg.Defaults()
	if o.verbose {
		cfg.Log.Level = "debug"
	}
	if err := cfg.Validate(config.RoleWorker); err != nil {
		return err
	}
	if log == nil {
		log = service.NewLogger(os.Stderr, cfg.Log)
	}
	if o.resume {
		if err := service.Resume(ctx, cfg, service.Deps{Logger: log}); err != nil {
			return err
		}
		fmt.Println("sending resumed for every worker")
		return nil
	}
	for _, f := range started {
		f(log)
	}
	ln, err := net.Listen("tcp", cfg.Worker.Listen)
	if err != nil {
		return fmt.Errorf("worker.listen: %w", err)
	}
	w, err := service.NewWorker(ctx, cfg, service.Deps{Logger: log})
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer w.Close()
	// The probes outlive the deliveries: while the worker finishes what it holds, /readyz
	// says it is stopping.
	probeCtx, stopProbes := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProbes()
	go func() {
		if err := w.ServeProbes(probeCtx, ln); err != nil {
			log.Error("probes server stopped", "err", err)
		}
	}()
	metricsURL := "http://" + ln.Addr().String() + "/metrics"
	out := o.out
	if out == nil {
		out = os.Stdout
	}
	fmt.Fprintln(out, "metrics:", metricsURL)
	if o.path != "" {
		file := metricsFile(o.path)
		if err := os.WriteFile(file, []byte(metricsURL+"\n"), 0o600); err != nil {
			log.Warn("the metrics address could not be written next to the configuration", "file", file, "err", err)
		} else {
			defer removeIfOurs(file, metricsURL+"\n")
		}
	}
	log.Info("delivering", "stream", cfg.NATS.Stream, "consumer", cfg.NATS.Consumer,
		"concurrency", cfg.Worker.Concurrency, "probes", "http://"+ln.Addr().String(), "metrics", metricsURL)
	err = w.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("stopped")
	return err
}

// metricsFile is where a worker started with the configuration file path writes its metrics
// address: beside it, with the extension .metrics-url.
func metricsFile(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".metrics-url"
}

// removeIfOurs removes file if it still holds content: another worker started since with the
// same configuration wrote its own address there.
func removeIfOurs(file, content string) {
	if b, err := os.ReadFile(file); err == nil && string(b) == content {
		_ = os.Remove(file)
	}
}
