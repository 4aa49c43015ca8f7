#!/usr/bin/env bash
# madfs quickstart on a fresh Debian machine: installs what is missing, builds release,
# starts a local 2-server cluster, makes a round trip through the client library, prints the
# UCX round-trip latencies, and stops the cluster. (The IO500-style comparison joins here as
# the bench grows.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --workspace
root="$(mktemp -d /tmp/madfs-quickstart.XXXXXX)"
trap 'scripts/cluster.sh stop --root "$root" || true; rm -rf "$root"' EXIT
eval "$(scripts/cluster.sh start -n 2 --root "$root")"
echo "== cluster file: $MADFS_CLUSTER"
target/release/madfs mkdir /quickstart
target/release/madfs put /etc/services /quickstart/services --sync
target/release/madfs get /quickstart/services - | cmp - /etc/services && echo "== round trip: /etc/services in and out, identical"
target/release/madfs ls /quickstart
target/release/madfs-ctl stats --cluster "$MADFS_CLUSTER"
echo "== RPC latency (separate local clusters, TCP and shared memory)"
target/release/madfs-bench rpc --iters 5000
