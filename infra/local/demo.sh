#!/usr/bin/env bash
# seqflow demo: brings the local stack and every service up, pushes messages
# through the whole pipeline (gateway → Kafka → sequencer → persister and
# pusher → gateway), prints what came back, serves the web chat page
# (producer-gw/web, on because GATEWAY_DEV_MODE=true) and prints its URL,
# and keeps running until Ctrl-C.
# With CI=true, without a terminal, or with --once it exits after the run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
once=false
for a in "$@"; do [[ $a == --once ]] && once=true; done
[[ ${CI:-} == true || ! -t 0 ]] && once=true

say() { printf '\033[1m== %s\033[0m\n' "$*"; }

say "local stack"
bash infra/local/stack.sh up
set -a; . .data/local.env; set +a

bin=.data/bin
logs=.data/demo
mkdir -p "$bin" "$logs"
say "building services"
for pkg in sequencer persister pusher producer-gw cmd/seqflow; do
  go build -o "$bin/$(basename "$pkg")" "./$pkg"
done
"$bin/seqflow" setup

export GATEWAY_JWT_HS256_SECRET=${GATEWAY_JWT_HS256_SECRET:-demo-secret-demo-secret-demo-secret}
export GATEWAY_DEV_MODE=true GATEWAY_ID=gw-demo GATEWAY_ADDR=127.0.0.1:8080
export SEQUENCER_INSTANCE_ID=demo PERSISTER_INSTANCE_ID=demo PUSHER_INSTANCE_ID=demo

pids=()
cleanup() {
  say "stopping services"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  say "services stopped (the stack keeps running: go tool task down)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for svc in sequencer persister pusher producer-gw; do
  "$bin/$svc" >"$logs/$svc.log" 2>&1 &
  pids+=($!)
done

say "waiting for the services to be ready"
ready() { curl -fsS "http://$1/readyz" >/dev/null 2>&1; }
deadline=$((SECONDS + 90))
for addr in 127.0.0.1:9101 127.0.0.1:9102 127.0.0.1:9104 127.0.0.1:9103; do
  until ready "$addr"; do
    if ((SECONDS > deadline)); then
      echo "service on $addr not ready in 90 s; logs in $logs/" >&2
      tail -n 20 "$logs"/*.log >&2
      exit 1
    fi
    sleep 0.5
  done
done

gw=http://127.0.0.1:8080
page="$gw/"
if ! curl -fsS "$page" | grep -q '<title>seqflow chat</title>'; then
  echo "the gateway does not serve the chat page at $page; logs in $logs/" >&2
  exit 1
fi
login() { curl -fsS -XPOST "$gw/v1/dev/login" -d "{\"user_id\":\"$1\",\"device_id\":\"$2\"}" | sed -E 's/.*"token":"([^"]+)".*/\1/'; }
post() { curl -sS -H "Authorization: Bearer $1" -XPOST "$gw/v1/$2" -d "$3"; echo; }

say "alice and bob: a group, a message, a retry of it, and sync"
A=$(login alice laptop)
B=$(login bob phone)
run=$(date +%s)
created=$(post "$A" create_session "{\"client_msg_id\":\"demo-create-$run\",\"kind\":\"group\",\"title\":\"demo\",\"member_user_ids\":[\"bob\"]}")
echo "create_session → $created"
sid=$(sed -E 's/.*"session_id":"([^"]+)".*/\1/' <<<"$created")
echo "send           → $(post "$A" send "{\"client_msg_id\":\"demo-m1-$run\",\"session_id\":\"$sid\",\"type\":\"text\",\"body\":\"hello bob\"}")"
echo "send (retry)   → $(post "$A" send "{\"client_msg_id\":\"demo-m1-$run\",\"session_id\":\"$sid\",\"type\":\"text\",\"body\":\"hello bob\"}")"
echo "send (bob)     → $(post "$B" send "{\"client_msg_id\":\"demo-m2-$run\",\"session_id\":\"$sid\",\"type\":\"text\",\"body\":\"hi alice\"}")"
# The store is written asynchronously by the persister: wait for it.
for _ in $(seq 60); do
  synced=$(curl -sS -H "Authorization: Bearer $B" "$gw/v1/sessions/$sid/messages?after_seq=0&limit=10")
  grep -q '"seq":3' <<<"$synced" && break
  sleep 0.5
done
echo "bob syncs      → $synced"

say "seqflow load: 10 s through the gateway"
{
  "$bin/seqflow" load -duration 10s -users 20 -sessions 10 -rate 200 \
    -json "$logs/load.json" -plot "$logs/load.html" || echo "(load reported a problem; see above)"
  echo "load report: $logs/load.json, latency plot: $logs/load.html"
}

say "the committed log (seqflow tap)"
"$bin/seqflow" tap -from start -session "$sid" -n 3 -idle-exit 20s

say "web chat: $page"
echo "open it in two tabs or windows, log in as alice in one and bob in the other:"
echo "the demo group is already there; start a direct session, watch each message's seq,"
echo "and try disconnect / reconnect to see the page catch up."

if $once; then
  exit 0
fi
say "running: chat page $page, gateway $gw (dev login on), metrics on 127.0.0.1:9101-9104, logs in $logs/. Ctrl-C stops."
wait
