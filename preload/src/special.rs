//! Special files under the mount (docs/consistency.md, "Special files"): `mknod`/`mkfifo`
//! make entries with a type (FIFO, socket, character or block device with its `rdev`) on the
//! servers, seen by every node; what *using* one does is node-local, as on NFS:
//! - opening a FIFO opens a host FIFO private to the file and to the user
//!   (`/tmp/madfs-fifo-EUID/CLUSTER-ID`, 0600 in a 0700 directory, made on first use):
//!   processes of one user and one node that open the same madfs FIFO talk through it (the
//!   directory is refused, EACCES, unless it is the user's own and closed to others: no one
//!   else can make it first or plant anything in it);
//! - `bind` of a unix socket at a madfs path makes the socket entry and binds the socket to a
//!   host path private to it (`/tmp/madfs-sock/CLUSTER-ID`); `connect` to that madfs path
//!   connects there (so, from the same node);
//! - opening a device opens the host's device of that number (`/dev/char/MAJ:MIN`,
//!   `/dev/block/MAJ:MIN`), ENXIO where the host has none; opening a socket is ENXIO, as in
//!   the kernel.

use crate::conn;
use crate::hooks::{neg, raw_res, target, with_links, zero, Target, UMASK};
use madfs_hookabi::raw;
use madfs_proto::{Attr, Errno, FsResult};
use std::ffi::CString;
use std::sync::atomic::Ordering::Relaxed;

type Ret = Option<isize>;

/// Host directory of the FIFOs behind madfs FIFOs, less the effective uid that ends its name
/// ([`private_dir`]).
const FIFO_DIR: &str = "/tmp/madfs-fifo-";
/// Host directory of the sockets behind madfs sockets.
const SOCK_DIR: &str = "/tmp/madfs-sock";

/// `mknodat`: a regular file (type 0 or `S_IFREG`), FIFO, socket or device entry.
pub fn sys_mknodat(dirfd: i64, path: isize, mode: i64, dev: i64) -> Ret {
    let p = match target(dirfd, path) {
        Target::External => return None,
        Target::Fail(e) => return Some(neg(e)),
        Target::Ours(p) => p,
    };
    let mode = mode as u32;
    let perm = mode & !UMASK.load(Relaxed) & 0o7777;
    let kind = mode & libc::S_IFMT;
    zero(with_links(
        &p,
        false,
        |p| match kind {
            0 | libc::S_IFREG => conn::with(|c| {
                let flags = madfs_client::OpenFlags {
                    create: true,
                    excl: true,
                    trunc: false,
                    mode: perm,
                };
                let f = c.open_as(p, flags, 0)?;
                madfs_client::FileSystem::close(c, f)
            }),
            libc::S_IFDIR => Err(Errno::EPERM),
            k if madfs_proto::is_special(k) => {
                conn::with(|c| c.mknod(p, k | perm, dev as u64)).map(drop)
            }
            _ => Err(Errno::EINVAL),
        },
        |h| {
            // SAFETY: mknodat of a host path with the caller's mode and device.
            let r = unsafe {
                crate::hooks::raw_at(libc::SYS_mknodat, h, [mode as isize, dev as isize, 0])
            };
            raw_res(r).map(drop)
        },
    ))
}

/// The name of the host file behind special file `a` (FIFO or socket) of this cluster.
fn host_name(a: &Attr) -> FsResult<String> {
    Ok(format!("{:016x}-{:016x}", conn::cluster_id()?, a.id))
}

/// The host file behind special file `a` in directory `dir`.
fn host_path(dir: &str, a: &Attr) -> FsResult<String> {
    Ok(format!("{dir}/{}", host_name(a)?))
}

/// Makes `dir` (world-writable, sticky, like /tmp) if it is missing.
fn host_dir(dir: &str) -> FsResult<()> {
    let c = CString::new(dir).map_err(|_| Errno::EINVAL)?;
    // SAFETY: a NUL-terminated path.
    let r = unsafe { raw!(libc::SYS_mkdirat, libc::AT_FDCWD, c.as_ptr(), 0o1777) };
    if r == 0 {
        // SAFETY: as above (the umask cut the mode).
        unsafe { raw!(libc::SYS_fchmodat, libc::AT_FDCWD, c.as_ptr(), 0o1777) };
    } else if r != -(libc::EEXIST as isize) {
        return Err(Errno::new(-r as i32));
    }
    Ok(())
}

/// A kernel fd this module opened, closed when dropped.
struct Fd(i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: an fd of ours, closed once.
        unsafe { raw!(libc::SYS_close, self.0) };
    }
}

/// The directory `PREFIX<euid>` of this process's user, made 0700 if it is missing, opened
/// without following a link. Refused (EACCES) unless what is there is a directory of the
/// effective user that no one else may enter (no group or other bits): one another user made
/// first, or a link put there, gets nothing made in it or through it.
fn private_dir(prefix: &str) -> FsResult<Fd> {
    // SAFETY: geteuid takes nothing.
    let euid = unsafe { raw!(libc::SYS_geteuid) } as u32;
    let c = CString::new(format!("{prefix}{euid}")).map_err(|_| Errno::EINVAL)?;
    // SAFETY: a NUL-terminated path.
    let made = unsafe { raw!(libc::SYS_mkdirat, libc::AT_FDCWD, c.as_ptr(), 0o700) };
    if made != 0 && made != -(libc::EEXIST as isize) {
        return Err(Errno::new(-made as i32));
    }
    let how = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: as above.
    let fd = match raw_res(unsafe { raw!(libc::SYS_openat, libc::AT_FDCWD, c.as_ptr(), how, 0) }) {
        Ok(fd) => Fd(fd as i32),
        // a link (ELOOP) or another kind of file (ENOTDIR) in its place
        Err(Errno::ELOOP | Errno::ENOTDIR) => return Err(Errno::EACCES),
        Err(e) => return Err(e),
    };
    // SAFETY: plain data; zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our fd and a stat buffer on the stack.
    raw_res(unsafe { raw!(libc::SYS_fstat, fd.0, &mut st as *mut libc::stat) })?;
    if made == 0 && st.st_mode & 0o7777 != 0o700 {
        // ours, just made: the umask cut the mode
        // SAFETY: our fd.
        raw_res(unsafe { raw!(libc::SYS_fchmod, fd.0, 0o700) })?;
        st.st_mode = (st.st_mode & !0o7777) | 0o700;
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR || st.st_uid != euid || st.st_mode & 0o077 != 0 {
        return Err(Errno::EACCES);
    }
    Ok(fd)
}

/// The host FIFO behind madfs FIFO `a`, made (0600) in this user's FIFO directory if it is
/// missing, opened with `flags` (never through a link).
fn open_fifo(a: &Attr, flags: i32) -> FsResult<i32> {
    let dir = private_dir(FIFO_DIR)?;
    let c = CString::new(host_name(a)?).map_err(|_| Errno::EINVAL)?;
    // SAFETY: our directory's fd and a NUL-terminated name.
    let r = unsafe {
        raw!(
            libc::SYS_mknodat,
            dir.0,
            c.as_ptr(),
            libc::S_IFIFO | 0o600,
            0
        )
    };
    if r == 0 {
        // SAFETY: as above (the umask cut the mode).
        unsafe { raw!(libc::SYS_fchmodat, dir.0, c.as_ptr(), 0o600) };
    } else if r != -(libc::EEXIST as isize) {
        return Err(Errno::new(-r as i32));
    }
    // SAFETY: as above, the caller's flags.
    let r = unsafe {
        raw!(
            libc::SYS_openat,
            dir.0,
            c.as_ptr(),
            flags | libc::O_NOFOLLOW,
            0
        )
    };
    raw_res(r).map(|fd| fd as i32)
}

/// `open` of special file `a` (its madfs path's lookup already checked the caller's access):
/// a kernel fd of the host object behind it, per the rules in the module doc.
pub fn open(a: &Attr, flags: i32) -> FsResult<i32> {
    let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
    let path = match a.mode & libc::S_IFMT {
        libc::S_IFIFO => return open_fifo(a, flags),
        kind @ (libc::S_IFCHR | libc::S_IFBLK) => device(kind, madfs_proto::decode_dev(a.rdev))?,
        _ => return Err(Errno::ENXIO),
    };
    let c = CString::new(path).map_err(|_| Errno::EINVAL)?;
    // SAFETY: a NUL-terminated path, the caller's flags.
    let r = unsafe { raw!(libc::SYS_openat, libc::AT_FDCWD, c.as_ptr(), flags, 0) };
    match raw_res(r) {
        Ok(fd) => Ok(fd as i32),
        Err(Errno::ENOENT) => Err(Errno::ENXIO),
        Err(e) => Err(e),
    }
}

/// The host's node of device `dev` of type `kind`: `/dev/char/MAJ:MIN` (or `block`), else
/// the first node of that number directly in `/dev`; ENXIO if there is none.
fn device(kind: u32, dev: u64) -> FsResult<String> {
    let dir = if kind == libc::S_IFCHR {
        "char"
    } else {
        "block"
    };
    let by_number = format!("/dev/{dir}/{}:{}", libc::major(dev), libc::minor(dev));
    if std::path::Path::new(&by_number).exists() {
        return Ok(by_number);
    }
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let found = std::fs::read_dir("/dev")
        .map_err(|_| Errno::ENXIO)?
        .flatten()
        .find(|e| {
            e.metadata().is_ok_and(|m| {
                let t = m.file_type();
                m.rdev() == dev
                    && if kind == libc::S_IFCHR {
                        t.is_char_device()
                    } else {
                        t.is_block_device()
                    }
            })
        });
    found
        .map(|e| e.path().display().to_string())
        .ok_or(Errno::ENXIO)
}

/// The path of a unix socket address, when `addr` is one with a path (not abstract, not
/// unnamed): a NUL-terminated copy on the stack. Reads only within `len`.
fn unix_path(addr: isize, len: i64) -> Option<[u8; 110]> {
    let len = usize::try_from(len).ok()?;
    if addr == 0 || len <= 2 || len > std::mem::size_of::<libc::sockaddr_un>() {
        return None;
    }
    // SAFETY: the caller's socket address of `len` bytes (checked against sockaddr_un).
    let sa = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    if u16::from_ne_bytes([sa[0], sa[1]]) != libc::AF_UNIX as u16 || sa[2] == 0 {
        return None;
    }
    let mut out = [0u8; 110];
    for (o, b) in out.iter_mut().zip(sa[2..].iter().take_while(|b| **b != 0)) {
        *o = *b;
    }
    Some(out)
}

/// Whether a `bind`/`connect` surely names no madfs path (the hook's early exit).
pub fn surely_external(addr: isize, len: i64) -> bool {
    match unix_path(addr, len) {
        Some(p) => crate::hooks::surely_external(libc::AT_FDCWD as i64, p.as_ptr() as isize),
        None => true,
    }
}

/// The madfs path a unix socket address names (`None`: not ours).
fn socket_target(addr: isize, len: i64) -> Option<Result<String, Errno>> {
    let path = unix_path(addr, len)?;
    match target(libc::AT_FDCWD as i64, path.as_ptr() as isize) {
        Target::External => None,
        Target::Fail(e) => Some(Err(e)),
        Target::Ours(p) => Some(Ok(p)),
    }
}

/// `sockaddr_un` of host path `p`.
fn host_addr(p: &str) -> FsResult<libc::sockaddr_un> {
    // SAFETY: plain data; zero is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if p.len() >= sa.sun_path.len() {
        return Err(Errno::ENAMETOOLONG);
    }
    for (d, s) in sa.sun_path.iter_mut().zip(p.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(sa)
}

/// `bind`/`connect` (`nr`) of socket `fd` to host path `p`.
fn host_call(nr: i64, fd: i64, p: &str) -> FsResult<()> {
    let sa = host_addr(p)?;
    let len = std::mem::size_of::<libc::sockaddr_un>();
    // SAFETY: the caller's socket and a complete sockaddr_un on the stack.
    let r = unsafe { raw!(nr, fd, &sa as *const libc::sockaddr_un, len) };
    raw_res(r).map(drop)
}

/// `bind` of a unix socket to a madfs path: the socket entry (EADDRINUSE if the name
/// exists), then the socket bound to its host path.
pub fn sys_bind(fd: i64, addr: isize, len: i64) -> Ret {
    let p = match socket_target(addr, len)? {
        Ok(p) => p,
        Err(e) => return Some(neg(e)),
    };
    let mode = libc::S_IFSOCK | (0o777 & !UMASK.load(Relaxed));
    zero((|| {
        let a = match conn::with(|c| c.mknod(&p, mode, 0)) {
            Err(Errno::EEXIST) => return Err(Errno::EADDRINUSE),
            r => r?,
        };
        let bound = host_dir(SOCK_DIR)
            .and_then(|_| host_path(SOCK_DIR, &a))
            .and_then(|h| host_call(libc::SYS_bind, fd, &h));
        if bound.is_err() {
            let _ = conn::with(|c| madfs_client::FileSystem::unlink(c, &p));
        }
        bound
    })())
}

/// `connect` of a unix socket to a madfs path: to the host socket behind it (bound on this
/// node). ECONNREFUSED when the entry is not a socket; the caller needs write permission on
/// it (EACCES), as in the kernel.
pub fn sys_connect(fd: i64, addr: isize, len: i64) -> Ret {
    let p = match socket_target(addr, len)? {
        Ok(p) => p,
        Err(e) => return Some(neg(e)),
    };
    zero((|| {
        let a = conn::with(|c| c.access_normalized(&p, madfs_proto::ACCESS_W))?;
        if a.mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(Errno::ECONNREFUSED);
        }
        host_call(libc::SYS_connect, fd, &host_path(SOCK_DIR, &a)?)
    })())
}
