#!/usr/bin/env bash
# The fault cluster's network. Each Kafka node runs in a network namespace of its own, and every
# two of {host, node 1, node 2, node 3} are joined by a veth pair of their own, so that one link
# can be cut or slowed while the others carry on: walserver (on the host) cut off from one
# broker while the brokers still see each other, or one broker cut off from the other two while
# walserver still reaches it. Needs root (ip netns, tc); there is no netem here, so a cut is a
# token bucket too small for any packet (every packet dropped: no RST, no ICMP, as when a
# switch or a NAT entry dies) and a slow link is a token bucket at the given rate.
#
#   tests/kafka/network.sh up              create the namespaces and the links if missing, and
#                                          heal every link
#   tests/kafka/network.sh down            remove them
#   tests/kafka/network.sh address N       print node N's address (0: the host)
#   tests/kafka/network.sh namespace N     print node N's namespace (1, 2 or 3)
#   tests/kafka/network.sh cut A B         drop every packet between A and B (0: the host)
#   tests/kafka/network.sh slow A B RATE   carry at most RATE (tc's units, e.g. 2mbit) each way
#   tests/kafka/network.sh heal A B        restore the link between A and B
#
# The addresses are 10.231.0.10 + N: the host's on its loopback device, each node's on the
# loopback device of its namespace, each reached through its own link by a host route. The host
# also gets an unreachable route for 10.231.0.0/24 (kept after `down`), so that nothing sent to
# these addresses can ever leave the machine by its default route.
set -euo pipefail

readonly nodes=(0 1 2 3)
log() { echo "network.sh: $*" >&2; }

address() { echo "10.231.0.$((10 + $1))"; }
namespace() { echo "walserver-kafka-$1"; }

# Runs `ip` in node N's namespace (the host's for 0).
ip_in() {
  local n=$1
  shift
  if ((n == 0)); then ip "$@"; else ip -n "$(namespace "$n")" "$@"; fi
}
tc_in() {
  local n=$1
  shift
  if ((n == 0)); then tc "$@"; else ip netns exec "$(namespace "$n")" tc "$@"; fi
}

# The device in A's namespace of the link between A and B.
device() {
  local a=$1 b=$2
  if ((a < b)); then echo "walk-$a$b-$a"; else echo "walk-$b$a-$a"; fi
}

node_arg() {
  [[ "$1" =~ ^[0-3]$ ]] || { log "a node is 0 (the host), 1, 2 or 3, not '$1'"; exit 2; }
}

up() {
  local n a b
  ip route replace unreachable 10.231.0.0/24
  ip addr replace "$(address 0)/32" dev lo
  for n in 1 2 3; do
    if ! ip netns list | grep -qw "$(namespace "$n")"; then
      ip netns add "$(namespace "$n")"
      ip_in "$n" link set lo up
      ip_in "$n" addr add "$(address "$n")/32" dev lo
    fi
  done
  for a in "${nodes[@]}"; do
    for b in "${nodes[@]}"; do
      ((a < b)) || continue
      if ! ip_in "$a" link show "$(device "$a" "$b")" >/dev/null 2>&1; then
        ip link add "$(device "$a" "$b")" type veth peer name "$(device "$b" "$a")"
        ((a == 0)) || ip link set "$(device "$a" "$b")" netns "$(namespace "$a")"
        ip link set "$(device "$b" "$a")" netns "$(namespace "$b")"
        for n in "$a" "$b"; do
          local other=$((n == a ? b : a))
          ip_in "$n" link set "$(device "$n" "$other")" up
          ip_in "$n" route replace "$(address "$other")/32" dev "$(device "$n" "$other")" \
            src "$(address "$n")"
        done
      fi
      heal "$a" "$b"
    done
  done
}

down() {
  local n
  for n in 1 2 3; do
    ip netns del "$(namespace "$n")" 2>/dev/null || true  # takes the links with it
  done
  ip addr del "$(address 0)/32" dev lo 2>/dev/null || true
}

# set_link A B QDISC...: the same queueing discipline on both ends of the link.
set_link() {
  local a=$1 b=$2 n
  shift 2
  for n in "$a" "$b"; do
    local other=$((n == a ? b : a))
    tc_in "$n" qdisc replace dev "$(device "$n" "$other")" root "$@"
  done
}

heal() {
  local a=$1 b=$2 n
  for n in "$a" "$b"; do
    local other=$((n == a ? b : a))
    tc_in "$n" qdisc del dev "$(device "$n" "$other")" root 2>/dev/null || true
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
    case "$cmd" in
      # A bucket of 10 bytes holds no packet: tbf drops what cannot ever fit.
      cut) set_link "$2" "$3" tbf rate 1kbit burst 10 limit 1 ;;
      heal) heal "$2" "$3" ;;
      slow)
        [[ -n "${4:-}" ]] || { log "usage: $0 slow A B RATE"; exit 2; }
        set_link "$2" "$3" tbf rate "$4" burst 32kb latency 2s
        ;;
    esac
    ;;
  *)
    log "usage: $0 up | down | address N | namespace N | cut A B | slow A B RATE | heal A B"
    exit 2
    ;;
esac
