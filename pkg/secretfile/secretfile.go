// Package secretfile writes files that hold secrets (the standalone stack's standalone.json and
// worker.yaml, the embedded servers' credentials) so that no other local user can read them at
// any moment: readable by the owner only, in folders only the owner can enter, and replaced
// atomically, so that a crash leaves the old file or the new one, never half of one.
package secretfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces the file at path with data: a new temporary file in the same folder, created
// with mode 0600 (and that mode forced, whatever the process's umask or a leftover file
// says), written, synced to disk, then renamed over path, and the folder synced. A leftover
// path+".tmp" of an earlier version is removed.
func Write(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close() // the write already failed; the temporary file is removed
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close() // the write already failed; the temporary file is removed
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close() // the write already failed; the temporary file is removed
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Remove(path + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove leftover %s.tmp: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }() // opened only to sync
	// Some file systems cannot sync a folder; the rename is then as durable as they make it.
	_ = d.Sync()
	return nil
}

// PrivateDir creates dir (and its parents) if needed, and makes dir itself 0700: only the
// owner can list it or reach the files inside.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// Restrict makes every file under dir 0600 and every folder 0700, for data written before
// they were created so (or by a library that creates its files 0644).
func Restrict(dir string) error {
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		} else if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() == mode {
			return nil
		}
		return os.Chmod(path, mode)
	})
}
