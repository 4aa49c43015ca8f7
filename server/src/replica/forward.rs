//! Copies of every change (docs/redundancy.md, "Primaries and fencing"): a request is served
//! only by its replica set's primary in the map; what serving it writes (each metadata write
//! batch, each chunk write, truncate, punch and removal) goes to the set's secondaries
//! before the request is answered, and a secondary takes it only from the primary its own
//! map names.
//!
//! The copies are made where the stores write (the store's tap, `super::tap::Copies`:
//! [`batch`], [`chunk`]), on the thread that serves the request, inside the store's own locks: two
//! changes of one key reach the secondaries in the order the primary made them. The store
//! knows nothing of this: replication installs its tap. Requests of a replicated cluster are
//! therefore served on IO threads (never on the net thread, which must stay free to take
//! the copies other primaries send: a ring of servers each waiting for the next would
//! otherwise stop).

use super::map::ClusterMap;
use super::Node;
use crate::peer::Peers;
use crate::who::Who;
use madfs_proto::{Errno, FsResult, ReplOp, Request, Role};
use madfs_store::chunks::FsChunks;
use madfs_store::rocks::RocksMeta;
use madfs_store::{ChunkStore, MetadataStore};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A replicated cluster's side of the request path (`Server::replica`).
pub struct Replication {
    /// The replication factor (≥ 2).
    pub r: u32,
    pub(super) me: u32,
    node: Arc<OnceLock<Arc<Node>>>,
    /// The control port's runtime, where the Raft node runs.
    handle: OnceLock<tokio::runtime::Handle>,
    /// Requests being served, by the map epoch they were admitted in (a rejoining server's
    /// copy starts once those of older epochs, which do not copy to it, are over).
    inflight: Mutex<BTreeMap<u64, usize>>,
    /// While this server catches up (`super::rejoin`): the copies it was sent meanwhile.
    pub(super) catching: Mutex<Option<Catching>>,
    /// The sets a removal gave this server that it has copied, until the map says so
    /// (locked after `catching`): their copies are not kept aside again meanwhile.
    pub(super) built: Mutex<Vec<u32>>,
    /// The map this server last admitted a request with (`Leases` of client caches: whether
    /// it took a set over from a server still up, [`Replication::took_over`]) ...
    led: Mutex<Option<ClusterMap>>,
    /// ... its epoch + 1 (0: none yet) ...
    led_epoch: AtomicU64,
    /// ... and when it last took a set over from a server still up (nanoseconds after
    /// `born`; 0: never), and how long that server may have gone on granting leases after
    /// then (nanoseconds).
    took_over: AtomicU64,
    took_lag: AtomicU64,
    /// When this server's last rejoin finished its copy (nanoseconds after `born`; 0: none
    /// not yet used): no lease of its sets was granted after then ([`Target::rejoining`]).
    caught_up: AtomicU64,
    born: Instant,
}

/// What a catching-up server was sent while it copies: metadata batches, applied after the
/// copy (in order: each is idempotent but for entry counts, which are counted again), and
/// the chunk ranges already written, which the copy leaves alone.
#[derive(Default)]
pub struct Catching {
    /// The sets whose copies are kept (empty: every set's, a rejoin).
    pub(super) sets: Vec<u32>,
    pub(super) batches: Vec<(Vec<u8>, bool)>,
    pub(super) touched: HashMap<u64, Touched>,
}

/// Chunk changes of one file sent to a catching-up server.
#[derive(Default)]
pub struct Touched {
    /// Ranges written or punched.
    pub(super) ranges: Vec<(u64, u64)>,
    /// Cut to this size (the least of the cuts).
    pub(super) cut: Option<u64>,
    /// Removed.
    pub(super) removed: bool,
}

/// Where the changes of the request being served on this thread go.
#[derive(Clone, Debug)]
pub struct Target {
    set: u32,
    epoch: u64,
    to: Vec<u32>,
    /// A member of the set is rejoining: no lease of a client cache is granted on it (the
    /// rejoining server, once up, takes the set back and waits out only what was granted
    /// before its copy: [`Replication::caught_up`]).
    rejoining: bool,
}

/// A request's copies: where they go, and how.
type Copying = (Target, Arc<Peers>, Arc<Replication>);

/// Records of a rejoining server's copy, and the key to go on after (`None`: done).
pub type Records = (Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>);

/// What a primary reads a rejoining server's copy from.
pub struct Stores<'a> {
    pub meta: &'a RocksMeta,
    pub chunks: &'a FsChunks,
    /// Where every key lives.
    pub layout: &'a madfs_placement::Layout,
    /// The cluster's chunk size.
    pub chunk_size: u32,
    /// Largest page of records.
    pub max_bytes: usize,
}

/// A page asked for by a rejoining server (`Request::Resync`).
pub struct Page<'a> {
    pub set: u32,
    pub epoch: u64,
    pub after: &'a [u8],
    pub max_bytes: u32,
    pub files: bool,
    pub after_id: u64,
}

thread_local! {
    static TARGET: RefCell<Option<Copying>> = const { RefCell::new(None) };
    /// The replica set of the request being served on this thread, and the map epoch it
    /// was admitted in.
    static SET: std::cell::Cell<Option<(u32, u64)>> = const { std::cell::Cell::new(None) };
    /// Did the request being served on this thread change anything (the accept log)?
    static WROTE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How long a secondary's map may lag behind a primary's (EAGAIN) before a copy fails.
const LAG: Duration = Duration::from_secs(2);

impl Target {
    /// The replica set served.
    pub fn set(&self) -> u32 {
        self.set
    }

    /// The map epoch it was admitted in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Does a member of the set rejoin (no lease is granted on it)?
    pub fn rejoining(&self) -> bool {
        self.rejoining
    }
}

impl Replication {
    /// Replication `r` for server `me`; `node` is filled in once the map's Raft node runs.
    pub fn new(r: u32, me: u32, node: Arc<OnceLock<Arc<Node>>>) -> Self {
        Replication {
            r,
            me,
            node,
            handle: OnceLock::new(),
            inflight: Mutex::default(),
            catching: Mutex::default(),
            built: Mutex::default(),
            led: Mutex::default(),
            led_epoch: AtomicU64::new(0),
            took_over: AtomicU64::new(0),
            took_lag: AtomicU64::new(0),
            caught_up: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    /// Notes the map requests are admitted with from now on.
    fn lead_with(&self, map: &ClusterMap) {
        if self.led_epoch.load(Acquire) == map.epoch + 1 {
            return;
        }
        let mut led = self.led.lock().unwrap_or_else(|e| e.into_inner());
        if led.as_ref().is_some_and(|m| m.epoch >= map.epoch) {
            return;
        }
        if super::map::takes_over_from_live(led.as_ref(), map, self.me, self.r) {
            // after this server's own rejoin: what its partners granted before its copy
            // (from then on they granted nothing on its sets); else from now, and as long as
            // they may go on serving
            let (at, lag) = match self.caught_up.swap(0, AcqRel) {
                0 => (
                    self.born.elapsed().as_nanos().max(1) as u64,
                    self.serving_lag(),
                ),
                at => (at, Duration::ZERO),
            };
            self.took_lag.store(lag.as_nanos() as u64, Release);
            self.took_over.store(at, Release);
            tracing::info!(
                "cluster map epoch {}: a replica set taken back from a server still up; \
                 changes wait out the leases it may have granted (until {:?} from now)",
                map.epoch,
                (self.born + Duration::from_nanos(at) + lag)
                    .saturating_duration_since(Instant::now())
            );
        }
        *led = Some(map.clone());
        self.led_epoch.store(map.epoch + 1, Release);
    }

    /// When this server last took a replica set over from a server still up (whose leases
    /// of client caches it does not know), and how long after that the other may have gone
    /// on granting them, if it ever did.
    pub fn took_over(&self) -> Option<(Instant, Duration)> {
        match self.took_over.load(Acquire) {
            0 => None,
            ns => Some((
                self.born + Duration::from_nanos(ns),
                Duration::from_nanos(self.took_lag.load(Acquire)),
            )),
        }
    }

    /// This server's rejoin copied everything (`done`: it asks to be up next; the sets'
    /// primaries granted no lease on them since they served the copy), or did not get to
    /// be up after all (`!done`).
    pub(super) fn caught_up_now(&self, done: bool) {
        let at = if done {
            self.born.elapsed().as_nanos().max(1) as u64
        } else {
            0
        };
        self.caught_up.store(at, Release);
    }

    /// How long a server that lost a set may go on serving it ([`super::serving_lag`]).
    pub fn serving_lag(&self) -> Duration {
        super::serving_lag(self.copy_timeout())
    }

    /// How long a secondary may take to take a copy: `--down-after-ms` (then it is given up
    /// on: [`Replication::give_up_on`]).
    fn copy_timeout(&self) -> Duration {
        self.node
            .get()
            .map_or(Duration::from_millis(1500), |n| n.settings().down_after)
    }

    /// The runtime the Raft node runs in (to ask it from IO threads).
    pub fn set_handle(&self, h: tokio::runtime::Handle) {
        let _ = self.handle.set(h);
    }

    /// Commits map change `c` through the Raft leader (from a thread outside its runtime).
    pub(super) fn propose(&self, c: super::map::Change) -> Result<super::Applied, String> {
        let node = self.node().map_err(|e| e.to_string())?.clone();
        let h = self.handle.get().ok_or("no runtime")?;
        h.block_on(async move { node.propose_change(c).await })
    }

    /// Waits until every request admitted in a map epoch before `epoch` is over (≤ [`LAG`]):
    /// from then on every change of a set reaches the members `epoch`'s map names.
    fn settled(&self, epoch: u64) -> FsResult<()> {
        let until = Instant::now() + LAG;
        loop {
            let oldest = self
                .inflight
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .find(|(_, n)| **n > 0)
                .map(|(e, _)| *e);
            if oldest.is_none_or(|e| e >= epoch) {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(Errno::EAGAIN);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A rejoining server's page of replica set `page.set` (`Request::Resync`), served by
    /// the set's primary once the requests of epochs before `page.epoch` are over: records
    /// and where to go on after.
    pub fn resync_page(
        &self,
        stores: &Stores<'_>,
        who: &Who,
        page: &Page<'_>,
    ) -> FsResult<Records> {
        let set = page.set;
        if who.role != Role::Peer || who.set.unwrap_or(self.me) != set {
            return Err(Errno::EPERM);
        }
        let node = self.node()?;
        if !node.current() || node.map().primary(set, self.r) != Some(self.me) {
            return Err(Errno::EREMCHG);
        }
        if node.map().epoch < page.epoch {
            return Err(Errno::EAGAIN);
        }
        self.settled(page.epoch)?;
        let max = (page.max_bytes as usize).clamp(4096, stores.max_bytes);
        if page.files {
            return files_page(stores, set, page.after, page.after_id);
        }
        stores
            .meta
            .records_of_set(stores.layout, set, page.after, max)
    }

    pub(super) fn node(&self) -> FsResult<&Arc<Node>> {
        // not started yet: nothing is served before the map is known
        self.node.get().ok_or(Errno::EREMCHG)
    }

    /// The map's epoch and each server's state (0 up, 1 down, 2 rejoining, 3 removed).
    pub fn map_states(&self, servers: u32) -> (u64, Vec<u8>) {
        let m = self.map(servers);
        (m.epoch, m.state_codes())
    }

    /// Has the map server `s` down?
    fn is_down(&self, s: u32) -> bool {
        self.node.get().is_some_and(|n| {
            matches!(
                n.map().state(s),
                super::map::State::Down | super::map::State::Removed
            )
        })
    }

    /// Does this server know the current map ([`Node::current`])?
    pub fn current(&self) -> bool {
        self.node.get().is_some_and(|n| n.current())
    }

    /// The map as this server knows it (all up, epoch 0, before the node runs).
    pub fn map(&self, servers: u32) -> ClusterMap {
        self.node
            .get()
            .map_or_else(|| ClusterMap::new(servers), |n| n.map())
    }

    /// May this server serve `req` from `who`? The copies' target when it may (a request of
    /// the set whose primary this server is, in a map it knows to be current); EREMCHG
    /// otherwise (the client asks for the map and goes to the primary it names).
    pub fn admit(&self, who: &Who, req: &Request<'_>) -> FsResult<Option<Target>> {
        // (copies and catch-ups check what they are sent by themselves)
        if matches!(
            req,
            Request::Map
                | Request::Ping
                | Request::Bye
                | Request::Replicate { .. }
                | Request::Resync { .. }
                | Request::ResyncRead { .. }
        ) {
            return Ok(None);
        }
        let node = self.node()?;
        if !node.current() {
            return Err(Errno::EREMCHG);
        }
        let map = node.map();
        self.lead_with(&map);
        let set = who.set.unwrap_or(self.me);
        if map.primary(set, self.r) != Some(self.me) {
            return Err(Errno::EREMCHG);
        }
        let to = map.secondaries(set, self.r);
        Ok(Some(Target {
            set,
            epoch: map.epoch,
            rejoining: to
                .iter()
                .any(|m| map.state(*m) == super::map::State::Rejoining),
            to,
        }))
    }

    /// Applies a primary's change (`Request::Replicate`) on this secondary.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &self,
        meta: &RocksMeta,
        chunks: &FsChunks,
        who: &Who,
        set: u32,
        epoch: u64,
        from: u32,
        op: ReplOp,
        bulk: &[u8],
    ) -> FsResult<()> {
        if who.role != Role::Peer {
            return Err(Errno::EPERM);
        }
        let map = self.node()?.map();
        let member = map.secondaries(set, self.r).contains(&self.me);
        if map.primary(set, self.r) != Some(from) || !member {
            // the sender's map is newer: this server learns it shortly
            return Err(if epoch > map.epoch {
                Errno::EAGAIN
            } else {
                Errno::EREMCHG
            });
        }
        let mut catching = self.catching.lock().unwrap_or_else(|e| e.into_inner());
        let building = map.building.contains(&(set, self.me));
        let built = || {
            let b = self.built.lock().unwrap_or_else(|e| e.into_inner());
            b.contains(&set)
        };
        if building && catching.is_none() && !built() {
            // a set a removal gave this server: what it is sent waits for its copy
            // (`rejoin`), even when it comes before the copy starts
            *catching = Some(Catching {
                sets: map.building_of(self.me),
                ..Catching::default()
            });
        }
        let kept = |c: &Catching| c.sets.is_empty() || c.sets.contains(&set);
        let caught_up = match catching.as_mut().filter(|c| kept(c)) {
            // catching up: batches wait for the copy; chunk changes are made (under the
            // lock: never interleaved with the copy's writes) and noted
            Some(c) => {
                let t = &mut c.touched;
                match op {
                    ReplOp::Batch { synced } => {
                        c.batches.push((bulk.to_vec(), synced));
                        return Ok(());
                    }
                    ReplOp::Write { id, pos } => t
                        .entry(id)
                        .or_default()
                        .ranges
                        .push((pos, bulk.len() as u64)),
                    ReplOp::Punch { id, pos, len } => {
                        t.entry(id).or_default().ranges.push((pos, len))
                    }
                    ReplOp::Truncate { id, size } => {
                        let cut = &mut t.entry(id).or_default().cut;
                        *cut = Some(cut.map_or(size, |c| c.min(size)));
                    }
                    ReplOp::Remove { id } => t.entry(id).or_default().removed = true,
                    ReplOp::Sync { .. } => {}
                }
                false
            }
            None => true,
        };
        let _held = if caught_up {
            drop(catching);
            None
        } else {
            Some(catching)
        };
        match op {
            ReplOp::Batch { synced } => meta.apply_batch(bulk, synced)?,
            ReplOp::Write { id, pos } => chunks.write(id, pos, bulk)?,
            ReplOp::Truncate { id, size } => chunks.truncate(id, size)?,
            ReplOp::Punch { id, pos, len } => chunks.punch(id, pos, len)?,
            ReplOp::Remove { id } => {
                chunks.remove(id)?;
            }
            ReplOp::Sync { id } => {
                let wal = meta.mark();
                match id {
                    Some(id) => chunks.sync(id)?,
                    None => chunks.sync_all()?,
                }
                meta.sync(wal)?;
            }
        }
        Ok(())
    }

    /// The sets of removed servers whose slots replica set `set` took (each removed
    /// server's slots went to the next member on the ring).
    pub fn took_from(&self, set: u32) -> Vec<u32> {
        let Ok(node) = self.node() else {
            return vec![];
        };
        let map = node.map();
        (0..map.states.len() as u32)
            .filter(|d| !map.member(*d) && map.set(*d, 2).nth(1) == Some(set))
            .collect()
    }

    /// From now on, copies of replica sets `sets` (empty: of every set) sent to this
    /// server are kept aside while it copies them (`rejoin`), if copies are not kept already.
    pub(super) fn keep_copies_of(&self, sets: &[u32]) {
        let mut c = self.catching.lock().unwrap_or_else(|e| e.into_inner());
        if c.is_none() {
            *c = Some(Catching {
                sets: sets.to_vec(),
                ..Catching::default()
            });
        }
    }

    /// Secondary `to` did not take a copy in time (`--down-after-ms`): it counts as a live
    /// replica until the map says it is not up any more, so the copy is done once it does.
    /// The leader's watch marks a dead server down; a live one that cannot keep up is
    /// proposed down here after twice `--down-after-ms` (and again until the map has it,
    /// for up to four election timeouts more: a dead leader is replaced first, and a
    /// crowded machine makes both slow); it catches up when it rejoins. EIO only when the
    /// map could not be changed within that bound.
    fn give_up_on(&self, to: u32) -> FsResult<()> {
        let node = self.node()?;
        // down, or already rejoining (its catch-up copies what this request wrote)
        let gone = |n: &Node| n.map().state(to) != super::map::State::Up;
        let s = node.settings();
        let wait = Instant::now() + s.down_after * 2;
        while Instant::now() < wait {
            if gone(node) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let until = Instant::now() + s.election * 4;
        let mut said = false;
        loop {
            if gone(node) {
                return Ok(());
            }
            if Instant::now() >= until {
                tracing::warn!("replica: server {to} takes no copies and could not be marked down");
                return Err(Errno::EIO);
            }
            if let Some(h) = self.handle.get() {
                let n = node.clone();
                let proposed = h.block_on(async move {
                    tokio::time::timeout(PROPOSE_WAIT, n.propose_down(to)).await
                });
                match proposed {
                    Ok(Err(e)) if !said => {
                        said = true;
                        tracing::info!("replica: marking server {to} down: {e} (trying again)");
                    }
                    _ => {}
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Bytes of chunk extents (16 each) per page of a rejoining server's file listing: one file
/// alone may have tens of thousands (a sparse file written in pieces), more than a reply
/// holds, so a page may end inside a file.
const FILES_PAGE: usize = 32 << 10;

/// A page of the data extents of replica set `set`'s chunks (`Request::Resync` with
/// `files`): records (file id, extents as position and length), in file id order, from the
/// cursor `after` (a file id and a byte position in it: the `next` of the page before) or,
/// on the first page, from the files after `after_id`.
fn files_page(stores: &Stores<'_>, set: u32, after: &[u8], after_id: u64) -> FsResult<Records> {
    let le = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    let (from, from_pos) = match after.len() {
        16 => (le(&after[..8]), le(&after[8..])),
        0 => (after_id.saturating_add(1), 0),
        _ => return Err(Errno::EINVAL),
    };
    let (lay, cs) = (stores.layout, stores.chunk_size as u64);
    let mut records = vec![];
    let mut bytes = 0;
    for (id, _) in stores
        .chunks
        .ids()?
        .into_iter()
        .filter(|(id, _)| *id >= from)
    {
        let mut v = vec![];
        for (p, l) in stores.chunks.extents(id)? {
            // only the chunks of `set`: a chunk file holds those of every set this server
            // belongs to, and its data extents are whole blocks (a block shared with
            // another set's chunk would copy zeros over its data)
            for (a, b) in super::of_sets(id, p, p + l, cs, lay, &[set]) {
                let a = if id == from { a.max(from_pos) } else { a };
                if a >= b {
                    continue;
                }
                if bytes + v.len() + 16 > FILES_PAGE {
                    if !v.is_empty() {
                        records.push((id.to_le_bytes().to_vec(), v));
                    }
                    let mut next = id.to_le_bytes().to_vec();
                    next.extend_from_slice(&a.to_le_bytes());
                    return Ok((records, Some(next)));
                }
                v.extend_from_slice(&a.to_le_bytes());
                v.extend_from_slice(&(b - a).to_le_bytes());
            }
        }
        if !v.is_empty() {
            bytes += v.len() + 8;
            records.push((id.to_le_bytes().to_vec(), v));
        }
    }
    Ok((records, None))
}

/// How long one proposal to mark a secondary down may take before it is made again.
const PROPOSE_WAIT: Duration = Duration::from_secs(1);

/// Serves `f` for replica set `target.set`, with the changes it makes copied to the set's
/// secondaries (the caller counts it in flight from its admission: [`flight`]).
pub fn serving<T>(
    target: Option<Target>,
    rep: Option<&Arc<Replication>>,
    peers: &Arc<Peers>,
    f: impl FnOnce() -> T,
) -> T {
    let (Some(t), Some(rep)) = (target, rep) else {
        return f();
    };
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            TARGET.with(|c| c.borrow_mut().take());
            SET.with(|c| c.set(None));
        }
    }
    let _reset = Reset;
    SET.with(|c| c.set(Some((t.set, t.epoch))));
    WROTE.with(|c| c.set(false));
    if !t.to.is_empty() {
        TARGET.with(|c| *c.borrow_mut() = Some((t, peers.clone(), rep.clone())));
    }
    f()
}

/// A request counted in flight by the map epoch it was admitted in, from its admission
/// (before it waits for callbacks) to its end: a rejoining server's copy is served only once
/// every request admitted before the rejoin's epoch is over (`Replication::settled`). Counted
/// from the admission, not from its execution: a request admitted in one epoch copies its
/// changes to the members that epoch names, however late it runs.
pub struct Flight<'a>(Option<(&'a Replication, u64)>);

/// Counts a request admitted with `target` in flight until the guard is dropped.
pub fn flight<'a>(target: Option<&Target>, rep: Option<&'a Arc<Replication>>) -> Flight<'a> {
    let (Some(t), Some(rep)) = (target, rep) else {
        return Flight(None);
    };
    *rep.inflight
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(t.epoch)
        .or_default() += 1;
    Flight(Some((rep, t.epoch)))
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let Some((rep, epoch)) = self.0 else {
            return;
        };
        let mut m = rep.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&epoch) {
            *n -= 1;
            if *n == 0 {
                m.remove(&epoch);
            }
        }
    }
}

/// Runs `f` (a server's own background work for replica set `set`: finishing renames,
/// directory times, open files' leases) as the primary of that set, its changes copied like a
/// request's; not at all while this server (`me`) is not that primary in a current map (the
/// set's primary does it). Unreplicated clusters: `f` as it is.
pub fn as_set(
    rep: Option<&Arc<Replication>>,
    peers: &Arc<Peers>,
    me: u32,
    set: u32,
    f: impl FnOnce(),
) {
    let Some(rep) = rep else {
        return f();
    };
    if !rep.current() {
        return;
    }
    let map = rep.map(peers.servers());
    if map.primary(set, rep.r) != Some(me) {
        return;
    }
    let target = Target {
        set,
        epoch: map.epoch,
        to: map.secondaries(set, rep.r),
        rejoining: false,
    };
    let _flight = flight(Some(&target), Some(rep));
    serving(Some(target), Some(rep), peers, f);
}

/// The replica sets server `me` (of `n`) is the primary of in the current map (none while it
/// does not know that map; unreplicated: its own).
pub fn primary_of(rep: Option<&Arc<Replication>>, n: u32, me: u32) -> Vec<u32> {
    let Some(rep) = rep else {
        return vec![me];
    };
    if !rep.current() {
        return vec![];
    }
    let map = rep.map(n);
    (0..n)
        .filter(|s| map.primary(*s, rep.r) == Some(me))
        .collect()
}

/// The replica set of the request being served on this thread (replicated clusters).
pub fn serving_set() -> Option<u32> {
    SET.with(|c| c.get()).map(|(s, _)| s)
}

/// The replica set of the request being served on this thread and the map epoch it was
/// admitted in (replicated clusters).
pub fn serving_in() -> Option<(u32, u64)> {
    SET.with(|c| c.get())
}

/// Is a request being served on this thread whose changes are copied?
pub fn active() -> bool {
    TARGET.with(|c| c.borrow().is_some())
}

/// A metadata write batch (RocksDB's encoding) the store just wrote: copied to the
/// secondaries of the request being served, if any.
pub fn batch(data: &[u8], synced: bool) -> FsResult<()> {
    copy(ReplOp::Batch { synced }, data)
}

/// A chunk change the store just made (`bulk`: a write's bytes): copied likewise.
pub fn chunk(op: ReplOp, bulk: &[u8]) -> FsResult<()> {
    copy(op, bulk)
}

/// The request being served on this thread copies nothing more to `to` (down).
fn forget_member(to: u32) {
    TARGET.with(|c| {
        if let Some((t, ..)) = c.borrow_mut().as_mut() {
            t.to.retain(|m| *m != to);
        }
    });
}

/// Did the request last served on this thread (`serving`) change anything?
pub fn wrote() -> bool {
    WROTE.with(|c| c.get())
}

fn copy(op: ReplOp, bulk: &[u8]) -> FsResult<()> {
    WROTE.with(|c| c.set(true));
    let Some((t, peers, rep)) = TARGET.with(|c| c.borrow().clone()) else {
        return Ok(());
    };
    let req = Request::Replicate {
        set: t.set,
        epoch: t.epoch,
        from: rep.me,
        op,
    };
    for &to in &t.to {
        // a member the map has down since the request came takes no more copies
        if rep.is_down(to) {
            forget_member(to);
            continue;
        }
        let start = Instant::now();
        loop {
            match peers.replicate(to, &req, bulk, rep.copy_timeout()) {
                Ok(()) => break,
                Err(Errno::EAGAIN) if start.elapsed() < LAG => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                // this server is not the primary any more: nothing is acknowledged
                Err(Errno::EREMCHG) => return Err(Errno::EREMCHG),
                Err(e) => {
                    tracing::warn!(
                        "replica: server {to} did not take a copy for set {} ({e})",
                        t.set
                    );
                    rep.give_up_on(to)?;
                    forget_member(to);
                    break;
                }
            }
        }
    }
    Ok(())
}
