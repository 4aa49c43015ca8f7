#[link(name = "syscall_intercept")]
extern "C" {
    static mut intercept_hook_point: Option<HookFn>;

    pub fn syscall_no_intercept(num: isize, ...) -> isize;

    /// madfs: the fast pass-through (see `intercept.c`): `arg` has 512 entries (0: always
    /// call the hook; 1, 5: the fd is in the first or fifth argument; 2: a (dirfd, path)
    /// pair in the first two; 3: a path in the first, relative to the working directory);
    /// `bits` holds `nfds` bits; `mount` is the path prefix of the program's files;
    /// `*cwd_host` is nonzero while the working directory is not the program's. Returns 0,
    /// or -1 when not enabled (syscall logging on, bad arguments).
    pub fn madfs_intercept_fast_pass(
        arg: *const u8,
        bits: *const u64,
        nfds: u64,
        mount: *const u8,
        mount_len: usize,
        cwd_host: *const u8,
    ) -> i32;

    /// madfs: patches the sites libc's bundle left unpatched until now (the fd syscalls
    /// with a known number, see `bundle.c`); call it before the program's first fd exists.
    /// Returns 0, or -errno (those sites then stay unpatched).
    pub fn madfs_intercept_patch_deferred() -> i32;

    /// madfs: `getenv` of an `INTERCEPT_*` or `MADFS_*` variable as it was when the library
    /// was loaded, from one pass over the environment (any other name: `getenv`).
    pub fn madfs_intercept_getenv(name: *const std::ffi::c_char) -> *const std::ffi::c_char;
}

/// Set syscall intercept hook function.
///
/// # Safety
///
/// This function will change all syscall behavior!
pub unsafe fn set_hook_fn(f: HookFn) {
    intercept_hook_point = Some(f);
}

/// Clear syscall intercept hook function.
///
/// # Safety
///
/// This function will change all syscall behavior!
pub unsafe fn unset_hook_fn() {
    intercept_hook_point = None;
}

/// The type of hook function.
///
/// madfs: `extern "C-unwind"`, so that a hook that cannot be proven not to unwind (one that
/// calls Rust code in another crate) needs no abort-on-unwind shim, whose reference to
/// core's `panic_cannot_unwind` linked all of std's panic and backtrace code into
/// `libmadfs.so`. A hook must still never unwind: syscall_intercept's C frames have no
/// unwind tables.
pub type HookFn = extern "C-unwind" fn(
    num: isize,
    a0: isize,
    a1: isize,
    a2: isize,
    a3: isize,
    a4: isize,
    a5: isize,
    result: &mut isize,
) -> InterceptResult;

/// The return value of hook function.
#[repr(i32)]
pub enum InterceptResult {
    /// The user takes over the system call. The return value should be set via `result`.
    Hook = 0,
    /// The specific system call was ignored by the user and the original syscall should be executed.
    Forward = 1,
}
