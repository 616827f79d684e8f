#!/usr/bin/env bash
# Micro-benchmarks of the hot paths (the load benchmark of the whole stack is go run ./scripts/bench). Every figure is measured on this machine with the real embedded
# servers (JetStream, FerretDB) and the platform simulator over loopback, all sharing its cores.
# Usage: scripts/bench.sh [benchtime]   (default 3s)
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-3s}
echo "# $(go version), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "## push body validation, ids, message encoding (pkg/push)"
go test -run '^$' -bench . -benchmem -benchtime "$t" ./pkg/push/ | grep -E '^Benchmark'
echo "## bearer check of a cached token (pkg/oauth)"
go test -run '^$' -bench . -benchmem -benchtime "$t" ./pkg/oauth/ | grep -E '^Benchmark'
echo "## front end over HTTP: push accept (PubAck), lookup, token grant (pkg/server)"
go test -run '^$' -bench . -benchmem -benchtime "$t" ./pkg/server/ | grep -E '^Benchmark'
echo "## store on embedded FerretDB: group-commit writes, final-result lookups at 100,000 records, idle and while sweeping (pkg/store)"
go test -run '^$' -bench . -benchmem -benchtime "$t" ./pkg/store/ | grep -E '^Benchmark'
echo "## platform client against the simulator (pkg/platform)"
go test -run '^$' -bench . -benchmem -benchtime "$t" ./pkg/platform/ | grep -E '^Benchmark'
echo "## delivery throughput through workers (pkg/delivery)"
go test -run '^$' -bench . -benchmem -benchtime "$t" ./pkg/delivery/ | grep -E '^Benchmark' || true
