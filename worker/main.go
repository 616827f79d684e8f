// Command worker delivers accepted pushes to the messaging platform. Any number of worker
// processes share one durable consumer; scale them on the consumer's backlog.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/service"
)

func main() {
	configPath := flag.String("config", "", "YAML configuration file (required)")
	verbose := flag.Bool("v", false, "log debug messages")
	pprofAddr := flag.String("pprof", "", "serve Go's profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6061; off by default")
	flag.Parse()
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	service.ServeProfiles(*pprofAddr, log)
	if err := run(ctx, log, *configPath); err != nil {
		log.Error("worker stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, path string) error {
	cfg := &config.Config{}
	if path != "" {
		c, err := config.Load(path)
		if err != nil {
			return err
		}
		cfg = c
	}
	cfg.ApplyEnv(os.Getenv)
	cfg.Defaults()
	if err := cfg.Validate(config.RoleWorker); err != nil {
		return err
	}
	w, err := service.NewWorker(ctx, cfg, service.Deps{Logger: log})
	if err != nil {
		return err
	}
	defer w.Close()
	log.Info("delivering", "stream", cfg.NATS.Stream, "consumer", cfg.NATS.Consumer, "concurrency", cfg.Worker.Concurrency)
	return w.Run(ctx)
}
