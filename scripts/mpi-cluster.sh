#!/usr/bin/env bash
# madfs servers on many nodes, launched with mpirun (Open MPI).
#
#   scripts/mpi-cluster.sh start -n N --hostfile H --cluster /shared/path/cluster \
#                          --data /local/madfs [--ip-of-host CMD] [-- SERVER_ARGS...]
#   scripts/mpi-cluster.sh stop  --cluster /shared/path/cluster
#
# Each rank runs one madfs-server with id = its MPI rank, data in DATA/server{id} on its node,
# listening on its node's address (the first address `hostname -I` prints, or what
# --ip-of-host CMD prints on that node), and registers itself in the cluster file, which must
# be on a file system every node and client sees. `start` returns once all N servers answer
# on their control ports and prints the line clients need: export MADFS_CLUSTER=...
# For a single machine (tests): --local uses 127.0.0.1 for every rank.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${MADFS_BIN_DIR:-$repo/target/release}"
cmd="${1:-}"; shift || true
n=""; hostfile=""; cluster=""; data="/tmp/madfs-data"; local_only=0; ipcmd="hostname -I | cut -d' ' -f1"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    --cluster) cluster="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --ip-of-host) ipcmd="$2"; shift 2 ;;
    --local) local_only=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "mpi-cluster.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$cluster" ] || { echo "mpi-cluster.sh: --cluster FILE is required" >&2; exit 2; }
mpi_opts=(--allow-run-as-root --oversubscribe)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

case "$cmd" in
  start)
    [ -n "$n" ] || { echo "mpi-cluster.sh: -n N is required" >&2; exit 2; }
    rm -f "$cluster"
    hostopt=()
    [ -n "$hostfile" ] && hostopt=(--hostfile "$hostfile")
    if [ "$local_only" = 1 ]; then
      ip_expr="127.0.0.1"
      export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
    else
      ip_expr="\$($ipcmd)"
    fi
    log="$(dirname "$cluster")/madfs-servers.log"
    # the inner shell runs on each node: it finds the node's address, then becomes the server
    nohup mpirun "${mpi_opts[@]}" "${hostopt[@]}" -np "$n" -x UCX_NET_DEVICES -x MADFS_LOG \
      bash -c "ip=$ip_expr; exec \"$bin/madfs-server\" --listen \"\$ip:0\" --control \"\$ip:0\" --tcp \"\$ip:0\" \
        --data-dir \"$data/server{id}\" --cluster-file \"$cluster\" ${extra[*]:-}" \
      >"$log" 2>&1 </dev/null &
    echo $! > "$cluster.mpirun.pid"
    if ! "$bin/madfs-ctl" status --cluster "$cluster" --wait 120 --expect "$n" >&2; then
      echo "mpi-cluster.sh: servers did not come up; see $log" >&2
      exit 1
    fi
    echo "export MADFS_CLUSTER=$cluster"
    ;;
  stop)
    "$bin/madfs-ctl" stop --cluster "$cluster" || true
    if [ -f "$cluster.mpirun.pid" ]; then
      pid="$(cat "$cluster.mpirun.pid")"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill "$pid" 2>/dev/null || true
      rm -f "$cluster.mpirun.pid"
    fi
    ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
