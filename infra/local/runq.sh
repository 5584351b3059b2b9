#!/usr/bin/env bash
# How long the local stack's processes and the services wait for a CPU,
# while something else drives them (for example a paced run of seqbench):
#
#   infra/local/runq.sh [SECONDS]     default 30
#   RUNQ_THREADS=N infra/local/runq.sh   also each process's N busiest threads
#
# It reads /proc/<pid>/task/<tid>/schedstat of every thread of every
# process named below before and after SECONDS (time on a CPU, time
# runnable but waiting on a run queue, times it was put on a CPU) and
# prints per second, summed by process name: CPU ms, run-queue wait ms,
# runs, and the mean wait per run in µs, which is what a wake-up on the
# path of a message pays before it runs. Threads that start or end within
# the window are left out. Names as in infra/local/syscalls.sh (java is
# the broker(s), seqbench the load generator or the floor's clients,
# cmd-seqfloor the floor's server). With RUNQ_THREADS=N it then lists, per
# process, the N threads put on a CPU most often, each with its rank in
# the process by thread ID (#1 is the main thread; in a Go process #2 is
# the runtime's sysmon, the first thread it starts).
set -euo pipefail
secs=${1:-30}
names='producer-gw|seqbench|cmd-seqfloor|sequencer|pusher|persister|java|postgres|redis-server'
snap() {
  # read, not cat: a snapshot forks nothing per thread, so it takes
  # little from the processes it measures.
  local p n t run wait runs
  for p in /proc/[0-9]*; do
    read -r n 2>/dev/null <"$p/comm" || continue
    [[ $n =~ ^($names)$ ]] || continue
    for t in "$p"/task/[0-9]*; do
      read -r run wait runs 2>/dev/null <"$t/schedstat" || continue
      echo "$n/${p#/proc/}/${t##*/} $run $wait $runs"
    done
  done | sort
}
a=$(snap)
sleep "$secs"
b=$(snap)
printf "%-14s %10s %12s %10s %14s\n" process "cpu ms/s" "runq ms/s" "runs/s" "wait/run µs"
join <(echo "$a") <(echo "$b") |
  awk -v s="$secs" '{split($1, k, "/"); n=k[1]; run[n]+=$5-$2; wait[n]+=$6-$3; runs[n]+=$7-$4}
    END{for (n in run) printf "%-14s %10.1f %12.1f %10.0f %14.0f\n", n, run[n]/1e6/s, wait[n]/1e6/s, runs[n]/s, runs[n] ? wait[n]/1e3/runs[n] : 0}' |
  sort -k1,1
[ "${RUNQ_THREADS:-0}" -gt 0 ] || exit 0
echo
printf "%-14s %8s %5s %10s %12s %10s %14s\n" process pid thread "cpu ms/s" "runq ms/s" "runs/s" "wait/run µs"
join <(echo "$a") <(echo "$b") |
  awk -v s="$secs" '{split($1, k, "/"); print k[1], k[2], k[3], ($5-$2)/1e6/s, ($6-$3)/1e6/s, ($7-$4)/s, ($7-$4) ? ($6-$3)/1e3/($7-$4) : 0}' |
  sort -k2,2n -k3,3n | awk '{rank = ($2 == pid) ? rank + 1 : 1; pid = $2; print $0, rank}' |
  sort -k1,1 -k6,6nr | awk -v top="$RUNQ_THREADS" '$1 != last {last = $1; c = 0} ++c <= top {
    printf "%-14s %8s %5s %10.1f %12.1f %10.0f %14.0f\n", $1, $2, "#" $8, $4, $5, $6, $7}'
