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
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU8, Ordering::*};
use std::sync::OnceLock;

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

/// Where the core is, when this library's name was relative ([`find_core`]).
static CORE_PATH: OnceLock<CString> = OnceLock::new();

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

fn write_stderr(msg: &str) {
    // SAFETY: a raw write of our own bytes to stderr.
    unsafe { abi::raw!(libc::SYS_write, 2, msg.as_ptr(), msg.len()) };
}

/// Library constructor: the engine, the fast pass, and the core at once when the process
/// starts with madfs state (inherited fds, working directory) or with `MADFS_TRACE`.
extern "C" fn init() {
    if env_is_set(c"MADFS_PRELOAD_DISABLE") {
        return;
    }
    SHARED.set_mount(abi::mount_from_env());
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
        Err(e) => write_stderr(&format!("madfs: syscall interception is off: {e}\n")),
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

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
    let own = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    if own.starts_with(b"/") {
        OWN_NAME.store(name.cast_mut(), Release);
    } else if let Ok(cwd) = std::env::current_dir() {
        let mut abs = cwd.into_os_string().into_encoded_bytes();
        abs.push(b'/');
        abs.extend_from_slice(own);
        let _ = CORE_PATH.set(beside(&abs));
    }
}

/// The loader's name of this library (null if not found): the object whose loaded segments
/// hold [`init`]. The engine's constructor has just walked the same list, so this touches
/// nothing new (`dladdr` takes the loader's lock, scans this library's symbols and lives on a
/// page of libc that a preloaded process otherwise never needs).
fn own_name() -> *const c_char {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: usize, out: *mut c_void) -> c_int {
        let me = init as extern "C" fn() as usize;
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

/// `<directory of the library file `own`>/libmadfs_core.so`.
fn beside(own: &[u8]) -> CString {
    let mut p = match own.iter().rposition(|&b| b == b'/') {
        Some(i) => own[..=i].to_vec(),
        None => b"./".to_vec(),
    };
    p.extend_from_slice(abi::CORE_FILE.as_bytes());
    CString::new(p).unwrap_or_default()
}

/// Where the core is.
fn core_path() -> CString {
    if let Some(p) = CORE_PATH.get() {
        return p.clone();
    }
    let own = OWN_NAME.load(Acquire);
    if own.is_null() {
        return beside(b"");
    }
    // SAFETY: the loader's name of this library, a C string for the life of the process.
    beside(unsafe { std::ffi::CStr::from_ptr(own) }.to_bytes())
}

/// Whether the environment has `name`: libc's `getenv`, which the engine's constructor has
/// just used (std's environment functions take a lock and copy the value, in code of their
/// own that every preloaded process would fault in).
fn env_is_set(name: &std::ffi::CStr) -> bool {
    // SAFETY: a C string; read in the constructor, before the program can change its
    // environment.
    !unsafe { libc::getenv(name.as_ptr()) }.is_null()
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
                        write_stderr(&format!(
                            "libmadfs: cannot load the core: {e}; paths under the mount \
                             fail with ENOTCONN\n"
                        ));
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

fn open_core() -> Result<&'static Core, String> {
    // libc's fd syscalls that its bundle left unpatched reach the hook from now on, before
    // the process has any fd of ours
    madfs_intercept::patch_deferred()
        .map_err(|e| format!("cannot patch libc's fd syscalls (errno {e})"))?;
    let path = core_path();
    let dlerror = || {
        // SAFETY: dlerror returns null or a C string valid until the next dl call.
        let e = unsafe { libc::dlerror() };
        if e.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: as above.
            unsafe { std::ffi::CStr::from_ptr(e) }
                .to_string_lossy()
                .into_owned()
        }
    };
    // SAFETY: dlopen of our own core by absolute path; never unloaded.
    let h = unsafe {
        libc::dlopen(
            path.as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE,
        )
    };
    if h.is_null() {
        return Err(dlerror());
    }
    // SAFETY: a symbol lookup in the handle just opened.
    let sym = unsafe { libc::dlsym(h, abi::CORE_START.as_ptr()) };
    if sym.is_null() {
        return Err(dlerror());
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
    abi::path_args(nr).iter().any(|&i| {
        // SAFETY: these arguments of these syscalls are C strings (or null).
        matches!(unsafe { abi::cstr(a[i]) }, Some(p) if abi::is_under_mount(p, mount))
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
pub extern "C" fn madfs_unwind_selftest() -> c_int {
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
