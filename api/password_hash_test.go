package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// TestInvalidPasswordHashRefusedBeforeChanges: a directory user whose password_hash is
// not bcrypt makes the front end refuse to start. The guide says the programs refuse an invalid
// file and list every problem at once; a refused start must not have rewritten the store's
// clients (the running configuration's client reports-app, absent from the new file).
func TestInvalidPasswordHashRefusedBeforeChanges(t *testing.T) {
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
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
nats: {url: %q}
mongodb: {uri: %q, database: %q}
oauth:
  identity_providers: {local: {enabled: true}}
  clients:
    - {client_id: portal, client_secret: portal-secret-01234, grants: [client_credentials], scopes: [notification.mp]}
directory:
  users:
    - {userid: "2020000001", password_hash: "not-a-bcrypt-hash"}
`, natsURL, mongoURI, db)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleAPI); err == nil {
		t.Errorf("Validate accepted directory.users[0].password_hash %q (not bcrypt)", "not-a-bcrypt-hash")
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- run(runCtx, path, false, "", "", 0, false, "") }()
	err = <-errc
	if err == nil {
		t.Fatal("the front end started with a password_hash that is not bcrypt")
	}
	t.Logf("start refused: %v", err)
	if _, err := st.Client(ctx, "reports-app"); err != nil {
		t.Errorf("after the refused start, client reports-app is gone from the store: %v", err)
	}
}
