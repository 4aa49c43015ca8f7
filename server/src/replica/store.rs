//! The cluster map's Raft log and state machine, durable in `<data-dir>/raft` (a small
//! RocksDB of its own, apart from the metadata: its keys never meet paths, fsck never sees
//! them). Every write is synced: map changes are rare, and a vote or an entry acknowledged
//! and then forgotten would break Raft's guarantees.
//!
//! Keys: `v` the vote, `c` the committed log id, `p` the last purged log id, `l` + index
//! (big-endian) each entry, `m` the state machine (the map, the last applied log id, the
//! membership), `s` the current snapshot. Values are JSON.

// openraft's storage traits return its `StorageError` (over 200 bytes); the helpers follow
#![allow(clippy::result_large_err)]

use super::map::{Change, ClusterMap};
use super::{Applied, NodeId, TypeConfig};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    EmptyNode, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership, Vote,
};
use rocksdb::{IteratorMode, WriteBatch, WriteOptions, DB};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

type Result<T> = std::result::Result<T, StorageError<NodeId>>;

/// Opens (creating) the Raft database of a data directory.
pub fn open(data_dir: &Path) -> anyhow::Result<Arc<DB>> {
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    opts.set_max_open_files(16);
    opts.set_keep_log_file_num(2);
    Ok(Arc::new(DB::open(&opts, data_dir.join("raft"))?))
}

fn synced() -> WriteOptions {
    let mut wo = WriteOptions::default();
    wo.set_sync(true);
    wo
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read_logs(&e).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

fn get<T: DeserializeOwned>(db: &DB, key: &[u8]) -> Result<Option<T>> {
    match db.get(key).map_err(read_err)? {
        Some(v) => Ok(Some(serde_json::from_slice(&v).map_err(read_err)?)),
        None => Ok(None),
    }
}

fn put<T: Serialize>(db: &DB, key: &[u8], v: &T) -> Result<()> {
    let bytes = serde_json::to_vec(v).map_err(write_err)?;
    db.put_opt(key, bytes, &synced()).map_err(write_err)
}

fn entry_key(index: u64) -> [u8; 9] {
    let mut k = [b'l'; 9];
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

fn index_of(key: &[u8]) -> Option<u64> {
    (key.len() == 9 && key[0] == b'l').then(|| u64::from_be_bytes(key[1..].try_into().unwrap()))
}

/// The Raft log (and vote) of this server.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
}

impl LogStore {
    pub fn new(db: Arc<DB>) -> Self {
        LogStore { db }
    }

    fn last_entry(&self) -> Result<Option<Entry<TypeConfig>>> {
        let mut it = self.db.iterator(IteratorMode::From(
            &entry_key(u64::MAX),
            rocksdb::Direction::Reverse,
        ));
        match it.next() {
            Some(item) => {
                let (k, v) = item.map_err(read_err)?;
                if index_of(&k).is_none() {
                    return Ok(None);
                }
                Ok(Some(serde_json::from_slice(&v).map_err(read_err)?))
            }
            None => Ok(None),
        }
    }

    /// Deletes the entries with indexes in `from..=to`.
    fn delete(&self, b: &mut WriteBatch, from: u64, to: u64) -> Result<()> {
        let it = self.db.iterator(IteratorMode::From(
            &entry_key(from),
            rocksdb::Direction::Forward,
        ));
        for item in it {
            let (k, _) = item.map_err(read_err)?;
            match index_of(&k) {
                Some(i) if i <= to => b.delete(k),
                _ => break,
            }
        }
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s + 1,
            Bound::Unbounded => 0,
        };
        let mut out = vec![];
        let it = self.db.iterator(IteratorMode::From(
            &entry_key(start),
            rocksdb::Direction::Forward,
        ));
        for item in it {
            let (k, v) = item.map_err(read_err)?;
            match index_of(&k) {
                Some(i) if range.contains(&i) => {
                    out.push(serde_json::from_slice(&v).map_err(read_err)?)
                }
                _ => break,
            }
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>> {
        let purged: Option<LogId<NodeId>> = get(&self.db, b"p")?;
        let last = self.last_entry()?.map(|e| e.log_id).or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<()> {
        put(&self.db, b"v", vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>> {
        get(&self.db, b"v")
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<()> {
        put(&self.db, b"c", &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>> {
        Ok(get::<Option<LogId<NodeId>>>(&self.db, b"c")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut b = WriteBatch::default();
        for e in entries {
            b.put(
                entry_key(e.log_id.index),
                serde_json::to_vec(&e).map_err(write_err)?,
            );
        }
        let r = self.db.write_opt(b, &synced());
        let done = r
            .as_ref()
            .map(drop)
            .map_err(|e| std::io::Error::other(e.to_string()));
        callback.log_io_completed(done);
        r.map_err(write_err)
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        let mut b = WriteBatch::default();
        self.delete(&mut b, log_id.index, u64::MAX)?;
        self.db.write_opt(b, &synced()).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        // the purge point first: a crash between the two leaves entries, never a hole
        put(&self.db, b"p", &log_id)?;
        let mut b = WriteBatch::default();
        self.delete(&mut b, 0, log_id.index)?;
        self.db.write_opt(b, &synced()).map_err(write_err)
    }
}

/// What the state machine keeps (key `m`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Machine {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, EmptyNode>,
    map: ClusterMap,
    snapshots: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, EmptyNode>,
    data: Vec<u8>,
}

/// Told the epoch and the layout of every map applied (and of the map loaded at start).
pub type OnLayout = Arc<dyn Fn(u64, madfs_placement::Layout) + Send + Sync>;

/// The cluster map's state machine (shared with [`super::Node`], which reads the map).
#[derive(Clone)]
pub struct MapMachine {
    db: Arc<DB>,
    inner: Arc<Mutex<Machine>>,
    /// Told every layout a change makes (the server's admission and peer calls follow it).
    on_layout: Option<OnLayout>,
}

impl MapMachine {
    /// The state machine of a cluster of `n` servers, as this server last applied it.
    pub fn load(db: Arc<DB>, n: u32, r: u32, on_layout: Option<OnLayout>) -> anyhow::Result<Self> {
        let mut m: Machine = match db.get(b"m")? {
            Some(v) => serde_json::from_slice(&v)?,
            None => Machine {
                last_applied: None,
                membership: StoredMembership::default(),
                map: ClusterMap::new(n),
                snapshots: 0,
            },
        };
        m.map.r = r;
        if let Some(f) = &on_layout {
            f(m.map.epoch, m.map.layout());
        }
        Ok(MapMachine {
            db,
            inner: Arc::new(Mutex::new(m)),
            on_layout,
        })
    }

    /// The map as applied here.
    pub fn map(&self) -> ClusterMap {
        self.lock().map.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Machine> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for MapMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>> {
        let mut m = self.lock();
        let data = serde_json::to_vec(&m.map).map_err(read_err)?;
        m.snapshots += 1;
        let snapshot_id = match m.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, m.snapshots),
            None => format!("--{}", m.snapshots),
        };
        let meta = SnapshotMeta {
            last_log_id: m.last_applied,
            last_membership: m.membership.clone(),
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        put(&self.db, b"s", &stored)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for MapMachine {
    type SnapshotBuilder = MapMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, EmptyNode>)> {
        let m = self.lock();
        Ok((m.last_applied, m.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut m = self.lock();
        let mut out = vec![];
        for e in entries {
            m.last_applied = Some(e.log_id);
            let changed = match e.payload {
                EntryPayload::Blank => false,
                EntryPayload::Membership(ms) => {
                    m.membership = StoredMembership::new(Some(e.log_id), ms);
                    false
                }
                EntryPayload::Normal(c) => {
                    let told = match &c {
                        Change::Down(s) => format!("server {s} down"),
                        Change::Rejoining(s) => format!("server {s} rejoining"),
                        Change::Up(s) => format!("server {s} up"),
                        Change::Switch { slots, to } => {
                            format!("{} slot(s) to server {to}", slots.len())
                        }
                        Change::Drain(s) => format!("server {s} drained"),
                        Change::Join(s) => format!("server {s} joined"),
                        Change::Remove(s) => format!("server {s} removed"),
                        Change::Built(s) => format!("server {s} has copied its new sets"),
                    };
                    let changed = m.map.apply(c);
                    if changed {
                        tracing::info!("cluster map epoch {}: {told}", m.map.epoch);
                        if let Some(f) = &self.on_layout {
                            f(m.map.epoch, m.map.layout());
                        }
                    }
                    changed
                }
            };
            out.push(Applied {
                epoch: m.map.epoch,
                changed,
            });
        }
        put(&self.db, b"m", &*m)?;
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, EmptyNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<()> {
        let data = snapshot.into_inner();
        let map: ClusterMap = serde_json::from_slice(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut m = self.lock();
        if let Some(f) = &self.on_layout {
            f(map.epoch, map.layout());
        }
        m.map = map;
        m.last_applied = meta.last_log_id;
        m.membership = meta.last_membership.clone();
        put(&self.db, b"m", &*m)?;
        put(
            &self.db,
            b"s",
            &StoredSnapshot {
                meta: meta.clone(),
                data,
            },
        )
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>> {
        let s: Option<StoredSnapshot> = get(&self.db, b"s")?;
        Ok(s.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
