#!/usr/bin/env bash
# Simulated nodes on one machine (for multi-node tests and benchmarks). Each node is
#   - a network namespace whose only interface, eth0, is a veth into a bridge this script creates,
#     with an address of a private /24 (no default route, no NAT, no address on the host's side:
#     nodes reach each other and nothing else; IPv6 is off on every interface involved);
#   - a `tc` token-bucket rate limit on both directions of that link: its network card (egress of
#     the node's eth0 = what it sends, egress of the bridge port = what it receives);
#   - its own /dev/shm: a tmpfs that `exec` binds over /dev/shm in a private mount namespace for
#     every command it runs there, so all processes of one node share it and no other node (nor the
#     host) sees it.
#
#   scripts/nodes.sh up NAME:RATE [NAME:RATE ...]   create the nodes, e.g. up gpu0:1gbit cpu0:200mbit
#                                                   (RATE: <integer>kbit|mbit|gbit, bits per second)
#   scripts/nodes.sh exec NODE CMD [ARGS ...]       run CMD inside NODE (its network, its /dev/shm)
#   scripts/nodes.sh list                           one line per node: NAME ADDRESS RATE NETNS PORT
#                                                   (PORT: its veth on the bridge, on the host)
#   scripts/nodes.sh down                           stop every process in the nodes and remove them
#                                                   (namespaces, bridge, veths, tmpfs); idempotent
#   scripts/nodes.sh cut NODE                       a network partition: the bridge drops every frame
#                                                   to and from NODE (its port disabled), silently, as
#                                                   a pulled cable or a dead switch port: no reset, no
#                                                   error in the node, connections time out; processes
#                                                   and /dev/shm stay
#   scripts/nodes.sh heal NODE                      end the partition (the port forwards again); open
#                                                   connections that did not time out carry on
#
# Environment: STOKER_NODES_PREFIX (default stk; 1-6 of [a-z0-9], starting with a letter) names
# every object of one set of nodes (netns <prefix>-<NAME>, bridge <prefix>-br, veths <prefix>-h<i>,
# state in /run/stoker-nodes/<prefix>), so sets with different prefixes coexist;
# STOKER_NODES_SUBNET (default 10.77.0: node i gets .i+1/24); STOKER_NODES_SHM_SIZE (tmpfs size
# per node, default 1g). Needs root (network namespaces, mounts). A failed `up` removes what it made.
set -euo pipefail
PREFIX=${STOKER_NODES_PREFIX:-stk}
SUBNET=${STOKER_NODES_SUBNET:-10.77.0}
SHM_SIZE=${STOKER_NODES_SHM_SIZE:-1g}
STATE=/run/stoker-nodes/$PREFIX
BRIDGE=$PREFIX-br

log() { printf '\033[1m[nodes]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root (it creates network namespaces, a bridge and mounts); run it with sudo or as root in CI"
  local tool
  for tool in ip tc bridge unshare mount umount sysctl; do
    command -v "$tool" >/dev/null || die "$tool is needed (iproute2, util-linux, procps)"
  done
}

check_names() {
  [[ $PREFIX =~ ^[a-z][a-z0-9]{0,5}$ ]] || die "STOKER_NODES_PREFIX '$PREFIX': 1-6 of [a-z0-9], starting with a letter"
  [[ $SUBNET =~ ^(25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})(\.(25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})){2}$ ]] \
    || die "STOKER_NODES_SUBNET '$SUBNET': the first three octets of a /24, e.g. 10.77.0"
}

# Bits per second of a RATE argument (kbit/mbit/gbit are decimal, as in tc).
rate_bps() {
  local n=${1%[kmg]bit} unit=${1: -4}
  case $unit in kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;; gbit) echo $((n * 1000000000)) ;; esac
}

# A token bucket of RATE on DEV (run through "$@" as the tc command: tc, or tc -n NETNS).
# The bucket holds 10 ms of traffic, at least 64 KiB (one GSO segment); packets wait at most 50 ms.
rate_limit() {
  local dev=$1 rate=$2; shift 2
  local burst=$(($(rate_bps "$rate") / 8 / 100))
  [ "$burst" -ge 65536 ] || burst=65536
  "$@" qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
}

disable_ipv6() {  # disable_ipv6 IFACE [ip netns exec NETNS]
  local dev=$1; shift
  [ -e /proc/sys/net/ipv6 ] || return 0
  "$@" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1"
}

cmd_up() {
  [ $# -ge 1 ] || die "usage: nodes.sh up NAME:RATE [NAME:RATE ...]"
  [ ! -e "$STATE" ] || die "nodes with prefix '$PREFIX' are already up ($STATE); run: nodes.sh down"
  local spec names=() rates=() seen=" "
  for spec in "$@"; do
    [[ $spec =~ ^([a-z][a-z0-9-]{0,30}):([1-9][0-9]{0,6}(kbit|mbit|gbit))$ ]] \
      || die "bad node '$spec': NAME:RATE, NAME of [a-z0-9-] starting with a letter, RATE like 100mbit, 1gbit, 500kbit"
    [[ $seen != *" ${BASH_REMATCH[1]} "* ]] || die "node '${BASH_REMATCH[1]}' given twice"
    seen+="${BASH_REMATCH[1]} "
    names+=("${BASH_REMATCH[1]}"); rates+=("${BASH_REMATCH[2]}")
  done
  [ ${#names[@]} -le 99 ] || die "at most 99 nodes"
  if ip link show "$BRIDGE" >/dev/null 2>&1 || ip netns list | grep -q "^$PREFIX-"; then
    die "leftovers of prefix '$PREFIX' exist (bridge or namespaces); run: nodes.sh down"
  fi

  UP_DONE=0
  trap 'if [ "$UP_DONE" = 0 ]; then log "up failed: removing what it created"; cmd_down >/dev/null 2>&1 || true; fi' EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$STATE/shm"
  : > "$STATE/nodes"
  ip link add "$BRIDGE" type bridge
  disable_ipv6 "$BRIDGE"
  ip link set "$BRIDGE" up

  local i name rate ns host_if addr
  for i in "${!names[@]}"; do
    name=${names[$i]} rate=${rates[$i]} ns=$PREFIX-${names[$i]} host_if=$PREFIX-h$((i + 1))
    addr=$SUBNET.$((i + 1))
    ip netns add "$ns"
    ip link add "$host_if" type veth peer name "$PREFIX-n$((i + 1))"
    disable_ipv6 "$host_if"
    ip link set "$PREFIX-n$((i + 1))" netns "$ns"
    ip -n "$ns" link set "$PREFIX-n$((i + 1))" name eth0
    disable_ipv6 all ip netns exec "$ns"
    disable_ipv6 default ip netns exec "$ns"
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "$host_if" master "$BRIDGE" up
    rate_limit eth0 "$rate" tc -n "$ns"    # what the node sends
    rate_limit "$host_if" "$rate" tc       # what it receives
    mkdir -p "$STATE/shm/$name"
    mount -t tmpfs -o "mode=1777,size=$SHM_SIZE" "stoker-nodes-$ns" "$STATE/shm/$name"
    echo "$name $addr $rate $ns $host_if" >> "$STATE/nodes"
  done
  UP_DONE=1
  log "${#names[@]} nodes up (prefix $PREFIX, $SUBNET.0/24); run commands with: scripts/nodes.sh exec NODE CMD"
  cmd_list
}

cmd_list() {
  [ -f "$STATE/nodes" ] || die "no nodes with prefix '$PREFIX' are up"
  cat "$STATE/nodes"
}

cmd_exec() {
  [ $# -ge 2 ] || die "usage: nodes.sh exec NODE CMD [ARGS ...]"
  local name=$1; shift
  [ -f "$STATE/nodes" ] && grep -q "^$name " "$STATE/nodes" || die "no node '$name' (prefix '$PREFIX'); see: nodes.sh list"
  # ip netns exec enters the node's network namespace (and a mount namespace of its own); unshare
  # makes that mount namespace private, so the bind over /dev/shm is seen by CMD and its children only.
  exec ip netns exec "$PREFIX-$name" unshare -m --propagation private \
    sh -c 'mount --bind "$1" /dev/shm && shift && exec "$@"' "nodes.sh exec $name" "$STATE/shm/$name" "$@"
}

# The bridge port of a node (its host-side veth), from the state file.
node_port() {
  [ -f "$STATE/nodes" ] || die "no nodes with prefix '$PREFIX' are up"
  local port
  port=$(awk -v n="$1" '$1 == n { print $5 }' "$STATE/nodes")
  [ -n "$port" ] || die "no node '$1' (prefix '$PREFIX'); see: nodes.sh list"
  echo "$port"
}

# Bridge port states (STP off, so they are set by hand): 0 disabled (drops every frame, the link
# stays up on both sides), 3 forwarding.
cmd_cut() {
  [ $# -eq 1 ] || die "usage: nodes.sh cut NODE"
  bridge link set dev "$(node_port "$1")" state 0
}

cmd_heal() {
  [ $# -eq 1 ] || die "usage: nodes.sh heal NODE"
  bridge link set dev "$(node_port "$1")" state 3
}

# Removes everything of PREFIX, whether `up` finished or not: found by name, not only from the state.
cmd_down() {
  local ns pids dev mnt t
  for ns in $(ip netns list | awk -v p="$PREFIX-" 'index($1, p) == 1 { print $1 }'); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      log "stopping the processes in $ns: $(echo $pids)"
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for ((t = 0; t < 40; t++)); do [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] || break; sleep 0.25; done
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns"
  done
  for dev in $(ip -o link show | awk -F': ' -v p="$PREFIX-" '{ sub(/@.*/, "", $2) } index($2, p) == 1 { print $2 }'); do
    ip link del "$dev" 2>/dev/null || true  # a veth goes with its peer
  done
  for mnt in $(awk -v d="$STATE/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount "$mnt" 2>/dev/null || umount -l "$mnt"
  done
  rm -rf "$STATE"
}

cmd=${1:-}
[ $# -eq 0 ] || shift
case "$cmd" in
  up) need_root; check_names; cmd_up "$@" ;;
  down) need_root; check_names; cmd_down; log "nodes with prefix '$PREFIX' removed" ;;
  exec) need_root; check_names; cmd_exec "$@" ;;
  list) need_root; check_names; cmd_list ;;
  cut) need_root; check_names; cmd_cut "$@" ;;
  heal) need_root; check_names; cmd_heal "$@" ;;
  *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
