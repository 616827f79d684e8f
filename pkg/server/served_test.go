package server_test

import (
	"bytes"
	"testing"

	"github.com/campus-it/ucs/pkg/server"
)

// TestOpenAPIDescriptionIsServed: what scripts/lint-openapi gives the outside validator is
// byte for byte what a front end serves.
func TestOpenAPIDescriptionIsServed(t *testing.T) {
	e := newEnv(t)
	want, err := server.OpenAPIDescription(e.cfg.OAuth.Realm)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.do("GET", server.OpenAPIPath, "", "", "").body; !bytes.Equal(got, want) {
		t.Errorf("server.OpenAPIDescription differs from the served description (%d and %d bytes)", len(want), len(got))
	}
}
