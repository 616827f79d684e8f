package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// TestUnlistenableStartChangesNothing: a front end that cannot take its address (in use, or a
// port the user may not open) stops before it changes anything: the store keeps the clients of
// the configuration that runs, although the refused file no longer names one of them.
func TestUnlistenableStartChangesNothing(t *testing.T) {
	natsURL := embeddedtest.NATS(t)
	mongoURI := embeddedtest.MongoURI(t)
	db := embeddedtest.DBName(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{URI: mongoURI, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close(context.Background()) }()
	running := []config.Client{
		{ClientID: "reports-app", ClientSecret: "reports-secret-0123", Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}},
		{ClientID: "portal", ClientSecret: "portal-secret-01234", Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}},
	}
	if err := service.LoadClients(ctx, st, running); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	yaml := fmt.Sprintf(`listen: %s
nats: {url: %q}
mongodb: {uri: %q, database: %q}
oauth:
  clients:
    - {client_id: portal, client_secret: portal-secret-01234, grants: [client_credentials], scopes: [notification.mp]}
`, busy.Addr(), natsURL, mongoURI, db)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, path, false, "", "", 0, false, ""); err == nil {
		t.Fatalf("the front end started on %s, an address in use", busy.Addr())
	}
	if _, err := st.Client(ctx, "reports-app"); err != nil {
		t.Errorf("after the refused start, client reports-app is gone from the store: %v", err)
	}
}
