#!/usr/bin/env bash
# Read and write system calls per second of the local stack's processes
# and the services, while something else drives them (for example a
# paced run of seqbench):
#
#   infra/local/syscalls.sh [SECONDS]     default 30
#
# It reads syscr and syscw of /proc/<pid>/io (read(2)-like and
# write(2)-like calls, sockets included) of every process named below
# before and after SECONDS, and prints the change per second, summed by
# process name: java is the broker(s), seqbench the load generator and
# its SDK clients (or the floor's clients; cmd-seqfloor is the floor's server).
set -euo pipefail
secs=${1:-30}
names='producer-gw|seqbench|cmd-seqfloor|sequencer|pusher|persister|java|postgres|redis-server'
snap() {
  for p in /proc/[0-9]*; do
    n=$(cat "$p/comm" 2>/dev/null) || continue
    [[ $n =~ ^($names)$ ]] || continue
    io=$(cat "$p/io" 2>/dev/null) || continue
    awk -v n="$n" '/^syscr/{r=$2} /^syscw/{w=$2} END{print n, r, w}' <<<"$io"
  done | awk '{r[$1]+=$2; w[$1]+=$3} END{for (k in r) print k, r[k], w[k]}' | sort
}
a=$(snap)
sleep "$secs"
b=$(snap)
join <(echo "$a") <(echo "$b") |
  awk -v s="$secs" 'BEGIN{printf "%-14s %10s %10s\n", "process", "reads/s", "writes/s"}
    {printf "%-14s %10.0f %10.0f\n", $1, ($4-$2)/s, ($5-$3)/s}'
