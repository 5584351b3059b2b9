#!/usr/bin/env bash
# A/B of seqbench's e2e phase under two settings of the local broker,
# alternating: for each round and each side it restarts the stack with that
# side's environment, runs the e2e phase once to warm the broker (its JIT;
# not counted), then RUNS times, and prints the medians of each side.
#
#   infra/local/ab-broker.sh "NAME=value ..." "NAME=value ..." [ROUNDS] [RUNS]
#
# e.g. a newer JDK for the broker:
#   SEQBENCH_E2E_MAX=false SEQBENCH_E2E_PACED_RUNS=2 infra/local/ab-broker.sh \
#     "SEQFLOW_KAFKA_JAVA=java" "SEQFLOW_KAFKA_JAVA=/usr/lib/jvm/temurin-25-jdk-amd64/bin/java" 2 2
# Each side's words go to infra/local/stack.sh (SEQFLOW_KAFKA_JAVA,
# SEQFLOW_KAFKA_GC, SEQFLOW_KAFKA_PROPS, ...); a side with a ';' is split on
# ';' instead of spaces, for values with spaces in them, e.g.
#   "SEQFLOW_KAFKA_PROPS=num.io.threads=2 num.network.threads=1;SEQFLOW_KAFKA_JAVA=java" SEQBENCH_* settings pass
# through to seqbench. ROUNDS defaults to 2, RUNS to 2. Leaves the stack up
# with the last side's settings: restart it plainly after.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=infra/local/ab-lib.sh
. "$root/infra/local/ab-lib.sh"
a=${1:?usage: ab-broker.sh "ENV A" "ENV B" [ROUNDS] [RUNS]}
b=${2:?usage: ab-broker.sh "ENV A" "ENV B" [ROUNDS] [RUNS]}
rounds=${3:-2} runs=${4:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/seqbench" ./cmd/seqbench)
keys=(e2e_ack_p50_ms e2e_ack_p99_ms e2e_deliver_p99_ms e2e_deliver_p999_ms e2e_paced_machine_busy_pct e2e_stage_seq_produce_p99_ms
  e2e_paced_cpu_ms_per_1k_kafka e2e_paced_cpu_ms_per_1k_gateway)
declare -A vals=()
echo "A: $a vs B: $b, $rounds rounds of $runs runs each, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for side in A B; do
    env=$a
    [ "$side" = B ] && env=$b
    ab_restart "$root" "$env"
    for i in $(seq 0 "$runs"); do
      json=$work/$side-$r-$i.json
      (cd "$root" && SEQBENCH_PHASES=e2e SEQBENCH_DOC= SEQBENCH_JSON="$json" timeout 600 "$work/seqbench" >"$work/$side-$r-$i.log" 2>&1) ||
        { echo "round $r side $side run $i failed:"; tail -5 "$work/$side-$r-$i.log"; exit 1; }
      [ "$i" = 0 ] && continue
      ab_record "$side" "$json" "  round $r side $side run $i:"
    done
  done
done
ab_summary A B
