package service_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
)

// background are the functions of the work Serve runs beside the listener, all of which use
// the store.
var background = []string{
	"pkg/store.(*Store).RunSweeper",
	"pkg/service.(*API).refreshKeys",
	"pkg/oauth.(*Clients).Follow",
	"pkg/service.(*API).ApplyKeptEvents",
}

// running lists those of background that some goroutine is in.
func running() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, f := range background {
		if strings.Contains(string(buf), f) {
			out = append(out, f)
		}
	}
	return out
}

// Close ends the work Serve started beside the listener and returns only once all of it
// returned, even while Serve still runs: the store it closes is used by that work.
func TestCloseAwaitsBackgroundWork(t *testing.T) {
	cfg := &config.Config{
		NATS:    config.NATS{URL: embeddedtest.NATS(t)},
		MongoDB: config.MongoDB{URI: embeddedtest.MongoURI(t), Database: embeddedtest.DBName(t)},
		OAuth: config.OAuth{Clients: []config.Client{{ClientID: "pusher", ClientSecret: "a-secret-of-sixteen",
			Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}}}},
	}
	api, _, stop := serving(t, cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	embeddedtest.Eventually(t, 10*time.Second, "its background work running", func() bool {
		return len(running()) == len(background)
	})
	api.Close()
	if still := running(); len(still) > 0 {
		t.Errorf("Close returned with background work still running: %v", still)
	}
}

// serving builds the front end of cfg and serves it as the api program does (Serve, with its
// HTTP server's time-outs) on base, until stop, which returns Serve's error.
func serving(t *testing.T, cfg *config.Config) (api *service.API, base string, stop func() error) {
	t.Helper()
	cfg.Defaults()
	if err := cfg.Validate(config.RoleAPI); err != nil {
		t.Fatal(err)
	}
	api, err := service.NewAPI(context.Background(), cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	api.DrainDelay = 0
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- api.Serve(ctx, ln) }()
	stop = func() error {
		cancel()
		select {
		case err := <-served:
			return err
		case <-time.After(40 * time.Second):
			return errors.New("Serve did not return")
		}
	}
	base = "http://" + ln.Addr().String()
	embeddedtest.Eventually(t, 10*time.Second, "serving", func() bool {
		r, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		_ = r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	return api, base, stop
}

// Close returns only once its NATS connection has closed: what the program published last (the
// acknowledgements and hand-backs of the platform events it held) has reached NATS before the
// program ends, not left in a buffer the process takes with it.
func TestCloseEndsItsNATSConnection(t *testing.T) {
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	for i := range 5 {
		cfg := &config.Config{
			NATS:    config.NATS{URL: n.URL()},
			MongoDB: config.MongoDB{URI: embeddedtest.MongoURI(t), Database: embeddedtest.DBName(t)},
		}
		api, _, stop := serving(t, cfg)
		if err := stop(); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		api.Close()
		if c := n.Clients(); c != 0 {
			t.Fatalf("round %d: Close returned with %d connections to NATS still open", i, c)
		}
	}
}
