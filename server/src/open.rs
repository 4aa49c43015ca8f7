//! Open files (docs/consistency.md, "Open files"): a file outlives its names while any
//! process anywhere holds it open.
//!
//! * A file's **home server** ([`madfs_placement::home_server`], the server that made its id)
//!   keeps its chunk 0 and counts its **open references**: per client process (a random number
//!   the process chose, [`Request::Hold`]), how many of its open descriptions name the file.
//!   An open or create served by the home server counts one itself (the request names its
//!   `holder`); a client opening a file whose entry lives elsewhere (it was renamed across
//!   servers) tells the home server with a `Hold`. Closes are told lazily, in batches.
//! * References are leased: a client process renews them with a `Hold` every ten seconds
//!   while it makes calls; one silent for the lease ([`LEASE`], `--open-lease-ms`: crashed,
//!   cut off, or idle that long) loses them, so a crashed client's space comes back.
//! * Removing the last name of a file (unlink, or a rename over it) asks its home server to
//!   **forget** it: a referenced file becomes an **orphan** (an `O<id>` record with its
//!   attributes, nlink 0: its data stays, its name is free at once); an unreferenced one has
//!   its bytes dropped on every server. The sweeper drops an orphan once nobody holds it.
//! * Descriptors name their file by path *and* id: a publication whose path no longer names
//!   the id is refused (ESTALE) and the client asks the home server [`Request::Where`] the
//!   file is now: the path a rename moved it to (renames tell the home server, [`Ops::moved`]),
//!   or its orphan record.
//! * After a restart, references are known again from the clients' next `Hold`s: orphans are
//!   kept for one lease before the sweeper may drop them.

use crate::ops::{now_ns, Answer, Ops};
use crate::store::{ChunkStore, MetadataStore};
use madfs_placement::home_server;
use madfs_proto::{Attr, Errno, FsResult, Request};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a client process's references last without renewal (an active client renews
/// every [`madfs_proto::HOLD_EVERY_MS`], on the way of its calls; one silent this long is
/// taken for gone).
pub const LEASE: Duration = Duration::from_secs(600);

/// Name locks: an open's lookup and its reference, and a removal of the name and its check
/// for references, exclude each other.
const NAME_LOCKS: usize = 64;

#[derive(Default)]
struct Holder {
    until: Option<Instant>,
    /// File id → open descriptions of this client naming it.
    ids: HashMap<u64, u32>,
}

#[derive(Default)]
pub(crate) struct Inner {
    clients: HashMap<u64, Holder>,
    /// File id → references over all clients.
    count: HashMap<u64, u64>,
    /// File id → the path a rename moved it to (only while referenced).
    moved: HashMap<u64, String>,
}

impl Inner {
    fn add(&mut self, client: u64, id: u64, until: Instant) {
        let h = self.clients.entry(client).or_default();
        h.until = Some(until);
        *h.ids.entry(id).or_insert(0) += 1;
        *self.count.entry(id).or_insert(0) += 1;
    }

    fn release(&mut self, client: u64, id: u64) {
        let Some(h) = self.clients.get_mut(&client) else {
            return;
        };
        let Some(n) = h.ids.get_mut(&id) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            h.ids.remove(&id);
        }
        self.dec(id, 1);
    }

    fn dec(&mut self, id: u64, by: u64) {
        if let Some(c) = self.count.get_mut(&id) {
            *c = c.saturating_sub(by);
            if *c == 0 {
                self.count.remove(&id);
                self.moved.remove(&id);
            }
        }
    }
}

/// What must be sent to other servers, by the open-files thread.
enum Errand {
    /// `Forget` to a file's home server.
    Forget(u32, Attr),
    /// The bytes of a dropped file on every other server.
    Drop(Attr),
}

/// The open references of the files whose home this server is, and the errands of removals.
pub struct OpenRefs {
    inner: Mutex<Inner>,
    names: [Mutex<()>; NAME_LOCKS],
    lease: Duration,
    started: Instant,
    /// When this server started, ns since the epoch: orphans made before it wait for their
    /// holders to come back for one lease.
    started_ns: i64,
    errands: Mutex<Vec<Errand>>,
    wake: Condvar,
}

impl OpenRefs {
    /// References lasting `lease` without renewal.
    pub fn new(lease: Duration) -> Self {
        OpenRefs {
            inner: Mutex::default(),
            names: std::array::from_fn(|_| Mutex::new(())),
            lease,
            started: Instant::now(),
            started_ns: now_ns(),
            errands: Mutex::default(),
            wake: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock of name `path` (see [`NAME_LOCKS`]).
    pub fn name_lock(&self, path: &str) -> MutexGuard<'_, ()> {
        let h = madfs_placement::hash64(path.as_bytes(), 7) as usize;
        self.names[h % NAME_LOCKS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// One more open of `id` by `client`.
    pub fn add(&self, client: u64, id: u64) {
        let until = Instant::now() + self.lease;
        self.lock().add(client, id, until);
    }

    /// A client's `Hold` (`gone`: the client is exiting).
    pub fn hold(&self, client: u64, add: &[u64], release: &[u64], held: &[u64], gone: bool) {
        let until = Instant::now() + self.lease;
        let mut g = self.lock();
        if gone {
            if let Some(h) = g.clients.remove(&client) {
                for (id, n) in h.ids {
                    g.dec(id, n as u64);
                }
            }
            return;
        }
        if g.clients.contains_key(&client) {
            for id in add {
                g.add(client, *id, until);
            }
            for id in release {
                g.release(client, *id);
            }
        } else {
            // unknown here (this server restarted, or the lease ran out): `held` is all of it
            for id in held {
                g.add(client, *id, until);
            }
        }
        if let Some(h) = g.clients.get_mut(&client) {
            h.until = Some(until);
            if h.ids.is_empty() {
                g.clients.remove(&client);
            }
        }
    }

    /// Is `id` open anywhere?
    pub fn held(&self, id: u64) -> bool {
        self.lock().count.contains_key(&id)
    }

    /// Does `client` hold `id` open?
    pub fn holds(&self, client: u64, id: u64) -> bool {
        self.lock()
            .clients
            .get(&client)
            .is_some_and(|h| h.ids.contains_key(&id))
    }

    /// Drops the references of clients whose lease ran out; returns how many clients.
    fn expire(&self, now: Instant) -> usize {
        let mut g = self.lock();
        let gone: Vec<u64> = g
            .clients
            .iter()
            .filter(|(_, h)| h.until.is_some_and(|u| u <= now))
            .map(|(c, _)| *c)
            .collect();
        for c in &gone {
            if let Some(h) = g.clients.remove(c) {
                for (id, n) in h.ids {
                    g.dec(id, n as u64);
                }
            }
        }
        gone.len()
    }

    /// Is orphan `a` one the last run left, within the first lease after this server started
    /// (kept: its holders have not renewed here yet)?
    fn in_grace(&self, a: &Attr) -> bool {
        a.ctime < self.started_ns && self.started.elapsed() < self.lease
    }

    fn errand(&self, e: Errand) {
        self.errands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e);
        self.wake.notify_one();
    }
}

/// The orphan record of file `a`, whose last name is going now.
fn orphan_of(a: &Attr) -> Attr {
    Attr {
        nlink: 0,
        ctime: now_ns(),
        ..*a
    }
}

impl Ops {
    /// `id` was opened by `holder` through this server: counted here if this is its home
    /// (the client tells the home server itself otherwise).
    pub(crate) fn opened(&self, holder: u64, a: &Attr) {
        if holder != 0 && a.is_file() && self.is_home(a.id) {
            self.opens.add(holder, a.id);
        }
    }

    fn is_home(&self, id: u64) -> bool {
        home_server(id, self.peers.servers()) == self.here()
    }

    /// The last name of file `a` is gone (this server removed it): its home server keeps it
    /// as an orphan while it is open, else drops its bytes. Another server's file is told to
    /// it by the open-files thread.
    pub(crate) fn forget(&self, a: &Attr) -> FsResult<()> {
        if a.is_dir() {
            return Ok(());
        }
        let home = home_server(a.id, self.peers.servers());
        if home != self.here() {
            self.opens.errand(Errand::Forget(home, *a));
            return Ok(());
        }
        self.forget_here(a).map(drop)
    }

    /// `Unlink` of file `a` at `path` (the caller holds the name's lock): the entry goes, and
    /// the file is forgotten in the same write when this is its home.
    pub(crate) fn unlink_file(&self, path: &str, a: &Attr) -> FsResult<()> {
        if !a.is_file() || !self.is_home(a.id) {
            self.meta.remove_entry(path)?;
            return self.forget(a);
        }
        let g = self.opens.lock();
        if g.count.contains_key(&a.id) {
            return self.meta.remove(path, a.id, Some(&orphan_of(a)));
        }
        drop(g);
        self.meta.remove(path, a.id, None)?;
        self.drop_chunks(a)
    }

    /// [`Ops::forget`] on the home server; `Ok(true)`: kept as an orphan.
    pub(crate) fn forget_here(&self, a: &Attr) -> FsResult<bool> {
        if crate::store::is_stub(a) {
            // one name of several: the home server counts one fewer
            return self
                .linked_here(a.id, madfs_proto::LinkOp::Drop)
                .map(|b| b.nlink == 0);
        }
        {
            let g = self.opens.lock();
            if g.count.contains_key(&a.id) {
                self.meta.put_orphan(a.id, Some(&orphan_of(a)))?;
                return Ok(true);
            }
        }
        self.drop_file(a)?;
        Ok(false)
    }

    /// Drops every byte of file `a`: chunk 0 here (its home) now, the other chunks on their
    /// servers by the open-files thread.
    fn drop_file(&self, a: &Attr) -> FsResult<()> {
        self.meta.put_orphan(a.id, None)?;
        self.drop_chunks(a)
    }

    /// The chunk files of file `a`: here now, on the other servers by the open-files thread.
    fn drop_chunks(&self, a: &Attr) -> FsResult<()> {
        self.chunks.truncate(a.id, 0)?;
        if a.size > a.chunk_size as u64 {
            self.opens.errand(Errand::Drop(*a));
        }
        Ok(())
    }

    /// A rename moved file `id` to `to`: its home server learns where descriptors find it.
    pub(crate) fn moved(&self, id: u64, to: &str) {
        let home = home_server(id, self.peers.servers());
        if home == self.here() {
            self.note_moved(id, to);
        } else if let Err(e) = self.peers.call(home, &Request::Moved { id, to }, &[]) {
            tracing::warn!("rename of file {id:016x}: home server {home} not told ({e})");
        }
    }

    /// `Moved` at the home server.
    pub(crate) fn note_moved(&self, id: u64, to: &str) {
        let mut g = self.opens.lock();
        if g.count.contains_key(&id) {
            g.moved.insert(id, to.to_owned());
        }
    }

    /// `Where`: where client `client`'s open file `id` is now.
    pub(crate) fn where_is(&self, id: u64, client: u64) -> FsResult<Answer> {
        if !self.opens.holds(client, id) {
            return Err(Errno::ENOENT);
        }
        if let Some(a) = self.meta.orphan(id)? {
            return Ok(Answer::Attr(a));
        }
        if let Some(p) = self.opens.lock().moved.get(&id) {
            return Ok(Answer::Named(p.clone()));
        }
        // its name is being removed or moved right now: the home server hears of it at once
        Err(Errno::EAGAIN)
    }

    /// The orphan record of file `id` (this server's).
    pub(crate) fn orphan(&self, id: u64) -> FsResult<Option<Attr>> {
        self.meta.orphan(id)
    }

    /// One pass of the open-files thread: errands, expired leases, unreferenced orphans.
    fn sweep(&self) {
        let errands =
            std::mem::take(&mut *self.opens.errands.lock().unwrap_or_else(|e| e.into_inner()));
        let mut again = Vec::new();
        for e in errands {
            match e {
                Errand::Forget(home, a) => {
                    let req = Request::Forget { id: a.id, attr: a };
                    if let Err(e) = self.peers.call(home, &req, &[]) {
                        tracing::debug!("forget {:016x} on server {home}: {e}", a.id);
                        again.push(Errand::Forget(home, a));
                    }
                }
                Errand::Drop(a) => {
                    let req = Request::TruncateChunks {
                        id: a.id,
                        size: 0,
                        chunk_size: a.chunk_size,
                        cap: Default::default(),
                    };
                    for s in (0..self.peers.servers()).filter(|s| *s != self.here()) {
                        if let Err(e) = self.peers.call(s, &req, &[]) {
                            tracing::warn!("bytes of file {:016x} on server {s} left ({e})", a.id);
                        }
                    }
                }
            }
        }
        if !again.is_empty() {
            let mut q = self.opens.errands.lock().unwrap_or_else(|e| e.into_inner());
            q.extend(again);
        }
        let gone = self.opens.expire(Instant::now());
        if gone > 0 {
            tracing::info!("{gone} client(s) lost their open files (lease ran out)");
        }
        match self.meta.orphans() {
            Ok(v) => {
                for (id, a) in v {
                    // checked and dropped under the references' lock: a late `Hold` of the
                    // client that had it cannot bring it back half-dropped
                    let g = self.opens.lock();
                    // a file with several names keeps its record here while it has any
                    if a.nlink > 0 || g.count.contains_key(&id) || self.opens.in_grace(&a) {
                        continue;
                    }
                    if let Err(e) = self.drop_file(&a) {
                        tracing::warn!("orphan {id:016x}: {e}");
                    }
                    drop(g);
                }
            }
            Err(e) => tracing::warn!("orphans: {e}"),
        }
    }
}

/// Starts the open-files thread (errands at once, the sweep every second).
pub fn start(ops: Arc<Ops>, stop: Arc<std::sync::atomic::AtomicBool>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("madfs-opens".into())
        .spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                {
                    let q = ops.opens.errands.lock().unwrap_or_else(|e| e.into_inner());
                    if q.is_empty() {
                        let _ = ops
                            .opens
                            .wake
                            .wait_timeout(q, Duration::from_secs(1))
                            .unwrap_or_else(|e| e.into_inner());
                    }
                }
                crate::replica::forward::as_own_set(&ops, || ops.sweep());
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_count_per_client_and_expire() {
        let r = OpenRefs::new(Duration::from_secs(60));
        r.add(1, 10);
        r.hold(1, &[10], &[], &[10, 10], false);
        r.add(2, 10);
        r.hold(1, &[], &[10], &[], false);
        assert!(r.held(10));
        r.hold(2, &[], &[10], &[], false);
        assert!(r.held(10), "client 1 still has one");
        r.hold(1, &[], &[10], &[], false);
        assert!(!r.held(10));
        // an unknown client's hold adopts what it says it holds (after a restart)
        r.hold(3, &[], &[], &[11, 12], false);
        assert!(r.held(11) && r.held(12) && r.holds(3, 11) && !r.holds(1, 11));
        // a known client's list is not counted again
        r.hold(3, &[], &[], &[11, 12], false);
        r.hold(3, &[], &[11], &[], false);
        assert!(!r.held(11));
        assert_eq!(r.expire(Instant::now() + Duration::from_secs(61)), 1);
        assert!(!r.held(12));
        // a client that goes says so
        r.hold(5, &[6, 6], &[], &[6, 6], false);
        r.hold(5, &[], &[], &[], true);
        assert!(!r.held(6));
        // a release of something never held changes nothing
        r.hold(4, &[5], &[], &[5], false);
        r.hold(4, &[], &[99], &[5], false);
        assert!(!r.held(99));
    }
}
