#!/usr/bin/env bash
# Run pjdfstest (POSIX conformance tests) on madfs through the LD_PRELOAD library.
#
#   scripts/pjdfstest.sh --pjdfstest DIR --bin BINDIR [--auth munge|key|insecure]
#                        [--servers N] [--timeout SECS] [--keep] [FOLDER...]
#
# DIR is a pjdfstest checkout the user built outside this repository (DIR/pjdfstest and
# DIR/tests/; see pjdfstest's own README); this script neither fetches nor builds it.
# BINDIR holds madfs-server, madfs-ctl, libmadfs.so and libmadfs_core.so (e.g. target/release). FOLDERs are
# subdirectories of DIR/tests (default: chmod chown open unlink rename mkdir rmdir).
#
# It starts a private cluster of N (default 3) madfs-server processes on 127.0.0.1 in a
# temporary directory, with --auth munge (plus a private munged with a throw-away key, found
# through MADFS_MUNGE_SOCKET), --insecure, or neither (the server's default, key mode); flags
# the server binary does not list in --help (older builds) are left out. Then, per FOLDER,
# `prove -v -r DIR/tests/FOLDER` runs under LD_PRELOAD=BINDIR/libmadfs.so with its working
# directory in a fresh directory under /madfs (pjdfstest works in the current directory),
# bounded by `timeout` (default 600 s per folder). It prints per folder the test files passed
# / total and the assertions (`ok ` / `not ok ` TAP lines, TODO included as written) ok /
# total, and a total line. Full prove output goes to WORK/FOLDER.log (WORK is printed; kept
# with --keep, else removed). The cluster and munged are stopped on exit, also on failure.
# pjdfstest needs root (most tests change users); exit status 0 unless the setup fails.
set -euo pipefail

usage() { sed -n '2,22p' "$0" >&2; exit 2; }

pjd=""; bin=""; auth=""; nservers=3; per_folder=600; keep=0; folders=()
while [ $# -gt 0 ]; do
  case "$1" in
    --pjdfstest) pjd="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --auth) auth="$2"; shift 2 ;;
    --servers) nservers="$2"; shift 2 ;;
    --timeout) per_folder="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage ;;
    -*) echo "pjdfstest.sh: unknown option $1" >&2; usage ;;
    *) folders+=("$1"); shift ;;
  esac
done
[ -n "$pjd" ] && [ -n "$bin" ] || usage
[ "${#folders[@]}" -gt 0 ] || folders=(chmod chown open unlink rename mkdir rmdir)
case "$auth" in ""|munge|key|insecure) ;; *) echo "pjdfstest.sh: --auth munge|key|insecure" >&2; exit 2 ;; esac
pjd="$(realpath "$pjd")"; bin="$(realpath "$bin")"
[ -x "$pjd/pjdfstest" ] && [ -d "$pjd/tests" ] || { echo "pjdfstest.sh: no built pjdfstest in $pjd" >&2; exit 1; }
for f in madfs-server madfs-ctl libmadfs.so; do
  [ -e "$bin/$f" ] || { echo "pjdfstest.sh: $bin/$f missing" >&2; exit 1; }
done
if grep -qa libmadfs_core.so "$bin/libmadfs.so" && [ ! -e "$bin/libmadfs_core.so" ]; then
  echo "pjdfstest.sh: $bin/libmadfs.so loads libmadfs_core.so from its own directory: missing" >&2; exit 1
fi
for f in "${folders[@]}"; do
  [ -d "$pjd/tests/$f" ] || { echo "pjdfstest.sh: no test folder $pjd/tests/$f" >&2; exit 1; }
done
command -v prove >/dev/null || { echo "pjdfstest.sh: prove (perl) not found" >&2; exit 1; }
[ "$(id -u)" = 0 ] || echo "pjdfstest.sh: warning: not root; most pjdfstest cases need root" >&2

work="$(mktemp -d /tmp/madfs-pjdfstest.XXXXXX)"
chmod 755 "$work"   # tests run as other users too: they must reach the cluster file / munge socket
cluster="$work/cluster"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
server_pids=()
munged_pid=""

cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  if [ "${#server_pids[@]}" -gt 0 ]; then
    [ -f "$cluster" ] && timeout 20 "$bin/madfs-ctl" stop --cluster "$cluster" >/dev/null 2>&1 || true
    for pid in "${server_pids[@]}"; do
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${server_pids[@]}"; do
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    done
  fi
  if [ -n "$munged_pid" ]; then
    kill -TERM "$munged_pid" 2>/dev/null || true
    wait "$munged_pid" 2>/dev/null || true
  fi
  if [ "$keep" = 1 ] || [ "$rc" != 0 ]; then
    echo "pjdfstest.sh: logs kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- munged ------------------------------------------------------------------------------
if [ "$auth" = munge ]; then
  command -v munged >/dev/null || { echo "pjdfstest.sh: munged not found (apt install munge)" >&2; exit 1; }
  m="$work/munge"; mkdir -m 755 "$m"
  (umask 077; head -c 1024 /dev/urandom >"$m/key")
  chmod 600 "$m/key"
  munged --foreground --force --socket="$m/sock" --key-file="$m/key" --pid-file="$m/munged.pid" \
    --seed-file="$m/munged.seed" --log-file="$m/munged.log" >/dev/null 2>"$m/munged.err" </dev/null &
  munged_pid=$!
  for _ in $(seq 100); do [ -S "$m/sock" ] && break; kill -0 "$munged_pid" 2>/dev/null || break; sleep 0.1; done
  [ -S "$m/sock" ] || { echo "pjdfstest.sh: munged did not start:" >&2; cat "$m/munged.err" "$m/munged.log" >&2 2>/dev/null || true; exit 1; }
  export MADFS_MUNGE_SOCKET="$m/sock"
fi

# --- servers -----------------------------------------------------------------------------
help="$("$bin/madfs-server" --help 2>&1 || true)"
knows() { grep -q -- "$1\b" <<<"$help"; }
extra=()
case "$auth" in
  munge) knows --auth || { echo "pjdfstest.sh: this madfs-server has no --auth" >&2; exit 1; }
         extra+=(--auth munge) ;;
  key) knows --auth && extra+=(--auth key) ;;
  insecure) if knows --insecure; then extra+=(--insecure)
            else echo "pjdfstest.sh: note: madfs-server has no --insecure (no authentication at all)" >&2; fi ;;
esac
knows --servers && extra+=(--servers "$nservers")
for ((i = 0; i < nservers; i++)); do
  "$bin/madfs-server" --id "$i" --listen 127.0.0.1:0 --control 127.0.0.1:0 \
    --data-dir "$work/server$i" --cluster-file "$cluster" "${extra[@]}" \
    >"$work/server$i.log" 2>&1 </dev/null &
  server_pids+=($!)
done
up=0
for _ in $(seq 300); do   # 60 s
  if timeout 10 "$bin/madfs-ctl" status --cluster "$cluster" --expect "$nservers" >"$work/status" 2>&1; then
    up=1; break
  fi
  for pid in "${server_pids[@]}"; do kill -0 "$pid" 2>/dev/null || break 2; done
  sleep 0.2
done
if [ "$up" != 1 ]; then
  echo "pjdfstest.sh: servers did not come up:" >&2
  tail -n 20 "$work/status" "$work"/server*.log >&2 || true
  exit 1
fi
echo "pjdfstest.sh: $nservers servers up (${extra[*]:-no extra flags}); work dir $work" >&2

# --- tests -------------------------------------------------------------------------------
export MADFS_CLUSTER="$cluster"
preload="$bin/libmadfs.so"
top="/madfs/pjdfstest-$(date +%s)-$$"
LD_PRELOAD="$preload" mkdir "$top"
LD_PRELOAD="$preload" chmod 777 "$top" || true

rows=()
tf=0; tfp=0; ta=0; tok=0
t_all=$SECONDS
for f in "${folders[@]}"; do
  log="$work/$f.log"
  t0=$SECONDS
  LD_PRELOAD="$preload" mkdir "$top/$f"
  LD_PRELOAD="$preload" chmod 777 "$top/$f" || true
  rc=0
  # timeout makes its own process group and signals all of it: prove and every test below it
  timeout -k 10 "$per_folder" env LD_PRELOAD="$preload" bash -c 'cd "$1" && exec prove -v -r "$2"' \
    _ "$top/$f" "$pjd/tests/$f" >"$log" 2>&1 </dev/null || rc=$?
  secs=$((SECONDS - t0))
  files=$(find "$pjd/tests/$f" -name '*.t' | wc -l)
  failed=$(grep -cE '^[^ ]+\.t \(Wstat: ' "$log" || true)
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    note="TIMEOUT after ${per_folder}s"
    # files prove finished without a failure line before the timeout
    passed=$(grep -cE '^[^ ]+\.t \.+ ok$|^ok$' "$log" || true)
  else
    note=""; [ "$rc" = 0 ] || note="prove rc=$rc"
    passed=$((files - failed))
  fi
  ok=$(grep -c '^ok ' "$log" || true)
  nok=$(grep -c '^not ok ' "$log" || true)
  rows+=("$(printf '%-10s %5s/%-5s %7s/%-7s %6ss  %s' "$f" "$passed" "$files" "$ok" "$((ok + nok))" "$secs" "$note")")
  echo "${rows[-1]}" >&2
  tf=$((tf + files)); tfp=$((tfp + passed)); tok=$((tok + ok)); ta=$((ta + ok + nok))
done

echo
printf '%-10s %11s %15s %7s\n' folder "files ok" "assertions ok" time
for r in "${rows[@]}"; do echo "$r"; done
printf '%-10s %5s/%-5s %7s/%-7s %6ss\n' TOTAL "$tfp" "$tf" "$tok" "$ta" "$((SECONDS - t_all))"
echo "(logs: $work/FOLDER.log$([ "$keep" = 1 ] || echo ', removed at exit; --keep keeps them'))"
