//! Directories: `mkdirat`, `unlinkat` (files and, with `AT_REMOVEDIR`, directories),
//! `renameat`/`renameat2`, `getdents64`, the madfs directory ioctls (range, find), and the
//! working directory's syscalls, `chdir`/`fchdir` and `getcwd`.

use super::common::{cstr, neg, raw_at, raw_unit, slice_mut, zero, Ret, UMASK};
use super::cwd::{cwd, cwd_in, set_child_cwd, set_cwd};
use super::follow::{ancestors_followed, stat_links_with, with_links};
use super::paths::{mount, ours, target, Target};
use crate::abi;
use crate::conn;
use crate::fdtable;
use crate::path::external;
use madfs_client::FileSystem;
use madfs_hookabi::raw;
use madfs_proto::{Errno, FsResult};
use std::ffi::CStr;
use std::sync::atomic::Ordering::*;

pub(super) fn sys_mkdirat(dirfd: i64, path: isize, mode: i64) -> Ret {
    let p = ours!(target(dirfd, path));
    let m = mode as u32 & !UMASK.load(Relaxed) & 0o7777;
    zero(with_links(
        &p,
        false,
        |p| conn::with(|c| c.mkdir(p, m)),
        // SAFETY: mkdirat of a host path.
        |h| raw_unit(unsafe { raw_at(libc::SYS_mkdirat, h, [mode as isize, 0, 0]) }),
    ))
}

pub(super) fn sys_unlinkat(dirfd: i64, path: isize, flags: i64) -> Ret {
    let p = ours!(target(dirfd, path));
    if flags & libc::AT_REMOVEDIR as i64 != 0 && cwd().as_deref() == Some(p.as_str()) {
        return Some(neg(Errno::EBUSY));
    }
    let rm = flags & libc::AT_REMOVEDIR as i64 != 0;
    if rm {
        // as the kernel: a last component "." is EINVAL, ".." ENOTEMPTY (the normal form
        // resolved both away)
        // SAFETY: the caller's C string (target() read it already).
        let raw = unsafe { cstr(path) }.unwrap_or_default();
        let last = raw
            .rsplit(|b| *b == b'/')
            .find(|c| !c.is_empty())
            .unwrap_or_default();
        match last {
            b"." => return Some(neg(Errno::EINVAL)),
            b".." => return Some(neg(Errno::ENOTEMPTY)),
            _ => {}
        }
    }
    zero(with_links(
        &p,
        false,
        |p| conn::with(|c| if rm { c.rmdir(p) } else { c.unlink(p) }),
        // SAFETY: unlinkat of a host path.
        |h| raw_unit(unsafe { raw_at(libc::SYS_unlinkat, h, [flags as isize, 0, 0]) }),
    ))
}

pub(super) fn sys_renameat(olddir: i64, old: isize, newdir: i64, new: isize, flags: i64) -> Ret {
    if old == 0 || new == 0 {
        return None; // the kernel's EFAULT (not EXDEV for the other path)
    }
    let (a, b) = (target(olddir, old), target(newdir, new));
    let (a, b) = match (a, b) {
        (Target::External, Target::External) => return None,
        (Target::Fail(e), _) | (_, Target::Fail(e)) => return Some(neg(e)),
        (Target::Ours(a), Target::Ours(b)) => (a, b),
        _ => return Some(neg(Errno::EXDEV)),
    };
    if flags & !(libc::RENAME_NOREPLACE as i64) != 0 {
        return Some(neg(Errno::EINVAL));
    }
    let noreplace = flags & libc::RENAME_NOREPLACE as i64 != 0;
    zero(match conn::with(|c| c.rename(&a, &b, noreplace)) {
        // a symbolic link among the ancestors (the servers see full paths): follow it
        Err(Errno::ENOTDIR) => {
            let (a2, b2) = (ancestors_followed(&a), ancestors_followed(&b));
            match (a2, b2) {
                (Err(e), _) | (_, Err(e)) => Err(e),
                (Ok(None), Ok(None)) => Err(Errno::ENOTDIR),
                (Ok(x), Ok(y)) => {
                    let (x, y) = (x.unwrap_or(a), y.unwrap_or(b));
                    conn::with(|c| c.rename(&x, &y, noreplace))
                }
            }
        }
        r => r,
    })
}

/// Cookie of an entry's directory position: positions 0 and 1 share cookie 2 with position 2
/// (cookies 0 and 1 stand before `.` and `..`).
fn dir_cookie_pos(hash: u64) -> i64 {
    madfs_client::dir_pos(hash).max(2) as i64
}

pub(super) fn sys_getdents64(fd: i64, buf: isize, len: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    if !d.is_dir() {
        return Some(neg(Errno::ENOTDIR));
    }
    // SAFETY: the caller's buffer of `len` bytes.
    let out = unsafe { slice_mut(buf, len.max(0) as usize) };
    let mut local = d.local();
    let st = &mut local.dir;
    let mut cookie = d.hdr().offset.load(Acquire) as i64;
    let mut used = 0usize;
    let put = |out: &mut [u8], used: &mut usize, ino: u64, off: i64, t: u8, name: &str| {
        match abi::put_dirent(&mut out[*used..], ino, off, t, name) {
            Some(n) => {
                *used += n;
                Ok(true)
            }
            None if *used == 0 => Err(Errno::EINVAL),
            None => Ok(false),
        }
    };
    let r = (|| -> FsResult<()> {
        if let Some(found) = &st.found {
            while let Some(p) = found.get(cookie as usize) {
                if !put(out, &mut used, 0, cookie + 1, libc::DT_UNKNOWN, p)? {
                    break;
                }
                cookie += 1;
            }
            return Ok(());
        }
        let (from, to) = st.range.unwrap_or((0, madfs_client::DIR_POS_END));
        if st.range.is_none() {
            if cookie == 0 {
                if !put(out, &mut used, d.attr().id, 1, libc::DT_DIR, ".")? {
                    return Ok(());
                }
                cookie = 1;
            }
            if cookie == 1 {
                if !put(out, &mut used, 1, 2, libc::DT_DIR, "..")? {
                    return Ok(());
                }
                cookie = 2;
            }
        }
        let (mut cur, mut ahead) = match st.cursor.take() {
            Some((c, at, ahead)) if at == cookie => (c, ahead),
            _ => {
                let start = if cookie <= 2 {
                    from
                } else {
                    (cookie as u64).max(from)
                };
                let c = conn::with(|c| c.dir_cursor(d.path(), start, to))?;
                (c, Default::default())
            }
        };
        loop {
            if ahead.len() < 2 {
                if let Some(e) = conn::with(|c| c.dir_next(&mut cur))? {
                    ahead.push_back(e);
                    continue;
                }
            }
            let Some(e) = ahead.front() else { break };
            // an entry's d_off resumes after it, unless the next shares its position
            let pos = dir_cookie_pos(e.hash);
            let off = match ahead.get(1) {
                Some(n) if dir_cookie_pos(n.hash) == pos => pos,
                _ => pos.saturating_add(1),
            };
            if !put(out, &mut used, e.ino, off, abi::dtype(e.kind), &e.name)? {
                break;
            }
            ahead.pop_front();
            cookie = off;
        }
        st.cursor = Some((cur, cookie, ahead));
        Ok(())
    })();
    match r {
        Ok(()) => {
            d.hdr().offset.store(cookie as u64, Release);
            Some(used as isize)
        }
        Err(e) => Some(neg(e)),
    }
}

/// The madfs ioctls (`madfs_proto::ioctl`): the cache counters on any madfs fd, the others on
/// a directory fd; anything else: ENOTTY.
pub(super) fn sys_ioctl(fd: i64, req: i64, arg: isize) -> Ret {
    use madfs_proto::ioctl::*;
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    let req = req as u64 & 0xffff_ffff;
    if req == MADFS_IOC_CACHE_COUNTS {
        if arg == 0 {
            return Some(neg(Errno::EFAULT));
        }
        let c = madfs_client::cache::counts();
        let out = CacheCounts {
            hits: c.hits,
            misses: c.misses,
            revoked: c.revoked,
            entries: c.entries as u64,
            bytes: c.bytes as u64,
        };
        // SAFETY: the caller passes a struct madfs_cache_counts to fill in.
        unsafe { std::ptr::write_unaligned(arg as *mut CacheCounts, out) };
        return Some(0);
    }
    if !d.is_dir()
        || ![
            MADFS_IOC_DIR_RANGE,
            MADFS_IOC_FIND_LIST,
            MADFS_IOC_FIND_COUNT,
        ]
        .contains(&req)
    {
        return Some(neg(Errno::ENOTTY));
    }
    if arg == 0 {
        return Some(neg(Errno::EFAULT));
    }
    if req == MADFS_IOC_DIR_RANGE {
        // SAFETY: the caller passes a struct madfs_dir_range.
        let r = unsafe { std::ptr::read_unaligned(arg as *const DirRange) };
        let to = if r.to == 0 {
            madfs_client::DIR_POS_END
        } else {
            r.to.min(madfs_client::DIR_POS_END)
        };
        let mut l = d.local();
        l.dir = fdtable::DirState {
            range: Some((r.from.min(to), to)),
            ..Default::default()
        };
        d.hdr().offset.store(0, Release);
        return Some(0);
    }
    // SAFETY: the caller passes a struct madfs_find.
    let mut f = unsafe { std::ptr::read_unaligned(arg as *const FindArgs) };
    let name = if f.name.is_null() {
        None
    } else {
        // SAFETY: a NUL-terminated pattern.
        match unsafe { CStr::from_ptr(f.name) }.to_str() {
            Ok(s) => Some(s.to_owned()),
            Err(_) => return Some(neg(Errno::EINVAL)),
        }
    };
    if f.kind != 0 && f.kind != libc::S_IFREG && f.kind != libc::S_IFDIR {
        return Some(neg(Errno::EINVAL));
    }
    let filter = madfs_proto::FindFilter {
        name: name.as_deref(),
        size: (f.size_unit != 0).then_some((f.size, f.size_unit)),
        newer_than: (f.newer_than_ns != i64::MIN).then_some(f.newer_than_ns),
        kind: (f.kind != 0).then_some(f.kind),
        pending: false,
    };
    let dir = d.path().to_string();
    let r = conn::with(|c| c.find(&dir, &filter));
    let (paths, scanned) = match r {
        Ok(x) => x,
        Err(e) => return Some(neg(e)),
    };
    f.matched = paths.len() as u64;
    f.scanned = scanned;
    // SAFETY: as above; the struct is the caller's, writable (an _IOWR request).
    unsafe { std::ptr::write_unaligned(arg as *mut FindArgs, f) };
    if req == MADFS_IOC_FIND_LIST {
        let strip = if dir == "/" { 1 } else { dir.len() + 1 };
        let rel = paths
            .into_iter()
            .map(|p| p[strip.min(p.len())..].to_string())
            .collect();
        let mut l = d.local();
        l.dir = fdtable::DirState {
            found: Some(rel),
            ..Default::default()
        };
        d.hdr().offset.store(0, Release);
    }
    Some(0)
}

pub(super) fn sys_chdir(t: Target, raw_call: impl FnOnce() -> isize) -> Ret {
    match t {
        Target::Ours(p) => {
            if conn::in_vfork_child() {
                // no servers here (a child made by vfork or posix_spawn before its exec,
                // e.g. Python's subprocess with cwd=): taken as named, for the exec to pass
                // on; the new program finds out if it is not a directory
                set_child_cwd(Some(p));
                return Some(0);
            }
            match stat_links_with(&p, true, |q, a| (q.to_string(), a)) {
                Ok(Ok((q, a))) if a.is_dir() => {
                    set_cwd(Some(q));
                    Some(0)
                }
                Ok(Ok(_)) => Some(neg(Errno::ENOTDIR)),
                Ok(Err(h)) => {
                    // SAFETY: chdir to a host path.
                    let r = unsafe { raw!(libc::SYS_chdir as isize, h.as_ptr() as isize) };
                    if r == 0 {
                        set_cwd(None);
                    }
                    Some(r)
                }
                Err(e) => Some(neg(e)),
            }
        }
        Target::Fail(e) => Some(neg(e)),
        Target::External if cwd_in() => {
            let r = raw_call();
            if r == 0 {
                if conn::in_vfork_child() {
                    set_child_cwd(None);
                } else {
                    set_cwd(None);
                }
            }
            Some(r)
        }
        Target::External => None,
    }
}

pub(super) fn sys_getcwd(buf: isize, size: i64) -> Ret {
    if !cwd_in() {
        return None;
    }
    let c = cwd()?;
    let mut bytes = external(mount(), &c);
    bytes.push(0);
    if (size as usize) < bytes.len() {
        return Some(neg(Errno::ERANGE));
    }
    // SAFETY: the caller's buffer of `size` bytes.
    unsafe { slice_mut(buf, bytes.len()) }.copy_from_slice(&bytes);
    Some(bytes.len() as isize)
}
