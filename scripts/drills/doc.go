// Package drills holds the fault drills: Go tests that start the whole service from real parts
// (NATS with JetStream, FerretDB, the front end, worker processes, the platform simulator),
// push a known set of messages under load, break one part on purpose, and end by checking,
// for every ucsId the front end answered, that it reached a final state, that the platform
// received it at most once, and that nothing answered is missing.
//
// A plain `go test ./...` runs every drill with shorter outages (5 to 20 s); scripts/drills.sh
// runs them at full length (UCS_DRILLS=full) and prints the figures of the reliability table
// in deployments/README.md.
package drills
