#!/usr/bin/env bash
# madfs servers on the nodes of a Slurm allocation, launched with srun.
#
#   scripts/madfs-slurm.sh start  --cluster /shared/path/cluster [--data /local/madfs] [-n N]
#                          [--ntasks-per-node K] [--iface IF | --ip-of-host CMD | --local]
#                          [--owner UID:GID] [--srun-arg ARG]... [--wait SECS] [-- SERVER_ARGS...]
#   scripts/madfs-slurm.sh status --cluster /shared/path/cluster
#   scripts/madfs-slurm.sh stop   --cluster /shared/path/cluster
#   scripts/madfs-slurm.sh clean  [--data /local/madfs] [--cluster /shared/path/cluster] [--this-node]
#
# Run it inside an allocation (a job script, salloc, or a shell with SLURM_JOB_ID of a running
# job set). `start` runs one srun step in the background (srun --overlap, so the job's own
# steps run beside it; --export=ALL, so every UCX_* and MADFS_* variable set at start reaches
# every server) with N tasks, by default one per node of the allocation (-n N: N servers,
# spread over min(N, nodes) nodes, several per node where N is larger; --ntasks-per-node K
# and --srun-arg ARG go to srun). Each task runs one madfs-server with id = SLURM_PROCID (and
# --servers N), data in DATA/server{id} on its node's local disk (default
# /tmp/madfs-data-UID-JOBID: this user's and this job's), listening on its node's address:
# the first IPv4 address of interface IF (--iface IF), what --ip-of-host CMD prints on that
# node, or by default the first address `hostname -I` prints;
# --local uses 127.0.0.1 for every task (one node). Servers register themselves in the
# cluster file, which must be on a file system every node and client sees. `start` returns
# once all N servers answer on their control ports (at most --wait SECS, default 120) and
# prints the line clients need: export MADFS_CLUSTER=...; if they do not, or srun ends first,
# it stops what it started (control-port stop, then the srun step is cancelled) and exits 1.
# Servers' output: DIR/madfs-servers.log beside the cluster file (lines labelled with the id).
# `stop` asks every server to stop through its control port; a server that does not stop is
# signalled only where this machine proves it is that server (the pid its control port reported
# runs madfs-server with this cluster file), and the srun step only where the pid recorded at
# start (CLUSTER.srun: "PID STARTTIME STEP") still runs the srun of this cluster file, started
# at the recorded time. When the job ends, Slurm ends the step anyway: its servers get SIGTERM
# (a clean stop, as through the control port) and SIGKILL after KillWait. `clean` removes the data
# directories (DATA/server*) with one srun task per node (refused while the cluster answers);
# --this-node removes them on this node only, without srun (a per-node epilog).
# DATA must be the launching user's own on every node: a task makes it (0700) when it is
# missing and refuses (the start fails) one that is a symbolic link, belongs to another user,
# or that others may write in or replace; `clean` refuses such a DATA too (root may clean any
# user's). What start writes beside the cluster file (the servers' log, CLUSTER.srun,
# CLUSTER.step) is written as a new file and renamed into place, so that a link another user
# planted there (the job's user, when root runs this) is replaced, never written through
# (docs/security.md, "Files and paths").
# Run as root for a job's user (SLURM_JOB_ID of the user's running job and SLURM_JOB_UID set,
# as in a prolog's or epilog's environment): the servers run as root, and the cluster key
# beside the cluster file goes to the job's user (--owner UID:GID, by default
# SLURM_JOB_UID:SLURM_JOB_GID when that is not root), the one user the cluster serves, who can
# also `status` and `stop` it with that key (docs/security.md); `clean` of root's data needs
# root. `start` adds a step to a running job: a slurmd prolog runs before the job does, and
# Slurm 22.05 ends what it leaves behind, so start from the job (or as root with SLURM_JOB_ID
# set once it runs); an epilog can `stop` (control ports only) and `clean --this-node`.
# Binaries: MADFS_BIN_DIR (default REPO/target/release), the same path on every node.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${MADFS_BIN_DIR:-$repo/target/release}"
cmd="${1:-}"; shift || true
n=""; per_node=""; cluster=""; data=""; local_only=0
ipcmd="hostname -I | cut -d' ' -f1"; iface=""; owner=""; this_node=0
wait_s=120
extra=()
srun_opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --ntasks-per-node) per_node="$2"; shift 2 ;;
    --cluster) cluster="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --iface) iface="$2"; shift 2 ;;
    --ip-of-host) ipcmd="$2"; shift 2 ;;
    --local) local_only=1; shift ;;
    --owner) owner="$2"; shift 2 ;;
    --srun-arg) srun_opts+=("$2"); shift 2 ;;
    --wait) wait_s="$2"; shift 2 ;;
    --this-node) this_node=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "madfs-slurm.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
usage() { sed -n '2,50p' "$0" >&2; exit 2; }
case "$cmd" in start|status|stop|clean) ;; *) usage ;; esac
if [ "$cmd" != clean ] || [ -n "$cluster" ]; then
  [ -n "$cluster" ] || { echo "madfs-slurm.sh: --cluster FILE is required" >&2; exit 2; }
fi
. "$repo/scripts/launch-common.sh"
# (a link at the cluster file's own name is not resolved: it is removed and replaced, never
# followed, as everything beside it)
[ -z "$cluster" ] || cluster="$(abs_path "$cluster")"
if [ -z "$data" ]; then
  [ -n "${SLURM_JOB_ID:-}" ] || [ "$cmd" != clean ] || {
    echo "madfs-slurm.sh: clean: --data DIR is needed outside a job (the default is per job)" >&2; exit 2; }
  data="/tmp/madfs-data-$(id -u)-${SLURM_JOB_ID:-}"
fi
# the same path on every node, whatever srun's working directory (a link at its last
# component is not resolved: the nodes refuse it)
data="$(abs_path "$data")"
runfile="$cluster.srun"   # "PID STARTTIME STEP" of the srun that `start` ran on this machine
stepfile="$cluster.step"  # JOBID.STEPID of the servers' step, written by its task 0

# The servers' step (JOBID.STEPID) as its task 0 wrote it, if it looks like one.
step_id() {
  local s=""
  if regular_file "$stepfile"; then read -r s _ <"$stepfile" || true; fi
  [[ "$s" =~ ^[0-9]+(_[0-9]+)?\.[0-9]+$ ]] && echo "$s"
  return 0
}

# Stops everything of this cluster: control-port stop, then the proven local servers that did
# not stop, then our srun step. SRUNPID/START: the srun to wait for, at most GRACE seconds,
# and to end (scancel of its step, then signals to srun) if it lingers.
teardown() {
  local srunpid="$1" start="$2" grace="$3" step="${4:-}" pids pid left=0 a
  pids="$(local_server_pids)"
  # one address at a time: a partly written cluster file (a gap in the ids) still stops
  for a in $(control_addrs); do timeout 15 "$bin/madfs-ctl" stop "$a" --cluster "$cluster" >&2 || true; done
  for pid in $pids; do
    for _ in $(seq 100); do is_our_server "$pid" || break; sleep 0.1; done
    if is_our_server "$pid"; then
      echo "madfs-slurm.sh: server pid $pid did not stop; SIGTERM" >&2
      signal_server "$pid" TERM 10 || { echo "madfs-slurm.sh: server pid $pid: SIGKILL" >&2; signal_server "$pid" KILL 5 || true; }
    fi
  done
  if [ -n "$srunpid" ] && is_our_launcher "$srunpid" "$start" srun; then
    for _ in $(seq $((grace * 10))); do is_our_launcher "$srunpid" "$start" srun || break; sleep 0.1; done
    if is_our_launcher "$srunpid" "$start" srun; then
      [ -n "$step" ] || step="$(step_id)"
      if [[ "$step" =~ ^[0-9]+(_[0-9]+)?\.[0-9]+$ ]] && command -v scancel >/dev/null 2>&1; then
        echo "madfs-slurm.sh: cancelling step $step (srun pid $srunpid)" >&2
        scancel --quiet "$step" 2>/dev/null || true
        for _ in $(seq 150); do is_our_launcher "$srunpid" "$start" srun || break; sleep 0.1; done
      fi
      if is_our_launcher "$srunpid" "$start" srun; then
        # srun forwards SIGTERM to the step's tasks and ends
        echo "madfs-slurm.sh: ending srun (pid $srunpid)" >&2
        kill -TERM "$srunpid" 2>/dev/null || true
        for _ in $(seq 100); do is_our_launcher "$srunpid" "$start" srun || break; sleep 0.1; done
        if is_our_launcher "$srunpid" "$start" srun; then kill -KILL "$srunpid" 2>/dev/null || true; fi
      fi
    fi
  fi
  for a in $(control_addrs); do
    if timeout 5 "$bin/madfs-ctl" status "$a" --cluster "$cluster" >/dev/null 2>&1; then
      echo "madfs-slurm.sh: the server at $a still answers (not on this machine?)" >&2
      left=1
    fi
  done
  return "$left"
}

need_job() {
  [ -n "${SLURM_JOB_ID:-}" ] || { echo "madfs-slurm.sh: not inside a Slurm allocation (SLURM_JOB_ID is not set)" >&2; exit 2; }
  command -v srun >/dev/null 2>&1 || { echo "madfs-slurm.sh: srun not found" >&2; exit 2; }
}

# Nodes of the allocation (a prolog's environment has the node list but not their number).
job_nodes() {
  local k="${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-}}" list="${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}"
  if [ -z "$k" ] && [ -n "$list" ]; then k="$(scontrol show hostnames "$list" 2>/dev/null | wc -l)"; fi
  if [ -z "$k" ] || [ "$k" = 0 ]; then k="$(squeue -h -j "$SLURM_JOB_ID" -o %D 2>/dev/null | head -n1)"; fi
  [[ "$k" =~ ^[1-9][0-9]*$ ]] || k=1
  echo "$k"
}

case "$cmd" in
  start)
    need_job
    nodes="$(job_nodes)"
    [ -n "$n" ] || n="$nodes"
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "madfs-slurm.sh: -n needs a positive number" >&2; exit 2; }
    if [ -n "$(control_addrs)" ] && timeout 10 "$bin/madfs-ctl" status --cluster "$cluster" >/dev/null 2>&1; then
      echo "madfs-slurm.sh: a cluster is already running on $cluster (stop it first)" >&2; exit 1
    fi
    rm -f "$cluster" "$runfile" "$stepfile"
    mkdir -p "$(dirname "$cluster")"
    # nodes used: as many as servers (at most the allocation's), or N / K with K per node
    use=$((n < nodes ? n : nodes))
    if [ -n "$per_node" ]; then
      [[ "$per_node" =~ ^[1-9][0-9]*$ ]] || { echo "madfs-slurm.sh: --ntasks-per-node needs a positive number" >&2; exit 2; }
      use=$(((n + per_node - 1) / per_node))
      srun_opts=(--ntasks-per-node "$per_node" "${srun_opts[@]}")
    fi
    srun_opts=(--overlap --export=ALL --cpu-bind=none --job-name=madfs-server --label
               -n "$n" -N "$use" "${srun_opts[@]}")
    # as root for another user's job (SLURM_JOB_UID): the key goes to that user
    if [ -z "$owner" ] && [ "$(id -u)" = 0 ] && [ -n "${SLURM_JOB_UID:-}" ] && [ "$SLURM_JOB_UID" != 0 ]; then
      owner="$SLURM_JOB_UID:${SLURM_JOB_GID:-$(id -g "$SLURM_JOB_UID")}"
    fi
    owner_arg=""
    [ -n "$owner" ] && owner_arg="--owner $owner"
    if [ "$local_only" = 1 ]; then
      ip_expr="127.0.0.1"
      export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
    elif [ -n "$iface" ]; then
      ip_expr="\$(ip -4 -o addr show dev $iface | awk '{sub(\"/.*\", \"\", \$4); print \$4; exit}')"
    else
      ip_expr="\$($ipcmd)"
    fi
    log="$(dirname "$cluster")/madfs-servers.log"
    open_log "$log" || { echo "madfs-slurm.sh: cannot make the servers' log $log" >&2; exit 1; }
    # the inner shell runs on each node: task 0 notes the step (for scancel), every task makes
    # (or checks) the data directory and finds its node's address, then becomes the server
    node_fns="$(declare -f private_dir_ok make_private_dir put_file)"
    nohup srun "${srun_opts[@]}" \
      bash -c "$node_fns
        if [ \"\$SLURM_PROCID\" = 0 ]; then echo \"\$SLURM_JOB_ID.\$SLURM_STEP_ID\" | put_file \"$stepfile\"; fi
        why=\$(make_private_dir \"$data\" 2>&1) || { echo \"madfs-slurm.sh: \$(hostname): \$why\" >&2; exit 1; }
        ip=$ip_expr
        [ -n \"\$ip\" ] || { echo \"madfs-slurm.sh: no address on \$(hostname)\" >&2; exit 1; }
        exec \"$bin/madfs-server\" --listen \"\$ip:0\" --control \"\$ip:0\" --tcp \"\$ip:0\" \
        --data-dir \"$data/server{id}\" --cluster-file \"$cluster\" --servers $n $owner_arg ${extra[*]:-}" \
      >&"$logfd" 2>&1 {logfd}>&- </dev/null &
    srunpid=$!
    start="$(starttime "$srunpid")"
    echo "$srunpid $start" | put_file "$runfile" ||
      echo "madfs-slurm.sh: cannot record srun's pid in $runfile (stop will use the control ports only)" >&2
    if ! wait_servers "$srunpid" "$n"; then
      if kill -0 "$srunpid" 2>/dev/null; then
        echo "madfs-slurm.sh: servers did not come up within ${wait_s}s; stopping what started" >&2
      else
        echo "madfs-slurm.sh: srun ended before all servers came up; stopping what started" >&2
      fi
      teardown "$srunpid" "$start" 3 || true
      wait "$srunpid" 2>/dev/null || true
      rm -f "$runfile" "$stepfile"
      echo "madfs-slurm.sh: log $log:" >&2
      tail -n 30 "/proc/$$/fd/$logfd" >&2 || true
      exit 1
    fi
    echo "$srunpid $start $(step_id)" | put_file "$runfile" || true
    printf '%s\n' "$status_text" >&2
    echo "export MADFS_CLUSTER=$cluster"
    ;;
  status)
    ctl status --cluster "$cluster"
    ;;
  stop)
    if [ ! -f "$cluster" ] && [ ! -f "$runfile" ]; then
      echo "madfs-slurm.sh: no cluster file $cluster" >&2; exit 0
    fi
    srunpid=""; start=""; step=""
    if regular_file "$runfile"; then read -r srunpid start step _ <"$runfile" || true; fi
    rc=0
    teardown "$srunpid" "$start" 10 "$step" || rc=1
    rm -f "$runfile" "$stepfile"
    exit "$rc"
    ;;
  clean)
    if [ "$data" = / ]; then echo "madfs-slurm.sh: --data / is refused" >&2; exit 2; fi
    if [ -n "$(control_addrs)" ] && timeout 10 "$bin/madfs-ctl" status --cluster "$cluster" >/dev/null 2>&1; then
      echo "madfs-slurm.sh: the cluster on $cluster still answers (stop it first)" >&2; exit 1
    fi
    # DATA/server<id> of every server of this node, then DATA itself if that left it empty;
    # a DATA that is a link, or that others could change, is refused (root: of any owner)
    rm_cmd="$(declare -f private_dir_ok)
      if [ -e \"$data\" ] || [ -L \"$data\" ]; then
        why=\$(private_dir_ok \"$data\" any-owner 2>&1) || { echo \"madfs-slurm.sh: \$(hostname): \$why\" >&2; exit 1; }
        rm -rf \"$data\"/server[0-9]*; rmdir \"$data\" 2>/dev/null
      fi
      true"
    if [ "$this_node" = 1 ]; then
      bash -c "$rm_cmd"
    else
      need_job
      nodes="$(job_nodes)"
      srun --overlap --export=ALL --job-name=madfs-clean -N "$nodes" -n "$nodes" --ntasks-per-node=1 "${srun_opts[@]}" \
        bash -c "$rm_cmd" </dev/null
    fi
    ;;
esac
