//! What the two halves of the preload share.
//!
//! `libmadfs.so` is split in two (docs/architecture.md, "Preload"):
//! * the **front** (`preload/front`, the library users preload) holds the interception engine
//!   and decides, for every syscall of libc, whether it can concern madfs at all;
//! * the **core** (`preload/`, `libmadfs_core.so`, beside it) holds everything else: the
//!   handlers, the fd table, the client library, UCX. The front loads it with `dlopen` at the
//!   first syscall that names a madfs path (or at start, when the process inherited madfs fds
//!   or a working directory inside madfs): a process that never touches the mount never loads
//!   it, and pays only for the small front.
//!
//! This crate is what both halves compile in: the syscall classes, the mount-prefix test on
//! raw bytes, raw syscalls that no engine intercepts, and [`Shared`] (the state the front owns
//! and the core writes) with [`Core`] (what the core hands back).

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

/// Mount prefix used when `MADFS_MOUNT` is not set.
pub const DEFAULT_MOUNT: &[u8] = b"/madfs";

/// Environment variable an exec'ing process with a working directory inside madfs leaves
/// to the new image (that directory).
pub const CWD_ENV: &str = "MADFS_CWD";
/// Environment variable an exec'ing process with madfs fds leaves to the new image.
pub const FDS_ENV: &str = "MADFS_FDS";
/// [`CWD_ENV`] as a C string.
pub const CWD_ENV_C: &CStr = c"MADFS_CWD";
/// [`FDS_ENV`] as a C string.
pub const FDS_ENV_C: &CStr = c"MADFS_FDS";

/// File name of the core, looked up in the front's own directory.
pub const CORE_FILE: &str = "libmadfs_core.so";
/// The core's entry point ([`CoreStart`]).
pub const CORE_START: &CStr = c"madfs_core_start";

/// Is `path` (raw bytes, no NUL) the mount point or inside it? `mount` has no trailing `/`.
/// No allocation, no locks: safe to call first thing in a syscall hook.
pub fn is_under_mount(path: &[u8], mount: &[u8]) -> bool {
    path.starts_with(mount) && matches!(path.get(mount.len()), None | Some(b'/'))
}

/// Highest fd number + 1 that can be a madfs fd.
pub const MAX_FD: usize = 1 << 16;

/// State the front owns (its interception engine reads it to let syscalls through without
/// calling any hook) and the core keeps up to date.
pub struct Shared {
    /// The madfs fds: bit `fd % 64` of word `fd / 64`, set (`Release`) before such an fd
    /// can reach the program.
    pub fds: [AtomicU64; MAX_FD / 64],
    /// True while the working directory is not inside madfs.
    pub cwd_host: AtomicBool,
    /// The mount prefix (no trailing `/`): pointer and length of bytes that live as long as
    /// the process; null for [`DEFAULT_MOUNT`].
    mount_ptr: AtomicPtr<u8>,
    mount_len: AtomicUsize,
}

impl Shared {
    /// No madfs fd, working directory on the host, the default mount.
    pub const fn new() -> Shared {
        Shared {
            fds: [const { AtomicU64::new(0) }; MAX_FD / 64],
            cwd_host: AtomicBool::new(true),
            mount_ptr: AtomicPtr::new(std::ptr::null_mut()),
            mount_len: AtomicUsize::new(0),
        }
    }

    /// Sets the mount prefix (once, before the hooks run).
    pub fn set_mount(&self, mount: &'static [u8]) {
        use std::sync::atomic::Ordering::Release;
        self.mount_len.store(mount.len(), Release);
        self.mount_ptr.store(mount.as_ptr().cast_mut(), Release);
    }

    /// The mount prefix.
    pub fn mount(&self) -> &'static [u8] {
        use std::sync::atomic::Ordering::Acquire;
        let p = self.mount_ptr.load(Acquire);
        if p.is_null() {
            return DEFAULT_MOUNT;
        }
        // SAFETY: set_mount stored the pointer and length of a 'static slice (length first,
        // both before any hook runs).
        unsafe { std::slice::from_raw_parts(p, self.mount_len.load(Acquire)) }
    }

    /// Is `fd` a madfs fd? Lock-free.
    #[inline]
    pub fn is_ours(&self, fd: i64) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        (0..MAX_FD as i64).contains(&fd)
            && self.fds[fd as usize / 64].load(Acquire) & (1 << (fd % 64)) != 0
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared::new()
    }
}

/// The name of the variable that sets the mount prefix.
pub const MOUNT_ENV_C: &CStr = c"MADFS_MOUNT";

/// The mount prefix from `MADFS_MOUNT` (trailing `/` removed; unset or empty: the default).
/// Points into the environment string itself (no allocation); the strings of a process's
/// initial environment are never freed.
pub fn mount_from_env() -> &'static [u8] {
    // SAFETY: getenv returns null or a NUL-terminated string of the environment; read in a
    // constructor, before the program can change its environment.
    let v = unsafe { libc::getenv(MOUNT_ENV_C.as_ptr()) };
    // SAFETY: as above.
    mount_from((!v.is_null()).then(|| unsafe { CStr::from_ptr(v) }))
}

/// The mount prefix for the value `v` of `MADFS_MOUNT` (see [`mount_from_env`]).
pub fn mount_from(v: Option<&'static CStr>) -> &'static [u8] {
    let Some(v) = v else {
        return DEFAULT_MOUNT;
    };
    let mut m = v.to_bytes();
    while let Some(rest) = m.strip_suffix(b"/") {
        m = rest;
    }
    if m.is_empty() {
        DEFAULT_MOUNT
    } else {
        m
    }
}

/// What the front tells the core when it loads it.
#[repr(C)]
pub struct Start {
    /// The front's state, for the life of the process.
    pub shared: &'static Shared,
    /// The pid of the process that ran the front's constructor (updated in fork children).
    /// Another pid at load time: the core is being loaded in a `vfork`/`posix_spawn` child.
    pub pid: i32,
    /// A process sharing our memory (`CLONE_VM`, e.g. `vfork`, `posix_spawn`) was cloned
    /// before the core was loaded: the core cannot know whether it still runs.
    pub cloned_vm: bool,
}

/// What the core hands back to the front.
#[repr(C)]
pub struct Core {
    /// The core's hook: true and `*ret` set when it answered syscall `nr`, false to let the
    /// kernel run it.
    pub hook: extern "C" fn(nr: i64, args: &[isize; 6], ret: &mut isize) -> bool,
    /// Whether a madfs hook runs on the calling thread.
    pub in_hook: extern "C" fn() -> bool,
    /// Whether a panic inside the core unwinds to its `catch_unwind` (1); for tests.
    pub unwind_selftest: extern "C" fn() -> libc::c_int,
}

/// The core's entry point, [`CORE_START`]: starts the core (once) and returns its hooks.
pub type CoreStart = unsafe extern "C" fn(start: &Start) -> &'static Core;

/// Syscalls whose only file argument is the fd in their first argument: not ours unless that
/// fd is a madfs fd.
pub const fn fd_only(nr: i64) -> bool {
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
            | libc::SYS_syncfs
            | libc::SYS_fgetxattr
            | libc::SYS_fsetxattr
            | libc::SYS_flistxattr
            | libc::SYS_fremovexattr
            | libc::SYS_ioctl
            | libc::SYS_flock
            | libc::SYS_close
    )
}

/// `fchmodat2(dirfd, path, mode, flags)` (Linux 6.6; the same number on every architecture,
/// not yet in the libc crate for all of them). glibc ≥ 2.39 issues it for `fchmodat` with
/// flags (`lchmod`, GNU tar's directory modes), before any fallback.
pub const SYS_FCHMODAT2: i64 = 452;

/// Syscalls with a `(dirfd, path)` pair in their first two arguments, not ours whenever that
/// pair names no madfs file.
pub const fn dirfd_path(nr: i64) -> bool {
    matches!(
        nr,
        SYS_FCHMODAT2
            | libc::SYS_openat
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
/// property (x86_64's legacy forms and the xattrs).
pub const fn cwd_path(nr: i64) -> bool {
    is_legacy_path(nr) || xattr_path(nr)
}

/// Syscalls that can concern madfs (everything else is passed through at once).
pub const fn candidate(nr: i64) -> bool {
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
                | libc::SYS_bind
                | libc::SYS_connect
                | libc::SYS_sync
        )
        || is_legacy(nr)
}

/// Whether `nr` is a legacy path syscall of this architecture (the core maps each to its
/// `*at` form).
#[cfg(target_arch = "x86_64")]
pub const fn is_legacy(nr: i64) -> bool {
    is_legacy_path(nr)
        || matches!(
            nr,
            libc::SYS_rename
                | libc::SYS_dup2
                | libc::SYS_symlink
                | libc::SYS_link
                | libc::SYS_futimesat
                | libc::SYS_fork
                | libc::SYS_vfork
        )
}

/// The legacy syscalls whose only file argument is a path in their first argument, relative
/// to the working directory.
#[cfg(target_arch = "x86_64")]
pub const fn is_legacy_path(nr: i64) -> bool {
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
            | libc::SYS_chmod
            | libc::SYS_chown
            | libc::SYS_lchown
            | libc::SYS_readlink
            | libc::SYS_mknod
            | libc::SYS_utime
            | libc::SYS_utimes
    )
}

/// aarch64 has only the `*at` forms.
#[cfg(not(target_arch = "x86_64"))]
pub const fn is_legacy(_nr: i64) -> bool {
    false
}

/// aarch64 has only the `*at` forms.
#[cfg(not(target_arch = "x86_64"))]
pub const fn is_legacy_path(_nr: i64) -> bool {
    false
}

/// The arguments of syscall `nr` that are paths a madfs file could be named by while the
/// process has no madfs fd and its working directory is on the host (so only an absolute
/// path under the mount can be ours): what the front looks at before the core is loaded.
/// `symlinkat`'s target is only stored, never looked up: not listed.
pub fn path_args(nr: i64) -> &'static [usize] {
    match nr {
        n if dirfd_path(n) => &[1],
        n if cwd_path(n) => &[0],
        libc::SYS_renameat | libc::SYS_renameat2 | libc::SYS_linkat => &[1, 3],
        libc::SYS_truncate | libc::SYS_chdir | libc::SYS_statfs | libc::SYS_execve => &[0],
        libc::SYS_execveat => &[1],
        libc::SYS_symlinkat => &[2],
        #[cfg(target_arch = "x86_64")]
        libc::SYS_rename | libc::SYS_link => &[0, 1],
        #[cfg(target_arch = "x86_64")]
        libc::SYS_symlink | libc::SYS_futimesat => &[1],
        _ => &[],
    }
}

/// The NUL-terminated string at `p` (null: `None`).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string (a syscall's path argument).
pub unsafe fn cstr<'a>(p: isize) -> Option<&'a [u8]> {
    if p == 0 {
        return None;
    }
    // SAFETY: forwarded contract.
    Some(unsafe { CStr::from_ptr(p as *const libc::c_char) }.to_bytes())
}

/// Issues syscall `nr` with up to six arguments (missing ones are 0). The instruction is in
/// this library, never in libc, so no interception engine sees it.
///
/// # Safety
/// A raw system call: the caller vouches for the arguments (pointers valid for what `nr`
/// does with them).
#[inline]
pub unsafe fn raw(nr: i64, args: &[isize]) -> isize {
    let mut a = [0isize; 6];
    // (no slice index: nothing here may panic, see preload/front)
    for (to, from) in a.iter_mut().zip(args) {
        *to = *from;
    }
    // SAFETY: forwarded contract.
    unsafe { raw6(nr, a) }
}

/// [`raw`] with all six argument registers.
///
/// # Safety
/// As for [`raw`].
#[inline]
pub unsafe fn raw6(nr: i64, a: [isize; 6]) -> isize {
    let r: isize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded contract; the kernel clobbers only rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => r,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        )
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: forwarded contract; the kernel preserves all other registers.
    unsafe {
        std::arch::asm!(
            "svc #0",
            in("x8") nr,
            inlateout("x0") a[0] => r,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") a[5],
            options(nostack),
        )
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // SAFETY: forwarded contract.
        let v = unsafe { libc::syscall(nr as libc::c_long, a[0], a[1], a[2], a[3], a[4], a[5]) };
        // SAFETY: the errno slot of this thread.
        r = if v == -1 {
            -(unsafe { *libc::__errno_location() }) as isize
        } else {
            v as isize
        };
    }
    r
}

/// `raw!(nr, a0, a1, …)`: [`raw`] with the arguments cast to `isize`.
#[macro_export]
macro_rules! raw {
    ($nr:expr $(, $a:expr)* $(,)?) => {
        $crate::raw($nr as i64, &[$($a as isize),*])
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_names_agree() {
        assert_eq!(CWD_ENV_C.to_str(), Ok(CWD_ENV));
        assert_eq!(FDS_ENV_C.to_str(), Ok(FDS_ENV));
    }

    #[test]
    fn mount_prefix_on_component_boundaries() {
        assert!(is_under_mount(b"/madfs", b"/madfs"));
        assert!(is_under_mount(b"/madfs/a", b"/madfs"));
        assert!(!is_under_mount(b"/madfsx", b"/madfs"));
        assert!(!is_under_mount(b"/mad", b"/madfs"));
    }

    #[test]
    fn raw_syscalls_return_values_and_negative_errno() {
        // SAFETY: getpid has no arguments; close of an fd that cannot be open fails.
        unsafe {
            assert_eq!(raw!(libc::SYS_getpid) as i32, libc::getpid());
            assert_eq!(raw!(libc::SYS_close, -1), -(libc::EBADF as isize));
        }
    }

    #[test]
    fn every_path_argument_belongs_to_a_candidate() {
        for nr in 0..512 {
            if !path_args(nr).is_empty() {
                assert!(candidate(nr), "{nr}");
            }
        }
        assert_eq!(path_args(libc::SYS_openat), &[1]);
        assert_eq!(path_args(libc::SYS_renameat2), &[1, 3]);
        assert!(path_args(libc::SYS_close).is_empty());
    }

    #[test]
    fn shared_state_starts_empty() {
        let s = Shared::new();
        assert!(!s.is_ours(3) && !s.is_ours(-1) && !s.is_ours(MAX_FD as i64));
        s.fds[0].fetch_or(1 << 3, std::sync::atomic::Ordering::Release);
        assert!(s.is_ours(3));
        assert_eq!(s.mount(), DEFAULT_MOUNT);
        s.set_mount(b"/x");
        assert_eq!(s.mount(), b"/x");
    }
}
