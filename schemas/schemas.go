// Package schemas embeds the JSON Schemas of the service: the push body
// (push.schema.json, generated from the rules of package push and tested to
// agree with push.Parse), the configuration, and the OpenAPI 3.1 description
// of the interfaces (openapi.json, which refers to push.schema.json for the
// push body). The metadata dictionary serves them.
//
// Every pattern is written in the syntax that ECMA-262 with the u flag (ajv,
// redocly, browsers), RE2 (Go) and Python's re read alike: characters as
// themselves (invisible ones as \uXXXX escapes of the JSON text, which decode
// to the character), classes, (?:…), bounded repetition, ^ and $; no \x{…}
// (RE2 only) and no \u{…} (ECMA-262 only). Since Python's $ also matches
// before a final line feed, every anchored string of the push body also
// carries "not": {"pattern": "\n"}. The tests run the push body's agreement
// cases through the schema with Go's regexp and with an ECMA-262 engine
// (regexp2), and CI lints the served description with @redocly/cli
// (scripts/lint-openapi, each rule changed says why). The description lists
// every status an operation answers, and its servers entry is "/": paths are
// relative to the address that served it.
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
