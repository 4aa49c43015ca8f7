//! The client cache (docs/consistency.md, "The client cache"): answers of the servers this
//! process may give again without asking, each under a lease of the server that answered —
//! entries (attributes) and negative entries (no such name in a directory). One cache per
//! process, shared by its threads (a fork child starts empty).
//!
//! Coherence is the servers' business: before a change that makes a kept answer stale is
//! acknowledged, the server that granted the lease calls this process back (taken on the
//! way of its calls, `madfs_rpc::callbacks`), or waits until the lease is over. The process's
//! own changes forget what they touch before they are sent and again when they are answered;
//! an answer is kept only if nothing was forgotten while its request was under way
//! ([`generation`]). The cache never authorizes: a kept entry answers a stat only for the
//! user it was answered to, and opens still go to the servers.
//!
//! Bounded: at most [`Limits::entries`] entries and [`Limits::bytes`] bytes; a full cache drops
//! its expired entries, then the older half (and, for a directory's pages that would not fit
//! otherwise, everything else). `MADFS_CACHE=0` turns it off (every lookup is a
//! round trip, as before).

use madfs_proto::{Attr, Callback};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The cache's bounds (`MADFS_CACHE_ENTRIES`, `MADFS_CACHE_MIB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub entries: usize,
    pub bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: 1 << 20,
            bytes: 256 << 20,
        }
    }
}

/// Bytes an entry costs besides its path's characters: its slot in the map (key and value)
/// twice over, for the tree's or table's slack, and the allocator's share of the path's
/// allocation. Measured: a process that stats 10 million distinct paths stays within the
/// bound this counts (docs/consistency.md).
const ENTRY_COST: usize = 2 * std::mem::size_of::<(String, Entry)>() + 32;

struct Entry {
    /// `None`: no such entry (its parent a directory).
    attr: Option<Attr>,
    /// The user it was answered to.
    uid: u32,
    until: Instant,
}

/// A statahead page: one server's whole slice of a directory, with every entry's
/// attributes (`None`: ask the server, a file with several names), under one lease.
struct Page {
    uid: u32,
    until: Instant,
    entries: HashMap<String, Option<Attr>>,
}

/// The pages of one directory, by server.
type Pages = HashMap<u32, Page>;

struct Store {
    /// The [`FORKS`] it was made at (a fork child's parent's leases are not its own).
    forks: u64,
    /// Entries by cluster (a process may use several), then path.
    clusters: HashMap<u64, BTreeMap<String, Entry>>,
    /// Statahead pages by cluster, then directory.
    pages: HashMap<u64, HashMap<String, Pages>>,
    entries: usize,
    bytes: usize,
    limits: Limits,
}

static STORE: Mutex<Option<Store>> = Mutex::new(None);
/// Forks this process (or the one it was forked from) made: a fork child counts one more
/// (`pthread_atfork`), so telling a child needs no system call on the way of each lookup.
static FORKS: AtomicU64 = AtomicU64::new(0);
/// How many entries are kept (a copy of [`Store::entries`]): what a change of this process
/// may skip the lock for.
static KEPT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Bumped whenever something is forgotten: an answer whose request left before is not kept.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static REVOKED: AtomicU64 = AtomicU64::new(0);
/// The shortest lease seen, in milliseconds ([`shortest_lease`]).
static LEASE_MS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// Counters of this process's cache.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups sent to a server.
    pub misses: u64,
    /// Entries a server called back.
    pub revoked: u64,
    /// Entries kept now.
    pub entries: usize,
    /// Bytes they take (estimated).
    pub bytes: usize,
}

fn settings() -> &'static (bool, Limits) {
    static S: OnceLock<(bool, Limits)> = OnceLock::new();
    S.get_or_init(|| {
        let on = !matches!(
            std::env::var("MADFS_CACHE").as_deref(),
            Ok("0" | "off" | "no" | "false")
        );
        let mut l = Limits::default();
        if let Some(n) = env_usize("MADFS_CACHE_ENTRIES") {
            l.entries = n.max(1);
        }
        if let Some(m) = env_usize("MADFS_CACHE_MIB") {
            l.bytes = (m << 20).max(1 << 20);
        }
        (on, l)
    })
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.parse().ok()
}

/// Does this process keep answers (`MADFS_CACHE`, on by default)?
pub fn enabled() -> bool {
    settings().0
}

extern "C" fn forked() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

fn store() -> MutexGuard<'static, Option<Store>> {
    static AT_FORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only increments an atomic (async-signal-safe).
    AT_FORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forked));
    });
    let mut g = STORE.lock().unwrap_or_else(|e| e.into_inner());
    let forks = FORKS.load(Ordering::Relaxed);
    if g.as_ref().is_none_or(|s| s.forks != forks) {
        // first use, or a fork child: its parent's leases are not its own
        *g = Some(Store {
            forks,
            clusters: HashMap::new(),
            pages: HashMap::new(),
            entries: 0,
            bytes: 0,
            limits: settings().1,
        });
    }
    g
}

/// What must not have changed between a request and the keeping of its answer: the count
/// of forgettings that may change names (any of them makes an answer under way unfit to
/// keep), and of callbacks of attributes only (which make unfit only the answers about
/// what they name: [`Attrs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation {
    names: u64,
    attrs: u64,
}

/// What must not have changed between a request and the keeping of its answer.
pub fn generation() -> Generation {
    Generation {
        names: GENERATION.load(Ordering::Acquire),
        attrs: ATTRS_SEQ.load(Ordering::Acquire),
    }
}

/// The last paths servers called back for their attributes only, numbered: a change of
/// attributes (a directory's times after every create in it, a size) is called back again
/// and again while its holders keep their leases, and must not keep a statahead page of
/// another directory, fetched meanwhile, from being kept.
struct Attrs {
    seq: u64,
    last: std::collections::VecDeque<(u64, String)>,
    /// The highest number of a path no longer remembered.
    lost: u64,
}

/// Paths [`Attrs`] remembers: an answer whose request is older than the oldest is not kept.
const ATTRS_KEPT: usize = 64;

static ATTRS: Mutex<Attrs> = Mutex::new(Attrs {
    seq: 0,
    last: std::collections::VecDeque::new(),
    lost: 0,
});

/// [`Attrs::seq`], read without the lock on the way of every lookup.
static ATTRS_SEQ: AtomicU64 = AtomicU64::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Is an answer whose request left at `gen` still fit to keep, as far as the callbacks of
/// attributes since then go: `stale` says whether one such path makes it unfit.
fn fit(gen: Generation, stale: impl Fn(&str) -> bool) -> bool {
    if GENERATION.load(Ordering::Acquire) != gen.names {
        return false;
    }
    if ATTRS_SEQ.load(Ordering::Acquire) == gen.attrs {
        return true;
    }
    let a = lock(&ATTRS);
    if a.seq == gen.attrs {
        return true;
    }
    if a.lost > gen.attrs {
        return false; // more than it remembers
    }
    !a.last
        .iter()
        .filter(|(n, _)| *n > gen.attrs)
        .any(|(_, p)| stale(p))
}

/// A kept answer: the entry (`None`: no such entry), kept until `until` (its lease's end),
/// by a statahead page of its directory (`page`) or as an entry of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    pub attr: Option<Attr>,
    pub until: Instant,
    pub page: bool,
}

/// The kept answer of cluster `cluster` for `path` to user `uid`: `Some(None)` for a kept
/// absence.
pub fn get(cluster: u64, path: &str, uid: u32) -> Option<Option<Attr>> {
    lookup(cluster, path, None, uid).map(|k| k.attr)
}

/// The kept answer for normalised `path` of cluster `cluster` to user `uid`: its entry, or
/// with `server` (the server that holds the entry) the statahead page of its directory
/// from that server. One lock, one clock read.
pub fn lookup(cluster: u64, path: &str, server: Option<u32>, uid: u32) -> Option<Kept> {
    if !enabled() {
        return None;
    }
    let now = Instant::now();
    let g = store();
    let s = g.as_ref()?;
    let hit = s
        .clusters
        .get(&cluster)
        .and_then(|m| m.get(path))
        .filter(|e| e.uid == uid && e.until > now)
        .map(|e| Kept {
            attr: e.attr,
            until: e.until,
            page: false,
        })
        .or_else(|| {
            let (dir, name) = madfs_placement::split_parent(path)?;
            s.page_answer(cluster, dir, server?, name, uid, now)
        });
    drop(g);
    if hit.is_some() {
        HITS.fetch_add(1, Ordering::Relaxed);
    }
    hit
}

/// A lookup went to a server (counted as a miss).
pub fn missed() {
    MISSES.fetch_add(1, Ordering::Relaxed);
}

/// What a lookup answered: cluster, path, user, the answer.
pub struct Answer<'a> {
    pub cluster: u64,
    pub path: &'a str,
    pub uid: u32,
    pub attr: Option<Attr>,
}

/// Keeps answer `a` under a lease of `lease_ms` counted from `sent` (when its request
/// left), unless something was forgotten since [`generation`] was `gen`. Returns the
/// lease's end if it was kept.
pub fn put(a: Answer<'_>, sent: Instant, lease_ms: u32, gen: Generation) -> Option<Instant> {
    if lease_ms == 0 || !enabled() {
        return None;
    }
    LEASE_MS.fetch_min(lease_ms, Ordering::Relaxed);
    let until = sent + Duration::from_millis(lease_ms as u64);
    let mut g = store();
    let s = g.as_mut()?;
    if !fit(gen, |p| p == a.path) {
        return None;
    }
    let cost = a.path.len() + ENTRY_COST;
    if s.entries >= s.limits.entries || s.bytes + cost > s.limits.bytes {
        s.shrink();
    }
    let e = Entry {
        attr: a.attr,
        uid: a.uid,
        until,
    };
    let map = s.clusters.entry(a.cluster).or_default();
    if map.insert(a.path.to_owned(), e).is_none() {
        s.bytes += cost;
        s.entries += 1;
    }
    KEPT.store(s.entries, Ordering::Release);
    Some(until)
}

/// The shortest lease a server gave this process (what a thread that must be heard from
/// within a lease paces itself by); `None` before the first.
pub fn shortest_lease() -> Option<Duration> {
    match LEASE_MS.load(Ordering::Relaxed) {
        u32::MAX => None,
        ms => Some(Duration::from_millis(ms as u64)),
    }
}

impl Store {
    /// What the page of `dir` from `server` says of `name` (see [`page_get`]).
    fn page_answer(
        &self,
        cluster: u64,
        dir: &str,
        server: u32,
        name: &str,
        uid: u32,
        now: Instant,
    ) -> Option<Kept> {
        let p = self
            .pages
            .get(&cluster)?
            .get(dir)?
            .get(&server)
            .filter(|p| p.uid == uid && p.until > now)?;
        let attr = match p.entries.get(name) {
            None => None,
            Some(Some(a)) => Some(*a),
            Some(None) => return None,
        };
        Some(Kept {
            attr,
            until: p.until,
            page: true,
        })
    }

    /// Drops the expired entries, then, if still full, the older half.
    fn shrink(&mut self) {
        let now = Instant::now();
        self.retain(|e| e.until > now);
        if self.entries * 2 > self.limits.entries || self.bytes * 2 > self.limits.bytes {
            // the median end of a sample (no copy of every entry's)
            let step = (self.entries / 4096).max(1);
            let mut ends: Vec<Instant> = self
                .clusters
                .values()
                .flat_map(|m| m.values().map(|e| e.until))
                .step_by(step)
                .collect();
            if !ends.is_empty() {
                let mid = ends.len() / 2;
                let (_, median, _) = ends.select_nth_unstable(mid);
                let median = *median;
                self.retain(|e| e.until > median);
            }
        }
        if self.entries * 2 > self.limits.entries || self.bytes * 2 > self.limits.bytes {
            // still full: the pages go (statahead fetches them again)
            let pages = std::mem::take(&mut self.pages);
            drop(pages);
            self.retain(|_| true);
        }
    }

    /// Keeps the entries `keep` says to keep (expired pages go); recounts.
    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
        let now = Instant::now();
        let (mut n, mut bytes) = (0, 0);
        for dirs in self.pages.values_mut() {
            dirs.retain(|d, pages| {
                pages.retain(|_, p| p.until > now);
                for p in pages.values() {
                    n += p.entries.len();
                    bytes += d.len()
                        + p.entries
                            .keys()
                            .map(|k| k.len() + ENTRY_COST)
                            .sum::<usize>();
                }
                !pages.is_empty()
            });
        }
        self.pages.retain(|_, d| !d.is_empty());
        self.clusters.retain(|_, m| {
            m.retain(|k, e| {
                let kept = keep(e);
                if kept {
                    n += 1;
                    bytes += k.len() + ENTRY_COST;
                }
                kept
            });
            !m.is_empty()
        });
        (self.entries, self.bytes) = (n, bytes);
    }

    fn clear(&mut self) {
        self.clusters.clear();
        self.pages.clear();
        (self.entries, self.bytes) = (0, 0);
    }

    /// Forgets the pages of `dir` of `cluster` (with `below`, of the directories below it
    /// too): how many entries went.
    fn forget_pages(&mut self, cluster: u64, dir: &str, below: bool) -> usize {
        let Some(dirs) = self.pages.get_mut(&cluster) else {
            return 0;
        };
        let mut gone = 0;
        let mut drop_dir = |pages: Pages, key_len: usize| {
            for p in pages.values() {
                gone += p.entries.len();
                let bytes: usize = p.entries.keys().map(|k| k.len() + ENTRY_COST).sum();
                self.bytes = self.bytes.saturating_sub(bytes + key_len);
                self.entries = self.entries.saturating_sub(p.entries.len());
            }
        };
        if let Some(p) = dirs.remove(dir) {
            drop_dir(p, dir.len());
        }
        if below {
            let prefix = if dir == "/" {
                "/".to_string()
            } else {
                format!("{dir}/")
            };
            let under: Vec<String> = dirs
                .keys()
                .filter(|k| k.starts_with(&prefix))
                .cloned()
                .collect();
            for k in under {
                if let Some(p) = dirs.remove(&k) {
                    drop_dir(p, k.len());
                }
            }
        }
        gone
    }

    /// Forgets `path` of `cluster` (and with `below`, everything below it): how many.
    fn forget(&mut self, cluster: u64, path: &str, below: bool) -> usize {
        let Some(map) = self.clusters.get_mut(&cluster) else {
            return 0;
        };
        let mut gone: Vec<String> = Vec::new();
        if map.contains_key(path) {
            gone.push(path.to_owned());
        }
        if below {
            let (lo, hi) = if path == "/" {
                ("/".to_string(), "0".to_string())
            } else {
                (format!("{path}/"), format!("{path}0"))
            };
            gone.extend(map.range(lo..hi).map(|(k, _)| k.clone()));
        }
        for k in &gone {
            map.remove(k);
            self.entries -= 1;
            self.bytes = self.bytes.saturating_sub(k.len() + ENTRY_COST);
        }
        gone.len()
    }
}

/// Forgets what this process kept of `path` of `cluster` and below it, and the page of
/// its directory (its own change). The directory's own entry stays: its times follow the
/// change, after it is acknowledged (docs/consistency.md, "Directory times"), and are
/// called back then.
pub fn forget(cluster: u64, path: &str) {
    if path.is_empty() || !enabled() {
        return;
    }
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if KEPT.load(Ordering::Acquire) == 0 {
        return;
    }
    if let Some(s) = store().as_mut().filter(|s| s.entries > 0) {
        s.forget(cluster, path, true);
        if !s.pages.is_empty() {
            s.forget_pages(cluster, path, true);
            if let Some((dir, _)) = madfs_placement::split_parent(path) {
                s.forget_pages(cluster, dir, false);
            }
        }
    }
}

/// The answer a statahead page of cluster `cluster` kept for `name` in `dir` (its entry is
/// on server `server`), to user `uid`: `Some(None)` when the page says there is no such
/// entry; `None` when no page covers it (or it must be asked for).
pub fn page_get(
    cluster: u64,
    dir: &str,
    server: u32,
    name: &str,
    uid: u32,
) -> Option<Option<Attr>> {
    if !enabled() {
        return None;
    }
    let hit = store()
        .as_ref()?
        .page_answer(cluster, dir, server, name, uid, Instant::now())
        .map(|k| k.attr);
    if hit.is_some() {
        HITS.fetch_add(1, Ordering::Relaxed);
    }
    hit
}

/// Has this process a page of `dir` (any server's, still under its lease)?
pub fn has_pages(cluster: u64, dir: &str) -> bool {
    let now = Instant::now();
    store()
        .as_ref()
        .and_then(|s| s.pages.get(&cluster)?.get(dir))
        .is_some_and(|pages| pages.values().any(|p| p.until > now))
}

/// Keeps statahead pages of `dir` of cluster `cluster` for user `uid`: each server's whole
/// slice, under a lease until `until`, unless something was forgotten since
/// [`generation`] was `gen`. Returns whether they were kept (not when they would not fit).
pub fn pages_put(
    cluster: u64,
    dir: &str,
    uid: u32,
    slices: Vec<(u32, HashMap<String, Option<Attr>>)>,
    until: Instant,
    gen: Generation,
) -> bool {
    if !enabled() || slices.is_empty() {
        return false;
    }
    let mut g = store();
    let Some(s) = g.as_mut() else {
        return false;
    };
    // (an entry of the directory, or its page)
    let mine = |p: &str| {
        p.strip_suffix('/') == Some(dir)
            || madfs_placement::split_parent(p).is_some_and(|(d, _)| d == dir)
    };
    if !fit(gen, mine) {
        return false;
    }
    let n: usize = slices.iter().map(|(_, e)| e.len()).sum();
    let bytes: usize = slices
        .iter()
        .flat_map(|(_, e)| e.keys().map(|k| k.len() + ENTRY_COST))
        .sum::<usize>()
        + dir.len();
    if n > s.limits.entries || bytes > s.limits.bytes {
        return false;
    }
    if s.entries + n > s.limits.entries || s.bytes + bytes > s.limits.bytes {
        s.shrink();
        if s.entries + n > s.limits.entries || s.bytes + bytes > s.limits.bytes {
            // the pages of the directory being walked matter most
            s.clear();
        }
    }
    s.forget_pages(cluster, dir, false);
    let pages = s
        .pages
        .entry(cluster)
        .or_default()
        .entry(dir.to_owned())
        .or_default();
    for (server, entries) in slices {
        pages.insert(
            server,
            Page {
                uid,
                until,
                entries,
            },
        );
    }
    s.entries += n;
    s.bytes += bytes;
    KEPT.store(s.entries, Ordering::Release);
    true
}

/// A callback of a server of cluster `cluster`: forgets what it names
/// (`madfs_rpc::callbacks::Handler`).
pub fn on_callback(cluster: u64, cb: &Callback<'_>) {
    if cb.all || !cb.paths.is_empty() {
        GENERATION.fetch_add(1, Ordering::AcqRel);
    }
    if !cb.attrs.is_empty() {
        let mut a = lock(&ATTRS);
        a.seq += 1;
        let seq = a.seq;
        ATTRS_SEQ.store(seq, Ordering::Release);
        for p in &cb.attrs {
            if a.last.len() >= ATTRS_KEPT {
                if let Some((n, _)) = a.last.pop_front() {
                    a.lost = n;
                }
            }
            a.last.push_back((seq, p.to_string()));
        }
    }
    let mut g = store();
    let Some(s) = g.as_mut() else {
        return;
    };
    let n = if cb.all {
        let n = s.clusters.remove(&cluster).map_or(0, |m| m.len());
        s.pages.remove(&cluster);
        s.retain(|_| true);
        n
    } else {
        cb.paths
            .iter()
            .chain(&cb.attrs)
            .map(|p| match p.strip_suffix('/') {
                // a page: `dir/` (the root's: `//`)
                Some(dir) if !dir.is_empty() => {
                    let dir = if dir == "/" { "/" } else { dir };
                    s.forget_pages(cluster, dir, false)
                }
                _ => s.forget(cluster, p, false),
            })
            .sum()
    };
    REVOKED.fetch_add(n as u64, Ordering::Relaxed);
}

/// This process's counters.
pub fn counts() -> Counts {
    let (entries, bytes) = store().as_ref().map_or((0, 0), |s| (s.entries, s.bytes));
    Counts {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        revoked: REVOKED.load(Ordering::Relaxed),
        entries,
        bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(size: u64) -> Attr {
        Attr {
            size,
            ..Default::default()
        }
    }

    fn put_at(path: &str, uid: u32, attr: Option<Attr>, sent: Instant, gen: Generation) {
        let a = Answer {
            cluster: 9,
            path,
            uid,
            attr,
        };
        put(a, sent, 10_000, gen);
    }

    #[test]
    fn kept_answers_end_with_their_lease_and_go_with_what_is_forgotten() {
        let now = Instant::now();
        let g = generation();
        put_at("/t1/a", 5, Some(attr(1)), now, g);
        put_at("/t1/a/b", 5, None, now, g);
        put_at("/t1/ab", 5, None, now, g);
        put_at("/t1/old", 5, None, now - Duration::from_secs(20), g);
        assert_eq!(get(9, "/t1/a", 5).map(|a| a.map(|a| a.size)), Some(Some(1)));
        assert_eq!(get(8, "/t1/a", 5), None, "another cluster's");
        assert_eq!(get(9, "/t1/a", 6), None, "another user's answer");
        assert_eq!(get(9, "/t1/a/b", 5), Some(None));
        assert_eq!(get(9, "/t1/old", 5), None, "lease over");
        forget(9, "/t1/a");
        assert_eq!(get(9, "/t1/a", 5), None);
        assert_eq!(get(9, "/t1/a/b", 5), None);
        assert_eq!(get(9, "/t1/ab", 5), Some(None));
        // an answer whose request left before something was forgotten is not kept
        put_at("/t1/late", 5, None, now, g);
        assert_eq!(get(9, "/t1/late", 5), None);
        on_callback(
            9,
            &Callback {
                id: 1,
                paths: vec!["/t1/ab"],
                all: false,
                attrs: vec![],
            },
        );
        assert_eq!(get(9, "/t1/ab", 5), None);
    }

    #[test]
    fn pages_answer_for_their_directory_and_go_with_its_changes() {
        let g = generation();
        let until = Instant::now() + Duration::from_secs(10);
        let mut slice = HashMap::new();
        slice.insert("a".to_string(), Some(attr(3)));
        slice.insert("linked".to_string(), None);
        assert!(pages_put(7, "/pg", 5, vec![(1, slice)], until, g));
        assert_eq!(
            page_get(7, "/pg", 1, "a", 5).map(|a| a.map(|a| a.size)),
            Some(Some(3))
        );
        assert_eq!(page_get(7, "/pg", 1, "zz", 5), Some(None), "no such entry");
        assert_eq!(page_get(7, "/pg", 1, "linked", 5), None, "to be asked");
        assert_eq!(
            page_get(7, "/pg", 2, "a", 5),
            None,
            "another server's slice"
        );
        assert_eq!(page_get(7, "/pg", 1, "a", 6), None, "another user");
        // a change of an entry of the directory (this process's) takes the page
        forget(7, "/pg/b");
        assert_eq!(page_get(7, "/pg", 1, "a", 5), None);
        // and a callback of the page
        let g = generation();
        let mut slice = HashMap::new();
        slice.insert("a".to_string(), Some(attr(3)));
        assert!(pages_put(7, "/pg", 5, vec![(1, slice)], until, g));
        on_callback(
            7,
            &Callback {
                id: 2,
                paths: vec![],
                all: false,
                attrs: vec!["/pg/"],
            },
        );
        assert_eq!(page_get(7, "/pg", 1, "a", 5), None);
    }

    #[test]
    fn a_callback_of_attributes_spoils_only_what_it_names() {
        let until = Instant::now() + Duration::from_secs(10);
        let slice = || vec![(1, HashMap::from([("a".to_string(), Some(attr(3)))]))];
        let attrs = |paths: Vec<&'static str>| Callback {
            id: 3,
            paths: vec![],
            all: false,
            attrs: paths,
        };
        // the directory's own times and its parent's page: its page is still fit
        let g = generation();
        on_callback(6, &attrs(vec!["/at", "//"]));
        assert!(pages_put(6, "/at", 5, slice(), until, g));
        // an entry of the directory: not
        let g = generation();
        on_callback(6, &attrs(vec!["/at/a", "/at/"]));
        assert!(!pages_put(6, "/at", 5, slice(), until, g));
        // an entry's own answer, under way while it was called back
        let g = generation();
        on_callback(6, &attrs(vec!["/at/b"]));
        let a = |path| Answer {
            cluster: 6,
            path,
            uid: 5,
            attr: None,
        };
        assert_eq!(put(a("/at/b"), Instant::now(), 10_000, g), None);
        assert!(put(a("/at/c"), Instant::now(), 10_000, g).is_some());
    }

    #[test]
    fn a_full_cache_stays_within_its_bounds() {
        let mut s = Store {
            forks: 0,
            clusters: HashMap::new(),
            pages: HashMap::new(),
            entries: 0,
            bytes: 0,
            limits: Limits {
                entries: 1000,
                bytes: 1 << 20,
            },
        };
        let now = Instant::now();
        for i in 0..10_000u64 {
            let p = format!("/full/{i}");
            if s.entries >= s.limits.entries {
                s.shrink();
            }
            let e = Entry {
                attr: None,
                uid: 0,
                until: now + Duration::from_millis(i),
            };
            s.clusters.entry(1).or_default().insert(p.clone(), e);
            s.entries += 1;
            s.bytes += p.len() + ENTRY_COST;
            assert!(s.entries <= 1000);
        }
        // the newest are kept
        assert!(s.clusters[&1].contains_key("/full/9999"));
        assert!(s.forget(1, "/full", true) > 0);
        assert_eq!(s.entries, 0);
    }
}
