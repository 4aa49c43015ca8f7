//! The raw entry: the one function the front (`libmadfs.so`, whose interception engine calls
//! it for every syscall of libc) hands candidate syscalls to once the core is loaded. It decides in a few instructions whether a syscall can concern madfs at all, guards
//! against re-entrance (our own client makes syscalls through libc too), and never lets a
//! panic cross into C.

use crate::hooks;
use madfs_hookabi::{candidate, cwd_path, dirfd_path, fd_only};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// `MADFS_TRACE=1`: one line on stderr per syscall madfs answered (debugging aid).
pub static TRACE: AtomicBool = AtomicBool::new(false);

fn trace(nr: i64, a: &[isize; 6], r: isize) {
    let line = format!(
        "[madfs {}] syscall {nr}({:#x}, {:#x}, {:#x}, {:#x}) = {r}\n",
        std::process::id(),
        a[0],
        a[1],
        a[2],
        a[3]
    );
    // SAFETY: raw write to stderr, outside the hook.
    unsafe { madfs_hookabi::raw!(libc::SYS_write, 2, line.as_ptr(), line.len()) };
}

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Is a madfs hook running on this thread (so that a libc call comes from madfs itself)?
pub fn in_hook() -> bool {
    IN_HOOK.try_with(Cell::get).unwrap_or(false)
}

/// Runs `exec` (an `execve` made from inside the hook) with this thread's hook flag cleared,
/// and sets it again if `exec` returns (it failed). A `vfork` child shares its parent
/// thread's thread-local storage: a successful exec from inside the hook never returns to
/// drop the [`Guard`], and the resumed parent would find itself "inside the hook" for good
/// (every later syscall of that thread passed to the kernel unseen).
pub fn exec_outside_hook<R>(exec: impl FnOnce() -> R) -> R {
    let _ = IN_HOOK.try_with(|g| g.set(false));
    let r = exec();
    let _ = IN_HOOK.try_with(|g| g.set(true));
    r
}

fn errno() -> i32 {
    // SAFETY: the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v };
}

/// Resets the re-entrancy flag when dropped (also on unwinding).
struct Guard;

impl Guard {
    fn enter() -> Option<Guard> {
        IN_HOOK
            .try_with(|g| {
                if g.get() {
                    None
                } else {
                    g.set(true);
                    Some(Guard)
                }
            })
            .ok()
            .flatten()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = IN_HOOK.try_with(|g| g.set(false));
    }
}

pub use madfs_hookabi::xattr_path;

/// The core's hook for the front (`madfs_hookabi::Core::hook`): [`hook`] behind the C ABI,
/// never unwinding.
pub extern "C" fn core_hook(nr: i64, a: &[isize; 6], ret: &mut isize) -> bool {
    match std::panic::catch_unwind(|| hook(nr, a)) {
        Ok(Some(v)) => {
            *ret = v;
            true
        }
        _ => false,
    }
}

/// [`in_hook`] for the front (`madfs_hookabi::Core::in_hook`).
pub extern "C" fn core_in_hook() -> bool {
    in_hook()
}

/// The hook: `None` lets the kernel run the syscall, `Some(v)` answers it with `v` (`-errno`
/// on failure).
pub fn hook(nr: i64, a: &[isize; 6]) -> Option<isize> {
    if !candidate(nr) {
        return None;
    }
    if fd_only(nr) && !crate::fdtable::is_ours(a[0] as i32 as i64) {
        return None;
    }
    if nr == libc::SYS_mmap && !crate::fdtable::is_ours(a[4] as i32 as i64) {
        return None;
    }
    if (nr == libc::SYS_bind || nr == libc::SYS_connect)
        && crate::special::surely_external(a[1], a[2] as i64)
    {
        return None;
    }
    // host paths leave here, before the guard, errno and the dispatch (a trace shows all)
    let cwd = libc::AT_FDCWD as i64;
    if (dirfd_path(nr) && hooks::surely_external(a[0] as i32 as i64, a[1])
        || cwd_path(nr) && hooks::surely_external(cwd, a[0]))
        && !TRACE.load(Relaxed)
    {
        return None;
    }
    let _guard = Guard::enter()?;
    // What runs below (UCX progress reading an empty event fd, the loader, probes of files
    // that may not exist) sets errno on the way; the program must not see it: a syscall
    // that succeeds leaves errno alone, and readdir's end is told from an error only by
    // errno staying as the program set it (cmake counted no files in a directory whose
    // getdents64 had answered EAGAIN inside UCX).
    let saved = errno();
    let r = std::panic::catch_unwind(|| hooks::dispatch(nr, *a));
    if TRACE.load(Relaxed) {
        match r {
            Ok(Some(v)) => trace(nr, a, v),
            Ok(None) if nr != libc::SYS_read && nr != libc::SYS_write && nr != libc::SYS_close => {
                trace(nr, a, 9999)
            }
            _ => {}
        }
    }
    set_errno(saved);
    r.unwrap_or(Some(-(libc::EIO as isize)))
}
