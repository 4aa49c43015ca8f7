//! Leases of the client cache (docs/consistency.md, "The client cache"): which client
//! process (a holder) keeps which answer of this server, until when, and the callbacks a
//! change waits for before it is acknowledged.
//!
//! A lease is granted on a path with a `Look` answer (an entry, or its absence in a
//! directory) to the connection that asked; it stands for the entry and for the permission
//! facts the answer depended on (its ancestors). A change names the paths it touches
//! ([`crate::pipeline`]); [`Leases::revoke`] takes every lease on those paths and below them
//! out of the table, sends a callback to each other holder (through the net thread) and
//! keeps new leases on them from being granted until the change is over (the returned
//! [`Revocation`] is held while the change runs); [`Revocation::wait`] waits for the
//! acknowledgements, or for the end of the leases a holder did not acknowledge (a dead or
//! frozen client costs a writer at most one lease).
//!
//! Memory is bounded: at most `max` leases; a full table drops its expired leases, and
//! grants none while still full.

use madfs_proto::{tag, Callback};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Leases one server keeps by default (`--leases-max`).
pub const LEASES_MAX: usize = 1 << 20;

/// Most paths (and bytes of paths) named in one callback: a holder of more is told to
/// forget everything (a callback stays one small eager message).
const PATHS_PER_CALLBACK: usize = 64;
const CALLBACK_BYTES: usize = 2048;

/// A connection that may be given leases: its holder (the client process) and the UCX
/// connection its callbacks go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub holder: u64,
    pub conn: u32,
}

/// A callback for the net thread to send, with `tag`, to holder `holder`: on every
/// connection of that process here (any thread of it may be the one that answers first: the
/// one that took the lease may be idle, the one waiting for this server busy), or on `conn`
/// (the one that took the lease) when none is found.
#[derive(Debug)]
pub struct Outgoing {
    pub holder: u64,
    pub conn: u32,
    pub tag: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    who: Holder,
    until: Instant,
    /// The holder still keeps the attributes the lease covers (not once it was called back
    /// for them: a later change of attributes only needs no callback until it asks again).
    attrs: bool,
}

/// What one holder is called back for by a change: the connection that took a lease, the
/// keys whose names changed and those whose attributes only, the latest lease's end.
struct Taken {
    conn: u32,
    paths: Vec<String>,
    attrs: Vec<String>,
    until: Instant,
}

#[derive(Default)]
struct Table {
    /// Leases by path.
    held: BTreeMap<String, Vec<Hold>>,
    count: usize,
    /// Paths being changed (by [`mark`]: a collision only refuses a lease): no lease is
    /// granted on them ...
    changing: HashMap<u64, u32>,
    /// ... nor below these (directories whose mode, owner, name or existence change) ...
    changing_below: HashMap<u64, u32>,
    /// ... nor on the pages of these directories (an entry of theirs changes).
    changing_pages: HashMap<u64, u32>,
    /// Callbacks sent and not acknowledged: their id → the holder they went to.
    unacked: HashMap<u64, u64>,
    next_id: u64,
}

/// The lease table of one server.
pub struct Leases {
    /// How long a lease lasts (zero: none is granted).
    lease: Duration,
    max: usize,
    server: u32,
    table: Mutex<Table>,
    acked: Condvar,
    out: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Outgoing>>>,
    /// Test fault `MADFS_FAULT=no-callbacks`: leases are granted, nothing is called back and
    /// nothing waits (what a coherence checker must catch).
    no_callbacks: bool,
    /// Until then, every change waits: leases this server granted before it was restarted
    /// (which it does not know any more), or that another server granted on what this one
    /// serves now ([`Leases::wait_out`]), may still be held. Nanoseconds after `born`.
    fresh_until: AtomicU64,
    born: Instant,
    /// Moves of slots under way on this server ([`Leases::pause`]): none is granted.
    paused: std::sync::atomic::AtomicU32,
}

/// Counters of the lease table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LeaseCounts {
    pub held: usize,
    pub changing: usize,
    pub unacked: usize,
}

impl Leases {
    /// A table granting leases of `lease` (zero: none), at most `max`, of server `server`,
    /// whose changes wait out the leases of a former life of the server for the first
    /// lease (see [`Leases::restarted`]).
    pub fn new(lease: Duration, max: usize, server: u32) -> Leases {
        let no_callbacks = std::env::var("MADFS_FAULT").is_ok_and(|f| f == "no-callbacks");
        if no_callbacks {
            tracing::warn!("MADFS_FAULT=no-callbacks: leases are granted and never called back");
        }
        let l = Leases {
            lease,
            max,
            server,
            table: Mutex::new(Table::default()),
            acked: Condvar::new(),
            out: Mutex::new(None),
            no_callbacks,
            fresh_until: AtomicU64::new(0),
            born: Instant::now(),
            paused: Default::default(),
        };
        l.wait_out(Duration::ZERO);
        l
    }

    /// A server that never ran before (its store is new) has no leases of a former life to
    /// wait out.
    pub fn first_life(self) -> Leases {
        self.fresh_until.store(0, Relaxed);
        self
    }

    /// How long a lease lasts on the server's side (a little longer than the client
    /// keeps it).
    fn full(&self) -> Duration {
        self.lease + self.lease / 64 + Duration::from_millis(2)
    }

    /// Leases this server does not know of may be held on what it serves from now on (it
    /// took replica sets over from a server that is still up, which may go on granting
    /// for up to `lag`): every change waits until they have ended, one lease and `lag`
    /// from now. (Every change of the server: one that takes sets back serves no others.)
    pub fn wait_out(&self, lag: Duration) {
        self.wait_out_since(Instant::now(), lag);
    }

    /// [`Leases::wait_out`] from `since`. (Cheap when it was already noted: a load.)
    pub fn wait_out_since(&self, since: Instant, lag: Duration) {
        if !self.enabled() {
            return;
        }
        let until =
            (since.saturating_duration_since(self.born) + self.full() + lag).as_nanos() as u64;
        if self.fresh_until.load(Relaxed) < until {
            self.fresh_until.fetch_max(until, Relaxed);
        }
    }

    /// Until when every change waits ([`Leases::wait_out`]).
    fn fresh_until(&self) -> Instant {
        self.born + Duration::from_nanos(self.fresh_until.load(Relaxed))
    }

    /// [`Leases::first_life`] unless `restarted`.
    pub fn restarted(self, restarted: bool) -> Leases {
        if restarted {
            self
        } else {
            self.first_life()
        }
    }

    /// Does this server grant leases?
    pub fn enabled(&self) -> bool {
        !self.lease.is_zero()
    }

    /// Where callbacks go (the net thread's sender task).
    pub fn set_outbox(&self, tx: tokio::sync::mpsc::UnboundedSender<Outgoing>) {
        *self.out.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A lease on `path` for `who`: its length in milliseconds, 0 when none is granted (no
    /// leases here, a change of it under way, the table full).
    pub fn grant(&self, path: &str, who: Option<Holder>) -> u32 {
        let t = self.table();
        if (!t.changing.is_empty() && t.changing.contains_key(&mark(path)))
            || (!t.changing_below.is_empty() && changing_above(&t.changing_below, path))
        {
            return 0;
        }
        self.hold(t, path, who)
    }

    /// A lease on this server's slice of directory `dir` (a statahead page: every entry of
    /// `dir` here), as [`Leases::grant`]. Called back on any change of an entry of `dir` on
    /// this server, and of `dir` or a directory above it.
    pub fn grant_page(&self, dir: &str, who: Option<Holder>) -> u32 {
        let t = self.table();
        if t.changing_pages.contains_key(&mark(dir))
            || (!t.changing_below.is_empty() && changing_above(&t.changing_below, dir))
        {
            return 0;
        }
        self.hold(t, &page_key(dir), who)
    }

    fn hold(&self, mut t: MutexGuard<'_, Table>, path: &str, who: Option<Holder>) -> u32 {
        let Some(who) = who.filter(|_| self.enabled() && self.paused.load(Relaxed) == 0) else {
            return 0;
        };
        let now = Instant::now();
        // the server keeps it a little longer than the client (which counts from before
        // its request left): clocks of two hosts may run at slightly different rates
        let until = now + self.full();
        if let Some(holds) = t.held.get_mut(path) {
            if let Some(h) = holds.iter_mut().find(|h| h.who.holder == who.holder) {
                *h = Hold {
                    who,
                    until,
                    attrs: true,
                };
                return self.lease.as_millis() as u32;
            }
        }
        if t.count >= self.max {
            sweep(&mut t, now);
            if t.count >= self.max {
                return 0;
            }
        }
        t.held.entry(path.to_owned()).or_default().push(Hold {
            who,
            until,
            attrs: true,
        });
        t.count += 1;
        self.lease.as_millis() as u32
    }

    /// Would a change of `paths` by `by` call a holder back (see [`Leases::revoke`])?
    /// Nothing changes.
    pub fn would_call_back(&self, paths: &[Change<'_>], by: Option<Holder>) -> bool {
        if !self.enabled() || paths.is_empty() || self.no_callbacks {
            return false;
        }
        if Instant::now() < self.fresh_until() {
            return true;
        }
        let t = self.table();
        if t.count == 0 {
            return false;
        }
        let now = Instant::now();
        let other = |holds: &Vec<Hold>| {
            holds
                .iter()
                .any(|h| h.until > now && by.is_none_or(|b| b.holder != h.who.holder))
        };
        paths.iter().any(|c| {
            t.held.get(c.path).is_some_and(other)
                || parent(c.path).is_some_and(|d| t.held.get(&page_key(d)).is_some_and(other))
                || {
                    c.below && {
                        let (lo, hi) = below(c.path);
                        t.held.range(lo..hi).any(|(_, h)| other(h))
                    }
                }
        })
    }

    /// A change of `paths` by `by` begins: their leases (and, where a path's `below` says
    /// so, those below it) are taken out, every holder but `by` is called back, and none is
    /// granted there until the returned revocation is dropped. `None` when this server
    /// grants no leases.
    pub fn revoke(&self, paths: &[Change<'_>], by: Option<Holder>) -> Option<Revocation<'_>> {
        if !self.enabled() || paths.is_empty() {
            return None;
        }
        let mut marked = [(0u64, None, false); 2];
        for (m, c) in marked.iter_mut().zip(paths) {
            *m = (mark(c.path), parent(c.path).map(mark), c.below);
        }
        let marked = &marked[..paths.len().min(2)];
        let mut t = self.table();
        for &(p, d, below) in marked {
            let marks = if below {
                &mut t.changing_below
            } else {
                &mut t.changing
            };
            *marks.entry(p).or_default() += 1;
            if let Some(d) = d {
                *t.changing_pages.entry(d).or_default() += 1;
            }
        }
        let mut r = Revocation {
            leases: self,
            marked: [(0, None, false); 2],
            n: marked.len(),
            fresh: false,
            ids: Vec::new(),
            until: Instant::now(),
        };
        r.marked[..marked.len()].copy_from_slice(marked);
        // (a server just started waits out the leases of its former life)
        let fresh_until = self.fresh_until();
        if !self.no_callbacks && r.until < fresh_until {
            r.until = fresh_until;
            r.fresh = true;
        }
        if t.count == 0 {
            return Some(r);
        }
        let now = r.until;
        // every lease held on them, by holder (and the connection that took one)
        let mut taken: HashMap<u64, Taken> = HashMap::new();
        for c in paths {
            // the path and the page of its directory
            let mut keys: Vec<String> = Vec::new();
            if t.held.contains_key(c.path) {
                keys.push(c.path.to_owned());
            }
            if let Some(d) = parent(c.path).map(page_key) {
                if t.held.contains_key(&d) {
                    keys.push(d);
                }
            }
            let own = keys.len();
            // below it: entries and the pages of directories there
            if c.below && t.count > 0 {
                let (lo, hi) = below(c.path);
                keys.extend(t.held.range(lo..hi).map(|(k, _)| k.clone()));
            }
            for (i, k) in keys.into_iter().enumerate() {
                let attrs = c.attrs && i < own;
                let holds = if attrs {
                    // called back once for its attributes: those that still keep them
                    let mut out = Vec::new();
                    for h in t.held.get_mut(&k).into_iter().flatten() {
                        if h.attrs && h.until > now && by.is_none_or(|b| b.holder != h.who.holder) {
                            h.attrs = false;
                            out.push(*h);
                        }
                    }
                    out
                } else {
                    let holds = t.held.remove(&k).unwrap_or_default();
                    t.count -= holds.len();
                    holds
                };
                for h in holds {
                    if h.until <= now || by.is_some_and(|b| b.holder == h.who.holder) {
                        continue;
                    }
                    let e = taken.entry(h.who.holder).or_insert_with(|| Taken {
                        conn: h.who.conn,
                        paths: Vec::new(),
                        attrs: Vec::new(),
                        until: h.until,
                    });
                    if attrs {
                        // (the entry itself is named too: its attributes may have come
                        // with the page)
                        for p in [k.as_str(), c.path] {
                            if !e.attrs.iter().any(|a| a == p) {
                                e.attrs.push(p.to_owned());
                            }
                        }
                    } else {
                        e.paths.push(k.clone());
                    }
                    e.until = e.until.max(h.until);
                }
            }
        }
        if taken.is_empty() || self.no_callbacks {
            return Some(r);
        }
        let out = self.out.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (holder, tk) in taken {
            let Taken {
                conn,
                paths,
                attrs,
                until,
            } = tk;
            t.next_id = t.next_id.wrapping_add(1).max(1);
            let id = t.next_id;
            let bytes: usize = paths.iter().chain(&attrs).map(|p| p.len() + 8).sum();
            let all = paths.len() + attrs.len() > PATHS_PER_CALLBACK || bytes > CALLBACK_BYTES;
            fn names(v: &[String], all: bool) -> Vec<&str> {
                if all {
                    Vec::new()
                } else {
                    v.iter().map(String::as_str).collect()
                }
            }
            let cb = Callback {
                id,
                paths: names(&paths, all),
                attrs: names(&attrs, all),
                all,
            };
            r.until = r.until.max(until);
            let sent = match (&out, flexbuffers::to_vec(&cb)) {
                (Some(tx), Ok(bytes)) => tx
                    .send(Outgoing {
                        holder,
                        conn,
                        tag: tag::callback(self.server, id),
                        bytes,
                    })
                    .is_ok(),
                _ => false,
            };
            // (a callback that cannot be sent is waited out: the lease's end)
            t.unacked.insert(id, holder);
            let _ = sent;
            r.ids.push(id);
        }
        Some(r)
    }

    /// A slot's move begins on this server (docs/architecture.md, "Membership changes"):
    /// until the returned guard is dropped no lease is granted, and every lease held now is
    /// called back (each holder told to forget everything this server told it): a lease of
    /// this server must never cover what another server serves after the switch, nor a
    /// directory slice that the switch changes. The caller waits with the revocation, and
    /// ends the pause with [`Leases::resume`].
    pub fn pause(&self) -> Option<Revocation<'_>> {
        self.paused.fetch_add(1, Relaxed);
        if !self.enabled() {
            return None;
        }
        let mut t = self.table();
        let now = Instant::now();
        let mut holders: HashMap<u64, (u32, Instant)> = HashMap::new();
        for (_, holds) in std::mem::take(&mut t.held) {
            for h in holds.into_iter().filter(|h| h.until > now) {
                let e = holders.entry(h.who.holder).or_insert((h.who.conn, h.until));
                e.1 = e.1.max(h.until);
            }
        }
        t.count = 0;
        let mut r = Revocation {
            leases: self,
            marked: [(0, None, false); 2],
            n: 0,
            fresh: false,
            ids: Vec::new(),
            until: now,
        };
        if self.no_callbacks {
            return Some(r);
        }
        let out = self.out.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (holder, (conn, until)) in holders {
            t.next_id = t.next_id.wrapping_add(1).max(1);
            let id = t.next_id;
            let cb = Callback {
                id,
                paths: Vec::new(),
                attrs: Vec::new(),
                all: true,
            };
            if let (Some(tx), Ok(bytes)) = (&out, flexbuffers::to_vec(&cb)) {
                let _ = tx.send(Outgoing {
                    holder,
                    conn,
                    tag: tag::callback(self.server, id),
                    bytes,
                });
            }
            t.unacked.insert(id, holder);
            r.ids.push(id);
            r.until = r.until.max(until);
        }
        Some(r)
    }

    /// The end of a [`Leases::pause`]: leases are granted again once every pause ended.
    pub fn resume(&self) {
        let _ = self
            .paused
            .fetch_update(Relaxed, Relaxed, |p| Some(p.saturating_sub(1)));
    }

    /// A connection of holder `holder` acknowledged callback `id` (one sent to that holder:
    /// another's acknowledgement is ignored).
    pub fn released(&self, holder: u64, id: u64) {
        let mut t = self.table();
        if t.unacked.get(&id) == Some(&holder) {
            t.unacked.remove(&id);
            drop(t);
            self.acked.notify_all();
        }
    }

    /// How many leases are held, paths changing, callbacks unacknowledged.
    pub fn counts(&self) -> LeaseCounts {
        let t = self.table();
        LeaseCounts {
            held: t.count,
            changing: t.changing.len() + t.changing_below.len() + t.changing_pages.len(),
            unacked: t.unacked.len(),
        }
    }

    /// Drops expired leases (the lease clock, now and then).
    pub fn expire(&self) {
        sweep(&mut self.table(), Instant::now());
    }
}

fn unmark(marks: &mut HashMap<u64, u32>, p: u64) {
    if let Some(n) = marks.get_mut(&p) {
        *n -= 1;
        if *n == 0 {
            marks.remove(&p);
        }
    }
}

/// The key of the lease on a directory's page (its slice here): the directory's path and a
/// `/` (the root's: `//`); entries' paths never end so (but the root's, `/`).
pub fn page_key(dir: &str) -> String {
    format!("{dir}/")
}

/// The directory `p` is in (`None`: the root).
fn parent(p: &str) -> Option<&str> {
    if p == "/" {
        return None;
    }
    match p.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&p[..i]),
        None => None,
    }
}

/// The keys strictly below `p` in a map of paths: from `p/` up to `p0` (`'0'` follows `'/'`).
fn below(p: &str) -> (String, String) {
    if p == "/" {
        return ("/".into(), "0".into());
    }
    (format!("{p}/"), format!("{p}0"))
}

/// The key of a path in the marks of changes under way.
fn mark(p: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(p.as_bytes())
}

/// Is `path`, or a directory above it, in `changing`?
fn changing_above(changing: &HashMap<u64, u32>, path: &str) -> bool {
    if changing.contains_key(&mark(path)) || changing.contains_key(&mark("/")) {
        return true;
    }
    path.match_indices('/')
        .skip(1)
        .any(|(i, _)| changing.contains_key(&mark(&path[..i])))
}

fn sweep(t: &mut Table, now: Instant) {
    let mut count = 0;
    t.held.retain(|_, holds| {
        holds.retain(|h| h.until > now);
        count += holds.len();
        !holds.is_empty()
    });
    t.count = count;
}

/// A path a change touches; `below`: everything below it too (a directory's mode, owner,
/// name or existence changes: what was answered below it depended on them); `attrs`: the
/// path keeps its name and file, only its attributes change (a size, times, a mode): its
/// leases (and its directory's page's) are called back as `Callback::attrs` and stay held,
/// so that a later change of the name still calls their holders back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change<'r> {
    pub path: &'r str,
    pub below: bool,
    pub attrs: bool,
}

/// A change under way on some paths: no lease is granted on them until it is dropped.
pub struct Revocation<'a> {
    leases: &'a Leases,
    /// The marks it holds: a path's, its directory's page's, below the path too.
    marked: [(u64, Option<u64>, bool); 2],
    n: usize,
    /// It waits until `until` whatever the callbacks (a server just started).
    fresh: bool,
    ids: Vec<u64>,
    until: Instant,
}

impl Revocation<'_> {
    /// Must the change wait for callbacks (or for the leases of the server's former life)?
    pub fn must_wait(&self) -> bool {
        !self.ids.is_empty() || self.fresh
    }

    /// Waits until every holder called back acknowledged, or its lease ended. Returns how
    /// long it waited.
    pub fn wait(&mut self) -> Duration {
        let start = Instant::now();
        if !self.must_wait() {
            return Duration::ZERO;
        }
        let l = self.leases;
        let mut t = l.table();
        loop {
            let now = Instant::now();
            let pending = self.fresh || self.ids.iter().any(|id| t.unacked.contains_key(id));
            if !pending || now >= self.until {
                break;
            }
            t = l
                .acked
                .wait_timeout(t, self.until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        for id in self.ids.drain(..) {
            t.unacked.remove(&id);
        }
        start.elapsed()
    }
}

impl Drop for Revocation<'_> {
    fn drop(&mut self) {
        let mut t = self.leases.table();
        for id in &self.ids {
            t.unacked.remove(id);
        }
        for &(p, d, below) in &self.marked[..self.n] {
            let marks = if below {
                &mut t.changing_below
            } else {
                &mut t.changing
            };
            unmark(marks, p);
            if let Some(d) = d {
                unmark(&mut t.changing_pages, d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Leases {
        /// A table of a server that has run for longer than a lease.
        fn settled(lease: Duration, max: usize) -> Leases {
            Leases::new(lease, max, 0).first_life()
        }
    }

    fn h(holder: u64) -> Option<Holder> {
        Some(Holder { holder, conn: 7 })
    }

    fn dir(path: &str) -> Change<'_> {
        Change {
            path,
            below: true,
            attrs: false,
        }
    }

    fn entry(path: &str) -> Change<'_> {
        Change {
            path,
            below: false,
            attrs: false,
        }
    }

    #[test]
    fn a_change_calls_back_other_holders_below_it_and_waits() {
        let l = Leases::settled(Duration::from_millis(300), 100);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        l.set_outbox(tx);
        assert_eq!(l.grant("/a/b", h(1)), 300);
        assert_eq!(l.grant("/a/b/c", h(2)), 300);
        assert_eq!(l.grant("/ab", h(2)), 300);
        assert_eq!(l.grant("/a", h(3)), 300);
        assert!(l.would_call_back(&[dir("/a/b")], h(3)));
        assert!(!l.would_call_back(&[entry("/a/b")], h(1)));
        let mut r = l.revoke(&[dir("/a/b")], h(3)).unwrap();
        // holders 1 and 2 are called back; /ab is not below /a/b; /a is not touched
        let mut sent = Vec::new();
        while let Ok(o) = rx.try_recv() {
            let cb: Callback<'_> = flexbuffers::from_slice(&o.bytes).unwrap();
            sent.push((
                cb.paths.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
                cb.id,
            ));
        }
        sent.sort();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(l.counts().held, 2);
        // no lease is granted there while the change runs
        assert_eq!(l.grant("/a/b", h(1)), 0);
        assert_eq!(l.grant("/a/b/x", h(1)), 0);
        assert_eq!(l.grant("/a/bc", h(1)), 300);
        for (_, id) in &sent {
            for holder in [1, 2] {
                l.released(holder, *id);
            }
        }
        let waited = r.wait();
        assert!(waited < Duration::from_millis(100), "{waited:?}");
        drop(r);
        assert_eq!(l.grant("/a/b", h(1)), 300);
        assert_eq!(l.counts().changing, 0);
    }

    #[test]
    fn a_change_of_attributes_only_keeps_the_leases_on_the_names() {
        let l = Leases::settled(Duration::from_millis(300), 100);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        l.set_outbox(tx);
        assert_eq!(l.grant("/d/f", h(1)), 300);
        assert_eq!(l.grant_page("/d", h(1)), 300);
        let attrs = Change {
            path: "/d/f",
            below: false,
            attrs: true,
        };
        let r = l.revoke(&[attrs], h(2)).unwrap();
        assert!(r.must_wait());
        let o = rx.try_recv().unwrap();
        let cb: Callback<'_> = flexbuffers::from_slice(&o.bytes).unwrap();
        assert!(cb.paths.is_empty(), "{cb:?}");
        let mut a = cb.attrs.clone();
        a.sort();
        assert_eq!(a, vec!["/d/", "/d/f"]);
        l.released(1, cb.id);
        drop(r);
        // its attributes were called back: another change of them calls back no one
        let r = l.revoke(&[attrs], h(2)).unwrap();
        assert!(!r.must_wait());
        assert!(rx.try_recv().is_err());
        drop(r);
        // still held: a later change of the name calls holder 1 back again
        assert_eq!(l.counts().held, 2);
        let r = l.revoke(&[entry("/d/f")], h(2)).unwrap();
        let o = rx.try_recv().unwrap();
        let cb: Callback<'_> = flexbuffers::from_slice(&o.bytes).unwrap();
        let mut p = cb.paths.clone();
        p.sort();
        assert_eq!(p, vec!["/d/", "/d/f"]);
        assert!(cb.attrs.is_empty());
        drop(r);
        assert_eq!(l.counts().held, 0);
    }

    #[test]
    fn an_entrys_change_leaves_what_is_below_it() {
        let l = Leases::settled(Duration::from_millis(300), 100);
        l.grant("/d/x", h(1));
        let r = l.revoke(&[entry("/d")], h(2)).unwrap();
        assert!(!r.must_wait());
        assert_eq!(l.grant("/d/y", h(1)), 300);
        assert_eq!(l.grant("/d", h(1)), 0);
    }

    #[test]
    fn a_page_is_called_back_by_a_change_of_any_entry_of_its_directory() {
        let l = Leases::settled(Duration::from_millis(300), 100);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        l.set_outbox(tx);
        assert_eq!(l.grant_page("/d", h(1)), 300);
        assert_eq!(l.grant_page("/", h(1)), 300);
        assert!(l.would_call_back(&[entry("/d/new")], h(2)));
        let r = l.revoke(&[entry("/d/new")], h(2)).unwrap();
        assert!(r.must_wait());
        let o = rx.try_recv().unwrap();
        let cb: Callback<'_> = flexbuffers::from_slice(&o.bytes).unwrap();
        assert_eq!(cb.paths, vec!["/d/"]);
        assert_eq!(l.grant_page("/d", h(1)), 0, "not while the change runs");
        drop(r);
        assert_eq!(l.grant_page("/d", h(1)), 300);
        // a change of the directory itself takes its page; the root's page too (/d is in /)
        let r = l.revoke(&[dir("/d")], h(2)).unwrap();
        let mut got: Vec<String> = Vec::new();
        while let Ok(o) = rx.try_recv() {
            let cb: Callback<'_> = flexbuffers::from_slice(&o.bytes).unwrap();
            got.extend(cb.paths.iter().map(|p| p.to_string()));
        }
        got.sort();
        assert_eq!(got, vec!["//", "/d/"]);
        drop(r);
    }

    #[test]
    fn an_unanswered_callback_is_waited_out_at_the_leases_end() {
        let l = Leases::settled(Duration::from_millis(50), 100);
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        l.set_outbox(tx);
        l.grant("/x", h(1));
        let mut r = l.revoke(&[entry("/x")], None).unwrap();
        assert!(r.must_wait());
        // another holder's acknowledgement does not count
        l.released(8, 1);
        let waited = r.wait();
        assert!(waited >= Duration::from_millis(45), "{waited:?}");
        assert!(waited < Duration::from_millis(500), "{waited:?}");
    }

    #[test]
    fn the_requesters_own_lease_is_dropped_without_a_callback() {
        let l = Leases::settled(Duration::from_millis(50), 100);
        l.grant("/x", h(1));
        let r = l.revoke(&[entry("/x")], h(1)).unwrap();
        assert!(!r.must_wait());
        assert_eq!(l.counts().held, 0);
    }

    #[test]
    fn a_full_table_grants_nothing_until_leases_end() {
        let l = Leases::settled(Duration::from_millis(20), 2);
        assert!(l.grant("/1", h(1)) > 0);
        assert!(l.grant("/2", h(1)) > 0);
        assert_eq!(l.grant("/3", h(1)), 0);
        std::thread::sleep(Duration::from_millis(30));
        assert!(l.grant("/3", h(1)) > 0);
        assert_eq!(l.counts().held, 1);
    }

    #[test]
    fn a_server_just_started_waits_out_its_former_leases() {
        let l = Leases::new(Duration::from_millis(50), 10, 0);
        assert!(l.would_call_back(&[entry("/x")], None));
        let mut r = l.revoke(&[entry("/x")], None).unwrap();
        let waited = r.wait();
        assert!(waited >= Duration::from_millis(40), "{waited:?}");
        drop(r);
        assert!(!l.would_call_back(&[entry("/x")], None));
    }

    #[test]
    fn without_leases_nothing_is_kept() {
        let l = Leases::new(Duration::ZERO, 2, 0);
        assert_eq!(l.grant("/1", h(1)), 0);
        assert!(l.revoke(&[entry("/1")], None).is_none());
        assert_eq!(l.grant("/1", None), 0);
    }
}
