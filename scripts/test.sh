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
echo "== docs/settings.md current (scripts/settings.sh --check)"
settings_rc=0
scripts/settings.sh --check || settings_rc=1
echo "== cargo test --release"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
cargo test --release --workspace --no-fail-fast 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
passed=$(grep -Eo '^test result: .* ([0-9]+) passed' "$log" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}')
echo "== fuzz (protocol decoders, bounded)"
if ! scripts/fuzz.sh "${MADFS_FUZZ_SECONDS:-60}"; then
  failed=$((failed + 1))
  rc=1
fi
if [ "$settings_rc" != 0 ]; then
  echo "docs/settings.md is not current (scripts/settings.sh)"
  failed=$((failed + 1))
  rc=1
fi
echo
echo "tests: $passed passed, $failed failed"
exit "$rc"
