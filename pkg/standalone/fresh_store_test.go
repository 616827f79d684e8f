package standalone_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/campus-it/ucs/pkg/standalone"
)

// TestNewStoreUnderKeptStandaloneJSONHasDemoBindings: a developer resets the stack's
// messages by removing data/ferretdb/ (or points the stack at another MongoDB with
// MONGODB_URI) and keeps standalone.json. The sandbox still shows the demo users' phones and
// the simulator still has them as followers, but the seeded bindings are written only when
// standalone.json is new: the walk-through's push to 2020000001 fails "no binding".
func TestNewStoreUnderKeptStandaloneJSONHasDemoBindings(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	s.Close()
	if err := os.RemoveAll(filepath.Join(dir, "ferretdb")); err != nil {
		t.Fatal(err)
	}
	s = start(t, dir)
	defer s.Close()
	tok := token(t, s.Info.BaseURL, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	id := pushTo(t, s.Info.BaseURL, tok, standalone.DemoUsers[0], todo)
	if st := final(t, s.Info.BaseURL, tok, id); st != "delivered" {
		t.Fatalf("the walk-through's push to %s on a fresh store is %s: %v", standalone.DemoUsers[0], st, lookup(t, s.Info.BaseURL, tok, id)["reason"])
	}
}
