#!/usr/bin/env bash
# A/B of the sequencer benchmark: the working tree against a base revision,
# alternating runs in one go so both see the same (noisy, shared) machine,
# then the median of each side.
#
#   infra/local/ab-sequencer.sh BASE_REV [RUNS] [STEP...]
#
# BASE_REV is any git revision; RUNS (default 3) runs per side and step;
# STEP (default 5000, the default step) sets SEQUENCER_STEP and SEQUENCER_MAX_POLL_RECORDS.
# Both sides use the working tree's sequencer/bench_test.go, so the harness
# (what is measured and reported) is the same and only the sequencer differs.
# Needs the local stack up (infra/local/stack.sh up). SEQFLOW_BENCH_RECORDS
# (default 200000) is passed through; SEQFLOW_BENCH_ROUNDS defaults to 1
# here (each run one round: this script alternates and takes medians itself).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=${1:?usage: ab-sequencer.sh BASE_REV [RUNS] [STEP...]}
runs=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(5000)
[ -f "$root/.data/local.env" ] || { echo "ab-sequencer: no .data/local.env: run infra/local/stack.sh up" >&2; exit 1; }
set -a; . "$root/.data/local.env"; set +a
export SEQFLOW_BENCH_RECORDS=${SEQFLOW_BENCH_RECORDS:-200000}
export SEQFLOW_BENCH_ROUNDS=${SEQFLOW_BENCH_ROUNDS:-1}

work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add -q --detach "$work/base" "$base"
cp "$root/sequencer/bench_test.go" "$work/base/sequencer/bench_test.go"
(cd "$work/base" && go test -c -o "$work/base.test" ./sequencer)
(cd "$root" && go test -c -o "$work/new.test" ./sequencer)

run() { # side step -> the benchmark line
  (cd "$root/sequencer" && SEQUENCER_STEP=$2 SEQUENCER_MAX_POLL_RECORDS=$2 \
    "$work/$1.test" -test.run XXX -test.bench BenchmarkSequencer_Throughput -test.benchtime 1x 2>/dev/null |
    grep '^BenchmarkSequencer_Throughput')
}
field() { # line unit -> value
  awk -v u="$2" '{for (i = 2; i <= NF; i++) if ($i == u) print $(i-1)}' <<<"$1"
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "base $(git -C "$root" rev-parse --short "$base") vs working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + changes')), $runs runs each, $SEQFLOW_BENCH_RECORDS records, load $(cut -d' ' -f1-3 /proc/loadavg)"
for step in "${steps[@]}"; do
  declare -A vals=()
  for i in $(seq "$runs"); do
    for side in base new; do
      line=$(run "$side" "$step")
      for u in sequencer_msgs/s kafka_ceiling_msgs/s ratio prepare_ms/batch produce_ms/batch commit_ms/batch; do
        vals[$side.$u]+="$(field "$line" "$u") "
      done
      echo "  step $step run $i $side: $(field "$line" sequencer_msgs/s) msg/s, ratio $(field "$line" ratio), prepare $(field "$line" prepare_ms/batch) ms"
    done
  done
  echo "step $step medians (base -> new):"
  for u in sequencer_msgs/s kafka_ceiling_msgs/s ratio prepare_ms/batch produce_ms/batch commit_ms/batch; do
    b=$(tr ' ' '\n' <<<"${vals[base.$u]}" | grep . | median)
    n=$(tr ' ' '\n' <<<"${vals[new.$u]}" | grep . | median)
    printf '  %-22s %12s -> %12s\n' "$u" "$b" "$n"
  done
  unset vals
done
