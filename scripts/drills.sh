#!/usr/bin/env bash
# Fault drills at full length: each starts the whole service from real parts, breaks one part
# on purpose while pushes flow, and checks every answered push (final, delivered once, none
# missing). A plain `go test ./...` runs the same drills with short outages.
# Usage: scripts/drills.sh [-run REGEXP]
set -euo pipefail
cd "$(dirname "$0")/.."
UCS_DRILLS=full go test -count=1 -timeout 30m -v "$@" ./scripts/drills/ | tee /dev/stderr | grep -E '^\s+\S+: DRILL ' | sed -E 's/^\s+\S+: DRILL //'
