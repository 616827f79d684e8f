//go:build unix

package standalone

import "syscall"

// restrictUmask makes every file and folder the process creates from now on its owner's
// alone: the embedded servers (SQLite under FerretDB in particular) create theirs readable by
// everyone otherwise.
func restrictUmask() { syscall.Umask(0o077) }
