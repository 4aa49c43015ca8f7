//! What the kernel keeps (docs/consistency.md, "The client cache", FUSE): names, absences
//! and attributes for as long as the client library keeps them under a server's lease
//! ([`ttl`]), forgotten when the server calls the lease back ([`on_callback`]): the
//! callback is acknowledged once the kernel was told (`FUSE_NOTIFY_INVAL_ENTRY`,
//! `FUSE_NOTIFY_INVAL_INODE`).
//!
//! The callbacks are taken by a thread of their own ([`start`]), whose connections ask the
//! servers for every callback of this process: a kernel notice waits for its directory's
//! lock, which a request being served on an event-loop thread may hold while it waits for a
//! server, so the event-loop threads never send one. A callback that reaches an event-loop
//! thread all the same (the listening connection lost and not made again yet) is queued for
//! the listening thread, and its acknowledgement does not wait for the kernel; the kernel's
//! copy still ends before the lease does ([`ttl`]).

use super::nodes::Nodes;
use super::{Clients, Who};
use crate::Client;
use fuser::INodeNo;
use madfs_proto::Callback;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The mount's kernel side: where notices go, and the nodes they name.
struct Kernel {
    notifier: fuser::Notifier,
    nodes: Arc<Nodes>,
}

/// What the kernel must forget.
#[derive(Debug, PartialEq, Eq)]
enum Notice {
    /// The name `name` in directory node `parent` (an entry or an absence).
    Entry { parent: u64, name: String },
    /// The attributes of node `node`.
    Inode(u64),
}

static KERNEL: OnceLock<Kernel> = OnceLock::new();
/// Notices of callbacks an event-loop thread took, for the listening thread to send.
static QUEUED: Mutex<Vec<Notice>> = Mutex::new(Vec::new());
/// Absences the kernel keeps (path → the end of their lease): a callback of every lease
/// (`Callback::all`) names none of them.
static ABSENT: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);
/// Most absences remembered (then the expired ones go, and if none has, the kernel is not
/// given more until some have).
const ABSENT_MAX: usize = 1 << 16;

thread_local! {
    /// This thread takes the callbacks ([`start`]): it may send kernel notices.
    static LISTENER: Cell<bool> = const { Cell::new(false) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long the kernel may keep an answer the client library keeps until `until`: a little
/// less than what is left of the lease (the kernel counts from when it reads the reply), so
/// that its copy is gone before a server that could not reach this process stops waiting.
pub(crate) fn ttl(until: Option<Instant>) -> Duration {
    let Some(u) = until else {
        return Duration::ZERO;
    };
    let left = u.saturating_duration_since(Instant::now());
    (left - left / 8).saturating_sub(Duration::from_millis(1))
}

/// May the kernel keep the absence of `path` until `until` (its lease)? Remembers it, so
/// that a callback of every lease reaches it too.
pub(crate) fn keep_absence(path: &str, until: Instant) -> bool {
    if KERNEL.get().is_none() {
        return false;
    }
    let mut g = lock(&ABSENT);
    let m = g.get_or_insert_with(HashMap::new);
    if m.len() >= ABSENT_MAX {
        let now = Instant::now();
        m.retain(|_, u| *u > now);
        if m.len() >= ABSENT_MAX {
            return false;
        }
    }
    m.insert(path.to_owned(), until);
    true
}

/// The callback handler of every client of the mount (`madfs_rpc::callbacks::Handler`):
/// the library forgets what `cb` names, and the kernel is told — now on the listening
/// thread, else by it soon.
pub(crate) fn on_callback(cluster: u64, cb: &Callback<'_>) {
    crate::cache::on_callback(cluster, cb);
    let Some(k) = KERNEL.get() else {
        return;
    };
    let notices = k.notices(cb);
    if LISTENER.with(|l| l.get()) {
        k.send(notices);
    } else {
        lock(&QUEUED).extend(notices);
    }
}

impl Kernel {
    /// What the kernel must forget for callback `cb`.
    fn notices(&self, cb: &Callback<'_>) -> Vec<Notice> {
        let mut out = Vec::new();
        let entry = |out: &mut Vec<Notice>, path: &str| {
            if let Some((dir, name)) = madfs_placement::split_parent(path) {
                if let Some(parent) = self.nodes.node_at(dir) {
                    out.push(Notice::Entry {
                        parent,
                        name: name.to_owned(),
                    });
                }
            }
        };
        if cb.all {
            for (path, node) in self.nodes.all() {
                entry(&mut out, &path);
                out.push(Notice::Inode(node));
            }
            let absent = lock(&ABSENT).take().unwrap_or_default();
            for path in absent.keys() {
                entry(&mut out, path);
            }
            return out;
        }
        for p in &cb.paths {
            match p.strip_suffix('/').filter(|d| !d.is_empty()) {
                // a statahead page: every entry of the directory the kernel holds
                Some(dir) => {
                    let Some(parent) = self.nodes.node_at(dir) else {
                        continue;
                    };
                    for (name, node) in self.nodes.children(dir) {
                        out.push(Notice::Entry { parent, name });
                        out.push(Notice::Inode(node));
                    }
                }
                None => {
                    entry(&mut out, p);
                    if let Some(node) = self.nodes.node_at(p) {
                        out.push(Notice::Inode(node));
                    }
                    if let Some(m) = lock(&ABSENT).as_mut() {
                        m.remove(*p);
                    }
                }
            }
        }
        // attributes only: names stay (and so do the leases on them); the attributes that
        // came with the lease go — for a page, those of every entry of the directory (the
        // server calls back a lease's attributes once, until they are asked for again)
        for p in &cb.attrs {
            match p.strip_suffix('/').filter(|d| !d.is_empty()) {
                Some(dir) => out.extend(
                    self.nodes
                        .children(dir)
                        .into_iter()
                        .map(|(_, node)| Notice::Inode(node)),
                ),
                None => out.extend(self.nodes.node_at(p).map(Notice::Inode)),
            }
        }
        out
    }

    fn send(&self, notices: Vec<Notice>) {
        for n in notices {
            let r = match &n {
                Notice::Entry { parent, name } => self
                    .notifier
                    .inval_entry(INodeNo(*parent), OsStr::new(name)),
                // attributes only (offset < 0: the page cache is left alone)
                Notice::Inode(node) => self.notifier.inval_inode(INodeNo(*node), -1, 0),
            };
            if let Err(e) = r {
                tracing::debug!("madfs-fuse: kernel notice {n:?}: {e}");
            }
        }
    }
}

/// Starts the thread that takes this mount's callbacks and tells the kernel, when the
/// client cache is on (`MADFS_CACHE`).
pub(crate) fn start(
    notifier: fuser::Notifier,
    nodes: Arc<Nodes>,
    clients: Clients,
) -> std::io::Result<()> {
    if !crate::cache::enabled() {
        return Ok(());
    }
    if KERNEL.set(Kernel { notifier, nodes }).is_err() {
        return Err(std::io::Error::other("one mount per process"));
    }
    std::thread::Builder::new()
        .name("madfs-fuse-callbacks".into())
        .spawn(move || listen(&clients))
        .map(drop)
}

/// The listening thread: its client's connections take every callback of the process;
/// each server hears from it at least every quarter lease (a server closes a connection
/// silent for a lease).
fn listen(clients: &Clients) {
    LISTENER.with(|l| l.set(true));
    let mut client: Option<Rc<Client>> = None;
    let mut pinged: Option<Instant> = None;
    loop {
        let pace = crate::cache::shortest_lease()
            .map_or(Duration::from_millis(250), |l| l / 4)
            .clamp(Duration::from_millis(5), Duration::from_millis(250));
        let c = match &client {
            Some(c) => c.clone(),
            None => match clients.get(Who::Owner) {
                Ok(c) => {
                    c.call_back_with(on_callback, true);
                    client = Some(c.clone());
                    c
                }
                Err(e) => {
                    tracing::warn!("madfs-fuse: callbacks: no connection: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            },
        };
        if pinged.is_none_or(|t| t.elapsed() >= pace) {
            match c.connect_all() {
                Ok(servers) => {
                    for s in servers {
                        if let Err(e) = c.ping(s) {
                            tracing::debug!("madfs-fuse: callbacks: server {s}: {e}");
                        }
                    }
                }
                Err(e) => tracing::debug!("madfs-fuse: callbacks: {e}"),
            }
            pinged = Some(Instant::now());
        }
        c.wait_callbacks(pace);
        let queued = std::mem::take(&mut *lock(&QUEUED));
        if let Some(k) = KERNEL.get().filter(|_| !queued.is_empty()) {
            k.send(queued);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_keeps_less_than_the_lease() {
        assert_eq!(ttl(None), Duration::ZERO);
        let t = ttl(Some(Instant::now() + Duration::from_millis(800)));
        assert!(t < Duration::from_millis(700) && t > Duration::from_millis(600));
        assert_eq!(ttl(Some(Instant::now())), Duration::ZERO);
    }
}
