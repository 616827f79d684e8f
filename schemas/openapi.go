package schemas

import (
	"bytes"
	"sync"

	"github.com/campus-it/ucs/pkg/openapi"
)

// OpenAPI returns the OpenAPI 3.1 description of the service's interfaces (openapi.json),
// bundled: its PushBody component is written as {"$ref": "push.schema.json"}, so the push
// rules have one source, and is served with that schema copied in (see openapi.Bundle).
// Callers get their own copy.
func OpenAPI() []byte { return bytes.Clone(bundled()) }

var bundled = sync.OnceValue(func() []byte {
	raw, err := FS.ReadFile("openapi.json")
	if err != nil {
		panic("schemas: " + err.Error())
	}
	b, err := openapi.Bundle(raw, FS.ReadFile)
	if err != nil {
		// Both files are embedded at build time: a failure is a broken build, which the tests
		// of this package catch before anything starts.
		panic("schemas: " + err.Error())
	}
	return b
})
