#!/usr/bin/env bash
# The fault cluster's network. Each Kafka node runs in a network namespace of its own, and every
# two of {host, node 1, node 2, node 3} are joined by a link of their own, so that one link can
# be cut or slowed while the others carry on: walserver (on the host) cut off from one broker
# while the brokers still see each other, or one broker cut off from the other two while
# walserver still reaches it. A link is a namespace in the middle that forwards between two veth
# pairs (answering ARP for the far end), and the link's faults live there: packets vanish on
# the way, and neither end's own stack sees a failed send, as when a switch or a NAT entry dies
# (a drop at a sender's own interface would make its TCP retry every 500 ms instead of backing
# off). There is no netem or tc drop action here, so a cut is a token bucket too small for any
# packet and a slow link a token bucket at the given rate. Needs root (ip netns, tc, sysctl).
#
#   tests/kafka/network.sh up              create the namespaces and links, or repair them, and
#                                          heal every link
#   tests/kafka/network.sh down            stop what runs in them and remove them
#   tests/kafka/network.sh address N       print node N's address (0: the host)
#   tests/kafka/network.sh namespace N     print node N's namespace (1, 2 or 3)
#   tests/kafka/network.sh cut A B         drop every packet between A and B (0: the host)
#   tests/kafka/network.sh slow A B RATE   carry at most RATE (tc's units, e.g. 2mbit) each way
#   tests/kafka/network.sh heal A B        restore the link between A and B
#
# The addresses are 10.231.0.10 + N: the host's on its loopback device, each node's on the
# loopback device of its namespace, each reached through its own link by a host route. No
# namespace has a default route, and the host gets an unreachable route for 10.231.0.0/24 (kept
# after `down`), so that nothing sent to these addresses can leave the machine.
set -euo pipefail

readonly nodes=(0 1 2 3)
log() { echo "network.sh: $*" >&2; }

address() { echo "10.231.0.$((10 + $1))"; }
namespace() { echo "walserver-kafka-$1"; }
# The namespace in the middle of the link between A and B (A < B).
middle() { echo "walserver-link-$1$2"; }

# Runs `ip` in namespace NS (the host's for an empty NS).
ip_in() {
  local ns=$1
  shift
  if [[ -z "$ns" ]]; then ip "$@"; else ip -n "$ns" "$@"; fi
}
# Node N's namespace, empty for the host.
node_ns() { if (($1 == 0)); then echo ""; else namespace "$1"; fi; }

# Devices of the link between A and B (A < B): at end X (A or B) "walk-AB-X", and facing X in
# the middle "walk-AB-mX".
end_device() { echo "walk-$1$2-$3"; }
middle_device() { echo "walk-$1$2-m$3"; }

node_arg() {
  [[ "$1" =~ ^[0-3]$ ]] || { log "a node is 0 (the host), 1, 2 or 3, not '$1'"; exit 2; }
}

ensure_namespace() {
  # Not `ip netns list | grep -q`: under pipefail, grep leaving early fails the pipeline.
  [[ -e "/run/netns/$1" ]] || ip netns add "$1"
  ip -n "$1" link set lo up
}

# One end X of the link between A and B: a veth pair from X's namespace to the middle, and X's
# route to the far end's address through it. Made again when either half is missing.
link_end() {
  local a=$1 b=$2 x=$3 far=$4 mid
  mid=$(middle "$a" "$b")
  local dev mdev ns
  dev=$(end_device "$a" "$b" "$x")
  mdev=$(middle_device "$a" "$b" "$x")
  ns=$(node_ns "$x")
  if ! ip_in "$ns" link show "$dev" >/dev/null 2>&1 || ! ip -n "$mid" link show "$mdev" >/dev/null 2>&1; then
    ip_in "$ns" link del "$dev" 2>/dev/null || true
    ip -n "$mid" link del "$mdev" 2>/dev/null || true
    ip link del "$dev" 2>/dev/null || true
    ip link del "$mdev" 2>/dev/null || true
    ip link add "$dev" type veth peer name "$mdev"
    [[ -z "$ns" ]] || ip link set "$dev" netns "$ns"
    ip link set "$mdev" netns "$mid"
  fi
  ip_in "$ns" link set "$dev" up
  ip -n "$mid" link set "$mdev" up
  ip_in "$ns" route replace "$(address "$far")/32" dev "$dev" src "$(address "$x")"
  ip -n "$mid" route replace "$(address "$x")/32" dev "$mdev"
}

up() {
  local n a b mid routed
  if ((EUID != 0)) || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    log "the fault cluster's network needs root and iproute2 (ip, tc): run the fault tests as" \
      "root (scripts/setup.sh --test installs iproute2)"
    exit 1
  fi
  # The range must be this script's alone: never take over a network the host really uses.
  routed=$(ip route show 10.231.0.0/24 | grep -v '^unreachable' || true)
  if [[ -n "$routed" ]] || ip -4 addr show | grep 'inet 10\.231\.0\.' | grep -vq ' lo$'; then
    log "10.231.0.0/24 is in use on this host ($routed); the fault cluster needs it for itself"
    exit 1
  fi
  ip route replace unreachable 10.231.0.0/24
  ip addr replace "$(address 0)/32" dev lo
  for n in 1 2 3; do
    ensure_namespace "$(namespace "$n")"
    ip -n "$(namespace "$n")" addr replace "$(address "$n")/32" dev lo
  done
  for a in "${nodes[@]}"; do
    for b in "${nodes[@]}"; do
      ((a < b)) || continue
      mid=$(middle "$a" "$b")
      ensure_namespace "$mid"
      # Forward between the two ends, answer ARP for the far one, and take packets from
      # addresses routed out of another interface.
      ip netns exec "$mid" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.proxy_arp=1 \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
      link_end "$a" "$b" "$a" "$b"
      link_end "$a" "$b" "$b" "$a"
      heal "$a" "$b"
    done
  done
}

down() {
  local ns a b pids
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^walserver-(kafka-[123]|link-[0-3][0-3])$'); do
    # A broker that outlived its test run would keep the namespace alive without its name.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z "$pids" ]] || kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  for a in "${nodes[@]}"; do
    for b in "${nodes[@]}"; do
      ((a < b)) || continue
      ip link del "$(end_device "$a" "$b" 0)" 2>/dev/null || true
    done
  done
  ip addr del "$(address 0)/32" dev lo 2>/dev/null || true
}

# set_link A B QDISC...: the queueing discipline on both of the middle's interfaces, so that it
# holds both ways.
set_link() {
  local a=$1 b=$2 x
  shift 2
  for x in "$a" "$b"; do
    ip netns exec "$(middle "$a" "$b")" tc qdisc replace dev "$(middle_device "$a" "$b" "$x")" root "$@"
  done
}

heal() {
  local a=$1 b=$2 x
  for x in "$a" "$b"; do
    ip netns exec "$(middle "$a" "$b")" tc qdisc del dev "$(middle_device "$a" "$b" "$x")" root \
      2>/dev/null || true
  done
}

cmd=${1:-}
case "$cmd" in
  up) up ;;
  down) down ;;
  address) node_arg "${2:-}"; address "$2" ;;
  namespace) node_arg "${2:-}"; namespace "$2" ;;
  cut | heal | slow)
    node_arg "${2:-}"
    node_arg "${3:-}"
    [[ "$2" != "$3" ]] || { log "a link joins two different nodes"; exit 2; }
    lo=$(($2 < $3 ? $2 : $3)) hi=$(($2 < $3 ? $3 : $2))
    case "$cmd" in
      # A bucket of 10 bytes holds no packet: tbf drops what cannot ever fit.
      cut) set_link "$lo" "$hi" tbf rate 1kbit burst 10 limit 1 ;;
      heal) heal "$lo" "$hi" ;;
      slow)
        [[ -n "${4:-}" ]] || { log "usage: $0 slow A B RATE"; exit 2; }
        set_link "$lo" "$hi" tbf rate "$4" burst 32kb latency 2s
        ;;
    esac
    ;;
  *)
    log "usage: $0 up | down | address N | namespace N | cut A B | slow A B RATE | heal A B"
    exit 2
    ;;
esac
