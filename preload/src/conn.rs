//! The client of the calling thread, created on first use (a process that never touches the
//! mount never connects). After `fork` the child never touches the parent's UCX state: the
//! fork generation changes and the inherited client is leaked, not destroyed, and a new one is
//! made on first use.

use madfs_client::{Client, ClientConfig};
use madfs_proto::{Errno, FsResult};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};
use std::sync::OnceLock;

static GEN: AtomicU64 = AtomicU64::new(0);
static MY_PID: AtomicI32 = AtomicI32::new(0);
static CONFIG: OnceLock<Result<ClientConfig, String>> = OnceLock::new();
static WARNED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static CLIENT: RefCell<Option<(u64, Rc<Client>)>> = const { RefCell::new(None) };
}

/// Called at load time and in the child after `fork`.
pub fn set_pid() {
    // SAFETY: getpid has no preconditions.
    MY_PID.store(unsafe { libc::getpid() }, Release);
}

/// `pthread_atfork` child handler: new process, new clients.
pub extern "C" fn after_fork_child() {
    GEN.fetch_add(1, AcqRel);
    set_pid();
}

/// Are we a `vfork`/`posix_spawn` child sharing the parent's memory? Then nothing shared may
/// be changed and no network state may be used.
pub fn in_vfork_child() -> bool {
    // SAFETY: raw getpid (glibc caches nothing since 2.25).
    unsafe { libc::getpid() != MY_PID.load(Acquire) }
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

fn new_client() -> FsResult<Rc<Client>> {
    let cfg = config()?;
    Client::new(cfg).map(Rc::new).map_err(|_| Errno::EIO)
}

/// Runs `f` with this thread's client.
pub fn with<R>(f: impl FnOnce(&Client) -> FsResult<R>) -> FsResult<R> {
    let gen = GEN.load(Acquire);
    let c = CLIENT.try_with(|slot| -> FsResult<Rc<Client>> {
        let mut s = slot.borrow_mut();
        if let Some((g, c)) = &*s {
            if *g == gen {
                return Ok(c.clone());
            }
        }
        if let Some(old) = s.take() {
            // the parent's UCX worker: must not be destroyed (or used) in this process
            std::mem::forget(old);
        }
        let c = new_client()?;
        *s = Some((gen, c.clone()));
        Ok(c)
    });
    match c {
        Ok(c) => f(&*c?),
        // thread-local storage already torn down (process exit): a temporary client
        Err(_) => f(&*new_client()?),
    }
}
