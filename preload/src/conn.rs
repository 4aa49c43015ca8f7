//! The client of the calling thread, created on first use (a process that never touches the
//! mount never connects). After `fork` the child never touches the parent's UCX state: the
//! fork generation changes and the inherited client is leaked, not destroyed, and a new one is
//! made on first use.

use madfs_client::{Client, ClientConfig};
use madfs_proto::{Errno, FsResult};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock};

static GEN: AtomicU64 = AtomicU64::new(0);
/// A UCX context was created in this process image (or inherited through `fork`).
static UCX_STARTED: AtomicBool = AtomicBool::new(false);
/// UCX cannot be used here: we are a `fork` child of a process that had UCX running (UCX's
/// global async thread does not exist in the child). Plain TCP is used instead.
static TCP_ONLY: AtomicBool = AtomicBool::new(false);
static MY_PID: AtomicI32 = AtomicI32::new(0);
static CONFIG: OnceLock<Result<ClientConfig, String>> = OnceLock::new();
static WARNED: AtomicBool = AtomicBool::new(false);
/// Set once this library's destructor has run: UCX's own destructors come next, so no new
/// client may be created after it.
pub static FINISHED: AtomicBool = AtomicBool::new(false);

/// One UCX context per process (per fork generation), shared by the threads' workers.
static CONTEXT: Mutex<Option<(u64, Arc<madfs_rpc::Context>)>> = Mutex::new(None);

/// A thread's client with its fork generation. Dropped at thread (or process) exit: a client
/// inherited through `fork` is leaked there, never destroyed, because destroying it would
/// remove the parent's UCX file descriptors from the epoll set the child shares with it.
struct Slot(Option<(u64, Rc<Client>)>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((g, c)) = self.0.take() {
            if g != GEN.load(Acquire) {
                std::mem::forget(c);
            }
        }
    }
}

thread_local! {
    static CLIENT: RefCell<Slot> = const { RefCell::new(Slot(None)) };
    /// Registered after CLIENT, so its destructor runs first at thread exit (and in `exit()`
    /// for the main thread): files still open are published while the client still works.
    static FLUSHER: Flusher = const { Flusher };
}

struct Flusher;

impl Drop for Flusher {
    fn drop(&mut self) {
        crate::hooks::flush_all();
        // the main thread's exit is the process's: its open files are released while its
        // client still works (in `exit_group` it may be gone already)
        // SAFETY: raw gettid/getpid syscalls.
        let main = unsafe {
            madfs_hookabi::raw!(libc::SYS_gettid) == madfs_hookabi::raw!(libc::SYS_getpid)
        };
        if main {
            crate::hooks::release_all();
        }
    }
}

fn context(gen: u64) -> FsResult<Arc<madfs_rpc::Context>> {
    // Threads starting at once wait for the one that creates the context. (No blocking
    // `lock()`: a fork child whose parent forked while another thread held the lock would wait
    // forever; it gives up after a minute instead.)
    let mut tries = 0;
    let mut slot = loop {
        match CONTEXT.try_lock() {
            Ok(s) => break s,
            Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if tries < 60_000 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(_) => return Err(Errno::EAGAIN),
        }
    };
    if let Some((g, c)) = &*slot {
        if *g == gen {
            return Ok(c.clone());
        }
    }
    if let Some(old) = slot.take() {
        // the parent's context after fork: never destroyed here
        std::mem::forget(old);
    }
    let c = madfs_rpc::new_context().map_err(|_| Errno::EIO)?;
    UCX_STARTED.store(true, Release);
    *slot = Some((gen, c.clone()));
    Ok(c)
}

/// Called when the core starts: `pid` is the process the front started in (updated in fork
/// children); another pid now means the core is being loaded in a `vfork`/`posix_spawn`
/// child of it, which shares its memory. `cloned_vm`: such a child was made before the core
/// was loaded (it may still run), so every check asks the kernel from then on.
pub fn start(pid: i32, cloned_vm: bool) {
    set_pid();
    // SAFETY: a raw getpid syscall.
    let now = unsafe { madfs_hookabi::raw!(libc::SYS_getpid) } as i32;
    if pid != 0 && pid != now {
        MY_PID.store(pid, Release);
        ALWAYS_CHECK.store(true, Release);
    }
    if cloned_vm {
        ALWAYS_CHECK.store(true, Release);
    }
}

/// Called when the core starts and in the child after `fork`.
pub fn set_pid() {
    // SAFETY: getpid has no preconditions.
    MY_PID.store(unsafe { libc::getpid() }, Release);
}

/// `pthread_atfork` child handler: new process, new clients.
pub extern "C" fn after_fork_child() {
    if UCX_STARTED.load(Acquire) {
        TCP_ONLY.store(true, Release);
    }
    GEN.fetch_add(1, AcqRel);
    set_pid();
}

thread_local! {
    /// Set when this thread is about to clone a new process: until a `getpid` shows that we
    /// are still the process that set it, we may be its `vfork` child, which runs on this
    /// thread's memory (and thread pointer) while the thread waits.
    static CLONED: Cell<bool> = const { Cell::new(false) };
}

/// A new process was cloned sharing our memory in a way [`CLONED`] cannot follow (no
/// `CLONE_VFORK`, so the parent runs on at once; or a thread pointer of its own): every check
/// asks the kernel from then on.
static ALWAYS_CHECK: AtomicBool = AtomicBool::new(false);

/// Called by the `clone`/`clone3`/`fork`/`vfork` hook before a new process (not a thread) is
/// made from this thread with `flags`.
pub fn before_process_clone(flags: u64) {
    let vm = flags & libc::CLONE_VM as u64 != 0;
    let followed = flags & libc::CLONE_VFORK as u64 != 0 && flags & libc::CLONE_SETTLS as u64 == 0;
    if vm && !followed {
        ALWAYS_CHECK.store(true, Release);
    }
    CLONED.with(|c| c.set(true));
}

/// Are we a `vfork`/`posix_spawn` child sharing the parent's memory? Then nothing shared may
/// be changed and no network state may be used. Costs a `getpid` only after this thread
/// cloned a process (once, in the parent: it clears the mark), in the child, or after a
/// clone [`ALWAYS_CHECK`] covers.
pub fn in_vfork_child() -> bool {
    if !CLONED.with(Cell::get) && !ALWAYS_CHECK.load(Acquire) {
        return false;
    }
    // SAFETY: a raw getpid syscall (glibc caches nothing since 2.25; the raw call also skips
    // the interception trampoline).
    let pid = unsafe { madfs_hookabi::raw!(libc::SYS_getpid) };
    if pid as i32 != MY_PID.load(Acquire) {
        return true;
    }
    // the parent, resumed (or a fork child whose atfork handler set MY_PID)
    CLONED.with(|c| c.set(false));
    false
}

/// Is this process configured for a cluster (its cluster file found and read)? Quiet: no
/// warning when it is not.
pub fn configured() -> bool {
    CONFIG.get_or_init(ClientConfig::from_env).is_ok()
}

/// The id of the cluster this process is configured for (its identity record).
pub fn cluster_id() -> FsResult<u64> {
    Ok(config()?.identity.id.0)
}

fn config() -> FsResult<&'static ClientConfig> {
    match CONFIG.get_or_init(ClientConfig::from_env) {
        Ok(c) => Ok(c),
        Err(e) => {
            if !WARNED.swap(true, AcqRel) {
                let msg = format!("libmadfs: {e}; paths under the mount fail with ENOTCONN\n");
                // SAFETY: plain write to stderr.
                unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            }
            Err(Errno::ENOTCONN)
        }
    }
}

/// Servers a new client connects to at once (more: on first use, as before).
const CONNECT_AT_ONCE: u32 = 64;

/// Fd numbers below this are the program's: a new client's sockets, event fds, epoll sets
/// and pipes (UCX's and ours) are made above it. Programs name 0–2 and shells 3–9 (`exec
/// 3>log`); higher numbers are chosen by the kernel (lowest free), and a live program that
/// closes a whole range (`closefrom(N)`) usually spares the low ones, so internal fds stay
/// just above 9 rather than far up.
const PROGRAM_FDS: isize = 10;

/// Runs `f` with every free fd number below [`PROGRAM_FDS`] held (on `/dev/null`), so the
/// descriptors made in `f` get higher numbers. Programs use low numbers by name: `touch`
/// reopens each file onto fd 0 and closes it, a shell's `exec 3>log` puts a file on fd 3.
/// A UCX socket, pipe or epoll set there was closed under UCX: `touch` of many files failed
/// with EIO after the call timeout, and `exec 3>…` in a shell that had used the mount
/// killed the shell (UCX's async thread aborts when its epoll set is gone).
fn with_program_fds_held<R>(f: impl FnOnce() -> R) -> R {
    let mut held = [false; PROGRAM_FDS as usize];
    // SAFETY: raw openat of a constant path (close-on-exec), closed below.
    let null = unsafe {
        madfs_hookabi::raw!(
            libc::SYS_openat,
            libc::AT_FDCWD,
            c"/dev/null".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC
        )
    };
    if null >= 0 {
        if null < PROGRAM_FDS {
            held[null as usize] = true;
        }
        loop {
            // SAFETY: dup of our own fd onto the lowest free number (close-on-exec).
            let n = unsafe { madfs_hookabi::raw!(libc::SYS_fcntl, null, libc::F_DUPFD_CLOEXEC, 0) };
            if !(0..PROGRAM_FDS).contains(&n) {
                if n >= 0 {
                    // SAFETY: the dup just made.
                    unsafe { madfs_hookabi::raw!(libc::SYS_close, n) };
                }
                break;
            }
            held[n as usize] = true;
        }
    }
    let r = f();
    for (fd, h) in held.iter().enumerate() {
        if *h {
            // SAFETY: an fd we opened or duplicated above.
            unsafe { madfs_hookabi::raw!(libc::SYS_close, fd) };
        }
    }
    if null >= PROGRAM_FDS {
        // SAFETY: our own fd.
        unsafe { madfs_hookabi::raw!(libc::SYS_close, null) };
    }
    r
}

/// How a thread's client reaches the servers (`MADFS_TRANSPORT`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Transport {
    /// Plain TCP first, UCX once the thread has made [`ucx_after`] calls (the default).
    Auto,
    /// Plain TCP only (`tcp`).
    Tcp,
    /// UCX from the first call (`ucx`).
    Ucx,
}

fn transport() -> Transport {
    static T: OnceLock<Transport> = OnceLock::new();
    *T.get_or_init(|| match std::env::var("MADFS_TRANSPORT").as_deref() {
        Ok("tcp") => Transport::Tcp,
        Ok("ucx") => Transport::Ucx,
        _ => Transport::Auto,
    })
}

/// Calls a thread makes over plain TCP before it starts UCX (`MADFS_UCX_AFTER`, default
/// 256). Starting UCX costs a process ≈ 20 ms (transport libraries, shared-memory segments
/// zero-filled, clock calibration: `cat` of a madfs file took 23 ms against 2 ms over TCP);
/// a call over TCP costs ≈ 80 µs more than over UCX's shared memory. After 256 calls the
/// TCP surcharge has reached about the price of starting UCX, so a program never pays more
/// than about twice the better choice, and a short one (`cat`, `cp`, `stat`, a shell's
/// redirection) never starts UCX at all.
fn ucx_after() -> u32 {
    static N: OnceLock<u32> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("MADFS_UCX_AFTER")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256)
    })
}

/// UCX could not be started in this process: its clients stay on TCP.
static UCX_FAILED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Calls this thread made over TCP (in [`Transport::Auto`]).
    static TCP_CALLS: Cell<u32> = const { Cell::new(0) };
}

/// Should this thread's TCP client give way to a UCX one now? Counts the call.
fn ucx_due() -> bool {
    if transport() != Transport::Auto || TCP_ONLY.load(Acquire) || UCX_FAILED.load(Acquire) {
        return false;
    }
    let n = TCP_CALLS.with(|c| {
        let n = c.get().saturating_add(1);
        c.set(n);
        n
    });
    n > ucx_after()
}

/// A client for this thread: over UCX, or plain TCP where UCX cannot be used (a `fork` child
/// of a process running UCX), is not wanted (`MADFS_TRANSPORT=tcp`) or not wanted yet
/// ([`ucx_after`]).
fn new_client() -> FsResult<Rc<Client>> {
    if TCP_ONLY.load(Acquire) {
        return make_client(true);
    }
    match transport() {
        Transport::Tcp => make_client(true),
        Transport::Ucx => make_client(false),
        Transport::Auto if ucx_after() == 0 && !UCX_FAILED.load(Acquire) => make_client(false),
        // no TCP port in the cluster file, say: UCX it is
        Transport::Auto => make_client(true).or_else(|_| make_client(false)),
    }
}

fn make_client(tcp: bool) -> FsResult<Rc<Client>> {
    if FINISHED.load(Acquire) {
        return Err(Errno::EIO);
    }
    let cfg = config()?;
    static LOGGING: std::sync::Once = std::sync::Once::new();
    LOGGING.call_once(madfs_client::init_preload_logging);
    // The placeholder template sits at a high fd number; putting it there grows the kernel's
    // fd table, which waits for an RCU grace period (7-17 ms here) once the process has
    // threads, and UCX starts some: make it first, while a single-threaded program still
    // has one thread (the first open of a `cat` or `cp` took 10-20 ms).
    crate::fdtable::prepare();
    let connected = |c: Client| {
        // every connection now, while the program's fd numbers are held (a later one, made
        // on first use, might take a free low number)
        if c.servers() <= CONNECT_AT_ONCE {
            let _ = c.connect_all();
        }
        c
    };
    let made = with_program_fds_held(|| {
        if tcp {
            Client::new_tcp(cfg).map(connected)
        } else {
            // UCX's constructor installs crash handlers: the program's own must stay
            crate::interpose::keeping_signal_state(|| {
                Client::with_context(context(GEN.load(Acquire))?, cfg).map(connected)
            })
        }
    });
    made.map(Rc::new).map_err(|e| {
        if crate::entry::TRACE.load(Relaxed) {
            let msg = format!("[madfs] client: {e}\n");
            // SAFETY: plain write to stderr.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        }
        Errno::EIO
    })
}

/// When this process last renewed its open references (ms since the epoch).
static RENEWED: AtomicU64 = AtomicU64::new(0);

/// Renews this process's open references when [`madfs_proto::HOLD_EVERY_MS`] passed since
/// the last renewal (and tells the closes queued), on the way of an ordinary call: the files'
/// home servers keep what it holds while it is active, and drop it once it is gone
/// (docs/consistency.md, "Open files"). No thread of its own: a thread would make every
/// program multi-threaded, and `fork` then runs with malloc's locks held.
fn renew_if_due(c: &Client) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let last = RENEWED.load(Relaxed);
    if now.saturating_sub(last) < madfs_proto::HOLD_EVERY_MS
        || in_vfork_child()
        || RENEWED
            .compare_exchange(last, now, AcqRel, Relaxed)
            .is_err()
    {
        return;
    }
    if madfs_client::hold::any() {
        // a server missed now has the next renewal (the lease is many renewals long)
        let _ = c.renew_holds();
    }
}

/// Runs `f` with this thread's client.
pub fn with<R>(f: impl FnOnce(&Client) -> FsResult<R>) -> FsResult<R> {
    let gen = GEN.load(Acquire);
    let c = CLIENT.try_with(|slot| -> FsResult<Rc<Client>> {
        let mut s = slot.borrow_mut();
        if let Some((g, c)) = &s.0 {
            if *g == gen {
                if !(c.transport().is_tcp() && ucx_due()) {
                    return Ok(c.clone());
                }
                // enough calls made over TCP: UCX for this thread from now on (the open
                // files' state lives in their descriptions, not in the client)
                match make_client(false) {
                    Ok(u) => {
                        if crate::entry::TRACE.load(Relaxed) {
                            let msg = "[madfs] client: UCX from now on\n";
                            // SAFETY: plain write to stderr.
                            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
                        }
                        s.0 = Some((gen, u.clone()));
                        return Ok(u);
                    }
                    Err(_) => {
                        UCX_FAILED.store(true, Release);
                        return Ok(c.clone());
                    }
                }
            }
        }
        if in_vfork_child() {
            // a client made here would keep its sockets and event fds in the child's fd table
            // only, and its memory in the parent's: the parent would find a client whose fds
            // are gone (or someone else's) once the child execs
            return Err(Errno::ENOTSUP);
        }
        if let Some(old) = s.0.take() {
            // the parent's UCX worker: must not be destroyed (or used) in this process
            std::mem::forget(old);
        }
        let c = new_client()?;
        s.0 = Some((gen, c.clone()));
        let _ = FLUSHER.try_with(|_| {});
        if madfs_client::hold::unannounced() {
            // a fork child, or an image exec'd with open descriptions: the files' home
            // servers learn that this process holds them too
            c.flush_releases_quietly();
        }
        Ok(c)
    });
    match c {
        Ok(c) => {
            let c = c?;
            renew_if_due(&c);
            f(&c)
        }
        // thread-local storage already torn down (process exit): a temporary client
        Err(_) => f(&*new_client()?),
    }
}
