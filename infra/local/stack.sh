#!/usr/bin/env bash
# Local dev/test stack for seqflow: PostgreSQL, Redis and Apache Kafka (KRaft),
# all bound to 127.0.0.1 on non-default ports, all state under <repo>/.data/.
#
#   stack.sh up                   start postgres :15432, redis :16379, kafka :19092; write .data/local.env
#   stack.sh down                 stop everything (incl. the 3-node cluster); nothing left listening
#   stack.sh status               running/stopped, pid, port, ready per component
#   stack.sh stop PART...         stop only those of postgres, redis, kafka (the single node)
#   stack.sh missing-packages [stack|test]  print the Debian packages that `packages` would install
#   stack.sh packages [stack|test]  install the missing Debian packages (as root; else say which):
#                                 stack: a JDK, Maven, PostgreSQL, Redis (what `up` needs);
#                                 test: those plus protoc and Chromium (only the tests need them)
#   stack.sh kafka-jars           fetch Kafka's jars with Maven into .data/kafka/libs (`up` does it too)
#   stack.sh env [kafka3]         print .data/local.env (or .data/kafka3.env)
#   stack.sh admin-tokens         make .data/admin-tokens if missing (`up` does it too) and print its path:
#                                 the operator token of the services' admin ports (SEQFLOW_ADMIN_TOKENS_FILE)
#   stack.sh up-kafka3            start the KRaft cluster of 3 brokers :19101-19103 and 3 dedicated
#                                 controllers :19201-19203; write .data/kafka3.env
#   stack.sh down-kafka3          stop that cluster only
#   stack.sh kill-kafka3-node N   kill -9 broker N (1..3) of that cluster
#   stack.sh start-kafka3-node N  (re)start broker N and wait until the cluster is fully in sync again
#   stack.sh restart-redis [--wipe]  restart redis (keeps data via AOF unless --wipe)
#   stack.sh kafka-tool CLASS ARGS...  run a Kafka CLI class, e.g.
#        stack.sh kafka-tool topics --bootstrap-server 127.0.0.1:19092 --list
#        (aliases: topics groups transactions configs metadata-quorum storage console-consumer console-producer)
#
# "Ready" means usable: postgres answers `select 1` on the seqflow database, redis
# answers PING and a SET/GET round trip, and Kafka passes infra/kafka/ReadyProbe.java
# (create topic, transactional acks=all produce, read_committed consume + offset commit).
#
# Ports: SEQFLOW_PG_PORT (15432), SEQFLOW_REDIS_PORT (16379), SEQFLOW_KAFKA_PORT (19092) and
# SEQFLOW_KAFKA_CONTROLLER_PORT (19093) move the single stack, e.g. to run a second checkout's
# stack beside the first. `up` records them in .data/stack-ports, which later commands on that
# checkout read when the variables are unset; set them before the first `up` of a checkout
# (Kafka keeps its controller's address in its data).
#
# PostgreSQL runs as the invoking user, or as root as the OS user postgres (or a system user
# seqflow made for it). When that user cannot reach .data/ (a checkout in root's home, mode
# 700), its data directory goes to /var/lib/seqflow/pg-<hash of the checkout's path>, owned by
# it, and .data/pg is a symlink to that: removing .data/ therefore means a new, empty database
# there too, as it does in the checkout.
#
# SEQFLOW_STACK_STARTED: a file `up` appends postgres, redis and kafka to as it starts each (the
# demo stops only what it started).
#
# Environment knobs: SEQFLOW_STACK_TIMEOUT (seconds per wait, default 120),
# SEQFLOW_KAFKA_HEAP (default "-Xms1g -Xmx1g"), SEQFLOW_KAFKA3_HEAP (default "-Xms256m -Xmx768m"),
# for experiments: SEQFLOW_KAFKA_GC (the brokers' garbage collector flags, default G1 with its
# own 200 ms pause goal: see BROKER_GC_FLAGS) and SEQFLOW_KAFKA_PROPS (space-separated key=value lines added to every node's
# server.properties), both read when a node starts; SEQFLOW_KAFKA_JAVA (the java binary
# the brokers run on, default java on PATH, e.g. a newer JDK beside the default one).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
DATA=$REPO/.data
KAFKA_SRC=$REPO/infra/kafka
LIBS=$DATA/kafka/libs
PROBE_DIR=$DATA/kafka/probe
TIMEOUT=${SEQFLOW_STACK_TIMEOUT:-120}
STOP_TIMEOUT=30

KAFKA_VERSION=4.1.1
PORTS_FILE=$DATA/stack-ports
saved_port() { # NAME default -> the environment's value, else the one `up` recorded, else default
  local v=${!1:-}
  [[ -z $v && -f $PORTS_FILE ]] && v=$(sed -n "s/^$1=\([0-9]*\)\$/\1/p" "$PORTS_FILE")
  v=${v:-$2}
  [[ $v =~ ^[0-9]+$ ]] && ((v > 0 && v < 65536)) || { printf '[stack] ERROR: %s=%s is not a port\n' "$1" "$v" >&2; exit 1; }
  echo "$v"
}
PG_PORT=$(saved_port SEQFLOW_PG_PORT 15432)
PG_DB=seqflow
PG_SUPERUSER=seqflow
REDIS_PORT=$(saved_port SEQFLOW_REDIS_PORT 16379)
K1_PORT=$(saved_port SEQFLOW_KAFKA_PORT 19092)
K1_CTRL_PORT=$(saved_port SEQFLOW_KAFKA_CONTROLLER_PORT 19093)
K3_PORTS=(19101 19102 19103)
K3_CTRL_PORTS=(19201 19202 19203)
K3_BROKERS=127.0.0.1:19101,127.0.0.1:19102,127.0.0.1:19103
# kafka3: three brokers (node ids 1-3, ports K3_PORTS) and a quorum of three
# dedicated controllers (node ids 101-103, ports K3_CTRL_PORTS). Killing a
# broker then never costs a controller election before the dead broker is
# fenced (with combined nodes it did, one kill in three: chaos run 4870d3ab).
K3_VOTERS=101@127.0.0.1:19201,102@127.0.0.1:19202,103@127.0.0.1:19203
K3_LAYOUT=dedicated-controllers-1
K3_NODES=(k3c-1 k3c-2 k3c-3 k3-1 k3-2 k3-3)
# The segment size of __consumer_offsets and __transaction_state (Kafka's
# default: 100 MiB). A broker that becomes the group or transaction
# coordinator of a partition of them replays it before it answers, and only
# closed segments are ever compacted: with 100 MiB segments it replayed every
# offset commit and transaction since the topic was made (full chaos run
# ec4088a9, minute 20: 20,149 records of __consumer_offsets-1 in 1.2 s, one
# __transaction_state partition in 2.6 s, while the sequencers waited).
# Set on the brokers (new clusters) and by the readiness probe (existing ones).
INTERNAL_SEGMENT_BYTES=1048576

# .data/pg, or where the symlink .data/pg points (see pg_place).
PG_LINK=$DATA/pg
PG_HOME=/var/lib/seqflow
REPO_HASH=$(printf '%s' "$REPO" | sha256sum | cut -c1-12)
pg_paths() { # dir: set PG_DIR and everything under it
  PG_DIR=$1
  PGDATA_DIR=$PG_DIR/data
  PG_LOG=$PG_DIR/postgres.log
  PG_SOCK=$PG_DIR/run
  # Unix socket paths are limited to ~107 bytes; fall back to /tmp for deep checkouts.
  if ((${#PG_SOCK} + 20 > 100)); then
    PG_SOCK=/tmp/seqflow-pg-$REPO_HASH
  fi
}
if [[ -L $PG_LINK ]]; then pg_paths "$(readlink "$PG_LINK")"; else pg_paths "$PG_LINK"; fi
PG_URL="postgres://${PG_SUPERUSER}@127.0.0.1:${PG_PORT}/${PG_DB}?sslmode=disable"
REDIS_DIR=$DATA/redis
REDIS_PID=$REDIS_DIR/redis.pid
REDIS_LOG=$REDIS_DIR/redis.log

JAVA_TOOL_FLAGS=(-Xms32m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto
  -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true "-Dlog4j2.configurationFile=$KAFKA_SRC/log4j2-tools.properties")
# shellcheck disable=SC2206 # a flag list
# G1 with its default pause goal (200 ms), not 20 ms: on this 2-core box a
# 20 ms goal shrank the young generation to 40-110 MB, so the broker paused
# every 0.5-1.5 s (11-35 ms each) and promoted what had not died yet; after
# half an hour of benchmarks its old generation held 462 MB after a young
# collection (210 MB live) and pauses reached 200-840 ms. With 200 ms the
# young generation is about 600 MB: a pause every 8 s or so, 15-72 ms
# (docs/benchmarks.md, "Defaults chosen by measurement").
BROKER_GC_FLAGS=(${SEQFLOW_KAFKA_GC:--XX:+UseG1GC -XX:MaxGCPauseMillis=200 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent})
BROKER_JVM_FLAGS=(-server "${BROKER_GC_FLAGS[@]}" -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$KAFKA_SRC/log4j2-broker.properties")

# ---------------------------------------------------------------- helpers

log() { printf '[stack +%ss] %s\n' "$SECONDS" "$*"; }
warn() { printf '[stack] WARNING: %s\n' "$*" >&2; }
die() { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s; }
# started PART: with SEQFLOW_STACK_STARTED set, append PART to that file when
# this run starts it (the demo stops only what it started).
started() { [[ -z ${SEQFLOW_STACK_STARTED:-} ]] || echo "$1" >>"$SEQFLOW_STACK_STARTED"; }

show_log() { # file [lines]
  if [[ -f $1 ]]; then
    printf '[stack] ---- last %s lines of %s ----\n' "${2:-40}" "$1" >&2
    tail -n "${2:-40}" "$1" >&2 || true
    printf '[stack] ----\n' >&2
  else
    printf '[stack] (no log file %s)\n' "$1" >&2
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_alive() { # pid -> running and not a zombie
  local pid=${1:-} state
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  [[ -n $state && $state != Z && $state != X ]]
}

read_pid() { [[ -f $1 ]] && head -n1 "$1" 2>/dev/null | tr -dc '0-9' || true; }

cmdline_has() { # pid substring
  [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

scan_pids() { # exact(0|1) pattern argv0-glob -> live pids whose command line has pattern as an
  # argument (exact=1) or substring (exact=0) and whose argv[0] matches the glob (never ourselves)
  local opts=(-lzF) f pid a0
  [[ $1 == 1 ]] && opts=(-lxzF)
  for f in $(grep "${opts[@]}" -- "$2" /proc/[0-9]*/cmdline 2>/dev/null); do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    pid_alive "$pid" || continue
    a0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1)
    # shellcheck disable=SC2053 # glob match intended
    [[ $a0 == $3 ]] && echo "$pid"
  done
  return 0
}

wait_pid_gone() { # timeout pid...
  local deadline=$(($(now) + $1)) p alive
  shift
  while :; do
    alive=0
    for p in "$@"; do pid_alive "$p" && alive=1; done
    ((alive)) || return 0
    (($(now) >= deadline)) && return 1
    sleep 0.2
  done
}

stop_pids() { # label pid... : SIGTERM, wait, then SIGKILL
  local label=$1 p
  shift
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  if ! wait_pid_gone "$STOP_TIMEOUT" "$@"; then
    warn "$label did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
    for p in "$@"; do pid_alive "$p" && kill -KILL "$p" 2>/dev/null || true; done
    wait_pid_gone 10 "$@" || warn "$label: pids $* still present"
  fi
}

# Lock fds are fixed (7 single, 8 kafka3, 9 build) so that every daemon we launch can be
# started with them closed (see NOFD) - otherwise the daemon would hold the lock forever.
with_lock() { # name command...
  local name=$1 fd
  shift
  case $name in single) fd=7 ;; kafka3) fd=8 ;; build) fd=9 ;; *) die "unknown lock $name" ;; esac
  mkdir -p "$DATA"
  eval "exec $fd>\"\$DATA/.lock-\$name\""
  flock -w 900 "$fd" || die "could not acquire lock $DATA/.lock-$name"
  "$@"
  eval "exec $fd>&-"
}

# admin_tokens: .data/admin-tokens, the local stack's operator tokens
# (internal/admin: one "name:token" line, here "operator:" and 32 random
# bytes in hex), made once per checkout, readable by its owner only.
ADMIN_TOKENS=$DATA/admin-tokens
admin_tokens() {
  mkdir -p "$DATA"
  if [[ ! -s $ADMIN_TOKENS ]]; then
    (
      umask 077
      printf 'operator:%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$ADMIN_TOKENS.tmp.$$"
      mv -f "$ADMIN_TOKENS.tmp.$$" "$ADMIN_TOKENS"
    )
  fi
}

write_env_file() { # path lines... (atomic)
  local path=$1
  shift
  printf '%s\n' "$@" >"$path.tmp.$$"
  mv -f "$path.tmp.$$" "$path"
}

# ---------------------------------------------------------------- packages

pg_bin_dir() {
  local v
  if [[ -f $PGDATA_DIR/PG_VERSION ]]; then
    v=$(cat "$PGDATA_DIR/PG_VERSION")
    if [[ -x /usr/lib/postgresql/$v/bin/initdb ]]; then echo "/usr/lib/postgresql/$v/bin"; return; fi
  fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  if [[ -n $d && -x $d/initdb ]]; then echo "$d"; return; fi
  # Non-Debian layouts: initdb on PATH.
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; fi
}

java_major() {
  local v
  v=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
  v=${v#1.}
  echo "${v%%[.+-]*}"
}

chromium_path() { echo "${SEQFLOW_CHROMIUM:-/usr/bin/chromium}"; }

missing_packages() { # what: stack | kafka | test -> Debian package names that are needed but missing
  local what=$1 major
  if ! command -v java >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
    echo openjdk-17-jdk-headless
  else
    major=$(java_major)
    if [[ ! $major =~ ^[0-9]+$ ]] || ((major < 17)); then echo openjdk-17-jdk-headless; fi
  fi
  command -v mvn >/dev/null 2>&1 || echo maven
  if [[ $what == stack || $what == test ]]; then
    [[ -n $(pg_bin_dir) ]] || echo postgresql
    { command -v redis-server && command -v redis-cli; } >/dev/null 2>&1 || echo redis-server
  fi
  if [[ $what == test ]]; then
    command -v protoc >/dev/null 2>&1 || echo protobuf-compiler # schemas' generate test
    [[ -x $(chromium_path) ]] || echo chromium                    # producer-gw's browser test
    command -v kcat >/dev/null 2>&1 || echo kcat                  # docs/analytics.md's commands, tested
    python3 -c 'import venv, ensurepip' 2>/dev/null || echo python3-venv # the Python consumer, DuckDB
  fi
  return 0
}

ensure_packages() { # what: stack | kafka | test
  local pkgs jdk
  mapfile -t pkgs < <(missing_packages "$1")
  ((${#pkgs[@]})) || return 0
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing missing packages: ${pkgs[*]}"
    apt-get -o DPkg::Lock::Timeout=600 update -q || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
      "${pkgs[@]}" || die "apt-get install ${pkgs[*]} failed"
    hash -r
    jdk=/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture 2>/dev/null || echo amd64)/bin
    if [[ " ${pkgs[*]} " == *" openjdk-17-jdk-headless "* && -x $jdk/javac ]]; then
      # make sure the JDK we just installed wins over an older default java
      export PATH=$jdk:$PATH
    fi
    mapfile -t pkgs < <(missing_packages "$1")
    ((${#pkgs[@]} == 0)) || die "still missing after apt-get install: ${pkgs[*]}"
  else
    die "missing packages: ${pkgs[*]}
  install them first, e.g.:  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${pkgs[*]}
  (the stack needs a JDK >= 17 with javac, maven, postgresql, redis-server; the tests also protobuf-compiler, chromium, kcat and python3-venv)"
  fi
}

# ---------------------------------------------------------------- kafka jars + probe

any_kafka_running() {
  local n
  for n in single "${K3_NODES[@]}"; do kafka_node_pid "$n" >/dev/null && return 0; done
  return 1
}

build_kafka_libs() {
  local sha tmp
  mkdir -p "$DATA/kafka"
  sha=$(sha256sum "$KAFKA_SRC/pom.xml" | cut -d' ' -f1)
  if [[ -f $LIBS/.stamp && $(cat "$LIBS/.stamp") == "$sha" ]]; then return 0; fi
  if [[ -f $LIBS/.stamp ]] && any_kafka_running; then
    warn "infra/kafka/pom.xml changed but Kafka is running; keeping the old jars (run 'down' then 'up' to switch)"
    return 0
  fi
  log "copying Kafka $KAFKA_VERSION jars with maven -> $LIBS"
  tmp=$DATA/kafka/libs.tmp.$$
  rm -rf "$tmp"
  if ! mvn -B -q -Dstyle.color=never -f "$KAFKA_SRC/pom.xml" dependency:copy-dependencies \
    "-DoutputDirectory=$tmp" >"$DATA/kafka/mvn.log" 2>&1; then
    rm -rf "$tmp"
    show_log "$DATA/kafka/mvn.log" 60
    die "maven could not fetch the Kafka jars"
  fi
  [[ -f $tmp/kafka_2.13-$KAFKA_VERSION.jar && -f $tmp/kafka-tools-$KAFKA_VERSION.jar ]] ||
    die "maven finished but kafka_2.13/kafka-tools $KAFKA_VERSION jars are missing in $tmp"
  echo "$sha" >"$tmp/.stamp"
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS"
}

build_probe() {
  local sha tmp
  sha=$(cat "$KAFKA_SRC/ReadyProbe.java" "$LIBS/.stamp" | sha256sum | cut -d' ' -f1)
  if [[ -f $PROBE_DIR/.stamp && $(cat "$PROBE_DIR/.stamp") == "$sha" ]]; then return 0; fi
  tmp=$DATA/kafka/probe.tmp.$$
  rm -rf "$tmp"
  mkdir -p "$tmp"
  javac -nowarn -encoding UTF-8 -cp "$LIBS/*" -d "$tmp" "$KAFKA_SRC/ReadyProbe.java" ||
    { rm -rf "$tmp"; die "could not compile infra/kafka/ReadyProbe.java"; }
  echo "$sha" >"$tmp/.stamp"
  rm -rf "$PROBE_DIR"
  mv "$tmp" "$PROBE_DIR"
}

prepare_kafka() {
  build_kafka_libs
  build_probe
}

kafka_probe() { # args for ReadyProbe
  java "${JAVA_TOOL_FLAGS[@]}" -Dseqflow.tools.loglevel=error -cp "$PROBE_DIR:$LIBS/*" ReadyProbe "$@"
}

kafka_tool() {
  [[ -f $LIBS/.stamp ]] || die "Kafka jars not present yet; run '$0 up' first"
  local cls=${1:?usage: kafka-tool CLASS|alias [args...]}
  shift
  case $cls in
    topics) cls=org.apache.kafka.tools.TopicCommand ;;
    groups) cls=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    transactions) cls=org.apache.kafka.tools.TransactionsCommand ;;
    configs) cls=kafka.admin.ConfigCommand ;;
    storage) cls=kafka.tools.StorageTool ;;
    metadata-quorum) cls=org.apache.kafka.tools.MetadataQuorumCommand ;;
    console-consumer) cls=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    console-producer) cls=org.apache.kafka.tools.ConsoleProducer ;;
  esac
  exec java "${JAVA_TOOL_FLAGS[@]}" -cp "$LIBS/*" "$cls" "$@"
}

# ---------------------------------------------------------------- kafka nodes

# node names: single | k3-1 | k3-2 | k3-3 (kafka3 brokers) | k3c-1 | k3c-2 | k3c-3 (kafka3 controllers)
kafka_node_dir() { echo "$DATA/kafka/$1"; }
kafka_node_port() { # the port a node's readiness is checked on: the broker port, or a controller's own
  case $1 in
    single) echo $K1_PORT ;;
    k3c-*) echo "${K3_CTRL_PORTS[${1#k3c-} - 1]}" ;;
    *) echo "${K3_PORTS[${1#k3-} - 1]}" ;;
  esac
}
kafka_node_ctrl_port() { # the controller port a node listens on; none for a kafka3 broker
  case $1 in
    single) echo $K1_CTRL_PORT ;;
    k3c-*) echo "${K3_CTRL_PORTS[${1#k3c-} - 1]}" ;;
  esac
}

kafka_node_pid() { # prints pid and succeeds when node is running
  local dir props pid
  dir=$(kafka_node_dir "$1")
  props=$dir/server.properties
  pid=$(read_pid "$dir/kafka.pid")
  if pid_alive "$pid" && cmdline_has "$pid" "$props"; then echo "$pid"; return 0; fi
  # pid file lost (e.g. .data wiped while running): find it by its unique config path
  for pid in $(scan_pids 1 "$props" "*java"); do
    cmdline_has "$pid" "kafka.Kafka" && { echo "$pid"; return 0; }
  done
  return 1
}

write_kafka_props() { # node
  local node=$1 dir port ctrl
  dir=$(kafka_node_dir "$node")
  port=$(kafka_node_port "$node")
  ctrl=$(kafka_node_ctrl_port "$node")
  mkdir -p "$dir/data"
  {
    echo "# generated by infra/local/stack.sh - edits are overwritten on start"
    case $node in
      single)
        echo "process.roles=broker,controller"
        echo "node.id=1"
        echo "controller.quorum.bootstrap.servers=127.0.0.1:$ctrl"
        echo "listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctrl"
        echo "advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctrl"
        echo "inter.broker.listener.name=PLAINTEXT"
        ;;
      k3c-*)
        echo "process.roles=controller"
        echo "node.id=$((100 + ${node#k3c-}))"
        echo "controller.quorum.voters=$K3_VOTERS"
        echo "listeners=CONTROLLER://127.0.0.1:$ctrl"
        ;;
      *)
        echo "process.roles=broker"
        echo "node.id=${node#k3-}"
        echo "controller.quorum.voters=$K3_VOTERS"
        echo "listeners=PLAINTEXT://127.0.0.1:$port"
        echo "advertised.listeners=PLAINTEXT://127.0.0.1:$port"
        echo "inter.broker.listener.name=PLAINTEXT"
        ;;
    esac
    echo "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    echo "controller.listener.names=CONTROLLER"
    echo "log.dirs=$dir/data"
    echo "num.partitions=12"
    echo "auto.create.topics.enable=false"
    echo "delete.topic.enable=true"
    echo "group.initial.rebalance.delay.ms=0"
    # How often the coordinator looks for transactions open past their
    # timeout and aborts them (Kafka's default 10s). A paused (zombie)
    # sequencer's open transaction holds its partitions' last stable offset,
    # which the new owner waits for, so this adds to every takeover from a
    # zombie: checked each second, the wait is about the transaction timeout.
    echo "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000"
    echo "num.recovery.threads.per.data.dir=1"
    echo "offsets.topic.segment.bytes=$INTERNAL_SEGMENT_BYTES"
    echo "transaction.state.log.segment.bytes=$INTERNAL_SEGMENT_BYTES"
    if [[ $node == single ]]; then
      echo "default.replication.factor=1"
      echo "min.insync.replicas=1"
      echo "offsets.topic.replication.factor=1"
      echo "transaction.state.log.replication.factor=1"
      echo "transaction.state.log.min.isr=1"
      echo "share.coordinator.state.topic.replication.factor=1"
      echo "share.coordinator.state.topic.min.isr=1"
    else
      echo "default.replication.factor=3"
      echo "min.insync.replicas=2"
      echo "offsets.topic.replication.factor=3"
      echo "transaction.state.log.replication.factor=3"
      echo "transaction.state.log.min.isr=2"
      echo "share.coordinator.state.topic.replication.factor=3"
      echo "share.coordinator.state.topic.min.isr=2"
      echo "unclean.leader.election.enable=false"
      # A killed node is fenced (its partitions and coordinators move to
      # the others) after this, not Kafka's default 9s: failover takes the
      # fencing plus a few seconds, and chaos runs measure it against the
      # services' 6s group session timeout plus a few seconds.
      echo "broker.session.timeout.ms=4000"
      echo "broker.heartbeat.interval.ms=500"
      # A restarted node replays the metadata log from its latest snapshot;
      # Kafka's default (a snapshot an hour) made a node killed in a chaos
      # run replay tens of thousands of records from offset 0 before it was
      # unfenced (18s). One a minute keeps that replay short.
      echo "metadata.log.max.snapshot.interval.ms=60000"
    fi
    # Extra lines for experiments, e.g. SEQFLOW_KAFKA_PROPS='num.io.threads=2'
    # (space-separated key=value pairs; a later line wins).
    local kv
    for kv in ${SEQFLOW_KAFKA_PROPS:-}; do echo "$kv"; done
  } >"$dir/server.properties.tmp"
  mv -f "$dir/server.properties.tmp" "$dir/server.properties"
}

kafka_cluster_id() { # file -> prints (creating once) a cluster id
  local f=$1 id
  if [[ ! -s $f ]]; then
    id=$(java "${JAVA_TOOL_FLAGS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1 | tr -d '[:space:]')
    [[ $id =~ ^[A-Za-z0-9_-]{22}$ ]] || die "could not generate a Kafka cluster id (got '$id')"
    echo "$id" >"$f"
  fi
  cat "$f"
}

kafka_node_format() { # node : write server.properties, format storage once
  local node=$1 dir cid fmt=()
  dir=$(kafka_node_dir "$node")
  write_kafka_props "$node"
  [[ -f $dir/data/meta.properties ]] && return 0
  if [[ $node == single ]]; then
    cid=$(kafka_cluster_id "$dir/cluster.id")
    fmt=(--standalone) # single-node dynamic quorum (controller.quorum.bootstrap.servers)
  else
    cid=$(kafka_cluster_id "$DATA/kafka/k3.cluster.id") # static quorum (controller.quorum.voters)
  fi
  log "formatting kafka $node storage (cluster id $cid)"
  if ! java "${JAVA_TOOL_FLAGS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format \
    -t "$cid" -c "$dir/server.properties" "${fmt[@]}" >"$dir/format.log" 2>&1; then
    show_log "$dir/format.log"
    die "kafka $node: storage format failed"
  fi
}

kafka_node_launch() { # node heap  (starts the process, does not wait)
  local node=$1 heap=$2 dir port ctrl pid p
  kafka_node_pid "$node" >/dev/null && return 0
  dir=$(kafka_node_dir "$node")
  port=$(kafka_node_port "$node")
  ctrl=$(kafka_node_ctrl_port "$node")
  for p in "$port" $ctrl; do
    if port_open "$p"; then
      die "kafka $node: 127.0.0.1:$p is already in use by another process (check: ss -ltnp 'sport = :$p')"
    fi
  done
  kafka_node_format "$node"
  # keep logs bounded across many restarts
  if [[ -f $dir/kafka.log ]] && (($(stat -c %s "$dir/kafka.log") > 100 * 1024 * 1024)); then
    mv -f "$dir/kafka.log" "$dir/kafka.log.1"
  fi
  printf '\n===== %s starting kafka %s (%s) =====\n' "$(date -Is)" "$node" "$KAFKA_VERSION" >>"$dir/kafka.log"
  # shellcheck disable=SC2086 # heap is a flag list
  nohup setsid "${SEQFLOW_KAFKA_JAVA:-java}" $heap "${BROKER_JVM_FLAGS[@]}" "-Dseqflow.kafka.node=$node" -cp "$LIBS/*" \
    kafka.Kafka "$dir/server.properties" >>"$dir/kafka.log" 2>&1 </dev/null 7>&- 8>&- 9>&- &
  pid=$!
  echo "$pid" >"$dir/kafka.pid"
  [[ $node != single ]] || started kafka
  log "kafka $node starting (pid $pid, 127.0.0.1:$port, log $dir/kafka.log)"
}

kafka_node_started() { # node -> the current run (after the last start marker) logged "Kafka Server started"
  awk '/^===== .* starting kafka /{s=0} /Kafka Server started/{s=1} END{exit !s}' \
    "$(kafka_node_dir "$1")/kafka.log" 2>/dev/null
}

kafka_node_wait_started() { # node deadline : port open and broker unfenced + STARTED
  local node=$1 deadline=$2 dir port
  dir=$(kafka_node_dir "$node")
  port=$(kafka_node_port "$node")
  until port_open "$port" && kafka_node_started "$node"; do
    # A process caught in its exec (nohup → setsid → java) can briefly show
    # no command line: only a node missing on two looks a second apart
    # exited (a chaos run's broker restart was declared dead while it went
    # on to start).
    if ! kafka_node_pid "$node" >/dev/null && ! { sleep 1; kafka_node_pid "$node" >/dev/null; }; then
      show_log "$dir/kafka.log" 60
      die "kafka $node exited during startup"
    fi
    if (($(now) >= deadline)); then
      show_log "$dir/kafka.log" 60
      die "kafka $node: not started (port $port / 'Kafka Server started') after ${TIMEOUT}s"
    fi
    sleep 0.3
  done
}

kafka_nodes_stop() { # node...  (graceful in parallel, then SIGKILL)
  local node pids=() pid
  for node in "$@"; do
    pid=$(kafka_node_pid "$node" || true)
    [[ -n $pid ]] && pids+=("$pid")
  done
  if ((${#pids[@]})); then
    log "stopping kafka $* (pids ${pids[*]})"
    stop_pids "kafka $*" "${pids[@]}"
  fi
  for node in "$@"; do rm -f "$(kafka_node_dir "$node")/kafka.pid"; done
}

probe_fail() { # logs...
  local f
  for f in "$@"; do show_log "$f" 40; done
  die "Kafka readiness probe failed"
}

# ---------------------------------------------------------------- postgres

pg_os_user() {
  if [[ $EUID -ne 0 ]]; then id -un; return; fi
  if id postgres >/dev/null 2>&1; then echo postgres; return; fi
  if ! id seqflow >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin seqflow ||
      die "could not create system user seqflow to run postgres"
  fi
  echo seqflow
}

as_pg() { # from /: the checkout may be a directory PG_USER cannot enter
  if [[ $EUID -eq 0 ]]; then (cd / && runuser -u "$PG_USER" -- "$@"); else "$@"; fi
}

# pg_place puts PostgreSQL's directory where PG_USER can reach it: .data/pg
# when it can search .data/, else (root's checkout in a mode-700 home, say)
# $PG_HOME/pg-<hash of the checkout's path> with .data/pg a symlink to it.
# A missing symlink means .data/ was removed: the database there is removed
# too, as it would have been in the checkout, unless a postgres still runs
# on it.
pg_place() {
  local ext=$PG_HOME/pg-$REPO_HASH
  [[ $EUID -eq 0 && ! -L $PG_LINK ]] || return 0
  if runuser -u "$PG_USER" -- test -x "$DATA" 2>/dev/null; then return 0; fi
  [[ -f $PG_LINK/data/PG_VERSION ]] &&
    die "OS user $PG_USER cannot reach $PG_LINK, which holds a database; make its parents searchable (chmod o+x) or move the database away"
  rm -rf "$PG_LINK" # what an earlier failed start left (no database)
  pg_paths "$ext"
  if [[ -d $ext ]] && ! pg_pid >/dev/null; then
    log "postgres: removing $ext (its link $PG_LINK went with an earlier .data/)"
    rm -rf "$ext"
  fi
  mkdir -p "$PG_HOME"
  chmod 755 "$PG_HOME"
  mkdir -p "$ext"
  ln -s "$ext" "$PG_LINK"
  log "postgres: OS user $PG_USER cannot search $DATA; its data goes to $ext ($PG_LINK links to it)"
}

pg_pid() {
  local pid
  pid=$(read_pid "$PGDATA_DIR/postmaster.pid")
  if pid_alive "$pid" && cmdline_has "$pid" "$PGDATA_DIR"; then echo "$pid"; return 0; fi
  pid=$(scan_pids 1 "$PGDATA_DIR" "*/postgres" | head -n1)
  [[ -n $pid ]] && { echo "$pid"; return 0; }
  return 1
}

pg_ready() {
  local bin
  bin=$(pg_bin_dir)
  [[ -n $bin ]] || return 1
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -d postgres -U "$PG_SUPERUSER" -t 3 || return 1
  [[ $("$bin/psql" "$PG_URL" -XAtqc 'select 1' 2>/dev/null) == 1 ]]
}

pg_up() {
  local bin deadline
  bin=$(pg_bin_dir)
  [[ -n $bin ]] || die "postgresql binaries not found (install the postgresql package)"
  PG_USER=$(pg_os_user)
  mkdir -p "$DATA"
  pg_place
  mkdir -p "$PG_DIR" "$PG_SOCK"
  if [[ $EUID -eq 0 ]]; then
    chown "$PG_USER:" "$PG_DIR" "$PG_SOCK"
    [[ -d $PGDATA_DIR ]] && chown -R "$PG_USER:" "$PGDATA_DIR"
    [[ -f $PG_LOG ]] && chown "$PG_USER:" "$PG_LOG"
    runuser -u "$PG_USER" -- test -w "$PG_DIR" ||
      die "OS user $PG_USER cannot write $PG_DIR (a parent directory is not searchable by it?)"
  fi
  chmod 700 "$PG_SOCK"
  if [[ ! -f $PGDATA_DIR/PG_VERSION ]]; then
    log "initdb $PGDATA_DIR ($("$bin/postgres" --version), OS user $PG_USER)"
    rm -rf "$PGDATA_DIR"
    if ! as_pg "$bin/initdb" -D "$PGDATA_DIR" -U "$PG_SUPERUSER" --auth=trust -E UTF8 --locale=C \
      --no-instructions >"$PG_DIR/initdb.log" 2>&1; then
      show_log "$PG_DIR/initdb.log"
      die "initdb failed"
    fi
    # trust auth, loopback only (we only listen on 127.0.0.1 and a private socket dir)
    as_pg tee "$PGDATA_DIR/pg_hba.conf" >/dev/null <<EOF
# generated by infra/local/stack.sh
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 trust
host    all       all   127.0.0.1/32  trust
EOF
    echo "include_if_exists = 'seqflow.conf'" | as_pg tee -a "$PGDATA_DIR/postgresql.conf" >/dev/null
  fi
  # Re-written on every up; takes effect on the next (re)start.
  as_pg tee "$PGDATA_DIR/seqflow.conf.tmp" >/dev/null <<EOF
# generated by infra/local/stack.sh - edits are overwritten
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_SOCK'
max_connections = 200
shared_buffers = 256MB
# durability is NOT weakened on purpose
fsync = on
synchronous_commit = on
full_page_writes = on
timezone = 'UTC'
log_timezone = 'UTC'
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
EOF
  as_pg mv -f "$PGDATA_DIR/seqflow.conf.tmp" "$PGDATA_DIR/seqflow.conf"

  if ! pg_pid >/dev/null; then
    if port_open "$PG_PORT"; then
      die "postgres: 127.0.0.1:$PG_PORT is already in use by another process"
    fi
    log "starting postgres on 127.0.0.1:$PG_PORT"
    started postgres
    if ! as_pg "$bin/pg_ctl" -D "$PGDATA_DIR" -l "$PG_LOG" -w -t "$TIMEOUT" -s start </dev/null 7>&- 8>&- 9>&-; then
      show_log "$PG_LOG"
      die "postgres did not start"
    fi
  fi
  deadline=$(($(now) + TIMEOUT))
  until "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -d postgres -U "$PG_SUPERUSER" -t 2; do
    if (($(now) >= deadline)); then show_log "$PG_LOG"; die "postgres not accepting connections after ${TIMEOUT}s"; fi
    sleep 0.3
  done
  if [[ $("$bin/psql" -X -h 127.0.0.1 -p "$PG_PORT" -U "$PG_SUPERUSER" -d postgres -Atqc \
    "select 1 from pg_database where datname = '$PG_DB'") != 1 ]]; then
    log "creating database $PG_DB"
    "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_SUPERUSER" "$PG_DB"
  fi
  pg_ready || { show_log "$PG_LOG"; die "postgres: 'select 1' on $PG_DB failed"; }
  log "postgres ready (pid $(pg_pid), $PG_URL)"
}

pg_down() {
  local bin pid
  pid=$(pg_pid || true)
  [[ -n $pid ]] || return 0
  bin=$(pg_bin_dir)
  PG_USER=$(pg_os_user)
  log "stopping postgres (pid $pid)"
  if [[ -n $bin ]] && as_pg "$bin/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t "$STOP_TIMEOUT" -s stop 2>/dev/null; then
    return 0
  fi
  warn "postgres fast shutdown failed; trying immediate, then SIGKILL"
  [[ -n $bin ]] && as_pg "$bin/pg_ctl" -D "$PGDATA_DIR" -m immediate -w -t 10 -s stop 2>/dev/null && return 0
  kill -KILL "$pid" 2>/dev/null || true
  wait_pid_gone 10 "$pid" || true
}

# ---------------------------------------------------------------- redis

redis_pid() {
  local pid
  pid=$(read_pid "$REDIS_PID")
  if pid_alive "$pid" && cmdline_has "$pid" "redis-server"; then echo "$pid"; return 0; fi
  pid=$(scan_pids 0 "127.0.0.1:$REDIS_PORT" "redis-server*" | head -n1)
  [[ -n $pid ]] && { echo "$pid"; return 0; }
  return 1
}

redis_cli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

redis_ready() {
  command -v redis-cli >/dev/null 2>&1 || return 1
  local nonce
  [[ $(redis_cli ping 2>/dev/null) == PONG ]] || return 1
  nonce="ready-$$-$RANDOM"
  [[ $(redis_cli set __seqflow_ready "$nonce" EX 60 2>/dev/null) == OK ]] || return 1
  [[ $(redis_cli get __seqflow_ready 2>/dev/null) == "$nonce" ]] || return 1
  redis_cli del __seqflow_ready >/dev/null 2>&1 # leave no trace in the keyspace
}

redis_up() {
  local deadline
  mkdir -p "$REDIS_DIR"
  if ! redis_pid >/dev/null; then
    if port_open "$REDIS_PORT"; then die "redis: 127.0.0.1:$REDIS_PORT is already in use by another process"; fi
    log "starting redis on 127.0.0.1:$REDIS_PORT"
    started redis
    if ! redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes \
      --dir "$REDIS_DIR" --daemonize yes --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" \
      --save "" --appendonly yes --appendfsync everysec </dev/null 7>&- 8>&- 9>&-; then
      show_log "$REDIS_LOG"
      die "redis-server failed to start"
    fi
  fi
  deadline=$(($(now) + TIMEOUT))
  until redis_ready; do
    if (($(now) >= deadline)); then show_log "$REDIS_LOG"; die "redis not ready after ${TIMEOUT}s"; fi
    sleep 0.2
  done
  log "redis ready (pid $(redis_pid), 127.0.0.1:$REDIS_PORT)"
}

redis_down() {
  local pid
  pid=$(redis_pid || true)
  [[ -n $pid ]] || return 0
  log "stopping redis (pid $pid)"
  redis_cli shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
  if ! wait_pid_gone "$STOP_TIMEOUT" "$pid"; then
    warn "redis did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_pid_gone 10 "$pid" || true
  fi
  rm -f "$REDIS_PID"
}

redis_restart() { # [--wipe]
  case ${1:-} in "" | --wipe) ;; *) die "usage: restart-redis [--wipe]" ;; esac
  redis_down
  if [[ ${1:-} == --wipe ]]; then
    log "wiping redis data in $REDIS_DIR"
    rm -rf "$REDIS_DIR/appendonlydir" "$REDIS_DIR"/*.aof "$REDIS_DIR"/*.rdb
  fi
  redis_up
}

# ---------------------------------------------------------------- peer keys

# The push transport's key ring (internal/peerauth): every service refuses
# to start without one. Made once, kept across `up`s (a new ring would lock
# out services still running with the old one; docs/security.md says
# how to rotate it).
PEER_KEYS=$DATA/peer-keys
new_peer_key() { printf 'local-%s:%s\n' "$1" "$(head -c 32 /dev/urandom | base64 | tr -d '\n')"; }
ensure_peer_keys() {
  [[ -s $PEER_KEYS ]] && return
  (umask 077 && new_peer_key "$(date +%s)" >"$PEER_KEYS.tmp.$$") && mv -f "$PEER_KEYS.tmp.$$" "$PEER_KEYS"
  log "made the peer key ring $PEER_KEYS"
}

# ---------------------------------------------------------------- commands

up_single() {
  local t0 deadline
  t0=$(now)
  ensure_packages stack
  mkdir -p "$DATA"
  write_env_file "$PORTS_FILE" "SEQFLOW_PG_PORT=$PG_PORT" "SEQFLOW_REDIS_PORT=$REDIS_PORT" \
    "SEQFLOW_KAFKA_PORT=$K1_PORT" "SEQFLOW_KAFKA_CONTROLLER_PORT=$K1_CTRL_PORT"
  with_lock build prepare_kafka
  # kafka first: it is the slowest to come up, postgres/redis start meanwhile
  kafka_node_launch single "${SEQFLOW_KAFKA_HEAP:--Xms1g -Xmx1g}"
  deadline=$(($(now) + TIMEOUT))
  pg_up
  redis_up
  kafka_node_wait_started single "$deadline"
  kafka_probe --bootstrap "127.0.0.1:$K1_PORT" --rf 1 --min-isr 1 --timeout "$TIMEOUT" --internal-segment-bytes "$INTERNAL_SEGMENT_BYTES" ||
    probe_fail "$DATA/kafka/single/kafka.log"
  admin_tokens
  ensure_peer_keys
  write_env_file "$DATA/local.env" \
    "SEQFLOW_PEER_KEYS_FILE=$PEER_KEYS" \
    "SEQFLOW_KAFKA_BROKERS=127.0.0.1:$K1_PORT" \
    "SEQFLOW_PG_URL=$PG_URL" \
    "SEQFLOW_REDIS_ADDR=127.0.0.1:$REDIS_PORT" \
    "SEQFLOW_KAFKA_BROKER_KIND=apache-kafka-$KAFKA_VERSION" \
    "SEQFLOW_ADMIN_TOKENS_FILE=$ADMIN_TOKENS"
  log "stack ready in $(($(now) - t0))s; env: $DATA/local.env"
}

kafka3_wait_ready() { # expect-brokers full-isr(yes|no)
  local expect=$1 full=$2 args=() logs=() n
  args=(--bootstrap "$K3_BROKERS" --rf 3 --min-isr 2 --timeout "$TIMEOUT" --expect-brokers "$expect"
    --internal-segment-bytes "$INTERNAL_SEGMENT_BYTES")
  [[ $full == yes ]] && args+=(--full-isr)
  for n in "${K3_NODES[@]}"; do logs+=("$DATA/kafka/$n/kafka.log"); done
  kafka_probe "${args[@]}" || probe_fail "${logs[@]}"
}

kafka3_check_layout() { # data formatted for another kafka3 layout (combined nodes) is wiped
  local have n
  have=$(cat "$DATA/kafka/k3.layout" 2>/dev/null || true)
  [[ $have == "$K3_LAYOUT" ]] && return 0
  [[ -e $DATA/kafka/k3.cluster.id || -d $DATA/kafka/k3-1 ]] || return 0
  for n in single-placeholder "${K3_NODES[@]}"; do
    [[ $n == single-placeholder ]] && continue
    kafka_node_pid "$n" >/dev/null && die "kafka3 runs with another layout; run '$0 down-kafka3' first"
  done
  log "kafka3: data of an older layout (${have:-combined broker+controller nodes}); wiping it for $K3_LAYOUT"
  rm -rf "$DATA/kafka/k3.cluster.id" "$DATA"/kafka/k3-[123] "$DATA"/kafka/k3c-[123]
}

up_kafka3() {
  local t0 deadline n
  t0=$(now)
  ensure_packages kafka
  with_lock build prepare_kafka
  # format (one JVM each) in parallel, then launch
  mkdir -p "$DATA/kafka"
  kafka3_check_layout
  kafka_cluster_id "$DATA/kafka/k3.cluster.id" >/dev/null
  local fpids=()
  for n in "${K3_NODES[@]}"; do
    if ! kafka_node_pid "$n" >/dev/null; then kafka_node_format "$n" & fpids+=($!); fi
  done
  for n in "${fpids[@]}"; do wait "$n" || die "kafka3: storage format failed"; done
  echo "$K3_LAYOUT" >"$DATA/kafka/k3.layout"
  for n in 1 2 3; do kafka_node_launch "k3c-$n" "${SEQFLOW_KAFKA3_CONTROLLER_HEAP:--Xms64m -Xmx256m}"; done
  for n in 1 2 3; do kafka_node_launch "k3-$n" "${SEQFLOW_KAFKA3_HEAP:--Xms256m -Xmx768m}"; done
  deadline=$(($(now) + TIMEOUT))
  for n in "${K3_NODES[@]}"; do kafka_node_wait_started "$n" "$deadline"; done
  kafka3_wait_ready 3 yes
  write_env_file "$DATA/kafka3.env" \
    "SEQFLOW_KAFKA3_BROKERS=$K3_BROKERS" \
    "SEQFLOW_KAFKA3_STACK=$REPO/infra/local/stack.sh"
  log "kafka3 ready in $(($(now) - t0))s; env: $DATA/kafka3.env"
}

node_arg() {
  [[ ${1:-} =~ ^[123]$ ]] || die "node number must be 1, 2 or 3 (got '${1:-}')"
  echo "k3-$1"
}

kill_kafka3_node() {
  local node pid
  node=$(node_arg "${1:-}")
  pid=$(kafka_node_pid "$node" || true)
  if [[ -z $pid ]]; then log "kafka $node is not running"; return 0; fi
  log "kill -9 kafka $node (pid $pid)"
  kill -KILL "$pid"
  wait_pid_gone 10 "$pid" || die "kafka $node (pid $pid) still alive after SIGKILL"
  rm -f "$(kafka_node_dir "$node")/kafka.pid"
}

start_kafka3_node() {
  local node running=0 n
  node=$(node_arg "${1:-}")
  [[ -f $LIBS/.stamp && -f $(kafka_node_dir "$node")/data/meta.properties ]] ||
    die "kafka3 was never started; run '$0 up-kafka3' first"
  with_lock build prepare_kafka
  kafka_node_launch "$node" "${SEQFLOW_KAFKA3_HEAP:--Xms256m -Xmx768m}"
  kafka_node_wait_started "$node" $(($(now) + TIMEOUT))
  for n in 1 2 3; do kafka_node_pid "k3-$n" >/dev/null && running=$((running + 1)); done
  if ((running == 3)); then kafka3_wait_ready 3 yes; else kafka3_wait_ready "$running" no; fi
}

down_all() {
  local pids=() n pid p left=()
  # send SIGTERM to every kafka broker at once (the kafka3 controllers only
  # after them: a broker's controlled shutdown needs them); stop postgres and
  # redis meanwhile
  for n in single k3-1 k3-2 k3-3; do
    pid=$(kafka_node_pid "$n" || true)
    [[ -n $pid ]] && pids+=("$pid")
  done
  ((${#pids[@]})) && { log "stopping kafka (pids ${pids[*]})"; kill -TERM "${pids[@]}" 2>/dev/null || true; }
  pg_down
  redis_down
  if ((${#pids[@]})); then stop_pids kafka "${pids[@]}"; fi
  kafka_nodes_stop k3c-1 k3c-2 k3c-3
  for n in single "${K3_NODES[@]}"; do rm -f "$(kafka_node_dir "$n")/kafka.pid"; done
  local ports=("$PG_PORT" "$REDIS_PORT" "$K1_PORT" "$K1_CTRL_PORT")
  # kafka3's ports are fixed: another checkout's cluster may hold them
  [[ -d $DATA/kafka/k3-1 ]] && ports+=("${K3_PORTS[@]}" "${K3_CTRL_PORTS[@]}")
  for p in "${ports[@]}"; do
    port_open "$p" && left+=("$p")
  done
  ((${#left[@]} == 0)) || die "still listening on 127.0.0.1 port(s) ${left[*]} (not started by this stack?)"
  log "stack down"
}

stop_parts() { # postgres | redis | kafka ...
  local part
  for part in "$@"; do
    case $part in postgres | redis | kafka) ;; *) die "stop: unknown part '$part' (postgres, redis, kafka)" ;; esac
  done
  for part in "$@"; do
    case $part in
      postgres) pg_down ;;
      redis) redis_down ;;
      kafka) kafka_nodes_stop single; rm -f "$(kafka_node_dir single)/kafka.pid" ;;
    esac
  done
}

status_line() { printf '%-10s %-8s %-8s %-48s %s\n' "$@"; }

status() {
  local pid ready n
  status_line COMPONENT STATE PID ADDRESS READY
  pid=$(pg_pid || true)
  ready=-; [[ -n $pid ]] && { pg_ready && ready=yes || ready=no; }
  status_line postgres "$([[ -n $pid ]] && echo running || echo stopped)" "${pid:--}" "127.0.0.1:$PG_PORT" "$ready"
  pid=$(redis_pid || true)
  ready=-; [[ -n $pid ]] && { redis_ready && ready=yes || ready=no; }
  status_line redis "$([[ -n $pid ]] && echo running || echo stopped)" "${pid:--}" "127.0.0.1:$REDIS_PORT" "$ready"
  pid=$(kafka_node_pid single || true)
  ready=-
  if [[ -n $pid ]]; then
    if [[ -d $PROBE_DIR ]] && kafka_probe --bootstrap "127.0.0.1:$K1_PORT" --timeout 15 --quiet 2>/dev/null; then ready=yes; else ready=no; fi
  fi
  status_line kafka "$([[ -n $pid ]] && echo running || echo stopped)" "${pid:--}" "127.0.0.1:$K1_PORT" "$ready"
  local any=0
  for n in 1 2 3; do
    pid=$(kafka_node_pid "k3-$n" || true)
    [[ -n $pid ]] && any=$((any + 1))
    status_line "kafka3-$n" "$([[ -n $pid ]] && echo running || echo stopped)" "${pid:--}" "127.0.0.1:${K3_PORTS[n - 1]}" "(see kafka3)"
  done
  for n in 1 2 3; do
    pid=$(kafka_node_pid "k3c-$n" || true)
    status_line "kafka3-c$n" "$([[ -n $pid ]] && echo running || echo stopped)" "${pid:--}" "127.0.0.1:${K3_CTRL_PORTS[n - 1]}" "(controller)"
  done
  ready=-
  if ((any > 0)); then
    if [[ -d $PROBE_DIR ]] && kafka_probe --bootstrap "$K3_BROKERS" --timeout 15 --quiet 2>/dev/null; then ready=yes; else ready=no; fi
  fi
  status_line kafka3 "$any/3 up" - "$K3_BROKERS" "$ready"
}

print_env() {
  local f=$DATA/local.env
  [[ ${1:-} == kafka3 ]] && f=$DATA/kafka3.env
  [[ -f $f ]] || die "$f does not exist; run '$0 $([[ $f == *kafka3* ]] && echo up-kafka3 || echo up)' first"
  cat "$f"
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    up) with_lock single up_single ;;
    down) down_all ;;
    status) status ;;
    stop) stop_parts "$@" ;;
    missing-packages)
      case ${1:-stack} in stack | test) missing_packages "${1:-stack}" ;; *) die "missing-packages: stack or test (got '$1')" ;; esac
      ;;
    kafka-jars) ensure_packages kafka; with_lock build prepare_kafka ;;
    packages)
      case ${1:-stack} in stack | test) ensure_packages "${1:-stack}" ;; *) die "packages: stack or test (got '$1')" ;; esac
      ;;
    env) print_env "$@" ;;
    admin-tokens) admin_tokens; echo "$ADMIN_TOKENS" ;;
    up-kafka3) with_lock kafka3 up_kafka3 ;;
    down-kafka3) # brokers first: their controlled shutdown needs the controllers
      kafka_nodes_stop k3-1 k3-2 k3-3
      kafka_nodes_stop k3c-1 k3c-2 k3c-3
      log "kafka3 down"
      ;;
    kill-kafka3-node) kill_kafka3_node "$@" ;;
    start-kafka3-node) with_lock kafka3 start_kafka3_node "$@" ;;
    restart-redis) with_lock single redis_restart "$@" ;;
    kafka-tool) kafka_tool "$@" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
