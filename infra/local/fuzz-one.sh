#!/usr/bin/env bash
# Runs one fuzz target for a bounded time: infra/local/fuzz-one.sh NAME PKG FUZZTIME
#
# Go 1.26's fuzz coordinator can fail a target at the -fuzztime boundary
# with a bare "context deadline exceeded" when a starved worker has not
# acknowledged its last input (golang/go#75804, fixed in Go 1.27): the log
# shows "execs: N (0/sec)" until the deadline, and no input is written.
# That, and only that, is retried once. A real finding always prints
# "Failing input written to" (or a panic or a test error): it fails at once.
set -uo pipefail
name=${1:?usage: fuzz-one.sh NAME PKG FUZZTIME}
pkg=${2:?usage: fuzz-one.sh NAME PKG FUZZTIME}
fuzztime=${3:?usage: fuzz-one.sh NAME PKG FUZZTIME}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# boundary_flake LOG: the run's only failure is the coordinator's deadline.
boundary_flake() {
  grep -q '^    context deadline exceeded$' "$1" &&
    ! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$1"
}

for attempt in 1 2; do
  if go test -run XXX -fuzz "^$name\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"; then
    exit 0
  fi
  if [ "$attempt" = 1 ] && boundary_flake "$log"; then
    echo "fuzz $name: the coordinator's deadline race (golang/go#75804), no input written; once more"
    continue
  fi
  exit 1
done
exit 1
