// Package deps pins the project's module dependencies while packages are being written.
package deps

import (
	_ "github.com/FerretDB/FerretDB/ferretdb"
	_ "github.com/cenkalti/backoff/v4"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/labstack/echo/v4"
	_ "github.com/labstack/echo/v4/middleware"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/oklog/ulid/v2"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "go.mongodb.org/mongo-driver/mongo"
	_ "go.yaml.in/yaml/v3"
)
