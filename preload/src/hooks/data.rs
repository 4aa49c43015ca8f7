//! A madfs file's data through its fd: `read`/`write` and their positioned and vectored
//! forms, private `mmap`, `lseek`, `ftruncate` and `truncate`, `fsync`, `fallocate`.

use super::common::{neg, raw_unit, ret, slice, slice_mut, zero, Ret};
use super::desc::{acc, file, stat_fd, sync_desc};
use super::follow::with_links;
use super::paths::{ours, target, Target};
use crate::conn;
use crate::fdtable::{self, Desc};
use madfs_client::{Client, FileSystem, OpenFile};
use madfs_hookabi::raw;
use madfs_proto::{Errno, FsResult};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

fn file_desc(fd: i64) -> Result<Arc<Desc>, Errno> {
    let d = fdtable::get(fd).ok_or(Errno::EBADF)?;
    if d.is_dir() {
        return Err(Errno::EISDIR);
    }
    Ok(d)
}

fn do_read(d: &Desc, off: Option<u64>, buf: &mut [u8]) -> FsResult<usize> {
    if acc(d) == libc::O_WRONLY {
        return Err(Errno::EBADF);
    }
    let _serial = d.local();
    let pos = off.unwrap_or_else(|| d.hdr().offset.load(Acquire));
    let n = conn::with(|c| c.read(&file(c, d), pos, buf))?;
    if off.is_none() {
        d.hdr().offset.store(pos + n as u64, Release);
    }
    Ok(n)
}

fn do_write(d: &Desc, off: Option<u64>, data: &[u8]) -> FsResult<usize> {
    if acc(d) == libc::O_RDONLY {
        return Err(Errno::EBADF);
    }
    let mut local = d.local();
    conn::with(|c| {
        let mut f = file(c, d);
        if let Some(cap) = local.privs_cap {
            f.cap = cap;
        }
        let r = write_file(c, d, &mut f, off, data);
        if f.cap != d.cap() {
            local.privs_cap = Some(f.cap);
        }
        d.found_at(f.whereabouts());
        r
    })
}

fn write_file(
    c: &Client,
    d: &Desc,
    f: &mut OpenFile,
    off: Option<u64>,
    data: &[u8],
) -> FsResult<usize> {
    let (pos, n) = match off {
        Some(o) => (o, c.write(f, o, data)?),
        // O_APPEND: the metadata server reserves the range atomically among appenders
        None if d.flags() & libc::O_APPEND != 0 && !data.is_empty() => {
            (c.append(f, data)?, data.len())
        }
        None => {
            let o = d.hdr().offset.load(Acquire);
            (o, c.write(f, o, data)?)
        }
    };
    d.wrote(pos + n as u64, !f.is_dirty());
    if off.is_none() {
        d.hdr().offset.store(pos + n as u64, Release);
    }
    Ok(n)
}

pub(super) fn sys_read(fd: i64, buf: isize, len: i64, off: Option<i64>) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    if off.is_some_and(|o| o < 0) {
        return Some(neg(Errno::EINVAL));
    }
    // SAFETY: the caller's buffer of `len` bytes.
    let buf = unsafe { slice_mut(buf, len as usize) };
    ret(
        file_desc(fd).and_then(|d| do_read(&d, off.map(|o| o as u64), buf)),
        |n| n as isize,
    )
}

/// `mmap` of a madfs fd. A private mapping (`MAP_PRIVATE`, any protection) gets a private
/// copy of the file's bytes: anonymous memory filled by a read of the range (the rest of
/// its last page, and any page past the end of the file, reads as zeros), then given the
/// asked protection. A private mapping's writes never reach the file, and whether it sees
/// later writes to the file is unspecified, so the copy is what POSIX allows; it costs a
/// read of the whole range at `mmap` time. Shared mappings need the servers' pages in this
/// address space and are refused with ENODEV.
pub(super) fn sys_mmap(a: [isize; 6]) -> Ret {
    let (len, prot, flags, fd, off) = (a[1] as usize, a[2], a[3] as i32, a[4] as i32 as i64, a[5]);
    if flags & libc::MAP_ANONYMOUS != 0 || !fdtable::is_ours(fd) {
        return None;
    }
    const MAP_TYPE: i32 = 0x0f;
    if flags & MAP_TYPE != libc::MAP_PRIVATE {
        return Some(neg(Errno::ENODEV));
    }
    // SAFETY: getauxval has no preconditions.
    let page = (unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize).max(4096);
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(page) {
        return Some(neg(Errno::EINVAL));
    }
    let d = match fdtable::get(fd) {
        Some(d) if d.is_dir() => return Some(neg(Errno::ENODEV)),
        Some(d) if acc(&d) == libc::O_WRONLY => return Some(neg(Errno::EACCES)),
        Some(d) => d,
        None => return Some(neg(Errno::EBADF)),
    };
    // the caller's placement flags (MAP_FIXED, MAP_FIXED_NOREPLACE, MAP_NORESERVE, …) on
    // anonymous memory; MAP_DENYWRITE and MAP_EXECUTABLE are ignored by the kernel anyway
    let anon = (flags & !(MAP_TYPE | libc::MAP_DENYWRITE | libc::MAP_EXECUTABLE))
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as isize;
    // SAFETY: an anonymous mapping where and as the caller asked (its address and flags are
    // the caller's promise, as for the kernel's mmap).
    let m = unsafe { raw!(libc::SYS_mmap as isize, a[0], len, rw, anon as isize, -1, 0) };
    if (-4095..0).contains(&m) {
        return Some(m);
    }
    // SAFETY: the `len` bytes just mapped readable and writable.
    let buf = unsafe { slice_mut(m, len) };
    let mut done = 0;
    while done < len {
        match do_read(&d, Some(off as u64 + done as u64), &mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) => {
                // SAFETY: our own mapping, not yet handed out.
                unsafe { raw!(libc::SYS_munmap as isize, m, len) };
                return Some(neg(e));
            }
        }
    }
    if prot != rw {
        // SAFETY: our own mapping; the protection is the caller's.
        let r = unsafe { raw!(libc::SYS_mprotect as isize, m, len, prot) };
        if r < 0 {
            // SAFETY: as above.
            unsafe { raw!(libc::SYS_munmap as isize, m, len) };
            return Some(r);
        }
    }
    Some(m)
}

pub(super) fn sys_write(fd: i64, buf: isize, len: i64, off: Option<i64>) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    if off.is_some_and(|o| o < 0) {
        return Some(neg(Errno::EINVAL));
    }
    // SAFETY: the caller's buffer of `len` bytes.
    let data = unsafe { slice(buf, len as usize) };
    ret(
        file_desc(fd).and_then(|d| do_write(&d, off.map(|o| o as u64), data)),
        |n| n as isize,
    )
}

/// # Safety
/// `iov` must point to `cnt` iovecs.
unsafe fn iovecs<'a>(iov: isize, cnt: i64) -> Result<&'a [libc::iovec], Errno> {
    if !(0..=1024).contains(&cnt) {
        return Err(Errno::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(iov as *const libc::iovec, cnt as usize) })
}

pub(super) fn sys_readv(fd: i64, iov: isize, cnt: i64, off: Option<i64>) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let run = || -> FsResult<usize> {
        if off.is_some_and(|o| o < 0) {
            return Err(Errno::EINVAL);
        }
        let d = file_desc(fd)?;
        // SAFETY: the caller's iovec array.
        let v = unsafe { iovecs(iov, cnt) }?;
        let mut total = 0usize;
        for e in v {
            // SAFETY: each iovec names a caller buffer.
            let buf = unsafe { slice_mut(e.iov_base as isize, e.iov_len) };
            let n = do_read(&d, off.map(|o| o as u64 + total as u64), buf)?;
            total += n;
            if n < e.iov_len {
                break;
            }
        }
        Ok(total)
    };
    ret(run(), |n| n as isize)
}

pub(super) fn sys_writev(fd: i64, iov: isize, cnt: i64, off: Option<i64>) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let run = || -> FsResult<usize> {
        if off.is_some_and(|o| o < 0) {
            return Err(Errno::EINVAL);
        }
        let d = file_desc(fd)?;
        // SAFETY: the caller's iovec array.
        let v = unsafe { iovecs(iov, cnt) }?;
        let mut all = Vec::with_capacity(v.iter().map(|e| e.iov_len).sum());
        for e in v {
            // SAFETY: each iovec names a caller buffer.
            all.extend_from_slice(unsafe { slice(e.iov_base as isize, e.iov_len) });
        }
        do_write(&d, off.map(|o| o as u64), &all)
    };
    ret(run(), |n| n as isize)
}

pub(super) fn sys_lseek(fd: i64, off: i64, whence: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    let cur = d.hdr().offset.load(Acquire) as i64;
    let r = (|| -> FsResult<i64> {
        let new = match whence as i32 {
            libc::SEEK_SET => off,
            libc::SEEK_CUR => cur.checked_add(off).ok_or(Errno::EOVERFLOW)?,
            libc::SEEK_END | libc::SEEK_DATA | libc::SEEK_HOLE if d.is_dir() => {
                return Err(Errno::EINVAL)
            }
            libc::SEEK_END => (stat_fd(&d)?.size as i64)
                .checked_add(off)
                .ok_or(Errno::EOVERFLOW)?,
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let size = stat_fd(&d)?.size as i64;
                if off < 0 || off >= size {
                    return Err(Errno::ENXIO);
                }
                if whence as i32 == libc::SEEK_DATA {
                    off
                } else {
                    size
                }
            }
            _ => return Err(Errno::EINVAL),
        };
        if new < 0 {
            return Err(Errno::EINVAL);
        }
        Ok(new)
    })();
    if let Ok(new) = r {
        if d.is_dir() && new == 0 {
            // rewind: a fresh listing (and the end of a find's matches); the range stays
            let mut l = d.local();
            l.dir.cursor = None;
            l.dir.found = None;
        }
        d.hdr().offset.store(new as u64, Release);
    }
    ret(r, |n| n as isize)
}

pub(super) fn sys_ftruncate(fd: i64, len: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let r = (|| {
        let d = file_desc(fd).map_err(|_| Errno::EINVAL)?;
        if len < 0 || acc(&d) == libc::O_RDONLY {
            return Err(Errno::EINVAL);
        }
        // the open's capability stands for the write permission (checked at open); the
        // file wherever it is now
        conn::with(|c| {
            let mut f = file(c, &d);
            let r = c.ftruncate(&mut f, len as u64);
            d.found_at(f.whereabouts());
            r
        })?;
        for other in fdtable::all() {
            if !other.is_dir() && other.attr().id == d.attr().id {
                other.truncated(len as u64);
            }
        }
        Ok(())
    })();
    zero(r)
}

fn truncate_path(p: &str, len: u64, cap: Option<madfs_proto::Cap>) -> FsResult<()> {
    conn::with(|c| c.truncate_with(p, len, cap))?;
    for d in fdtable::all() {
        if !d.is_dir() && d.path() == p {
            d.truncated(len);
        }
    }
    Ok(())
}

pub(super) fn sys_truncate(path: isize, len: i64) -> Ret {
    let p = ours!(target(libc::AT_FDCWD as i64, path));
    if len < 0 {
        return Some(neg(Errno::EINVAL));
    }
    zero(with_links(
        &p,
        true,
        |p| truncate_path(p, len as u64, None),
        // SAFETY: truncate of a host path.
        |h| {
            raw_unit(unsafe {
                raw!(
                    libc::SYS_truncate as isize,
                    h.as_ptr() as isize,
                    len as isize,
                )
            })
        },
    ))
}

pub(super) fn sys_fsync(fd: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    if d.is_dir() {
        return crate::sync::dir_fsync();
    }
    d.take_unsynced();
    zero(sync_desc(&d))
}

pub(super) fn sys_fallocate(fd: i64, mode: i64, off: i64, len: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let r = (|| {
        let d = file_desc(fd)?;
        if mode != 0 {
            return Err(Errno::ENOTSUP);
        }
        if off < 0 || len <= 0 {
            return Err(Errno::EINVAL);
        }
        if acc(&d) == libc::O_RDONLY {
            return Err(Errno::EBADF);
        }
        let end = (off as u64).checked_add(len as u64).ok_or(Errno::EFBIG)?;
        if end > d.attr().size {
            d.wrote(end, false);
        }
        Ok(())
    })();
    zero(r)
}
