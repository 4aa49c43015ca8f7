#!/usr/bin/env bash
# Local madfs cluster on 127.0.0.1.
#
#   scripts/cluster.sh start  [-n N] [--root DIR] [-- SERVER_ARGS...]
#   scripts/cluster.sh status [--root DIR]
#   scripts/cluster.sh stop   [--root DIR]
#
# start runs N madfs-server processes (default 2) with data under DIR (default
# /tmp/madfs-$UID), writes DIR/cluster, waits until every control port answers and prints the
# line a client needs: export MADFS_CLUSTER=DIR/cluster. stop stops them through the control
# port (clean RocksDB shutdown). Binaries come from $MADFS_BIN_DIR or target/release (built if
# missing).
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

need_bins() {
  if [ ! -x "$bin/madfs-server" ] || [ ! -x "$bin/madfs-ctl" ]; then
    echo "cluster.sh: building release binaries" >&2
    (cd "$repo" && cargo build --release -p madfs-server -p madfs-control >&2)
  fi
}

case "$cmd" in
  start)
    need_bins
    if [ -f "$root/cluster" ] && "$bin/madfs-ctl" status --cluster "$root/cluster" >/dev/null 2>&1; then
      echo "cluster.sh: a cluster is already running in $root (stop it first)" >&2; exit 1
    fi
    mkdir -p "$root"
    rm -f "$root/cluster"
    for ((i = 0; i < n; i++)); do
      nohup "$bin/madfs-server" --id "$i" --listen 127.0.0.1:0 --control 127.0.0.1:0 \
        --data-dir "$root/server$i" --cluster-file "$root/cluster" "${server_args[@]}" \
        >"$root/server$i.log" 2>&1 </dev/null &
      echo $! >"$root/server$i.pid"
    done
    if ! "$bin/madfs-ctl" status --cluster "$root/cluster" --wait 60 --expect "$n" >"$root/status"; then
      echo "cluster.sh: servers did not come up; logs:" >&2
      tail -n 20 "$root"/server*.log >&2
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
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then
        echo "cluster.sh: server pid $pid did not stop; killing" >&2
        kill -9 "$pid" 2>/dev/null || true
      fi
      rm -f "$pidf"
    done
    rm -f "$root/cluster"
    echo "cluster.sh: stopped (data kept in $root)" >&2
    ;;
  *)
    sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
