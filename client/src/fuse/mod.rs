//! The FUSE front door (`madfs-fuse`): the madfs namespace mounted through the kernel, for
//! every program the preload cannot reach (static binaries, raw system calls, io_uring,
//! containers). Request path: the kernel → a `fuser` event-loop thread → [`ops`] (one
//! [`FileSystem`](crate::FileSystem) call of that thread's [`Client`]) → the servers.
//!
//! * [`nodes`]: the kernel's node ids (madfs file ids) and the paths they stand for;
//! * [`ops`]: `fuser::Filesystem` on the client library;
//! * [`kernel`]: what the kernel may keep, and the callbacks that make it forget;
//! * here: settings, who the requests are made as, mounting, signals, unmounting.
//!
//! Identity: run by a user, every request is that user's (the cluster file's credentials:
//! key, MUNGE or none), and only that user may use the mount (FUSE's default). Run by root
//! with [`Settings::all_users`], the mount serves everyone (`allow_other`), the kernel checks
//! modes against each caller's real groups (`default_permissions`), and each caller's requests
//! go over a connection of the trusted-proxy role (docs/security.md) stating that caller's uid
//! and gid, proved with the peer key (or root's MUNGE credential).

mod kernel;
mod nodes;
mod ops;

use crate::{Client, ClientConfig};
use madfs_rpc::Credentials;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

pub use nodes::Nodes;

/// How the mount behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Event-loop threads (each with its own `/dev/fuse` descriptor and its own clients).
    pub threads: usize,
    /// How long the kernel may keep a file's attributes (size, mode, times) that the client
    /// library does not keep under a lease (its cache off, `MADFS_CACHE=0`, or the answer
    /// to this mount's own change). 0 (default): it asks again, so a file written on
    /// another node is seen whole after its writer closed it (docs/consistency.md). What
    /// the library keeps under a lease the kernel keeps as long, coherently (`kernel`).
    pub attr_timeout: Duration,
    /// The same for names (and absences) the library does not keep.
    pub entry_timeout: Duration,
    /// Serve every user (root only): see the module documentation.
    pub all_users: bool,
    /// Honour set-user-ID and set-group-ID bits of programs run from the mount (`suid`).
    /// Off by default, as for the mounts of any file system whose files other users and
    /// other nodes write: `nosuid`.
    pub suid: bool,
    /// Largest read and write request the kernel sends (bytes).
    pub max_io: u32,
    /// Keep file data in the kernel's page cache while a file is open (dropped at each
    /// open). Off (default): reads and writes go straight to the servers, as through the
    /// preload, where the kernel can still map such files (Linux 6.6 and later:
    /// `FUSE_DIRECT_IO_ALLOW_MMAP`); older kernels always get the page cache, so that
    /// programs stored on the mount can run.
    pub page_cache: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            threads: 4,
            attr_timeout: Duration::ZERO,
            entry_timeout: Duration::ZERO,
            all_users: false,
            suid: false,
            max_io: 1 << 20,
            page_cache: false,
        }
    }
}

/// Whom a request is made as: the mounting user's own credentials, or (all-users mode) the
/// caller's uid and gid through the proxy role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Who {
    Owner,
    User(u32, u32),
}

/// Makes the clients: one per event-loop thread and user served.
#[derive(Debug, Clone)]
pub(crate) struct Clients {
    config: ClientConfig,
    /// All-users mode: the proxy's credentials (uid and gid set per user served).
    proxy: Option<Credentials>,
}

thread_local! {
    /// This thread's clients, by whom they serve (a `Client` is bound to its thread).
    static CLIENTS: RefCell<Vec<(Who, Rc<Client>)>> = const { RefCell::new(Vec::new()) };
}

impl Clients {
    fn new(config: ClientConfig, all_users: bool) -> std::io::Result<Clients> {
        let proxy = if all_users {
            let file = config.cluster_file.clone().unwrap_or_default();
            let key = |key| Credentials::Proxy {
                key,
                uid: 0,
                gid: 0,
            };
            match Credentials::peer(&file) {
                Ok(Credentials::Peer(k)) => Some(key(Some(k))),
                // root's MUNGE credential proves the role on a MUNGE cluster
                _ if config.identity.auth == madfs_identity::AuthMode::Munge => Some(key(None)),
                r => {
                    let why = r
                        .err()
                        .map_or_else(|| "not a peer key".into(), |e| e.to_string());
                    return Err(std::io::Error::other(format!(
                        "serving every user needs the cluster's peer key ({}.peer-key): {why}",
                        file.display()
                    )));
                }
            }
        } else {
            None
        };
        Ok(Clients { config, proxy })
    }

    /// This thread's client for `who`, made at its first use.
    pub(crate) fn get(&self, who: Who) -> Result<Rc<Client>, madfs_proto::Errno> {
        if let Some(c) = CLIENTS.with(|c| {
            c.borrow()
                .iter()
                .find(|(w, _)| *w == who)
                .map(|(_, c)| c.clone())
        }) {
            return Ok(c);
        }
        let mut cfg = self.config.clone();
        if let (Who::User(uid, gid), Some(Credentials::Proxy { key, .. })) = (who, &self.proxy) {
            cfg.credentials = Credentials::Proxy {
                key: key.clone(),
                uid,
                gid,
            };
        }
        let c = Rc::new(Client::new(&cfg).map_err(|e| {
            tracing::warn!("madfs-fuse: no connection for {who:?}: {e}");
            madfs_proto::Errno::from_io(&e)
        })?);
        // the kernel forgets what the servers call back too
        c.call_back_with(kernel::on_callback, false);
        CLIENTS.with(|all| all.borrow_mut().push((who, c.clone())));
        Ok(c)
    }
}

/// Mounts the cluster of `config` at `mountpoint` and serves it until it is unmounted
/// (`madfs-fuse --unmount`, `fusermount3 -u`, `umount`) or the process gets SIGTERM, SIGINT
/// or SIGHUP (then it unmounts itself).
pub fn serve(mountpoint: &Path, config: ClientConfig, s: &Settings) -> std::io::Result<()> {
    // the signals go to one thread, which unmounts; every thread made from here on inherits
    // the mask
    let signals = signals::block()?;
    let clients = Clients::new(config, s.all_users)?;
    let root = clients
        .get(Who::Owner)
        .and_then(|c| c.stat_normalized("/"))
        .map_err(|e| std::io::Error::other(format!("cluster unreachable: {e}")))?;
    let nodes = std::sync::Arc::new(Nodes::new(root.id));
    let fs = ops::MadFs::new(clients.clone(), nodes.clone(), s.clone());
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("madfs".into()),
        fuser::MountOption::Subtype("madfs".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoAtime,
    ];
    if s.all_users {
        config.acl = fuser::SessionACL::All;
        config
            .mount_options
            .push(fuser::MountOption::DefaultPermissions);
    }
    // set-id programs run from the mount only where the site asks for it
    config.mount_options.push(if s.suid {
        fuser::MountOption::Suid
    } else {
        fuser::MountOption::NoSuid
    });
    config.n_threads = Some(s.threads.max(1));
    config.clone_fd = s.threads > 1;
    let mut session = fuser::Session::new(fs, mountpoint, &config)?;
    kernel::start(session.notifier(), nodes, clients)?;
    let mut unmounter = session.unmount_callable();
    let at = mountpoint.to_owned();
    std::thread::Builder::new()
        .name("madfs-fuse-signals".into())
        .spawn(move || {
            let sig = signals::wait(&signals);
            tracing::info!("madfs-fuse: signal {sig}: unmounting {}", at.display());
            if let Err(e) = unmounter.unmount() {
                // in use: detached now, served until its last user lets go
                tracing::warn!(
                    "madfs-fuse: {}: {e}; detaching it (lazy unmount)",
                    at.display()
                );
                if let Err(e) = lazy_unmount(&at) {
                    tracing::warn!("madfs-fuse: lazy unmount of {}: {e}", at.display());
                }
            }
        })?;
    tracing::info!("madfs-fuse: serving {}", mountpoint.display());
    session.run()
}

/// Unmounts the madfs FUSE mount at `mountpoint` (`fusermount3 -u`, which lets a user
/// unmount their own mount; `umount2` where fusermount3 is missing).
pub fn unmount(mountpoint: &Path) -> std::io::Result<()> {
    match std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(mountpoint)
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(std::io::Error::other(format!(
            "fusermount3 -u {}: {s}",
            mountpoint.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => signals::umount(mountpoint, 0),
        Err(e) => Err(e),
    }
}

/// `umount2(MNT_DETACH)` as root, `fusermount3 -u -z` otherwise.
fn lazy_unmount(mountpoint: &Path) -> std::io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return signals::umount(mountpoint, libc::MNT_DETACH);
    }
    let s = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(mountpoint)
        .status()?;
    if s.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("fusermount3 -u -z: {s}")))
    }
}

/// SIGTERM, SIGINT and SIGHUP taken by one thread.
mod signals {
    use std::path::Path;

    /// The signals [`block`] blocks.
    pub struct Set(libc::sigset_t);

    /// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and the threads it makes).
    pub fn block() -> std::io::Result<Set> {
        // SAFETY: sigset_t is plain data, set up by sigemptyset/sigaddset before use;
        // pthread_sigmask only changes this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::sigaddset(&mut set, s);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            Ok(Set(set))
        }
    }

    /// Waits for one of the signals of `set` (blocked in every thread); returns it.
    pub fn wait(set: &Set) -> i32 {
        let mut sig = 0;
        loop {
            // SAFETY: `set` is an initialised sigset_t, `sig` a valid out pointer.
            if unsafe { libc::sigwait(&set.0, &mut sig) } == 0 {
                return sig;
            }
        }
    }

    /// `umount2(path, flags)`.
    pub fn umount(path: &Path, flags: i32) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}
