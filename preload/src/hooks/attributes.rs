//! A madfs file's attributes: the stat family (`newfstatat`, `fstat`, `statx`), `faccessat`,
//! `utimensat`, `fchmodat`/`fchmod`, `fchownat`/`fchown`, `statfs`/`fstatfs`.

use super::common::{neg, raw_at, raw_res, raw_unit, zero, Ret};
use super::desc::{publish, stat_fd};
use super::follow::{stat_links, stat_links_with, with_links};
use super::paths::{empty_path, fd_or_path, ours, target, Target};
use crate::abi;
use crate::conn;
use crate::fdtable;
use madfs_client::FileSystem;
use madfs_proto::{Attr, Errno, FsResult, TimeSpec};
use std::ffi::CStr;

/// What the stat family answers: attributes, or the kernel's answer for a host path (a link
/// leading out of the mount).
enum StatAns {
    Attr(Attr),
    Kernel(isize),
}

/// Attributes for the stat family: `(dirfd, "")` with `AT_EMPTY_PATH` is the fd itself; links
/// followed unless `AT_SYMLINK_NOFOLLOW`, `outside` stats a host path. `None`: not ours.
fn attr_at(
    dirfd: i64,
    path: isize,
    flags: i64,
    outside: impl FnOnce(&CStr) -> isize,
) -> Option<FsResult<StatAns>> {
    if empty_path(path, flags) {
        if !fdtable::is_ours(dirfd) {
            return None;
        }
        return Some(
            fdtable::get(dirfd)
                .ok_or(Errno::EBADF)
                .and_then(|d| stat_fd(&d))
                .map(StatAns::Attr),
        );
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW as i64 == 0;
    match target(dirfd, path) {
        Target::External => None,
        Target::Fail(e) => Some(Err(e)),
        Target::Ours(p) => Some(match stat_links(&p, follow) {
            Ok(Ok(a)) => Ok(StatAns::Attr(a)),
            Ok(Err(h)) => Ok(StatAns::Kernel(outside(&h))),
            Err(e) => Err(e),
        }),
    }
}

fn stat_answer(r: FsResult<StatAns>, fill: impl FnOnce(&Attr)) -> Ret {
    Some(match r {
        Ok(StatAns::Attr(a)) => {
            fill(&a);
            0
        }
        Ok(StatAns::Kernel(k)) => k,
        Err(e) => neg(e),
    })
}

pub(super) fn sys_stat_at(dirfd: i64, path: isize, buf: isize, flags: i64) -> Ret {
    let flags_k = (flags & !(libc::AT_EMPTY_PATH as i64)) as isize;
    let r = attr_at(dirfd, path, flags, |h| {
        // SAFETY: newfstatat of a host path into the caller's buffer.
        unsafe { raw_at(libc::SYS_newfstatat, h, [buf, flags_k, 0]) }
    })?;
    // SAFETY: the caller's stat buffer.
    stat_answer(r, |a| unsafe { abi::fill_stat(buf as *mut libc::stat, a) })
}

pub(super) fn sys_fstat(fd: i64, buf: isize) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let a = fdtable::get(fd)
        .ok_or(Errno::EBADF)
        .and_then(|d| stat_fd(&d));
    // SAFETY: the caller's stat buffer.
    zero(a.map(|a| unsafe { abi::fill_stat(buf as *mut libc::stat, &a) }))
}

pub(super) fn sys_statx(dirfd: i64, path: isize, flags: i64, mask: isize, buf: isize) -> Ret {
    let flags_k = (flags & !(libc::AT_EMPTY_PATH as i64)) as isize;
    let r = attr_at(dirfd, path, flags, |h| {
        // SAFETY: statx of a host path into the caller's buffer.
        unsafe { raw_at(libc::SYS_statx, h, [flags_k, mask, buf]) }
    })?;
    // SAFETY: the caller's statx buffer.
    stat_answer(r, |a| unsafe {
        abi::fill_statx(buf as *mut libc::statx, a)
    })
}

pub(super) fn sys_access(dirfd: i64, path: isize, mode: i64, flags: i64) -> Ret {
    if empty_path(path, flags) {
        return if fdtable::is_ours(dirfd) {
            Some(0)
        } else {
            None
        };
    }
    let p = ours!(target(dirfd, path));
    let mask =
        (mode as u32) & (madfs_proto::ACCESS_R | madfs_proto::ACCESS_W | madfs_proto::ACCESS_X);
    zero(
        stat_links_with(&p, flags & libc::AT_SYMLINK_NOFOLLOW as i64 == 0, |p, a| {
            // the server answers with the same check as for the operation itself
            if a.is_link() || mask == 0 {
                Ok(0)
            } else {
                conn::with(|c| c.access_normalized(p, mask)).map(|_| 0)
            }
        })
        .and_then(|r| match r {
            Ok(v) => v,
            // SAFETY: faccessat of a host path.
            Err(h) => raw_res(unsafe { raw_at(libc::SYS_faccessat, &h, [mode as isize, 0, 0]) }),
        }),
    )
}

fn times(ts: isize) -> (TimeSpec, TimeSpec) {
    if ts == 0 {
        return (TimeSpec::Now, TimeSpec::Now);
    }
    // SAFETY: utimensat's times argument is two timespecs.
    let t = unsafe { std::slice::from_raw_parts(ts as *const libc::timespec, 2) };
    let one = |t: &libc::timespec| match t.tv_nsec {
        libc::UTIME_NOW => TimeSpec::Now,
        libc::UTIME_OMIT => TimeSpec::Omit,
        n => TimeSpec::At(t.tv_sec * 1_000_000_000 + n),
    };
    (one(&t[0]), one(&t[1]))
}

pub(super) fn sys_utimensat(dirfd: i64, path: isize, ts: isize, flags: i64) -> Ret {
    let p = ours!(fd_or_path(dirfd, path, flags));
    let (a, m) = times(ts);
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW as i64 == 0;
    // sizes this process has not published yet first: publishing one later would make it
    // the file's modification time (`cp -a` sets the times before it closes)
    for d in fdtable::all() {
        if !d.is_dir() && d.path() == p {
            if let Err(e) = publish(&d) {
                return Some(neg(e));
            }
        }
    }
    zero(with_links(
        &p,
        follow,
        |p| conn::with(|c| c.utimens_at(p, a, m, !follow)),
        // SAFETY: utimensat of a host path with the caller's times.
        |h| raw_unit(unsafe { raw_at(libc::SYS_utimensat, h, [ts, 0, 0]) }),
    ))
}

/// `fchmodat2` (and `fchmodat`, `fchmod` with no flags): with `AT_SYMLINK_NOFOLLOW`, a
/// symbolic link itself cannot change its mode (EOPNOTSUPP, as Linux answers).
pub(super) fn sys_chmod(dirfd: i64, path: isize, mode: i64, flags: i64) -> Ret {
    let p = ours!(fd_or_path(dirfd, path, flags));
    let nofollow = libc::AT_SYMLINK_NOFOLLOW as i64;
    if flags & !(nofollow | libc::AT_EMPTY_PATH as i64) != 0 {
        return Some(neg(Errno::EINVAL));
    }
    let follow = flags & nofollow == 0;
    zero(with_links(
        &p,
        follow,
        |p| match conn::with(|c| c.chmod(p, mode as u32)) {
            Err(Errno::ELOOP) if !follow => Err(Errno::ENOTSUP),
            r => r,
        },
        // SAFETY: fchmodat(2) of a host path (the link itself not followed, if so asked).
        |h| {
            raw_unit(unsafe {
                if follow {
                    raw_at(libc::SYS_fchmodat, h, [mode as isize, 0, 0])
                } else {
                    raw_at(
                        madfs_hookabi::SYS_FCHMODAT2,
                        h,
                        [mode as isize, nofollow as isize, 0],
                    )
                }
            })
        },
    ))
}

pub(super) fn sys_chown(dirfd: i64, path: isize, uid: i64, gid: i64, flags: i64) -> Ret {
    let p = ours!(fd_or_path(dirfd, path, flags));
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW as i64 == 0;
    zero(with_links(
        &p,
        follow,
        |p| conn::with(|c| c.chown_at(p, uid as u32, gid as u32, !follow)),
        // SAFETY: fchownat of a host path.
        |h| raw_unit(unsafe { raw_at(libc::SYS_fchownat, h, [uid as isize, gid as isize, 0]) }),
    ))
}

pub(super) fn sys_statfs(t: Target, buf: isize) -> Ret {
    let _ = ours!(t);
    let s = conn::with(|c| c.statfs());
    // SAFETY: the caller's statfs buffer.
    zero(s.map(|s| unsafe { abi::fill_statfs(buf as *mut libc::statfs, &s) }))
}
