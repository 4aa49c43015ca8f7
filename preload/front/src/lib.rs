//! `libmadfs.so`: the library users preload. It is only the front of madfs's preload:
//!
//! * its constructor installs the interception engine (`madfs-intercept`) and lets the engine
//!   pass, without any hook, every syscall whose fd or path is not madfs's
//!   ([`madfs_intercept::fast_pass`] over the state in [`SHARED`]);
//! * its hook ([`hook`]) loads the **core**, `libmadfs_core.so` from the same directory (the
//!   `preload/` crate: handlers, fd table, client library), at the first syscall that names
//!   an absolute path under the mount, and from then on hands every candidate syscall to it.
//!
//! A process that never touches the mount never loads the core: it pays for this small
//! library and the engine only (docs/performance.md, "the front and the core"). A process
//! that inherits madfs fds or a working directory inside madfs across `exec` loads the core
//! in the constructor, before the program runs.

use madfs_hookabi::{self as abi, Core, CoreStart, Shared, Start};
use madfs_intercept::Pass;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU8, Ordering::*};

/// The state the engine's fast pass reads and the core keeps up to date.
static SHARED: Shared = Shared::new();

/// The core, once loaded.
static CORE: AtomicPtr<Core> = AtomicPtr::new(std::ptr::null_mut());

const UNLOADED: u8 = 0;
const LOADING: u8 = 1;
const LOADED: u8 = 2;
const FAILED: u8 = 3;
static STATE: AtomicU8 = AtomicU8::new(UNLOADED);
/// The thread loading the core (its own syscalls meanwhile pass through).
static LOADER: AtomicI32 = AtomicI32::new(0);

/// The pid of this process as the constructor (or the `fork` child handler) saw it.
static PID: AtomicI32 = AtomicI32::new(0);
/// A process sharing our memory was cloned before the core was loaded.
static CLONED_VM: AtomicBool = AtomicBool::new(false);

/// Where the core is, when this library's name was relative ([`find_core`]): a C string from
/// `malloc` (not a static buffer: the BSS then no longer fits the library's last data page,
/// and the loader maps one piece more in every process), set by the constructor.
static CORE_PATH: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());

const PATH_MAX: usize = libc::PATH_MAX as usize;

// libc sites of every other syscall with a known number stay unpatched (x86_64).
madfs_intercept::syscall_set!(abi::candidate);
madfs_intercept::fd_first_set!(abi::fd_only);
madfs_intercept::dirfd_path_set!(abi::dirfd_path);
madfs_intercept::cwd_path_set!(abi::cwd_path);

/// Where the engine looks to run a syscall without calling [`hook`] (which would pass it
/// through for the same reason): the fd of the `fd_only` syscalls and `mmap`, the path of the
/// path syscalls.
static PASS: [Pass; 512] = {
    let mut t = [Pass::Never; 512];
    let mut nr = 0;
    while nr < 512 {
        let n = nr as i64;
        t[nr] = if abi::fd_only(n) {
            Pass::FdFirst
        } else if abi::dirfd_path(n) {
            Pass::DirfdPath
        } else if abi::cwd_path(n) {
            Pass::CwdPath
        } else {
            Pass::Never
        };
        nr += 1;
    }
    t[libc::SYS_mmap as usize] = Pass::FdFifth;
    t
};

/// Writes `parts` to stderr, one raw `write` each. No formatting and no allocation: nothing
/// in this library may panic (a panic path links std's panic machinery and backtrace
/// printer, most of this library's text, which every preloaded process would map; the
/// test `front_has_no_panic_path` keeps it so).
fn write_stderr(parts: &[&[u8]]) {
    for p in parts {
        // SAFETY: a raw write of our own bytes to stderr.
        unsafe { abi::raw!(libc::SYS_write, 2, p.as_ptr(), p.len()) };
    }
}

/// `n` in decimal, in `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            break;
        }
    }
    buf.get(i..).unwrap_or_default()
}

/// Library constructor: the engine, the fast pass, and the core at once when the process
/// starts with madfs state (inherited fds, working directory) or with `MADFS_TRACE`.
extern "C-unwind" fn init() {
    if env_is_set(c"MADFS_PRELOAD_DISABLE") {
        return;
    }
    SHARED.set_mount(abi::mount_from(madfs_intercept::env(abi::MOUNT_ENV_C)));
    if is_fuse(SHARED.mount()) {
        // a madfs FUSE mount (`madfs-fuse`) on the prefix: the kernel serves it
        return;
    }
    PID.store(getpid(), Release);
    find_core();
    let trace = env_is_set(c"MADFS_TRACE");
    if trace || env_is_set(abi::FDS_ENV_C) || env_is_set(abi::CWD_ENV_C) {
        load_core();
    }
    // SAFETY: the library constructor, before the program's threads start; the hook is
    // re-entrant and never unwinds (the engine catches a panic).
    match unsafe { madfs_intercept::install(hook) } {
        Ok(_) if !trace => {
            madfs_intercept::fast_pass(
                &PASS,
                madfs_intercept::Ours {
                    fds: &SHARED.fds,
                    mount: SHARED.mount(),
                    cwd_host: &SHARED.cwd_host,
                },
            );
        }
        Ok(_) => {}
        Err(e) => {
            let mut n = [0; 20];
            let (sep, detail): (&[u8], &[u8]) = match &e {
                madfs_intercept::Error::Disassembler(m) => (b": ", m.as_bytes()),
                madfs_intercept::Error::Os(_, errno) => {
                    (b", errno ", decimal(errno.unsigned_abs().into(), &mut n))
                }
                _ => (b"", b""),
            };
            write_stderr(&[
                b"madfs: syscall interception is off: ",
                e.what().as_bytes(),
                sep,
                detail,
                b"\n",
            ]);
        }
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C-unwind" fn() = init;

/// `fork` child: a new pid; a load another thread had under way is not (it is not in the child).
fn after_fork_child() {
    PID.store(getpid(), Release);
    let _ = STATE.compare_exchange(LOADING, UNLOADED, AcqRel, Acquire);
}

/// A `fork` before the core is loaded (a clone that copies the memory onto the same stack:
/// glibc's `fork`, or the legacy `fork` syscall) is made here, so that the child notes its
/// pid before anything else runs in it (the core, loaded later in that child, must not take
/// it for a `vfork` child of its parent, see [`Start::pid`](abi::Start)). Its result, `None`
/// for any other syscall. This replaces a `pthread_atfork` handler, whose registration
/// faulted in two pages of libc in every preloaded process (docs/performance.md); once the
/// core is loaded, its own `fork` handling takes over.
fn fork_before_core(nr: i64, a: &[isize; 6]) -> Option<isize> {
    let fork = match nr {
        libc::SYS_clone => a[0] as u64 & libc::CLONE_VM as u64 == 0 && a[1] == 0,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_fork => true,
        _ => false,
    };
    if !fork {
        return None;
    }
    // SAFETY: the program's own fork, with its own arguments, made a few frames further
    // down: the child returns through the same frames on its copy of the stack.
    let r = unsafe { abi::raw6(nr, *a) };
    if r == 0 {
        after_fork_child();
    }
    Some(r)
}

/// This library's file name as the loader has it (for the core beside it), if absolute.
static OWN_NAME: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());

/// Notes where the core is. No allocation in the common case (an absolute name: the path is
/// built when the core is loaded; a process that never touches the mount may never call
/// `malloc` at all); a relative name is made absolute now, as the working directory may
/// change before the core is needed.
fn find_core() {
    let name = own_name();
    if name.is_null() {
        return;
    }
    // SAFETY: the loader's name of this library, a C string for the life of the process.
    let own = unsafe { CStr::from_ptr(name) }.to_bytes();
    if own.starts_with(b"/") {
        OWN_NAME.store(name.cast_mut(), Release);
        return;
    }
    let mut cwd = [0u8; PATH_MAX];
    // SAFETY: getcwd writes at most cwd.len() bytes, a C string on success.
    if unsafe { libc::getcwd(cwd.as_mut_ptr().cast(), cwd.len()) }.is_null() {
        return;
    }
    let cwd = CStr::from_bytes_until_nul(&cwd).map_or(&b""[..], CStr::to_bytes);
    let mut path = [0u8; PATH_MAX];
    if !beside(&[cwd, b"/", own], &mut path) {
        return;
    }
    let len = path
        .iter()
        .position(|&b| b == 0)
        .map_or(PATH_MAX, |n| n + 1);
    // SAFETY: a fresh allocation of len bytes, filled with the C string (NUL included) and
    // never freed.
    unsafe {
        let p = libc::malloc(len).cast::<u8>();
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(path.as_ptr(), p, len);
            CORE_PATH.store(p.cast(), Release);
        }
    }
}

/// The loader's name of this library (null if not found): the object whose loaded segments
/// hold [`init`]. The engine's constructor has just walked the same list, so this touches
/// nothing new (`dladdr` takes the loader's lock, scans this library's symbols and lives on a
/// page of libc that a preloaded process otherwise never needs).
fn own_name() -> *const c_char {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: usize, out: *mut c_void) -> c_int {
        let me = init as extern "C-unwind" fn() as usize;
        // SAFETY: the loader passes a valid dl_phdr_info whose dlpi_phdr holds dlpi_phnum
        // headers, for the duration of the call; `out` is the *const c_char below.
        unsafe {
            let info = &*info;
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                if ph.p_type == libc::PT_LOAD && me >= start && me - start < ph.p_memsz as usize {
                    *out.cast::<*const c_char>() = info.dlpi_name;
                    return 1;
                }
            }
        }
        0
    }
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: `visit` only reads what the loader passes and writes `name`, which outlives the
    // call; the names in the loader's list live as long as their objects.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut name).cast()) };
    // SAFETY: a non-null dlpi_name is a C string.
    if !name.is_null() && unsafe { *name } == 0 {
        return std::ptr::null();
    }
    name
}

/// Writes `<directory of the library file named by the concatenated parts of
/// own>/libmadfs_core.so` into `out`, NUL-terminated. False if it does not fit.
fn beside(own: &[&[u8]], out: &mut [u8; PATH_MAX]) -> bool {
    let mut at = 0;
    if !put(out, &mut at, own) {
        return false;
    }
    // keep the directory (up to its last '/'), or use "./"
    let name = out.get(..at).unwrap_or_default();
    at = name.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let dir: &[u8] = if at == 0 { b"./" } else { b"" };
    put(out, &mut at, &[dir, abi::CORE_FILE.as_bytes(), b"\0"])
}

/// Appends the parts to `out` at `*at`; false if they do not fit.
fn put(out: &mut [u8; PATH_MAX], at: &mut usize, parts: &[&[u8]]) -> bool {
    for &b in parts.iter().flat_map(|p| p.iter()) {
        let Some(slot) = out.get_mut(*at) else {
            return false;
        };
        *slot = b;
        *at += 1;
    }
    true
}

/// Where the core is, written into `out` (a C string); false if it cannot be said.
fn core_path(out: &mut [u8; PATH_MAX]) -> bool {
    let relative = CORE_PATH.load(Acquire);
    if !relative.is_null() {
        // SAFETY: a C string of at most PATH_MAX bytes (find_core), never freed.
        let p = unsafe { CStr::from_ptr(relative) }.to_bytes_with_nul();
        for (to, from) in out.iter_mut().zip(p) {
            *to = *from;
        }
        return true;
    }
    let own = OWN_NAME.load(Acquire);
    if own.is_null() {
        return beside(&[], out);
    }
    // SAFETY: the loader's name of this library, a C string for the life of the process.
    beside(&[unsafe { CStr::from_ptr(own) }.to_bytes()], out)
}

/// Whether the environment had `name` when the library was loaded: from the engine's one
/// pass over the environment ([`madfs_intercept::env`]; std's environment functions take a
/// lock and copy the value, in code of their own that every preloaded process would fault
/// in, and each `getenv` scans the whole environment).
/// Is `path` a FUSE file system (`madfs-fuse` mounted on the prefix)? Then the preload stays
/// out of the way for the whole process (docs/operations.md, "Preload or FUSE"). No
/// allocation: the path is copied to the stack.
fn is_fuse(path: &[u8]) -> bool {
    const FUSE_SUPER_MAGIC: libc::c_long = 0x6573_5546;
    let mut buf = [0u8; 4096];
    if path.is_empty() || path.len() >= buf.len() {
        return false;
    }
    buf[..path.len()].copy_from_slice(path);
    // SAFETY: statfs is plain data (all-zero is valid); `buf` is NUL-terminated.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(buf.as_ptr().cast(), &mut st) == 0
            && st.f_type as libc::c_long == FUSE_SUPER_MAGIC
    }
}

fn env_is_set(name: &CStr) -> bool {
    madfs_intercept::env(name).is_some()
}

/// The pid, asked of the kernel (libc's `getpid` is one more page of libc to fault in).
fn getpid() -> i32 {
    // SAFETY: getpid has no arguments.
    unsafe { abi::raw!(libc::SYS_getpid) as i32 }
}

fn gettid() -> i32 {
    // SAFETY: gettid has no arguments.
    unsafe { abi::raw!(libc::SYS_gettid) as i32 }
}

/// The core: loads it on first use (once per process; other threads wait for the loading
/// one). `None` while this thread is loading it (the loader's own syscalls) or when it
/// cannot be loaded (said once on stderr).
fn load_core() -> Option<&'static Core> {
    loop {
        match STATE.compare_exchange(UNLOADED, LOADING, AcqRel, Acquire) {
            Ok(_) => {
                LOADER.store(gettid(), Release);
                let core = open_core();
                match core {
                    Ok(c) => {
                        CORE.store((c as *const Core).cast_mut(), Release);
                        STATE.store(LOADED, Release);
                        return Some(c);
                    }
                    Err(e) => {
                        STATE.store(FAILED, Release);
                        let mut n = [0; 20];
                        let (what, detail): (&[u8], &[u8]) = match e {
                            LoadError::Patch(errno) => (
                                b"cannot patch libc's fd syscalls, errno ",
                                decimal(errno.unsigned_abs().into(), &mut n),
                            ),
                            LoadError::PathTooLong => (b"its path is too long", b""),
                            LoadError::Dl(m) => (b"", m),
                        };
                        write_stderr(&[
                            b"libmadfs: cannot load the core: ",
                            what,
                            detail,
                            b"; paths under the mount fail with ENOTCONN\n",
                        ]);
                        return None;
                    }
                }
            }
            Err(LOADING) => {
                if LOADER.load(Acquire) == gettid() {
                    return None;
                }
                // SAFETY: sched_yield has no arguments.
                unsafe { abi::raw!(libc::SYS_sched_yield) };
            }
            // SAFETY (deref): CORE is set to a 'static Core before STATE becomes LOADED.
            Err(LOADED) => return Some(unsafe { &*CORE.load(Acquire) }),
            Err(_) => return None,
        }
    }
}

/// Why the core could not be loaded.
enum LoadError {
    /// `patch_deferred` failed with this errno.
    Patch(i32),
    /// The core's path did not fit in `PATH_MAX`.
    PathTooLong,
    /// The loader's message (`dlerror`).
    Dl(&'static [u8]),
}

/// The loader's last error message.
fn dlerror() -> &'static [u8] {
    // SAFETY: dlerror returns null or a C string valid until the next dl call on this
    // thread; the loading thread reports it before it makes another.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        b"unknown error"
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(e) }.to_bytes()
    }
}

fn open_core() -> Result<&'static Core, LoadError> {
    // libc's fd syscalls that its bundle left unpatched reach the hook from now on, before
    // the process has any fd of ours
    madfs_intercept::patch_deferred().map_err(LoadError::Patch)?;
    let mut path = [0u8; PATH_MAX];
    if !core_path(&mut path) {
        return Err(LoadError::PathTooLong);
    }
    // SAFETY: dlopen of our own core by absolute path (a C string); never unloaded.
    let h = unsafe {
        libc::dlopen(
            path.as_ptr().cast(),
            libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE,
        )
    };
    if h.is_null() {
        return Err(LoadError::Dl(dlerror()));
    }
    // SAFETY: a symbol lookup in the handle just opened.
    let sym = unsafe { libc::dlsym(h, abi::CORE_START.as_ptr()) };
    if sym.is_null() {
        return Err(LoadError::Dl(dlerror()));
    }
    // SAFETY: the core defines madfs_core_start with the CoreStart signature (same
    // madfs-hookabi, same build).
    let start: CoreStart = unsafe { std::mem::transmute::<*mut c_void, CoreStart>(sym) };
    let s = Start {
        shared: &SHARED,
        pid: PID.load(Acquire),
        cloned_vm: CLONED_VM.load(Acquire),
    };
    // SAFETY: `s` outlives the call; the core keeps only its 'static parts.
    Ok(unsafe { start(&s) })
}

/// The hook the engine calls for every patched syscall of libc: `None` lets the kernel run
/// it, `Some(v)` answers it with `v` (`-errno` on failure).
fn hook(nr: i64, a: &[isize; 6]) -> Option<isize> {
    if !abi::candidate(nr) {
        return None;
    }
    let core = CORE.load(Acquire);
    let core = if core.is_null() {
        if let Some(r) = fork_before_core(nr, a) {
            return Some(r);
        }
        if !ours_before_core(nr, a) {
            return None;
        }
        match load_core() {
            Some(c) => c,
            None if STATE.load(Acquire) == FAILED => {
                return Some(-(libc::ENOTCONN as isize));
            }
            None => return None,
        }
    } else {
        // SAFETY: set once to a 'static Core.
        unsafe { &*core }
    };
    let mut ret = 0;
    (core.hook)(nr, a, &mut ret).then_some(ret)
}

/// Before the core is loaded the process has no madfs fd and its working directory is on the
/// host: a syscall is madfs's only if one of its path arguments is absolute and under the
/// mount. Notes a clone of a process that shares our memory, which the core must know of.
fn ours_before_core(nr: i64, a: &[isize; 6]) -> bool {
    let shares_vm =
        |flags: u64| flags & libc::CLONE_VM as u64 != 0 && flags & libc::CLONE_THREAD as u64 == 0;
    let cloned = match nr {
        libc::SYS_clone => shares_vm(a[0] as u64),
        // SAFETY: clone3's first argument points to struct clone_args, flags first.
        libc::SYS_clone3 if a[0] != 0 => shares_vm(unsafe { *(a[0] as *const u64) }),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_vfork => true,
        _ => false,
    };
    if cloned {
        CLONED_VM.store(true, Release);
        return false;
    }
    let mount = SHARED.mount();
    abi::path_args(nr)
        .iter()
        .filter_map(|&i| a.get(i))
        .any(|&p| {
            // SAFETY: these arguments of these syscalls are C strings (or null).
            matches!(unsafe { abi::cstr(p) }, Some(p) if abi::is_under_mount(p, mount))
        })
}

/// Whether a madfs hook runs on the calling thread (false before the core is loaded).
fn in_core_hook() -> bool {
    let c = CORE.load(Acquire);
    // SAFETY: set once to a 'static Core.
    !c.is_null() && (unsafe { &*c }.in_hook)()
}

/// The program's `strtok` position.
static PROGRAM: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());
/// The position of `strtok` calls made inside madfs (UCX's).
static OURS: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());

/// `strtok(3)`, defined for the whole process by the preloaded library: calls made while a
/// madfs hook runs on the calling thread use a position of their own, every other call the
/// program's, exactly as glibc's `strtok` would.
///
/// UCX is loaded on first use (a `dlopen` inside the first intercepted syscall on a madfs
/// path), and its library constructor (`ucs_init`) tokenises its configuration and the host
/// name with `strtok`. glibc's `strtok` keeps one position for the whole process, so a
/// program in the middle of a `strtok` loop whose first madfs access sits inside that loop
/// lost its position: io500 builds its data directories by `strtok`-ing the path and
/// `stat`-ing each prefix, and stopped after `/madfs/` (no `ior-easy` directory, then
/// `ENOENT` on every rank's file).
///
/// # Safety
/// As for C's `strtok`: `s` is null or a NUL-terminated string the caller may modify (null:
/// go on in the string of the last call on the same position), `delim` a NUL-terminated
/// string; like glibc's, not for concurrent use by several threads.
#[no_mangle]
pub unsafe extern "C" fn strtok(s: *mut c_char, delim: *const c_char) -> *mut c_char {
    let slot = if in_core_hook() { &OURS } else { &PROGRAM };
    let mut save = slot.load(Relaxed);
    // SAFETY: forwarded contract; `save` is this position's last value (or null, which
    // strtok_r only reads when `s` is null, as strtok would).
    let r = unsafe { libc::strtok_r(s, delim, &mut save) };
    slot.store(save, Relaxed);
    r
}

/// Whether a panic inside the core unwinds to its `catch_unwind` (1): what keeps a fault in
/// a hook from crossing into the program. Loads the core. For tests (`madfs-syscall unwind`).
#[no_mangle]
pub extern "C-unwind" fn madfs_unwind_selftest() -> c_int {
    match load_core() {
        Some(c) => (c.unwind_selftest)(),
        None => -1,
    }
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
                assert!(abi::candidate(nr), "{nr}");
            }
            assert_eq!(*p == Pass::FdFirst, abi::fd_only(nr), "{nr}");
            // the engine opens the fd prefixes only if the two agree
            let prefixed = madfs_intercept_fd_first[nr as usize / 64] >> (nr % 64) & 1 == 1;
            assert_eq!(prefixed, *p == Pass::FdFirst, "{nr}");
            assert_eq!(*p == Pass::DirfdPath, abi::dirfd_path(nr), "{nr}");
            // and the path prefixes only if these agree too
            let bit = |set: &[u64; 8]| set[nr as usize / 64] >> (nr % 64) & 1 == 1;
            assert_eq!(
                bit(&madfs_intercept_dirfd_path),
                *p == Pass::DirfdPath,
                "{nr}"
            );
            assert_eq!(bit(&madfs_intercept_cwd_path), *p == Pass::CwdPath, "{nr}");
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

    #[test]
    fn only_absolute_mount_paths_load_the_core() {
        let p = |s: &'static std::ffi::CStr| s.as_ptr() as isize;
        let at = libc::AT_FDCWD as isize;
        assert!(ours_before_core(
            libc::SYS_openat,
            &[at, p(c"/madfs/a"), 0, 0, 0, 0]
        ));
        assert!(!ours_before_core(
            libc::SYS_openat,
            &[at, p(c"madfs/a"), 0, 0, 0, 0]
        ));
        assert!(!ours_before_core(
            libc::SYS_openat,
            &[at, p(c"/madfsx"), 0, 0, 0, 0]
        ));
        assert!(!ours_before_core(libc::SYS_openat, &[at, 0, 0, 0, 0, 0]));
        let rename = [at, p(c"/tmp/x"), at, p(c"/madfs/y"), 0, 0];
        assert!(ours_before_core(libc::SYS_renameat, &rename));
        assert!(!ours_before_core(libc::SYS_close, &[3, 0, 0, 0, 0, 0]));
        assert!(!ours_before_core(
            libc::SYS_symlinkat,
            &[p(c"/madfs/t"), at, p(c"/tmp/l"), 0, 0, 0]
        ));
        assert!(!CLONED_VM.load(Acquire));
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD) as isize;
        assert!(!ours_before_core(libc::SYS_clone, &[thread, 0, 0, 0, 0, 0]));
        assert!(!CLONED_VM.load(Acquire));
        let spawn = (libc::CLONE_VM | libc::CLONE_VFORK) as isize;
        assert!(!ours_before_core(libc::SYS_clone, &[spawn, 0, 0, 0, 0, 0]));
        assert!(CLONED_VM.load(Acquire));
    }
}
