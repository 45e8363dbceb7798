#!/usr/bin/env bash
# Runs a real single-node Kafka (KRaft, combined broker+controller) assembled from Maven Central
# jars, for the integration tests. No Docker, no tarball.
#
#   tests/kafka/kafka.sh fetch        download the broker jars into the cache (idempotent)
#   tests/kafka/kafka.sh start DIR    start a broker whose data, ports and logs live in DIR;
#                                     a second start of the same DIR reuses its ports and data
#   tests/kafka/kafka.sh stop DIR     stop it cleanly (SIGTERM, then SIGKILL after 30 s)
#   tests/kafka/kafka.sh kill DIR     kill -9, as a crash would
#   tests/kafka/kafka.sh bootstrap DIR   print HOST:PORT of the broker
#
# The jars are cached in $WAL_KAFKA_CACHE (default ~/.cache/walserver/kafka-<version>).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")
cache=${WAL_KAFKA_CACHE:-$HOME/.cache/walserver/kafka-$kafka_version}

log() { echo "kafka.sh: $*" >&2; }

ensure_tools() {
  local missing=()
  command -v java >/dev/null || missing+=(default-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  command -v python3 >/dev/null || missing+=(python3)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

fetch() {
  ensure_tools
  if [[ -f "$cache/.complete" ]]; then return 0; fi
  log "fetching Kafka $kafka_version jars into $cache"
  mkdir -p "$cache/libs"
  (cd "$here" && mvn -q -B -Dstyle.color=never -f pom.xml dependency:copy-dependencies \
    -DoutputDirectory="$cache/libs" -Dmdep.overWriteIfNewer=true)
  touch "$cache/.complete"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

java_run() {
  java -Xms128m -Xmx512m -XX:+UseSerialGC -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cache/libs/*" "$@"
}

write_config() {
  local port cport
  port=$(free_port)
  cport=$(free_port)
  while [[ "$cport" == "$port" ]]; do cport=$(free_port); done
  mkdir -p "$dir/data"
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=4194304
message.max.bytes=4194304
replica.fetch.max.bytes=4194304
auto.create.topics.enable=false
PROPS
  cat >"$dir/log4j2.properties" <<PROPS
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $dir/broker.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
PROPS
  echo "127.0.0.1:$port" >"$dir/bootstrap"
}

start() {
  fetch
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [[ -f "$dir/pid" ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    log "already running in $dir"
    return 0
  fi
  if [[ ! -f "$dir/server.properties" ]]; then
    write_config
    java_run kafka.tools.StorageTool format -t "$(java_run kafka.tools.StorageTool random-uuid)" \
      -c "$dir/server.properties" -g >"$dir/format.log" 2>&1
  fi
  local bootstrap host port
  bootstrap=$(cat "$dir/bootstrap")
  host=${bootstrap%:*}
  port=${bootstrap##*:}
  setsid java -Xms128m -Xmx512m -XX:+UseSerialGC \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cache/libs/*" kafka.Kafka "$dir/server.properties" >>"$dir/stdout.log" 2>&1 &
  echo $! >"$dir/pid"
  # The PLAINTEXT listener opens only once the broker is ready to serve.
  for _ in $(seq 1 240); do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      log "broker exited during start-up; see $dir/stdout.log and $dir/broker.log"
      tail -n 20 "$dir/stdout.log" "$dir/broker.log" >&2 || true
      return 1
    fi
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
      log "broker ready at $bootstrap (dir $dir)"
      return 0
    fi
    sleep 0.5
  done
  log "broker not ready after 120 s"
  return 1
}

stop() {
  local signal=$1 pid
  [[ -f "$dir/pid" ]] || return 0
  pid=$(cat "$dir/pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "-$signal" "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "broker $pid ignored SIG$signal for 30 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
    fi
  fi
  rm -f "$dir/pid"
}

cmd=${1:-}
dir=${2:-}
case "$cmd" in
  fetch) fetch ;;
  start) [[ -n "$dir" ]] || { log "usage: $0 start DIR"; exit 2; }; start ;;
  stop) [[ -n "$dir" ]] || { log "usage: $0 stop DIR"; exit 2; }; stop TERM ;;
  kill) [[ -n "$dir" ]] || { log "usage: $0 kill DIR"; exit 2; }; stop KILL ;;
  bootstrap) cat "$dir/bootstrap" ;;
  *) log "usage: $0 fetch | start DIR | stop DIR | kill DIR | bootstrap DIR"; exit 2 ;;
esac
