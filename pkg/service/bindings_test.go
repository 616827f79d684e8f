package service_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// bindingsStore is a store on the embedded server, opened as a tool opens it.
func bindingsStore(t *testing.T) *store.Store {
	t.Helper()
	f := embeddedtest.FerretDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URI: f.URI(), Database: embeddedtest.DBName(t), ConnectTimeout: 10 * time.Second, Tool: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return st
}

// boundTo lists the user numbers whose binding names openID, of those given.
func boundTo(t *testing.T, st *store.Store, openID string, users ...string) []string {
	t.Helper()
	var out []string
	for _, u := range users {
		if b, err := st.Binding(context.Background(), u); err == nil && b.OpenID == openID {
			out = append(out, u)
		}
	}
	return out
}

// TestConfiguredFollowerMovedToAnotherUser: the operator corrects the configuration's
// bindings: follower oF, configured for 2020000001 by mistake, belongs to 2020000002. The
// next start binds it as configured, and to that user number alone.
func TestConfiguredFollowerMovedToAnotherUser(t *testing.T) {
	st := bindingsStore(t)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	const oF = "oFollower000000000000000000F"
	if err := service.LoadBindings(ctx, st, []config.Binding{{UserID: "2020000001", OpenID: oF}}, log); err != nil {
		t.Fatal(err)
	}
	// The corrected file, next start.
	if err := service.LoadBindings(ctx, st, []config.Binding{{UserID: "2020000002", OpenID: oF}}, log); err != nil {
		t.Fatal(err)
	}
	if got := boundTo(t, st, oF, "2020000001", "2020000002"); len(got) != 1 || got[0] != "2020000002" {
		t.Fatalf("after a start with bindings [2020000002 → %s], the follower is bound to %v; want [2020000002]", oF, got)
	}
}

// TestEarlierStoreFollowerBoundOnce: a store written by the earlier version, whose
// configured bindings had no follower owner, so that a student binding the same follower on
// the binding page did not replace it: two user numbers bound to one follower. A start binds it
// as the file says, to one user number.
func TestEarlierStoreFollowerBoundOnce(t *testing.T) {
	st := bindingsStore(t)
	ctx := context.Background()
	const oF = "oFollower000000000000000000G"
	// The earlier version's start: store.PutBinding of the configured binding.
	if err := st.PutBinding(ctx, store.Binding{UserID: "2020000001", OpenID: oF}); err != nil {
		t.Fatal(err)
	}
	// A student binds the same follower on the binding page.
	if _, err := st.Bind(ctx, "2021000099", oF); err != nil {
		t.Fatal(err)
	}
	// This version's start with the same file.
	if err := service.LoadBindings(ctx, st, []config.Binding{{UserID: "2020000001", OpenID: oF}}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if got := boundTo(t, st, oF, "2020000001", "2021000099"); len(got) != 1 || got[0] != "2020000001" {
		t.Fatalf("after the start, follower %s is bound to user numbers %v: one follower bound to two user numbers", oF, got)
	}
}
