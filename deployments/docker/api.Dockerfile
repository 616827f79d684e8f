# syntax=docker/dockerfile:1
#
# Image of the front end (api/). The build context is the repository root:
#
#   docker build -f deployments/docker/api.Dockerfile -t ucs-api:0.1.0 .
#
# api.Dockerfile.dockerignore beside this file keeps data folders, test binaries and .git out of
# the context (BuildKit reads <Dockerfile name>.dockerignore next to the Dockerfile; a plain
# .dockerignore here would be ignored, as docker only reads one at the root of the context).
#
# The program reads /etc/ucs/config.yaml: mount the configuration there (compose mounts
# deployments/config.compose.yaml, Kubernetes mounts the ucs-config Secret). NATS_URL and
# MONGODB_URI in the environment override nats.url and mongodb.uri.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, in their own layer: it is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ucs-api ./api

# static-debian12 has CA certificates and nothing else (no shell); the time zone data is compiled
# into the binary (time/tzdata). :nonroot runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ucs-api /usr/local/bin/ucs-api
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/ucs-api", "-config", "/etc/ucs/config.yaml"]
