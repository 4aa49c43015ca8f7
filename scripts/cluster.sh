#!/usr/bin/env bash
# Local madfs cluster on 127.0.0.1.
#
#   scripts/cluster.sh start  [-n N] [--root DIR] [-- SERVER_ARGS...]
#   scripts/cluster.sh status [--root DIR]
#   scripts/cluster.sh stop   [--root DIR]
#
# start runs N madfs-server processes (default 2) with data under DIR (default
# /tmp/madfs-$UID), writes DIR/cluster, waits until every control port answers and prints the
# line a client needs: export MADFS_CLUSTER=DIR/cluster; if one exits first, or they do not all
# answer within 60 s, it stops the servers it started and exits 1. stop stops them through the control port (clean
# RocksDB shutdown), and kills (SIGKILL) a server of a pid file that has not ended after 10 s
# only while that pid still runs madfs-server with DIR's cluster file. Binaries come from
# $MADFS_BIN_DIR or target/release (built if missing).
# DIR must be this user's own: start makes it (0700) when it is missing, and every command
# refuses, in one line and before writing anything, a DIR that is a symbolic link, belongs to
# another user, or that others may write in or replace (docs/security.md, "Files and paths").
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cmd="${1:-}"; shift || true
n=2
root="/tmp/madfs-$(id -u)"
server_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --root) root="$2"; shift 2 ;;
    --) shift; server_args=("$@"); break ;;
    *) echo "cluster.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin="${MADFS_BIN_DIR:-$repo/target/release}"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
. "$repo/scripts/launch-common.sh"
root="$(abs_path "$root")"
cluster="$root/cluster"   # (what launch-common.sh's functions read)

# Refuses (exit 1, one line) a root that is not this user's own (private_dir_ok); `start`
# makes a missing one first.
check_root() {
  local why
  if [ "$cmd" = start ]; then
    why="$(make_private_dir "$root" 2>&1)" && return 0
  elif [ ! -e "$root" ] && [ ! -L "$root" ]; then
    return 0
  else
    why="$(private_dir_ok "$root" 2>&1)" && return 0
  fi
  echo "cluster.sh: $why" >&2
  exit 1
}

need_bins() {
  if [ ! -x "$bin/madfs-server" ] || [ ! -x "$bin/madfs-ctl" ]; then
    echo "cluster.sh: building release binaries" >&2
    (cd "$repo" && cargo build --release -p madfs-server -p madfs-control >&2)
  fi
}

case "$cmd" in start | status | stop) check_root ;; esac

case "$cmd" in
  start)
    need_bins
    if [ -f "$root/cluster" ] && "$bin/madfs-ctl" status --cluster "$root/cluster" >/dev/null 2>&1; then
      echo "cluster.sh: a cluster is already running in $root (stop it first)" >&2; exit 1
    fi
    rm -f "$root/cluster"
    started=()
    for ((i = 0; i < n; i++)); do
      nohup "$bin/madfs-server" --id "$i" --servers "$n" --listen 127.0.0.1:0 --control 127.0.0.1:0 \
        --data-dir "$root/server$i" --cluster-file "$root/cluster" "${server_args[@]}" \
        >"$root/server$i.log" 2>&1 </dev/null &
      started+=($!)
      echo $! >"$root/server$i.pid"
    done
    up=0
    for _ in $(seq 300); do   # 60 s
      if timeout 10 "$bin/madfs-ctl" status --cluster "$root/cluster" --expect "$n" >"$root/status" 2>/dev/null; then
        up=1; break
      fi
      for pid in "${started[@]}"; do kill -0 "$pid" 2>/dev/null || break 2; done
      sleep 0.2
    done
    if [ "$up" != 1 ]; then
      echo "cluster.sh: servers did not come up; stopping those that started. Logs:" >&2
      tail -n 20 "$root"/server*.log >&2
      # one control address at a time: the cluster file may have gaps in its ids
      if [ -f "$root/cluster" ]; then
        for a in $(awk '$1 ~ /^[0-9]+$/ && NF >= 3 {print $3}' "$root/cluster"); do
          timeout 15 "$bin/madfs-ctl" stop "$a" --cluster "$root/cluster" >&2 || true
        done
      fi
      # our own children: SIGTERM after the control-port stop, SIGKILL after 10 s more
      for pid in "${started[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -TERM "$pid" 2>/dev/null || true
      done
      for pid in "${started[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
      done
      rm -f "$root"/server*.pid "$root/cluster" "$root/status"
      exit 1
    fi
    cat "$root/status" >&2
    echo "export MADFS_CLUSTER=$root/cluster"
    ;;
  status)
    need_bins
    [ -f "$root/cluster" ] || { echo "cluster.sh: no cluster in $root" >&2; exit 1; }
    "$bin/madfs-ctl" status --cluster "$root/cluster"
    ;;
  stop)
    need_bins
    [ -f "$root/cluster" ] || { echo "cluster.sh: no cluster in $root" >&2; exit 0; }
    "$bin/madfs-ctl" stop --cluster "$root/cluster" || true
    for pidf in "$root"/server*.pid; do
      [ -f "$pidf" ] || continue
      pid="$(cat "$pidf")"
      for _ in $(seq 100); do is_our_server "$pid" || break; sleep 0.1; done
      if is_our_server "$pid"; then
        echo "cluster.sh: server pid $pid did not stop; killing" >&2
        kill -9 "$pid" 2>/dev/null || true
      fi
      rm -f "$pidf"
    done
    rm -f "$root/cluster"
    echo "cluster.sh: stopped (data kept in $root)" >&2
    ;;
  *)
    sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
