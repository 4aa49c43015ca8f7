//! `libmadfs_core.so`: the core of madfs's preload, loaded by the preloaded front
//! (`libmadfs.so`, `preload/front`) at the first syscall that names a madfs path.
//!
//! The front's interception engine (`madfs-intercept`: syscall_intercept on x86_64, our own
//! `svc` trampolines on aarch64) calls the front's hook for every patched syscall of libc;
//! once the core is loaded, the front hands each candidate syscall to [`entry::hook`]. The
//! request path has three layers:
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
pub mod special;
pub mod sync;

pub use path::{is_under_mount, DEFAULT_MOUNT};

/// The state shared with the front: the front's once the core is started by it, else (unit
/// tests, no front) this library's own.
static SHARED: std::sync::atomic::AtomicPtr<madfs_hookabi::Shared> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
static LOCAL: madfs_hookabi::Shared = madfs_hookabi::Shared::new();

/// The fd bitmap, working-directory flag and mount prefix the front's engine reads.
#[inline]
pub fn shared() -> &'static madfs_hookabi::Shared {
    let p = SHARED.load(std::sync::atomic::Ordering::Acquire);
    if p.is_null() {
        &LOCAL
    } else {
        // SAFETY: set once from a `&'static Shared`.
        unsafe { &*p }
    }
}

static CORE: madfs_hookabi::Core = madfs_hookabi::Core {
    hook: entry::core_hook,
    in_hook: entry::core_in_hook,
    unwind_selftest: madfs_unwind_selftest,
};

/// The core's entry point (`madfs_hookabi::CORE_START`), called by the front right after it
/// loaded the core, once: reads the configuration, adopts madfs fds inherited across `exec`,
/// arranges for `fork` children to start new clients, and returns the hooks.
///
/// # Safety
/// Called once per process, by the front, with its state (`start.shared` lives as long as
/// the process).
#[no_mangle]
pub unsafe extern "C" fn madfs_core_start(
    start: &madfs_hookabi::Start,
) -> &'static madfs_hookabi::Core {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        SHARED.store(
            (start.shared as *const madfs_hookabi::Shared).cast_mut(),
            std::sync::atomic::Ordering::Release,
        );
        let _ = std::panic::catch_unwind(|| {
            hooks::init();
            entry::TRACE.store(
                std::env::var_os("MADFS_TRACE").is_some(),
                std::sync::atomic::Ordering::Relaxed,
            );
            conn::start(start.pid, start.cloned_vm);
            fdtable::adopt_inherited();
            // SAFETY: registering plain extern "C" functions.
            unsafe {
                libc::pthread_atfork(None, None, Some(conn::after_fork_child));
                libc::atexit(at_exit);
            }
        });
    });
    &CORE
}

/// Whether a panic inside the core unwinds to its `catch_unwind` (1) — what keeps a fault
/// in a hook from crossing into the program. The library carries its own copy of GCC's
/// unwinder (`preload/build.rs`), so this checks that copy; for tests (`madfs-syscall unwind`,
/// through the front's `madfs_unwind_selftest`).
extern "C" fn madfs_unwind_selftest() -> libc::c_int {
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
    hooks::release_all();
}

/// Library destructor (the core is never unloaded: at exit): from here on UCX is being torn
/// down; create no client any more.
extern "C" fn fini() {
    conn::FINISHED.store(true, std::sync::atomic::Ordering::Release);
}

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;
