#!/usr/bin/env bash
# Where the local single-node broker spends its time while something else
# drives it (for example a paced run of seqbench):
#
#   infra/local/kafka-profile.sh [SECONDS]      default 10; 0: only the JIT line below
#   KAFKA_PROFILE_JFR=0 infra/local/kafka-profile.sh 10   requests only, no recording
#   KAFKA_PROFILE_NODE=k3-2 infra/local/kafka-profile.sh 10   a node of the
#     three-broker cluster (stack.sh up-kafka3) instead; its JMX agent on
#     127.0.0.1:1999<n>
#
# For SECONDS it records, on the running broker of infra/local/stack.sh:
#   - requests per second by type (the broker's own RequestMetrics counts,
#     read over JMX before and after; the JMX agent is started on
#     127.0.0.1:19999 through jcmd if it is not running yet);
#   - a Java Flight Recorder profile (execution samples every 2 ms): the
#     share of samples per thread group and the methods found most often
#     on the sampled stacks (anywhere on the stack: a caller's share holds
#     its callees');
#   - its garbage collections: how many, the longest and the total pause.
#     The recording costs the broker CPU of its own, enough to make a
#     paced run on this 2-core box fall behind; KAFKA_PROFILE_JFR=0 skips
#     it and these two parts;
#   - the CPU time of its threads over those SECONDS, by thread group
#     (/proc/<pid>/task/*/stat before and after, the Java names from
#     jcmd Thread.print), without a recording's cost: request handlers,
#     network threads, the coordinators, the transaction marker sender...;
#   - and, since the broker started, the CPU time of its JIT compiler
#     threads against its whole CPU time (/proc/<pid>/task/*/stat): a
#     broker compiles its hot paths for minutes after a start.
# Needs the JDK's jcmd and jfr (stack.sh installs the JDK) and python3.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
secs=${1:-10}
node=${KAFKA_PROFILE_NODE:-single}
case $node in
  single) jport=19999 ;;
  k3-[123]) jport=1999${node#k3-} ;;
  *) echo "kafka-profile: KAFKA_PROFILE_NODE=$node: want single, k3-1, k3-2 or k3-3" >&2; exit 2 ;;
esac
pid=$(cat "$root/.data/kafka/$node/kafka.pid" 2>/dev/null || true)
[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || { echo "kafka-profile: broker $node is not running (infra/local/stack.sh up, or up-kafka3)" >&2; exit 1; }
jit_ticks=0 all_ticks=0
for t in /proc/"$pid"/task/*; do
  # fields 14 and 15 (utime, stime) counted from the end of "(comm)", which may hold spaces
  rest=$(sed -E 's/^.*\) //' "$t/stat")
  read -r -a f <<<"$rest"
  ticks=$((f[11] + f[12]))
  all_ticks=$((all_ticks + ticks))
  case $(cat "$t/comm") in C1\ CompilerThre* | C2\ CompilerThre*) jit_ticks=$((jit_ticks + ticks)) ;; esac
done
hz=$(getconf CLK_TCK)
echo "since the broker started: $((all_ticks / hz)) CPU-s in all, of them $((jit_ticks / hz)) CPU-s in its JIT compiler threads"
[[ $secs == 0 ]] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jmx=service:jmx:rmi:///jndi/rmi://127.0.0.1:$jport/jmxrmi
if ! (exec 3<>/dev/tcp/127.0.0.1/$jport) 2>/dev/null; then
  jcmd "$pid" ManagementAgent.start jmxremote.port=$jport jmxremote.rmi.port=$jport jmxremote.host=127.0.0.1 \
    jmxremote.authenticate=false jmxremote.ssl=false >/dev/null
fi
counts() { # -> "request count" lines
  java -cp "$root/.data/kafka/libs/*" org.apache.kafka.tools.JmxTool --jmx-url "$jmx" --one-time true \
    --object-name 'kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*' \
    --attributes Count --report-format properties 2>/dev/null |
    sed -nE 's/.*request=([A-Za-z]+),version=[0-9]+:Count=([0-9]+).*/\1 \2/p'
}
errs() { # -> "request/error count" lines, error NONE left out
  java -cp "$root/.data/kafka/libs/*" org.apache.kafka.tools.JmxTool --jmx-url "$jmx" --one-time true \
    --object-name 'kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=*,error=*' \
    --attributes Count --report-format properties 2>/dev/null |
    python3 -c 'import re, sys
for l in sys.stdin:
    r, e, c = (re.search(x, l) for x in (r"request=([A-Za-z]+)", r"error=([A-Z_]+)", r":Count=([0-9]+)"))
    if r and e and c and e[1] != "NONE":
        print(r[1] + "/" + e[1], c[1])'
}
verification() { # -> the broker's produce verification with the transaction coordinator (KIP-890): "name.attribute value" lines
  java -cp "$root/.data/kafka/libs/*" org.apache.kafka.tools.JmxTool --jmx-url "$jmx" --one-time true \
    --object-name 'kafka.server:type=AddPartitionsToTxnManager,name=*' \
    --report-format properties 2>/dev/null |
    python3 -c 'import re, sys
for l in sys.stdin:
    n, a = re.search(r"name=([A-Za-z]+)", l), re.search(r":(Count|Mean|50thPercentile|99thPercentile|Max)=([0-9.E-]+)", l)
    if n and a:
        print(n[1] + "." + a[1], a[2])'
}
cat >"$work/p.jfc" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0">
  <event name="jdk.ExecutionSample"><setting name="enabled">true</setting><setting name="period">2 ms</setting></event>
  <event name="jdk.GarbageCollection"><setting name="enabled">true</setting><setting name="threshold">0 ms</setting></event>
</configuration>
EOF
jfr_on=${KAFKA_PROFILE_JFR:-1}
ticks() { # -> "tid utime+stime" lines of the broker's threads
  local t rest
  for t in /proc/"$pid"/task/*; do
    rest=$(sed -E 's/^.*\) //' "$t/stat" 2>/dev/null) || continue
    read -r -a f <<<"$rest"
    echo "${t##*/} $((f[11] + f[12]))"
  done
}
counts >"$work/before"
errs >"$work/errs-before"
verification >"$work/verif-before"
ticks >"$work/ticks-before"
[[ $jfr_on == 0 ]] || jcmd "$pid" JFR.start name=seqflow-profile settings="$work/p.jfc" filename="$work/k.jfr" duration="${secs}s" >/dev/null
sleep "$secs"
ticks >"$work/ticks-after"
counts >"$work/after"
errs >"$work/errs-after"
verification >"$work/verif-after"
jcmd "$pid" Thread.print 2>/dev/null | sed -nE 's/^"([^"]+)".* nid=([0-9a-fx]+) .*/\2 \1/p' >"$work/names"
if [[ $jfr_on != 0 ]]; then
  for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -s $work/k.jfr ]] && break; sleep 1; done
  jfr print --json --events jdk.ExecutionSample,jdk.GarbageCollection "$work/k.jfr" >"$work/k.json"
fi
python3 - "$work" "$secs" "$(getconf CLK_TCK)" <<'PY'
import collections, json, re, sys
work, secs, hz = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
def load(f):
    c = collections.Counter()
    for line in open(f):
        k, v = line.split()
        c[k] += int(v)
    return c
b, a = load(work + "/before"), load(work + "/after")
print(f"requests per second over {secs:.0f} s (the broker's RequestMetrics):")
# FetchConsumer and FetchFollower are Fetch again, split by who asked.
rates = {k: (a[k] - b[k]) / secs for k in a if k not in ("FetchConsumer", "FetchFollower")}
for k, v in sorted(rates.items(), key=lambda x: -x[1]):
    if v >= 0.5:
        print(f"  {k:28s} {v:9.1f}")
print(f"  {'total':28s} {sum(rates.values()):9.1f}")
eb, ea = load(work + "/errs-before"), load(work + "/errs-after")
errs = {k: (ea[k] - eb[k]) / secs for k in ea if ea[k] > eb.get(k, 0)}
print(f"errors per second over {secs:.0f} s (RequestMetrics ErrorsPerSec, by request/error; NONE left out):" + ("" if errs else " none"))
for k, v in sorted(errs.items(), key=lambda x: -x[1]):
    print(f"  {k:50s} {v:9.2f}")
def props(f):
    return {k: float(v) for k, v in (l.split() for l in open(f))}
vb, va = props(work + "/verif-before"), props(work + "/verif-after")
if va:
    n = va.get("VerificationTimeMs.Count", 0) - vb.get("VerificationTimeMs.Count", 0)
    fails = va.get("VerificationFailureRate.Count", 0) - vb.get("VerificationFailureRate.Count", 0)
    print(f"produce verifications with the transaction coordinator (AddPartitionsToTxnManager): {n / secs:.1f}/s, failed {fails / secs:.2f}/s;"
          f" time since the broker started: p50 {va.get('VerificationTimeMs.50thPercentile', 0):.1f} ms,"
          f" p99 {va.get('VerificationTimeMs.99thPercentile', 0):.1f} ms, max {va.get('VerificationTimeMs.Max', 0):.1f} ms")
names = {}
for line in open(work + "/names"):
    nid, name = line.rstrip("\n").split(" ", 1)
    names[str(int(nid, 0))] = name
def ticks(f):
    return {t: int(v) for t, v in (l.split() for l in open(f))}
tb, ta = ticks(work + "/ticks-before"), ticks(work + "/ticks-after")
groups = collections.Counter()
for t, v in ta.items():
    name = names.get(t, "other (not a Java thread, or gone)")
    name = re.sub(r"-\d+-ListenerName.*", "", name)  # the network threads' per-listener suffix
    groups[re.sub(r"[-# ]?\d+$", "", name)] += v - tb.get(t, 0)
total = sum(groups.values())
print(f"\nCPU of the broker's threads over {secs:.0f} s: {total / hz:.2f} CPU-s ({total / hz / secs:.2f} cores); by thread group:")
for k, v in groups.most_common(10):
    if v > 0:
        print(f"  {100 * v / max(total, 1):5.1f}%  {v / hz:6.2f} CPU-s  {k}")
import os
if not os.path.exists(work + "/k.json"):
    sys.exit(0)
ev = json.load(open(work + "/k.json"))["recording"]["events"]
samples = [e for e in ev if e["type"] == "jdk.ExecutionSample"]
gcs = [e for e in ev if e["type"] == "jdk.GarbageCollection"]
threads, methods = collections.Counter(), collections.Counter()
for e in samples:
    t = e["values"]["sampledThread"]
    threads[re.sub(r"\d+", "N", t.get("javaName") or t.get("osName") or "?")] += 1
    st = e["values"]["stackTrace"]
    seen = set()
    for f in (st["frames"] if st else []):
        m = f["method"]
        seen.add(m["type"]["name"].split("/")[-1].split(".")[-1] + "." + m["name"])
    for m in seen:
        methods[m] += 1
n = max(len(samples), 1)
print(f"\nJava execution samples: {len(samples)}; share by thread group:")
for k, v in threads.most_common(8):
    print(f"  {100 * v / n:5.1f}%  {k}")
print("methods on the most sampled stacks (share of samples):")
shown = 0
for k, v in methods.most_common():
    if shown == 15:
        break
    if k.split(".")[-1] in ("run", "invoke", "apply", "execute", "accept", "get", "handle", "doWork", "poll"):
        continue
    print(f"  {100 * v / n:5.1f}%  {k}")
    shown += 1
def ms(d):
    m = re.match(r"PT(?:(\d+)M)?([\d.]+)S", d or "")
    return (int(m.group(1) or 0) * 60 + float(m.group(2))) * 1000 if m else 0.0
pauses = [ms(g["values"].get("sumOfPauses")) for g in gcs]
if pauses:
    print(f"\ngarbage collections: {len(pauses)} in {secs:.0f} s, pauses total {sum(pauses):.0f} ms, longest {max(pauses):.1f} ms")
else:
    print("\ngarbage collections: none")
PY
