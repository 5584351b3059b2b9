#!/usr/bin/env bash
# Burns a share of one core for a while: busy for PCT % of every 10 ms
# period, asleep for the rest. For measuring how a run's latency grows
# when other work takes the machine's CPU (docs/benchmarks.md, "The
# floor"), e.g. the floor phase with the box as busy as in the e2e phase:
#
#   infra/local/cpu-burn.sh 60 150 & infra/local/cpu-burn.sh 60 150 &
#   SEQBENCH_PHASES=floor SEQBENCH_DOC= .data/bin/seqbench
#
#   infra/local/cpu-burn.sh PCT SECONDS
set -euo pipefail
pct=${1:?usage: cpu-burn.sh PCT SECONDS}
secs=${2:?usage: cpu-burn.sh PCT SECONDS}
exec python3 - "$pct" "$secs" <<'EOF'
import sys, time
pct, secs = float(sys.argv[1]), float(sys.argv[2])
period = 0.010
end = time.monotonic() + secs
while True:
    start = time.monotonic()
    if start >= end:
        break
    while time.monotonic() - start < period * pct / 100:
        pass
    time.sleep(max(0.0, period - (time.monotonic() - start)))
EOF
