package main

import (
	"context"
	"testing"
)

// `api admin …` is dispatched to the admin commands with their exit codes (the commands
// themselves are tested in pkg/admin).
func TestRunAdmin(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--help"}, 0},
		{[]string{"clients", "--help"}, 0},
		{[]string{"no-such-command"}, 2},
		{[]string{"-data", t.TempDir(), "clients", "list"}, 1},
	} {
		if got := runAdmin(context.Background(), c.args); got != c.code {
			t.Errorf("api admin %v: exit %d, want %d", c.args, got, c.code)
		}
	}
}
