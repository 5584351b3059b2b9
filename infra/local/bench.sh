#!/usr/bin/env bash
# seqflow benchmarks (go tool task bench): brings the local stack up,
# builds and runs cmd/seqbench, which starts the services it needs on a
# fresh topic prefix, drives them, stops them, and writes
# .data/reports/bench.json and the generated section of docs/benchmarks.md.
# Settings: SEQBENCH_* variables (cmd/seqbench/config.go), e.g.
#   SEQBENCH_PHASES=e2e,idle SEQBENCH_IDLE_CONNS=2000 bash infra/local/bench.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
bash infra/local/stack.sh up
# The replicated phase (in the default set) runs on the three-broker
# cluster.
if [[ -z ${SEQBENCH_PHASES:-} || ,${SEQBENCH_PHASES}, == *,replicated,* ]]; then
  bash infra/local/stack.sh up-kafka3
fi
set -a; . .data/local.env; set +a
mkdir -p .data/bin .data/reports
go build -o .data/bin/seqbench ./cmd/seqbench
# The whole run is bounded: each phase has its own timeout as well. The
# replicated phase's 6 runs take about 25 of the default 45 minutes.
exec timeout --signal=TERM --kill-after=30s "${SEQBENCH_TIMEOUT:-45m}" .data/bin/seqbench "$@"
