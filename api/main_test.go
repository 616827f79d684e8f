package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// refusedStart loads the clients of a running configuration into a fresh store, starts the
// front end with a file that names only one of them and holds more (oauth's further keys, and
// top-level keys), and checks that the start was refused and that the store still has the
// running configuration's other client. It returns the file's path and the start's error. A
// front end that starts after all is stopped after 20 s.
func refusedStart(t *testing.T, listen, oauth, more string) (path string, err error) {
	t.Helper()
	natsURL, mongoURI, db := embeddedtest.NATS(t), embeddedtest.MongoURI(t), embeddedtest.DBName(t)
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
	yaml := fmt.Sprintf(`listen: %s
nats: {url: %q}
mongodb: {uri: %q, database: %q}
oauth:
  clients:
    - {client_id: portal, client_secret: portal-secret-01234, grants: [client_credentials], scopes: [notification.mp]}
`, listen, natsURL, mongoURI, db) + oauth + more
	path = filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err = run(runCtx, path, false, "", "", 0, false, ""); err == nil {
		t.Fatal("the front end started")
	}
	if _, cerr := st.Client(ctx, "reports-app"); cerr != nil {
		t.Errorf("after the refused start (%v), client reports-app is gone from the store: %v", err, cerr)
	}
	return path, err
}

// TestUnlistenableStartChangesNothing: a front end that cannot take its address (in use, or a
// port the user may not open) stops before it changes anything: the store keeps the clients of
// the configuration that runs, although the refused file no longer names one of them.
func TestUnlistenableStartChangesNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, _ = refusedStart(t, busy.Addr().String(), "", "") // it checks what the test asks
}

// TestInvalidPasswordHashRefusedBeforeChanges: a directory user whose password_hash is not
// bcrypt is one of the file's problems, which the programs list at once and refuse to start
// for before anything connects: the store keeps the running configuration's clients.
func TestInvalidPasswordHashRefusedBeforeChanges(t *testing.T) {
	path, err := refusedStart(t, "127.0.0.1:0", "  identity_providers: {local: {enabled: true}}\n", `directory:
  users:
    - {userid: "2020000001", password_hash: "not-a-bcrypt-hash"}
`)
	if !strings.Contains(err.Error(), "directory.users[0].password_hash: not a bcrypt hash") {
		t.Errorf("the refused start: %v", err)
	}
	cfg, lerr := config.Load(path)
	if lerr != nil {
		t.Fatal(lerr)
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleAPI); err == nil {
		t.Error("Validate accepted a password_hash that is not bcrypt")
	}
}
