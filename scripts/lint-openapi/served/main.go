// Command served writes the OpenAPI description exactly as a front end serves it at
// /v1/meta/openapi.json (push schema bundled, realm filled in), for outside validators.
//
//	go run ./scripts/lint-openapi/served -realm campus -o openapi.served.json
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/campus-it/ucs/pkg/server"
)

func main() {
	realm := flag.String("realm", "campus", "the realm the front end serves (oauth.realm)")
	out := flag.String("o", "", "file to write; standard output when empty")
	flag.Parse()
	spec, err := server.OpenAPIDescription(*realm)
	if err == nil {
		if *out == "" {
			_, err = os.Stdout.Write(spec)
		} else {
			err = os.WriteFile(*out, spec, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "served:", err)
		os.Exit(1)
	}
}
