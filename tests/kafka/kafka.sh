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
#   tests/kafka/kafka.sh sasl-bootstrap DIR   print HOST:PORT of its SASL_PLAINTEXT listener
#                                     (mechanism PLAIN, user walserver, password walserver-secret)
#   tests/kafka/kafka.sh topic-config HOST:PORT TOPIC KEY=VALUE[,KEY=VALUE...]
#                                     change a topic's settings as an operator would with
#                                     kafka-configs.sh (e.g. retention.ms=1000)
#
# A cluster of three combined broker+controller nodes (replication factor 3, min ISR 2), each a
# separate process with its own ports and data in DIR/node-<id>, sharing one voter list:
#   tests/kafka/kafka.sh cluster-start DIR        start nodes 1, 2, 3 (reusing DIR's ports/data)
#   tests/kafka/kafka.sh cluster-stop DIR         stop all nodes
#   tests/kafka/kafka.sh node-kill DIR ID         kill -9 node ID
#   tests/kafka/kafka.sh node-stop DIR ID         stop node ID cleanly
#   tests/kafka/kafka.sh node-start DIR ID        start node ID again
#   tests/kafka/kafka.sh bootstrap DIR            print the nodes' HOST:PORT list
# With WAL_KAFKA_NETNS=1 at its first cluster-start, each node runs in a network namespace of its
# own behind links that tests/kafka/network.sh cuts, slows and heals (root only; one such cluster
# per machine, on fixed addresses); cluster-start then heals every link and cluster-stop removes
# the namespaces.
#
# The broker's version is $WAL_KAFKA_VERSION (default: kafka.version in pom.xml, the suite's);
# test.sh's compatibility run sets it (docs/OPERATIONS.md lists the versions tested). The jars are cached in
# $WAL_KAFKA_CACHE (default ~/.cache/walserver/kafka-<version>).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kafka_version=${WAL_KAFKA_VERSION:-$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")}
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
    -Dkafka.version="$kafka_version" -DoutputDirectory="$cache/libs" -Dmdep.overWriteIfNewer=true)
  touch "$cache/.complete"
}

# A free port below the kernel's ephemeral ones: a broker stopped and started again on its ports
# (the outage tests) must not find one taken meanwhile by an outgoing connection, or by a client
# retrying to connect to it that the kernel connected to itself. The lower half of the 12,000
# ports below them: the C++ tests' FreePort takes the upper half for the walservers they start,
# which once took a stopped broker's SASL port, and the broker exited on its restart.
free_port() {
  python3 -c '
import random, socket
ephemeral = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
start = max(1025, ephemeral - 12000)
end = start + (ephemeral - start) // 2
if end - start < 500:
    raise SystemExit(f"kafka.sh: too few ports below the ephemeral ones "
                     f"(net.ipv4.ip_local_port_range starts at {ephemeral})")
for _ in range(1000):
    port = random.randrange(start, end)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("kafka.sh: no free port below the ephemeral ones")
'
}

java_run() {
  java -Xms128m -Xmx512m -XX:+UseSerialGC -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cache/libs/*" "$@"
}

# write_config NODE_ID PORT VOTERS REPLICATION [SASL_PORT]: server.properties and
# log4j2.properties in $dir, listening on $host. With SASL_PORT, a SASL_PLAINTEXT listener
# (PLAIN) too.
host=127.0.0.1
write_config() {
  local node=$1 port=$2 voters=$3 rf=$4 sasl_port=${5:-} cport listeners advertised map
  cport=${voters#*"$node"@"$host":}
  cport=${cport%%,*}
  listeners=PLAINTEXT://$host:$port,CONTROLLER://$host:$cport
  advertised=PLAINTEXT://$host:$port
  map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
  if [[ -n "$sasl_port" ]]; then
    listeners+=",SASL_PLAINTEXT://$host:$sasl_port"
    advertised+=",SASL_PLAINTEXT://$host:$sasl_port"
    map+=",SASL_PLAINTEXT:SASL_PLAINTEXT"
  fi
  mkdir -p "$dir/data"
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$(((rf + 1) / 2))
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=$rf
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
# Retention set on a topic by hand takes effect within a second (tests; the default is 5 min).
log.retention.check.interval.ms=1000
unclean.leader.election.enable=false
PROPS
  if [[ -n "$sasl_port" ]]; then
    cat >>"$dir/server.properties" <<PROPS
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_walserver="walserver-secret";
PROPS
    echo "$host:$sasl_port" >"$dir/sasl_bootstrap"
  fi
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
  echo "$host:$port" >"$dir/bootstrap"
}

format() {
  java_run kafka.tools.StorageTool format -t "$1" -c "$dir/server.properties" -g \
    >"$dir/format.log" 2>&1
}

# True when something accepts connections at HOST:PORT; at most 2 s (a cut link drops the SYN).
answers() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1##*:}"' _ "$1" 2>/dev/null
}

all_answer() {
  local listener
  for listener in "$@"; do answers "$listener" || return 1; done
}

# Starts the node in $dir in the background, in its network namespace if it has one.
launch() {
  local netns=()
  if [[ -f "$dir/netns" ]]; then
    # The namespaces' addresses are the same for every such cluster: one at a time per machine.
    local bootstrap
    bootstrap=$(cat "$dir/bootstrap")
    if answers "$bootstrap"; then
      log "another cluster's broker already serves $bootstrap; stop it first (one cluster in" \
        "network namespaces per machine)"
      return 1
    fi
    netns=(ip netns exec "$(cat "$dir/netns")")
  fi
  setsid "${netns[@]}" java -Xms128m -Xmx512m -XX:+UseSerialGC \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cache/libs/*" kafka.Kafka "$dir/server.properties" >>"$dir/stdout.log" 2>&1 &
  echo $! >"$dir/pid"
}

# Waits until the node in $dir serves: every listener of its open (they open only then, one
# after another; a broker that cannot bind one exits after the others opened).
wait_ready() {
  local bootstrap listeners
  bootstrap=$(cat "$dir/bootstrap")
  listeners=("$bootstrap")
  [[ ! -f "$dir/sasl_bootstrap" ]] || listeners+=("$(cat "$dir/sasl_bootstrap")")
  for _ in $(seq 1 240); do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      log "broker exited during start-up; see $dir/stdout.log and $dir/broker.log"
      tail -n 20 "$dir/stdout.log" "$dir/broker.log" >&2 || true
      return 1
    fi
    if all_answer "${listeners[@]}"; then
      log "broker ready at $bootstrap (Kafka $kafka_version, dir $dir)"
      return 0
    fi
    sleep 0.5
  done
  log "broker not ready after 120 s"
  return 1
}

# Prints the pid in $dir/pid if that process is still this folder's broker: a pid file that
# outlived a crash or a reboot (run.sh's state folder does) may name another process by now.
broker_pid() {
  local pid
  [[ -f "$dir/pid" ]] || return 1
  pid=$(cat "$dir/pid")
  kill -0 "$pid" 2>/dev/null || return 1
  grep -qaF -- "$(cd "$dir" && pwd)/server.properties" "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

running() { broker_pid >/dev/null; }

start() {
  fetch
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if running; then
    log "already running in $dir"
    return 0
  fi
  # Formatted only once (the format writes data/meta.properties); a start interrupted before
  # that (run.sh's state folder outlives it) begins again with new ports.
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    local port cport sport
    port=$(free_port)
    cport=$(free_port)
    sport=$(free_port)
    while [[ "$cport" == "$port" ]]; do cport=$(free_port); done
    while [[ "$sport" == "$port" || "$sport" == "$cport" ]]; do sport=$(free_port); done
    write_config 1 "$port" "1@127.0.0.1:$cport" 1 "$sport"
    format "$(java_run kafka.tools.StorageTool random-uuid)"
  fi
  launch
  wait_ready
}

# The network namespaces have fixed names and addresses: one cluster owns them at a time, named
# in $network_owner, until its cluster-stop. An owner whose folder is gone was removed without
# a stop, and its claim lapses.
network_owner=/run/walserver-kafka-network.owner
claim_network() {
  local owner
  owner=$(cat "$network_owner" 2>/dev/null || true)
  if [[ -n "$owner" && "$owner" != "$cluster" && -d "$owner" ]]; then
    log "the network namespaces belong to the cluster in $owner; stop it first" \
      "(kafka.sh cluster-stop $owner)"
    return 1
  fi
  echo "$cluster" >"$network_owner"
}

cluster_start() {
  fetch
  mkdir -p "$cluster"
  cluster=$(cd "$cluster" && pwd)
  if [[ ! -f "$cluster/bootstrap" && "${WAL_KAFKA_NETNS:-}" == 1 ]]; then
    touch "$cluster/netns"
  fi
  if [[ -f "$cluster/netns" ]]; then
    claim_network
    "$here/network.sh" up
  fi
  if [[ ! -f "$cluster/bootstrap" ]]; then
    local ports=() hosts=() voters="" id uuid
    if [[ -f "$cluster/netns" ]]; then
      # A namespace of its own per node: the same two ports on three addresses.
      for id in 1 2 3; do hosts+=("$("$here/network.sh" address "$id")"); done
      ports=(9092 9092 9092 9093 9093 9093)
    else
      for _ in 1 2 3; do hosts+=(127.0.0.1); done
      for _ in 1 2 3 4 5 6; do ports+=("$(free_port)"); done
      if (($(printf '%s\n' "${ports[@]}" | sort -u | wc -l) != 6)); then
        log "could not find 6 distinct free ports; try again"
        return 1
      fi
    fi
    for id in 1 2 3; do voters+="${voters:+,}$id@${hosts[id - 1]}:${ports[id + 2]}"; done
    uuid=$(dir=$cluster java_run kafka.tools.StorageTool random-uuid)
    for id in 1 2 3; do
      dir=$cluster/node-$id
      host=${hosts[id - 1]}
      write_config "$id" "${ports[id - 1]}" "$voters" 3
      if [[ -f "$cluster/netns" ]]; then "$here/network.sh" namespace "$id" >"$dir/netns"; fi
      format "$uuid"
    done
    (for id in 1 2 3; do cat "$cluster/node-$id/bootstrap"; done) | paste -sd, >"$cluster/bootstrap"
  fi
  # All at once: a node opens its listener only once a quorum of controllers is up.
  for id in 1 2 3; do
    dir=$cluster/node-$id
    running || launch
  done
  for id in 1 2 3; do
    dir=$cluster/node-$id
    wait_ready
  done
}

node() {
  [[ "$node_id" =~ ^[123]$ ]] || { log "node id must be 1, 2 or 3"; exit 2; }
  dir=$(cd "$cluster" && pwd)/node-$node_id
}

stop() {
  local signal=$1 pid
  if pid=$(broker_pid); then
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

cluster_stop() {
  local id
  cluster=$(cd "$cluster" && pwd)
  for id in 1 2 3; do
    dir=$cluster/node-$id
    stop TERM &
  done
  wait
  if [[ -f "$cluster/netns" && "$(cat "$network_owner" 2>/dev/null)" == "$cluster" ]]; then
    "$here/network.sh" down
    rm -f "$network_owner"
  fi
}

cmd=${1:-}
dir=${2:-}
cluster=${2:-}
node_id=${3:-}
need_dir() { [[ -n "$dir" ]] || { log "usage: $0 $cmd DIR${1:+ ID}"; exit 2; }; }
case "$cmd" in
  fetch) fetch ;;
  start) need_dir; start ;;
  stop) need_dir; stop TERM ;;
  kill) need_dir; stop KILL ;;
  bootstrap) need_dir; cat "$dir/bootstrap" ;;
  sasl-bootstrap) need_dir; cat "$dir/sasl_bootstrap" ;;
  topic-config)
    [[ $# -eq 4 ]] || { log "usage: $0 topic-config HOST:PORT TOPIC KEY=VALUE[,KEY=VALUE...]"; exit 2; }
    java -Xmx256m -XX:+UseSerialGC -cp "$cache/libs/*" kafka.admin.ConfigCommand \
      --bootstrap-server "$2" --alter --entity-type topics --entity-name "$3" --add-config "$4"
    ;;
  cluster-start) need_dir; cluster_start ;;
  cluster-stop) need_dir; cluster_stop ;;
  node-kill) need_dir id; node; stop KILL ;;
  node-stop) need_dir id; node; stop TERM ;;
  node-start) need_dir id; node; running || launch; wait_ready ;;
  *)
    log "usage: $0 fetch | start|stop|kill|bootstrap DIR | topic-config HOST:PORT TOPIC SETTINGS |"
    log "       cluster-start|cluster-stop DIR |"
    log "       node-kill|node-stop|node-start DIR ID"
    exit 2
    ;;
esac
