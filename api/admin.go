package main

import (
	"context"
	"os"

	"golang.org/x/term"

	"github.com/campus-it/ucs/pkg/admin"
)

// runAdmin runs `api admin …` (the operators' commands, package admin) with the process's
// streams and environment, and returns its exit code.
func runAdmin(ctx context.Context, args []string) int {
	return admin.Run(ctx, args, admin.Env{
		Stdout: os.Stdout, Stderr: os.Stderr,
		Terminal: term.IsTerminal(int(os.Stderr.Fd())),
		Getenv:   os.Getenv,
	})
}
