#!/usr/bin/env bash
# Runs a command and prints the garbage-collection pauses a broker logged
# while it ran: how many, their total and the longest.
#
#   infra/local/gc-run.sh GCLOG COMMAND [ARGS...]
#
# GCLOG is the broker's GC log, turned on when the stack starts, e.g.
#   SEQFLOW_KAFKA_GC="-XX:+UseG1GC -XX:MaxGCPauseMillis=200 -XX:InitiatingHeapOccupancyPercent=35 \
#     -XX:+ExplicitGCInvokesConcurrent -Xlog:gc:file=/tmp/kafka-gc.log:time,uptime" infra/local/stack.sh up
# (SEQFLOW_KAFKA_GC replaces the default flags, so repeat them). Example, one
# paced e2e invocation of seqbench:
#   infra/local/gc-run.sh /tmp/kafka-gc.log env SEQBENCH_PHASES=e2e SEQBENCH_E2E_MAX=false \
#     SEQBENCH_E2E_PACED_RUNS=2 SEQBENCH_DOC= .data/bin/seqbench
set -euo pipefail
log=${1:?usage: gc-run.sh GCLOG COMMAND [ARGS...]}
shift
t0=$(date -u +%s.%N)
rc=0
"$@" || rc=$?
t1=$(date -u +%s.%N)
python3 - "$log" "$t0" "$t1" <<'PY'
import datetime, re, sys
log, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
pauses = []
for line in open(log):
    m = re.match(r'\[(\S+?)\+0000\].*Pause.* (\d+)M->(\d+)M\((\d+)M\) ([\d.]+)ms$', line.strip())
    if not m:
        continue
    ts = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
    if t0 <= ts <= t1:
        pauses.append((float(m.group(5)), int(m.group(3))))
if not pauses:
    print(f"gc-run: no pauses in {log} during the {t1 - t0:.0f} s of the command")
else:
    ms = [p for p, _ in pauses]
    print(f"gc-run: {len(ms)} pauses in {t1 - t0:.0f} s, {sum(ms):.0f} ms in all, longest {max(ms):.0f} ms; "
          f"heap after them {min(a for _, a in pauses)}-{max(a for _, a in pauses)} MB")
PY
exit $rc
