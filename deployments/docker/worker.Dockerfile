# syntax=docker/dockerfile:1
#
# Image of the delivery workers (worker/). The build context is the repository root:
#
#   docker build -f deployments/docker/worker.Dockerfile -t ucs-worker:0.1.0 .
#
# worker.Dockerfile.dockerignore beside this file keeps data folders, test binaries and .git out
# of the context (BuildKit reads <Dockerfile name>.dockerignore next to the Dockerfile; a plain
# .dockerignore here would be ignored, as docker only reads one at the root of the context).
#
# The program reads /etc/ucs/config.yaml: mount the configuration there (compose mounts
# deployments/config.compose.yaml, Kubernetes mounts the ucs-config Secret). NATS_URL and
# MONGODB_URI in the environment override nats.url and mongodb.uri.
# The worker takes no requests: it pulls from the JetStream consumer. It serves /healthz, /readyz
# and /metrics on worker.listen (0.0.0.0:9091 in the deployments' configurations).

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, in their own layer: it is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ucs-worker ./worker

# static-debian12 has CA certificates and nothing else (no shell); the time zone data is compiled
# into the binary (time/tzdata). :nonroot runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ucs-worker /usr/local/bin/ucs-worker
USER 65532:65532
EXPOSE 9091
ENTRYPOINT ["/usr/local/bin/ucs-worker", "-config", "/etc/ucs/config.yaml"]
