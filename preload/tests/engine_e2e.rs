//! The interception engine end to end, with nothing but our own test program: `madfs-syscall`
//! under `LD_PRELOAD=libmadfs.so` against 3 servers. Runs natively on x86_64 (in
//! `scripts/test.sh`) and under qemu-aarch64 with the aarch64 engine (`scripts/check-aarch64.sh`).

mod common;

use common::{cluster, syscalls, syscalls_env};

/// Compares output lines with expectations; an expectation ending in `*` is a prefix.
fn expect(out: &str, err: &str, want: &[&str]) {
    let got: Vec<&str> = out.lines().collect();
    for (i, w) in want.iter().enumerate() {
        let g = got.get(i).copied().unwrap_or("<missing>");
        let ok = match w.strip_suffix('*') {
            Some(p) => g.starts_with(p),
            None => g == *w,
        };
        assert!(
            ok,
            "line {i}: got {g:?}, want {w:?}\n--- output\n{out}--- stderr\n{err}"
        );
    }
    assert_eq!(got.len(), want.len(), "--- output\n{out}--- stderr\n{err}");
}

/// Runs `madfs-syscall` with `steps` (and extra environment) under the preload and checks its
/// output lines against `want` (see [`expect`]).
/// These tests are about starting and running UCX inside a program: UCX from the first call
/// (by default a thread starts on plain TCP and moves to UCX after 256 calls).
const UCX: (&str, &str) = ("MADFS_TRANSPORT", "ucx");

fn syscalls_expect(
    cl: &madfs_cluster::LocalCluster,
    steps: &[&str],
    env: &[(&str, &str)],
    want: &[&str],
) -> String {
    let o = syscalls_env(cl, steps, 20_000, env);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    expect(&out, &err, want);
    out.into_owned()
}

#[test]
fn syscalls_threads_fork_exec_and_pass_through() {
    let cl = cluster();
    let host = cl.root().join("host-file");
    let host = host.to_str().unwrap();
    let open_host = format!("open,{host},creat+rw");
    let steps = [
        "statfs,/madfs",
        "mkdir,/madfs/a",
        "mkdir,/madfs/a",
        "open,/madfs/a/f,creat+excl+rw", // #0
        "write,#0,0123456789abcdef",
        "pwrite,#0,XY,4",
        "lseek,#0,0,set",
        "read,#0,100",
        "fstat,#0",
        "lseek,#0,-1,set",
        "close,#0",
        "open,/madfs/a/f,creat+excl+w",
        "rmdir,/madfs/a",
        "rename,/madfs/a/f,/madfs/a/g",
        "stat,/madfs/a/f",
        "truncate,/madfs/a/g,6",
        "stat,/madfs/a/g",
        "open,/madfs/a/g,dir",
        "threads,/madfs/a,8",
        "open,/madfs/a/fe,creat+rw", // #1
        "write,#1,parent-",
        "forkexec,#1,child",
        "lseek,#1,0,set",
        "read,#1,100",
        &open_host, // #2: not ours, the kernel's
        "write,#2,on the host",
        "pread,#2,4,3",
        "unlink,/madfs/a/nope",
    ];
    let o = syscalls_env(&cl, &steps, 20_000, &[UCX]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    expect(
        &out,
        &err,
        &[
            "fstype 6d616466", // madfs answered, not the kernel
            "statfs OK 0",
            "mkdir OK 0",
            "mkdir ERR EEXIST",
            "open OK *",
            "write OK 16",
            "pwrite OK 2",
            "lseek OK 0",
            "data 0123XY6789abcdef",
            "read OK 16",
            "size 16 mode 100644",
            "fstat OK 0",
            "lseek ERR EINVAL",
            "close OK 0",
            "open ERR EEXIST",
            "rmdir ERR ENOTEMPTY",
            "rename OK 0",
            "stat ERR ENOENT",
            "truncate OK 0",
            "size 6 mode 100644",
            "stat OK 0",
            "open ERR ENOTDIR",
            "threads: 8 of 8 files written and read back",
            "threads OK 8",
            "open OK *",
            "write OK 7",
            "write OK 5", // the exec'd child, through the inherited fd
            "forkexec OK 0",
            "lseek OK 0",
            "data parent-child",
            "read OK 12",
            "open OK *",
            "write OK 11",
            "data the ",
            "pread OK 4",
            "unlink ERR ENOENT",
        ],
    );
    assert_eq!(std::fs::read(host).unwrap(), b"on the host");
    // the servers hold what was written: a second process sees it
    let out = syscalls(&cl, &["open,/madfs/a/t7,r", "read,#0,4"], 20_000);
    assert!(out.contains("read OK 4"), "{out}");
}

/// A madfs fd is a placeholder (a dup of one template file, kept at a high fd number) until
/// its state must be shared: fd numbers are low ones, as for any open; a program that closes
/// the high fds (the template with them) still opens madfs files; a fork+exec
/// child writes through an inherited placeholder fd (moved onto a memfd at the clone) at the
/// shared offset.
#[test]
fn placeholder_fds_numbers_closefrom_and_inheritance() {
    let cl = cluster();
    let steps = [
        "open,/madfs/p1,creat+rw", // #0
        "open,/madfs/p2,creat+rw", // #1
        "close,#1",
        "closefrom,100",
        "open,/madfs/p3,creat+rw", // #2
        "write,#2,abc",
        "forkexec,#2,child",
        "write,#2,!",
        "lseek,#2,0,set",
        "read,#2,100",
        "close,#2",
    ];
    let o = syscalls_env(&cl, &steps, 20_000, &[]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    // (the numbers themselves also depend on the UCX connections opened meanwhile)
    let fds: Vec<i32> = out
        .lines()
        .filter_map(|l| l.strip_prefix("open OK ")?.parse().ok())
        .collect();
    assert!(fds.len() == 3 && fds.iter().all(|&f| f < 100), "{out}");
    expect(
        &out,
        &err,
        &[
            "open OK *",
            "open OK *",
            "close OK 0",
            "closefrom OK 0",
            "open OK *",
            "write OK 3",
            "write OK 5",
            "forkexec OK 0",
            "write OK 1",
            "lseek OK 0",
            "data abcchild!",
            "read OK 9",
            "close OK 0",
        ],
    );
}

/// An `open` makes its kernel fd while its lookup is on the wire (`call_sync_overlapped`):
/// one that fails gives the fd back, so the next open still gets the lowest free number.
#[test]
fn failed_opens_give_their_kernel_fd_back() {
    let cl = cluster();
    let steps = [
        "open,/madfs/nope/x,r", // connections to the servers involved
        "open,/madfs/q,creat+rw",
        "close,#0",
        "open,/madfs/nope,r",
        "open,/madfs/nope/x,r",
        "open,/madfs/q/x,r",
        "mkdir,/madfs/qd",
        "open,/madfs/qd,w",
        "open,/madfs/q,dir",
        "open,/madfs/q,rw", // #1: the number #0 had
    ];
    let out = syscalls_expect(
        &cl,
        &steps,
        &[],
        &[
            "open ERR ENOENT",
            "open OK *",
            "close OK 0",
            "open ERR ENOENT",
            "open ERR ENOENT",
            "open ERR ENOTDIR",
            "mkdir OK 0",
            "open ERR EISDIR",
            "open ERR ENOTDIR",
            "open OK *",
        ],
    );
    let fds: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("open OK "))
        .collect();
    assert!(fds.len() == 2 && fds[0] == fds[1], "{out}");
}

/// The first madfs access of a process loads UCX, whose constructor tokenises with
/// `strtok`: a program walking a path with `strtok` and `stat`ing each prefix (io500 making
/// its data directories) keeps its place (it stopped after `/madfs/` before).
#[test]
fn first_madfs_access_inside_a_strtok_loop_keeps_the_programs_place() {
    let cl = cluster();
    syscalls_expect(
        &cl,
        &["strtokstat,/madfs/a/b/c/d", "strtokstat,/madfs/x/y"],
        &[UCX],
        &["strtokstat OK 5", "strtokstat OK 3"],
    );
}

/// The first madfs access loads UCX, whose constructor installs crash handlers (SIGSEGV,
/// SIGBUS, SIGILL, SIGFPE) and an alternate signal stack: the program's own handlers and
/// stack must be what it left (before: its SIGSEGV handler was replaced by UCX's).
#[test]
fn first_madfs_access_leaves_the_programs_signal_handlers() {
    let cl = cluster();
    syscalls_expect(
        &cl,
        &["sigkeep,/madfs/", "sigkeep,/madfs/"],
        &[UCX],
        &["sigkeep OK 0", "sigkeep OK 0"],
    );
}

/// A successful madfs syscall leaves errno as the program set it. cmake counts a directory's
/// files with errno set to 0 before `opendir` and checked after the last `readdir`; UCX
/// progress that goes to sleep (here always: no spinning) reads its empty event fd with
/// EAGAIN inside the syscalls, and cmake counted no files ("[-75%]" build progress); this
/// test failed with EAGAIN the same way.
#[test]
fn madfs_syscalls_leave_errno_alone() {
    let cl = cluster();
    syscalls_expect(
        &cl,
        &[
            "mkdir,/madfs/ed",
            "open,/madfs/ed/a,creat+w",
            "open,/madfs/ed/b,creat+w",
            "readdirerrno,/madfs/ed",
            "readdirerrno,/madfs/ed",
        ],
        &[("MADFS_SPIN_US", "0"), UCX],
        &[
            "mkdir OK 0",
            "open OK *",
            "open OK *",
            "readdirerrno OK 4",
            "readdirerrno OK 4",
        ],
    );
}

/// A `posix_spawn` child (glibc: `clone(CLONE_VM | CLONE_VFORK)`) shares the parent's memory
/// but not its fd table: its file action opening a madfs path is refused with ENOTSUP before
/// anything happens (no file created), whether the parent has connected yet or not, and the
/// parent goes on undisturbed (before: the child's first connection or its description ended
/// up in the parent's state, and the parent's UCX worker then polled fds it did not have).
/// A file action on a local path still works.
#[test]
fn posix_spawn_child_cannot_open_madfs_paths_and_leaves_the_parent_intact() {
    let cl = cluster();
    let steps = [
        "spawnopen,/madfs/spawned0", // before any connection
        "open,/madfs/s1,creat+rw",   // #0
        "write,#0,ok",
        "spawnopen,/madfs/spawned1", // connected
        "stat,/madfs/spawned1",
        "lseek,#0,0,set",
        "read,#0,10",
        "close,#0",
        "spawnopen,/dev/null",
    ];
    let o = syscalls_env(&cl, &steps, 20_000, &[]);
    let (mut out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    if cfg!(target_arch = "aarch64") {
        // qemu-user runs CLONE_VM|CLONE_VFORK children as fork children: glibc's parent
        // then never sees the child's errno, and the refused open shows as exit status 127
        out = out.replace("spawnopen OK 127", "spawnopen ERR ENOTSUP");
    }
    expect(
        &out,
        &err,
        &[
            "spawnopen ERR ENOTSUP",
            "open OK *",
            "write OK 2",
            "spawnopen ERR ENOTSUP",
            "stat ERR ENOENT",
            "lseek OK 0",
            "data ok",
            "read OK 2",
            "close OK 0",
            "spawnopen OK 0",
        ],
    );
    assert!(!err.contains("UCX  ERROR"), "{err}");
}

/// x86_64: libc sites of syscalls the preload never answers (known number, `getppid`) stay
/// unpatched, those it may answer (`dup`) are patched, after a full scan of libc, a
/// patch-site cache hit, with libc's bundle (patched text and wrappers) mapped, and with a
/// bad bundle (patched in place, the bundle replaced); `MADFS_INTERCEPT_ALL` patches all.
#[cfg(target_arch = "x86_64")]
#[test]
fn only_wanted_syscall_sites_are_patched() {
    let cl = cluster();
    // runs the steps with `env`; `getppid`: how its libc site should look; `fstatfs`: how
    // that one should look before the first madfs path (None: either way). An fd syscall
    // with a known number stays unpatched while libc is mapped from its bundle, until the
    // process touches the mount (`vendor/PATCHES.md` syscall-intercept 18); after that, or
    // when libc was patched in place, it is patched.
    let check = |env: &[(&str, &str)], getppid: &str, fstatfs: Option<&str>| {
        let steps = [
            "patched,getppid",
            "patched,dup",
            "patched,fstatfs",
            "statfs,/madfs",
            "patched,fstatfs",
        ];
        let o = syscalls_env(&cl, &steps, 20_000, env);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        let before = match fstatfs {
            Some(f) => format!("site fstatfs {f}"),
            None if out.contains("site fstatfs unpatched") => "site fstatfs unpatched".into(),
            None => "site fstatfs patched".into(),
        };
        expect(
            &out,
            &err,
            &[
                &format!("site getppid {getppid}"),
                "patched OK 0",
                "site dup patched",
                "patched OK 0",
                &before,
                "patched OK 0",
                "fstype 6d616466",
                "statfs OK 0",
                "site fstatfs patched",
                "patched OK 0",
            ],
        );
    };
    // a fresh cache directory: the first run scans libc and stores the patch sites, the
    // patch plan and libc's bundle; without plan and bundle, the second run loads the sites
    // and stores both again; the third maps the bundle (its pages are what `patched`
    // reads); a fourth finds a bundle that is not one (a plain copy of libc under its
    // name), patches in place and replaces it
    let dir = cl.root().join("intercept-cache");
    let cache = dir.to_str().unwrap();
    let files = |kind: &str| -> Vec<std::path::PathBuf> {
        let all: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(all.len(), 3, "site cache, plan and bundle: {all:?}");
        all.into_iter()
            .filter(|p| p.to_string_lossy().contains(kind))
            .collect()
    };
    let env = [("MADFS_INTERCEPT_CACHE", cache)];
    check(&env, "unpatched", Some("patched"));
    for f in files(".plan").into_iter().chain(files(".bundle")) {
        std::fs::remove_file(f).unwrap();
    }
    for fstatfs in ["patched", "unpatched"] {
        check(&env, "unpatched", Some(fstatfs));
        assert_eq!((files(".plan").len(), files(".bundle").len()), (1, 1));
    }
    let eager = [
        ("MADFS_INTERCEPT_CACHE", cache),
        ("MADFS_INTERCEPT_EAGER", "1"),
    ];
    check(&eager, "unpatched", Some("patched"));
    let bundle = &files(".bundle")[0];
    // the wrappers of fd syscalls with a known number (close, read, fcntl, …) start with
    // the fd prefix (`vendor/PATCHES.md` syscall-intercept 17): its bytes from the fd's
    // `movl %edi, %r11d` to the `syscall` and the jump over the template
    let prefix: &[u8] = &[
        0x41, 0x89, 0xfb, 0x4c, 0x3b, 0x19, 0x73, 0x11, 0x48, 0x8b, 0x49, 0x08, 0x4c, 0x0f, 0xa3,
        0x19, 0x72, 0x07, 0x0f, 0x05, 0xe9,
    ];
    let bytes = std::fs::read(bundle).unwrap();
    let count = |prefix: &[u8]| bytes.windows(prefix.len()).filter(|w| *w == prefix).count();
    let prefixed = count(prefix);
    assert!(prefixed >= 10, "{prefixed} fd prefixes in the bundle");
    // those of (dirfd, path) syscalls with a known number (openat, newfstatat, …) start with
    // the path prefix (syscall-intercept 23), from its null test of the path to the test for
    // AT_FDCWD; those of path syscalls relative to the working directory (readlink, access,
    // mkdir, …) with the cwd prefix, from the null test to the test of the path's first byte
    let dirfd_path: &[u8] = &[
        0x48, 0x85, 0xf6, 0x74, 0x40, 0x80, 0x3e, 0x2f, 0x74, 0x2a, 0x83, 0xff, 0x9c, 0x74, 0x19,
    ];
    let cwd_path: &[u8] = &[0x48, 0x85, 0xff, 0x74, 0x27, 0x80, 0x3f, 0x2f, 0x74, 0x11];
    let (at, cwd) = (count(dirfd_path), count(cwd_path));
    assert!(
        at >= 5 && cwd >= 5,
        "{at} path and {cwd} cwd prefixes in the bundle"
    );
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    std::fs::copy(libc, bundle).unwrap();
    check(&env, "unpatched", Some("patched"));
    let len = |p: &std::path::Path| std::fs::metadata(p).unwrap().len();
    assert!(len(bundle) > len(libc.as_ref()), "bundle not replaced");
    check(&env, "unpatched", Some("unpatched"));
    check(&[], "unpatched", None);
    check(&[("MADFS_INTERCEPT_ALL", "1")], "patched", Some("patched"));
}

/// x86_64: a process that finds libc's bundle out of the page cache (its header page) writes
/// a fresh copy under the same name before it maps it (`vendor/PATCHES.md` syscall-intercept
/// 24): the kernel's fault path would bring the text back in single pages, a write puts it in
/// large folios where the file system has them; one process at a time (an `flock` on the old
/// file). A warm bundle, or one younger than a minute, is left as it is. Skipped, with a line,
/// where the bundle cannot be evicted.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_cold_bundle_is_written_afresh() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let cl = cluster();
    let dir = cl.root().join("cache-cold-bundle");
    let cache = dir.to_str().unwrap();
    let env = [("MADFS_INTERCEPT_CACHE", cache)];
    let run = || common::ok(common::run_env(&cl, &["/bin/true"], 20_000, &env), "true");
    run();
    let bundle = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains(".bundle"))
        .expect("a bundle after the first run");
    let bytes = std::fs::read(&bundle).unwrap();
    let ino = |p: &std::path::Path| std::fs::metadata(p).unwrap().ino();
    // written back and dropped; then mincore(2) says whether its header page left the page
    // cache (a read with RWF_NOWAIT would start reading it back in)
    let evict = || {
        let f = std::fs::File::open(&bundle).unwrap();
        f.sync_all().unwrap();
        let len = bytes.len();
        // SAFETY: f is open for the whole block; the mapping is read-only, only its
        // residency is asked for, and it is unmapped before the block ends.
        unsafe {
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            let m = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            let mut vec = [0u8; 1];
            let last = m.cast::<u8>().add(len - 4096);
            let r = libc::mincore(last.cast(), 4096, vec.as_mut_ptr());
            libc::munmap(m, len);
            r == 0 && vec[0] & 1 == 0
        }
    };
    if !evict() {
        eprintln!("skipped: the bundle stays in the page cache here");
        return;
    }
    // a bundle younger than a minute is not copied again
    let before = ino(&bundle);
    run();
    assert_eq!(ino(&bundle), before, "a young bundle is left as it is");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
    std::fs::File::options()
        .write(true)
        .open(&bundle)
        .unwrap()
        .set_modified(old)
        .unwrap();
    // another process writing a copy (it holds an flock on the old file): this one maps the
    // old file as it is
    assert!(evict(), "evicted again");
    let writer = std::fs::File::open(&bundle).unwrap();
    // SAFETY: a plain flock on an open descriptor.
    assert_eq!(unsafe { libc::flock(writer.as_raw_fd(), libc::LOCK_EX) }, 0);
    run();
    assert_eq!(ino(&bundle), before, "one writer at a time");
    drop(writer);
    assert!(evict(), "evicted again");
    run();
    let after = ino(&bundle);
    assert_ne!(before, after, "a cold bundle is written afresh");
    assert_eq!(std::fs::read(&bundle).unwrap(), bytes, "the same bytes");
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(files, 3, "site cache, plan and bundle, no temporary left");
    run();
    assert_eq!(ino(&bundle), after, "a warm bundle is left as it is");
}

/// x86_64: a process that maps libc's bundle replaces libc's whole executable mapping with
/// one from the bundle (`vendor/PATCHES.md` syscall-intercept 25): no page of libc's own file
/// stays executable beside it (the text section ends a page before the segment does; mapping
/// the section alone split libc's mapping and left that page behind).
#[cfg(target_arch = "x86_64")]
#[test]
fn libc_text_is_replaced_by_one_mapping() {
    let cl = cluster();
    let dir = cl.root().join("cache-one-mapping");
    let env = [("MADFS_INTERCEPT_CACHE", dir.to_str().unwrap())];
    // the first run scans libc and stores its bundle, the second maps it
    common::ok(common::run_env(&cl, &["/bin/true"], 20_000, &env), "true");
    let maps = common::ok(
        common::run_env(&cl, &["/bin/cat", "/proc/self/maps"], 20_000, &env),
        "cat",
    );
    let exec = |name: &str| -> Vec<&str> {
        maps.lines()
            .filter(|l| l.split_whitespace().nth(1) == Some("r-xp") && l.contains(name))
            .collect()
    };
    assert!(
        exec("libc.so.6").is_empty(),
        "libc's own text is still mapped: {:?}",
        exec("libc.so.6")
    );
    // libc's text, the full text aside (until the first madfs path) and the wrappers
    assert_eq!(exec(".bundle").len(), 3, "{maps}");
}

/// `fchmodat2` (Linux 6.6), which glibc ≥ 2.39 issues for `fchmodat` with flags: GNU tar 1.35
/// on Ubuntu 24.04 set its directories' modes through it and got ENOTDIR from the kernel (the
/// placeholder behind a madfs dirfd is no directory). Links are followed unless
/// `AT_SYMLINK_NOFOLLOW`, which a link answers with EOPNOTSUPP, as Linux does.
#[test]
fn fchmodat2_changes_modes_and_refuses_links_themselves() {
    let cl = cluster();
    syscalls_expect(
        &cl,
        &[
            "mkdir,/madfs/m2",
            "open,/madfs/m2/f,creat+w",
            "symlink,/madfs/m2/f,/madfs/m2/l",
            "fchmodat2,/madfs/m2/f,600,0",
            "stat,/madfs/m2/f",
            "fchmodat2,/madfs/m2/l,640,0",
            "stat,/madfs/m2/f",
            "fchmodat2,/madfs/m2/l,600,nofollow",
            "fchmodat2,/madfs/m2/f,604,nofollow",
            "fchmodat2,#0,644,empty",
            "fstat,#0",
            "fchmodat2,/madfs/m2/f,600,bad",
            "fchmodat2,/madfs/m2/nope,600,0",
        ],
        &[],
        &[
            "mkdir OK 0",
            "open OK *",
            "symlink OK 0",
            "fchmodat2 OK 0",
            "size 0 mode 100600",
            "stat OK 0",
            "fchmodat2 OK 0",
            "size 0 mode 100640",
            "stat OK 0",
            "fchmodat2 ERR ENOTSUP",
            "fchmodat2 OK 0",
            "fchmodat2 OK 0",
            "size 0 mode 100644",
            "fstat OK 0",
            "fchmodat2 ERR EINVAL",
            "fchmodat2 ERR ENOENT",
        ],
    );
}

/// syscall_intercept's log (`INTERCEPT_LOG`) still names each syscall from its format table
/// (the names now live in the table itself: `vendor/PATCHES.md` syscall-intercept 16).
#[cfg(target_arch = "x86_64")]
#[test]
fn intercept_log_names_the_syscalls() {
    let dir = tempfile_dir("intercept-log");
    let log = dir.join("log");
    let out = std::process::Command::new("/bin/cat")
        .arg("/etc/hostname")
        .env("LD_PRELOAD", madfs_cluster::find_bin("libmadfs.so"))
        .env("INTERCEPT_LOG", &log)
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    // exit_group ends every process (a name from the table, with its argument format)
    assert!(text.contains(" -- exit_group(0x0)"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// x86_64: libmadfs.so, which every preloaded process maps, carries no panic path, so none
/// of std's panic machinery and backtrace printer (which were ≈ 250 KB of its ≈ 290 KB of
/// text, `preload/front/build.rs`), and needs no unwinder: not `libgcc_s.so.1` (whose
/// constructor runs `cpuid`, a trap to the hypervisor in a VM).
#[cfg(target_arch = "x86_64")]
#[test]
fn front_has_no_panic_path() {
    let lib = madfs_cluster::find_bin("libmadfs.so");
    let tool = |cmd: &str, args: &[&str]| {
        let out = std::process::Command::new(cmd)
            .args(args)
            .arg(&lib)
            .output()
            .unwrap_or_else(|e| panic!("{cmd} (binutils): {e}"));
        assert!(out.status.success(), "{cmd}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let symbols = tool("nm", &["--demangle"]);
    for needle in [
        "rust_begin_unwind",
        "panic_fmt",
        "rust_eh_personality",
        "gimli",
    ] {
        let hits: Vec<&str> = symbols.lines().filter(|l| l.contains(needle)).collect();
        assert!(hits.is_empty(), "{needle} in {lib:?}: {hits:?}");
    }
    let dynamic = tool("readelf", &["--dynamic"]);
    assert!(!dynamic.contains("libgcc_s"), "{dynamic}");
    // the text a process may map: the engine, the front, what they use of core
    let sections = tool("size", &["-A"]);
    let text: u64 = sections
        .lines()
        .find_map(|l| l.strip_prefix(".text"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect(".text");
    assert!(text < 96 * 1024, "{sections}");
}

/// A fresh directory under the system's temporary directory.
#[cfg(target_arch = "x86_64")]
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("madfs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The aarch64 engine refuses to patch when trampolines cannot be within branch reach of libc
/// (`MADFS_INTERCEPT_FAR` places them ≥ 4 GiB away, as if libc had been loaded far from any
/// free memory): the program runs unintercepted, with one line on stderr, and does not crash.
#[cfg(target_arch = "aarch64")]
#[test]
fn libc_out_of_reach_runs_unintercepted() {
    let cl = cluster();
    let steps = ["statfs,/madfs", "stat,/madfs/a", "getcwd"];
    let out = syscalls_env(&cl, &steps, 20_000, &[("MADFS_INTERCEPT_FAR", "1")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stderr.contains("syscall interception is off"), "{stderr}");
    assert!(stderr.contains("out of branch range"), "{stderr}");
    // the kernel answers: the mount point is a plain directory of the host
    assert!(stdout.contains("statfs OK 0"), "{stdout}");
    assert!(!stdout.contains("fstype 6d616466"), "{stdout}");
    assert!(stdout.contains("stat ERR ENOENT"), "{stdout}");
    assert!(stdout.contains("getcwd OK"), "{stdout}");
}

/// A process that must scan libc (nothing in its interception cache) and cannot load
/// capstone runs unintercepted, with one line on stderr, and does not crash; it used to
/// exit at once, and with it every program started under the preload on a node without
/// libcapstone. `MADFS_INTERCEPT_CAPSTONE` names the library to load instead.
#[cfg(target_arch = "x86_64")]
#[test]
fn libc_without_capstone_runs_unintercepted() {
    let cl = cluster();
    let dir = cl.root().join("cache-without-capstone");
    let cache = dir.to_str().unwrap();
    let steps = ["statfs,/madfs", "stat,/madfs/a", "getcwd"];
    let missing = "/nonexistent/libcapstone.so.4";
    let env = [
        ("MADFS_INTERCEPT_CACHE", cache),
        ("MADFS_INTERCEPT_CAPSTONE", missing),
    ];
    let out = syscalls_env(&cl, &steps, 20_000, &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let off: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("syscall interception is off"))
        .collect();
    assert_eq!(off.len(), 1, "{stderr}");
    assert!(off[0].contains("libc"), "{stderr}");
    assert!(off[0].contains("MADFS_INTERCEPT_CAPSTONE"), "{stderr}");
    // the kernel answers: the mount point is a plain directory of the host
    assert!(stdout.contains("statfs OK 0"), "{stdout}");
    assert!(!stdout.contains("fstype 6d616466"), "{stdout}");
    assert!(stdout.contains("stat ERR ENOENT"), "{stdout}");
    assert!(stdout.contains("getcwd OK"), "{stdout}");
    // nothing was stored for later processes
    let stored = std::fs::read_dir(&dir).map_or(0, |d| d.count());
    assert_eq!(stored, 0, "{dir:?}");
    // capstone named by file name: the scan runs and madfs answers
    let env = [
        ("MADFS_INTERCEPT_CACHE", cache),
        ("MADFS_INTERCEPT_CAPSTONE", "libcapstone.so.4"),
    ];
    syscalls_expect(
        &cl,
        &["statfs,/madfs"],
        &env,
        &["fstype 6d616466", "statfs OK 0"],
    );
}

#[cfg(not(target_arch = "aarch64"))]
#[test]
fn libc_out_of_reach_runs_unintercepted() {
    // x86_64: syscall_intercept places its trampolines itself; nothing to check here.
    let _ = syscalls_env;
}

/// Threads that each connect, write 256 KiB, read it back and exit, over and over, on TCP.
/// Clients used to force-close their endpoints at exit, which UCX leaves undefined for a peer
/// in error mode `none`: servers crashed in `ucp_tag_send_nb` (34 of 40 rounds of 32 threads
/// failed). Now they say goodbye and flush-close; every round must pass and the servers live.
#[test]
fn threads_coming_and_going_never_crash_servers() {
    let cl = cluster();
    let (rounds, threads) = if cfg!(target_arch = "x86_64") {
        (12, 32)
    } else {
        (3, 16)
    };
    for r in 0..rounds {
        let (mkdir, run) = (
            format!("mkdir,/madfs/r{r}"),
            format!("threads,/madfs/r{r},{threads}"),
        );
        let out = syscalls_env(
            &cl,
            &[&mkdir, &run],
            20_000,
            &[("UCX_TLS", "tcp,self"), UCX],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("threads OK {threads}")),
            "round {r}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = syscalls(&cl, &["stat,/madfs/r0/t0"], 20_000);
    assert!(out.contains("size 262144"), "{out}");
}

/// A panic inside libmadfs.so unwinds to its `catch_unwind` with the copy of GCC's unwinder
/// linked into the library (it no longer loads `libgcc_s.so.1`, preload/build.rs), in a
/// program that has its own.
#[test]
fn panics_unwind_inside_the_library() {
    let out = std::process::Command::new(madfs_cluster::find_bin("madfs-syscall"))
        .arg("unwind")
        .env("LD_PRELOAD", madfs_cluster::find_bin("libmadfs.so"))
        .output()
        .expect("spawn");
    let (out, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    expect(&out, &err, &["unwind caught 1", "unwind OK 0"]);
}
