#!/usr/bin/env bash
# The test command of madfs (README, CI): installs missing dependencies, checks formatting
# and lints, builds everything in release mode and runs every test (unit tests and integration
# tests that start real servers on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"   # keep test traffic on loopback

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo build --release"
cargo build --release --workspace
echo "== cargo test --release"
cargo test --release --workspace
