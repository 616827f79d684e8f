// Command api is the front end of the campus identity and notification service: the token
// service, OpenID Connect endpoints, push and result lookup. With -standalone it also runs
// everything it depends on in the process, for a developer's machine. `api admin …` holds the
// operators' commands (api admin --help).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	_ "time/tzdata" // the envelope's time zone must exist on minimal images

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/standalone"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := runAdmin(ctx, os.Args[2:])
		stop()
		os.Exit(code)
	}
	var (
		configPath = flag.String("config", "", "YAML configuration file (see deployments/config.example.yaml)")
		standAlone = flag.Bool("standalone", false, "run the whole service in this process: embedded NATS, FerretDB, platform simulator and workers")
		dataDir    = flag.String("data", "./data", "folder of the standalone mode's data")
		listen     = flag.String("listen", "", "address to serve on, overriding the configuration")
		workers    = flag.Int("workers", 1, "in-process delivery workers under -standalone; 0 for none (add worker processes with -config DATA/worker.yaml)")
		verbose    = flag.Bool("v", false, "log debug messages")
		pprofAddr  = flag.String("pprof", "", "serve Go's profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off by default")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *configPath, *standAlone, *dataDir, *listen, *workers, *verbose, *pprofAddr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "api stopped:", err)
		os.Exit(1)
	}
}

// logger is the program's logger as the configuration's log section says (text at info level
// by default); -v lowers the level to debug.
func logger(l config.Log, verbose bool) *slog.Logger {
	if l.Format == "" {
		l.Format = "text"
	}
	if verbose || l.Level == "" {
		l.Level = map[bool]string{true: "debug", false: "info"}[verbose]
	}
	return service.NewLogger(os.Stderr, l)
}

func run(ctx context.Context, configPath string, standAlone bool, dataDir, listen string, workers int, verbose bool, pprofAddr string) error {
	var cfg *config.Config
	if configPath != "" {
		c, err := config.Load(configPath)
		if err != nil {
			return err
		}
		cfg = c
	} else {
		cfg = &config.Config{}
	}
	cfg.ApplyEnv(os.Getenv)
	if listen != "" {
		cfg.Listen = listen
	}
	log := logger(cfg.Log, verbose)
	service.ServeProfiles(pprofAddr, log)
	if standAlone {
		if os.Getenv("GOMEMLIMIT") == "" {
			// One process holds the whole stack here; past this the garbage collector works
			// harder rather than the process growing (GOMEMLIMIT overrides it).
			debug.SetMemoryLimit(standalone.MemoryLimit)
		}
		st, err := standalone.Start(ctx, standalone.Options{DataDir: dataDir, Config: cfg, Workers: workers, Logger: log})
		if err != nil {
			return err
		}
		st.PrintWalkthrough(os.Stdout)
		select {
		case <-ctx.Done():
		case err := <-waitErr(st):
			st.Close()
			return err
		}
		log.Info("shutting down")
		st.Close()
		return nil
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleAPI); err != nil {
		return err
	}
	// The address is taken first: a start that cannot listen changes nothing (NewAPI brings
	// the stream, the clients and the bindings in line with the file).
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	api, err := service.NewAPI(ctx, cfg, service.Deps{Logger: log})
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer api.Close()
	log.Info("serving", "addr", ln.Addr().String(), "public_url", cfg.PublicURL)
	if err := api.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func waitErr(st *standalone.Stack) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- st.Wait() }()
	return ch
}
