#!/usr/bin/env bash
# madfs servers on many nodes, launched with mpirun (Open MPI).
#
#   scripts/mpi-cluster.sh start  -n N --cluster /shared/path/cluster [--data /local/madfs]
#                          [--hostfile H] [--rsh-agent CMD] [--ip-of-host CMD | --local]
#                          [--allow-run-as-root] [--oversubscribe] [--mpirun-arg ARG]...
#                          [--wait SECS] [-- SERVER_ARGS...]
#   scripts/mpi-cluster.sh status --cluster /shared/path/cluster
#   scripts/mpi-cluster.sh stop   --cluster /shared/path/cluster
#
# Each rank runs one madfs-server with id = its MPI rank (and --servers N), data in
# DATA/server{id} on its node (default /tmp/madfs-data-UID-CKSUM: this user's, for this
# cluster file, CKSUM being the cksum of its path), listening on its node's address (the
# first address `hostname -I` prints, or what --ip-of-host CMD prints on that node), and
# registers itself in the cluster file, which must be on a file system every node and
# client sees. `start` returns once all N servers answer on their control ports (at most
# --wait SECS, default 120) and prints the line clients need: export MADFS_CLUSTER=...; if
# they do not, or mpirun ends first, it stops what it started (control-port stop, then
# mpirun is ended) and exits 1. Every UCX_* and MADFS_* variable set at start goes to every
# rank. --local uses 127.0.0.1 for every rank (one machine).
# --rsh-agent CMD is Open MPI's plm_rsh_agent (e.g. scripts/netns-rsh.sh for the hosts of
# scripts/netns.sh); --mpirun-arg passes one more argument to mpirun. --allow-run-as-root and
# --oversubscribe go to mpirun only when given (Open MPI also honours OMPI_ALLOW_RUN_AS_ROOT=1
# with OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, and OMPI_MCA_rmaps_base_oversubscribe=1).
# `stop` asks every server to stop through its control port; a server that does not stop is
# signalled only where this machine proves it is that server (the pid its control port reported
# runs madfs-server with this cluster file), and mpirun only where the pid recorded at start
# still runs the mpirun of this cluster file, started at the recorded time.
# DATA must be the launching user's own on every node: a rank makes it (0700) when it is
# missing and refuses (the start fails) one that is a symbolic link, belongs to another user,
# or that others may write in or replace. What start writes beside the cluster file (the
# servers' log, CLUSTER.mpirun) is written as a new file and renamed into place, so that a
# link another user planted there is replaced, never written through (docs/security.md,
# "Files and paths").
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${MADFS_BIN_DIR:-$repo/target/release}"
cmd="${1:-}"; shift || true
n=""; hostfile=""; cluster=""; data=""; local_only=0; ipcmd="hostname -I | cut -d' ' -f1"
wait_s=120
extra=()
mpi_opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    --cluster) cluster="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --ip-of-host) ipcmd="$2"; shift 2 ;;
    --local) local_only=1; shift ;;
    --rsh-agent) mpi_opts+=(--mca plm_rsh_agent "$2"); shift 2 ;;
    --allow-run-as-root) mpi_opts+=(--allow-run-as-root); shift ;;
    --oversubscribe) mpi_opts+=(--oversubscribe); shift ;;
    --mpirun-arg) mpi_opts+=("$2"); shift 2 ;;
    --wait) wait_s="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "mpi-cluster.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
usage() { sed -n '2,34p' "$0" >&2; exit 2; }
case "$cmd" in start|status|stop) ;; *) usage ;; esac
[ -n "$cluster" ] || { echo "mpi-cluster.sh: --cluster FILE is required" >&2; exit 2; }
. "$repo/scripts/launch-common.sh"
# (a link at the cluster file's own name is not resolved: it is removed and replaced, never
# followed, as everything beside it)
cluster="$(abs_path "$cluster")"
runfile="$cluster.mpirun"   # "PID STARTTIME" of the mpirun that `start` ran on this machine
[ -n "$data" ] || data="/tmp/madfs-data-$(id -u)-$(printf %s "$cluster" | cksum | cut -d' ' -f1)"
data="$(abs_path "$data")"   # the same path on every node (a link at its end: refused there)

# Stops everything of this cluster: control-port stop, then the proven local servers that did
# not stop, then our mpirun. MPIPID/START: the mpirun to wait for, at most GRACE seconds, and
# to end if it lingers.
teardown() {
  local mpipid="$1" start="$2" grace="$3" pids pid left=0 a
  pids="$(local_server_pids)"
  # one address at a time: a partly written cluster file (a gap in the ids) still stops
  for a in $(control_addrs); do timeout 15 "$bin/madfs-ctl" stop "$a" --cluster "$cluster" >&2 || true; done
  for pid in $pids; do
    for _ in $(seq 100); do is_our_server "$pid" || break; sleep 0.1; done
    if is_our_server "$pid"; then
      echo "mpi-cluster.sh: server pid $pid did not stop; SIGTERM" >&2
      signal_server "$pid" TERM 10 || { echo "mpi-cluster.sh: server pid $pid: SIGKILL" >&2; signal_server "$pid" KILL 5 || true; }
    fi
  done
  if [ -n "$mpipid" ] && is_our_launcher "$mpipid" "$start" mpirun orterun mpiexec; then
    for _ in $(seq $((grace * 10))); do is_our_launcher "$mpipid" "$start" mpirun orterun mpiexec || break; sleep 0.1; done
    if is_our_launcher "$mpipid" "$start" mpirun orterun mpiexec; then
      echo "mpi-cluster.sh: ending mpirun (pid $mpipid)" >&2
      kill -TERM "$mpipid" 2>/dev/null || true
      for _ in $(seq 100); do is_our_launcher "$mpipid" "$start" mpirun orterun mpiexec || break; sleep 0.1; done
      is_our_launcher "$mpipid" "$start" mpirun orterun mpiexec && kill -KILL "$mpipid" 2>/dev/null || true
    fi
  fi
  for a in $(control_addrs); do
    if timeout 5 "$bin/madfs-ctl" status "$a" --cluster "$cluster" >/dev/null 2>&1; then
      echo "mpi-cluster.sh: the server at $a still answers (not on this machine?)" >&2
      left=1
    fi
  done
  return "$left"
}

case "$cmd" in
  start)
    [ -n "$n" ] || { echo "mpi-cluster.sh: -n N is required" >&2; exit 2; }
    if [ -n "$(control_addrs)" ] && timeout 10 "$bin/madfs-ctl" status --cluster "$cluster" >/dev/null 2>&1; then
      echo "mpi-cluster.sh: a cluster is already running on $cluster (stop it first)" >&2; exit 1
    fi
    rm -f "$cluster" "$runfile"
    [ -n "$hostfile" ] && mpi_opts+=(--hostfile "$hostfile")
    if [ "$local_only" = 1 ]; then
      ip_expr="127.0.0.1"
      export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
    else
      ip_expr="\$($ipcmd)"
    fi
    for v in $(compgen -e | grep -E '^(UCX|MADFS)_' || true); do mpi_opts+=(-x "$v"); done
    log="$(dirname "$cluster")/madfs-servers.log"
    open_log "$log" || { echo "mpi-cluster.sh: cannot make the servers' log $log" >&2; exit 1; }
    # the inner shell runs on each node: it makes (or checks) the data directory and finds the
    # node's address, then becomes the server
    node_fns="$(declare -f private_dir_ok make_private_dir)"
    nohup mpirun "${mpi_opts[@]}" -np "$n" \
      bash -c "$node_fns
        why=\$(make_private_dir \"$data\" 2>&1) || { echo \"mpi-cluster.sh: \$(hostname): \$why\" >&2; exit 1; }
        ip=$ip_expr; exec \"$bin/madfs-server\" --listen \"\$ip:0\" --control \"\$ip:0\" --tcp \"\$ip:0\" \
        --data-dir \"$data/server{id}\" --cluster-file \"$cluster\" --servers $n ${extra[*]:-}" \
      >&"$logfd" 2>&1 {logfd}>&- </dev/null &
    mpipid=$!
    start="$(starttime "$mpipid")"
    echo "$mpipid $start" | put_file "$runfile" ||
      echo "mpi-cluster.sh: cannot record mpirun's pid in $runfile (stop will use the control ports only)" >&2
    if ! wait_servers "$mpipid" "$n"; then
      if kill -0 "$mpipid" 2>/dev/null; then
        echo "mpi-cluster.sh: servers did not come up within ${wait_s}s; stopping what started" >&2
      else
        echo "mpi-cluster.sh: mpirun ended before all servers came up; stopping what started" >&2
      fi
      teardown "$mpipid" "$start" 3 || true
      wait "$mpipid" 2>/dev/null || true
      rm -f "$runfile"
      echo "mpi-cluster.sh: log $log:" >&2
      tail -n 30 "/proc/$$/fd/$logfd" >&2 || true
      exit 1
    fi
    printf '%s\n' "$status_text" >&2
    echo "export MADFS_CLUSTER=$cluster"
    ;;
  status)
    ctl status --cluster "$cluster"
    ;;
  stop)
    if [ ! -f "$cluster" ] && [ ! -f "$runfile" ]; then
      echo "mpi-cluster.sh: no cluster file $cluster" >&2; exit 0
    fi
    mpipid=""; start=""
    regular_file "$runfile" && read -r mpipid start _ <"$runfile" || true
    rc=0
    teardown "$mpipid" "$start" 10 || rc=1
    rm -f "$runfile"
    exit "$rc"
    ;;
esac
