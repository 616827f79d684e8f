// Package embeddedtest starts the real embedded servers for tests: each call gets its own
// server on a port the OS chose, with its data in the test's temporary folder, stopped when the
// test ends.
package embeddedtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/store"
)

// NATS starts a NATS server with JetStream and returns its URL.
func NATS(t testing.TB) string {
	t.Helper()
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	return n.URL()
}

// JetStream starts a NATS server and returns a JetStream context on a connection to it.
func JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// MongoURI starts FerretDB and returns its MongoDB connection string.
func MongoURI(t testing.TB) string {
	t.Helper()
	return FerretDB(t).URI()
}

// FerretDB starts FerretDB.
func FerretDB(t testing.TB) *embedded.FerretDB {
	t.Helper()
	f, err := embedded.StartFerretDB(embedded.FerretDBOptions{
		Dir:    t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Shutdown)
	return f
}

// Store starts FerretDB and opens a store on a database named after the test.
func Store(t testing.TB, now func() time.Time) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := FerretDB(t)
	db := DBName(t)
	st, err := store.Open(ctx, store.Options{URI: f.URI(), Database: db, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.IndexIDs(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return st
}

// DBName is a database name unique to the test.
func DBName(t testing.TB) string {
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_", ".", "_")
	name := r.Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t_%s_%d", name, time.Now().UnixNano()%1_000_000)
}

// Eventually polls cond every 20ms until it holds or the deadline passes, then fails the test
// with what. Tests wait with it rather than sleeping.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
