//! The syscalls about links themselves: `readlinkat`, `symlinkat`, `linkat` (hard links).
//! Following links for the other handlers is `follow`'s.

use super::common::{cstr, neg, raw_at, raw_res, raw_unit, ret, slice_mut, zero, Ret, AT_FDCWD};
use super::follow::{ancestors_followed, readlink_ours, stat_links_with, with_links};
use super::paths::{ours, target, Target};
use crate::conn;
use madfs_client::FileSystem;
use madfs_hookabi::raw;
use madfs_proto::{Errno, FsResult};

pub(super) fn sys_readlinkat(dirfd: i64, path: isize, buf: isize, size: i64) -> Ret {
    let p = ours!(target(dirfd, path));
    if size <= 0 {
        return Some(neg(Errno::EINVAL));
    }
    let r = stat_links_with(&p, false, |q, a| (q.to_string(), a)).and_then(|r| match r {
        Ok((q, a)) if a.is_link() => {
            let t = readlink_ours(&q)?;
            let n = t.len().min(size as usize);
            // SAFETY: the caller's buffer of `size` bytes.
            unsafe { slice_mut(buf, n) }.copy_from_slice(&t.as_bytes()[..n]);
            Ok(n as isize)
        }
        Ok(_) => Err(Errno::EINVAL),
        // SAFETY: readlinkat of a host path into the caller's buffer.
        Err(h) => raw_res(unsafe { raw_at(libc::SYS_readlinkat, &h, [buf, size as isize, 0]) }),
    });
    ret(r, |n| n)
}

pub(super) fn sys_symlinkat(target_ptr: isize, dirfd: i64, path: isize) -> Ret {
    let p = ours!(target(dirfd, path));
    // SAFETY: the link target is a C string.
    let Some(t) = (unsafe { cstr(target_ptr) }) else {
        return Some(neg(Errno::EFAULT));
    };
    let Ok(t) = std::str::from_utf8(t) else {
        return Some(neg(Errno::EINVAL));
    };
    zero(with_links(
        &p,
        false,
        |p| conn::with(|c| c.symlink(t, p)),
        // SAFETY: symlinkat at a host path.
        |h| {
            raw_unit(unsafe {
                raw!(
                    libc::SYS_symlinkat as isize,
                    target_ptr,
                    AT_FDCWD,
                    h.as_ptr() as isize,
                )
            })
        },
    ))
}

pub(super) fn sys_linkat(olddir: i64, old: isize, newdir: i64, new: isize, flags: i64) -> Ret {
    if old == 0 || new == 0 {
        return None; // the kernel's EFAULT (not EXDEV for the other path)
    }
    let (a, b) = match (target(olddir, old), target(newdir, new)) {
        (Target::External, Target::External) => return None,
        (Target::Ours(a), Target::Ours(b)) => (a, b),
        (Target::Fail(e), _) | (_, Target::Fail(e)) => return Some(neg(e)),
        _ => return Some(neg(Errno::EXDEV)),
    };
    if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) as i64 != 0 {
        return Some(neg(Errno::EINVAL));
    }
    zero(link_ours(
        &a,
        &b,
        flags & libc::AT_SYMLINK_FOLLOW as i64 != 0,
    ))
}

/// `link(a, b)` of two madfs paths: links among `a`'s ancestors (and the last one with
/// `follow`) and among `b`'s ancestors are followed; one leading out of madfs is EXDEV.
fn link_ours(a: &str, b: &str, follow: bool) -> FsResult<()> {
    let src = match stat_links_with(a, follow, |p, _| p.to_owned())? {
        Ok(p) => p,
        Err(_) => return Err(Errno::EXDEV), // the source leads out of madfs
    };
    match conn::with(|c| c.link(&src, b)) {
        Err(Errno::ENOTDIR) => match ancestors_followed(b)? {
            Some(b2) => conn::with(|c| c.link(&src, &b2)).map(drop),
            None => Err(Errno::ENOTDIR),
        },
        r => r.map(drop),
    }
}
