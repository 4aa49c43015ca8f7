//! The FUSE mount (`madfs-fuse`, client/src/fuse/) against 3 real servers on loopback, with
//! real programs and no preload: the preload's coreutils, tar, python and fio scripts; a
//! static busybox copying, listing and reading back; a static program making raw system
//! calls writing a file the preload reads byte-exact, and reading one the preload wrote; the
//! preload staying out of a prefix that is a FUSE mount; SIGTERM unmounting; a user's own
//! mount (fusermount3) and root's mount for every user. Needs /dev/fuse (skips otherwise).

mod common;

use common::{cluster, scripts};
use madfs_cluster::fuse::{as_user, is_fuse, Mount};
use madfs_cluster::{find_bin, LocalCluster, Options};
use std::path::Path;
use std::process::{Command, Output};

/// Call deadline of the programs here.
const TIMEOUT_MS: u32 = 20_000;

fn skip() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: no /dev/fuse");
        return true;
    }
    false
}

/// A shell command line run by nobody (65534); its output.
fn sh_as_nobody(script: &str) -> Output {
    as_user(65534, "sh").arg("-c").arg(script).output().unwrap()
}

/// `madfs-fuse` mounting `cl` at `name` (root's, no extra environment).
fn mount(cl: &LocalCluster, name: &str, args: &[&str]) -> Mount {
    Mount::start(cl, name, args, None, &[], TIMEOUT_MS)
}

/// A bash script (`-euo pipefail`) without the preload, its mount `/madfs` replaced by the
/// FUSE mount; its stdout (asserting success).
fn bash_on(cl: &LocalCluster, m: &Mount, script: &str) -> String {
    let script = script.replace("/madfs", &m.path());
    let out = Command::new("/bin/bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("T", cl.root())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    common::ok(out, &script)
}

/// The preload's program tests, run under the mount instead.
#[test]
fn coreutils_tar_python_and_fio_under_the_mount() {
    if skip() {
        return;
    }
    let cl = cluster();
    let m = mount(&cl, "mnt", &[]);
    let mnt = m.path();

    let out = bash_on(&cl, &m, scripts::COREUTILS);
    for e in scripts::COREUTILS_EXPECT {
        let e = e.replace("/madfs", &mnt);
        assert!(out.contains(&e), "missing {e:?} in:\n{out}");
    }

    let out = bash_on(&cl, &m, scripts::TAR_INCLUDE);
    assert!(out.contains("trees identical"), "{out}");
    let counts: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(counts[0], counts[1], "{out}");
    let out = bash_on(&cl, &m, scripts::TAR_LINKS);
    scripts::check_tar_links(&out, &mnt);

    let out = bash_on(&cl, &m, scripts::KEEP_TIMES);
    assert!(out.contains("TIMES-OK"), "{out}");

    let py = cl.root().join("script.py");
    std::fs::write(&py, scripts::PYTHON.replace("/madfs", &mnt)).unwrap();
    let out = Command::new("/usr/bin/python3").arg(&py).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("PY-OK"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    std::fs::write(
        cl.root().join("job.fio"),
        scripts::FIO_JOB.replace("/madfs", &mnt),
    )
    .unwrap();
    let out = bash_on(
        &cl,
        &m,
        "mkdir /madfs/fio && cd $T && fio --output-format=terse job.fio ; echo rc=$?",
    );
    scripts::check_fio(&out);
}

/// Debian's busybox-static (no dynamic libc: the preload cannot reach it) on the mount; what
/// it wrote reads back through the preload.
#[test]
fn a_static_busybox_copies_lists_and_reads_back() {
    if skip() {
        return;
    }
    let busybox = Path::new("/bin/busybox");
    let static_ok = Command::new("file")
        .arg(busybox)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("statically linked"))
        .unwrap_or(true);
    if !busybox.exists() || !static_ok {
        eprintln!("skipped: no static /bin/busybox (Debian busybox-static)");
        return;
    }
    let cl = cluster();
    let m = mount(&cl, "mnt", &[]);
    let out = Command::new(busybox)
        .args(["sh", "-c"])
        .arg(format!(
            "set -e; cd {mnt}; mkdir -p bb/sub; cp /etc/services bb/sub/services; \
             head -c 3000000 /dev/urandom > $T/rand; cp $T/rand bb/rand; ls bb bb/sub; \
             cmp /etc/services bb/sub/services && echo cmp-ok; \
             md5sum < bb/rand; md5sum < $T/rand; wc -c < bb/rand; \
             mv bb/sub/services bb/svc; rm -r bb/sub; ls bb",
            mnt = m.path()
        ))
        .env("T", cl.root())
        .output()
        .unwrap();
    let text = common::ok(out, "busybox");
    let lines: Vec<&str> = text.lines().collect();
    assert!(text.contains("cmp-ok"), "{text}");
    let sums: Vec<&&str> = lines.iter().filter(|l| l.ends_with("  -")).collect();
    assert_eq!(sums.len(), 2, "{text}");
    assert_eq!(sums[0], sums[1], "{text}");
    assert!(text.contains("3000000\n"), "{text}");
    assert!(text.ends_with("rand\nsvc\n"), "{text}");
    // the same bytes through the preload
    let out = common::bash(
        &cl,
        "cmp /etc/services /madfs/bb/svc && cmp \"$T/rand\" /madfs/bb/rand && echo same",
        TIMEOUT_MS,
    );
    assert_eq!(out, "same\n");
}

/// A static program making its own system calls (as Go programs do): `rawcp SRC DST` copies
/// with openat/read/write/close through `syscall(2)`.
const RAWCP: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long in = syscall(SYS_openat, AT_FDCWD, argv[1], O_RDONLY);
    long out = syscall(SYS_openat, AT_FDCWD, argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0) return 3;
    static char buf[1 << 20];
    for (;;) {
        long n = syscall(SYS_read, in, buf, sizeof buf);
        if (n < 0) return 4;
        if (n == 0) break;
        for (long off = 0; off < n;) {
            long w = syscall(SYS_write, out, buf + off, n - off);
            if (w <= 0) return 5;
            off += w;
        }
    }
    if (syscall(SYS_close, out) != 0) return 6;
    syscall(SYS_close, in);
    return 0;
}
"#;

#[test]
fn raw_syscalls_and_the_preload_see_the_same_bytes() {
    if skip() {
        return;
    }
    let cl = cluster();
    let src = cl.root().join("rawcp.c");
    let bin = cl.root().join("rawcp");
    std::fs::write(&src, RAWCP).unwrap();
    let cc = Command::new("cc")
        .args(["-static", "-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .output();
    match cc {
        Ok(o) if o.status.success() => {}
        other => {
            eprintln!("skipped: cannot build a static program: {other:?}");
            return;
        }
    }
    let m = mount(&cl, "mnt", &[]);
    let data = cl.root().join("data");
    common::bash(
        &cl,
        "head -c 5242880 /dev/urandom > \"$T/data\"",
        TIMEOUT_MS,
    );
    let rawcp = |from: &Path, to: &Path| {
        let out = Command::new(&bin)
            .arg(from)
            .arg(to)
            .env("LD_PRELOAD", find_bin("libmadfs.so"))
            .output()
            .unwrap();
        assert!(out.status.success(), "rawcp {from:?} {to:?}: {out:?}");
    };
    // raw syscalls write through the mount; the preload reads
    rawcp(&data, &m.dir.join("from-raw"));
    let out = common::bash(
        &cl,
        "cmp \"$T/data\" /madfs/from-raw && cp /madfs/from-raw \"$T/back\" && echo same",
        TIMEOUT_MS,
    );
    assert_eq!(out, "same\n");
    assert_eq!(
        std::fs::read(cl.root().join("back")).unwrap(),
        std::fs::read(&data).unwrap()
    );
    // the preload writes; raw syscalls read through the mount
    common::bash(&cl, "cp \"$T/data\" /madfs/from-preload", TIMEOUT_MS);
    let back = cl.root().join("back2");
    rawcp(&m.dir.join("from-preload"), &back);
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&data).unwrap());
}

/// A preloaded program whose mount prefix is a FUSE mount leaves it to the kernel (here with
/// a cluster file that does not exist: the preload would fail every call), and SIGTERM
/// unmounts and ends `madfs-fuse`.
#[test]
fn the_preload_leaves_a_fuse_prefix_alone_and_sigterm_unmounts() {
    if skip() {
        return;
    }
    let cl = cluster();
    let mut m = mount(&cl, "mnt", &[]);
    let out = Command::new("/bin/bash")
        .args([
            "-c",
            "echo via-kernel > \"$M/k\" && cat \"$M/k\" && ls \"$M\"",
        ])
        .env("M", m.path())
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env("MADFS_MOUNT", m.path())
        .env("MADFS_CLUSTER", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(common::ok(out, "preloaded bash"), "via-kernel\nk\n");
    let pid = m.child.as_ref().unwrap().id();
    // SAFETY: signals our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let s = m.wait();
    assert!(s.success(), "{s}");
    assert!(!is_fuse(&m.dir));
}

/// A user mounts their own key-mode cluster (fusermount3), writes as themselves and
/// unmounts; root's `--all-users` mount serves each caller as themselves (the kernel checks
/// modes, the servers see the caller's uid through the proxy role).
#[test]
fn a_users_own_mount_and_roots_mount_for_every_user() {
    if skip() {
        return;
    }
    if Command::new("fusermount3").arg("-V").output().is_err() {
        eprintln!("skipped: no fusermount3 (Debian fuse3)");
        return;
    }
    let cl = LocalCluster::start(Options {
        servers: 2,
        args: vec!["--owner".into(), "65534:65534".into()],
        ..Default::default()
    })
    .unwrap();
    // the user reaches the cluster file through the scratch directory
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(cl.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // a user's mount opens /dev/fuse as that user (fuser, and fusermount3 too): the kernel's
    // mode for it is 0666, some containers make it root's only
    let dev_fuse_open = as_user(65534, "test")
        .args(["-r", "/dev/fuse"])
        .status()
        .is_ok_and(|s| s.success());
    if !dev_fuse_open {
        eprintln!("user mount skipped: /dev/fuse is not open to users here");
        return roots_mount_for_every_user();
    }
    // UCX shared memory segments of root's servers are not open to the user: TCP
    let mut m = Mount::start(
        &cl,
        "user-mnt",
        &[],
        Some(65534),
        &[("UCX_TLS", "tcp,self")],
        TIMEOUT_MS,
    );
    let f = m.dir.join("mine");
    let out = sh_as_nobody(&format!(
        "echo hello > {0} && stat -c '%u %g' {0}",
        f.display()
    ));
    assert_eq!(common::ok(out, "user write"), "65534 65534\n");
    let u = m.unmount();
    assert!(u.status.success(), "{u:?}");
    assert!(m.wait().success());
    drop(m);
    roots_mount_for_every_user();
}

fn roots_mount_for_every_user() {
    use std::os::unix::fs::PermissionsExt;
    let cl = cluster();
    let m = mount(&cl, "all", &["--all-users"]);
    let mnt = m.path();
    std::fs::create_dir(m.dir.join("shared")).unwrap();
    std::fs::set_permissions(m.dir.join("shared"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::create_dir(m.dir.join("root-only")).unwrap();
    let out = sh_as_nobody(&format!(
        "echo x > {mnt}/shared/by-nobody && stat -c '%u %g' {mnt}/shared/by-nobody; \
         echo y > {mnt}/root-only/no 2>/dev/null || echo refused"
    ));
    assert_eq!(common::ok(out, "nobody"), "65534 65534\nrefused\n");
    // what the servers recorded
    let c = madfs_client_stat(&cl, "/shared/by-nobody");
    assert!(c.starts_with("65534 65534"), "{c}");
    // set-id programs do not run from it (nosuid), as from any file system other users and
    // other nodes write (`--suid` asks for it)
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let at = mnt.to_string();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(at.as_str()))
        .unwrap_or_default();
    assert!(
        line.split(' ')
            .nth(5)
            .is_some_and(|o| o.split(',').any(|x| x == "nosuid")),
        "{line}"
    );
}

/// `stat -c '%u %g'` of a madfs path through the preload.
fn madfs_client_stat(cl: &LocalCluster, path: &str) -> String {
    common::bash(cl, &format!("stat -c '%u %g' /madfs{path}"), TIMEOUT_MS)
}
