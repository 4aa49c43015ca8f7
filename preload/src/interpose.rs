//! libc functions with hidden global state that madfs's own code may call from inside a
//! syscall of the program: the program's state must survive the syscall.
//!
//! UCX is loaded on first use (a `dlopen` inside the first intercepted syscall on a madfs
//! path), and its library constructor (`ucs_init`) tokenises its configuration and the host
//! name with `strtok`. glibc's `strtok` keeps one position for the whole process, so a
//! program in the middle of a `strtok` loop whose first madfs access sits inside that loop
//! lost its position: io500 builds its data directories by `strtok`-ing the path and
//! `stat`-ing each prefix, and stopped after `/madfs/` (no `ior-easy` directory, then
//! `ENOENT` on every rank's file). libmadfs.so, preloaded, defines `strtok` for the whole
//! process: calls made while a madfs hook runs on the calling thread use a position of
//! their own, every other call the program's, exactly as glibc's `strtok` would.

use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

/// The program's `strtok` position.
static PROGRAM: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
/// The position of `strtok` calls made inside madfs (UCX's).
static OURS: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

/// `strtok(3)`.
///
/// # Safety
/// As for C's `strtok`: `s` is null or a NUL-terminated string the caller may modify (null:
/// go on in the string of the last call on the same position), `delim` a NUL-terminated
/// string; like glibc's, not for concurrent use by several threads.
#[no_mangle]
pub unsafe extern "C" fn strtok(
    s: *mut libc::c_char,
    delim: *const libc::c_char,
) -> *mut libc::c_char {
    let slot = if crate::entry::in_hook() {
        &OURS
    } else {
        &PROGRAM
    };
    let mut save = slot.load(Relaxed);
    // SAFETY: forwarded contract; `save` is this position's last value (or null, which
    // strtok_r only reads when `s` is null, as strtok would).
    let r = unsafe { libc::strtok_r(s, delim, &mut save) };
    slot.store(save, Relaxed);
    r
}
