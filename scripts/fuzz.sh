#!/usr/bin/env bash
# The protocol decoders' fuzz target (crates/proto/fuzz) for a bounded time:
#
#   scripts/fuzz.sh [SECONDS]      (default 60; CI runs it from scripts/test.sh)
#
# It starts from the seed corpus and every input that ever crashed a decoder
# (crates/proto/fuzz/crashes), keeps what libFuzzer learns in a scratch directory, and fails
# when a decoder panics (the input is left in crates/proto/fuzz/artifacts/frame/: add it to
# crashes/ with the fix). Needs a nightly toolchain (libFuzzer's instrumentation); where none
# is installed it says so and skips. Installs cargo-fuzz when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: skipped (no nightly toolchain; see crates/proto/fuzz/README.md)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install --quiet --locked cargo-fuzz
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/corpus"
cd crates/proto/fuzz
set +e
cargo +nightly fuzz run --release --sanitizer none frame "$scratch/corpus" corpus/frame crashes -- \
  -max_total_time="$secs" -timeout=10 -print_final_stats=1 -rss_limit_mb=2048 >"$scratch/log" 2>&1
rc=$?
set -e
grep -E '^(INFO: seed corpus|stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs)' "$scratch/log" || true
grep -E '^#[0-9]+' "$scratch/log" | tail -n 1 || true   # coverage: cov (edges), ft (features)
if [ "$rc" -ne 0 ]; then
  tail -n 40 "$scratch/log"
  echo "fuzz: FAILED (exit $rc); the input is in crates/proto/fuzz/artifacts/frame/" >&2
  exit "$rc"
fi
echo "fuzz: no decoder panicked in ${secs} s"
