// Package schemas embeds the JSON Schemas of the service: the push body
// (push.schema.json, generated from the rules of package push and tested to
// agree with push.Parse), the configuration, and the OpenAPI 3.1 description
// of the interfaces (openapi.json, which refers to push.schema.json for the
// push body). The metadata dictionary serves them.
package schemas

import "embed"

// FS holds every *.json file of this directory, at its base name.
//
//go:embed *.json
var FS embed.FS

// Push returns the JSON Schema (draft 2020-12) of a push request body.
func Push() []byte {
	b, err := FS.ReadFile("push.schema.json")
	if err != nil {
		// The file is embedded at build time; missing, the build is broken.
		panic("schemas: " + err.Error())
	}
	return b
}
