#!/usr/bin/env bash
# The sequencer benchmark against the local broker under two garbage
# collector settings, alternating: for each round and each side it restarts
# the stack with that side's SEQFLOW_KAFKA_GC, runs the benchmark once to
# warm the broker (not counted), then RUNS times.
#
#   infra/local/ab-broker-gc.sh "FLAGS A" "FLAGS B" [ROUNDS] [RUNS]
#
# e.g. infra/local/ab-broker-gc.sh "-XX:+UseG1GC -XX:MaxGCPauseMillis=20" "-XX:+UseG1GC -XX:MaxGCPauseMillis=200" 2 2
# Prints sequencer msgs/s, the Kafka ceiling and their ratio per run
# (sequencer/bench_test.go, BenchmarkSequencer_Throughput, at step 5000,
# one round per run: SEQFLOW_BENCH_ROUNDS=1).
# Leaves the stack up with the last side's flags: restart it plainly after.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=infra/local/ab-lib.sh
. "$root/infra/local/ab-lib.sh"
a=${1:?usage: ab-broker-gc.sh "FLAGS A" "FLAGS B" [ROUNDS] [RUNS]}
b=${2:?usage: ab-broker-gc.sh "FLAGS A" "FLAGS B" [ROUNDS] [RUNS]}
rounds=${3:-2} runs=${4:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && go test -c -o "$work/seq.test" ./sequencer)
for r in $(seq "$rounds"); do
  for side in A B; do
    flags=$a
    [ "$side" = B ] && flags=$b
    ab_restart "$root" "SEQFLOW_KAFKA_GC=$flags;"
    for i in $(seq 0 "$runs"); do
      out=$(cd "$root/sequencer" && SEQFLOW_BENCH_RECORDS=200000 SEQFLOW_BENCH_ROUNDS=1 SEQUENCER_STEP=5000 SEQUENCER_MAX_POLL_RECORDS=5000 \
        "$work/seq.test" -test.run XXX -test.bench BenchmarkSequencer_Throughput -test.benchtime 1x 2>/dev/null |
        grep -oE '[0-9.]+ (sequencer_msgs/s|kafka_ceiling_msgs/s|ratio)' | tr '\n' ' ')
      [ "$i" = 0 ] && continue
      echo "round $r side $side ($flags) run $i: $out"
    done
  done
done
