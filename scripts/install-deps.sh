#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test madfs (see shared STACK.md):
# UCX, clang (bindgen; RocksDB is built from source by librocksdb-sys), capstone (syscall interception), cmake, pkg-config, Open MPI,
# fio, git (a program test), a font for the bench chart, MUNGE and Slurm (client/tests/slurm.rs
# runs scripts/madfs-slurm.sh under a Slurm of its own), fuse3 (fusermount3 for madfs-fuse) and
# busybox-static, file (preload/tests/fuse.rs), and the rustfmt/clippy components. Idempotent; does nothing when all is present.
set -euo pipefail

pkgs=(libucx-dev ucx-utils libclang-dev libcapstone-dev cmake pkg-config build-essential
      openmpi-bin libopenmpi-dev fio python3 tar coreutils git fonts-dejavu-core
      munge libmunge2 slurm-wlm slurm-client fuse3 busybox-static file)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo not found; install Rust (rustup) first" >&2
  exit 1
fi
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
