//! Open files (docs/consistency.md, "Open files"): a file outlives its names while any
//! process anywhere holds it open.
//!
//! * A file's **home server** ([`madfs_placement::home_server`], the owner of the slot its id
//!   names: the slot of the name it was created under) keeps its chunk 0 and counts its **open references**: per client process (a random number
//!   the process chose, as the user whose connection named it: [`Request::Hold`]), how many
//!   of its open descriptions name the file (`crate::state::opens`).
//!   An open or create served by the home server counts one itself (the request names its
//!   `holder`); a client opening a file whose entry lives elsewhere (it was renamed across
//!   servers) tells the home server with a `Hold`. Closes are told lazily, in batches.
//! * References are leased: a client process renews them with a `Hold` every ten seconds
//!   while it makes calls; one silent for the lease (`--open-lease-ms`: crashed,
//!   cut off, or idle that long) loses them, so a crashed client's space comes back.
//! * Removing the last name of a file (unlink, or a rename over it) asks its home server to
//!   **forget** it: a referenced file becomes an **orphan** (an `O<id>` record with its
//!   attributes, nlink 0: its data stays, its name is free at once); an unreferenced one has
//!   its bytes dropped on every server. The sweeper drops an orphan once nobody holds it.
//! * Descriptors name their file by path *and* id: a publication whose path no longer names
//!   the id is refused (ESTALE) and the client asks the home server [`Request::Where`] the
//!   file is now: the path a rename moved it to (renames tell the home server, `Moved`),
//!   or its orphan record.
//! * After a restart, references are known again from the clients' next `Hold`s: orphans are
//!   kept for one lease before the sweeper may drop them.

use super::Call;
use crate::clock::now_ns;
use crate::server::{path_ok, Answer, Server};
use crate::state::opens::Errand;
use madfs_placement::home_server;
use madfs_proto::{Attr, Errno, FsResult, Request};
use madfs_store::{ChunkStore, MetadataStore};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The orphan record of file `a`, whose last name is going now.
fn orphan_of(a: &Attr) -> Attr {
    Attr {
        nlink: 0,
        ctime: now_ns(),
        ..*a
    }
}

impl Server {
    /// `id` was opened by `holder` of user `uid` through this server: counted here if this
    /// is its home (the client tells the home server itself otherwise).
    pub(crate) fn opened(&self, uid: u32, holder: u64, a: &Attr) -> FsResult<()> {
        if holder != 0 && a.is_file() && self.is_home(a.id) {
            self.opens.add((uid, holder), a.id)?;
        }
        Ok(())
    }

    fn is_home(&self, id: u64) -> bool {
        home_server(id, &self.peers.layout()) == self.here()
    }

    /// The last name of file `a` is gone (this server removed it): its home server keeps it
    /// as an orphan while it is open, else drops its bytes. Another server's file is told to
    /// it by the open-files thread.
    pub(crate) fn forget(&self, a: &Attr) -> FsResult<()> {
        if a.is_dir() {
            return Ok(());
        }
        let home = home_server(a.id, &self.peers.layout());
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
        if madfs_store::is_stub(a) {
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
        let home = home_server(id, &self.peers.layout());
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

    /// `Where`: where open file `id` of client `client` of user `uid` is now (another user
    /// naming the same number holds nothing: ENOENT).
    pub(crate) fn where_is(&self, uid: u32, id: u64, client: u64) -> FsResult<Answer> {
        if !self.opens.holds((uid, client), id) {
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
pub fn start(ops: Arc<Server>, stop: Arc<std::sync::atomic::AtomicBool>) -> std::io::Result<()> {
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
                ops.as_own_set(|| ops.sweep());
            }
        })
        .map(drop)
}

/// `Open` (and `access(2)`): the entry's attributes, its open counted for `holder` (its
/// capability is the pipeline's grant).
pub(crate) fn open(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Open { path, holder, .. } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(path)?;
    // the lookup and the reference together: an unlink either comes first (ENOENT) or
    // finds the file open
    let _n = (holder != 0).then(|| s.opens.name_lock(path));
    let a = s.get(path)?;
    s.opened(c.who.uid, holder, &a)?;
    Ok(Answer::Attr(a))
}

/// `Hold`: a client process's open references here (what it adds was granted to its user:
/// checked; of what it says it holds, only what was granted to its user by this cluster
/// counts).
pub(crate) fn hold(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Hold {
        client,
        ref add,
        ref release,
        ref held,
        gone,
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    let ids = |caps: &[madfs_proto::Cap]| {
        caps.iter()
            .filter(|cap| s.granted_to(c.who, cap))
            .map(|cap| cap.id)
            .collect::<Vec<u64>>()
    };
    s.opens
        .hold((c.who.uid, client), &ids(add), release, &ids(held), gone)?;
    Ok(Answer::Unit)
}

/// `Where`: where the caller's open file is now.
pub(crate) fn where_is(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Where { id, client } = *req else {
        return Err(Errno::EINVAL);
    };
    s.where_is(c.who.uid, id, client)
}

/// `Forget` (servers only): the last name of file `id` (this server is its home) is gone.
pub(crate) fn forget(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Forget { id, attr } = *req else {
        return Err(Errno::EINVAL);
    };
    if id != attr.id {
        return Err(Errno::EINVAL);
    }
    s.forget_here(&attr).map(Answer::Bool)
}

/// `Moved` (servers only): file `id` (this server is its home) was renamed to `to`.
pub(crate) fn moved(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Moved { id, to } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(to)?;
    s.note_moved(id, to);
    Ok(Answer::Unit)
}
