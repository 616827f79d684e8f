package secretfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/campus-it/ucs/pkg/secretfile"
)

// TestWrite: the file is 0600 whatever was there, a leftover .tmp of mode 0644 included, and
// holds the new content; no temporary file is left behind.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "standalone.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", []byte("leftover"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := secretfile.Write(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("content %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

// TestRestrict: files become 0600 and folders 0700.
func TestRestrict(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "db")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "ucs.sqlite"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := secretfile.PrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := secretfile.Restrict(dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, sub: 0o700, filepath.Join(sub, "ucs.sqlite"): 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v, want %v (%v)", p, fi.Mode().Perm(), want, err)
		}
	}
}
