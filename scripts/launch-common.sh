# shellcheck shell=bash disable=SC2154
# Functions shared by the launchers (scripts/cluster.sh, scripts/mpi-cluster.sh,
# scripts/madfs-slurm.sh), sourced by them: finding the servers of a cluster file and proving
# that a process on this machine is one of them (or their launcher) before signalling it;
# directories and files no other user can plant anything in. They read the launcher's
# $cluster (the cluster file, an absolute path) and $bin (the programs' directory).
#
# Paths (docs/security.md, "Files and paths"): a directory a launcher keeps data in (its own
# root, the servers' data directory) must be this user's own and closed to others
# (private_dir_ok, make_private_dir), or the launcher refuses it, in one line, before it
# writes anything there. The cluster file's directory may be another user's (a root-run
# launcher for a job, with --cluster in the job user's directory): what a launcher writes
# there (its log, its pid record, the servers' step) is written as a new file of a random
# name, opened with O_EXCL, then renamed into place (put_file, open_log), so that a link the
# other user planted is replaced, never written through; what it reads there it reads only
# from regular files that are not links (regular_file).

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
# in $status_text), at most $wait_s seconds and only while PID (the launcher) runs; fails
# otherwise.
wait_servers() {
  local pid="$1" n="$2" deadline=$((SECONDS + wait_s))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if status_text="$(timeout 10 "$bin/madfs-ctl" status --cluster "$cluster" --expect "$n" 2>/dev/null)"; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# The absolute path of $1 with the links above it resolved but not a link at its last
# component (a launcher refuses that one: it is not followed).
abs_path() {
  local b parent
  b="$(basename -- "$1")"
  case "$b" in
    / | . | ..) realpath -m -- "$1" ;;
    *)
      parent="$(realpath -m -- "$(dirname -- "$1")")"
      echo "${parent%/}/$b"
      ;;
  esac
}

# Whether DIR is a directory that only this user controls: a directory (not a symbolic link),
# owned by this user (by anyone when `any-owner` is given and this is root), writable by no
# one else, and every directory above it owned by this user or root and writable by others
# only if sticky (/tmp), so that no one else can replace it. Says why not (one line, stderr).
# (Copied into the shells srun and mpirun start on each node: it uses nothing else.)
private_dir_ok() {
  local d="$1" me p owner mode
  me="$(id -u)"
  if [ ! -e "$d" ] && [ ! -L "$d" ]; then
    echo "$d does not exist (and could not be made)" >&2; return 1
  fi
  if [ -L "$d" ] || [ ! -d "$d" ]; then
    echo "$d is not a directory (a symbolic link or another file is there): refused" >&2; return 1
  fi
  read -r owner mode <<<"$(stat -c '%u %a' -- "$d")"
  if [ "$owner" != "$me" ] && ! { [ "${2:-}" = any-owner ] && [ "$me" = 0 ]; }; then
    echo "$d belongs to uid $owner, not to this user (uid $me): another user made it; refused" >&2
    return 1
  fi
  if (( 8#$mode & 8#022 )); then
    echo "$d has mode $mode: others may write in it; refused (chmod 700 $d)" >&2; return 1
  fi
  p="$d"
  while [ "$p" != / ]; do
    p="$(dirname -- "$p")"
    read -r owner mode <<<"$(stat -L -c '%u %a' -- "$p")"
    if [ "$owner" != "$me" ] && [ "$owner" != 0 ]; then
      echo "$d: $p belongs to uid $owner, who could replace $d; refused" >&2; return 1
    fi
    if (( 8#$mode & 8#022 )) && ! (( 8#$mode & 8#1000 )); then
      echo "$d: $p has mode $mode: others could replace $d; refused" >&2; return 1
    fi
  done
}

# DIR made (mode 0700, its parents as mkdir -p makes them) if nothing is there, then checked
# (private_dir_ok): a directory another user made first, or a link, is refused.
make_private_dir() {
  if [ ! -e "$1" ] && [ ! -L "$1" ]; then
    mkdir -p -- "$(dirname -- "$1")" 2>/dev/null
    mkdir -m 0700 -- "$1" 2>/dev/null   # (someone else may make it first: checked below)
  fi
  private_dir_ok "$1"
}

# Writes stdin to FILE as a new file of this process's own: under a random name beside it,
# opened with O_EXCL (noclobber on a name that does not exist: a link there fails the open, it
# is not followed), then renamed over FILE (mv -T: rename(2) replaces a link or file at FILE,
# never writes through it). (Copied into the shell srun starts: it uses nothing else.)
put_file() {
  local tmp
  tmp="$(mktemp -u -- "$1.XXXXXXXXXX")" || return 1
  if ! (set -C; cat >"$tmp"); then rm -f -- "$tmp"; return 1; fi
  mv -fT -- "$tmp" "$1" || { rm -f -- "$tmp"; return 1; }
}

# Opens a new log at FILE as put_file makes files; the descriptor to write to is $logfd (the
# file is read back through /proc/$$/fd/$logfd, never by its name, which another user who may
# write in its directory could point elsewhere).
open_log() {
  local tmp
  tmp="$(mktemp -u -- "$1.XXXXXXXXXX")" || return 1
  set -C
  if ! exec {logfd}>"$tmp"; then set +C; return 1; fi
  set +C
  mv -fT -- "$tmp" "$1" || { rm -f -- "$tmp"; return 1; }
}

# True if FILE is a regular file and not a symbolic link (what a launcher reads back from the
# cluster file's directory).
regular_file() { [ -f "$1" ] && [ ! -L "$1" ]; }
