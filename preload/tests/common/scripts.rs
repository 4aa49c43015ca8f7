//! Program scripts run both through the preload (`programs.rs`) and under a FUSE mount
//! (`fuse.rs`): each names the mount `/madfs`, which the FUSE tests replace by their mount
//! point.

/// coreutils on the mount (`$T`: a scratch directory outside it).
pub const COREUTILS: &str = r#"
        head -c 52428800 /dev/urandom > "$T/rand50"
        mkdir /madfs/cu
        cp "$T/rand50" /madfs/cu/rand50
        cp /madfs/cu/rand50 "$T/rand50.back"
        a=$(sha256sum < "$T/rand50"); b=$(sha256sum < /madfs/cu/rand50); c=$(sha256sum < "$T/rand50.back")
        [ "$a" = "$b" ] && [ "$a" = "$c" ] && echo "cp-sha256 ok"
        cat /etc/services > /madfs/cu/services
        cmp /etc/services /madfs/cu/services && echo "cat ok"
        dd if="$T/rand50" of=/madfs/cu/dd bs=47008 count=300 status=none
        dd if=/madfs/cu/dd bs=47008 status=none | cmp - <(head -c $((47008*300)) "$T/rand50") && echo "dd ok"
        ls -la /madfs/cu | grep -c ' services$'
        stat -c '%s %F' /madfs/cu/services
        mkdir -p /madfs/cu/a/b/c && [ -d /madfs/cu/a/b/c ] && echo "mkdir-p ok"
        touch /madfs/cu/a/b/c/t && [ -f /madfs/cu/a/b/c/t ] && echo "touch ok"
        touch -d '2001-02-03 04:05:06' /madfs/cu/a/b/c/t && stat -c %Y /madfs/cu/a/b/c/t
        mv /madfs/cu/services /madfs/cu/a/svc && [ ! -e /madfs/cu/services ] && cmp /etc/services /madfs/cu/a/svc && echo "mv ok"
        find /madfs/cu | sort
        du -s /madfs/cu | awk '{ print ($1 > 50000) ? "du ok" : "du small" }'
        wc -l < /madfs/cu/a/svc
        head -n 1 /madfs/cu/a/svc
        tail -n 1 /madfs/cu/a/svc | cmp - <(tail -n 1 /etc/services) && echo "tail ok"
        truncate -s 100 /madfs/cu/a/svc && stat -c %s /madfs/cu/a/svc
        truncate -s 1M /madfs/cu/a/svc && stat -c %s /madfs/cu/a/svc
        stat -f -c '%b %S' /madfs | awk '{ print ($1 > 0 && $2 > 0) ? "statfs ok" : "statfs bad" }'
        fallocate -l 300000 /madfs/cu/a/falloc && stat -c 'fallocate %s' /madfs/cu/a/falloc
        chmod 640 /madfs/cu/a/falloc && stat -c 'mode %a' /madfs/cu/a/falloc
        ln -s a/svc /madfs/cu/link && [ "$(readlink /madfs/cu/link)" = a/svc ] && cmp /madfs/cu/link /madfs/cu/a/svc && echo "symlink ok"
        rm /madfs/cu/link
        ln /madfs/cu/a/svc /madfs/cu/hard && [ "$(stat -c %h /madfs/cu/hard)" = 2 ] && cmp /madfs/cu/hard /madfs/cu/a/svc && rm /madfs/cu/hard && echo "hard link ok"
        rm -rf /madfs/cu/a && [ ! -e /madfs/cu/a ] && echo "rm-rf ok"
        ls /madfs/cu
        cd /madfs/cu && pwd && ls dd && cd / && rm -rf /madfs/cu && ls /madfs
        "#;

/// Lines [`COREUTILS`] prints.
pub const COREUTILS_EXPECT: &[&str] = &[
    "cp-sha256 ok",
    "cat ok",
    "dd ok",
    "1\n",
    "12813 regular file",
    "mkdir-p ok",
    "touch ok",
    "981173106",
    "mv ok",
    "/madfs/cu/a/b/c/t",
    "du ok",
    "361\n",
    "# Network services, Internet style",
    "tail ok",
    "100\n",
    "1048576\n",
    "statfs ok",
    "fallocate 300000",
    "mode 640",
    "symlink ok",
    "hard link ok",
    "rm-rf ok",
    "dd\nrand50\n",
    "/madfs/cu\ndd\n",
];

/// tar of /usr/include into the mount and back out.
pub const TAR_INCLUDE: &str = r#"
        mkdir -p /madfs/tar/x "$T/out"
        tar chf /madfs/tar/include.tar --hard-dereference -C /usr include
        tar xf /madfs/tar/include.tar -C /madfs/tar/x
        tar cf - -C /madfs/tar/x include | tar xf - -C "$T/out"
        diff -r /usr/include "$T/out/include" && echo "trees identical"
        find /madfs/tar/x -type f | wc -l
        find -L /usr/include -type f | wc -l
        "#;

/// tar of a tree of symbolic links and modes into the mount and back.
pub const TAR_LINKS: &str = r#"
        src="$T/links"
        mkdir -p "$src/d/sub" /madfs/tar/links "$T/back"
        echo data > "$src/d/f"
        ln -s f "$src/d/rel"
        ln -s /etc/hostname "$src/d/abs"
        ln -s d "$src/dl"
        chmod 0750 "$src/d/sub"
        tar cf "$T/links.tar" -C "$src" d dl
        tar xf "$T/links.tar" -C /madfs/tar/links
        stat -c '%n %a' /madfs/tar/links/d/sub
        readlink /madfs/tar/links/d/rel /madfs/tar/links/dl
        cat /madfs/tar/links/dl/rel
        touch -h -d @1000000000 /madfs/tar/links/d/rel
        stat -c '%Y' /madfs/tar/links/d/rel /madfs/tar/links/d/f | tr '\n' ' '; echo
        tar cf - -C /madfs/tar/links d dl | tar xf - -C "$T/back"
        diff -r --no-dereference "$src" "$T/back" && echo "links identical"
        "#;

/// Checks the output of [`TAR_LINKS`] (the mount named `mount`).
pub fn check_tar_links(out: &str, mount: &str) {
    let out = out.replace(mount, "/madfs");
    let out = out.as_str();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "/madfs/tar/links/d/sub 750", "{out}");
    assert_eq!(lines[1..3], ["f", "d"], "{out}");
    assert_eq!(lines[3], "data", "{out}");
    assert!(
        lines[4].starts_with("1000000000 ") && !lines[4].starts_with("1000000000 1000000000"),
        "{out}"
    );
    assert!(out.contains("links identical"), "{out}");
}

/// Python: walk, replace, threads, subprocess, fork, vectored IO, statvfs; prints PY-OK.
pub const PYTHON: &str = r#"
import os, threading, subprocess
base = "/madfs/py"
os.makedirs(base + "/d1/d2")
with open(base + "/d1/f.txt", "w") as f:
    f.write("hello world\n" * 100)
with open(base + "/d1/f.txt", "r+") as f:
    f.seek(6); assert f.read(5) == "world"
    f.seek(0, 2); f.write("end\n")
assert os.path.getsize(base + "/d1/f.txt") == 1204
with open(base + "/tmp", "w") as f: f.write("new")
os.replace(base + "/tmp", base + "/d1/f.txt")
assert open(base + "/d1/f.txt").read() == "new"
assert not os.path.exists(base + "/tmp")
def worker(i):
    with open(f"{base}/d1/d2/t{i}", "wb") as f:
        for k in range(50): f.write(bytes([i]) * 1000)
ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
for i in range(8):
    assert open(f"{base}/d1/d2/t{i}", "rb").read() == bytes([i]) * 50000, i
walk = [(r, sorted(d), sorted(f)) for r, d, f in os.walk(base)]
assert walk == [(base, ["d1"], []), (base + "/d1", ["d2"], ["f.txt"]),
                (base + "/d1/d2", [], [f"t{i}" for i in range(8)])], walk
with open(base + "/sub.txt", "w") as f:
    f.write("parent\n"); f.flush()
    subprocess.run(["/usr/bin/python3", "-c", "import os; os.write(%d, b'child\\n')" % f.fileno()],
                   pass_fds=[f.fileno()], check=True)
    f.write("parent again\n")
assert open(base + "/sub.txt").read() == "parent\nchild\nparent again\n"
with open(base + "/out.txt", "w") as f:
    subprocess.run(["/bin/echo", "via stdout"], stdout=f, check=True)
assert open(base + "/out.txt").read() == "via stdout\n"
# a thread writes through a shared fd while another starts children (the fd's state moves
# into shared memory at the first clone): no line lost or overwritten
with open(base + "/log.txt", "w") as lf:
    def logger():
        for k in range(2000):
            lf.write(f"line {k:05d}\n"); lf.flush()
    t = threading.Thread(target=logger); t.start()
    for k in range(10): subprocess.run(["/bin/true"], check=True)
    t.join()
assert open(base + "/log.txt").read() == "".join(f"line {k:05d}\n" for k in range(2000))
pid = os.fork()
if pid == 0:
    with open(base + "/forked", "w") as f: f.write("from the fork child")
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
assert open(base + "/forked").read() == "from the fork child"
fd = os.open(base + "/vec", os.O_RDWR | os.O_CREAT, 0o644)
assert os.writev(fd, [b"ab", b"", b"cdef"]) == 6
a, b = bytearray(3), bytearray(10)
assert os.preadv(fd, [a, b], 0) == 6 and bytes(a) == b"abc" and bytes(b[:3]) == b"def"
assert os.lseek(fd, 0, os.SEEK_END) == 6
os.close(fd)
st = os.statvfs(base)
assert st.f_blocks > 0 and st.f_namemax == 255, st
print("PY-OK")
"#;

/// An fio job verifying psync random writes and sync writes (`directory` on the mount).
pub const FIO_JOB: &str = "[global]\ndirectory=/madfs/fio\nsize=16m\nverify=crc32c\ndo_verify=1\n\
         [psync]\nioengine=psync\nrw=randwrite\nbs=64k\n\
         [sync]\nioengine=sync\nrw=write\nbs=47008\n";

/// Checks the terse output of [`FIO_JOB`] (followed by `rc=N`).
pub fn check_fio(out: &str) {
    assert!(out.contains("rc=0"), "{out}");
    for line in out.lines().filter(|l| l.starts_with("3;fio")) {
        let f: Vec<&str> = line.split(';').collect();
        assert_eq!(f[4], "0", "fio job {} reported error: {line}", f[2]);
    }
    assert_eq!(
        out.lines().filter(|l| l.starts_with("3;fio")).count(),
        2,
        "{out}"
    );
}

/// `cp -a` and tar keep files' and directories' times (they set them through the open
/// descriptor before closing, and on directories after filling them); prints `TIMES-OK`.
pub const KEEP_TIMES: &str = r#"
        src="$T/times"
        mkdir -p "$src/d/e"
        head -c 3000000 /dev/urandom > "$src/d/e/f"
        echo small > "$src/d/s"
        touch -d @981173106 "$src/d/e/f" "$src/d/s"
        touch -d @1009843200 "$src/d/e" "$src/d"
        cp -a "$src" /madfs/times-cp
        mkdir /madfs/times-tar
        tar cf - -C "$src" . | tar xf - -C /madfs/times-tar
        for t in /madfs/times-cp /madfs/times-tar; do
          got=$(cd "$t" && stat -c '%Y %n' d d/e d/e/f d/s | tr '\n' ' ')
          [ "$got" = "1009843200 d 1009843200 d/e 981173106 d/e/f 981173106 d/s " ] || { echo "$t: $got"; exit 1; }
        done
        echo TIMES-OK
        "#;
