//! The raw entry: the one `extern "C"` function syscall_intercept calls for every syscall of
//! libc. It decides in a few instructions whether a syscall can concern madfs at all, guards
//! against re-entrance (our own client makes syscalls through libc too), and never lets a
//! panic cross into C.

use crate::hooks;
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
    unsafe {
        syscall_intercept::syscall_no_intercept(
            libc::SYS_write as isize,
            2isize,
            line.as_ptr() as isize,
            line.len() as isize,
        )
    };
}
use syscall_intercept::InterceptResult;

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
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

/// Syscalls whose only file argument is the fd in their first argument: not ours unless that
/// fd is a madfs fd (one bit test, before any thread-local access).
fn fd_only(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_read
            | libc::SYS_write
            | libc::SYS_pread64
            | libc::SYS_pwrite64
            | libc::SYS_readv
            | libc::SYS_writev
            | libc::SYS_preadv
            | libc::SYS_pwritev
            | libc::SYS_preadv2
            | libc::SYS_pwritev2
            | libc::SYS_lseek
            | libc::SYS_fstat
            | libc::SYS_ftruncate
            | libc::SYS_fsync
            | libc::SYS_fdatasync
            | libc::SYS_sync_file_range
            | libc::SYS_fallocate
            | libc::SYS_fadvise64
            | libc::SYS_readahead
            | libc::SYS_getdents64
            | libc::SYS_fcntl
            | libc::SYS_fchmod
            | libc::SYS_fchown
            | libc::SYS_fstatfs
            | libc::SYS_fgetxattr
            | libc::SYS_fsetxattr
            | libc::SYS_flistxattr
            | libc::SYS_fremovexattr
            | libc::SYS_ioctl
            | libc::SYS_flock
            | libc::SYS_close
    )
}

/// Syscalls that can concern madfs (everything else is passed through at once).
fn candidate(nr: i64) -> bool {
    fd_only(nr)
        || matches!(
            nr,
            libc::SYS_openat
                | libc::SYS_close_range
                | libc::SYS_newfstatat
                | libc::SYS_statx
                | libc::SYS_faccessat
                | libc::SYS_faccessat2
                | libc::SYS_mkdirat
                | libc::SYS_unlinkat
                | libc::SYS_renameat
                | libc::SYS_renameat2
                | libc::SYS_truncate
                | libc::SYS_dup
                | libc::SYS_dup3
                | libc::SYS_chdir
                | libc::SYS_fchdir
                | libc::SYS_getcwd
                | libc::SYS_utimensat
                | libc::SYS_fchmodat
                | libc::SYS_fchownat
                | libc::SYS_statfs
                | libc::SYS_readlinkat
                | libc::SYS_symlinkat
                | libc::SYS_linkat
                | libc::SYS_mknodat
                | libc::SYS_getxattr
                | libc::SYS_lgetxattr
                | libc::SYS_setxattr
                | libc::SYS_lsetxattr
                | libc::SYS_listxattr
                | libc::SYS_llistxattr
                | libc::SYS_removexattr
                | libc::SYS_lremovexattr
                | libc::SYS_copy_file_range
                | libc::SYS_sendfile
                | libc::SYS_splice
                | libc::SYS_tee
                | libc::SYS_mmap
                | libc::SYS_umask
                | libc::SYS_exit_group
                | libc::SYS_execve
                | libc::SYS_execveat
        )
        || arch_candidate(nr)
}

#[cfg(target_arch = "x86_64")]
fn arch_candidate(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_open
            | libc::SYS_creat
            | libc::SYS_stat
            | libc::SYS_lstat
            | libc::SYS_access
            | libc::SYS_mkdir
            | libc::SYS_rmdir
            | libc::SYS_unlink
            | libc::SYS_rename
            | libc::SYS_dup2
            | libc::SYS_chmod
            | libc::SYS_chown
            | libc::SYS_lchown
            | libc::SYS_readlink
            | libc::SYS_symlink
            | libc::SYS_link
            | libc::SYS_mknod
            | libc::SYS_utimes
            | libc::SYS_utime
            | libc::SYS_futimesat
    )
}

#[cfg(not(target_arch = "x86_64"))]
fn arch_candidate(_nr: i64) -> bool {
    false
}

/// The hook syscall_intercept calls. Returns `Forward` to let the kernel run the syscall, or
/// `Hook` with `*result` set to the return value (`-errno` on failure).
#[allow(clippy::too_many_arguments)]
pub extern "C" fn hook(
    num: isize,
    a0: isize,
    a1: isize,
    a2: isize,
    a3: isize,
    a4: isize,
    a5: isize,
    result: &mut isize,
) -> InterceptResult {
    let nr = num as i64;
    if nr == libc::SYS_clone3 {
        // syscall_intercept 0.1 cannot follow a clone3 child onto its new stack; glibc falls
        // back to clone, which it handles.
        *result = -(libc::ENOSYS as isize);
        return InterceptResult::Hook;
    }
    if !candidate(nr) {
        return InterceptResult::Forward;
    }
    if fd_only(nr) && !crate::fdtable::is_ours(a0 as i32 as i64) {
        return InterceptResult::Forward;
    }
    if nr == libc::SYS_mmap && !crate::fdtable::is_ours(a4 as i32 as i64) {
        return InterceptResult::Forward;
    }
    let Some(_guard) = Guard::enter() else {
        return InterceptResult::Forward;
    };
    let args = [a0, a1, a2, a3, a4, a5];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hooks::dispatch(nr, args)));
    if TRACE.load(Relaxed) {
        match r {
            Ok(Some(v)) => trace(nr, &args, v),
            Ok(None) if nr != libc::SYS_read && nr != libc::SYS_write && nr != libc::SYS_close => {
                trace(nr, &args, 9999)
            }
            _ => {}
        }
    }
    match r {
        Ok(None) => InterceptResult::Forward,
        Ok(Some(v)) => {
            *result = v;
            InterceptResult::Hook
        }
        Err(_) => {
            *result = -(libc::EIO as isize);
            InterceptResult::Hook
        }
    }
}
