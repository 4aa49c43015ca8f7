#!/usr/bin/env bash
# Hosts made of Linux network namespaces on one machine, for multi-host tests (run as root).
#
#   scripts/netns.sh up    [-k K] [--prefix P]  # hosts P-h0 .. P-h{K-1} (default K=4, P=madfs-PID);
#                                               #   prints one line per host: NAME ADDR IFACE
#   scripts/netns.sh down  --prefix P           # removes everything `up` made for P
#   scripts/netns.sh hosts --prefix P           # prints NAME ADDR IFACE per host again
#   scripts/netns.sh exec  NAME CMD [ARGS...]   # runs CMD on host NAME (its network namespace,
#                                               #   and its own hostname NAME)
#   scripts/netns.sh link  NAME down|up         # pulls / plugs host NAME's cable
#
# Host i is a network namespace with `lo` up and one interface, veth0, holding 10.99.0.(10+i)/24
# and no other route: it can reach the other hosts and its own loopback, nothing else. The hosts'
# veth0s are joined by a bridge that lives in a namespace of its own (P-br, ports h0, h1, ...),
# so nothing is added to the root namespace, whose interfaces and routes are never touched.
# IPv6 is off in these namespaces (no link-local chatter). Every host resolves every host's
# name through /etc/netns/NAME/hosts (mounted over /etc/hosts by `ip netns exec`), and its
# /etc/netns/NAME/resolv.conf names no server outside it. `link NAME down` takes the bridge's
# port of NAME down (the host sees its carrier go); its addresses and processes stay.
# `down` ends the processes still running in P's namespaces (SIGTERM, then SIGKILL after 5 s),
# deletes the namespaces (their interfaces go with them) and the /etc/netns/P-* entries.
set -Eeuo pipefail
net=10.99.0
first=10        # host i gets $net.$((first + i))
iface=veth0

die() { echo "netns.sh: $*" >&2; exit 2; }
usage() { sed -n '2,21p' "$0" >&2; exit 2; }

check_prefix() {
  [[ "$1" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$ ]] || die "bad prefix '$1' (letters, digits, _ . -)"
}

# NAME must be a host namespace made by this script: P-hI with P-br beside it.
check_host() {
  [[ "$1" =~ ^([A-Za-z0-9][A-Za-z0-9_.-]{0,39})-h([0-9]+)$ ]] || die "'$1' is not a netns.sh host name"
  [ -e "/run/netns/$1" ] && [ -e "/run/netns/${BASH_REMATCH[1]}-br" ] || die "no host '$1' (netns.sh up?)"
}

# Our namespaces of prefix P, from the kernel's list (bridge last).
ours() {
  local p="$1" ns
  for ns in $(ip netns list | awk '{print $1}'); do
    [[ "$ns" =~ ^"$p"-h([0-9]+)$ ]] && echo "${BASH_REMATCH[1]} $ns"
  done | sort -n | cut -d' ' -f2
  [ -e "/run/netns/$p-br" ] && echo "$p-br"
  return 0
}

hosts_of() {
  local p="$1" ns i
  for ns in $(ours "$p"); do
    [[ "$ns" =~ -h([0-9]+)$ ]] || continue
    i="${BASH_REMATCH[1]}"
    echo "$ns $net.$((first + i)) $iface"
  done
}

down() {
  local p="$1" ns pids left
  local all
  all="$(ours "$p")"
  for ns in $all; do
    pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
    if [ -n "${pids// /}" ]; then
      echo "netns.sh: ending processes left in $ns: $pids" >&2
      kill -TERM $pids 2>/dev/null || true
    fi
  done
  for _ in $(seq 50); do
    left=""
    for ns in $all; do left+="$(ip netns pids "$ns" 2>/dev/null)"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for ns in $all; do
    pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
    [ -n "${pids// /}" ] && kill -KILL $pids 2>/dev/null || true
  done
  for ns in $all; do
    ip netns del "$ns" 2>/dev/null || echo "netns.sh: could not delete $ns" >&2
    case "$ns" in *-h[0-9]*) rm -rf "/etc/netns/$ns" ;; esac
  done
  # entries of hosts whose namespace is already gone
  for d in /etc/netns/"$p"-h*; do
    [ -d "$d" ] && [[ "$(basename "$d")" =~ ^"$p"-h[0-9]+$ ]] && rm -rf "$d"
  done
  [ -d /etc/netns ] && rmdir /etc/netns 2>/dev/null || true
  return 0
}

up() {
  local k="$1" p="$2" i ns addr br="$2-br"
  [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 200 ] || die "-k must be 1..200"
  [ -z "$(ours "$p")" ] || die "namespaces of prefix $p exist already (netns.sh down --prefix $p)"
  trap 'echo "netns.sh: up failed; removing what it made" >&2; down "$p"' ERR
  ip netns add "$br"
  ip -n "$br" link set lo up
  ip netns exec "$br" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$br" link add br0 type bridge
  ip -n "$br" link set br0 up
  mkdir -p /etc/netns
  for ((i = 0; i < k; i++)); do
    ns="$p-h$i"
    addr="$net.$((first + i))"
    ip netns add "$ns"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$ns" link set lo up
    # both ends are made inside our namespaces: the port in the bridge's, its peer in the host's
    ip -n "$br" link add "h$i" type veth peer name "$iface" netns "$ns"
    ip -n "$br" link set "h$i" master br0
    ip -n "$br" link set "h$i" up
    ip -n "$ns" addr add "$addr/24" dev "$iface"
    ip -n "$ns" link set "$iface" up
  done
  for ((i = 0; i < k; i++)); do
    ns="$p-h$i"
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      for ((j = 0; j < k; j++)); do echo "$net.$((first + j)) $p-h$j"; done
    } >"/etc/netns/$ns/hosts"
    printf '# netns.sh: no name server (names are in /etc/hosts)\nnameserver 127.0.0.1\noptions attempts:1 timeout:1\n' \
      >"/etc/netns/$ns/resolv.conf"
  done
  trap - ERR
  hosts_of "$p"
}

[ "$(id -u)" = 0 ] || die "must run as root"
command -v ip >/dev/null || die "ip (iproute2) not found"
cmd="${1:-}"; shift || true
case "$cmd" in
  up|down|hosts)
    k=4; prefix="madfs-$$"
    while [ $# -gt 0 ]; do
      case "$1" in
        -k) k="$2"; shift 2 ;;
        --prefix) prefix="$2"; shift 2 ;;
        *) die "unknown argument $1" ;;
      esac
    done
    check_prefix "$prefix"
    [ "$cmd" = up ] || [ "$prefix" != "madfs-$$" ] || die "$cmd needs --prefix P"
    case "$cmd" in
      up) up "$k" "$prefix" ;;
      down) down "$prefix" ;;
      hosts) hosts_of "$prefix" ;;
    esac
    ;;
  exec)
    [ $# -ge 2 ] || usage
    host="$1"; shift
    check_host "$host"
    # a UTS namespace of its own, so the host's programs see its name as their hostname
    exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
    ;;
  link)
    [ $# -eq 2 ] || usage
    check_host "$1"
    [[ "$1" =~ ^(.*)-h([0-9]+)$ ]]
    case "$2" in
      up|down) ip -n "${BASH_REMATCH[1]}-br" link set "h${BASH_REMATCH[2]}" "$2" ;;
      *) usage ;;
    esac
    ;;
  *) usage ;;
esac
