//! `madfs-syscall`: runs one syscall per argument and prints its result, for errno-exact tests
//! of the preload library (GekkoFS's `gkfs.io` idea). Run it under `LD_PRELOAD=libmadfs.so`.
//!
//! Each argument is `op,arg,arg…`; fds opened by `open` are named `#0`, `#1`, … in order.
//! Output: one line per step, `op OK <value>` or `op ERR <ERRNO NAME>`.
//!
//! Directory checks (each prints what it found and returns the number of entries, or -1):
//! `seekcheck,DIR,STEP` (telldir after every STEP-th entry, then seekdir back to each one and
//! compare), `listmut,DIR,N` (unlink and create N entries half-way through a listing: every
//! entry present throughout seen exactly once), `rangelist,DIR,K` (K fds with
//! `MADFS_IOC_DIR_RANGE` ranges, their union equal to the plain listing), `findioctl,DIR,GLOB,
//! SIZE` (`MADFS_IOC_FIND_COUNT`, then `MADFS_IOC_FIND_LIST` and getdents64), `smallbuf,DIR,
//! BYTES` (getdents64 with a tiny buffer lists the same entries in the same order).
//!
//! Process checks: `threads,DIR,N` (N pthreads each write and read back their own file in
//! DIR; returns N when every byte matched), `forkexec,FD,TEXT` (fork; the child execs this
//! program to `write` TEXT to the inherited FD; returns the child's exit status),
//! `spawnopen,PATH` (`posix_spawn` of `/bin/true` whose file action opens PATH as its stdout:
//! the open runs in the `vfork`-like child; returns the child's exit status, or fails with
//! the error `posix_spawn` returned), `strtokstat,PATH` (walks PATH's components with
//! `strtok`, `stat`ing each prefix as io500 does when it makes its directories; returns how
//! many components it saw: a first madfs access inside the loop must not lose its place),
//! `sigkeep,PATH` (installs a SIGSEGV handler, `stat`s PATH, then checks that every signal's
//! disposition and the alternate signal stack are what the program left; returns how many
//! changed, printing each), `readdirerrno,DIR` (errno set to 0, then `opendir` and `readdir`
//! to the end, as cmake counts files; returns the number of entries, or fails with the errno
//! found set at the end), `rawwrite,FD,TEXT` (a `write` made with the syscall instruction
//! itself, as a static binary or io_uring would, never seen by the preload).
//!
//! ```text
//! madfs-syscall mkdir,/madfs/d open,/madfs/d/f,creat+excl+w write,#0,hello lseek,#0,0,set \
//!               read,#0,5 close,#0 rmdir,/madfs/d unlink,/madfs/nope
//! ```

use std::ffi::CString;

fn cs(s: &str) -> CString {
    CString::new(s).expect("no NUL in arguments")
}

fn errno_name(e: i32) -> String {
    let names = [
        (libc::ENOENT, "ENOENT"),
        (libc::EEXIST, "EEXIST"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::EBADF, "EBADF"),
        (libc::EINVAL, "EINVAL"),
        (libc::EPERM, "EPERM"),
        (libc::EXDEV, "EXDEV"),
        (libc::ENOLCK, "ENOLCK"),
        (libc::ENODEV, "ENODEV"),
        (libc::EACCES, "EACCES"),
        (libc::ENOTTY, "ENOTTY"),
        (libc::ESPIPE, "ESPIPE"),
        (libc::EBUSY, "EBUSY"),
        (libc::EIO, "EIO"),
        (libc::ENOTCONN, "ENOTCONN"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::ENOTSUP, "ENOTSUP"),
        (libc::ERANGE, "ERANGE"),
        (libc::ENXIO, "ENXIO"),
        (libc::ELOOP, "ELOOP"),
    ];
    names
        .iter()
        .find(|(n, _)| *n == e)
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| format!("errno{e}"))
}

fn flags(spec: &str) -> i32 {
    let mut f = 0;
    let mut acc = libc::O_RDONLY;
    for p in spec.split('+') {
        match p {
            "r" => acc = libc::O_RDONLY,
            "w" => acc = libc::O_WRONLY,
            "rw" => acc = libc::O_RDWR,
            "creat" => f |= libc::O_CREAT,
            "excl" => f |= libc::O_EXCL,
            "trunc" => f |= libc::O_TRUNC,
            "append" => f |= libc::O_APPEND,
            "dir" => f |= libc::O_DIRECTORY,
            "cloexec" => f |= libc::O_CLOEXEC,
            "nofollow" => f |= libc::O_NOFOLLOW,
            other => panic!("unknown open flag {other}"),
        }
    }
    f | acc
}

fn main() {
    let mut fds: Vec<i32> = Vec::new();
    let mut code = 0;
    for step in std::env::args().skip(1) {
        let a: Vec<&str> = step.split(',').collect();
        let fd = |s: &str| -> i32 {
            match s.strip_prefix('#') {
                // an fd whose open failed: -1, so the step reports EBADF
                Some(n) => fds
                    .get(n.parse::<usize>().expect("fd index"))
                    .copied()
                    .unwrap_or(-1),
                None => s.parse().expect("fd number"),
            }
        };
        let num = |i: usize| -> i64 { a.get(i).map(|s| s.parse().expect("number")).unwrap_or(0) };
        // SAFETY: plain libc calls with valid C strings and buffers we own.
        let r: i64 = unsafe {
            match a[0] {
                "open" => {
                    let r = libc::open(
                        cs(a[1]).as_ptr(),
                        flags(a.get(2).copied().unwrap_or("r")),
                        0o644,
                    ) as i64;
                    if r >= 0 {
                        fds.push(r as i32);
                    }
                    r
                }
                "close" => libc::close(fd(a[1])) as i64,
                "write" => libc::write(fd(a[1]), a[2].as_ptr().cast(), a[2].len()) as i64,
                "pwrite" => libc::pwrite(fd(a[1]), a[2].as_ptr().cast(), a[2].len(), num(3)) as i64,
                "read" | "pread" => {
                    let mut buf = vec![0u8; num(2) as usize];
                    let r = if a[0] == "read" {
                        libc::read(fd(a[1]), buf.as_mut_ptr().cast(), buf.len())
                    } else {
                        libc::pread(fd(a[1]), buf.as_mut_ptr().cast(), buf.len(), num(3))
                    } as i64;
                    if r >= 0 {
                        println!("data {}", String::from_utf8_lossy(&buf[..r as usize]));
                    }
                    r
                }
                "lseek" => {
                    let whence = match a.get(3).copied().unwrap_or("set") {
                        "set" => libc::SEEK_SET,
                        "cur" => libc::SEEK_CUR,
                        "end" => libc::SEEK_END,
                        "data" => libc::SEEK_DATA,
                        "hole" => libc::SEEK_HOLE,
                        "bad" => 77,
                        w => panic!("whence {w}"),
                    };
                    libc::lseek(fd(a[1]), num(2), whence)
                }
                "stat" | "lstat" => {
                    let mut st: libc::stat = std::mem::zeroed();
                    let r = if a[0] == "stat" {
                        libc::stat(cs(a[1]).as_ptr(), &mut st)
                    } else {
                        libc::lstat(cs(a[1]).as_ptr(), &mut st)
                    } as i64;
                    if r == 0 {
                        println!("size {} mode {:o}", st.st_size, st.st_mode);
                    }
                    r
                }
                "fstat" => {
                    let mut st: libc::stat = std::mem::zeroed();
                    let r = libc::fstat(fd(a[1]), &mut st) as i64;
                    if r == 0 {
                        println!("size {} mode {:o}", st.st_size, st.st_mode);
                    }
                    r
                }
                "statfs" => {
                    let mut st: libc::statfs = std::mem::zeroed();
                    let r = libc::statfs(cs(a[1]).as_ptr(), &mut st) as i64;
                    if r == 0 {
                        println!("fstype {:x}", st.f_type);
                    }
                    r
                }
                "mkdir" => libc::mkdir(cs(a[1]).as_ptr(), 0o755) as i64,
                "rmdir" => libc::rmdir(cs(a[1]).as_ptr()) as i64,
                "unlink" => libc::unlink(cs(a[1]).as_ptr()) as i64,
                "rename" => libc::rename(cs(a[1]).as_ptr(), cs(a[2]).as_ptr()) as i64,
                "truncate" => libc::truncate(cs(a[1]).as_ptr(), num(2)) as i64,
                "ftruncate" => libc::ftruncate(fd(a[1]), num(2)) as i64,
                "dup" => {
                    let r = libc::dup(fd(a[1])) as i64;
                    if r >= 0 {
                        fds.push(r as i32);
                    }
                    r
                }
                "dup2" => libc::dup2(fd(a[1]), num(2) as i32) as i64,
                "fcntl-getfl" => libc::fcntl(fd(a[1]), libc::F_GETFL) as i64,
                "fcntl-lock" => {
                    let mut fl: libc::flock = std::mem::zeroed();
                    fl.l_type = libc::F_WRLCK as i16;
                    libc::fcntl(fd(a[1]), libc::F_SETLK, &fl) as i64
                }
                "fsync" => libc::fsync(fd(a[1])) as i64,
                "access" => libc::access(cs(a[1]).as_ptr(), libc::F_OK) as i64,
                // fchmodat2,PATH,MODE (octal),FLAGS: 0, nofollow, empty (PATH an fd: `#n`) or
                // bad; the syscall itself (glibc ≥ 2.39 issues it for fchmodat with flags)
                "fchmodat2" => {
                    let (dirfd, path, flags) = match a[3] {
                        "0" => (libc::AT_FDCWD, cs(a[1]), 0),
                        "nofollow" => (libc::AT_FDCWD, cs(a[1]), libc::AT_SYMLINK_NOFOLLOW),
                        "empty" => (fd(a[1]), cs(""), libc::AT_EMPTY_PATH),
                        "bad" => (libc::AT_FDCWD, cs(a[1]), 0x10000),
                        f => panic!("fchmodat2 flags {f}"),
                    };
                    let mode = u32::from_str_radix(a[2], 8).expect("octal mode");
                    libc::syscall(
                        madfs_hookabi::SYS_FCHMODAT2,
                        dirfd,
                        path.as_ptr(),
                        mode,
                        flags,
                    )
                }
                "chdir" => libc::chdir(cs(a[1]).as_ptr()) as i64,
                // closes every fd from N up (as daemons and subprocess children do)
                "closefrom" => libc::syscall(libc::SYS_close_range, num(1) as u32, u32::MAX, 0),
                "patched" => {
                    // x86_64: is the first `syscall` instruction of a libc function still
                    // reached (site left alone), or gone (rewritten into a jump), or kept
                    // behind a jump that replaced the `mov $nr, %eax` before it (a deferred
                    // site once patched)?
                    let f = libc::dlsym(libc::RTLD_DEFAULT, cs(a[1]).as_ptr()) as *const u8;
                    let code = std::slice::from_raw_parts(f, 32);
                    let kept = match code.windows(2).position(|w| w == [0x0f, 0x05]) {
                        Some(i) => i < 5 || code[i - 5] != 0xe9,
                        None => false,
                    };
                    println!(
                        "site {} {}",
                        a[1],
                        if kept { "unpatched" } else { "patched" }
                    );
                    0
                }
                // calls libmadfs.so's unwinding self-test (1: a panic inside it was caught)
                "unwind" => {
                    let f = libc::dlsym(libc::RTLD_DEFAULT, c"madfs_unwind_selftest".as_ptr());
                    if f.is_null() {
                        -1
                    } else {
                        let f: extern "C" fn() -> libc::c_int = std::mem::transmute(f);
                        println!("unwind caught {}", f());
                        0
                    }
                }
                "getcwd" => {
                    let mut buf = [0u8; 4096];
                    let p = libc::getcwd(buf.as_mut_ptr().cast(), buf.len());
                    if p.is_null() {
                        -1
                    } else {
                        println!("cwd {}", std::ffi::CStr::from_ptr(p).to_string_lossy());
                        0
                    }
                }
                "symlink" => libc::symlink(cs(a[1]).as_ptr(), cs(a[2]).as_ptr()) as i64,
                "link" => libc::link(cs(a[1]).as_ptr(), cs(a[2]).as_ptr()) as i64,
                "mmap" => {
                    // mmap,FD[,shared|private[,OFFSET]]: maps 4096 bytes read-only, prints
                    // the mapped bytes up to the first NUL
                    let private = a.get(2) == Some(&"private");
                    let kind = if private {
                        libc::MAP_PRIVATE
                    } else {
                        libc::MAP_SHARED
                    };
                    let off = if a.len() > 3 { num(3) } else { 0 };
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        4096,
                        libc::PROT_READ,
                        kind,
                        fd(a[1]),
                        off,
                    );
                    if p == libc::MAP_FAILED {
                        -1
                    } else {
                        let b = std::slice::from_raw_parts(p as *const u8, 4096);
                        let end = b.iter().position(|&c| c == 0).unwrap_or(4096);
                        println!("mapped {}", String::from_utf8_lossy(&b[..end]));
                        libc::munmap(p, 4096);
                        0
                    }
                }
                "copy-range" => libc::copy_file_range(
                    fd(a[1]),
                    std::ptr::null_mut(),
                    fd(a[2]),
                    std::ptr::null_mut(),
                    10,
                    0,
                ) as i64,
                "ioctl" => libc::ioctl(fd(a[1]), libc::FIONREAD, &mut 0i32) as i64,
                "readdir" => {
                    let d = libc::opendir(cs(a[1]).as_ptr());
                    if d.is_null() {
                        -1
                    } else {
                        let mut names = vec![];
                        loop {
                            let e = libc::readdir(d);
                            if e.is_null() {
                                break;
                            }
                            names.push(
                                std::ffi::CStr::from_ptr((*e).d_name.as_ptr())
                                    .to_string_lossy()
                                    .into_owned(),
                            );
                        }
                        libc::closedir(d);
                        names.sort();
                        println!("names {}", names.join(" "));
                        names.len() as i64
                    }
                }
                "seekcheck" => seekcheck(a[1], num(2) as usize),
                "listmut" => listmut(a[1], num(2) as usize),
                "rangelist" => rangelist(a[1], num(2) as u64),
                "findioctl" => findioctl(a[1], a[2], num(3) as u64),
                "smallbuf" => smallbuf(a[1], num(2) as usize),
                "threads" => threads(a[1], num(2) as usize),
                "forkexec" => forkexec(fd(a[1]), a[2]),
                "spawnopen" => spawnopen(a[1]),
                "strtokstat" => strtokstat(a[1]),
                "sigkeep" => sigkeep(a[1]),
                "rawwrite" => raw_write(fd(a[1]), a[2]),
                "readdirerrno" => readdir_errno(a[1]),
                op => panic!("unknown op {op}"),
            }
        };
        if r < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            println!("{} ERR {}", a[0], errno_name(e));
            code = 1;
        } else {
            println!("{} OK {r}", a[0]);
        }
    }
    std::process::exit(code);
}

/// All names of a directory through opendir/readdir (no `.`/`..`), in listing order.
///
/// # Safety
/// `d` is an open directory stream.
unsafe fn read_names(d: *mut libc::DIR, limit: usize) -> Vec<String> {
    let mut names = vec![];
    while names.len() < limit {
        // SAFETY: d is open; the entry is valid until the next readdir.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let n = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        if n != "." && n != ".." {
            names.push(n);
        }
    }
    names
}

fn opendir(dir: &str) -> *mut libc::DIR {
    // SAFETY: a valid C string.
    let d = unsafe { libc::opendir(cs(dir).as_ptr()) };
    assert!(
        !d.is_null(),
        "opendir {dir}: {}",
        std::io::Error::last_os_error()
    );
    d
}

fn seekcheck(dir: &str, step: usize) -> i64 {
    let d = opendir(dir);
    let mut names = vec![];
    let mut marks = vec![]; // (index of the next entry, telldir)
    loop {
        if names.len() % step == 0 {
            // SAFETY: d is open.
            marks.push((names.len(), unsafe { libc::telldir(d) }));
        }
        // SAFETY: d is open.
        let got = unsafe { read_names(d, 1) };
        if got.is_empty() {
            break;
        }
        names.extend(got);
    }
    let mut bad = 0;
    for &(i, pos) in &marks {
        // SAFETY: d is open; pos came from telldir on it.
        let next = unsafe {
            libc::seekdir(d, pos);
            read_names(d, 1)
        };
        if next.first() != names.get(i) {
            eprintln!(
                "seekdir to mark {i}: got {next:?}, expected {:?}",
                names.get(i)
            );
            bad += 1;
        }
    }
    // SAFETY: d is open.
    unsafe { libc::closedir(d) };
    println!(
        "seekcheck {} entries, {} marks, {bad} wrong",
        names.len(),
        marks.len()
    );
    if bad > 0 {
        -1
    } else {
        names.len() as i64
    }
}

fn listmut(dir: &str, n: usize) -> i64 {
    let d0 = opendir(dir);
    // SAFETY: d0 is open.
    let before = unsafe { read_names(d0, usize::MAX) };
    // SAFETY: d0 is open.
    unsafe { libc::closedir(d0) };
    let d = opendir(dir);
    // SAFETY: d is open.
    let mut seen = unsafe { read_names(d, before.len() / 2) };
    // remove n entries spread over the listing (some seen, some not), add n new ones
    let gone: std::collections::HashSet<&String> = before
        .iter()
        .step_by((before.len() / n.max(1)).max(1))
        .take(n)
        .collect();
    for g in &gone {
        // SAFETY: a valid C string.
        assert_eq!(
            unsafe { libc::unlink(cs(&format!("{dir}/{g}")).as_ptr()) },
            0
        );
    }
    for i in 0..n {
        let p = cs(&format!("{dir}/listmut-new.{i}"));
        // SAFETY: a valid C string.
        let fd = unsafe { libc::open(p.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644) };
        assert!(fd >= 0);
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
    }
    // SAFETY: d is open.
    seen.extend(unsafe { read_names(d, usize::MAX) });
    // SAFETY: d is open.
    unsafe { libc::closedir(d) };
    let mut count = std::collections::HashMap::new();
    for s in &seen {
        *count.entry(s.as_str()).or_insert(0) += 1;
    }
    let dup = count.values().filter(|c| **c > 1).count();
    let missing = before
        .iter()
        .filter(|b| !gone.contains(b) && !count.contains_key(b.as_str()))
        .count();
    println!(
        "listmut {} before, {} removed, {n} added, {} seen, {dup} repeated, {missing} skipped",
        before.len(),
        gone.len(),
        seen.len()
    );
    if dup > 0 || missing > 0 {
        -1
    } else {
        seen.len() as i64
    }
}

/// getdents64 on `fd` until the end; names without `.`/`..`.
fn getdents_all(fd: i32) -> Vec<String> {
    getdents_with(fd, 32 << 10)
}

/// getdents64 with a `len`-byte buffer until the end; names without `.`/`..`.
fn getdents_with(fd: i32, len: usize) -> Vec<String> {
    let mut buf = vec![0u8; len];
    let mut names = vec![];
    loop {
        // SAFETY: buf is ours.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        if n == 0 {
            return names;
        }
        let mut off = 0usize;
        while off < n as usize {
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            let name = &buf[off + 19..off + reclen];
            let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
            off += reclen;
        }
    }
}

fn open_dir_fd(dir: &str) -> i32 {
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(cs(dir).as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0, "open {dir}: {}", std::io::Error::last_os_error());
    fd
}

/// The listing through getdents64 with a `len`-byte buffer equals the one with a large buffer.
fn smallbuf(dir: &str, len: usize) -> i64 {
    let fd = open_dir_fd(dir);
    let big = getdents_all(fd);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    let fd = open_dir_fd(dir);
    let small = getdents_with(fd, len);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    println!(
        "smallbuf {len} bytes: {} entries, same order: {}",
        small.len(),
        small == big
    );
    if small == big {
        small.len() as i64
    } else {
        -1
    }
}

fn rangelist(dir: &str, k: u64) -> i64 {
    use madfs_proto::ioctl::{DirRange, MADFS_IOC_DIR_RANGE};
    let fd = open_dir_fd(dir);
    let mut plain = getdents_all(fd);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    let end = 1u64 << 63;
    let step = end / k;
    let mut union = vec![];
    let mut per = vec![];
    for i in 0..k {
        let r = DirRange {
            from: i * step,
            to: if i + 1 == k { 0 } else { (i + 1) * step },
        };
        let fd = open_dir_fd(dir);
        // SAFETY: r is a struct madfs_dir_range.
        let rc = unsafe { libc::ioctl(fd, MADFS_IOC_DIR_RANGE as _, &r) };
        assert_eq!(rc, 0, "ioctl: {}", std::io::Error::last_os_error());
        let names = getdents_all(fd);
        per.push(names.len());
        union.extend(names);
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
    }
    let n = union.len();
    plain.sort();
    union.sort();
    println!("rangelist {k} ranges: {per:?} = {n}, plain {}", plain.len());
    if union != plain {
        -1
    } else {
        n as i64
    }
}

fn findioctl(dir: &str, glob: &str, size: u64) -> i64 {
    use madfs_proto::ioctl::{FindArgs, MADFS_IOC_FIND_COUNT, MADFS_IOC_FIND_LIST};
    let pat = cs(glob);
    let mut f = FindArgs {
        name: pat.as_ptr(),
        size,
        size_unit: 1,
        newer_than_ns: i64::MIN,
        kind: 0,
        flags: 0,
        matched: 0,
        scanned: 0,
    };
    let fd = open_dir_fd(dir);
    // SAFETY: f is a struct madfs_find with a valid pattern.
    if unsafe { libc::ioctl(fd, MADFS_IOC_FIND_COUNT as _, &mut f) } != 0 {
        return -1;
    }
    let counted = f.matched;
    // SAFETY: as above.
    if unsafe { libc::ioctl(fd, MADFS_IOC_FIND_LIST as _, &mut f) } != 0 {
        return -1;
    }
    let mut names = getdents_all(fd);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    names.sort();
    println!(
        "findioctl matched {counted} scanned {} listed {}",
        f.scanned,
        names.join(" ")
    );
    names.len() as i64
}

/// N threads, each writing 256 KiB of its own pattern to `DIR/tK` and reading it back.
fn threads(dir: &str, n: usize) -> i64 {
    let results: Vec<Result<(), String>> = (0..n)
        .map(|k| {
            let path = format!("{dir}/t{k}");
            std::thread::spawn(move || {
                let data: Vec<u8> = (0..256 * 1024).map(|i| (i * 7 + k * 13) as u8).collect();
                std::fs::write(&path, &data).map_err(|e| format!("write {path}: {e}"))?;
                match std::fs::read(&path) {
                    Ok(r) if r == data => Ok(()),
                    Ok(r) => Err(format!("read {path}: {} bytes differ", r.len())),
                    Err(e) => Err(format!("read {path}: {e}")),
                }
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
        .collect();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    println!("threads: {ok} of {n} files written and read back");
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        eprintln!("threads: {e}");
    }
    if ok == n {
        n as i64
    } else {
        // SAFETY: sets this thread's errno.
        unsafe { *libc::__errno_location() = libc::EIO };
        -1
    }
}

/// io500's `u_create_dir_recursive` without the mkdirs: the number of components of `path`
/// that `strtok` hands out while each prefix is `stat`ed.
fn strtokstat(path: &str) -> i64 {
    let mut copy = cs(path).into_bytes_with_nul();
    let slash = cs("/");
    let mut prefix = String::new();
    let mut seen = 0;
    // SAFETY: `copy` is a writable NUL-terminated buffer that outlives the loop; strtok is
    // given it once, then null.
    let mut tok = unsafe { libc::strtok(copy.as_mut_ptr().cast(), slash.as_ptr()) };
    while !tok.is_null() {
        seen += 1;
        // SAFETY: strtok returns a NUL-terminated token inside `copy`.
        let t = unsafe { std::ffi::CStr::from_ptr(tok) }.to_string_lossy();
        prefix = format!("{prefix}/{t}");
        let p = cs(&format!("{prefix}/"));
        // SAFETY: a stat into a zeroed buffer (its result does not matter here).
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::stat(p.as_ptr(), &mut st);
        }
        // SAFETY: go on in the same string.
        tok = unsafe { libc::strtok(std::ptr::null_mut(), slash.as_ptr()) };
    }
    seen
}

/// Entries of `dir` by `readdir`, telling its end from an error by errno as POSIX says.
fn readdir_errno(dir: &str) -> i64 {
    let p = cs(dir);
    // SAFETY: opendir/readdir/closedir on a stream we own; errno is this thread's.
    unsafe {
        *libc::__errno_location() = 0;
        let d = libc::opendir(p.as_ptr());
        if d.is_null() {
            return -1;
        }
        let mut n = 0;
        while !libc::readdir(d).is_null() {
            n += 1;
        }
        let e = *libc::__errno_location();
        libc::closedir(d);
        if e != 0 {
            *libc::__errno_location() = e;
            return -1;
        }
        n
    }
}

/// `write(fd, text)` with the syscall instruction in this program (never intercepted).
fn raw_write(fd: i32, text: &str) -> i64 {
    let r: i64;
    // SAFETY: the write syscall on a valid buffer of `text.len()` bytes; clobbers only what
    // the kernel's syscall ABI does.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_write => r,
            in("rdi") fd as i64,
            in("rsi") text.as_ptr(),
            in("rdx") text.len(),
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    // SAFETY: as above (aarch64: x8 = number, x0-x2 = arguments, x0 = result).
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!(
            "svc #0",
            in("x8") libc::SYS_write,
            inlateout("x0") fd as i64 => r,
            in("x1") text.as_ptr(),
            in("x2") text.len(),
            options(nostack)
        );
    }
    if r < 0 {
        // SAFETY: sets this thread's errno.
        unsafe { *libc::__errno_location() = -r as i32 };
        return -1;
    }
    r
}

extern "C" fn on_segv(_: libc::c_int) {}

/// The kernel's flag for "sa_restorer is set" (x86_64 and aarch64); not in the libc crate.
const SA_RESTORER: libc::c_int = 0x0400_0000;

/// The number of signal dispositions (and alternate stack) that a `stat` of `path` changed,
/// with a SIGSEGV handler of the program's installed first.
fn sigkeep(path: &str) -> i64 {
    // SAFETY: sigaction/sigaltstack into zeroed structs; the handler is a plain function;
    // stat into a zeroed buffer.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_segv as *const () as usize;
        libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
        let read = || {
            let mut all = vec![];
            for sig in 1..65 {
                let mut a: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, std::ptr::null(), &mut a);
                // glibc adds SA_RESTORER whenever it sets a disposition; it means
                // nothing for SIG_DFL and SIG_IGN
                let restorer = if a.sa_sigaction > 1 { 0 } else { SA_RESTORER };
                all.push((a.sa_sigaction, a.sa_flags & !restorer));
            }
            let mut st: libc::stack_t = std::mem::zeroed();
            libc::sigaltstack(std::ptr::null(), &mut st);
            (all, st.ss_sp as usize, st.ss_flags)
        };
        let before = read();
        let p = cs(path);
        let mut st: libc::stat = std::mem::zeroed();
        libc::stat(p.as_ptr(), &mut st);
        let after = read();
        let mut changed = 0;
        for (i, (b, a)) in before.0.iter().zip(&after.0).enumerate() {
            if b != a {
                println!("signal {} changed: {b:?} -> {a:?}", i + 1);
                changed += 1;
            }
        }
        if (before.1, before.2) != (after.1, after.2) {
            println!("alternate stack changed");
            changed += 1;
        }
        if after.0[libc::SIGSEGV as usize - 1].0 != on_segv as *const () as usize {
            println!("SIGSEGV handler lost");
        }
        changed
    }
}

/// `posix_spawn`s `/bin/true` with PATH opened as its stdout by a file action (an open in
/// the CLONE_VM child); returns the child's exit status, or -1 with errno set to the error
/// `posix_spawn` returned.
fn spawnopen(path: &str) -> i64 {
    let p = cs(path);
    let prog = cs("/bin/true");
    let argv = [prog.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
    // SAFETY: file actions initialised before use and destroyed after; valid C strings and
    // argv; environ inherited.
    unsafe {
        let mut fa: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawn_file_actions_init(&mut fa);
        libc::posix_spawn_file_actions_addopen(
            &mut fa,
            1,
            p.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            0o644,
        );
        let mut pid = 0;
        extern "C" {
            static environ: *const *mut libc::c_char;
        }
        let r = libc::posix_spawn(
            &mut pid,
            prog.as_ptr(),
            &fa,
            std::ptr::null(),
            argv.as_ptr(),
            environ,
        );
        libc::posix_spawn_file_actions_destroy(&mut fa);
        if r != 0 {
            *libc::__errno_location() = r;
            return -1;
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status) as i64
        } else {
            -1
        }
    }
}

/// Forks; the child execs this program with `write,FD,TEXT`; returns its exit status.
fn forkexec(fd: i32, text: &str) -> i64 {
    let exe = std::env::current_exe().expect("current_exe");
    let exe = CString::new(exe.as_os_str().as_encoded_bytes()).expect("path");
    let argv0 = cs("madfs-syscall");
    let step = cs(&format!("write,{fd},{text}"));
    let argv = [argv0.as_ptr(), step.as_ptr(), std::ptr::null()];
    // SAFETY: the child only execs (or _exits).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: valid NUL-terminated argv; environ inherited.
        unsafe {
            libc::execv(exe.as_ptr(), argv.as_ptr());
            libc::_exit(127)
        }
    }
    if pid < 0 {
        return -1;
    }
    let mut status = 0;
    // SAFETY: our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as i64
    } else {
        -1
    }
}
