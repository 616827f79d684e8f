package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/store"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

func TestClientRecords(t *testing.T) {
	clk := clocktest.New(t0)
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	c := store.Client{ID: "reports", SecretSHA256: "aa", Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}, Source: store.SourceAdmin}
	if err := st.CreateClient(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateClient(ctx, c); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	got, err := st.Client(ctx, "reports")
	if err != nil || got.SecretSHA256 != "aa" || !got.Created.Equal(t0) || got.Disabled || got.Source != store.SourceAdmin {
		t.Fatalf("client: %+v %v", got, err)
	}
	if _, err := st.Client(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing client: %v", err)
	}

	clk.Set(t0.Add(time.Minute))
	yes, h, ttl := true, "bb", int64(5400)
	got, err = st.UpdateClient(ctx, "reports", store.ClientChange{Disabled: &yes, SecretSHA256: &h, AccessTokenTTL: &ttl})
	if err != nil || !got.Disabled || got.SecretSHA256 != "bb" || got.AccessTokenTTL != 5400 || !got.Updated.Equal(clk.Now()) ||
		!got.SecretRotated.Equal(clk.Now()) || !got.Created.Equal(t0) || !slices.Equal(got.Scopes, c.Scopes) {
		t.Fatalf("updated: %+v %v", got, err)
	}
	if _, err := st.UpdateClient(ctx, "nobody", store.ClientChange{Disabled: &yes}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing client: %v", err)
	}
	if err := st.DeleteClient(ctx, "reports"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteClient(ctx, "reports"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if cs, err := st.Clients(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("clients after delete: %v %v", cs, err)
	}
}

// The configuration's clients are loaded at every start; what an operator changed in one
// survives a start whose file says the same, and a changed entry wins (but stays disabled).
func TestSyncConfigClients(t *testing.T) {
	st := embeddedtest.Store(t, func() time.Time { return t0 })
	ctx := context.Background()
	fileA := store.Client{ID: "a", SecretSHA256: "a1", Grants: []string{"client_credentials"}, Scopes: []string{"fake_api"}, ConfigDigest: "dA1"}
	fileB := store.Client{ID: "b", SecretSHA256: "b1", Grants: []string{"client_credentials"}, Scopes: []string{"fake_api"}, ConfigDigest: "dB1"}
	if err := st.SyncConfigClients(ctx, []store.Client{fileA, fileB}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateClient(ctx, store.Client{ID: "admin-made", SecretSHA256: "c1", Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	// An operator rotates a's secret and disables b.
	rotated, yes := "a2", true
	if _, err := st.UpdateClient(ctx, "a", store.ClientChange{SecretSHA256: &rotated}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateClient(ctx, "b", store.ClientChange{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	// A restart with the same file changes nothing.
	if err := st.SyncConfigClients(ctx, []store.Client{fileA, fileB}); err != nil {
		t.Fatal(err)
	}
	byID := func() map[string]store.Client {
		cs, err := st.Clients(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]store.Client{}
		for _, c := range cs {
			m[c.ID] = c
		}
		return m
	}
	m := byID()
	if m["a"].SecretSHA256 != "a2" || !m["b"].Disabled || m["a"].Source != store.SourceConfig || len(m) != 3 {
		t.Fatalf("after a start with the same file: %+v", m)
	}
	// The file's entry of b changes, and a leaves the file.
	fileB.Scopes, fileB.ConfigDigest = []string{"notification.mp"}, "dB2"
	if err := st.SyncConfigClients(ctx, []store.Client{fileB}); err != nil {
		t.Fatal(err)
	}
	m = byID()
	if _, ok := m["a"]; ok {
		t.Fatalf("a client removed from the file is still stored: %+v", m["a"])
	}
	if b := m["b"]; !slices.Equal(b.Scopes, []string{"notification.mp"}) || !b.Disabled || b.ConfigDigest != "dB2" {
		t.Fatalf("b after its entry changed: %+v", b)
	}
	if _, ok := m["admin-made"]; !ok {
		t.Fatal("a client made with the admin commands was removed by a start")
	}
}

// TestDeleteClientTakesConsentsOfAnEarlierVersion: a consent an earlier version stored
// ({_id: "userid|client", scopes, at}: no "client" field) goes with its client too.
func TestDeleteClientTakesConsentsOfAnEarlierVersion(t *testing.T) {
	f := embeddedtest.FerretDB(t)
	ctx := context.Background()
	db := embeddedtest.DBName(t)
	st, err := store.Open(ctx, store.Options{URI: f.URI(), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	c := store.Client{ID: "survey", SecretSHA256: "aa", Grants: []string{"authorization_code"}, Scopes: []string{"openid", "notification.mp"}, Source: store.SourceAdmin}
	if err := st.CreateClient(ctx, c); err != nil {
		t.Fatal(err)
	}
	mc, err := mongo.Connect(ctx, options.Client().ApplyURI(f.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mc.Disconnect(ctx) }()
	// The consent as the earlier version's PutConsent stored it.
	if _, err := mc.Database(db).Collection("consents").InsertOne(ctx,
		bson.M{"_id": "2020000042|survey", "scopes": []string{"notification.mp"}, "at": time.Now().Add(-24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if sc, err := st.Consent(ctx, "2020000042", "survey", time.Time{}); err != nil || len(sc) != 1 {
		t.Fatalf("the earlier version's consent is not read: %v %v", sc, err)
	}
	// api admin clients delete survey
	if err := st.DeleteClient(ctx, "survey"); err != nil {
		t.Fatal(err)
	}
	if sc, err := st.Consent(ctx, "2020000042", "survey", time.Time{}); err != nil || len(sc) != 0 {
		t.Fatalf("after the client was deleted, the user's consent to it (stored by an earlier version) remains: %v %v; "+
			"an application registered later under the id %q skips the consent page", sc, err, "survey")
	}
}
