//! Opening and closing madfs files and what copies or changes their fds: `openat` (with
//! `O_CREAT`, `O_TRUNC`, links followed), `close`, `close_range`, `dup`, `dup2`/`dup3`,
//! `fcntl`.

use super::common::{neg, raw_at, raw_res, ret, Ret, UMASK};
use super::desc::{publish, sync_desc};
use super::follow::with_links;
use super::paths::{ours, target, Target};
use crate::conn;
use crate::fdtable::{self, Desc, KIND_DIR, KIND_FILE};
use madfs_client::{OpenKind, OpenSpec};
use madfs_hookabi::raw;
use madfs_proto::{Errno, FsResult};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

fn open_path(p: String, flags: i32, mode: u32) -> FsResult<i32> {
    let nofollow = flags & libc::O_NOFOLLOW != 0;
    with_links(
        &p,
        !nofollow,
        |p| open_once(p, flags, mode),
        |h| {
            // SAFETY: openat on a host path; mode is read only with O_CREAT/O_TMPFILE.
            let r = unsafe { raw_at(libc::SYS_openat, h, [flags as isize, mode as isize, 0]) };
            raw_res(r).map(|fd| fd as i32)
        },
    )
}

/// `open` of madfs path `p`; ELOOP when `p` is a symbolic link.
fn open_once(p: &str, flags: i32, mode: u32) -> FsResult<i32> {
    if conn::in_vfork_child() {
        // A `vfork`/`posix_spawn` child shares our memory but not our fd table: a
        // description it made would go into the parent's table under a number the parent
        // does not have (and a first connection made here would keep its fds in the child
        // only). Such a child cannot open madfs files (refused before any side effect such
        // as O_CREAT/O_TRUNC); its parent opens them and passes the fd.
        return Err(Errno::ENOTSUP);
    }
    let spec = OpenSpec::from_flags(flags, mode, UMASK.load(Relaxed));
    let keep = !(libc::O_CREAT
        | libc::O_EXCL
        | libc::O_TRUNC
        | libc::O_CLOEXEC
        | libc::O_NOCTTY
        | libc::O_DIRECTORY
        | libc::O_NOFOLLOW);
    let status = flags & keep;
    // changes made by this process from here on make the open's attributes stale for fstat
    let gen = madfs_client::mutations();
    let cloexec = flags & libc::O_CLOEXEC != 0;
    // the kernel fd of a plain open is made while its lookup is on the wire (dropped, as
    // on every error below, it is closed)
    let (opening, early) =
        conn::with(|c| c.open_with(p, &spec, || fdtable::new_kernel_fd(cloexec)))?;
    if opening.kind == OpenKind::Special {
        // node-local: a host object behind it (`crate::special`), not a madfs descriptor
        drop(early);
        return crate::special::open(&opening.attr, flags);
    }
    let (create, trunc) = (spec.create, spec.trunc);
    let (attr, cap) = (opening.attr, opening.cap);
    let kind = match opening.kind {
        OpenKind::Dir => KIND_DIR,
        _ => KIND_FILE,
    };
    // fstat may use the answer of a lookup, or of a create whose request was the one change
    // any client of the process made meanwhile (a truncate makes several: no)
    let now = madfs_client::mutations();
    let fresh = match (create, trunc) {
        (false, false) => Some(gen),
        (true, false) => (now == gen + 1).then_some(now),
        _ => None,
    }
    .map(|gen| fdtable::Fresh {
        attr,
        gen,
        until: std::time::Instant::now() + fdtable::FRESH_FOR,
    });
    let k = match early {
        Some(k) => k,
        None => fdtable::new_kernel_fd(cloexec)?,
    };
    let fd = k.fd();
    let d = Desc::create_on(k, kind, status, p, &attr, &cap, fresh)?;
    opening.keep(); // the description's drop gives the open reference back
    fdtable::insert(fd, d);
    Ok(fd)
}

pub(super) fn sys_openat(dirfd: i64, path: isize, flags: i64, mode: i64) -> Ret {
    let p = ours!(target(dirfd, path));
    ret(open_path(p, flags as i32, mode as u32), |fd| fd as isize)
}

/// Forgets `fd` in this process and publishes the size of its description if dirty; with
/// the close-sync setting, a description written to is made durable first.
fn forget(fd: i64) -> FsResult<()> {
    let Some(d) = fdtable::remove(fd) else {
        return Ok(());
    };
    let r = if !d.is_dir() && d.take_unsynced() && conn::with(|c| Ok(c.close_sync()))? {
        sync_desc(&d)
    } else {
        publish(&d)
    };
    drop(d);
    if fdtable::RELEASES_DUE.swap(false, Relaxed) {
        // a batch of closes for the files' home servers
        let _ = conn::with(|c| {
            c.flush_releases_quietly();
            Ok(())
        });
    }
    r
}

pub(super) fn sys_close(fd: i64) -> Ret {
    fdtable::fd_gone(fd);
    if !fdtable::is_ours(fd) || conn::in_vfork_child() {
        return None;
    }
    let r = forget(fd);
    // SAFETY: closing the kernel fd that backed the madfs fd.
    let k = unsafe { raw!(libc::SYS_close as isize, fd as isize) };
    Some(if r.is_err() && k == 0 {
        neg(Errno::EIO)
    } else {
        k
    })
}

pub(super) fn sys_close_range(first: i64, last: i64, flags: i64) -> Ret {
    if flags & libc::CLOSE_RANGE_CLOEXEC as i64 == 0 && !conn::in_vfork_child() {
        fdtable::fds_gone(first, last);
        let last = last.min(fdtable::MAX_FD as i64 - 1);
        let mut fd = first.max(0);
        while fd <= last {
            if fdtable::is_ours(fd) {
                let _ = forget(fd);
            }
            fd += 1;
        }
    }
    None
}

fn adopt_dup(new: isize, d: Arc<Desc>) -> isize {
    if new >= 0 {
        if new as usize >= fdtable::MAX_FD {
            // SAFETY: closing the fd we just got.
            unsafe { raw!(libc::SYS_close as isize, new) };
            return neg(Errno::EMFILE);
        }
        fdtable::insert(new as i32, d);
    }
    new
}

pub(super) fn sys_dup(fd: i64) -> Ret {
    if !fdtable::is_ours(fd) || conn::in_vfork_child() {
        return None;
    }
    let d = fdtable::get(fd)?;
    // SAFETY: dup of a valid fd.
    let new = unsafe { raw!(libc::SYS_dup as isize, fd as isize) };
    Some(adopt_dup(new, d))
}

pub(super) fn sys_dup3(old: i64, new: i64, flags: i64, is_dup2: bool) -> Ret {
    if old != new {
        fdtable::fd_gone(new);
    }
    let old_ours = fdtable::is_ours(old);
    let new_ours = fdtable::is_ours(new);
    if (!old_ours && !new_ours) || conn::in_vfork_child() {
        return None;
    }
    if old == new {
        return if is_dup2 {
            None
        } else {
            Some(neg(Errno::EINVAL))
        };
    }
    if new_ours {
        let _ = forget(new);
    }
    if !old_ours {
        return None;
    }
    let d = fdtable::get(old)?;
    // SAFETY: dup3 on fds the caller named.
    let r = unsafe {
        raw!(
            libc::SYS_dup3 as isize,
            old as isize,
            new as isize,
            flags as isize,
        )
    };
    Some(adopt_dup(r, d))
}

pub(super) fn sys_fcntl(fd: i64, cmd: i64, arg: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    match cmd as i32 {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            if conn::in_vfork_child() {
                return None;
            }
            // SAFETY: fcntl dup on a valid fd.
            let r = unsafe {
                raw!(
                    libc::SYS_fcntl as isize,
                    fd as isize,
                    cmd as isize,
                    arg as isize,
                )
            };
            Some(adopt_dup(r, d))
        }
        libc::F_GETFD | libc::F_SETFD => None,
        libc::F_GETFL => Some(d.flags() as isize),
        libc::F_SETFL => {
            let settable = libc::O_APPEND
                | libc::O_NONBLOCK
                | libc::O_DIRECT
                | libc::O_NOATIME
                | libc::O_ASYNC;
            let new = (d.flags() & !settable) | (arg as i32 & settable);
            d.hdr().flags.store(new as u32, Release);
            Some(0)
        }
        // record locks cannot be honoured across madfs clients: say so
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => Some(neg(Errno::ENOLCK)),
        _ => Some(neg(Errno::EINVAL)),
    }
}
