package service_test

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
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
	defer func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return")
		}
	}()
	embeddedtest.Eventually(t, 10*time.Second, "serving, with its background work running", func() bool {
		r, err := http.Get("http://" + ln.Addr().String() + "/healthz")
		if err != nil {
			return false
		}
		_ = r.Body.Close()
		return r.StatusCode == http.StatusOK && len(running()) == len(background)
	})
	api.Close()
	if still := running(); len(still) > 0 {
		t.Errorf("Close returned with background work still running: %v", still)
	}
}
