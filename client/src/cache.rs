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
//! its expired entries, then the older half. `MADFS_CACHE=0` turns it off (every lookup is a
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
            entries: 262_144,
            bytes: 64 << 20,
        }
    }
}

/// Bytes an entry costs besides its path (the map's node share, the entry).
const ENTRY_COST: usize = 96;

struct Entry {
    /// `None`: no such entry (its parent a directory).
    attr: Option<Attr>,
    /// The user it was answered to.
    uid: u32,
    until: Instant,
}

struct Store {
    pid: i32,
    /// Entries by cluster (a process may use several), then path.
    clusters: HashMap<u64, BTreeMap<String, Entry>>,
    entries: usize,
    bytes: usize,
    limits: Limits,
}

static STORE: Mutex<Option<Store>> = Mutex::new(None);
/// Bumped whenever something is forgotten: an answer whose request left before is not kept.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static REVOKED: AtomicU64 = AtomicU64::new(0);

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

fn store() -> MutexGuard<'static, Option<Store>> {
    let mut g = STORE.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    if g.as_ref().is_none_or(|s| s.pid != pid) {
        // first use, or a fork child: its parent's leases are not its own
        *g = Some(Store {
            pid,
            clusters: HashMap::new(),
            entries: 0,
            bytes: 0,
            limits: settings().1,
        });
    }
    g
}

/// What must not have changed between a request and the keeping of its answer.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The kept answer of cluster `cluster` for `path` to user `uid`: `Some(None)` for a kept
/// absence.
pub fn get(cluster: u64, path: &str, uid: u32) -> Option<Option<Attr>> {
    if !enabled() {
        return None;
    }
    let g = store();
    let hit = g
        .as_ref()
        .and_then(|s| s.clusters.get(&cluster)?.get(path))
        .filter(|e| e.uid == uid && e.until > Instant::now())
        .map(|e| e.attr);
    drop(g);
    match hit {
        Some(_) => HITS.fetch_add(1, Ordering::Relaxed),
        None => MISSES.fetch_add(1, Ordering::Relaxed),
    };
    hit
}

/// What a lookup answered: cluster, path, user, the answer.
pub struct Answer<'a> {
    pub cluster: u64,
    pub path: &'a str,
    pub uid: u32,
    pub attr: Option<Attr>,
}

/// Keeps answer `a` under a lease of `lease_ms` counted from `sent` (when its request
/// left), unless something was forgotten since [`generation`] was `gen`.
pub fn put(a: Answer<'_>, sent: Instant, lease_ms: u32, gen: u64) {
    if lease_ms == 0 || !enabled() {
        return;
    }
    let until = sent + Duration::from_millis(lease_ms as u64);
    let mut g = store();
    let Some(s) = g.as_mut() else {
        return;
    };
    if generation() != gen {
        return;
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
}

impl Store {
    /// Drops the expired entries, then, if still full, the older half.
    fn shrink(&mut self) {
        let now = Instant::now();
        self.retain(|e| e.until > now);
        if self.entries * 2 > self.limits.entries || self.bytes * 2 > self.limits.bytes {
            let mut ends: Vec<Instant> = self
                .clusters
                .values()
                .flat_map(|m| m.values().map(|e| e.until))
                .collect();
            let mid = ends.len() / 2;
            let (_, median, _) = ends.select_nth_unstable(mid);
            let median = *median;
            self.retain(|e| e.until > median);
        }
    }

    /// Keeps the entries `keep` says to keep; recounts.
    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
        let (mut n, mut bytes) = (0, 0);
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
        (self.entries, self.bytes) = (0, 0);
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

/// Forgets what this process kept of `path` of `cluster` and below it (its own change).
pub fn forget(cluster: u64, path: &str) {
    if path.is_empty() || !enabled() {
        return;
    }
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = store().as_mut() {
        s.forget(cluster, path, true);
    }
}

/// Forgets everything.
pub fn forget_all() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = store().as_mut() {
        s.clear();
    }
}

/// A callback of a server of cluster `cluster`: forgets what it names
/// (`madfs_rpc::callbacks::Handler`).
pub fn on_callback(cluster: u64, cb: &Callback<'_>) {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    let mut g = store();
    let Some(s) = g.as_mut() else {
        return;
    };
    let n = if cb.all {
        let n = s.clusters.remove(&cluster).map_or(0, |m| m.len());
        s.retain(|_| true);
        n
    } else {
        cb.paths.iter().map(|p| s.forget(cluster, p, false)).sum()
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

    fn put_at(path: &str, uid: u32, attr: Option<Attr>, sent: Instant, gen: u64) {
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
            },
        );
        assert_eq!(get(9, "/t1/ab", 5), None);
    }

    #[test]
    fn a_full_cache_stays_within_its_bounds() {
        let mut s = Store {
            pid: 0,
            clusters: HashMap::new(),
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
