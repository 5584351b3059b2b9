#!/usr/bin/env bash
# A/B of the end-to-end benchmark (seqbench's e2e phase): the services of a
# base revision against the working tree's, alternating runs in one go so
# both see the same (noisy, shared) machine, then the median of each side.
#
#   infra/local/ab-e2e.sh BASE_REV [RUNS]
#   AB_BASE_ENV='GOGC=100' AB_NEW_ENV='GOGC=400' infra/local/ab-e2e.sh tree [RUNS]
#
# Both sides run the working tree's seqbench (the same load and the same
# measurements); only the services it builds and starts differ: the base's
# come from a worktree of BASE_REV. AB_OWN_BENCH=1 runs the base's own
# seqbench on its side instead (its load generator and SDK too: "the bench
# of then against the bench of now"; keys it did not have are nan). BASE_REV "tree" runs the working tree
# on both sides, for settings: AB_BASE_ENV and AB_NEW_ENV (space-separated
# NAME=value) are added to the environment of each side's runs (seqbench
# hands its environment to the services it starts). RUNS defaults to 3.
# SEQBENCH_* settings are passed through (e.g. SEQBENCH_E2E_DURATION,
# SEQBENCH_E2E_MAX=false for the paced runs only). AB_NEW_PHASES=e2e,floor
# runs the floor phase after e2e on the new side in each round (the floor's
# keys are nan on the base side). Needs the local stack up
# (infra/local/stack.sh up).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=infra/local/ab-lib.sh
. "$root/infra/local/ab-lib.sh"
base=${1:?usage: ab-e2e.sh BASE_REV [RUNS]}
runs=${2:-3}
[ -f "$root/.data/local.env" ] || { echo "ab-e2e: no .data/local.env: run infra/local/stack.sh up" >&2; exit 1; }
set -a; . "$root/.data/local.env"; set +a

work=$(mktemp -d)
if [ "$base" = tree ]; then
  trap 'rm -rf "$work"' EXIT
  basedir=$root
else
  trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  git -C "$root" worktree add -q --detach "$work/base" "$base"
  mkdir -p "$work/base/.data"
  basedir=$work/base
fi
(cd "$root" && go build -o "$work/seqbench" ./cmd/seqbench)
basebench=$work/seqbench
if [ "${AB_OWN_BENCH:-}" = 1 ] && [ "$basedir" != "$root" ]; then
  (cd "$basedir" && go build -o "$work/seqbench-base" ./cmd/seqbench)
  basebench=$work/seqbench-base
fi

keys=(e2e_max_msgs_per_s e2e_ack_p50_ms e2e_ack_p99_ms e2e_deliver_p50_ms e2e_deliver_p99_ms e2e_deliver_p999_ms
  e2e_paced_machine_busy_pct e2e_paced_cpu_ms_per_1k_kafka e2e_paced_cpu_ms_per_1k_gateway
  e2e_paced_cpu_ms_per_1k_loadgen e2e_paced_cpu_ms_per_1k_persister e2e_paced_cpu_ms_per_1k_postgres
  e2e_paced_cpu_ms_per_1k_sequencer e2e_paced_cpu_ms_per_1k_pusher e2e_paced_cpu_ms_per_1k_redis e2e_paced_cpu_ms_per_1k_total)
# AB_EXTRA_KEYS (space-separated bench.json keys, e.g. e2e_stage_seq_prepare_p99_ms) are reported too.
# shellcheck disable=SC2206 # key names
keys+=(${AB_EXTRA_KEYS:-})
new_phases=${AB_NEW_PHASES:-e2e}
[[ ,$new_phases, == *,e2e,* ]] || { echo "ab-e2e: AB_NEW_PHASES must include e2e (got $new_phases)" >&2; exit 2; }
if [[ ,$new_phases, == *,floor,* ]]; then
  keys+=(floor_cpu_ms_per_1k_total floor_cpu_ms_per_1k_kafka floor_cpu_ms_per_1k_server floor_cpu_ms_per_1k_clients
    floor_machine_busy_pct floor_ack_p50_ms floor_ack_p99_ms floor_deliver_p50_ms floor_deliver_p99_ms floor_deliver_p999_ms
    floor_lost floor_harmed)
fi
declare -A vals=()
[ "$base" = tree ] && base=HEAD
echo "base $(git -C "$root" rev-parse --short "$base") ${AB_BASE_ENV:-} vs working tree ${AB_NEW_ENV:-} ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + changes')), $runs runs each, load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
  for side in base new; do
    dir=$root env=${AB_NEW_ENV:-} bench=$work/seqbench phases=$new_phases
    [ "$side" = base ] && dir=$basedir env=${AB_BASE_ENV:-} bench=$basebench phases=e2e
    json=$work/$side-$i.json
    # shellcheck disable=SC2086 # NAME=value words
    (cd "$dir" && env $env SEQBENCH_PHASES="$phases" SEQBENCH_DOC= SEQBENCH_ROOT="$dir" SEQBENCH_JSON="$json" \
      timeout 600 "$bench" >"$work/$side-$i.log" 2>&1) || { echo "run $i $side failed:"; tail -5 "$work/$side-$i.log"; exit 1; }
    ab_record "$side" "$json" "  run $i $side:"
    # the paced runs' counters (sequencer transactions, receipts, ...) from seqbench's log
    python3 -c 'import json, sys
c = [json.loads(l).get("counters") for l in open(sys.argv[1]) if "e2e paced run stages" in l]
print("    counters:", "; ".join(c[-1] or []) if c else "none")' "$work/$side-$i.log"
  done
done
ab_summary base new
