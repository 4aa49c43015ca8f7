# shellcheck shell=bash disable=SC2154
# Functions shared by the launchers (scripts/mpi-cluster.sh, scripts/madfs-slurm.sh), sourced
# by them: finding the servers of a cluster file and proving that a process on this machine
# is one of them (or their launcher) before signalling it. They read the launcher's $cluster
# (the cluster file, an absolute path) and $bin (the programs' directory).

ctl() { "$bin/madfs-ctl" "$@"; }

# Control addresses of the servers in the cluster file (lines "ID UCX_ADDR CONTROL_ADDR ...").
control_addrs() {
  [ -n "$cluster" ] && [ -f "$cluster" ] || return 0
  awk '$1 ~ /^[0-9]+$/ && NF >= 3 && $3 ~ /:[0-9]+$/ {print $3}' "$cluster"
}

# Start time (clock ticks since boot) of a process, empty if it does not exist.
starttime() { sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }

# True if PID runs on this machine as a madfs-server registering in this cluster file.
is_our_server() {
  local pid="$1" args
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  mapfile -d "" -t args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  [ "${#args[@]}" -gt 0 ] && [ "$(basename "${args[0]}")" = madfs-server ] || return 1
  local i
  for ((i = 1; i + 1 < ${#args[@]}; i++)); do
    [ "${args[$i]}" = --cluster-file ] && [ "${args[$((i + 1))]}" = "$cluster" ] && return 0
  done
  return 1
}

# True if PID runs one of the programs NAMES... (mpirun, srun, …) started at START with this
# cluster file on its command line (PID and START as the launcher recorded them).
is_our_launcher() {
  local pid="$1" start="$2" args name
  shift 2
  [[ "$pid" =~ ^[0-9]+$ ]] && [ -n "$start" ] || return 1
  [ "$(starttime "$pid")" = "$start" ] || return 1
  mapfile -d "" -t args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  name="$(basename "${args[0]:-}")"
  local n ok=1
  for n in "$@"; do [ "$name" = "$n" ] && ok=0; done
  [ "$ok" = 0 ] || return 1
  [[ "${args[*]}" == *"--cluster-file \"$cluster\""* ]]
}

# Sends SIG to PID only while it still is our server; waits up to SECS for it to end.
signal_server() {
  local pid="$1" sig="$2" secs="$3"
  is_our_server "$pid" || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  for _ in $(seq $((secs * 10))); do is_our_server "$pid" || return 0; sleep 0.1; done
  return 1
}

# Pids (one per line) of the servers that answer on their control ports and run here.
local_server_pids() {
  local a pid
  for a in $(control_addrs); do
    pid="$(timeout 5 "$bin/madfs-ctl" status "$a" --cluster "$cluster" 2>/dev/null | sed -nE 's/.* pid=([0-9]+).*/\1/p' | head -n1)"
    [ -n "$pid" ] && is_our_server "$pid" && echo "$pid"
  done
  return 0
}

# Waits until the N servers of the cluster file answer on their control ports (their status
# in CLUSTER.status), at most $wait_s seconds and only while PID (the launcher) runs; fails
# otherwise.
wait_servers() {
  local pid="$1" n="$2" deadline=$((SECONDS + wait_s))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if timeout 10 "$bin/madfs-ctl" status --cluster "$cluster" --expect "$n" >"$cluster.status" 2>/dev/null; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
