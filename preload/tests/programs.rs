//! Real programs under `LD_PRELOAD=libmadfs.so` against 3 real servers on loopback:
//! coreutils, tar, python, fio, shell redirections through exec, and errno-exact syscalls.

mod common;

use common::{cluster, ok, scripts};
use madfs_cluster::{find_bin, LocalCluster};
use std::process::{Command, Output};

/// Call deadline of the programs here.
const TIMEOUT_MS: u32 = 20_000;

/// Runs a bash script with the preload library; returns its output (asserting success).
fn bash(cl: &LocalCluster, script: &str) -> String {
    common::bash(cl, script, TIMEOUT_MS)
}

fn run(cl: &LocalCluster, argv: &[&str]) -> Output {
    common::run(cl, argv, TIMEOUT_MS)
}

/// Runs a python3 script with the preload library and checks it printed `done`.
fn python_prints(cl: &LocalCluster, script: &str, done: &str) {
    python_prints_env(cl, script, done, &[])
}

/// [`python_prints`] with extra environment variables.
fn python_prints_env(cl: &LocalCluster, script: &str, done: &str, env: &[(&str, &str)]) {
    let path = cl.root().join("script.py");
    std::fs::write(&path, script).unwrap();
    let python = ["/usr/bin/python3", path.to_str().unwrap()];
    let out = common::run_env(cl, &python, TIMEOUT_MS, env);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(done),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn coreutils() {
    let cl = cluster();
    let out = bash(&cl, scripts::COREUTILS);
    for e in scripts::COREUTILS_EXPECT {
        assert!(out.contains(e), "missing {e:?} in:\n{out}");
    }
}

#[test]
fn tar_tree_in_and_out() {
    let cl = cluster();
    let out = bash(&cl, scripts::TAR_INCLUDE);
    assert!(out.contains("trees identical"), "{out}");
    let counts: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(counts[0], counts[1], "{out}");

    // a tree with symbolic links and modes, extracted into madfs as it is: tar sets the
    // links' times and owners (AT_SYMLINK_NOFOLLOW, lchown) and the directories' modes (glibc
    // changes them through /proc/self/fd/N); it used to exit 2 and leave directories 0700
    let out = bash(&cl, scripts::TAR_LINKS);
    scripts::check_tar_links(&out, "/madfs");
}

/// `cp -a` and tar keep times: they set a file's times through its descriptor before they
/// close it (a size published at the close used to become the modification time), and a
/// directory's after filling it (a late directory-time update used to overwrite them).
#[test]
fn cp_and_tar_keep_times() {
    let cl = cluster();
    let out = bash(&cl, scripts::KEEP_TIMES);
    assert!(out.contains("TIMES-OK"), "{out}");
}

/// A `fork` child of a process that never touched the mount loads the core itself and uses
/// madfs, and so does its own fork child; a shell's subshell writes a file of the mount as
/// its shell's first madfs access. (The front makes such a fork in its hook and gives the
/// child its pid there: a core that took the child for a `vfork` child of its parent
/// refused its opens with ENOTSUP.)
#[test]
fn fork_children_of_a_process_that_never_touched_the_mount() {
    let cl = cluster();
    python_prints(
        &cl,
        r#"
import os
pid = os.fork()
if pid == 0:
    os.makedirs("/madfs/fk", exist_ok=True)
    with open("/madfs/fk/child", "w") as f: f.write("child")
    grandchild = os.fork()
    if grandchild == 0:
        with open("/madfs/fk/grandchild", "w") as f: f.write("grandchild")
        os._exit(0)
    os._exit(os.waitpid(grandchild, 0)[1])
assert os.waitpid(pid, 0)[1] == 0
assert open("/madfs/fk/child").read() == "child"
assert open("/madfs/fk/grandchild").read() == "grandchild"
print("FORK-OK")
"#,
        "FORK-OK",
    );
    let out = bash(
        &cl,
        "( echo from the subshell > /madfs/fk/sub ); cat /madfs/fk/sub",
    );
    assert_eq!(out, "from the subshell\n");
}

#[test]
fn python_walk_replace_threads_subprocess_fork() {
    let cl = cluster();
    python_prints(&cl, scripts::PYTHON, "PY-OK");
}

/// A process maps libc with its fd syscalls of known number unpatched (they go straight to
/// the kernel while it has no madfs fd) and patches them at its first madfs path
/// (`vendor/PATCHES.md` syscall-intercept 18): here while other threads keep making those
/// syscalls on a host fd. None of them may fail or crash, and the madfs fds made after the
/// switch (in four threads at once) must be served by madfs. The run has an interception
/// cache of its own, warmed first, so that libc comes from the bundle and the switch
/// happens (a process that patches in place patches everything at once): `fstatfs`'s site
/// is seen unpatched before and patched after.
#[test]
fn fd_syscalls_are_patched_while_threads_run() {
    let cl = cluster();
    let cache = cl.root().join("threads-cache");
    let env = [("MADFS_INTERCEPT_CACHE", cache.to_str().unwrap())];
    ok(
        common::run_env(&cl, &["/usr/bin/python3", "-c", "pass"], TIMEOUT_MS, &env),
        "warming the interception cache",
    );
    python_prints_env(
        &cl,
        r#"
import os, threading, time, ctypes, platform
def site(name):
    # as madfs-syscall's `patched`: is the function's first `syscall` still reached?
    # (x86_64: aarch64 defers no site)
    if platform.machine() != "x86_64":
        return "unpatched" if want_unpatched else "patched"
    code = ctypes.string_at(ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value, 32)
    i = code.find(b"\x0f\x05")
    return "unpatched" if i >= 0 and (i < 5 or code[i - 5] != 0xe9) else "patched"
want_unpatched = True
assert site("fstatfs") == "unpatched", "fd sites patched before the first madfs path"
host = os.open("/etc/services", os.O_RDONLY)
head = os.pread(host, 64, 0)
stop, errors, counts = False, [], []
def hammer():
    n = 0
    try:
        while not stop:
            assert os.fstat(host).st_size > 0
            assert os.pread(host, 64, 0) == head
            os.close(os.dup(host))
            os.lseek(host, 0, os.SEEK_SET)
            n += 1
    except Exception as e:
        errors.append(repr(e))
    counts.append(n)
ts = [threading.Thread(target=hammer) for _ in range(4)]
[t.start() for t in ts]
time.sleep(0.2)
fd = os.open("/madfs/deferred", os.O_RDWR | os.O_CREAT, 0o644)
want_unpatched = False
assert site("fstatfs") == "patched", "fd sites not patched at the first madfs path"
os.pwrite(fd, b"x" * 4096, 0)
def writer(i):
    f = os.open(f"/madfs/deferred{i}", os.O_RDWR | os.O_CREAT, 0o644)
    for k in range(100):
        os.pwrite(f, bytes([i]) * 100, k * 100)
    assert os.fstat(f).st_size == 10000
    os.close(f)
ws = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
[w.start() for w in ws]; [w.join() for w in ws]
time.sleep(0.1)
stop = True
[t.join() for t in ts]
assert not errors, errors
assert min(counts) > 0, counts
assert os.pread(fd, 4096, 0) == b"x" * 4096
os.close(fd)
for i in range(4):
    assert open(f"/madfs/deferred{i}", "rb").read() == bytes([i]) * 10000, i
print("DEFERRED-OK")
"#,
        "DEFERRED-OK",
        &env,
    );
}

/// The same name in every form a syscall can carry it, on the mount and beside it on the
/// host: relative to a directory fd, the fd itself (`AT_EMPTY_PATH`), `/proc/self/fd/N`,
/// `mmap`'s fd in its fifth argument, relative to the working directory on either side, and
/// after a `vfork` child chose a madfs working directory. The interception engine lets host
/// syscalls through without calling the hook (its fast pass-through): none of the madfs
/// forms may slip through with them, and the host forms must reach the kernel.
#[test]
fn host_and_madfs_names_in_every_form() {
    let cl = cluster();
    let script = cl.root().join("forms.py");
    std::fs::write(
        &script,
        r#"
import os, sys, mmap, errno, stat, subprocess
host = os.environ["T"] + "/forms"
base = "/madfs/forms"
os.makedirs(base + "/d"); os.makedirs(host)
with open(base + "/d/x", "w") as f: f.write("madfs x\n")
with open(host + "/x", "w") as f: f.write("host x\n")
md = os.open(base + "/d", os.O_RDONLY | os.O_DIRECTORY)
hd = os.open(host, os.O_RDONLY | os.O_DIRECTORY)
assert os.read(os.open("x", os.O_RDONLY, dir_fd=md), 100) == b"madfs x\n"
assert os.read(os.open("x", os.O_RDONLY, dir_fd=hd), 100) == b"host x\n"
assert os.stat("x", dir_fd=md).st_size == 8 and os.stat("x", dir_fd=hd).st_size == 7
assert os.access("x", os.R_OK, dir_fd=md) and not os.access("y", os.R_OK, dir_fd=md)
assert stat.S_ISDIR(os.stat(md).st_mode) and stat.S_ISDIR(os.stat(hd).st_mode)
assert os.stat(md).st_ino != os.stat(hd).st_ino
os.mkdir("sub", dir_fd=md); assert os.path.isdir(base + "/d/sub")
os.rmdir("sub", dir_fd=md); assert not os.path.exists(base + "/d/sub")
fd = os.open(base + "/d/x", os.O_RDONLY)
os.chmod("/proc/self/fd/%d" % fd, 0o600)
assert stat.S_IMODE(os.stat(base + "/d/x").st_mode) == 0o600
try:
    mmap.mmap(fd, 8, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    raise SystemExit("a shared mapping of a madfs fd worked")
except OSError as e:
    assert e.errno == errno.ENODEV, e
hf = os.open(host + "/x", os.O_RDONLY)
assert mmap.mmap(hf, 7, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)[:] == b"host x\n"
os.chdir(base + "/d")
assert open("x").read() == "madfs x\n" and os.access("x", os.R_OK) and os.stat("x").st_size == 8
os.chdir(host)
assert open("x").read() == "host x\n" and os.stat("x").st_size == 7
out = subprocess.run(["/bin/cat", "x"], cwd=base + "/d", capture_output=True, check=True).stdout
assert out == b"madfs x\n", out
assert open("x").read() == "host x\n" and os.stat("x").st_size == 7
os.chdir(base + "/d")
assert open("x").read() == "madfs x\n"
os.chdir("/")
assert open(os.path.relpath(host + "/x")).read() == "host x\n"
print("FORMS-OK")
"#,
    )
    .unwrap();
    let out = run(&cl, &["/usr/bin/python3", script.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("FORMS-OK"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// git reads its config, index and packs through `mmap(MAP_PRIVATE)` (it failed at `git init`
/// with ENODEV before private mappings were served); it links its objects into place (hard
/// links). Python's mmap: a copy-on-write mapping sees the file and never writes it, a shared
/// one is refused with ENODEV, an offset mapping starts there.
#[test]
fn git_and_private_mmap() {
    let cl = cluster();
    let out = bash(
        &cl,
        r#"
        mkdir -p /madfs/git && cd /madfs/git
        git init -q repo && cd repo
        g() { git -c user.email=t@madfs -c user.name=t "$@"; }
        seq 1 20000 > numbers && cp /etc/services services
        g add numbers services && g commit -qm first
        echo more >> numbers && g commit -qam second
        g log --oneline | wc -l
        g status --porcelain | wc -l
        g diff --stat HEAD~1 | tail -1
        g gc -q && g fsck --no-progress && echo "fsck ok"
        g clone -q /madfs/git/repo /madfs/git/clone
        cmp /madfs/git/clone/services /etc/services && echo "clone ok"
        python3 - <<'PY'
import mmap, os, errno
p = "/madfs/git/m.bin"
data = bytes(range(256)) * 100
with open(p, "wb") as f: f.write(data)
with open(p, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    assert m[:] == data and len(m) == len(data)
    m[0:4] = b"XXXX"
    assert m[0:4] == b"XXXX"
    m.close()
    o = mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_COPY, offset=mmap.ALLOCATIONGRANULARITY)
    g = mmap.ALLOCATIONGRANULARITY
    assert o[:] == data[g:g + 4096]
    o.close()
    try:
        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        raise SystemExit("shared mapping accepted")
    except OSError as e:
        assert e.errno == errno.ENODEV, e
assert open(p, "rb").read() == data
print("mmap ok")
PY
        "#,
    );
    assert!(
        out.starts_with("2\n0\n 1 file changed, 1 insertion(+)\nfsck ok\nclone ok\nmmap ok"),
        "{out}"
    );
}

/// Programs that edit in place, spill to temporary files, compress, run in parallel or keep
/// a database: `sed -i` and `perl -pi` (a new file renamed over the old), `sort -T` on the
/// mount (its merge files), `gzip`, four `xargs` workers, Python's `shutil.copytree`/
/// `rmtree` and `tempfile`, and SQLite — with its lock-file VFS (`vfs=unix-dotfile`, the
/// workaround docs/operations.md gives), while its default VFS reports "database is
/// locked" (record locks are answered with ENOLCK).
#[test]
fn editors_archivers_and_databases() {
    let cl = cluster();
    let out = bash(
        &cl,
        r#"
        mkdir -p /madfs/ed && cd /madfs/ed
        printf 'a\nb\nc\n' > f && sed -i 's/b/B/' f && perl -pi -e 's/c/C/' f
        echo "edited $(tr '\n' ' ' < f)"
        seq 1 200000 | awk '{ print ($1 * 7919) % 200003 }' > nums
        sort -n -S 1M -T /madfs/ed nums > sorted && sort -n -c sorted && echo "sort ok $(wc -l < sorted)"
        [ -z "$(ls /madfs/ed | grep -v -x -e f -e nums -e sorted)" ] && echo "no spill left"
        gzip -k nums && gunzip -c nums.gz | cmp - nums && echo "gzip ok"
        seq 1 24 | xargs -P 4 -I{} sh -c 'seq {} > /madfs/ed/x{} && [ "$(wc -l < /madfs/ed/x{})" = {} ]'
        echo "xargs $(ls /madfs/ed | grep -c '^x')"
        python3 - <<'PY'
import os, shutil, sqlite3, tempfile
shutil.copytree("/usr/include/linux", "/madfs/ed/lin")
n = sum(len(fs) for _, _, fs in os.walk("/madfs/ed/lin"))
assert n == sum(len(fs) for _, _, fs in os.walk("/usr/include/linux")), n
shutil.rmtree("/madfs/ed/lin")
assert not os.path.exists("/madfs/ed/lin")
with tempfile.TemporaryDirectory(dir="/madfs/ed") as d:
    with open(os.path.join(d, "t"), "w") as f:
        f.write("t")
    assert os.listdir(d) == ["t"]
assert not os.path.exists(d)
uri = "file:/madfs/ed/db.sqlite?vfs=unix-dotfile"
db = sqlite3.connect(uri, uri=True)
db.execute("create table t(a integer primary key, b text)")
with db:
    db.executemany("insert into t(b) values (?)", [("x" * 100,)] * 5000)
db.close()
db = sqlite3.connect(uri, uri=True)
assert db.execute("select count(*), sum(length(b)) from t").fetchone() == (5000, 500000)
assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
db.close()
try:
    sqlite3.connect("/madfs/ed/db.sqlite").execute("select count(*) from t").fetchone()
    raise SystemExit("default VFS took a lock")
except sqlite3.OperationalError as e:
    assert "locked" in str(e), e
print("python ok")
PY
        "#,
    );
    assert_eq!(
        out,
        "edited a B C \nsort ok 200000\nno spill left\ngzip ok\nxargs 24\npython ok\n"
    );
}

/// Programs stored on the mount run: a binary the compiler wrote there, a copy of a system
/// binary (also through a link and `PATH`), scripts whose interpreter is outside or on the
/// mount; a file without an exec bit is refused (EACCES). Python starts them with
/// `subprocess` (a `vfork` child, which goes through `/bin/sh`) and `posix_spawn`, and its
/// own later madfs calls still work (a `vfork` child's exec from inside the hook once left
/// the parent thread marked as inside the hook); `subprocess` with `cwd=` on the mount (a
/// `chdir` in the `vfork` child, refused with ENOTSUP before) starts the child there and
/// leaves the parent where it was.
#[test]
fn programs_stored_on_the_mount_run() {
    let cl = cluster();
    let out = bash(
        &cl,
        r#"
        mkdir -p /madfs/bin && cd /madfs/bin
        printf '#include <stdio.h>\nint main(int c, char **v) { printf("compiled %%s\\n", v[1]); return 3; }\n' > p.c
        gcc -o prog p.c
        ./prog ok || echo "rc $?"
        cp /bin/echo myecho && chmod +x myecho
        ln -s myecho linked && ./linked via link
        PATH=/madfs/bin:$PATH myecho via PATH
        printf '#!/bin/sh\necho "script $0 $*"\n' > s.sh && chmod +x s.sh && ./s.sh a b
        printf '#!/madfs/bin/myecho interp-arg\n' > i.sh && chmod +x i.sh && ./i.sh x
        echo data > noexec && { ./noexec 2>/dev/null || echo "noexec rc $?"; }
        python3 - <<'PY'
import subprocess, os
r = subprocess.run(["/madfs/bin/myecho", "from", "subprocess"], capture_output=True, text=True)
print(r.stdout.strip(), r.returncode)
r = subprocess.run(["./prog", "again"], capture_output=True, text=True)
print(r.stdout.strip(), r.returncode)
pid = os.posix_spawn("/madfs/bin/myecho", ["myecho", "posix_spawn"], os.environ)
print("spawn status", os.waitpid(pid, 0)[1])
os.chdir("/tmp")
r = subprocess.run(["/bin/sh", "-c", "pwd; ./prog in-cwd"], cwd="/madfs/bin", capture_output=True, text=True)
print(r.stdout.replace("\n", " ").strip(), r.returncode)
print(subprocess.run(["pwd"], cwd="/tmp", capture_output=True, text=True).stdout.strip(), os.getcwd())
a = subprocess.run(["pwd"], cwd="/madfs/bin", capture_output=True, text=True).stdout.strip()
b = subprocess.run(["pwd"], capture_output=True, text=True).stdout.strip()
print(a, b)
open("/madfs/bin/after", "w").write("parent ok")
print(open("/madfs/bin/after").read())
PY
        "#,
    );
    let want = "compiled ok\nrc 3\nvia link\nvia PATH\nscript ./s.sh a b\ninterp-arg ./i.sh x\n\
noexec rc 126\nfrom subprocess 0\ncompiled again 3\nposix_spawn\nspawn status 0\n\
/madfs/bin compiled in-cwd 3\n/tmp /tmp\n/madfs/bin /tmp\nparent ok\n";
    assert_eq!(out, want);
}

/// A CMake project configured, built (make, with CMake's progress report, which counts files
/// with `readdir` and checks errno) and run entirely on the mount.
#[test]
fn cmake_project_on_the_mount() {
    let cl = cluster();
    let out = bash(
        &cl,
        r#"
        mkdir -p /madfs/cm/build && cd /madfs/cm
        printf 'cmake_minimum_required(VERSION 3.10)\nproject(t C)\nadd_library(l STATIC l.c)\nadd_executable(t main.c)\ntarget_link_libraries(t l)\n' > CMakeLists.txt
        printf 'int l(void) { return 7; }\n' > l.c
        printf '#include <stdio.h>\nint l(void);\nint main(void) { printf("built %%d\\n", l()); return 0; }\n' > main.c
        cd build && cmake -S .. -B . > /dev/null && make 2>&1 | grep -o '^\[[ 0-9-]*%\]' | tr '\n' ' '; echo
        ./t
        "#,
    );
    assert_eq!(
        out, "[ 25%] [ 50%] [ 50%] [ 75%] [100%] [100%] \nbuilt 7\n",
        "{out}"
    );
}

/// `touch` reopens each file onto fd 0 (gnulib's `fd_reopen`) and closes it again: the
/// socket UCX opened to reach the next file's server took the free fd 0, and the next reopen
/// onto fd 0 closed it (files failed with EIO after the call timeout). A shell that used the
/// mount and then ran `exec 3>log` … `exec 9>log` closed UCX's pipes and epoll sets there and
/// was killed by UCX's async thread. The preload now makes a client's descriptors above the
/// program's low numbers, and connects to every server at once.
#[test]
fn touch_many_files_leaves_the_connections_alone() {
    let cl = cluster();
    bash(&cl, "mkdir /madfs/tc");
    let files: Vec<String> = (0..24).map(|i| format!("/madfs/tc/f{i}")).collect();
    let mut argv = vec!["/usr/bin/touch"];
    argv.extend(files.iter().map(String::as_str));
    let out = run(&cl, &argv);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("UCX"), "{err}");
    let listed = bash(&cl, "ls /madfs/tc | wc -l");
    assert_eq!(listed.trim(), "24");
    let out = bash(
        &cl,
        r#"
        cd /madfs/tc
        for i in 3 4 5 6 7 8 9; do eval "exec $i>/madfs/tc/log$i"; echo "line $i" >&$i; done
        for i in 3 4 5 6 7 8 9; do eval "exec $i>&-"; done
        cat log3 log9
        touch after && ls | wc -l
        "#,
    );
    assert_eq!(out, "line 3\nline 9\n32\n");
}

#[test]
fn fio_psync_and_sync_verify() {
    let cl = cluster();
    let job = cl.root().join("job.fio");
    std::fs::write(&job, scripts::FIO_JOB).unwrap();
    let out = bash(
        &cl,
        &format!(
            "mkdir /madfs/fio && cd $T && fio --output-format=terse {} ; echo rc=$?",
            job.display()
        ),
    );
    scripts::check_fio(&out);
}

#[test]
fn shell_redirections_through_exec() {
    let cl = cluster();
    let out = bash(
        &cl,
        r#"
        mkdir /madfs/sh
        sh -c 'cat /etc/services > /madfs/sh/x'
        cmp /etc/services /madfs/sh/x && echo "redirect ok"
        sh -c 'echo one >&2; echo two >&2' 2>>/madfs/sh/log
        sh -c 'echo three >&2' 2>>/madfs/sh/log
        cat /madfs/sh/log
        { cat /etc/hostname; cat /etc/hostname; } > /madfs/sh/two
        cat /etc/hostname /etc/hostname | cmp - /madfs/sh/two && echo "shared offset ok"
        exec 3>/madfs/sh/fd3
        echo via-builtin >&3
        sh -c 'echo via-child >&3'
        /usr/bin/python3 -c 'import os; os.write(3, b"via-python\n")'
        exec 3>&-
        cat /madfs/sh/fd3
        cd /madfs/sh && ls && sh -c 'pwd; cat x | wc -l'
        "#,
    );
    for e in [
        "redirect ok",
        "one\ntwo\nthree\n",
        "shared offset ok",
        "via-builtin\nvia-child\nvia-python\n",
        "fd3\nlog\ntwo\nx\n",
        "/madfs/sh\n361\n",
    ] {
        assert!(out.contains(e), "missing {e:?} in:\n{out}");
    }
}

#[test]
fn syscalls_errno_exact() {
    let cl = cluster();
    let steps = [
        "mkdir,/madfs/e",
        "open,/madfs/e/f,creat+excl+rw",
        "write,#0,hello",
        "lseek,#0,0,set",
        "read,#0,5",
        "lseek,#0,-1,set",
        "lseek,#0,0,bad",
        "lseek,#0,0,end",
        "pread,#0,3,-1",
        "fstat,#0",
        "close,#0",
        "close,#0",
        "open,/madfs/e/f,creat+excl+w",
        "open,/madfs/e,w",
        "open,/madfs/e/f,dir",
        "open,/madfs/nope",
        "rmdir,/madfs/e",
        "rmdir,/madfs/e/f",
        "unlink,/madfs/e",
        "mkdir,/madfs/e/f/g",
        "stat,/madfs/e/f/g",
        "open,/madfs/e/f,r",
        "write,#1,x",
        "fcntl-lock,#1",
        "mmap,#1",
        "mmap,#1,private",
        "mmap,#1,private,100",
        "ioctl,#1",
        "symlink,/x,/madfs/e/l",
        "link,/madfs/e/f,/madfs/e/h",
        "rename,/madfs/e/f,/tmp/elsewhere",
        "dup,#1",
        "fcntl-getfl,#2",
        "read,#2,100",
        "open,/madfs/e/f,w",
        "mmap,#3,private",
        "rawwrite,#3,lost",
        "close,#3",
        "chdir,/madfs/e",
        "getcwd",
        "stat,f",
        "unlink,/madfs/e/f",
        "unlink,/madfs/e/l",
        "unlink,/madfs/e/h",
        "chdir,/",
        "rmdir,/madfs/e",
    ];
    let out = common::syscalls(&cl, &steps, TIMEOUT_MS);
    let want = "mkdir OK 0\nopen OK *\nwrite OK 5\nlseek OK 0\ndata hello\nread OK 5\nlseek ERR EINVAL\n\
lseek ERR EINVAL\nlseek OK 5\npread ERR EINVAL\nsize 5 mode 100644\nfstat OK 0\nclose OK 0\nclose ERR EBADF\n\
open ERR EEXIST\nopen ERR EISDIR\nopen ERR ENOTDIR\nopen ERR ENOENT\nrmdir ERR ENOTEMPTY\nrmdir ERR ENOTDIR\n\
unlink ERR EISDIR\nmkdir ERR ENOTDIR\nstat ERR ENOTDIR\nopen OK *\nwrite ERR EBADF\nfcntl-lock ERR ENOLCK\n\
mmap ERR ENODEV\nmapped hello\nmmap OK 0\nmmap ERR EINVAL\nioctl ERR ENOTTY\nsymlink OK 0\nlink OK 0\nrename ERR EXDEV\ndup OK *\n\
fcntl-getfl OK 0\ndata hello\nread OK 5\nopen OK *\nmmap ERR EACCES\nrawwrite ERR EPERM\nclose OK 0\nchdir OK 0\ncwd /madfs/e\ngetcwd OK 0\nsize 5 mode 100644\nstat OK 0\n\
unlink OK 0\nunlink OK 0\nunlink OK 0\nchdir OK 0\nrmdir OK 0\n";
    let got: Vec<&str> = out.lines().collect();
    let exp: Vec<&str> = want.lines().collect();
    assert_eq!(got.len(), exp.len(), "{out}");
    for (g, e) in got.iter().zip(&exp) {
        match e.strip_suffix('*') {
            Some(prefix) => assert!(g.starts_with(prefix), "{g} vs {e}\n{out}"),
            None => assert_eq!(g, e, "\n{out}"),
        }
    }
}

#[test]
fn lazy_start_and_config_errors() {
    let cl = cluster();
    // a process that never touches the mount never reads the cluster file
    let out = Command::new("/bin/ls")
        .arg("/")
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env("MADFS_CLUSTER", "/nonexistent/cluster")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // a bad configuration: one clear line, ENOTCONN, no crash
    let out = Command::new("/bin/ls")
        .arg("/madfs")
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env_remove("MADFS_CLUSTER")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("MADFS_CLUSTER is not set"), "{err}");
    assert!(err.contains("Transport endpoint is not connected"), "{err}");
    assert_eq!(err.matches("libmadfs:").count(), 1, "{err}");
    // and the cluster itself is fine
    assert!(bash(&cl, "ls -d /madfs").contains("/madfs"));
}

/// libmadfs.so is only the front: the core (`libmadfs_core.so`) is loaded at the first madfs
/// path — also when that first access is a `vfork` child's (Python's `subprocess` with a
/// `cwd=` on the mount) — and a front without its core says so once and fails madfs paths
/// with ENOTCONN, nothing else.
#[test]
fn the_core_loads_at_the_first_madfs_path() {
    let cl = cluster();
    let maps = ok(run(&cl, &["/bin/cat", "/proc/self/maps"]), "cat maps");
    assert!(maps.contains("libmadfs.so"), "{maps}");
    assert!(!maps.contains("libmadfs_core.so"), "{maps}");
    bash(&cl, "mkdir -p /madfs/lz && echo hi > /madfs/lz/f");
    let script = r#"
import subprocess
def core(): return "libmadfs_core.so" in open("/proc/self/maps").read()
print("before", core())
print(subprocess.run(["/bin/sh", "-c", "pwd; cat f"], cwd="/madfs/lz", capture_output=True, text=True, check=True).stdout.split())
print("after", core())
print(open("/madfs/lz/f").read().strip())
"#;
    let out = ok(run(&cl, &["/usr/bin/python3", "-c", script]), "python");
    assert_eq!(
        out, "before False\n['/madfs/lz', 'hi']\nafter True\nhi\n",
        "{out}"
    );
    // the front alone
    let dir = cl.root().join("front-only");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(find_bin("libmadfs.so"), dir.join("libmadfs.so")).unwrap();
    let run_alone = |args: &[&str]| {
        Command::new(args[0])
            .args(&args[1..])
            .env("LD_PRELOAD", dir.join("libmadfs.so"))
            .env("MADFS_CLUSTER", cl.cluster_file())
            .output()
            .unwrap()
    };
    let out = run_alone(&["/bin/ls", "/"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let out = run_alone(&["/bin/ls", "/madfs/lz", "/madfs"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.matches("libmadfs: cannot load the core").count(),
        1,
        "{err}"
    );
    assert!(err.contains("libmadfs_core.so"), "{err}");
    assert_eq!(
        err.matches("Transport endpoint is not connected").count(),
        2,
        "{err}"
    );
    // a relative LD_PRELOAD name: the core is found beside it, from the directory the
    // program started in, also after the program changed directory
    let rel = cl.root().join("relative").join("lib");
    std::fs::create_dir_all(&rel).unwrap();
    for f in ["libmadfs.so", "libmadfs_core.so"] {
        std::fs::copy(find_bin(f), rel.join(f)).unwrap();
    }
    let out = Command::new("/bin/sh")
        .args(["-c", "cd / && read l < /madfs/lz/f && echo \"$l\""])
        .current_dir(rel.parent().unwrap())
        .env("LD_PRELOAD", "lib/libmadfs.so")
        .env("MADFS_CLUSTER", cl.cluster_file())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n", "{out:?}");
}

#[test]
fn madfs_find_matches_gnu_find() {
    let cl = cluster();
    let find = find_bin("madfs-find");
    let out = bash(
        &cl,
        &format!(
            r#"
        mkdir -p /madfs/ft/a/b /madfs/ft/c
        for i in $(seq 1 60); do head -c 3901 /dev/zero > /madfs/ft/a/f$i; head -c $((i*100)) /dev/zero > /madfs/ft/c/g$i; done
        touch /madfs/ft/stamp; sleep 0.05
        for i in 5 15 25; do head -c 3901 /dev/zero > /madfs/ft/a/b/new$i; done
        for args in "" "-type f" "-type d" "-size 3901c" "-name *1*" "-newer /madfs/ft/stamp" \
                    "-size 3901c -name *5* -type f" "-size 2k" "-size 8" "-newer /madfs/ft/stamp -size 3901c -name *5*"; do
          a=$(find /madfs/ft $args | sort | md5sum)
          b=$(LD_PRELOAD= {find} /madfs/ft $args | grep -v '^MATCHED' | sort | md5sum)
          if [ "$a" = "$b" ]; then echo "same: $args"; else echo "DIFF: $args"; fi
        done
        LD_PRELOAD= {find} /madfs/ft -size 3901c -count
        LD_PRELOAD= {find} /madfs/ft -size 12q 2>/dev/null || echo "bad size rc=$?"
        LD_PRELOAD= {find} /madfs/ft -name '[ab' 2>/dev/null || echo "bad glob rc=$?"
        "#,
            find = find.display()
        ),
    );
    assert!(!out.contains("DIFF"), "{out}");
    assert_eq!(out.matches("same:").count(), 10, "{out}");
    assert!(out.contains("MATCHED 63/"), "{out}");
    assert!(
        out.contains("bad size rc=2") && out.contains("bad glob rc=2"),
        "{out}"
    );
}

/// A thread starts on plain TCP and moves to UCX after 256 calls (`MADFS_UCX_AFTER`): a short
/// program never pays for starting UCX, a long one gets shared memory, and the files it has
/// open keep working across the move (their state lives in the descriptions).
#[test]
fn short_programs_stay_on_tcp_long_ones_move_to_ucx() {
    let cl = cluster();
    let moved = "[madfs] client: UCX from now on";
    let trace = [("MADFS_TRACE", "1")];
    let out = common::run_env(
        &cl,
        &[
            "/bin/bash",
            "-c",
            "echo hello > /madfs/short && cat /madfs/short",
        ],
        TIMEOUT_MS,
        &trace,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert!(!err.contains(moved), "a short program started UCX");

    // 600 calls with a file open for writing and one for reading across the move
    let script = r#"
import os
os.mkdir("/madfs/long")
w = open("/madfs/long/w", "wb", buffering=0)
r = open("/madfs/short", "rb", buffering=0)
for i in range(300):
    w.write(b"%05d\n" % i)
    os.stat("/madfs/long/w")
assert r.read() == b"hello\n"
w.close()
with open("/madfs/long/w", "rb") as f:
    assert f.read() == b"".join(b"%05d\n" % i for i in range(300))
print("long OK")
"#;
    let out = common::run_env(&cl, &["/usr/bin/python3", "-c", script], TIMEOUT_MS, &trace);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "long OK\n");
    assert_eq!(err.matches(moved).count(), 1, "{err}");

    // forced either way
    for (mode, moves) in [("tcp", 0), ("ucx", 0)] {
        let out = common::run_env(
            &cl,
            &["/bin/cat", "/madfs/short"],
            TIMEOUT_MS,
            &[("MADFS_TRACE", "1"), ("MADFS_TRANSPORT", mode)],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello\n",
            "{mode}: {err}"
        );
        assert_eq!(err.matches(moved).count(), moves, "{mode}");
    }
}

/// A call that times out fails with EIO and names its operation, the server and its address:
/// on the program's stderr by default (`MADFS_LOG`, level `warn`), in `MADFS_LOG_FILE` when
/// set, nowhere with `MADFS_LOG=off`; each line says which process wrote it.
#[test]
fn timeouts_name_the_server_and_operation() {
    let cl = cluster();
    bash(&cl, "echo hi > /madfs/logged");
    let pids: Vec<i32> = (0..3).map(|i| cl.pid(i).unwrap() as i32).collect();
    let signal = |sig| {
        for p in &pids {
            // SAFETY: kill(2) on this test's server processes.
            unsafe { libc::kill(*p, sig) };
        }
    };
    // every server frozen: the program's first call times out (over TCP, the transport a
    // program starts on, and over UCX)
    signal(libc::SIGSTOP);
    let stderr_of = |env: &[(&str, &str)]| {
        let out = common::run_env(&cl, &["/bin/cat", "/madfs/logged"], 1000, env);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for transport in ["tcp", "ucx"] {
        let err = stderr_of(&[("MADFS_TRANSPORT", transport)]);
        assert!(
            err.contains("madfs[")
                && err.contains("server 0 (127.0.0.1:")
                && err.contains("timed out after 1s"),
            "{transport}: {err}"
        );
        assert!(err.contains("127.0.0.1:"), "{transport}: {err}");
        assert!(err.contains("Input/output error"), "{transport}: {err}");
    }
    let file = cl.root().join("client.log");
    let err = stderr_of(&[("MADFS_LOG_FILE", file.to_str().unwrap())]);
    assert!(!err.contains("timed out"), "{err}");
    let logged = std::fs::read_to_string(&file).unwrap();
    assert!(logged.contains("timed out after 1s"), "{logged}");
    let err = stderr_of(&[("MADFS_LOG", "off")]);
    assert!(!err.contains("madfs["), "{err}");
    signal(libc::SIGCONT);
    assert_eq!(bash(&cl, "cat /madfs/logged"), "hi\n");
}
