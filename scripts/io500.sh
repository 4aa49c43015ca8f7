#!/usr/bin/env bash
# Runs a user-installed io500 (https://github.com/IO500/io500, built outside this repository)
# on madfs through the preload library.
#
#   MADFS_CLUSTER=/shared/cluster scripts/io500.sh CONFIG.ini [-n NP] [--hostfile H] [--io500 PATH]
#                                                 [--allow-run-as-root] [--oversubscribe]
#
# --allow-run-as-root and --oversubscribe go to mpirun only when given (as in mpi-cluster.sh;
# Open MPI also honours OMPI_ALLOW_RUN_AS_ROOT=1 with OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, and
# OMPI_MCA_rmaps_base_oversubscribe=1 from the environment).
#
# The io500 data directory in CONFIG.ini must lie under the madfs mount (default /madfs, see
# MADFS_MOUNT), e.g. `datadir = /madfs/io500`. Every rank gets LD_PRELOAD=libmadfs.so and the
# madfs settings through `mpirun -x`. Unless the config names its own `external-script` in
# [find] (or [find-easy]/[find-hard]), io500 runs its find phases with madfs-find (server-side,
# pfind's `MATCHED x/y` output): the script passes io500 a copy of the config with
#   [find]
#   external-script = <repo>/target/release/madfs-find
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
config="${1:?usage: scripts/io500.sh CONFIG.ini [-n NP] [--hostfile H] [--io500 PATH] [--allow-run-as-root] [--oversubscribe]}"; shift
np=2; hostfile=""; io500="${IO500:-io500}"; mpi_opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) np="$2"; shift 2 ;;
    --allow-run-as-root) mpi_opts+=(--allow-run-as-root); shift ;;
    --oversubscribe) mpi_opts+=(--oversubscribe); shift ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    --io500) io500="$2"; shift 2 ;;
    *) echo "io500.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
: "${MADFS_CLUSTER:?set MADFS_CLUSTER (scripts/cluster.sh or scripts/mpi-cluster.sh print it)}"
lib="${MADFS_LIB:-$repo/target/release/libmadfs.so}"
[ -f "$lib" ] || { echo "io500.sh: $lib not found (cargo build --release)" >&2; exit 1; }
command -v "$io500" >/dev/null 2>&1 || [ -x "$io500" ] || { echo "io500.sh: io500 binary '$io500' not found (--io500 PATH)" >&2; exit 1; }
find_bin="${MADFS_FIND:-$repo/target/release/madfs-find}"
sections='^\[find(-easy|-hard)?\]'
if ! awk -v re="$sections" '/^\[/ { f = ($0 ~ re) } f && /^[ \t]*external-script[ \t]*=[ \t]*[^ \t]/ { found = 1 } END { exit !found }' "$config"; then
  [ -x "$find_bin" ] || { echo "io500.sh: $find_bin not found (cargo build --release)" >&2; exit 1; }
  wired="$(mktemp /tmp/io500-madfs.XXXXXX.ini)"
  awk -v re="$sections" -v s="$find_bin" '
    /^\[/ { f = ($0 ~ re); print; if (f) { print "external-script = " s; seen = 1 }; next }
    f && /^[ \t]*external-script[ \t]*=/ { next }
    { print }
    END { if (!seen) { print "[find]"; print "external-script = " s } }' "$config" > "$wired"
  echo "io500.sh: find phases use $find_bin (config copy: $wired)" >&2
  config="$wired"
fi
# close does not fsync (the client's default, as POSIX): io500 runs `sync` after its mdtest
# write phases and passes -e to ior; MADFS_CLOSE_SYNC=1 from the caller still travels
export MADFS_MOUNT="${MADFS_MOUNT:-/madfs}" MADFS_CLOSE_SYNC="${MADFS_CLOSE_SYNC:-0}" MADFS_LOCAL_READS="${MADFS_LOCAL_READS:-1}"
export MADFS_TRANSPORT="${MADFS_TRANSPORT:-auto}" MADFS_UCX_AFTER="${MADFS_UCX_AFTER:-256}"
hostopt=()
[ -n "$hostfile" ] && hostopt=(--hostfile "$hostfile")
exec mpirun "${mpi_opts[@]}" "${hostopt[@]}" -np "$np" \
  -x LD_PRELOAD="$lib" -x MADFS_CLUSTER -x MADFS_MOUNT -x MADFS_CLOSE_SYNC -x MADFS_LOCAL_READS \
  -x UCX_NET_DEVICES -x UCX_TLS -x MADFS_UCX_ERR_MODE -x MADFS_TRANSPORT -x MADFS_UCX_AFTER \
  "$io500" "$config"
