#!/usr/bin/env bash
# The paced e2e run (seqbench's e2e phase, no as-fast-as-possible run) at
# several rates, one after the other on the same services' code, with one
# row per rate: what the machine spends per second at that rate, how many
# sequencer transactions it ran, and the latency it gave.
#
#   infra/local/rate-sweep.sh [RATE ...]        default: 10 250 500 1000 2000
#
# It answers "does the tail follow the load?": CPU-ms per second (not per
# message) shows which part of each process's CPU is fixed (paid per
# transaction or per wake-up) and which grows with the messages.
# SEQBENCH_* settings are passed through (SEQBENCH_E2E_PACED_RUNS defaults
# to 2 here, SEQBENCH_E2E_DURATION to seqbench's 15s). Needs the local stack
# up (infra/local/stack.sh up).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$root/.data/local.env" ] || { echo "rate-sweep: no .data/local.env: run infra/local/stack.sh up" >&2; exit 1; }
set -a; . "$root/.data/local.env"; set +a
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(10 250 500 1000 2000)
for r in "${rates[@]}"; do
  [[ $r =~ ^[1-9][0-9]*$ ]] || { echo "rate-sweep: rate $r is not a positive whole number of msg/s" >&2; exit 2; }
done
export SEQBENCH_E2E_PACED_RUNS=${SEQBENCH_E2E_PACED_RUNS:-2}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/seqbench" ./cmd/seqbench)

echo "rate sweep at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + changes'), $SEQBENCH_E2E_PACED_RUNS paced runs of ${SEQBENCH_E2E_DURATION:-15s} a rate, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "transactions/s and the CPU columns (CPU-ms per second) are over the paced runs' whole window, their setup included"
echo
echo "| rate msg/s | sent msg/s | transactions/s | records per transaction | machine busy | Kafka | sequencer | gateway | pusher | persister | PostgreSQL | load generator | ACK p50 / p99 ms | deliver p99 / p999 ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for r in "${rates[@]}"; do
  json=$work/$r.json log=$work/$r.log
  (cd "$root" && SEQBENCH_FIXED_RATE=$r SEQBENCH_PHASES=e2e SEQBENCH_E2E_MAX=false SEQBENCH_DOC= \
    SEQBENCH_JSON="$json" timeout 900 "$work/seqbench" >"$log" 2>&1) || { echo "rate $r failed:"; tail -5 "$log"; exit 1; }
  python3 - "$r" "$json" "$log" <<'PY'
import json, re, sys
rate, report, log = int(sys.argv[1]), json.load(open(sys.argv[2])), sys.argv[3]
counters = [json.loads(l).get("counters") or [] for l in open(log) if "e2e paced run stages" in l][-1]
def counter(name):
    for c in counters:
        m = re.fullmatch(re.escape(name) + r": (\d+)", c)
        if m:
            return int(m.group(1))
    raise SystemExit(f"rate-sweep: counter {name!r} missing from {log}")
txns, records = counter("sequencer: transactions"), counter("sequencer: records in them")
sent, window = report["e2e_fixed_msgs_per_s"], report["e2e_paced_cpu_window_s"]
# CPU-ms per second of the paced runs' window (their setup included)
cpu = lambda p: report[f"e2e_paced_cpu_ms_per_1k_{p}"] * report["e2e_paced_acked"] / 1000 / window
cols = [f"{rate:,}", f"{sent:,.0f}", f"{txns / window:.0f}", f"{records / txns:.1f}",
        f"{report['e2e_paced_machine_busy_pct']:.0f} %"]
cols += [f"{cpu(p):.0f}" for p in ("kafka", "sequencer", "gateway", "pusher", "persister", "postgres", "loadgen")]
cols += [f"{report['e2e_ack_p50_ms']:.1f} / {report['e2e_ack_p99_ms']:.1f}",
         f"{report['e2e_deliver_p99_ms']:.1f} / {report['e2e_deliver_p999_ms']:.1f}"]
print("| " + " | ".join(cols) + " |")
PY
done
