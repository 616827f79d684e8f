package standalone_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestOneStackAFolder: a second standalone process on a data folder another one runs on (a
// second terminal) is refused with a clear error, rather than running NATS and FerretDB on the
// same files; once the first stops, the folder is free.
func TestOneStackAFolder(t *testing.T) {
	dir := t.TempDir()
	a, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 0})
	if err != nil {
		t.Fatal(err)
	}
	b, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 0})
	if err == nil {
		b.Close()
		a.Close()
		t.Fatalf("a second stack started on %s while the first runs on it", dir)
	}
	if !strings.Contains(err.Error(), "in use by another standalone process") {
		t.Errorf("second start: %v", err)
	}
	a.Close()
	c, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 0})
	if err != nil {
		t.Fatalf("a start after the first stopped: %v", err)
	}
	c.Close()
}

// TestDataFolderOfOtherFiles: every file of a data folder is made the owner's alone at start,
// so a folder holding files no stack made (-data .) is refused, and left as it was.
func TestDataFolderOfOtherFiles(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "scripts", "run.sh")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Whatever the process's umask (a stack started before sets 077).
	for _, p := range []string{script, filepath.Dir(script)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 0})
	if err == nil || !strings.Contains(err.Error(), "holds scripts, which no standalone stack made") {
		t.Fatalf("start on a folder of other files: %v", err)
	}
	for p, want := range map[string]os.FileMode{script: 0o755, filepath.Dir(script): 0o755} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %v", p, fi.Mode().Perm(), err, want)
		}
	}
}

// TestWalkthroughPrintsNoPassword: `api -standalone -config FILE` (or with NATS_URL /
// MONGODB_URI set) uses the NATS servers and MongoDB the file names, with their credentials.
// The walk-through printed on standard output at start must show neither password ("Secrets
// are not printed"; the NATS URL is shown "without the password").
func TestWalkthroughPrintsNoPassword(t *testing.T) {
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), User: "ucs", Password: "natsPw1secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	hostport := strings.TrimPrefix(n.URL(), "nats://")
	f := embeddedtest.FerretDB(t)
	// FerretDB takes a user and password over PLAIN (its SQLite backend does not check them).
	mongoURI := strings.Replace(f.URI(), "mongodb://", "mongodb://ucs:mongoPw2secret@", 1)
	if strings.Contains(mongoURI, "?") {
		mongoURI += "&authMechanism=PLAIN"
	} else {
		mongoURI += "?authMechanism=PLAIN"
	}
	cfg := &config.Config{
		// Two servers of a cluster, as nats.url takes them (comma separated).
		NATS:    config.NATS{URL: "nats://ucs:natsPw1secret@" + hostport + ",nats://ucs:natsPw1secret@" + hostport},
		MongoDB: config.MongoDB{URI: mongoURI, Database: embeddedtest.DBName(t)},
	}
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Config: cfg, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out bytes.Buffer
	s.PrintWalkthrough(&out)
	for _, pw := range []string{"natsPw1secret", "mongoPw2secret"} {
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, pw) {
				t.Errorf("the walk-through prints a password: %s", strings.TrimSpace(line))
			}
		}
	}
}
