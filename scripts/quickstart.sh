#!/usr/bin/env bash
# madfs quickstart on a fresh Debian machine: installs what is missing, builds release, starts
# a local 2-server cluster, runs the IO500 phases through LD_PRELOAD=libmadfs.so beside the
# same phases on a local directory (`madfs-bench io500 --compare`, short stonewall), prints
# the table and where the chart and JSON are, and stops the cluster.
#
#   scripts/quickstart.sh [--stonewall SECONDS] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
stonewall=5; out="$PWD/target/quickstart"
while [ $# -gt 0 ]; do
  case "$1" in
    --stonewall) stonewall="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "quickstart.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
scripts/install-deps.sh
cargo build --release --workspace
mkdir -p "$out"
root="$(mktemp -d /tmp/madfs-quickstart.XXXXXX)"
trap 'scripts/cluster.sh stop --root "$root" >/dev/null 2>&1 || true; rm -rf "$root"' EXIT
eval "$(scripts/cluster.sh start -n 2 --root "$root")"
echo "== cluster file: $MADFS_CLUSTER"
# the mount prefix as a real directory, so that `..` of /madfs paths resolves as on a mount
[ -d /madfs ] || mkdir -p /madfs 2>/dev/null || sudo mkdir -p /madfs
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
target/release/madfs mkdir /quickstart 2>/dev/null || true
echo "== madfs-bench io500 --compare: madfs (2 servers, libmadfs.so) vs $root/local"
target/release/madfs-bench io500 --compare --ranks 2 --stonewall "$stonewall" \
  --dir /madfs/quickstart --local-dir "$root/local" --easy-max 2g --rand-size 64m \
  --json "$out/io500.json" --chart "$out/io500.png"
target/release/madfs rmdir /quickstart
echo "== done: table above; chart $out/io500.png, JSON $out/io500.json"
