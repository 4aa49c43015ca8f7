//! The raw entry: the one function the interception engine (`madfs-intercept`) calls for every
//! syscall of libc. It decides in a few instructions whether a syscall can concern madfs at all, guards
//! against re-entrance (our own client makes syscalls through libc too), and never lets a
//! panic cross into C.

use crate::hooks;
use madfs_intercept::Pass;
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
    unsafe { madfs_intercept::raw!(libc::SYS_write, 2, line.as_ptr(), line.len()) };
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

/// Syscalls whose only file argument is the fd in their first argument: not ours unless that
/// fd is a madfs fd (one bit test, before any thread-local access).
const fn fd_only(nr: i64) -> bool {
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

/// Where the engine looks to run a syscall without calling [`hook`] (which would pass it
/// through for the same reason): the fd of the `fd_only` syscalls and `mmap`, the path of the
/// path syscalls.
static PASS: [Pass; 512] = {
    let mut t = [Pass::Never; 512];
    let mut nr = 0;
    while nr < 512 {
        let n = nr as i64;
        t[nr] = if fd_only(n) {
            Pass::FdFirst
        } else if dirfd_path(n) {
            Pass::DirfdPath
        } else if cwd_path(n) {
            Pass::CwdPath
        } else {
            Pass::Never
        };
        nr += 1;
    }
    t[libc::SYS_mmap as usize] = Pass::FdFifth;
    t
};

/// Lets the interception engine run the syscalls [`hook`] would pass through for their fd or
/// path without calling it (x86_64: a bit test or a prefix comparison in the engine's
/// wrapper instead of saving the registers and calling into Rust). [`hook`] keeps the same
/// tests, for the other engines and for when the engine does not take this.
pub fn install_fast_pass() -> bool {
    if TRACE.load(Relaxed) {
        return false;
    }
    madfs_intercept::fast_pass(
        &PASS,
        madfs_intercept::Ours {
            fds: crate::fdtable::bits(),
            mount: hooks::mount(),
            cwd_host: &hooks::CWD_HOST,
        },
    )
}

/// Syscalls with a `(dirfd, path)` pair in their first two arguments that the hook passes
/// through whenever that pair names no madfs file.
const fn dirfd_path(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_openat
            | libc::SYS_newfstatat
            | libc::SYS_statx
            | libc::SYS_faccessat
            | libc::SYS_faccessat2
            | libc::SYS_mkdirat
            | libc::SYS_unlinkat
            | libc::SYS_utimensat
            | libc::SYS_fchmodat
            | libc::SYS_fchownat
            | libc::SYS_readlinkat
            | libc::SYS_mknodat
    )
}

/// The extended-attribute syscalls that take a path (relative to the working directory).
pub const fn xattr_path(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_getxattr
            | libc::SYS_lgetxattr
            | libc::SYS_setxattr
            | libc::SYS_lsetxattr
            | libc::SYS_listxattr
            | libc::SYS_llistxattr
            | libc::SYS_removexattr
            | libc::SYS_lremovexattr
    )
}

/// Syscalls whose first argument is a path relative to the working directory, with the same
/// property (x86_64's legacy forms, which the hook maps to the `*at` ones, and the xattrs).
const fn cwd_path(nr: i64) -> bool {
    crate::abi::is_legacy_path(nr) || xattr_path(nr)
}

// libc sites of every other syscall with a known number stay unpatched (x86_64).
madfs_intercept::syscall_set!(candidate);

/// Syscalls that can concern madfs (everything else is passed through at once).
const fn candidate(nr: i64) -> bool {
    fd_only(nr)
        || dirfd_path(nr)
        || xattr_path(nr)
        || matches!(
            nr,
            libc::SYS_close_range
                | libc::SYS_renameat
                | libc::SYS_renameat2
                | libc::SYS_truncate
                | libc::SYS_dup
                | libc::SYS_dup3
                | libc::SYS_chdir
                | libc::SYS_fchdir
                | libc::SYS_getcwd
                | libc::SYS_statfs
                | libc::SYS_symlinkat
                | libc::SYS_linkat
                | libc::SYS_copy_file_range
                | libc::SYS_sendfile
                | libc::SYS_splice
                | libc::SYS_tee
                | libc::SYS_mmap
                | libc::SYS_umask
                | libc::SYS_exit_group
                | libc::SYS_execve
                | libc::SYS_execveat
                | libc::SYS_clone
                | libc::SYS_clone3
        )
        || crate::abi::is_legacy(nr)
}

/// The hook the interception engine calls: `None` lets the kernel run the syscall, `Some(v)`
/// answers it with `v` (`-errno` on failure).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the engine may let through without the hook is something the hook would judge
    /// (a patched candidate), and each kind of syscall is where the table says.
    #[test]
    fn fast_pass_table_covers_only_candidates() {
        for (nr, p) in PASS.iter().enumerate() {
            let nr = nr as i64;
            if *p != Pass::Never {
                assert!(candidate(nr), "{nr}");
            }
            assert_eq!(*p == Pass::FdFirst, fd_only(nr), "{nr}");
            assert_eq!(*p == Pass::DirfdPath, dirfd_path(nr), "{nr}");
        }
        assert_eq!(PASS[libc::SYS_mmap as usize], Pass::FdFifth);
        assert_eq!(PASS[libc::SYS_getxattr as usize], Pass::CwdPath);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(PASS[libc::SYS_stat as usize], Pass::CwdPath);
        for nr in [
            libc::SYS_renameat2,
            libc::SYS_linkat,
            libc::SYS_chdir,
            libc::SYS_execve,
        ] {
            assert_eq!(PASS[nr as usize], Pass::Never, "{nr}");
        }
    }
}
