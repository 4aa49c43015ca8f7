//! Rename of a file (anything but a directory), done by the source's metadata server
//! (docs/consistency.md, "rename"):
//! - target on this server: one RocksDB write (atomic; durable with the next WAL sync);
//! - target on another server: an **intent record** is written durably first; the entry and
//!   its chunk 0 go to the target's server (`Attach`, durable there); then the source entry and
//!   the intent go in one durable write (or only the intent, if the target's server refused).
//!   A restarted server finishes every intent it finds before the moves' paths are used
//!   again, so after any crash exactly one of the two names exists, never none.
//!
//! While a move of a path is in flight or pending, the source is hidden from lookups and
//! listings (a reader that saw the new name never sees the old one afterwards; for a moment
//! neither may be seen), and a rename or any other change of that path answers `EAGAIN` (the
//! client retries): of two concurrent renames of one source exactly one wins.

use super::Call;
use crate::clock::now_ns;
use crate::server::{not_root, path_ok, Answer, Server};
use madfs_placement::meta_server;
use madfs_proto::{Attr, Errno, FsResult, Reply, Request};
use madfs_store::{is_stub, Intent, MetadataStore};
use std::sync::atomic::Ordering::Relaxed;

/// A path claimed for a move, given back when dropped — also when serving the move panicked
/// (the request's `catch_unwind` answers EIO): parked while its intent record is left, so the
/// mover finishes it, released otherwise, never left claimed for good.
struct Claimed<'a> {
    ops: &'a Server,
    path: &'a str,
    /// Whether the move is left pending; `None` until the move has answered.
    pending: Option<bool>,
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        let pending = self
            .pending
            .unwrap_or_else(|| self.ops.intent_left(self.path));
        if pending {
            self.ops.moving.park(self.path);
        } else {
            self.ops.moving.release(self.path);
        }
    }
}

/// Faults injected for tests, `MADFS_FAULT`: `rename-after-intent` or `rename-after-attach`
/// makes the server abort at that point of a move; `ucx-stall-after-ms:N` (`net::ucx`) makes
/// the UCX worker look stalled after N ms.
fn fault(point: &str) {
    static FAULT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let f = FAULT.get_or_init(|| std::env::var("MADFS_FAULT").ok());
    if f.as_deref() == Some(point) {
        tracing::error!("MADFS_FAULT={point}: aborting");
        std::process::abort();
    }
}

impl Server {
    /// `Rename` of a non-directory `from` (this server's) to `to`.
    pub fn rename(&self, from: &str, to: &str, noreplace: bool) -> FsResult<Answer> {
        not_root(from, Errno::EBUSY)?;
        not_root(to, Errno::EBUSY)?;
        if to.len() > from.len() && to.starts_with(from) && to.as_bytes()[from.len()] == b'/' {
            return Err(Errno::EINVAL);
        }
        let l = &self.peers.layout();
        if meta_server(from, l) != self.here() {
            return Err(Errno::EINVAL); // sent to the wrong server
        }
        let a = self.get(from)?;
        if a.is_dir() {
            return self.rename_dir(from, to, noreplace);
        }
        // `to` another name of the same file (a file with several names) on another server:
        // the rename does nothing, as POSIX says (on this server the store's rename sees it).
        // A link or unlink of `to` racing this check is ordered after it.
        if a.nlink > 1 && meta_server(to, l) != self.here() {
            if let Ok(t) = self.stat_anywhere(to) {
                if t.id == a.id {
                    return Ok(Answer::Replaced(None));
                }
            }
        }
        if !self.moving.claim(from) {
            return Err(Errno::EAGAIN);
        }
        // sent again after a failover: answered as done (`Ops::renamed_again`), not ENOENT
        crate::replica::replay::note(crate::replica::replay::Note::Renamed);
        let mut claim = Claimed {
            ops: self,
            path: from,
            pending: None,
        };
        let r = if meta_server(to, l) == self.here() {
            // a replaced file is forgotten under its name's lock (see `Unlink`)
            let _n = self.opens.name_lock(to);
            self.creating(to, || self.meta.rename_local(from, to, noreplace, now_ns()))
                .and_then(|old| self.dropped(old))
        } else {
            self.meta
                .begin_move(from, to, noreplace)
                .and_then(|attr| {
                    fault("rename-after-intent");
                    let it = Intent {
                        from: from.to_owned(),
                        to: to.to_owned(),
                        attr,
                        noreplace,
                    };
                    self.finish_move(&it)
                })
                .map(Answer::Replaced)
        };
        // an unfinished move ([`Ops::finish_intents`] retries it) keeps the path busy
        claim.pending = Some(matches!(r, Err(Errno::EIO)) && self.intent_left(from));
        drop(claim);
        if r.is_ok() {
            // descriptors of the file find it under its new name
            self.moved(a.id, to);
        }
        r
    }

    /// Rename of directory `from` (this server's): keys hold full paths, so every
    /// descendant's entry moves (files by a `Rename` each, done by their own server; chunks
    /// stay, placed by file id). An intent record is written durably first; the new tree is
    /// built top-down before the old one is removed bottom-up, so a concurrent reader may see
    /// an entry under both names for a moment, never under neither (docs/consistency.md).
    /// A crash or an unreachable server leaves the record: the mover (or the restarted
    /// server) finishes the rename ([`Ops::finish_dir_intents`]). Every step is a call
    /// between servers: no client says what an entry is.
    fn rename_dir(&self, from: &str, to: &str, noreplace: bool) -> FsResult<Answer> {
        let l = &self.peers.layout();
        let a = self.get(from)?;
        let stat = |p: &str| self.stat_anywhere(p);
        let replace = match stat(to) {
            Ok(t) if !t.is_dir() => return Err(Errno::ENOTDIR),
            Ok(_) if noreplace => return Err(Errno::EEXIST),
            Ok(_) => {
                for s in 0..l.servers() {
                    if let Answer::Bool(true) = self.on(s, &Request::HasChildren { dir: to })? {
                        return Err(Errno::ENOTEMPTY);
                    }
                }
                true
            }
            Err(Errno::ENOENT) => {
                let (parent, _) = madfs_placement::split_parent(to).ok_or(Errno::EBUSY)?;
                match stat(parent) {
                    Ok(p) if p.is_dir() => false,
                    Ok(_) => return Err(Errno::ENOTDIR),
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        if !self.moving.claim_dir(from) {
            return Err(Errno::EAGAIN); // another rename of it runs
        }
        // the rename that ran before this one claimed it may have moved it, or left it
        // pending (the mover finishes that first)
        let free = match self.meta.get(from) {
            Ok(Some(d)) if d.id == a.id => match self.meta.dir_intents() {
                Ok(v) if v.iter().any(|i| i.from == from) => Err(Errno::EAGAIN),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            },
            Ok(_) => Err(Errno::ENOENT),
            Err(e) => Err(e),
        };
        if let Err(e) = free {
            self.moving.release_dir(from);
            return Err(e);
        }
        let it = Intent {
            from: from.to_owned(),
            to: to.to_owned(),
            attr: a,
            noreplace: !replace,
        };
        tracing::debug!("rename {from} -> {to}: intent");
        let r = self.meta.begin_dir_move(&it).and_then(|()| {
            fault("dirrename-after-intent");
            self.dir_move(&it, true)
        });
        self.moving.release_dir(from);
        // left pending (the mover finishes it): EIO, as a file move to an unreachable server
        // (not EAGAIN: the client would send the rename again and then find no source)
        r.map(|()| Answer::Replaced(None)).map_err(|e| match e {
            Errno::EAGAIN => Errno::EIO,
            e => e,
        })
    }

    /// The steps of the rename of directory `it.from` (its intent record written), again
    /// after a crash or an unreachable server: the new directory, then every descendant
    /// (sorted: a directory before what it holds; a file by a `Rename` of its own server;
    /// what moved already is found no more), then the old directories bottom-up, then the
    /// record. Every step may be done twice. `first`: the rename's own run, whose refused
    /// first step (the target's name taken meanwhile, its parent gone) ends it with that
    /// errno; after that, or in a later run, a failure leaves the record for the mover.
    fn dir_move(&self, it: &Intent, first: bool) -> FsResult<()> {
        let l = &self.peers.layout();
        let (from, to, a) = (it.from.as_str(), it.to.as_str(), it.attr);
        let stat = |p: &str| self.stat_anywhere(p);
        let done = || {
            self.meta.end_dir_move(from)?;
            // the new name is free (if this is lost, its server's mover asks `MoveState`)
            let settle = Request::Settle { path: to, id: a.id };
            if let Err(e) = self.on(meta_server(to, l), &settle) {
                tracing::debug!("settle {to}: {e}");
            }
            Ok(())
        };
        match self.meta.get(from)? {
            Some(d) if d.id == a.id => {}
            // the old name's removal was the last step: done
            _ => return done(),
        }
        let attach = |path: &str, attr: Attr, replace: bool, pending: Option<&str>| {
            let req = Request::Attach {
                path,
                attr,
                replace,
                durable: pending.is_some(),
                from: pending,
                src: self.here(),
            };
            self.on(meta_server(path, l), &req).map(drop)
        };
        // the new directory is a pending move-in until the rename is over: nothing renames,
        // removes or replaces it meanwhile (a client whose answer was lost may try)
        tracing::debug!("rename {from} -> {to}: attaching the new directory");
        match attach(to, a, !it.noreplace, Some(from)) {
            Ok(()) => {}
            Err(e) if first && !matches!(e, Errno::EIO | Errno::ETIMEDOUT | Errno::EAGAIN) => {
                self.meta.end_dir_move(from)?;
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        fault("dirrename-after-attach");
        let mut subtree = Vec::new();
        for s in 0..l.servers() {
            let mut after = Vec::new();
            loop {
                let (paths, next) = if s == self.here() {
                    let req = Request::Find {
                        dir: from,
                        filter: madfs_proto::FindFilter {
                            pending: true,
                            ..Default::default()
                        },
                        after: &after,
                        max_bytes: 16 << 10,
                        servers: 0,
                    };
                    match self.find_here(&req, None)? {
                        Answer::Found(paths, _, next) => (paths, next),
                        _ => return Err(Errno::EPROTO),
                    }
                } else {
                    self.peers.find_page(s, from, &after)?
                };
                subtree.extend(paths.into_iter().map(|rel| format!("{from}/{rel}")));
                match next {
                    Some(k) => after = k,
                    None => break,
                }
            }
        }
        subtree.sort();
        let mut dirs = vec![(from.to_string(), a.id)];
        for (k, old) in subtree.iter().enumerate() {
            if k == subtree.len() / 2 {
                fault("dirrename-halfway");
            }
            let new = format!("{to}{}", &old[from.len()..]);
            // a file whose own move is pending is hidden from lookups (ENOENT): its `Rename`
            // below waits for that move (EAGAIN), and this rename stays pending until then
            let attr = match stat(old) {
                Ok(a) => Some(a),
                Err(Errno::ENOENT) => None,
                Err(e) => return Err(e),
            };
            if let Some(attr) = attr.filter(|a| a.is_dir()) {
                attach(&new, attr, false, None)?;
                dirs.push((old.clone(), attr.id));
            } else {
                let req = Request::Rename {
                    from: old,
                    to: &new,
                    noreplace: true,
                };
                // a move of that file left pending (its server restarted) finishes first
                let mut tries = 0;
                loop {
                    match self.on(meta_server(old, l), &req) {
                        Err(Errno::EAGAIN) if tries < 100 => {
                            tries += 1;
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                        Err(Errno::ENOENT) => break, // gone meanwhile
                        r => {
                            r?;
                            break;
                        }
                    }
                }
            }
        }
        for (d, id) in dirs.iter().rev() {
            let req = Request::Detach { path: d, id: *id };
            match self.on(meta_server(d, l), &req) {
                Ok(_) | Err(Errno::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        done()
    }

    /// Finishes the directory renames whose intent records are left (a crash, or a server
    /// that could not be reached), except those running. Returns how many are still pending.
    pub fn finish_dir_intents(&self, sets: &[u32]) -> FsResult<usize> {
        // not before every peer has heard of this server's start (`DirList`): a peer's call
        // back on a connection to its previous run would wait out the deadline
        if !self.dirs.ready() {
            return Ok(0);
        }
        let l = &self.peers.layout();
        let mut left = 0;
        for it in self.meta.dir_intents()? {
            if !sets.contains(&meta_server(&it.from, l)) || !self.moving.claim_dir(&it.from) {
                continue;
            }
            let r = self.dir_move(&it, false);
            self.moving.release_dir(&it.from);
            match r {
                Ok(()) => tracing::info!("pending rename {} -> {} finished", it.from, it.to),
                Err(e) => {
                    left += 1;
                    tracing::warn!("pending rename {} -> {}: {e}; retried", it.from, it.to);
                }
            }
        }
        Ok(left)
    }

    /// `req` done by server `server`: this one directly, another through a peer call.
    fn on(&self, server: u32, req: &Request<'_>) -> FsResult<Answer> {
        if server == self.here() {
            return self.execute(req);
        }
        Ok(match self.peers.call(server, req, &[])? {
            Reply::Attr(a) => Answer::Attr(a),
            Reply::Replaced(a) => Answer::Replaced(a),
            Reply::Bool(b) => Answer::Bool(b),
            Reply::Unit => Answer::Unit,
            _ => return Err(Errno::EPROTO),
        })
    }

    /// Is an intent record of `from` left (or can it not be known)?
    fn intent_left(&self, from: &str) -> bool {
        self.meta
            .intents()
            .map_or(true, |v| v.iter().any(|i| i.from == from))
    }

    /// A rename of file `from` sent again after it was applied (its replay record): done, once
    /// its move to another server, if one is still pending here, is finished.
    pub fn renamed_again(&self, from: &str) -> FsResult<Answer> {
        if self.intent_left(from) {
            // (its record may be one a failed primary of this set left: adopted first)
            let set = [meta_server(from, &self.peers.layout())];
            self.adopt_moves(&set)?;
            self.finish_intents(&set)?;
            if self.intent_left(from) {
                // the mover may be finishing this very move now (`finish_intents` skipped
                // it): the client asks again (EAGAIN, as for a path busy with a rename);
                // a move left parked found the target's server out of reach
                return Err(if self.moving.running(from) {
                    Errno::EAGAIN
                } else {
                    Errno::EIO
                });
            }
        }
        Ok(Answer::Replaced(None))
    }

    /// The replaced entry of a local rename: its last name is gone.
    fn dropped(&self, old: Option<Attr>) -> FsResult<Answer> {
        if let Some(o) = &old {
            self.forget(o)?;
        }
        Ok(Answer::Replaced(old))
    }

    /// Sends the entry of `it` to the target's server (chunk 0 stays on the file's home
    /// server) and ends the move:
    /// `Ok(replaced)` when the target has it, the target's errno when it refused (the source
    /// stays), `EIO` when it could not be reached (the intent stays, to be finished later).
    fn finish_move(&self, it: &Intent) -> FsResult<Option<Attr>> {
        let a = it.attr;
        let req = Request::Attach {
            path: &it.to,
            attr: Attr {
                ctime: now_ns(),
                ..a
            },
            replace: !it.noreplace,
            durable: true,
            from: Some(&it.from),
            src: self.here(),
        };
        let dst = meta_server(&it.to, &self.peers.layout());
        match self.peers.call(dst, &req, &[]) {
            Ok(Reply::Replaced(old)) => {
                fault("rename-after-attach");
                self.meta.end_move(it, true)?;
                // the target's name may change from now on (if this is lost, its mover asks)
                let settle = Request::Settle {
                    path: &it.to,
                    id: a.id,
                };
                if let Err(e) = self.peers.call(dst, &settle, &[]) {
                    tracing::debug!("settle {} on server {dst}: {e}", it.to);
                }
                Ok(old)
            }
            Ok(_) => Err(Errno::EPROTO),
            Err(Errno::EIO) => {
                tracing::warn!(
                    "rename {} -> {}: server {dst} not reachable; the move stays pending",
                    it.from,
                    it.to
                );
                Err(Errno::EIO)
            }
            Err(e) => {
                // refused: sent again, the rename is tried again (and refused again)
                crate::replica::replay::note(crate::replica::replay::Note::Again);
                self.meta.end_move(it, false)?;
                Err(e)
            }
        }
    }

    /// Parks the path of every intent record of this server's own replica set (before the
    /// server serves: a rename or unlink of such a path waits for its move), and pins every
    /// pending move-in of it. Returns how many moves out there are.
    pub fn park_intents(&self) -> FsResult<usize> {
        self.adopt_moves(&[self.here()])
    }

    /// Makes the moves of replica sets `sets` this server's (at start, and whenever it serves
    /// other sets than before: a failover, a rejoin): parks the sources of their intent
    /// records (hidden, and finished by the mover) and pins their pending move-ins, and lets
    /// go of what it parked or pinned whose record is gone (a move another primary of the
    /// set finished meanwhile, or one a rejoin's copy dropped). Returns the moves out of
    /// `sets`.
    pub fn adopt_moves(&self, sets: &[u32]) -> FsResult<usize> {
        let l = &self.peers.layout();
        let ours = |p: &str| sets.contains(&meta_server(p, l));
        let intents = self
            .moving
            .release_parked(|| Ok(self.meta.intents()?.into_iter().map(|i| i.from).collect()))?;
        let mut out = 0;
        for from in intents.iter().filter(|p| ours(p)) {
            self.moving.park_idle(from);
            out += 1;
        }
        let arrivals = self.meta.arrivals()?;
        let recorded: std::collections::HashSet<(&str, u64)> =
            arrivals.iter().map(|a| (a.path.as_str(), a.id)).collect();
        // (a move-in is pinned just before its record is written: only older pins go)
        self.moving
            .unpin_arrivals(std::time::Duration::from_secs(2), |a| {
                recorded.contains(&(a.path.as_str(), a.id))
            });
        for a in arrivals.iter().filter(|a| ours(&a.path)) {
            if self.moving.pending_arrival(&a.path) != Some(a.id) {
                self.moving.arrive(a.clone());
            }
        }
        Ok(out)
    }

    /// `MoveState`: is the move of file `id` out of `from` still pending here?
    pub fn move_state(&self, from: &str, id: u64) -> FsResult<bool> {
        let pending = |v: Vec<Intent>| v.iter().any(|i| i.from == from && i.attr.id == id);
        Ok(pending(self.meta.intents()?) || pending(self.meta.dir_intents()?))
    }

    /// `Settle`: the move-in of file `id` at `path` is over.
    pub fn settle(&self, path: &str, id: u64) -> FsResult<()> {
        self.meta.settle(path, id)?;
        if self.moving.pending_arrival(path) == Some(id) {
            self.moving.settled(path);
        }
        Ok(())
    }

    /// Asks the source's server of every move-in of replica sets `sets` pending for a while
    /// whether its move is over (a `Settle` lost with a crash); settles those that are.
    pub fn settle_arrivals(&self, sets: &[u32]) {
        let l = &self.peers.layout();
        for a in self
            .moving
            .stale_arrivals(std::time::Duration::from_secs(1))
            .into_iter()
            .filter(|a| sets.contains(&meta_server(&a.path, l)))
        {
            let req = Request::MoveState {
                from: &a.from,
                id: a.id,
            };
            match self.peers.call(a.src, &req, &[]) {
                Ok(Reply::Bool(false)) => {
                    if let Err(e) = self.settle(&a.path, a.id) {
                        tracing::warn!("settling {}: {e}", a.path);
                    } else {
                        tracing::info!("pending move-in at {} settled", a.path);
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::debug!("move state of {} on server {}: {e}", a.from, a.src),
            }
        }
    }

    /// Finishes the moves of replica sets `sets` whose intent records are left (after a
    /// crash, a failover, or a target that could not be reached), except those a running
    /// rename is finishing. Returns how many are still pending.
    pub fn finish_intents(&self, sets: &[u32]) -> FsResult<usize> {
        let l = &self.peers.layout();
        let mut left = 0;
        for it in self.meta.intents()? {
            if !sets.contains(&meta_server(&it.from, l)) || !self.moving.take_parked(&it.from) {
                continue;
            }
            let mut claim = Claimed {
                ops: self,
                path: &it.from,
                pending: None,
            };
            let r = self.finish_move(&it);
            if r.is_ok() {
                self.moved(it.attr.id, &it.to);
            }
            let pending = matches!(r, Err(Errno::EIO));
            if pending {
                left += 1;
            } else {
                tracing::info!("pending rename {} -> {} finished: {r:?}", it.from, it.to);
            }
            claim.pending = Some(pending);
        }
        Ok(left)
    }
}

/// Starts the thread that finishes parked moves (found at start, or left by a target that
/// could not be reached), retrying every `every` until the server stops.
pub fn start_mover(
    ops: std::sync::Arc<Server>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    every: std::time::Duration,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("madfs-mover".into())
        .spawn(move || {
            while !stop.load(Relaxed) {
                // the sets this server serves now (another's after a failover, its own
                // again after a rejoin): their moves are its to finish
                let sets = ops.primary_of();
                if let Err(e) = ops.adopt_moves(&sets) {
                    tracing::error!("pending renames: {e}");
                }
                for set in sets {
                    ops.as_set(set, || {
                        if ops.moving.any_parked() {
                            if let Err(e) = ops.finish_intents(&[set]) {
                                tracing::error!("pending renames: {e}");
                            }
                        }
                        if let Err(e) = ops.finish_dir_intents(&[set]) {
                            tracing::error!("pending directory renames: {e}");
                        }
                        ops.settle_arrivals(&[set]);
                    });
                }
                std::thread::sleep(every);
            }
        })
        .map(drop)
}

impl Server {
    /// `Attach` here (server to server, or this server's own: a link's new name on this
    /// server).
    pub(crate) fn attach_here(&self, req: &Request<'_>) -> FsResult<Answer> {
        let Request::Attach {
            path,
            attr,
            replace,
            durable,
            from,
            src,
        } = *req
        else {
            return Err(Errno::EINVAL);
        };
        not_root(path, Errno::EISDIR)?;
        let dir = attr.is_dir();
        // a replaced file is forgotten under its name's lock (see `Unlink`)
        let _n = self.opens.name_lock(path);
        let old = self.meta.get(path)?;
        match old {
            Some(o) if !replace && o.id != attr.id => return Err(Errno::EEXIST),
            // a new name of a file with several names (`Link`): never over one
            Some(_) if !replace && from.is_none() && is_stub(&attr) => return Err(Errno::EEXIST),
            // a directory replaces only an (empty: the client checked) directory
            Some(o) if dir && !o.is_dir() => return Err(Errno::ENOTDIR),
            Some(o) if !dir && o.is_dir() => return Err(Errno::EISDIR),
            _ => {}
        }
        let attr = Attr {
            ctime: now_ns(),
            ..attr
        };
        let arrival = from.map(|from| madfs_store::Arrival {
            path: path.to_owned(),
            src,
            from: from.to_owned(),
            id: attr.id,
        });
        // pinned before it is visible (a failed write leaves it to the mover to settle)
        if let Some(a) = &arrival {
            self.moving.arrive(a.clone());
        }
        let attach = || self.meta.attach(path, &attr, &[], arrival.as_ref());
        match old {
            Some(_) => attach()?,
            None => self.creating(path, attach)?,
        }
        let old = old.filter(|o| o.id != attr.id);
        if let Some(o) = &old {
            // the replaced file's last name is gone
            self.forget(o)?;
        }
        if durable {
            self.meta.sync(self.meta.mark())?;
        }
        if dir {
            // (a server that missed it fails this step: the rename's mover does it again)
            self.dir_changed(path, Some(&attr))?;
        }
        Ok(Answer::Replaced(old))
    }
}

pub(crate) fn rename(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Rename {
        from,
        to,
        noreplace,
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    let r = s.rename(from, to, noreplace)?;
    let now = now_ns();
    s.parent_changed(from, now);
    s.parent_changed(to, now);
    Ok(r)
}

pub(crate) fn attach(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    if !c.bulk.is_empty() {
        return Err(Errno::EINVAL); // chunk 0 stays on the file's home server
    }
    s.attach_here(req)
}

pub(crate) fn detach(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Detach { path, id } = *req else {
        return Err(Errno::EINVAL);
    };
    not_root(path, Errno::EBUSY)?;
    let a = s.get(path)?;
    if a.id != id {
        return Err(Errno::ENOENT);
    }
    s.meta.remove_entry(path)?;
    if a.is_dir() {
        // (the old name is gone whatever a server missed: it learns it when it starts)
        let _ = s.dir_changed(path, None);
    }
    Ok(Answer::Unit)
}

pub(crate) fn settle(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Settle { path, id } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(path)?;
    s.settle(path, id).map(|_| Answer::Unit)
}

pub(crate) fn move_state(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::MoveState { from, id } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(from)?;
    s.move_state(from, id).map(Answer::Bool)
}

#[cfg(test)]
mod tests {
    use madfs_proto::{Errno, Request};
    use madfs_store::{Intent, MetadataStore};

    #[test]
    fn local_renames_and_intent_records() {
        let dir = tempfile::tempdir().unwrap();
        let o = crate::fixture::server(dir.path());
        let mut d = vec![0u8; 64];
        let mut run = |r: Request<'_>| o.execute_with(&r, b"", &mut d).map(|_| ());
        let create = crate::fixture::new_file;
        let rename = |from, to, noreplace| Request::Rename {
            from,
            to,
            noreplace,
        };
        run(create("/a")).unwrap();
        run(create("/b")).unwrap();
        run(Request::Mkdir {
            path: "/d",
            mode: 0o755,
            uid: 0,
            gid: 0,
        })
        .unwrap();
        assert_eq!(run(rename("/a", "/b", true)), Err(Errno::EEXIST));
        assert_eq!(run(rename("/a", "/d", false)), Err(Errno::EISDIR));
        // a directory (here with nothing in it) is moved by its server, subtree and all
        run(rename("/d", "/e", false)).unwrap();
        assert_eq!(o.meta.get("/d").unwrap(), None);
        assert!(o.meta.get("/e").unwrap().unwrap().is_dir());
        run(rename("/e", "/d", false)).unwrap();
        assert_eq!(run(rename("/x", "/y", false)), Err(Errno::ENOENT));
        assert_eq!(run(rename("/a", "/a/b", false)), Err(Errno::EINVAL));
        run(rename("/a", "/b", false)).unwrap();
        assert_eq!(o.meta.get("/a").unwrap(), None);
        run(rename("/b", "/c", false)).unwrap();
        assert!(o.meta.get("/c").unwrap().is_some());
        assert!(!o.meta.has_children("/d").unwrap());

        // an intent: recorded, busy, listed; ended without the move or with it
        let a = o.meta.begin_move("/c", "/elsewhere", false).unwrap();
        assert_eq!(o.meta.begin_move("/c", "/z", false), Err(Errno::EAGAIN));
        let it = Intent {
            from: "/c".into(),
            to: "/elsewhere".into(),
            attr: a,
            noreplace: false,
        };
        assert_eq!(o.meta.intents().unwrap(), vec![it.clone()]);
        o.meta.end_move(&it, false).unwrap();
        assert!(o.meta.intents().unwrap().is_empty());
        assert!(o.meta.get("/c").unwrap().is_some());
        o.meta.begin_move("/c", "/elsewhere", true).unwrap();
        o.meta.end_move(&it, true).unwrap();
        assert_eq!(o.meta.get("/c").unwrap(), None);
        assert!(o.meta.intents().unwrap().is_empty());
    }
}
