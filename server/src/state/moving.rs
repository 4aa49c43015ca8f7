//! Paths being moved by renames, and files moved in and pending (docs/consistency.md,
//! "rename"): what `handlers::rename` keeps while it moves entries between servers.

use crate::touches::Touches;
use madfs_proto::{Errno, FsResult};
use madfs_store::Arrival;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Paths whose move to another server is in flight (`true`), or left pending after a crash
/// or an unreachable target (`false`, "parked": [`Ops::finish_intents`] retries them); and
/// paths where a file moved in from another server is pending until that server settles it
/// (their names stay: no unlink, no rename away, nothing attached over them).
#[derive(Default)]
pub struct Moving {
    paths: Mutex<HashMap<String, bool>>,
    /// `paths.len()` + `arrivals.len()`, read without a lock on every request.
    count: AtomicUsize,
    /// `paths.len()`: moves out only (lookups and listings hide their sources).
    moves: AtomicUsize,
    arrivals: Mutex<HashMap<String, (Arrival, std::time::Instant)>>,
    /// Directories whose rename runs here now.
    dirs: Mutex<std::collections::HashSet<String>>,
}

impl Moving {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, bool>> {
        self.paths.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn arrivals(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (Arrival, std::time::Instant)>> {
        self.arrivals.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn recount(&self, moves: usize) {
        self.moves.store(moves, Relaxed);
        self.count.store(moves + self.arrivals().len(), Relaxed);
    }

    fn set(&self, path: &str, f: impl FnOnce(Option<&mut bool>) -> Option<bool>) -> bool {
        let mut m = self.lock();
        let r = match m.get_mut(path) {
            Some(v) => f(Some(v)),
            None => f(None),
        };
        if let Some(active) = r {
            m.insert(path.to_owned(), active);
        }
        self.recount(m.len());
        r.is_some()
    }

    /// A file arrived at `a.path`, pending until its source's server settles it.
    pub fn arrive(&self, a: Arrival) {
        let m = self.lock();
        self.arrivals()
            .insert(a.path.clone(), (a, std::time::Instant::now()));
        self.recount(m.len());
    }

    /// The move-in at `path` is settled.
    pub fn settled(&self, path: &str) {
        let m = self.lock();
        self.arrivals().remove(path);
        self.recount(m.len());
    }

    /// The file pending at `path` after a move in, if any. (No lock while nothing is.)
    pub fn pending_arrival(&self, path: &str) -> Option<u64> {
        if self.count.load(Relaxed) == 0 {
            return None;
        }
        self.arrivals().get(path).map(|(a, _)| a.id)
    }

    /// Move-ins pending for longer than `age` (the mover asks their sources about them).
    pub(crate) fn stale_arrivals(&self, age: std::time::Duration) -> Vec<Arrival> {
        if self.count.load(Relaxed) == 0 {
            return vec![];
        }
        self.arrivals()
            .values()
            .filter(|(_, t)| t.elapsed() >= age)
            .map(|(a, _)| a.clone())
            .collect()
    }

    /// Claims `path` for a new move; false if it is being moved or parked.
    pub(crate) fn claim(&self, path: &str) -> bool {
        self.set(path, |v| v.is_none().then_some(true))
    }

    /// Claims a parked (or unknown) `path` to finish its move; false while a move of it runs.
    pub(crate) fn take_parked(&self, path: &str) -> bool {
        self.set(path, |v| (v.copied() != Some(true)).then_some(true))
    }

    /// Is a move of `path` running now (claimed, not parked)?
    pub(crate) fn running(&self, path: &str) -> bool {
        self.lock().get(path).copied() == Some(true)
    }

    pub(crate) fn park(&self, path: &str) {
        self.set(path, |_| Some(false));
    }

    /// Parks `path` unless a move of it runs.
    pub(crate) fn park_idle(&self, path: &str) {
        self.set(path, |v| (v.copied() != Some(true)).then_some(false));
    }

    /// Releases the parked paths without an intent record (finished by another primary of
    /// their set, or dropped by a rejoin's copy); `intents` reads the records' paths under
    /// the lock that parking takes (a move parks after its record is written). Returns them.
    pub(crate) fn release_parked(
        &self,
        intents: impl FnOnce() -> FsResult<std::collections::HashSet<String>>,
    ) -> FsResult<std::collections::HashSet<String>> {
        let mut m = self.lock();
        let left = intents()?;
        m.retain(|p, active| *active || left.contains(p));
        self.recount(m.len());
        Ok(left)
    }

    /// Forgets the pinned move-ins, older than `age`, that `keep` rejects (their records are
    /// gone).
    pub(crate) fn unpin_arrivals(&self, age: std::time::Duration, keep: impl Fn(&Arrival) -> bool) {
        let m = self.lock();
        self.arrivals()
            .retain(|_, (a, t)| t.elapsed() < age || keep(a));
        self.recount(m.len());
    }

    pub(crate) fn release(&self, path: &str) {
        let mut m = self.lock();
        m.remove(path);
        self.recount(m.len());
    }

    /// Claims directory `path` for its rename (or the rename's completion); false while
    /// another runs.
    pub(crate) fn claim_dir(&self, path: &str) -> bool {
        let mut d = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        d.insert(path.to_owned())
    }

    pub(crate) fn release_dir(&self, path: &str) {
        let mut d = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        d.remove(path);
    }

    /// Is `path` being moved, or parked? (No lock while nothing is.)
    pub fn busy(&self, path: &str) -> bool {
        self.moves.load(Relaxed) > 0 && self.lock().contains_key(path)
    }

    /// Is any move in flight, parked, or pending here after a move in? (One atomic load.)
    pub fn active(&self) -> bool {
        self.count.load(Relaxed) > 0
    }

    /// Is the entry `name` of directory `parent` the source of a move (hidden from listings
    /// and lookups until the move ends)?
    pub fn hides(&self, parent: &str, name: &str) -> bool {
        if self.moves.load(Relaxed) == 0 {
            return false;
        }
        let path = if parent == "/" {
            format!("/{name}")
        } else {
            format!("{parent}/{name}")
        };
        self.busy(&path)
    }

    /// Is any move parked?
    pub fn any_parked(&self) -> bool {
        self.moves.load(Relaxed) > 0 && self.lock().values().any(|active| !active)
    }

    /// How a request that touches `t` is answered while moves are in flight or pending, if
    /// not as usual: the source of a move is hidden from lookups (ENOENT), so that a reader
    /// that saw the new name never sees the old one afterwards; changes to it wait (EAGAIN,
    /// the client retries) until the move has ended; and a name where a moved-in file is
    /// pending is not removed or replaced (EAGAIN: the source's server settles it at once
    /// unless it crashed, and then the mover asks it within a second or two).
    pub fn guard(&self, t: &Touches<'_>) -> Option<Errno> {
        if !self.active() {
            return None;
        }
        let pending = |p: &str| self.pending_arrival(p);
        let again = Some(Errno::EAGAIN);
        match *t {
            Touches::Nothing | Touches::Links { .. } => None,
            Touches::Looks(p) => self.busy(p).then_some(Errno::ENOENT),
            Touches::Changes(p) => self.busy(p).then_some(Errno::EAGAIN),
            Touches::Removes(p) if pending(p).is_some() => again,
            Touches::Removes(p) => self.busy(p).then_some(Errno::EAGAIN),
            Touches::Moves { from, to } if pending(to).is_some() || pending(from).is_some() => {
                again
            }
            Touches::Moves { .. } => None,
            // the retried move of the same file is welcome
            Touches::Arrives { path, id } if pending(path).is_some_and(|p| p != id) => again,
            Touches::Arrives { path, .. } => self.busy(path).then_some(Errno::EAGAIN),
        }
    }
}
