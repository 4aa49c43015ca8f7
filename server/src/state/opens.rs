//! Open references of the files whose home this server is (docs/consistency.md, "Open
//! files"): per client process, how many of its open descriptions name each file; leased,
//! so that a crashed client's files are let go. `handlers::open_files` serves what changes
//! them.
//!
//! A client process names itself with a random number, which is no secret: a holder is that
//! number *as the user whose connection sent it* (another user naming the same number is
//! another holder, and learns nothing of the first), and a holder names only files it was
//! granted an open of (the pipeline checks a `Hold`'s capabilities). What one user may make
//! a server keep is bounded: holders per user ([`OpenRefs::new`]) and files per holder
//! ([`IDS_PER_HOLDER`]); beyond, `EMFILE`.

use crate::clock::now_ns;
use madfs_proto::{Attr, Errno, FsResult};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a client process's references last without renewal (an active client renews
/// every [`madfs_proto::HOLD_EVERY_MS`], on the way of its calls; one silent this long is
/// taken for gone).
pub const LEASE: Duration = Duration::from_secs(600);

/// Holders one user may have on a server by default (`--holders-per-user`): a job of that
/// many processes of one user, each holding files of this server open.
pub const HOLDERS_PER_USER: usize = 65536;

/// Distinct files one holder may hold on a server (a process's open-file limit is usually far
/// lower).
pub const IDS_PER_HOLDER: usize = 1 << 20;

/// Name locks: an open's lookup and its reference, and a removal of the name and its check
/// for references, exclude each other.
const NAME_LOCKS: usize = 64;

/// A holder: a client process's number, as the user whose connection named it.
pub type HolderKey = (u32, u64);

#[derive(Default)]
struct Holder {
    until: Option<Instant>,
    /// File id → open descriptions of this client naming it.
    ids: HashMap<u64, u32>,
}

#[derive(Default)]
pub struct Inner {
    clients: HashMap<HolderKey, Holder>,
    /// User → holders of that user.
    per_user: HashMap<u32, usize>,
    /// File id → references over all clients.
    pub(crate) count: HashMap<u64, u64>,
    /// File id → the path a rename moved it to (only while referenced).
    pub(crate) moved: HashMap<u64, String>,
}

impl Inner {
    /// The holder `k`, made if it is new and its user has room for one more.
    fn holder(&mut self, k: HolderKey, max_per_user: usize) -> FsResult<&mut Holder> {
        if !self.clients.contains_key(&k) {
            let n = self.per_user.entry(k.0).or_insert(0);
            if *n >= max_per_user {
                return Err(Errno::EMFILE);
            }
            *n += 1;
        }
        Ok(self.clients.entry(k).or_default())
    }

    fn add(&mut self, k: HolderKey, id: u64, until: Instant, max: usize) -> FsResult<()> {
        let h = self.holder(k, max)?;
        h.until = Some(until);
        if !h.ids.contains_key(&id) && h.ids.len() >= IDS_PER_HOLDER {
            return Err(Errno::EMFILE);
        }
        *h.ids.entry(id).or_insert(0) += 1;
        *self.count.entry(id).or_insert(0) += 1;
        Ok(())
    }

    fn release(&mut self, k: HolderKey, id: u64) {
        let Some(h) = self.clients.get_mut(&k) else {
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

    /// Holder `k` goes with every reference it had.
    fn drop_holder(&mut self, k: HolderKey) {
        if let Some(h) = self.clients.remove(&k) {
            for (id, n) in h.ids {
                self.dec(id, n as u64);
            }
            if let Some(n) = self.per_user.get_mut(&k.0) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.per_user.remove(&k.0);
                }
            }
        }
    }
}

/// What must be sent to other servers, by the open-files thread.
pub enum Errand {
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
    per_user: usize,
    started: Instant,
    /// When this server started, ns since the epoch: orphans made before it wait for their
    /// holders to come back for one lease.
    started_ns: i64,
    pub(crate) errands: Mutex<Vec<Errand>>,
    pub(crate) wake: Condvar,
}

impl OpenRefs {
    /// References lasting `lease` without renewal, at most `per_user` holders per user.
    pub fn new(lease: Duration, per_user: usize) -> Self {
        OpenRefs {
            inner: Mutex::default(),
            names: std::array::from_fn(|_| Mutex::new(())),
            lease,
            per_user: per_user.max(1),
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

    /// One more open of `id` by holder `k`.
    pub fn add(&self, k: HolderKey, id: u64) -> FsResult<()> {
        let until = Instant::now() + self.lease;
        self.lock().add(k, id, until, self.per_user)
    }

    /// A holder's `Hold` (`gone`: the client is exiting): `add` and `release` one reference
    /// each; `held` is everything it holds here, taken instead when this server does not know
    /// the holder (it restarted, or the lease ran out).
    pub fn hold(
        &self,
        k: HolderKey,
        add: &[u64],
        release: &[u64],
        held: &[u64],
        gone: bool,
    ) -> FsResult<()> {
        let until = Instant::now() + self.lease;
        let mut g = self.lock();
        if gone {
            g.drop_holder(k);
            return Ok(());
        }
        let mut r = Ok(());
        if g.clients.contains_key(&k) {
            for id in add {
                r = r.and(g.add(k, *id, until, self.per_user));
            }
            for id in release {
                g.release(k, *id);
            }
        } else {
            // unknown here (this server restarted, or the lease ran out): `held` is all of it
            for id in held {
                r = r.and(g.add(k, *id, until, self.per_user));
            }
        }
        if let Some(h) = g.clients.get_mut(&k) {
            h.until = Some(until);
            if h.ids.is_empty() {
                g.drop_holder(k);
            }
        }
        r
    }

    /// Is `id` open anywhere?
    pub fn held(&self, id: u64) -> bool {
        self.lock().count.contains_key(&id)
    }

    /// Does holder `k` hold `id` open?
    pub fn holds(&self, k: HolderKey, id: u64) -> bool {
        self.lock()
            .clients
            .get(&k)
            .is_some_and(|h| h.ids.contains_key(&id))
    }

    /// Drops the references of holders whose lease ran out; returns how many holders.
    pub(crate) fn expire(&self, now: Instant) -> usize {
        let mut g = self.lock();
        let gone: Vec<HolderKey> = g
            .clients
            .iter()
            .filter(|(_, h)| h.until.is_some_and(|u| u <= now))
            .map(|(c, _)| *c)
            .collect();
        for c in &gone {
            g.drop_holder(*c);
        }
        gone.len()
    }

    /// Is orphan `a` one the last run left, within the first lease after this server started
    /// (kept: its holders have not renewed here yet)?
    pub(crate) fn in_grace(&self, a: &Attr) -> bool {
        a.ctime < self.started_ns && self.started.elapsed() < self.lease
    }

    pub(crate) fn errand(&self, e: Errand) {
        self.errands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e);
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_count_per_client_and_expire() {
        let r = OpenRefs::new(Duration::from_secs(60), 100);
        let (c1, c2, c3) = ((7, 1), (7, 2), (7, 3));
        r.add(c1, 10).unwrap();
        r.hold(c1, &[10], &[], &[10, 10], false).unwrap();
        r.add(c2, 10).unwrap();
        r.hold(c1, &[], &[10], &[], false).unwrap();
        assert!(r.held(10));
        r.hold(c2, &[], &[10], &[], false).unwrap();
        assert!(r.held(10), "client 1 still has one");
        r.hold(c1, &[], &[10], &[], false).unwrap();
        assert!(!r.held(10));
        // an unknown client's hold adopts what it says it holds (after a restart)
        r.hold(c3, &[], &[], &[11, 12], false).unwrap();
        assert!(r.held(11) && r.held(12) && r.holds(c3, 11) && !r.holds(c1, 11));
        // the same number as another user is another holder
        assert!(!r.holds((8, 3), 11));
        // a known client's list is not counted again
        r.hold(c3, &[], &[], &[11, 12], false).unwrap();
        r.hold(c3, &[], &[11], &[], false).unwrap();
        assert!(!r.held(11));
        assert_eq!(r.expire(Instant::now() + Duration::from_secs(61)), 1);
        assert!(!r.held(12));
        // a client that goes says so
        r.hold((7, 5), &[6, 6], &[], &[6, 6], false).unwrap();
        r.hold((7, 5), &[], &[], &[], true).unwrap();
        assert!(!r.held(6));
        // a release of something never held changes nothing
        r.hold((7, 4), &[5], &[], &[5], false).unwrap();
        r.hold((7, 4), &[], &[99], &[5], false).unwrap();
        assert!(!r.held(99));
    }

    #[test]
    fn one_user_holds_a_bounded_number() {
        let r = OpenRefs::new(Duration::from_secs(60), 3);
        for c in 0..3 {
            r.add((9, c), 1).unwrap();
        }
        assert_eq!(r.add((9, 3), 1), Err(Errno::EMFILE));
        assert_eq!(r.hold((9, 4), &[], &[], &[1], false), Err(Errno::EMFILE));
        // another user, and the same user once one of its holders went
        r.add((10, 3), 1).unwrap();
        r.hold((9, 0), &[], &[], &[], true).unwrap();
        r.add((9, 3), 1).unwrap();
    }
}
