//! Syscall interception for `libmadfs.so`: one API, two engines.
//!
//! * **x86_64** — the `syscall-intercept` crate (vendored, see `vendor/PATCHES.md`): PMem's
//!   syscall_intercept rewrites every `syscall` instruction of libc into a jump to its
//!   trampolines when the library is loaded.
//! * **aarch64** — our own engine ([`aarch64`]): it finds every `svc #0` in the text of libc,
//!   confirms each with capstone, and rewrites it into one `b` to a per-site trampoline that
//!   saves the registers, calls the hook and either returns the hook's value or issues the
//!   syscall itself, then branches back (the design is in `docs/architecture.md`).
//!
//! Both engines call one [`Hook`]: `Some(value)` answers the syscall (a result or `-errno`),
//! `None` lets the kernel run it. [`raw`] issues a syscall that is never intercepted.
//!
//! The hook runs on the thread that made the syscall, possibly inside malloc or with signals
//! pending: it must be re-entrant and must not unwind (the engines catch a panic and forward).

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod plan;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use std::ffi::CStr;
use std::fmt;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

/// The hook: syscall number and its six argument registers. `Some(v)`: the syscall returns
/// `v` (`-errno` for an error) without reaching the kernel; `None`: the kernel runs it.
pub type Hook = fn(nr: i64, args: &[isize; 6]) -> Option<isize>;

/// The installed [`Hook`] as an address (0: none yet). An atomic rather than a `OnceLock`:
/// the front that installs it must be free of every panic path (its library then carries
/// none of std's panic and backtrace code, see `preload/front`), and a `OnceLock` can panic.
static HOOK: AtomicUsize = AtomicUsize::new(0);

/// What `install` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installed {
    /// Engine name ("syscall_intercept" or "svc-trampolines").
    pub engine: &'static str,
    /// Number of syscall instructions rewritten (0 where the engine does not report it).
    pub sites: usize,
}

/// Why interception could not be set up. The process then runs without interception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No engine for this architecture.
    Unsupported,
    /// A hook is already installed.
    AlreadyInstalled,
    /// libc's text was not found among the loaded objects.
    NoLibc,
    /// The disassembler could not be used (message from capstone).
    Disassembler(String),
    /// No trampoline memory within branch range (±128 MiB) of the code to patch.
    OutOfReach {
        /// First byte of the code to patch.
        code: usize,
        /// Where the nearest trampoline memory could be had.
        trampolines: usize,
    },
    /// A system call failed while patching (`errno`).
    Os(&'static str, i32),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unsupported | Error::AlreadyInstalled | Error::NoLibc => {
                f.write_str(self.what())
            }
            Error::Disassembler(m) => write!(f, "capstone: {m}"),
            Error::OutOfReach { code, trampolines } => write!(
                f,
                "code at {code:#x} is out of branch range of trampolines at {trampolines:#x} \
                 (±128 MiB); not intercepting"
            ),
            Error::Os(what, e) => write!(f, "{what}: errno {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// What went wrong, without the details: no formatting (the front reports this).
    pub fn what(&self) -> &'static str {
        match self {
            Error::Unsupported => "no syscall interception engine for this architecture",
            Error::AlreadyInstalled => "a syscall hook is already installed",
            Error::NoLibc => "libc's text was not found in this process",
            Error::Disassembler(_) => "capstone could not be used",
            Error::OutOfReach { .. } => {
                "libc's code is out of branch range of trampoline memory (±128 MiB)"
            }
            Error::Os(what, _) => what,
        }
    }
}

/// The 512-bit set of syscall numbers `nr` (0 ≤ nr < 512) for which the `const fn`
/// `$pred(nr)` holds, as eight words (bit `nr % 64` of word `nr / 64`).
#[doc(hidden)]
#[macro_export]
macro_rules! syscall_bits {
    ($pred:path) => {{
        let mut set = [0u64; 8];
        let mut nr = 0i64;
        while nr < 512 {
            if $pred(nr) {
                set[(nr / 64) as usize] |= 1u64 << (nr % 64);
            }
            nr += 1;
        }
        set
    }};
}

/// Defines the `#[no_mangle]` 512-bit set `$name` of the syscalls for which `$pred(nr)` holds
/// (the sets below, which the x86_64 engine reads while it patches libc).
#[doc(hidden)]
#[macro_export]
macro_rules! syscall_bit_set {
    ($name:ident, $pred:path) => {
        #[allow(non_upper_case_globals)]
        #[no_mangle]
        #[used]
        pub static $name: [u64; 8] = $crate::syscall_bits!($pred);
    };
}

/// Declares which syscall numbers the program's hook may answer (`wanted(nr)` for
/// 0 ≤ nr < 512, evaluated at compile time), as the 512-bit set `madfs_intercept_syscalls`
/// that the x86_64 engine reads while it patches libc, before any Rust code runs.
///
/// A libc site whose number is known (`mov $nr, %eax` right before the `syscall`, and no
/// jump lands on the `syscall` itself) and not in the set is left unpatched: that syscall
/// costs nothing extra and its page of libc stays shared with other processes. Sites with a
/// number computed at run time (`syscall(3)`) are always patched, so the hook must still
/// return `None` quickly for numbers outside the set. Without the set (or with
/// `MADFS_INTERCEPT_ALL` set to anything) every site is patched. The aarch64 engine patches
/// every `svc #0` regardless (it has no jump-target analysis to prove a number known).
#[macro_export]
macro_rules! syscall_set {
    ($wanted:path) => {
        $crate::syscall_bit_set!(madfs_intercept_syscalls, $wanted);
    };
}

/// Declares the syscalls whose first argument is a file descriptor the hook lets through
/// when it is not the program's (`fd_first(nr)` for 0 ≤ nr < 512, evaluated at compile
/// time), as the 512-bit set `madfs_intercept_fd_first` that the x86_64 engine reads while
/// it patches libc. Each such site with a known number (see [`syscall_set!`]) gets a few
/// instructions in its own wrapper that issue the syscall at once when the fd is below the
/// limit and not the program's, instead of going through the shared wrapper; where libc is
/// mapped from its bundle, such sites stay unpatched until [`patch_deferred`]. They stay
/// closed until [`fast_pass`] is called with a table whose entry is [`Pass::FdFirst`] for
/// every syscall in this set (otherwise such sites take the shared path, which decides the
/// same way).
#[macro_export]
macro_rules! fd_first_set {
    ($fd_first:path) => {
        $crate::syscall_bit_set!(madfs_intercept_fd_first, $fd_first);
    };
}

/// Declares the syscalls whose first two arguments are a `(dirfd, path)` pair the hook lets
/// through when the path is relative and the dirfd is not the program's (`dirfd_path(nr)`
/// for 0 ≤ nr < 512, evaluated at compile time), as the 512-bit set
/// `madfs_intercept_dirfd_path` that the x86_64 engine reads while it patches libc. Each such
/// site with a known number (see [`syscall_set!`]) gets a few instructions in its own wrapper
/// that issue the syscall at once for a relative (or empty) path from a dirfd below the limit
/// that is not the program's, or from the working directory while it is not the program's,
/// or for an absolute path whose second byte is neither the mount's nor `p`, instead of going
/// through the shared wrapper. Unlike the fd prefix's sites these are patched from the start.
/// They stay closed until [`fast_pass`] is called with a table whose entry is
/// [`Pass::DirfdPath`] for every syscall in this set ([`Pass::FdFirst`] for every one of
/// [`fd_first_set!`], [`Pass::CwdPath`] for every one of [`cwd_path_set!`]).
#[macro_export]
macro_rules! dirfd_path_set {
    ($dirfd_path:path) => {
        $crate::syscall_bit_set!(madfs_intercept_dirfd_path, $dirfd_path);
    };
}

/// As [`dirfd_path_set!`], for the syscalls whose first argument is a path relative to the
/// working directory (`cwd_path(nr)`), as the set `madfs_intercept_cwd_path`; their table
/// entry must be [`Pass::CwdPath`].
#[macro_export]
macro_rules! cwd_path_set {
    ($cwd_path:path) => {
        $crate::syscall_bit_set!(madfs_intercept_cwd_path, $cwd_path);
    };
}

/// What the engine may look at to let a syscall through without calling the hook
/// ([`fast_pass`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Pass {
    /// Nothing: the hook decides.
    Never = 0,
    /// The file descriptor in the first argument.
    FdFirst = 1,
    /// The file descriptor in the fifth argument (`mmap`).
    FdFifth = 5,
    /// A `(dirfd, path)` pair in the first two arguments.
    DirfdPath = 2,
    /// A path in the first argument, relative to the working directory.
    CwdPath = 3,
}

/// What the program's files are, for [`fast_pass`].
pub struct Ours {
    /// Its file descriptors: bit `fd % 64` of word `fd / 64`, set (with `Release`) before
    /// such an fd can reach libc.
    pub fds: &'static [AtomicU64],
    /// The path prefix of its files (no NUL): a path is the program's when it is this
    /// prefix, followed by `/` or its end.
    pub mount: &'static [u8],
    /// True while the working directory is not the program's (relative paths from it are
    /// not the program's).
    pub cwd_host: &'static AtomicBool,
}

/// Promises that the hook returns `None` for every syscall `nr` whose `table[nr]` says where
/// to look and finds none of `ours`: a file descriptor (as a C `int`) that is negative, at
/// least `ours.fds.len() * 64` or whose bit is clear; an absolute path that is not under
/// `ours.mount` and does not start with `/proc/self/fd/`; a relative or empty path from
/// such a file descriptor, or from the working directory while `ours.cwd_host` is true. A
/// null path is always left to the hook. The engine may then run such a syscall without
/// calling the hook (x86_64: a few instructions in syscall_intercept's wrapper, before it
/// saves the registers). Returns whether the engine took it (not on aarch64, nor while
/// syscall_intercept logs syscalls). Call it after [`install`], before other threads run.
pub fn fast_pass(table: &'static [Pass; 512], ours: Ours) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `Pass` is a `u8`, `AtomicU64` a `u64` and `AtomicBool` a `u8` in memory;
        // all live for the life of the process; the engine only reads them.
        return unsafe {
            syscall_intercept::madfs_intercept_fast_pass(
                table.as_ptr().cast(),
                ours.fds.as_ptr().cast(),
                ours.fds.len() as u64 * 64,
                ours.mount.as_ptr(),
                ours.mount.len(),
                ours.cwd_host.as_ptr().cast_const().cast(),
            )
        } == 0;
    }
    #[allow(unreachable_code)]
    {
        let _ = (table, ours);
        false
    }
}

/// Patches the libc sites the engine left unpatched at start (x86_64, libc mapped from its
/// bundle: the syscalls of [`fd_first_set!`] with a known number, which then go straight to
/// the kernel, as they may while the program has none of its own fds). Call it before the
/// program's first fd exists; from then on those sites take their fd prefix. From one
/// thread at a time (the caller serializes), any number of times (a no-op once done, on aarch64, or when nothing was left).
/// `Err(errno)` if the patched text could not be put in place.
pub fn patch_deferred() -> Result<(), i32> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: swaps libc's text for the same text with more sites patched (see
        // syscall_intercept's `bundle.c` for why running threads are unaffected).
        let r = unsafe { syscall_intercept::madfs_intercept_patch_deferred() };
        if r != 0 {
            return Err(-r);
        }
    }
    Ok(())
}

/// Installs `hook` for every syscall libc makes from now on, in every thread.
///
/// # Safety
/// Rewrites code of libc in this process: call it once, early (a library constructor), while
/// no other thread runs libc code that the engine patches. `hook` must not unwind and must be
/// safe to call re-entrantly from any thread, including from inside libc (e.g. malloc).
pub unsafe fn install(hook: Hook) -> Result<Installed, Error> {
    HOOK.compare_exchange(0, hook as usize, AcqRel, Acquire)
        .map_err(|_| Error::AlreadyInstalled)?;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded contract.
    return unsafe { x86_64::install() };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: forwarded contract.
    return unsafe { aarch64::install() };
    #[allow(unreachable_code)]
    Err(Error::Unsupported)
}

/// The value of the environment variable `name` (an `INTERCEPT_*` or `MADFS_*` one) as it was
/// when the library was loaded. On x86_64 the engine keeps those entries from one pass over
/// the environment (a process start asked `getenv` about fifteen times, each a scan of the
/// whole environment); elsewhere it is `getenv`.
pub fn env(name: &CStr) -> Option<&'static CStr> {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a C string in; a pointer into the environment (or null) out.
    let v = unsafe { syscall_intercept::madfs_intercept_getenv(name.as_ptr()) };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    let v = unsafe { libc::getenv(name.as_ptr()) }.cast_const();
    // SAFETY: a non-null result is a NUL-terminated string of the environment, whose
    // initial strings are never freed.
    (!v.is_null()).then(|| unsafe { CStr::from_ptr(v) })
}

/// Calls the installed hook (engines' common path). On aarch64 a panic in the hook is caught
/// (and the syscall forwarded). On x86_64 the hook must not panic at all: `catch_unwind` links
/// std's panic machinery and backtrace printer into the library that installs the hook (most
/// of `libmadfs.so`'s text, mapped by every preloaded process), so there the hook is called
/// as it is, and `libmadfs.so`'s hook is checked to have no panic path (its test
/// `front_has_no_panic_path`).
#[inline]
fn call_hook(nr: i64, args: &[isize; 6]) -> Option<isize> {
    let hook = HOOK.load(Acquire);
    if hook == 0 {
        return None;
    }
    // SAFETY: a nonzero HOOK is the address of a `Hook`, stored by `install`.
    let hook = unsafe { std::mem::transmute::<usize, Hook>(hook) };
    #[cfg(target_arch = "x86_64")]
    return hook(nr, args);
    #[cfg(not(target_arch = "x86_64"))]
    std::panic::catch_unwind(|| hook(nr, args)).unwrap_or(None)
}

// Raw syscalls (never intercepted): the same for the engine and for libmadfs.so's core,
// which does not link this crate's engine.
pub use madfs_hookabi::{raw, raw6};
