//! Helpers every handler shares, touching no madfs state: the handlers' return values
//! ([`Ret`], [`neg`], [`ret`], [`zero`]), raw syscalls' answers as results and `*at` calls on
//! host paths ([`raw_at`]), the caller's C strings and buffers ([`cstr`], [`slice`],
//! [`slice_mut`]), and the process's umask as the hooks track it ([`UMASK`]).

use madfs_hookabi::raw;
use madfs_proto::{Errno, FsResult};
use std::ffi::CStr;
use std::sync::atomic::AtomicU32;

pub(super) type Ret = Option<isize>;

pub(crate) static UMASK: AtomicU32 = AtomicU32::new(0o022);

pub(crate) fn neg(e: Errno) -> isize {
    e.as_neg() as isize
}

pub(crate) fn ret<T>(r: FsResult<T>, ok: impl FnOnce(T) -> isize) -> Ret {
    Some(match r {
        Ok(v) => ok(v),
        Err(e) => neg(e),
    })
}

pub(crate) fn zero<T>(r: FsResult<T>) -> Ret {
    ret(r, |_| 0)
}

/// # Safety
/// `p` must be null or point to a NUL-terminated string.
pub(super) unsafe fn cstr<'a>(p: isize) -> Option<&'a [u8]> {
    if p == 0 {
        None
    } else {
        // SAFETY: per the contract.
        Some(unsafe { CStr::from_ptr(p as *const libc::c_char) }.to_bytes())
    }
}

/// A raw syscall's 0-or-`-errno` return as a result.
pub(crate) fn raw_unit(r: isize) -> FsResult<()> {
    raw_res(r).map(|_| ())
}

/// A raw syscall's return as a result.
pub(crate) fn raw_res(r: isize) -> FsResult<isize> {
    if r < 0 {
        Err(Errno::new(-r as i32))
    } else {
        Ok(r)
    }
}

pub(super) const AT_FDCWD: isize = libc::AT_FDCWD as isize;

/// A `*at` syscall on a host path, relative to the working directory:
/// `nr(AT_FDCWD, h, a[0], a[1], a[2])`.
///
/// # Safety
/// `a` holds what syscall `nr` expects after its path (the caller's own buffers and values).
pub(crate) unsafe fn raw_at(nr: i64, h: &CStr, a: [isize; 3]) -> isize {
    // SAFETY: per the contract; `h` is NUL-terminated.
    unsafe { raw!(nr as isize, AT_FDCWD, h.as_ptr() as isize, a[0], a[1], a[2]) }
}

/// # Safety
/// `buf` must be valid for `len` bytes (the kernel's EFAULT check is the caller's promise).
pub(super) unsafe fn slice_mut<'a>(buf: isize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) }
}

/// # Safety
/// As [`slice_mut`].
pub(super) unsafe fn slice<'a>(buf: isize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
}
