#!/usr/bin/env bash
# seqflow demo: installs what the local stack needs (as root, from Debian),
# brings the stack and the four services up, pushes messages through the
# whole pipeline (gateway → Kafka → sequencer → persister and pusher →
# gateway), shows them in the committed log, and keeps the services and the
# web chat page (producer-gw/web, on with GATEWAY_DEV_MODE=true) running.
#
# One progress line per step; the output of the slow parts (apt-get, Maven,
# go build, the stack's own lines) goes to .data/logs/demo-<time>.log, whose
# tail is printed when a step fails. The services log to .data/demo/.
#
# How long it keeps running:
#   in a terminal (stdin and stdout are one)   until Ctrl-C
#   without one (CI, an IDE task, ssh without -t, a pipe)
#                                              SEQFLOW_DEMO_HOLD (default 10m), or until SIGINT/SIGTERM
#   SEQFLOW_DEMO_HOLD=<n>[s|m|h]                that long, terminal or not; 0: exit after the run
#   --once                                     exit after the run
# Ctrl-C, SIGINT or SIGTERM end it with status 0 after stopping the services
# and whatever part of the stack (PostgreSQL, Redis, Kafka) the demo itself
# started; a stack that was already running is left running. A failed step
# ends it with status 1.
#
# Ports: the gateway on GATEWAY_ADDR (127.0.0.1:8080), the services' metrics
# on SEQUENCER_ADMIN_ADDR, PERSISTER_ADMIN_ADDR, GATEWAY_ADMIN_ADDR and
# PUSHER_ADMIN_ADDR (127.0.0.1:9101-9104); the stack's ports as in stack.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

once=false
for a in "$@"; do
  case $a in
    --once) once=true ;;
    *) echo "usage: demo.sh [--once]" >&2; exit 2 ;;
  esac
done
tty=false
[[ -t 0 && -t 1 ]] && tty=true

hold_secs() { # duration -> seconds: 90, 90s, 10m, 1h
  local d=$1
  [[ $d =~ ^([0-9]+)([smh]?)$ ]] || { echo "SEQFLOW_DEMO_HOLD=$d: want a number of seconds, or <n>s, <n>m, <n>h" >&2; exit 2; }
  case ${BASH_REMATCH[2]} in
    m) echo $((10#${BASH_REMATCH[1]} * 60)) ;;
    h) echo $((10#${BASH_REMATCH[1]} * 3600)) ;;
    *) echo $((10#${BASH_REMATCH[1]})) ;;
  esac
}
hold=forever
if $once; then
  hold=0
elif [[ -n ${SEQFLOW_DEMO_HOLD:-} ]]; then
  hold=$(hold_secs "$SEQFLOW_DEMO_HOLD")
elif ! $tty; then
  hold=600
fi

if $tty && [[ -z ${NO_COLOR:-} && ${TERM:-dumb} != dumb ]]; then
  bold() { printf '\033[1m%s\033[0m' "$*"; }
  green() { printf '\033[32m%s\033[0m' "$*"; }
  red() { printf '\033[1;31m%s\033[0m' "$*"; }
  dim() { printf '\033[2m%s\033[0m' "$*"; }
else
  bold() { printf '%s' "$*"; }
  green() { printf '%s' "$*"; }
  red() { printf '%s' "$*"; }
  dim() { printf '%s' "$*"; }
fi

dur() { # seconds -> "42 s" or "3 min 05 s"
  if (($1 < 60)); then echo "$1 s"; else printf '%d min %02d s\n' $(($1 / 60)) $(($1 % 60)); fi
}

mkdir -p .data/logs .data/demo
# One demo per checkout. Fd 5 holds the lock; nothing the demo starts keeps it.
exec 5>>.data/demo/lock
if ! flock -n 5; then
  echo "another demo runs in this checkout (pid $(cat .data/demo/lock 2>/dev/null)); stop it first" >&2
  exit 1
fi
echo "$$" >.data/demo/lock
log=.data/logs/demo-$(date +%Y%m%d-%H%M%S).log
: >"$log"
# keep the ten newest run logs
ls -1t .data/logs/demo-*.log | tail -n +11 | xargs -r rm -f || true

bin=.data/bin
svclogs=.data/demo
started_file=.data/demo/stack-started
pidfile=.data/demo/pids
: >"$started_file"

gw_addr=${GATEWAY_ADDR:-127.0.0.1:8080}
declare -A admin=(
  [sequencer]=${SEQUENCER_ADMIN_ADDR:-127.0.0.1:9101}
  [persister]=${PERSISTER_ADMIN_ADDR:-127.0.0.1:9102}
  [producer-gw]=${GATEWAY_ADMIN_ADDR:-127.0.0.1:9103}
  [pusher]=${PUSHER_ADMIN_ADDR:-127.0.0.1:9104}
)
services=(sequencer persister pusher producer-gw)

# ---------------------------------------------------------------- steps

steps=9
step_no=0
current="starting"
t_step=$SECONDS
begin() { # label [block]: a step; with block, its own lines follow instead of "ok"
  step_no=$((step_no + 1))
  current=$1
  t_step=$SECONDS
  if [[ ${2:-} == block ]]; then
    printf '%s %s\n' "$(dim "[$step_no/$steps]")" "$1"
  else
    printf '%s %s … ' "$(dim "[$step_no/$steps]")" "$1"
  fi
  printf '\n==== [%s/%s] %s (%s)\n' "$step_no" "$steps" "$1" "$(date -Is)" >>"$log"
  log_mark=$(wc -l <"$log")
}
log_mark=0
step_tail() { # the last lines the current step wrote to the log, indented
  local lines
  lines=$(tail -n "+$((log_mark + 1))" "$log" | sed '/^$/d' | tail -n 25)
  if [[ -n $lines ]]; then
    printf 'its last lines in %s:\n' "$log"
    sed 's/^/    /' <<<"$lines"
  else
    printf 'log: %s\n' "$log"
  fi
}
ok() { # [note]
  printf '%s%s\n' "$(green "${1:-ok}")" "$(dim " $(dur $((SECONDS - t_step)))")"
}
fail() { # message
  failed=true
  printf '%s\n' "$(red failed)"
  printf '%s\n' "${1:-}" | sed '/^$/d' >&2
  printf '%s step %s/%s (%s) failed after %s; ' "$(red "✗")" "$step_no" "$steps" "$current" \
    "$(dur $((SECONDS - t_step)))" >&2
  step_tail >&2
  exit 1
}
run() { # command... : its output to the log; a failure ends the demo
  local rc
  set +e
  (
    set -e
    "$@"
  ) >>"$log" 2>&1 </dev/null 5>&-
  rc=$?
  set -e
  ((rc == 0)) || fail "exit status $rc: $*"
}

port_open() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

# ---------------------------------------------------------------- stopping

pids=()
names=()
failed=false
cleaning=false
cleanup() {
  local rc=$? i p parts=() deadline
  $cleaning && return
  cleaning=true
  trap '' INT TERM HUP
  if ((rc != 0)) && ! $failed; then
    # an unexpected error (set -e) rather than a step's failure
    printf '\n%s the demo stopped during step %s/%s (%s), status %s; ' "$(red "✗")" \
      "$step_no" "$steps" "$current" "$rc" >&2
    step_tail >&2
  fi
  if ((${#pids[@]})); then
    printf 'stopping the demo services … '
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    deadline=$((SECONDS + 15))
    for p in "${pids[@]}"; do
      while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
      kill -KILL "$p" 2>/dev/null || true
    done
    rm -f "$pidfile"
    printf '%s\n' "$(green ok)"
  fi
  mapfile -t parts < <(sort -u "$started_file" 2>/dev/null)
  if ((${#parts[@]})); then
    printf 'stopping what the demo started of the stack (%s) … ' "${parts[*]}"
    if bash infra/local/stack.sh stop "${parts[@]}" >>"$log" 2>&1 </dev/null 5>&-; then
      printf '%s\n' "$(green ok)"
    else
      printf '%s (see %s)\n' "$(red failed)" "$log"
    fi
  fi
  : >"$started_file"
}
trap cleanup EXIT
on_signal() { # name
  sleep 0.2 # go-task says it got the signal too: let it, before our lines
  printf '\n%s: stopping (during %s)\n' "$1" "$current"
  exit 0
}
trap 'on_signal SIGINT' INT
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGHUP' HUP

# ---------------------------------------------------------------- the run

printf '%s log: %s\n' "$(bold "seqflow demo")" "$log"

missing=$(bash infra/local/stack.sh missing-packages stack | xargs)
if [[ -n $missing ]]; then
  begin "installing $missing (apt-get)"
  run bash infra/local/stack.sh packages stack
  ok
else
  begin "packages (JDK, Maven, PostgreSQL, Redis)"
  ok present
fi

if [[ -f .data/kafka/libs/.stamp ]]; then
  begin "Kafka jars (Maven)"
else
  begin "fetching Kafka's jars (Maven, about 70 MB)"
fi
run bash infra/local/stack.sh kafka-jars
ok

begin "starting PostgreSQL, Redis, Kafka"
SEQFLOW_STACK_STARTED=$root/$started_file run bash infra/local/stack.sh up
set -a
. .data/local.env
set +a
mapfile -t parts < <(sort -u "$started_file")
if ((${#parts[@]} == 0)); then ok "already running"; else ok "started ${parts[*]}"; fi

begin "building the services and the seqflow CLI (go build)"
mkdir -p "$bin"
run go build -o "$bin/" ./sequencer ./persister ./pusher ./producer-gw ./cmd/seqflow
ok

begin "topics and tables (seqflow setup)"
run "$bin/seqflow" setup
ok

begin "starting sequencer, persister, pusher, producer-gw"
# services an earlier demo left behind (killed with -9, say; none runs now: the lock)
if [[ -f $pidfile ]]; then
  while read -r p name; do
    if kill -0 "$p" 2>/dev/null && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$bin/$name"; then
      echo "stopping $name (pid $p) left by an earlier demo" >>"$log"
      kill -TERM "$p" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$p" 2>/dev/null || true
    fi
  done <"$pidfile"
  rm -f "$pidfile"
fi
for a in "$gw_addr" "${admin[@]}"; do
  if port_open "$a"; then
    fail "$a is in use by another process (ss -ltnp 'sport = :${a##*:}'); stop it, or move the demo with GATEWAY_ADDR / *_ADMIN_ADDR"
  fi
done
export GATEWAY_JWT_HS256_SECRET=${GATEWAY_JWT_HS256_SECRET:-demo-secret-demo-secret-demo-secret}
# Bodies are sealed before they enter Kafka (docs/erasure.md) with a KEK made
# once for this checkout and kept in .data/demo-kek (the demo's keys in
# PostgreSQL are wrapped with it: a new one would leave them unreadable).
if [[ -z ${SEQFLOW_KEK:-} ]]; then
  [[ -s .data/demo-kek ]] || (umask 077 && head -c 32 /dev/urandom | base64 >.data/demo-kek)
  SEQFLOW_KEK=$(cat .data/demo-kek)
fi
export SEQFLOW_KEK
# The admin ports' operator token (POST /erase/user, internal/admin): the
# stack's .data/admin-tokens, made here if the stack's env predates it.
if [[ -z ${SEQFLOW_ADMIN_TOKENS_FILE:-} ]]; then
  SEQFLOW_ADMIN_TOKENS_FILE=$(bash infra/local/stack.sh admin-tokens 2>>"$log" 5>&-) || fail "could not make .data/admin-tokens"
fi
export SEQFLOW_ADMIN_TOKENS_FILE
export GATEWAY_DEV_MODE=true GATEWAY_ID=${GATEWAY_ID:-gw-demo} GATEWAY_ADDR=$gw_addr
export SEQUENCER_ADMIN_ADDR=${admin[sequencer]} PERSISTER_ADMIN_ADDR=${admin[persister]}
export GATEWAY_ADMIN_ADDR=${admin[producer-gw]} PUSHER_ADMIN_ADDR=${admin[pusher]}
export SEQUENCER_INSTANCE_ID=demo PERSISTER_INSTANCE_ID=demo PUSHER_INSTANCE_ID=demo
for svc in "${services[@]}"; do
  "$bin/$svc" >"$svclogs/$svc.log" 2>&1 </dev/null 5>&- &
  pids+=($!)
  names+=("$svc")
  echo "$! $svc" >>"$pidfile"
done
deadline=$((SECONDS + 90))
for i in "${!names[@]}"; do
  until curl -fsS "http://${admin[${names[i]}]}/readyz" >/dev/null 2>&1; do
    if ! kill -0 "${pids[i]}" 2>/dev/null || ((SECONDS > deadline)); then
      tail -n 20 "$svclogs/${names[i]}.log" >>"$log"
      fail "${names[i]} $(kill -0 "${pids[i]}" 2>/dev/null && echo "not ready in 90 s" || echo exited); its log: $svclogs/${names[i]}.log"
    fi
    sleep 0.3
  done
done
gw=http://$gw_addr
curl -fsS "$gw/" 2>>"$log" | grep -q '<title>seqflow chat</title>' || fail "the gateway does not serve the chat page at $gw/"
ok

begin "alice and bob chat through the pipeline (each ACK carries the message's seq)" block
field() { # key json -> the first value of "key" (quotes dropped), or nothing
  { grep -oE "\"$1\":(\"([^\"\\\\]|\\\\.)*\"|[^,}]*)" <<<"$2" || true; } | head -n1 | cut -d: -f2- | sed -E 's/^"(.*)"$/\1/'
}
ms() { printf '%.1f' "${1:-0}"; }
call() { # what token op json : the response in r; a non-ok answer ends the demo
  r=$(curl -sS -H "Authorization: Bearer $2" -XPOST "$gw/v1/$3" -d "$4" 2>>"$log") || fail "$1: the gateway did not answer"
  printf '%s → %s\n' "$1" "$r" >>"$log"
  [[ $(field status "$r") == ok ]] || fail "$1: $r"
}
line() { printf '      %-40s → %s\n' "$1" "$2"; }
login() {
  curl -fsS -XPOST "$gw/v1/dev/login" -d "{\"user_id\":\"$1\",\"device_id\":\"$2\"}" 2>>"$log" |
    sed -nE 's/.*"token":"([^"]+)".*/\1/p'
}
A=$(login alice laptop)
B=$(login bob phone)
[[ -n $A && -n $B ]] || fail "dev login at $gw/v1/dev/login failed"
run_id=$(date +%s)
call "create group" "$A" create_session "{\"client_msg_id\":\"demo-create-$run_id\",\"kind\":\"group\",\"title\":\"demo\",\"member_user_ids\":[\"bob\"]}"
sid=$(field session_id "$r")
line "alice creates the group \"demo\" with bob" "seq $(field seq "$r")"
m1="{\"client_msg_id\":\"demo-m1-$run_id\",\"session_id\":\"$sid\",\"type\":\"text\",\"body\":\"hello bob\"}"
call "send" "$A" send "$m1"
line "alice sends \"hello bob\"" "seq $(field seq "$r"), msg_id $(field msg_id "$r")"
call "send (retry)" "$A" send "$m1"
line "alice resends it (same client_msg_id)" "seq $(field seq "$r") again, msg_id $(field msg_id "$r")$([[ $(field duplicate "$r") == true ]] && echo " (duplicate)")"
call "send (bob)" "$B" send "{\"client_msg_id\":\"demo-m2-$run_id\",\"session_id\":\"$sid\",\"type\":\"text\",\"body\":\"hi alice\"}"
line "bob sends \"hi alice\"" "seq $(field seq "$r"), msg_id $(field msg_id "$r")"
# The store is written asynchronously by the persister: wait for it.
for _ in $(seq 60); do
  synced=$(curl -sS -H "Authorization: Bearer $B" "$gw/v1/sessions/$sid/messages?after_seq=0&limit=10" 2>>"$log" || true)
  grep -q '"seq":3' <<<"$synced" && break
  sleep 0.5
done
printf 'sync → %s\n' "$synced" >>"$log"
grep -q '"seq":3' <<<"$synced" || fail "bob's sync did not return seq 3 in 30 s: $synced"
line "bob syncs the group from the store" "seqs $(grep -oE '"seq":[0-9]+' <<<"$synced" | cut -d: -f2 | xargs)"

begin "seqflow load: 20 users in 10 sessions, 200 msg/s for 10 s" block
run "$bin/seqflow" load -gateways "ws://$gw_addr" -duration 10s -users 20 -sessions 10 -rate 200 -quiet \
  -json "$svclogs/load.json" -plot "$svclogs/load.html"
rep=$(tr -d ' \n' <"$svclogs/load.json")
printf '      %s sent, %s acked, %s delivered; lost %s, duplicated %s, out of order %s\n' "$(field sent "$rep")" \
  "$(field acked "$rep")" "$(field delivered "$rep")" "$(field lost "$rep")" "$(field duplicated "$rep")" "$(field out_of_order "$rep")"
printf '      send→ACK p50 %s ms, p99 %s ms; send→delivery p50 %s ms, p99 %s ms (plot: %s)\n' \
  "$(ms "$(field ack_p50_ms "$rep")")" "$(ms "$(field ack_p99_ms "$rep")")" "$(ms "$(field deliver_p50_ms "$rep")")" \
  "$(ms "$(field deliver_p99_ms "$rep")")" "$svclogs/load.html"

begin "the group in the committed log (seqflow tap)" block
tap_group() { "$bin/seqflow" tap -keys -from start -session "$sid" -n 3 -idle-exit 20s >"$svclogs/tap.jsonl"; }
run tap_group
while IFS= read -r rec; do
  [[ -n $rec ]] || continue
  s=$(field seq "$rec")
  if [[ -z $s ]]; then
    printf '      %s\n' "$rec"
    continue
  fi
  body=$(field body "$rec")
  printf '      partition %s offset %-3s seq %s %-15s %-6s %s\n' "$(field partition "$rec")" "$(field offset "$rec")" "$s" \
    "$(field type "$rec")" "$(field sender_user_id "$rec")" "${body:+\"$body\"}"
done <"$svclogs/tap.jsonl"
printf '      %s\n' "$(dim "(no record for the retry.) The bodies are sealed in Kafka; -keys opens them (docs/erasure.md). Whole records: $svclogs/tap.jsonl; again:")"
printf '      %s\n' "$(dim "$bin/seqflow tap -keys -from start -session $sid")"

# ---------------------------------------------------------------- running

stack_note="running before the demo: left running (go tool task down stops it)"
mapfile -t parts < <(sort -u "$started_file")
((${#parts[@]} == 0)) || stack_note="started by the demo: ${parts[*]}; stopped with it"
printf '\n%s in %s\n' "$(bold "Ready")" "$(dur "$SECONDS")"
printf '  chat page   %s  open it in two tabs, log in as alice in one and bob in the other\n' "$(bold "$gw/")"
printf '  metrics     http://%s/metrics (sequencer); %s persister, %s producer-gw, %s pusher\n' \
  "${admin[sequencer]}" "${admin[persister]}" "${admin[producer-gw]}" "${admin[pusher]}"
printf '  erase       curl -H "Authorization: Bearer $(cut -d: -f2- %s)" -H "Content-Type: application/json" \\\n              -d %s http://%s/erase/user   (docs/erasure.md)\n' \
  "$SEQFLOW_ADMIN_TOKENS_FILE" "'{\"user_id\":\"bob\"}'" "${admin[producer-gw]}"
printf '  stack       PostgreSQL 127.0.0.1:%s, Redis %s, Kafka %s\n              %s\n' \
  "$(sed -nE 's#.*@[^:]+:([0-9]+)/.*#\1#p' <<<"$SEQFLOW_PG_URL")" "$SEQFLOW_REDIS_ADDR" "$SEQFLOW_KAFKA_BROKERS" "$stack_note"
printf '  logs        %s/<service>.log; the steps: %s\n' "$svclogs" "$log"

if [[ $hold == 0 ]]; then
  printf 'exiting now (--once or SEQFLOW_DEMO_HOLD=0)\n'
  exit 0
fi
if [[ $hold == forever ]]; then
  printf '%s\n' "$(bold "Running until Ctrl-C") (it stops the services and what the demo started of the stack)."
  until_s=0
else
  why="SEQFLOW_DEMO_HOLD"
  [[ -z ${SEQFLOW_DEMO_HOLD:-} ]] && why="no terminal; SEQFLOW_DEMO_HOLD sets it"
  printf '%s (%s), or until SIGINT/SIGTERM: kill -INT %s.\n' "$(bold "Running for $(dur "$hold")")" "$why" "$$"
  until_s=$((SECONDS + hold))
fi
current="running"
while :; do
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[i]}" 2>/dev/null; then
      failed=true
      printf '%s %s exited; last lines of %s/%s.log:\n' "$(red "✗")" "${names[i]}" "$svclogs" "${names[i]}" >&2
      tail -n 20 "$svclogs/${names[i]}.log" | sed 's/^/    /' >&2
      exit 1
    fi
  done
  if ((until_s > 0 && SECONDS >= until_s)); then
    printf 'held for %s: stopping\n' "$(dur "$hold")"
    exit 0
  fi
  sleep 1 &
  wait $! || true
done
