//! `libmadfs.so`: run unmodified programs on madfs with `LD_PRELOAD`.
//!
//! Every syscall of libc goes through the interception engine (`madfs-intercept`:
//! syscall_intercept on x86_64, our own `svc` trampolines on aarch64) to [`entry::hook`]. The request path
//! has three layers:
//! 1. [`entry`] — raw entry: syscall-number filter, re-entrancy guard, no panic across C;
//! 2. [`hooks`] — one handler per syscall: decides "ours or not" on the raw path bytes or the
//!    fd bitmap before any allocation, then does the work;
//! 3. `madfs-client` — the client library, one client per thread ([`conn`]).
//!
//! madfs fds are real kernel fds (memfds carrying the shared state of the open file
//! description, [`fdtable`]), so they survive `dup`, `fork`, `exec` and `posix_spawn`.
//! Configuration: `MADFS_CLUSTER` (cluster file), `MADFS_MOUNT` (default `/madfs`), and the
//! client settings of `madfs-client` (`MADFS_TIMEOUT_MS`, …).

pub mod abi;
pub mod conn;
pub mod entry;
pub mod fdtable;
pub mod hooks;
pub mod interpose;
pub mod path;

pub use path::{is_under_mount, DEFAULT_MOUNT};

/// Library constructor: reads the configuration, adopts madfs fds inherited across `exec`,
/// arranges for `fork` children to start new clients, and installs the hook.
extern "C" fn init() {
    if std::env::var_os("MADFS_PRELOAD_DISABLE").is_some() {
        return;
    }
    hooks::init();
    entry::TRACE.store(
        std::env::var_os("MADFS_TRACE").is_some(),
        std::sync::atomic::Ordering::Relaxed,
    );
    conn::set_pid();
    fdtable::adopt_inherited();
    // SAFETY: registering plain extern "C" functions.
    unsafe {
        libc::pthread_atfork(None, None, Some(conn::after_fork_child));
        libc::atexit(at_exit);
    }
    // SAFETY: the library constructor, before the program's threads start; the hook is
    // re-entrant and catches panics.
    match unsafe { madfs_intercept::install(entry::hook) } {
        Ok(_) => {
            entry::install_fast_pass();
        }
        Err(e) => {
            let line = format!("madfs: syscall interception is off: {e}\n");
            // SAFETY: a write to stderr.
            unsafe { madfs_intercept::raw!(libc::SYS_write, 2, line.as_ptr(), line.len()) };
        }
    }
}

/// Whether a panic inside libmadfs.so unwinds to its `catch_unwind` (1) — what keeps a fault
/// in a hook from crossing into the program. The library carries its own copy of GCC's
/// unwinder (`preload/build.rs`), so this checks that copy; for tests (`madfs-syscall unwind`).
#[no_mangle]
pub extern "C" fn madfs_unwind_selftest() -> libc::c_int {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let caught = std::panic::catch_unwind(|| panic!("unwind self-test")).is_err();
    std::panic::set_hook(hook);
    caught as libc::c_int
}

/// `exit()`: publish the sizes of files still open while the client library can still be
/// used (thread-local clients may already be gone; UCX's destructors have not run yet).
extern "C" fn at_exit() {
    hooks::flush_all();
}

/// Library destructor: from here on UCX is being torn down; create no client any more.
extern "C" fn fini() {
    conn::FINISHED.store(true, std::sync::atomic::Ordering::Release);
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;
