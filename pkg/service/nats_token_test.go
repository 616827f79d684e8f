package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
)

// TestReconnectLogHidesNATSToken: nats.url may carry a token (nats://TOKEN@host:4222, which
// nats.go sends as auth_token). The line logged when NATS comes back names its address, never
// the token.
func TestReconnectLogHidesNATSToken(t *testing.T) {
	const token = "s3cretNatsToken0123456789"
	dir := t.TempDir()
	port := embeddedtest.FreePort(t)
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	cfg := &config.Config{
		NATS:    config.NATS{URL: fmt.Sprintf("nats://%s@127.0.0.1:%d", token, port)},
		MongoDB: config.MongoDB{URI: embeddedtest.MongoURI(t), Database: embeddedtest.DBName(t)},
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleAPI); err != nil {
		t.Fatal(err)
	}
	var out embeddedtest.SyncBuffer
	api, err := service.NewAPI(context.Background(), cfg, service.Deps{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	n.Shutdown()
	if n, err = embedded.StartNATS(embedded.NATSOptions{Dir: dir, Port: port}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 30*time.Second, "the front end reconnects", func() bool {
		return strings.Contains(out.String(), "reconnected to nats")
	})
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, token) {
			t.Errorf("the log prints the NATS token: %s", line)
		}
		if strings.Contains(line, "reconnected to nats") && !strings.Contains(line, fmt.Sprintf("addr=127.0.0.1:%d", port)) {
			t.Errorf("the reconnection names no address: %s", line)
		}
	}
}
