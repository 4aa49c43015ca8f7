#!/usr/bin/env bash
# Cross-builds madfs for aarch64 and runs its tests under qemu-aarch64 user-mode emulation.
#
#   scripts/check-aarch64.sh            set up the build root (cached), build, run the tests
#   scripts/check-aarch64.sh setup      only set up the build root
#   scripts/check-aarch64.sh shell      a shell in the build root, the repo at /src
#
# The build root is a Debian bookworm tree with both amd64 and arm64 packages (rustc-web with
# the arm64 standard library, the aarch64 cross gcc, qemu-user-static and the same UCX, RocksDB
# and capstone versions as on x86_64). It is made once with mmdebstrap and cached in
# $MADFS_ARM64_ROOT (default /var/cache/madfs/arm64-root); later runs reuse it. Needs root
# (chroot, mounts, binfmt_misc) and the Debian mirror.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
root=${MADFS_ARM64_ROOT:-/var/cache/madfs/arm64-root}
stamp="$root/.madfs-root-v1"
mode=${1:-all}

packages=(rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu
    g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static pkgconf:arm64 libclang-dev
    cmake make ca-certificates libucx-dev:arm64 librocksdb-dev:arm64 libcapstone-dev:arm64
    procps)

log() { printf '\n== %s\n' "$*"; }

setup_root() {
    if [[ -f $stamp ]]; then
        return
    fi
    if [[ $(id -u) != 0 ]]; then
        echo "check-aarch64: the build root needs root (mmdebstrap, chroot, mounts)" >&2
        exit 1
    fi
    if ! command -v mmdebstrap >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            mmdebstrap arch-test >/dev/null
    fi
    log "creating the bookworm amd64+arm64 build root in $root (once)"
    rm -rf "$root"
    mkdir -p "$(dirname "$root")"
    local mirror=http://deb.debian.org/debian
    local include
    include=$(
        IFS=,
        echo "${packages[*]}"
    )
    mmdebstrap --variant=apt --architectures=amd64,arm64 --include="$include" \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        bookworm "$root" \
        "deb $mirror bookworm main" \
        "deb $mirror bookworm-updates main" \
        "deb http://deb.debian.org/debian-security bookworm-security main"
    touch "$stamp"
}

mounted=()
cleanup() {
    local m
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        m=${mounted[i]}
        umount -l "$m" 2>/dev/null || true
    done
}

bind() { # bind SRC DST
    mkdir -p "$2"
    mount --bind "$1" "$2"
    mounted+=("$2")
}

enter_root() {
    trap cleanup EXIT
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
        cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    fi
    mkdir -p "$root/proc" "$root/sys" "$root/dev"
    mount -t proc proc "$root/proc"
    mounted+=("$root/proc")
    bind /sys "$root/sys"
    bind /dev "$root/dev"
    mkdir -p "$root/dev/shm"
    bind "$repo" "$root/src"
    local registry=${CARGO_HOME:-$HOME/.cargo}/registry
    mkdir -p "$registry"
    bind "$registry" "$root/root/.cargo/registry"
    # aarch64 programs started by aarch64 programs (servers, preload tests) need binfmt_misc.
    if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
    fi
    if [[ -e /proc/sys/fs/binfmt_misc/register && ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
        cp "$root/usr/bin/qemu-aarch64-static" /usr/local/bin/madfs-qemu-aarch64-static
        local magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
        local mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
        echo ":qemu-aarch64:M::$magic:$mask:/usr/local/bin/madfs-qemu-aarch64-static:F" \
            >/proc/sys/fs/binfmt_misc/register
    fi
}

in_root() { # in_root CMD...: runs CMD in the build root with the cross settings
    chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin \
        TERM="${TERM:-dumb}" \
        CARGO_HOME=/root/.cargo \
        CARGO_TARGET_DIR=/src/target/aarch64-check \
        CARGO_BUILD_TARGET=aarch64-unknown-linux-gnu \
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64-static \
        CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
        CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++ \
        PKG_CONFIG=aarch64-linux-gnu-pkg-config PKG_CONFIG_ALLOW_CROSS=1 \
        ROCKSDB_LIB_DIR=/usr/lib/aarch64-linux-gnu ROCKSDB_INCLUDE_DIR=/usr/include \
        BINDGEN_EXTRA_CLANG_ARGS="--target=aarch64-linux-gnu -I/usr/include/aarch64-linux-gnu" \
        QEMU_RESERVED_VA=0x1000000000 \
        UCX_NET_DEVICES=lo UCX_TLS=tcp,self \
        CFLAGS="-Wa,--noexecstack" \
        bash -c 'cd /src && "$@"' bash "$@"
}

setup_root
case $mode in
setup) exit 0 ;;
shell)
    enter_root
    in_root bash -i
    exit 0
    ;;
esac

enter_root
log "toolchain in the build root"
in_root bash -c 'rustc --version; cargo --version; aarch64-linux-gnu-gcc --version | head -1'

log "cross-building the workspace for aarch64-unknown-linux-gnu (debug)"
in_root cargo build --workspace --locked
in_root cargo test --workspace --locked --no-run

# Under emulation: every crate's unit tests, the interception engine's own tests, and the end
# to end tests that need no x86 program (the chroot's shell and coreutils are x86_64 and would
# ignore an aarch64 LD_PRELOAD): madfs-syscall under the aarch64 libmadfs.so against aarch64
# servers, and the client library against them.
log "tests under qemu-aarch64"
out=$(mktemp)
status=0
run_tests() { # run_tests CARGO_TEST_ARGS... -- TEST_BINARY_ARGS...
    in_root cargo test --locked "$@" 2>&1 | tee -a "$out"
    return "${PIPESTATUS[0]}"
}
one=--test-threads=1
run_tests --workspace --lib --bins -- $one || status=1
run_tests -p madfs-intercept --tests -- $one || status=1
run_tests -p madfs-preload --test engine_e2e -- $one || status=1
# the client's end-to-end tests, less what is too slow under emulation (1 GiB round trip),
# timing-bound (SIGKILL mid-stream against emulated restarts) or needs an x86 mpirun
run_tests -p madfs-client --test e2e -- $one --skip one_gib --skip sigkill_mid_stream \
    --skip mpirun || status=1

echo
echo "== tests run under emulation (aarch64):"
grep -E '^test .* \.\.\. (ok|FAILED|ignored)$' "$out" | sed 's/^/  /'
grep -E '^test result: ' "$out" | sed 's/^/  /'
passed=$(grep -cE '^test .* \.\.\. ok$' "$out" || true)
failed=$(grep -cE '^test .* \.\.\. FAILED$' "$out" || true)
rm -f "$out"
echo "aarch64: $passed passed, $failed failed"
if [[ $status != 0 || $failed != 0 ]]; then
    echo "check-aarch64: FAILED" >&2
    exit 1
fi
echo "check-aarch64: passed"
