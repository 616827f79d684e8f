package standalone_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/standalone"
)

// TestRefusedFolderKeepsItsMode: a data folder holding files no stack made is refused and
// is left as it was, including the folder's own mode (e.g. -data . in a shared project
// folder, or -data ~).
func TestRefusedFolderKeepsItsMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 0})
	if err == nil || !strings.Contains(err.Error(), "which no standalone stack made") {
		t.Fatalf("start on a folder of other files: %v", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("refused folder %s: mode changed to %v, want 0755 (refused, but chmod-ed anyway)", dir, fi.Mode().Perm())
	}
}

// TestWalkthroughHidesNATSToken: nats.url may carry a token instead of a user and password
// (nats://TOKEN@host:4222, which nats.go sends as the connection's auth_token). The walk-through
// says "Secrets are not printed" and shows the NATS URL "without the password".
func TestWalkthroughHidesNATSToken(t *testing.T) {
	const token = "s3cretNatsToken0123456789"
	s := &standalone.Stack{DataDir: t.TempDir(), Info: standalone.Info{
		BaseURL:     "http://127.0.0.1:8080",
		NATSURL:     "nats://" + token + "@nats-0.example:4222,nats://" + token + "@nats-1.example:4222",
		MongoDBURI:  "mongodb://127.0.0.1:27017/?replicaSet=rs0",
		PlatformURL: "http://127.0.0.1:9999",
	}}
	var out strings.Builder
	s.PrintWalkthrough(&out)
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, token) {
			t.Errorf("the walk-through prints the NATS token: %s", strings.TrimSpace(line))
		}
	}
}
