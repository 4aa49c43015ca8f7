//! RocksDB metadata store.
//!
//! Key spaces (first byte):
//! * `E` entries: `E parent \0 hash64(name) (8 bytes BE) name` → attribute record. `stat` is
//!   one point lookup; a directory slice is one range scan from `E dir \0 start`.
//! * `C` inline chunk 0: `C id (8 bytes BE)` → bytes.
//! * `S` server state: `S next_id` → reserved high-water mark of the id counter.
//! * `I` intent records of moves out (`I from`), `D` intent records of directory renames
//!   (`D from`), `A` pending moves in (`A path`), `N` entry counts per directory (`N dir`).
//! * `O` attributes kept by file id (`O id`): an open-unlinked file's, or a file's with
//!   several names (`server/src/link.rs`).
//!
//! Sizes grow through the `madfs.size` merge operator (max of size and mtime), so concurrent
//! writers publish their high-water marks without a read-modify-write. A merge that reaches a
//! removed entry leaves an empty record, which reads as "absent".

use super::flush::SharedFlush;
use super::{is_stub, Arrival, Created, Entry, Intent, MetadataStore, Tap};
use madfs_placement::{home_slot, name_hash, path_slot, split_parent, Layout};
use madfs_proto::{Attr, Errno, FsResult, ATTR_BYTES};
use rocksdb::{MergeOperands, Options, WriteBatch, WriteOptions, DB};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const REC_VERSION: u8 = 1;
const REC_LEN: usize = 1 + ATTR_BYTES;
const ID_BLOCK: u64 = 1 << 16;
const STRIPES: usize = 64;
/// Merge operands of one key kept in the memtable before a write folds them (see `open`).
const MAX_SUCCESSIVE_MERGES: usize = 32;

/// A RocksDB error as an errno, logged: a full disk is ENOSPC (RocksDB then refuses writes
/// until the server is restarted with space freed: said in the log, docs/operations.md).
fn io(e: rocksdb::Error) -> Errno {
    let s = e.to_string();
    if s.contains("No space left") || s.contains("NoSpace") {
        tracing::error!(
            "rocksdb: {s}: the metadata store is full; free space (remove files) and restart the \
             server if it keeps refusing writes"
        );
        Errno::ENOSPC
    } else {
        tracing::error!("rocksdb: {s}");
        Errno::EIO
    }
}

/// Encodes an attribute record: a version byte, then [`Attr::to_bytes`].
pub fn encode_attr(a: &Attr) -> [u8; REC_LEN] {
    let mut b = [0u8; REC_LEN];
    b[0] = REC_VERSION;
    b[1..].copy_from_slice(&a.to_bytes());
    b
}

/// Decodes an attribute record; `None` for an empty (removed) or foreign record.
pub fn decode_attr(b: &[u8]) -> Option<Attr> {
    if b.len() < REC_LEN || b[0] != REC_VERSION {
        return None;
    }
    Attr::from_bytes(&b[1..REC_LEN])
}

/// Key of the entry of a normalised path (not the root).
pub fn entry_key(path: &str) -> Vec<u8> {
    let (parent, name) = split_parent(path).unwrap_or(("", ""));
    let mut k = Vec::with_capacity(parent.len() + name.len() + 10);
    k.push(b'E');
    k.extend_from_slice(parent.as_bytes());
    k.push(0);
    k.extend_from_slice(&name_hash(name).to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// Prefix of every entry directly inside `dir`.
pub fn dir_prefix(dir: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(dir.len() + 2);
    k.push(b'E');
    k.extend_from_slice(dir.as_bytes());
    k.push(0);
    k
}

/// The first key after every key that starts with `prefix` (None: no such key, the prefix is
/// all 0xff).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// An iterator over the keys that start with `prefix`, bounded above: without the bound, a
/// seek into a prefix with no live key left walks every deleted key after it (the tombstones
/// of a mass delete) to the next live one.
fn prefix_iter<'a>(db: &'a DB, prefix: &[u8]) -> rocksdb::DBRawIterator<'a> {
    let mut ro = rocksdb::ReadOptions::default();
    if let Some(end) = prefix_end(prefix) {
        ro.set_iterate_upper_bound(end);
    }
    db.raw_iterator_opt(ro)
}

/// Key of the intent record of a move of `from` (docs/consistency.md, "rename").
fn intent_key(from: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(from.len() + 1);
    k.push(b'I');
    k.extend_from_slice(from.as_bytes());
    k
}

/// An intent record's value: noreplace (1 byte), the entry (`encode_attr`), the target path.
fn encode_intent(i: &Intent) -> Vec<u8> {
    let mut v = vec![i.noreplace as u8];
    v.extend_from_slice(&encode_attr(&i.attr));
    v.extend_from_slice(i.to.as_bytes());
    v
}

fn decode_intent(key: &[u8], v: &[u8]) -> Option<Intent> {
    let from = std::str::from_utf8(key.get(1..)?).ok()?;
    let (&flag, rest) = v.split_first()?;
    let attr = decode_attr(rest.get(..REC_LEN)?)?;
    let to = std::str::from_utf8(&rest[REC_LEN..]).ok()?;
    Some(Intent {
        from: from.to_owned(),
        to: to.to_owned(),
        attr,
        noreplace: flag != 0,
    })
}

/// Key of the intent record of a rename of directory `from` (docs/consistency.md, "rename";
/// the same value as a file's, `noreplace` standing for "no directory to replace").
fn dir_intent_key(from: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(from.len() + 1);
    k.push(b'D');
    k.extend_from_slice(from.as_bytes());
    k
}

/// Key of the pending move-in at `path` (docs/consistency.md, "rename").
fn arrival_key(path: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(path.len() + 1);
    k.push(b'A');
    k.extend_from_slice(path.as_bytes());
    k
}

/// A pending move-in's value: file id (8 bytes LE), source server (4), source path.
fn encode_arrival(a: &Arrival) -> Vec<u8> {
    let mut v = a.id.to_le_bytes().to_vec();
    v.extend_from_slice(&a.src.to_le_bytes());
    v.extend_from_slice(a.from.as_bytes());
    v
}

fn decode_arrival(key: &[u8], v: &[u8]) -> Option<Arrival> {
    let path = std::str::from_utf8(key.strip_prefix(b"A")?).ok()?;
    Some(Arrival {
        path: path.to_owned(),
        id: u64::from_le_bytes(v.get(..8)?.try_into().ok()?),
        src: u32::from_le_bytes(v.get(8..12)?.try_into().ok()?),
        from: std::str::from_utf8(v.get(12..)?).ok()?.to_owned(),
    })
}

fn inline_key(id: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = b'C';
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

/// Orphan record of file `id`: its attributes after its last name went while it was open
/// (`server/src/open.rs`).
fn orphan_key(id: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = b'O';
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

fn decode_orphan(k: &[u8], v: &[u8]) -> Option<(u64, Attr)> {
    let id = u64::from_be_bytes(k.get(1..9)?.try_into().ok()?);
    Some((id, decode_attr(v)?))
}

fn size_operand(size: u64, mtime: i64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&size.to_le_bytes());
    b[8..].copy_from_slice(&mtime.to_le_bytes());
    b
}

/// An attribute change applied by the merge operator (no read-modify-write over a size
/// publication or another change: none of them can undo another, docs/consistency.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Permission bits (the type bits stay), ctime.
    Mode { mode: u32, ctime: i64 },
    /// Owner and/or group (`u32::MAX`: unchanged), mode bits cleared (set-id bits), ctime.
    Owner {
        uid: u32,
        gid: u32,
        clear: u32,
        ctime: i64,
    },
    /// Access and/or modification time (`None`: unchanged), ctime.
    Times {
        atime: Option<i64>,
        mtime: Option<i64>,
        ctime: i64,
    },
    /// The size, exactly (truncate), mtime and ctime.
    Size { size: u64, time: i64 },
    /// An entry of this directory was added or removed at `time`: mtime and ctime become
    /// `time` unless the directory's ctime is already later (a touch arriving late).
    Touch { time: i64 },
}

/// Length of a change operand: tag, then four 8-byte fields (a size operand is 16 bytes).
const CHANGE_LEN: usize = 33;
/// `Times` field value meaning "unchanged".
const OMIT: i64 = i64::MIN;

impl Change {
    fn encode(&self) -> [u8; CHANGE_LEN] {
        let (tag, f): (u8, [u64; 4]) = match *self {
            Change::Mode { mode, ctime } => (b'm', [mode as u64, 0, 0, ctime as u64]),
            Change::Owner {
                uid,
                gid,
                clear,
                ctime,
            } => (b'o', [uid as u64, gid as u64, clear as u64, ctime as u64]),
            Change::Times {
                atime,
                mtime,
                ctime,
            } => (
                b't',
                [
                    atime.unwrap_or(OMIT) as u64,
                    mtime.unwrap_or(OMIT) as u64,
                    0,
                    ctime as u64,
                ],
            ),
            Change::Size { size, time } => (b's', [size, 0, 0, time as u64]),
            Change::Touch { time } => (b'h', [0, 0, 0, time as u64]),
        };
        let mut b = [0u8; CHANGE_LEN];
        b[0] = tag;
        for (i, v) in f.iter().enumerate() {
            b[1 + 8 * i..9 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Option<Change> {
        let b: &[u8; CHANGE_LEN] = b.try_into().ok()?;
        let f = |i: usize| u64::from_le_bytes(b[1 + 8 * i..9 + 8 * i].try_into().unwrap());
        let time = |v: u64| Some(v as i64).filter(|t| *t != OMIT);
        Some(match b[0] {
            b'm' => Change::Mode {
                mode: f(0) as u32,
                ctime: f(3) as i64,
            },
            b'o' => Change::Owner {
                uid: f(0) as u32,
                gid: f(1) as u32,
                clear: f(2) as u32,
                ctime: f(3) as i64,
            },
            b't' => Change::Times {
                atime: time(f(0)),
                mtime: time(f(1)),
                ctime: f(3) as i64,
            },
            b's' => Change::Size {
                size: f(0),
                time: f(3) as i64,
            },
            b'h' => Change::Touch { time: f(3) as i64 },
            _ => return None,
        })
    }

    /// The attributes after this change.
    pub fn apply(&self, a: &mut Attr) {
        match *self {
            Change::Mode { mode, ctime } => {
                a.mode = (a.mode & madfs_proto::S_IFMT) | (mode & 0o7777);
                a.ctime = ctime;
            }
            Change::Owner {
                uid,
                gid,
                clear,
                ctime,
            } => {
                if uid != u32::MAX {
                    a.uid = uid;
                }
                if gid != u32::MAX {
                    a.gid = gid;
                }
                a.mode &= !clear;
                a.ctime = ctime;
            }
            Change::Times {
                atime,
                mtime,
                ctime,
            } => {
                a.atime = atime.unwrap_or(a.atime);
                a.mtime = mtime.unwrap_or(a.mtime);
                a.ctime = ctime;
            }
            Change::Size { size, time } => {
                a.size = size;
                a.mtime = time;
                a.ctime = time;
            }
            // a touch older than the directory's last status change lost the race to it: a
            // time set explicitly (`utimensat` after the last entry, as `cp -a` and `tar`
            // do) stays
            Change::Touch { time } => {
                if time > a.ctime {
                    a.mtime = time;
                    a.ctime = time;
                }
            }
        }
    }
}

/// Applies merge operands in order: size publications (16 bytes: `size = max`, times move
/// forward) and [`Change`]s; anything else is skipped.
fn apply_operands<'a>(a: &mut Attr, ops: impl Iterator<Item = &'a [u8]>) {
    for op in ops {
        if op.len() == 16 {
            let size = u64::from_le_bytes(op[..8].try_into().unwrap());
            let mtime = i64::from_le_bytes(op[8..].try_into().unwrap());
            a.size = a.size.max(size);
            a.mtime = a.mtime.max(mtime);
            a.ctime = a.ctime.max(mtime);
        } else if let Some(c) = Change::decode(op) {
            c.apply(a);
        }
    }
}

/// Key of the number of entries this server holds directly inside `dir`.
fn count_key(dir: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(dir.len() + 1);
    k.push(b'N');
    k.extend_from_slice(dir.as_bytes());
    k
}

/// The `N` key of a directory given as the bytes of its path.
fn count_key_raw(dir: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(dir.len() + 1);
    k.push(b'N');
    k.extend_from_slice(dir);
    k
}

/// The directory (its path's bytes) of an entry's key; `None` for any other key.
fn entry_dir(key: &[u8]) -> Option<&[u8]> {
    if key.first() != Some(&b'E') {
        return None;
    }
    let zero = key.iter().position(|b| *b == 0)?;
    Some(&key[1..zero])
}

fn count_of(v: &[u8]) -> i64 {
    v.try_into().map(i64::from_le_bytes).unwrap_or(0)
}

fn add_counts<'a>(start: i64, ops: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    ops.fold(start, |n, op| n.wrapping_add(count_of(op)))
        .to_le_bytes()
        .to_vec()
}

fn size_full_merge(key: &[u8], existing: Option<&[u8]>, ops: &MergeOperands) -> Option<Vec<u8>> {
    if key.first() == Some(&b'N') {
        return Some(add_counts(existing.map_or(0, count_of), ops.iter()));
    }
    match existing.and_then(decode_attr) {
        Some(mut a) => {
            apply_operands(&mut a, ops.iter());
            Some(encode_attr(&a).to_vec())
        }
        // the entry is gone (unlinked while a writer was still publishing): stay gone (an
        // empty record reads as absent everywhere and is overwritten by the next create)
        None => Some(Vec::new()),
    }
}

fn size_partial_merge(
    key: &[u8],
    _existing: Option<&[u8]>,
    ops: &MergeOperands,
) -> Option<Vec<u8>> {
    if key.first() == Some(&b'N') {
        return Some(add_counts(0, ops.iter()));
    }
    // consecutive size publications fold into one; a change keeps the operands apart (the
    // full merge applies them in order)
    let mut size = 0u64;
    let mut mtime = i64::MIN;
    for op in ops.iter() {
        if op.len() != 16 {
            return None;
        }
        size = size.max(u64::from_le_bytes(op[..8].try_into().unwrap()));
        mtime = mtime.max(i64::from_le_bytes(op[8..].try_into().unwrap()));
    }
    Some(size_operand(size, mtime).to_vec())
}

/// The RocksDB metadata store of one server.
pub struct RocksDbMeta {
    db: DB,
    next: AtomicU64,
    reserved: Mutex<u64>,
    stripes: Vec<Mutex<()>>,
    /// Serialise the existence check and the write of one path (entry counts stay exact
    /// even with metadata on several IO threads).
    path_stripes: Vec<Mutex<()>>,
    /// WAL syncs, shared by the fsyncs they cover.
    wal: SharedFlush,
    /// A replicated cluster's server (of `n`) holds copies of other replica sets' records:
    /// the scan of orphans (its own open files' work) sees only its own set's. Intents and
    /// move-ins are scanned whole: a server that serves another set after a failover
    /// finishes that set's moves (`replica::forward::primary_of`).
    own: std::sync::OnceLock<(Layout, u32)>,
    /// A replicated cluster's file ids: the home slot in the low bits (owned by the set it
    /// was made in, so that a file's home is that set), from a counter kept in the set's own
    /// records (`Z` + set, copied like them): whichever server is the set's primary goes on
    /// from where the last one reserved. Per set: the map epoch the block was taken in, the
    /// next id, the end of the reserved block.
    set_ids: Mutex<std::collections::HashMap<u32, (u64, u64, u64)>>,
    /// What sees every committed write (a replicated cluster's copies): [`Tap`].
    tap: std::sync::OnceLock<std::sync::Arc<dyn Tap>>,
}

/// Key of the root directory's attributes (on the metadata server of `/`).
const ROOT_KEY: &[u8] = b"R";

/// Key of replica set `set`'s id counter (replicated clusters).
fn ids_key(set: u32) -> [u8; 5] {
    let mut k = [b'Z', 0, 0, 0, 0];
    k[1..].copy_from_slice(&set.to_be_bytes());
    k
}

/// The replica set (the first server of the set, docs/redundancy.md) a record belongs to
/// in layout `l`: its slot's owner ([`key_slot`]), or the set a replica set's own record
/// (its id counter, a replay record) names. `None` for what each server keeps of its own
/// (entry counts, the id counter of an unreplicated server, markers).
pub fn key_set(key: &[u8], l: &Layout) -> Option<u32> {
    match *key.first()? {
        b'Z' => Some(u32::from_be_bytes(key.get(1..5)?.try_into().ok()?)),
        b'Y' => replay_key_set(key),
        _ => key_slot(key).map(|s| l.owner(s)),
    }
}

/// The slot (docs/architecture.md, "Placement") a record belongs to: an entry, intent,
/// directory intent or pending move-in by its path ([`path_slot`]), a file's inline chunk 0
/// and orphan record by its id ([`home_slot`]), the root directory's attributes as `/`.
/// `None` for records of a server or a replica set rather than of a key.
/// The path an entry's key (`E…`) names; the root's record (`R`) names `/`.
fn key_path(key: &[u8]) -> Option<String> {
    if key == ROOT_KEY {
        return Some("/".into());
    }
    if key.first() != Some(&b'E') {
        return None;
    }
    let zero = key.iter().position(|b| *b == 0)?;
    let parent = std::str::from_utf8(&key[1..zero]).ok()?;
    let name = std::str::from_utf8(key.get(zero + 9..)?).ok()?;
    Some(if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    })
}

/// The directories among records (key, value) a slot's move copies: each one's path and
/// attributes (the receiver's directory table learns them).
pub fn moved_dirs(records: &[(&[u8], &[u8])]) -> Vec<(String, Attr)> {
    records
        .iter()
        .filter_map(|(k, v)| {
            let a = decode_attr(v).filter(|a| a.is_dir())?;
            Some((key_path(k)?, a))
        })
        .collect()
}

pub fn key_slot(key: &[u8]) -> Option<u32> {
    let of_path = |p: &[u8]| std::str::from_utf8(p).ok().map(path_slot);
    match *key.first()? {
        b'E' => Some(path_slot(&key_path(key)?)),
        b'I' | b'D' | b'A' => of_path(&key[1..]),
        b'C' | b'O' => {
            let id = u64::from_be_bytes(key.get(1..9)?.try_into().ok()?);
            Some(home_slot(id))
        }
        b'R' if key == ROOT_KEY => Some(path_slot("/")),
        _ => None,
    }
}

/// Key of the replay record of request (`client`, `seq`) of user `uid`, first sent at `at`
/// (ms) to replica set `set` (`Y`, then those fields big-endian: a set's records sort by
/// time, so that old ones go with one range deletion). What the value holds is the replica
/// layer's.
pub fn replay_key(set: u32, at: u64, client: u64, seq: u64, uid: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(33);
    k.push(b'Y');
    k.extend_from_slice(&set.to_be_bytes());
    k.extend_from_slice(&at.to_be_bytes());
    k.extend_from_slice(&client.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k.extend_from_slice(&uid.to_be_bytes());
    k
}

/// The replica set of a replay record's key.
pub fn replay_key_set(key: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(key.get(1..5)?.try_into().ok()?))
}

/// Present once every directory's entry count (`N dir`) is kept; a database without it (made
/// by an older version) is counted once at open.
const COUNTS_MARKER: &[u8] = b"Scounts_v1";

/// Counts the entries under every directory from the `E` keys (one scan), writes the `N`
/// keys and the marker.
fn count_children(db: &DB) -> anyhow::Result<()> {
    let mut counts: std::collections::HashMap<Vec<u8>, i64> = Default::default();
    let mut it = prefix_iter(db, b"E");
    it.seek(b"E");
    while let Some(k) = it.key() {
        if k.first() != Some(&b'E') {
            break;
        }
        let present = it.value().is_some_and(|v| decode_attr(v).is_some());
        if let Some(zero) = k.iter().position(|b| *b == 0).filter(|_| present) {
            *counts.entry(k[1..zero].to_vec()).or_default() += 1;
        }
        it.next();
    }
    it.status()?;
    let mut b = WriteBatch::default();
    for (dir, n) in counts {
        let mut key = vec![b'N'];
        key.extend_from_slice(&dir);
        b.put(key, n.to_le_bytes());
    }
    b.put(COUNTS_MARKER, b"1");
    let mut wo = WriteOptions::default();
    wo.set_sync(true);
    db.write_opt(b, &wo)?;
    Ok(())
}

/// RocksDB block cache of one server (filled only as blocks are read).
const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// Public name used by the rest of the server.
pub type RocksMeta = RocksDbMeta;

impl RocksDbMeta {
    /// Bytes the database holds: its table files and its memtables (what `madfs-ctl status`
    /// shows as the metadata's size).
    pub fn disk_bytes(&self) -> u64 {
        [
            "rocksdb.total-sst-files-size",
            "rocksdb.cur-size-all-mem-tables",
        ]
        .iter()
        .filter_map(|p| self.db.property_int_value(*p).ok().flatten())
        .sum()
    }

    /// Opens (creating) the database in `dir`. The WAL stays on.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_merge_operator("madfs.size", size_full_merge, size_partial_merge);
        // A read folds every merge operand of its key still in the memtable: a file whose
        // size was published 10,000 times (a 4 KiB write + fsync loop, ior-hard's shared
        // file, O_APPEND records) made every stat, append and size publication of it walk
        // 10,000 operands. Past this many, the write folds them into one value instead.
        opts.set_max_successive_merges(MAX_SUCCESSIVE_MERGES);
        opts.increase_parallelism(2);
        opts.set_max_background_jobs(2);
        // Metadata records are small and read far more than written: no compression (scans
        // spent ~7 % decompressing), a block cache, and bloom filters so that a point lookup
        // (stat, create's existence check) skips SST files that cannot hold the key.
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&rocksdb::Cache::new_lru_cache(BLOCK_CACHE_BYTES)?);
        table.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, dir)?;
        if db.get(COUNTS_MARKER)?.is_none() {
            count_children(&db)?;
        }
        let reserved = match db.get(b"Snext_id")? {
            Some(v) if v.len() == 8 => u64::from_le_bytes(v[..].try_into().unwrap()),
            // id 1 is the root directory's inode number
            _ => 2,
        };
        Ok(RocksDbMeta {
            db,
            next: AtomicU64::new(reserved),
            reserved: Mutex::new(reserved),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            path_stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            wal: SharedFlush::new(),
            own: std::sync::OnceLock::new(),
            set_ids: Mutex::default(),
            tap: std::sync::OnceLock::new(),
        })
    }

    fn path_stripe(&self, path: &str) -> std::sync::MutexGuard<'_, ()> {
        let h = madfs_placement::hash64(path.as_bytes(), 0) as usize;
        self.path_stripes[h % STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `delta` to the entry count of `path`'s parent, in batch `b`.
    /// The path locks of two paths, taken in index order (one lock when they share it).
    fn path_stripes2(&self, a: &str, b: &str) -> Vec<std::sync::MutexGuard<'_, ()>> {
        let ix = |p: &str| madfs_placement::hash64(p.as_bytes(), 0) as usize % STRIPES;
        let (i, j) = (ix(a).min(ix(b)), ix(a).max(ix(b)));
        let lock = |k: usize| {
            self.path_stripes[k]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        if i == j {
            vec![lock(i)]
        } else {
            vec![lock(i), lock(j)]
        }
    }

    /// The tap installed above the store, if any ([`Tap`]).
    fn tap(&self) -> Option<&dyn Tap> {
        self.tap.get().map(|t| &**t)
    }

    /// Installs the tap that sees every committed write ([`Tap`]); once.
    pub fn set_tap(&self, tap: std::sync::Arc<dyn Tap>) {
        let _ = self.tap.set(tap);
    }

    /// Adds what the tap wants written with batch `b` (the replay record of the request
    /// being served), and returns whether it wants the batch itself afterwards.
    fn tapped(&self, b: &mut WriteBatch) -> bool {
        let Some(t) = self.tap() else {
            return false;
        };
        if let Some((k, v)) = t.extra() {
            b.put(k, v);
        }
        t.active()
    }

    fn write_synced(&self, mut b: WriteBatch) -> FsResult<()> {
        let copy = self.tapped(&mut b).then(|| b.data().to_vec());
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db.write_opt(b, &wo).map_err(io)?;
        match (copy, self.tap()) {
            (Some(c), Some(t)) => t.batch(&c, true),
            _ => Ok(()),
        }
    }

    /// Writes `b`; in a replicated cluster, the request being served has it copied to its
    /// replica set's secondaries (`replica::forward`) before this returns. Every write of
    /// replicated key spaces goes through here or [`Self::write_synced`] (the id counter and
    /// the count marker are this server's own).
    fn commit(&self, mut b: WriteBatch) -> FsResult<()> {
        // (also where no secondary is up to copy it to)
        if !self.tapped(&mut b) {
            return self.db.write(b).map_err(io);
        }
        let copy = b.data().to_vec();
        self.db.write(b).map_err(io)?;
        match self.tap() {
            Some(t) => t.batch(&copy, false),
            None => Ok(()),
        }
    }

    /// A new file id of replica set `set` (replicated clusters), served in map `epoch`: a
    /// block taken in another epoch is given up (another server may have been the set's
    /// primary meanwhile) and the counter read again.
    fn next_id_of_set(&self, set: u32, epoch: u64, slot: u32) -> FsResult<u64> {
        let mut ids = self.set_ids.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = ids.get(&set).is_none_or(|b| b.0 != epoch);
        if fresh {
            let at = match self.db.get(ids_key(set)).map_err(io)? {
                Some(v) if v.len() == 8 => u64::from_le_bytes(v[..].try_into().unwrap_or_default()),
                _ => 2,
            };
            ids.insert(set, (epoch, at, at));
        }
        let b = ids.get_mut(&set).ok_or(Errno::EIO)?;
        let n = b.1;
        if n >= madfs_placement::ID_COUNTER_END {
            return Err(Errno::ENOSPC);
        }
        if n >= b.2 {
            let new = (n / ID_BLOCK + 1) * ID_BLOCK;
            let mut batch = WriteBatch::default();
            batch.put(ids_key(set), new.to_le_bytes());
            self.write_synced(batch)?;
            b.2 = new;
        }
        b.1 += 1;
        Ok(madfs_placement::make_id(slot, n))
    }

    /// Forgets the id blocks taken (a server that caught up reads the counters again).
    pub fn forget_id_blocks(&self) {
        self.set_ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Scans of orphans see only replica set `set`'s (in layout `l`).
    pub fn keep_own(&self, l: &Layout, set: u32) {
        let _ = self.own.set((l.clone(), set));
    }

    /// The records of replica set `set` (in layout `l`; [`key_set`]) in key order after
    /// `after` (empty: from the start), until about `max_bytes`: what a rejoining server
    /// copies. Returns them and the key to go on after (`None`: done).
    #[allow(clippy::type_complexity)]
    pub fn records_of_set(
        &self,
        l: &Layout,
        set: u32,
        after: &[u8],
        max_bytes: usize,
    ) -> FsResult<(Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>)> {
        self.records_where(&|k| key_set(k, l) == Some(set), after, max_bytes)
    }

    /// Drops every record of the replica sets `sets` (in layout `l`) held here: a
    /// rejoining server's stale copy, before it copies the current one.
    pub fn drop_sets(&self, l: &Layout, sets: &[u32]) -> FsResult<u64> {
        let mut it = self.db.raw_iterator();
        it.seek_to_first();
        let mut b = WriteBatch::default();
        let mut dropped = 0;
        while let Some(k) = it.key() {
            if key_set(k, l).is_some_and(|s| sets.contains(&s)) {
                b.delete(k);
                dropped += 1;
                if b.len() >= 4096 {
                    self.db.write(std::mem::take(&mut b)).map_err(io)?;
                }
            }
            it.next();
        }
        it.status().map_err(io)?;
        self.db.write(b).map_err(io)?;
        Ok(dropped)
    }

    /// The raw value of `key` (a replay record, `replica::replay`).
    pub fn raw_get(&self, key: &[u8]) -> FsResult<Option<Vec<u8>>> {
        self.db.get(key).map_err(io)
    }

    /// Deletes the keys in `[from, to)` with one range deletion, copied like any change
    /// (old replay records, `replica::replay::sweep`).
    pub fn drop_range(&self, from: &[u8], to: &[u8]) -> FsResult<()> {
        let mut b = WriteBatch::default();
        b.delete_range(from, to);
        self.commit(b)
    }

    /// Writes copied records as they are (a rejoining server's copy; nothing forwarded).
    pub fn put_records(&self, records: &[(&[u8], &[u8])]) -> FsResult<()> {
        let mut b = WriteBatch::default();
        for (k, v) in records {
            b.put(k, v);
        }
        self.db.write(b).map_err(io)
    }

    /// The records of the slots `moving` says yes to ([`key_slot`]) in key order after
    /// `after` (empty: from the start), until about `max_bytes`: what a slot's move copies
    /// to its new owner. Returns them and the key to go on after (`None`: done).
    #[allow(clippy::type_complexity)]
    pub fn records_of_slots(
        &self,
        moving: &dyn Fn(u32) -> bool,
        after: &[u8],
        max_bytes: usize,
    ) -> FsResult<(Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>)> {
        self.records_where(&|k| key_slot(k).is_some_and(moving), after, max_bytes)
    }

    /// The records whose keys `keep` says yes to, in key order after `after` (empty: from
    /// the start), until about `max_bytes`, and the key to go on after (`None`: done).
    #[allow(clippy::type_complexity)]
    fn records_where(
        &self,
        keep: &dyn Fn(&[u8]) -> bool,
        after: &[u8],
        max_bytes: usize,
    ) -> FsResult<(Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut it = self.db.raw_iterator();
        if after.is_empty() {
            it.seek_to_first();
        } else {
            it.seek(after);
            if it.key() == Some(after) {
                it.next();
            }
        }
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if keep(k) {
                bytes += k.len() + v.len() + 16;
                out.push((k.to_vec(), v.to_vec()));
                if bytes >= max_bytes {
                    return Ok((out, Some(k.to_vec())));
                }
            }
            it.next();
        }
        it.status().map_err(io)?;
        Ok((out, None))
    }

    /// Writes records a slot's move copies here, counting the entries they add to their
    /// directories (`N`), synced: the old owner drops its own once the slot is switched.
    pub fn put_moved(&self, records: &[(&[u8], &[u8])]) -> FsResult<()> {
        let mut b = WriteBatch::default();
        for (k, v) in records {
            if key_slot(k).is_none() {
                return Err(Errno::EINVAL);
            }
            if let Some(dir) = entry_dir(k) {
                let was = self.db.get(k).map_err(io)?;
                let had = was.is_some_and(|w| decode_attr(&w).is_some());
                let has = decode_attr(v).is_some();
                if had != has {
                    b.merge(
                        count_key_raw(dir),
                        (if has { 1i64 } else { -1 }).to_le_bytes(),
                    );
                }
            }
            b.put(k, v);
        }
        self.write_synced(b)
    }

    /// Drops every record of the slots `gone` says yes to, uncounting their entries: what
    /// a slot's old owner keeps after its switch, or a new owner from an unfinished copy.
    /// Returns how many it dropped.
    pub fn drop_slots(&self, gone: &dyn Fn(u32) -> bool) -> FsResult<u64> {
        let mut it = self.db.raw_iterator();
        it.seek_to_first();
        let mut b = WriteBatch::default();
        let mut dropped = 0;
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if key_slot(k).is_some_and(gone) {
                if let Some(dir) = entry_dir(k).filter(|_| decode_attr(v).is_some()) {
                    b.merge(count_key_raw(dir), (-1i64).to_le_bytes());
                }
                b.delete(k);
                dropped += 1;
                if b.len() >= 4096 {
                    self.write_synced(std::mem::take(&mut b))?;
                }
            }
            it.next();
        }
        it.status().map_err(io)?;
        self.write_synced(b)?;
        Ok(dropped)
    }

    /// Sets or clears server-state marker `name` (kept as an `S` key, synced).
    pub fn set_marker(&self, name: &str, on: bool) -> FsResult<()> {
        let key = [b"S".as_slice(), name.as_bytes()].concat();
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        if on {
            self.db.put_opt(key, b"1", &wo).map_err(io)
        } else {
            self.db.delete_opt(key, &wo).map_err(io)
        }
    }

    /// Is server-state marker `name` set?
    pub fn marker(&self, name: &str) -> FsResult<bool> {
        let key = [b"S".as_slice(), name.as_bytes()].concat();
        Ok(self.db.get(key).map_err(io)?.is_some())
    }

    /// Every id this (unreplicated) server made or will make before its next reservation
    /// is below this mark: a slot's new owner raises its own counter to it
    /// ([`RocksDbMeta::raise_ids`]), so ids it makes in the slot never repeat one made here.
    pub fn id_mark(&self) -> u64 {
        *self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ids made here from now on are at or above `mark` (durably, before it returns).
    pub fn raise_ids(&self, mark: u64) -> FsResult<()> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        self.next.fetch_max(mark, Ordering::Relaxed);
        if *reserved < mark {
            let mut wo = WriteOptions::default();
            wo.set_sync(true);
            self.db
                .put_opt(b"Snext_id", mark.to_le_bytes(), &wo)
                .map_err(io)?;
            *reserved = mark;
        }
        Ok(())
    }

    /// Entries this server holds: the sum of its directories' counts (`madfs-ctl stats`).
    pub fn entries_held(&self) -> FsResult<u64> {
        let mut it = prefix_iter(&self.db, b"N");
        it.seek([b'N']);
        let mut n = 0i64;
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if k.first() != Some(&b'N') {
                break;
            }
            n += count_of(v);
            it.next();
        }
        it.status().map_err(io)?;
        Ok(n.max(0) as u64)
    }

    /// Counts every directory's entries again (after a rejoining server's copy).
    pub fn recount(&self) -> FsResult<()> {
        let mut b = WriteBatch::default();
        let mut it = prefix_iter(&self.db, b"N");
        it.seek([b'N']);
        while let Some(k) = it.key() {
            if k.first() != Some(&b'N') {
                break;
            }
            b.delete(k);
            it.next();
        }
        it.status().map_err(io)?;
        self.db.write(b).map_err(io)?;
        count_children(&self.db).map_err(|e| {
            tracing::error!("recount: {e}");
            Errno::EIO
        })
    }

    /// Applies a write batch a primary made (a secondary's copy, `Request::Replicate`).
    pub fn apply_batch(&self, data: &[u8], synced: bool) -> FsResult<()> {
        let b = WriteBatch::from_data(data);
        let mut wo = WriteOptions::default();
        wo.set_sync(synced);
        self.db.write_opt(b, &wo).map_err(io)
    }

    fn count(b: &mut WriteBatch, path: &str, delta: i64) {
        if let Some((parent, _)) = split_parent(path) {
            b.merge(count_key(parent), delta.to_le_bytes());
        }
    }

    /// Is there an entry at `path`? (An empty record, left by a size publication that came
    /// after a removal, is none.)
    fn exists(&self, path: &str) -> FsResult<bool> {
        Ok(self
            .db
            .get_pinned(entry_key(path))
            .map_err(io)?
            .is_some_and(|v| decode_attr(&v).is_some()))
    }

    fn stripe(&self, id: u64) -> std::sync::MutexGuard<'_, ()> {
        self.stripes[(id as usize) % STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Every record of key space `kind` (the first key byte), decoded (`own_only`: only
    /// this server's own replica set's, see `keep_own`); a damaged one is logged (as a
    /// `what` record) and skipped.
    fn records<T>(
        &self,
        kind: u8,
        what: &str,
        own_only: bool,
        decode: fn(&[u8], &[u8]) -> Option<T>,
    ) -> FsResult<Vec<T>> {
        let mut out = vec![];
        let mut it = prefix_iter(&self.db, &[kind]);
        it.seek([kind]);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if k.first() != Some(&kind) {
                break;
            }
            if let Some((l, set)) = self.own.get().filter(|_| own_only) {
                if key_set(k, l) != Some(*set) {
                    it.next();
                    continue;
                }
            }
            match decode(k, v) {
                Some(r) => out.push(r),
                None => tracing::error!("damaged {what} record {:?}", String::from_utf8_lossy(k)),
            }
            it.next();
        }
        it.status().map_err(io)?;
        Ok(out)
    }

    /// The entry of `path`, which must name file `id` (0: any): ENOENT without one, ESTALE
    /// for another file (a descriptor's file was renamed or unlinked) or for a name of a file
    /// with several names (its size is kept at its home server). The caller holds the path's
    /// lock.
    fn names(&self, path: &str, id: u64) -> FsResult<Attr> {
        match self.get(path)? {
            Some(a) if is_stub(&a) => Err(Errno::ESTALE),
            Some(a) if id == 0 || a.id == id => Ok(a),
            Some(_) => Err(Errno::ESTALE),
            None if id != 0 => Err(Errno::ESTALE),
            None => Err(Errno::ENOENT),
        }
    }

    /// Flushes memtables (clean shutdown).
    pub fn flush(&self) -> FsResult<()> {
        self.db.flush().map_err(io)
    }
}

impl MetadataStore for RocksDbMeta {
    fn root(&self) -> FsResult<Option<Attr>> {
        Ok(self
            .db
            .get_pinned(ROOT_KEY)
            .map_err(io)?
            .and_then(|v| decode_attr(&v)))
    }

    fn put_root(&self, attr: &Attr) -> FsResult<()> {
        let mut b = WriteBatch::default();
        b.put(ROOT_KEY, encode_attr(attr));
        self.commit(b)
    }

    fn get(&self, path: &str) -> FsResult<Option<Attr>> {
        Ok(self
            .db
            .get_pinned(entry_key(path))
            .map_err(io)?
            .and_then(|v| decode_attr(&v)))
    }

    fn put(&self, path: &str, attr: &Attr) -> FsResult<()> {
        let mut b = WriteBatch::default();
        b.put(entry_key(path), encode_attr(attr));
        self.commit(b)
    }

    fn insert(&self, path: &str, attr: &Attr, data: &[u8]) -> FsResult<()> {
        let _p = self.path_stripe(path);
        if self.exists(path)? {
            return Err(Errno::EEXIST);
        }
        let _g = self.stripe(attr.id);
        let mut b = WriteBatch::default();
        b.put(entry_key(path), encode_attr(attr));
        if !data.is_empty() {
            b.put(inline_key(attr.id), data);
        }
        Self::count(&mut b, path, 1);
        self.commit(b)
    }

    fn get_or_insert(
        &self,
        path: &str,
        make: &mut dyn FnMut() -> FsResult<Attr>,
    ) -> FsResult<Created> {
        let _p = self.path_stripe(path);
        if let Some(a) = self.get(path)? {
            return Ok(Created::Existed(a));
        }
        let attr = make()?;
        let _g = self.stripe(attr.id);
        let mut b = WriteBatch::default();
        b.put(entry_key(path), encode_attr(&attr));
        Self::count(&mut b, path, 1);
        self.commit(b)?;
        Ok(Created::New(attr))
    }

    fn remove(&self, path: &str, id: u64, orphan: Option<&Attr>) -> FsResult<()> {
        let _p = self.path_stripe(path);
        let _g = self.stripe(id);
        let mut b = WriteBatch::default();
        if self.exists(path)? {
            b.delete(entry_key(path));
            Self::count(&mut b, path, -1);
        }
        match orphan {
            Some(a) => b.put(orphan_key(id), encode_attr(a)),
            None => b.delete(inline_key(id)),
        }
        self.commit(b)
    }

    fn put_orphan(&self, id: u64, orphan: Option<&Attr>) -> FsResult<()> {
        let _g = self.stripe(id);
        let mut b = WriteBatch::default();
        match orphan {
            Some(a) => b.put(orphan_key(id), encode_attr(a)),
            None => {
                b.delete(orphan_key(id));
                b.delete(inline_key(id));
            }
        }
        self.commit(b)
    }

    fn orphan(&self, id: u64) -> FsResult<Option<Attr>> {
        Ok(self
            .db
            .get_pinned(orphan_key(id))
            .map_err(io)?
            .and_then(|v| decode_attr(&v)))
    }

    fn orphans(&self) -> FsResult<Vec<(u64, Attr)>> {
        self.records(b'O', "orphan", true, decode_orphan)
    }

    fn publish_size(&self, path: &str, id: u64, size: u64, mtime: i64) -> FsResult<()> {
        let _p = self.path_stripe(path);
        self.names(path, id)?;
        self.merge_size(path, size, mtime)
    }

    fn remove_entry(&self, path: &str) -> FsResult<()> {
        let _p = self.path_stripe(path);
        if !self.exists(path)? {
            return Ok(());
        }
        let mut b = WriteBatch::default();
        b.delete(entry_key(path));
        Self::count(&mut b, path, -1);
        self.commit(b)
    }

    fn attach(
        &self,
        path: &str,
        attr: &Attr,
        data: &[u8],
        arrival: Option<&Arrival>,
    ) -> FsResult<()> {
        let _p = self.path_stripe(path);
        let new = !self.exists(path)?;
        let _g = self.stripe(attr.id);
        let mut b = WriteBatch::default();
        b.put(entry_key(path), encode_attr(attr));
        if new {
            Self::count(&mut b, path, 1);
        }
        if !data.is_empty() {
            b.put(inline_key(attr.id), data);
        }
        if let Some(a) = arrival {
            b.put(arrival_key(path), encode_arrival(a));
        }
        self.commit(b)
    }

    fn settle(&self, path: &str, id: u64) -> FsResult<()> {
        let _p = self.path_stripe(path);
        let key = arrival_key(path);
        let Some(v) = self.db.get_pinned(&key).map_err(io)? else {
            return Ok(());
        };
        if decode_arrival(&key, &v).is_none_or(|a| a.id == id) {
            drop(v);
            let mut b = WriteBatch::default();
            b.delete(key);
            self.commit(b)?;
        }
        Ok(())
    }

    fn arrivals(&self) -> FsResult<Vec<Arrival>> {
        self.records(b'A', "move-in", false, decode_arrival)
    }

    fn rename_local(
        &self,
        from: &str,
        to: &str,
        noreplace: bool,
        now: i64,
    ) -> FsResult<Option<Attr>> {
        let _p = self.path_stripes2(from, to);
        let mut a = self.get(from)?.ok_or(Errno::ENOENT)?;
        if a.is_dir() {
            return Err(Errno::ENOTSUP);
        }
        if self.db.get_pinned(intent_key(from)).map_err(io)?.is_some() {
            return Err(Errno::EAGAIN);
        }
        let old = self.get(to)?;
        match old {
            Some(o) if o.id == a.id => return Ok(None), // the same file (from == to)
            Some(o) if o.is_dir() => return Err(Errno::EISDIR),
            Some(_) if noreplace => return Err(Errno::EEXIST),
            _ => {}
        }
        a.ctime = now;
        let mut b = WriteBatch::default();
        b.put(entry_key(to), encode_attr(&a));
        b.delete(entry_key(from));
        Self::count(&mut b, from, -1);
        if old.is_none() {
            Self::count(&mut b, to, 1);
        }
        self.commit(b)?;
        Ok(old)
    }

    fn begin_move(&self, from: &str, to: &str, noreplace: bool) -> FsResult<Attr> {
        let _p = self.path_stripe(from);
        let attr = self.get(from)?.ok_or(Errno::ENOENT)?;
        if attr.is_dir() {
            return Err(Errno::ENOTSUP);
        }
        let key = intent_key(from);
        if self.db.get_pinned(&key).map_err(io)?.is_some() {
            return Err(Errno::EAGAIN);
        }
        let intent = Intent {
            from: from.to_owned(),
            to: to.to_owned(),
            attr,
            noreplace,
        };
        let mut b = WriteBatch::default();
        b.put(key, encode_intent(&intent));
        self.write_synced(b)?;
        Ok(attr)
    }

    fn end_move(&self, intent: &Intent, moved: bool) -> FsResult<()> {
        let from = intent.from.as_str();
        let _p = self.path_stripe(from);
        let mut b = WriteBatch::default();
        b.delete(intent_key(from));
        if moved && self.get(from)?.is_some_and(|a| a.id == intent.attr.id) {
            b.delete(entry_key(from));
            Self::count(&mut b, from, -1);
        }
        self.write_synced(b)
    }

    fn intents(&self) -> FsResult<Vec<Intent>> {
        self.records(b'I', "intent", false, decode_intent)
    }

    fn begin_dir_move(&self, it: &Intent) -> FsResult<()> {
        let mut b = WriteBatch::default();
        b.put(dir_intent_key(&it.from), encode_intent(it));
        self.write_synced(b)
    }

    fn end_dir_move(&self, from: &str) -> FsResult<()> {
        let mut b = WriteBatch::default();
        b.delete(dir_intent_key(from));
        self.write_synced(b)
    }

    fn dir_intents(&self) -> FsResult<Vec<Intent>> {
        self.records(b'D', "directory intent", false, decode_intent)
    }

    fn reserve_append(
        &self,
        path: &str,
        id: u64,
        len: u64,
        mtime: i64,
        reserved: &mut dyn FnMut(u64),
    ) -> FsResult<u64> {
        // appenders to one path serialise on its lock; concurrent size publications are
        // merges (max), so they can only move the end further, never back
        let _p = self.path_stripe(path);
        let a = self.names(path, id)?;
        if a.is_dir() {
            return Err(Errno::EISDIR);
        }
        let end = a
            .size
            .checked_add(len)
            .filter(|e| *e <= i64::MAX as u64)
            .ok_or(Errno::EFBIG)?;
        reserved(a.size);
        self.merge_size(path, end, mtime)?;
        Ok(a.size)
    }

    fn change(&self, path: &str, c: Change) -> FsResult<()> {
        let _p = self.path_stripe(path);
        if self.get(path)?.is_some_and(|a| is_stub(&a)) {
            return Err(Errno::ESTALE);
        }
        let mut b = WriteBatch::default();
        b.merge(entry_key(path), c.encode());
        self.commit(b)
    }

    fn to_stub(
        &self,
        path: &str,
        id: u64,
        adopt: &mut dyn FnMut(&Attr) -> FsResult<()>,
    ) -> FsResult<Attr> {
        let _p = self.path_stripe(path);
        let a = self.names(path, id)?;
        adopt(&a)?;
        self.put(path, &Attr { nlink: 0, ..a })?;
        Ok(a)
    }

    fn merge_size(&self, path: &str, size: u64, mtime: i64) -> FsResult<()> {
        let mut b = WriteBatch::default();
        b.merge(entry_key(path), size_operand(size, mtime));
        self.commit(b)
    }

    fn list(&self, dir: &str, start: u64, max_bytes: usize) -> FsResult<(Vec<Entry>, Option<u64>)> {
        let prefix = dir_prefix(dir);
        let mut from = prefix.clone();
        from.extend_from_slice(&start.to_be_bytes());
        let mut it = prefix_iter(&self.db, &prefix);
        it.seek(&from);
        let mut out: Vec<Entry> = Vec::new();
        let mut bytes = 0usize;
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if !k.starts_with(&prefix) || k.len() < prefix.len() + 8 {
                break;
            }
            let hash = u64::from_be_bytes(k[prefix.len()..prefix.len() + 8].try_into().unwrap());
            // a page ends only between directory positions (`hash >> 1`, the client's
            // cookies), so that a cookie never falls inside a page
            if bytes >= max_bytes && out.last().map(|e| e.hash >> 1) != Some(hash >> 1) {
                return Ok((out, Some(hash)));
            }
            if let (Some(attr), Ok(name)) =
                (decode_attr(v), std::str::from_utf8(&k[prefix.len() + 8..]))
            {
                bytes += name.len() + 48;
                out.push(Entry {
                    hash,
                    name: name.to_owned(),
                    attr,
                });
            }
            it.next();
        }
        it.status().map_err(io)?;
        Ok((out, None))
    }

    fn scan_subtree(
        &self,
        dir: &str,
        after: &[u8],
        visit: &mut dyn FnMut(&str, &str, &Attr) -> bool,
    ) -> FsResult<Option<Vec<u8>>> {
        // children: `E dir \0 …`; deeper: `E dir / …` (for the root: `E / \0` and `E / …`)
        let prefixes = if dir == "/" {
            vec![b"E/".to_vec()] // every entry
        } else {
            let mut deeper = vec![b'E'];
            deeper.extend_from_slice(dir.as_bytes());
            deeper.push(b'/');
            vec![dir_prefix(dir), deeper] // `\0` sorts before `/`
        };
        for prefix in prefixes {
            let mut it = prefix_iter(&self.db, &prefix);
            if after.len() > prefix.len() && after.starts_with(&prefix) {
                it.seek(after);
                if it.valid() && it.key() == Some(after) {
                    it.next();
                }
            } else if !after.is_empty() && after > prefix.as_slice() {
                continue; // this prefix was finished before `after`
            } else {
                it.seek(&prefix);
            }
            while it.valid() {
                let (Some(k), Some(v)) = (it.key(), it.value()) else {
                    break;
                };
                if !k.starts_with(&prefix) {
                    break;
                }
                // key: E parent \0 hash(8) name
                if let (Some(attr), Some(zero)) = (decode_attr(v), k.iter().position(|b| *b == 0)) {
                    if k.len() >= zero + 9 {
                        if let (Ok(parent), Ok(name)) = (
                            std::str::from_utf8(&k[1..zero]),
                            std::str::from_utf8(&k[zero + 9..]),
                        ) {
                            if !visit(parent, name, &attr) {
                                return Ok(Some(k.to_vec()));
                            }
                        }
                    }
                }
                it.next();
            }
            it.status().map_err(io)?;
        }
        Ok(None)
    }

    fn has_children(&self, dir: &str) -> FsResult<bool> {
        // one lookup: a scan would have to skip every tombstone of a mass delete
        let n = self.db.get_pinned(count_key(dir)).map_err(io)?;
        Ok(n.is_some_and(|v| count_of(&v) > 0))
    }

    fn read_inline(&self, id: u64, offset: u64, out: &mut [u8]) -> FsResult<usize> {
        let Some(v) = self.db.get_pinned(inline_key(id)).map_err(io)? else {
            return Ok(0);
        };
        let off = offset as usize;
        if off >= v.len() {
            return Ok(0);
        }
        let n = out.len().min(v.len() - off);
        out[..n].copy_from_slice(&v[off..off + n]);
        Ok(n)
    }

    fn write_inline(
        &self,
        id: u64,
        offset: u64,
        data: &[u8],
        size_of: Option<(&str, u64, i64)>,
    ) -> FsResult<()> {
        // a size goes only to the entry that still names this file (checked under the path's
        // lock: a rename or unlink moves or removes it under the same lock)
        let _p = size_of.map(|(path, ..)| self.path_stripe(path));
        if let Some((path, ..)) = size_of {
            self.names(path, id)?;
        }
        let _g = self.stripe(id);
        let key = inline_key(id);
        let off = offset as usize;
        let mut v = self.db.get(key).map_err(io)?.unwrap_or_default();
        if v.len() < off + data.len() {
            v.resize(off + data.len(), 0);
        }
        v[off..off + data.len()].copy_from_slice(data);
        let mut b = WriteBatch::default();
        b.put(key, v);
        if let Some((path, size, mtime)) = size_of {
            b.merge(entry_key(path), size_operand(size, mtime));
        }
        self.commit(b)
    }

    fn truncate_inline(&self, id: u64, size: u64) -> FsResult<()> {
        let _g = self.stripe(id);
        let key = inline_key(id);
        if let Some(mut v) = self.db.get(key).map_err(io)? {
            if (size as usize) < v.len() {
                v.truncate(size as usize);
                let mut b = WriteBatch::default();
                b.put(key, v);
                self.commit(b)?;
            }
        }
        Ok(())
    }

    fn next_id(&self, slot: u32) -> FsResult<u64> {
        if let Some((set, epoch)) = self.tap().and_then(|t| t.id_scope()) {
            return self.next_id_of_set(set, epoch, slot);
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        if n >= madfs_placement::ID_COUNTER_END {
            return Err(Errno::ENOSPC);
        }
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        if n >= *reserved {
            // reserve the next block durably before handing out ids from it
            let new = (n / ID_BLOCK + 1) * ID_BLOCK;
            let mut wo = WriteOptions::default();
            wo.set_sync(true);
            self.db
                .put_opt(b"Snext_id", new.to_le_bytes(), &wo)
                .map_err(io)?;
            *reserved = new;
        }
        Ok(madfs_placement::make_id(slot, n))
    }

    fn mark(&self) -> u64 {
        // published after the WAL record is written (`manual_wal_flush` is off)
        self.db.latest_sequence_number()
    }

    fn sync(&self, mark: u64) -> FsResult<()> {
        self.wal
            .cover(mark, || self.mark(), || self.db.flush_wal(true).map_err(io))
    }

    fn sync_unshared(&self) -> FsResult<()> {
        self.db.flush_wal(true).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(id: u64) -> Attr {
        Attr {
            id,
            mode: madfs_proto::S_IFREG | 0o644,
            nlink: 1,
            size: 10,
            chunk_size: 4096,
            mtime: 5,
            ..Default::default()
        }
    }

    /// A directory touch moves mtime and ctime to its time, unless the directory changed
    /// later (a time set explicitly after its last entry stays).
    #[test]
    fn a_late_touch_leaves_a_later_change_alone() {
        let mut a = Attr {
            mtime: 100,
            ctime: 100,
            ..attr(1)
        };
        Change::Touch { time: 150 }.apply(&mut a);
        assert_eq!((a.mtime, a.ctime), (150, 150));
        let set = Change::Times {
            atime: None,
            mtime: Some(7),
            ctime: 200,
        };
        set.apply(&mut a);
        Change::Touch { time: 180 }.apply(&mut a);
        assert_eq!((a.mtime, a.ctime), (7, 200));
        Change::Touch { time: 250 }.apply(&mut a);
        assert_eq!((a.mtime, a.ctime), (250, 250));
    }

    #[test]
    fn record_round_trip() {
        let a = Attr {
            atime: -3,
            ctime: i64::MAX,
            uid: 7,
            gid: 8,
            ..attr(99)
        };
        assert_eq!(decode_attr(&encode_attr(&a)), Some(a));
        assert_eq!(decode_attr(&[]), None);
    }

    #[test]
    fn merge_and_list() {
        let dir = tempfile::tempdir().unwrap();
        let m = RocksDbMeta::open(dir.path()).unwrap();
        m.insert("/d/a", &attr(1), &[]).unwrap();
        m.merge_size("/d/a", 100, 9).unwrap();
        m.merge_size("/d/a", 50, 2).unwrap();
        let a = m.get("/d/a").unwrap().unwrap();
        assert_eq!((a.size, a.mtime), (100, 9));
        // a merge after removal leaves the entry absent
        m.remove("/d/a", 1, None).unwrap();
        m.merge_size("/d/a", 7, 1).unwrap();
        assert_eq!(m.get("/d/a").unwrap(), None);
        assert!(!m.has_children("/d").unwrap());
        for i in 0..100 {
            m.insert(&format!("/d/f{i}"), &attr(i), &[]).unwrap();
        }
        m.insert("/d/sub/x", &attr(1000), &[]).unwrap();
        m.insert("/dd", &attr(1001), &[]).unwrap();
        let mut names = vec![];
        let mut start = 0;
        loop {
            let (v, next) = m.list("/d", start, 200).unwrap();
            assert!(v.windows(2).all(|w| w[0].hash <= w[1].hash));
            names.extend(v.into_iter().map(|e| e.name));
            match next {
                Some(n) => start = n,
                None => break,
            }
        }
        names.sort();
        let mut want: Vec<String> = (0..100).map(|i| format!("f{i}")).collect();
        want.sort();
        assert_eq!(names, want);
    }

    #[test]
    fn sizes_folded_at_write_time_keep_the_maximum() {
        let dir = tempfile::tempdir().unwrap();
        let m = RocksDbMeta::open(dir.path()).unwrap();
        m.insert("/f", &attr(1), &[]).unwrap();
        // far more publications than MAX_SUCCESSIVE_MERGES, out of order, read in between
        let n = 10 * MAX_SUCCESSIVE_MERGES as u64;
        for i in 0..n {
            let size = (i * 7919) % n;
            m.merge_size("/f", size, i as i64).unwrap();
            if i % 13 == 0 {
                let a = m.get("/f").unwrap().unwrap();
                assert!(a.size >= size);
            }
        }
        let a = m.get("/f").unwrap().unwrap();
        assert_eq!((a.size, a.mtime), (n - 1, n as i64 - 1));
        // a removal among them still wins over later publications
        m.remove("/f", 1, None).unwrap();
        for i in 0..2 * MAX_SUCCESSIVE_MERGES as u64 {
            m.merge_size("/f", i, 1).unwrap();
        }
        assert_eq!(m.get("/f").unwrap(), None);
    }

    /// Attribute changes are merges too: applied in order with size publications, none
    /// undoes another, none brings back a removed entry, and a name whose entry was removed
    /// under a late publication is free again.
    #[test]
    fn changes_and_publications_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let m = RocksDbMeta::open(dir.path()).unwrap();
        m.insert("/d/f", &attr(1), &[]).unwrap();
        m.merge_size("/d/f", 100, 9).unwrap();
        m.change(
            "/d/f",
            Change::Mode {
                mode: 0o600,
                ctime: 10,
            },
        )
        .unwrap();
        m.merge_size("/d/f", 50, 11).unwrap();
        let times = Change::Times {
            atime: Some(3),
            mtime: None,
            ctime: 12,
        };
        m.change("/d/f", times).unwrap();
        let owner = Change::Owner {
            uid: 7,
            gid: u32::MAX,
            clear: 0o4000,
            ctime: 13,
        };
        m.change("/d/f", owner).unwrap();
        let a = m.get("/d/f").unwrap().unwrap();
        assert_eq!(
            (a.size, a.mode & 0o7777, a.atime, a.mtime, a.ctime, a.uid),
            (100, 0o600, 3, 11, 13, 7)
        );
        m.change("/d/f", Change::Size { size: 10, time: 20 })
            .unwrap();
        m.merge_size("/d/f", 20, 21).unwrap();
        let a = m.get("/d/f").unwrap().unwrap();
        assert_eq!((a.size, a.mtime, a.ctime), (20, 21, 21));
        // after a removal: a publication and a change leave it absent, the name is free
        m.remove("/d/f", 1, None).unwrap();
        m.merge_size("/d/f", 7, 30).unwrap();
        m.change(
            "/d/f",
            Change::Mode {
                mode: 0o644,
                ctime: 31,
            },
        )
        .unwrap();
        assert_eq!(m.get("/d/f").unwrap(), None);
        assert!(!m.has_children("/d").unwrap());
        m.insert("/d/f", &attr(2), &[]).unwrap();
        assert!(m.has_children("/d").unwrap());
        m.remove("/d/f", 2, None).unwrap();
        assert!(!m.has_children("/d").unwrap(), "counted once in, once out");
    }

    #[test]
    fn entry_counts_follow_inserts_removals_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = RocksDbMeta::open(dir.path()).unwrap();
            assert!(!m.has_children("/").unwrap());
            m.insert("/d", &attr(1), &[]).unwrap();
            assert!(m.has_children("/").unwrap());
            assert_eq!(m.insert("/d", &attr(9), &[]), Err(Errno::EEXIST));
            for i in 0..1000 {
                m.insert(&format!("/d/f{i}"), &attr(10 + i), b"x").unwrap();
            }
            // a replacing attach does not count twice; a removal of a missing path is a no-op
            m.attach("/d/f0", &attr(5000), b"y", None).unwrap();
            m.remove_entry("/d/nope").unwrap();
            for i in 0..999 {
                m.remove(&format!("/d/f{i}"), 10 + i, None).unwrap();
            }
            assert!(m.has_children("/d").unwrap());
            m.remove_entry("/d/f999").unwrap();
            assert!(!m.has_children("/d").unwrap(), "1,000 in, 1,000 out");
            m.attach("/d/moved", &attr(7000), &[], None).unwrap();
            assert!(m.has_children("/d").unwrap());
            // make it look like a database from before the counts: no marker, no N keys
            m.db.delete(COUNTS_MARKER).unwrap();
            m.db.delete(count_key("/d")).unwrap();
            m.db.delete(count_key("/")).unwrap();
            assert!(!m.has_children("/d").unwrap());
        }
        // ... which is counted at open
        let m = RocksDbMeta::open(dir.path()).unwrap();
        assert!(m.has_children("/d").unwrap());
        assert!(m.has_children("/").unwrap());
        m.remove_entry("/d/moved").unwrap();
        assert!(!m.has_children("/d").unwrap());
    }

    /// Creates without O_EXCL racing on one path: every one succeeds, exactly one makes the
    /// entry (the others get its attributes), and the parent counts it once.
    #[test]
    fn racing_get_or_insert_makes_one_entry() {
        let dir = tempfile::tempdir().unwrap();
        let m = RocksDbMeta::open(dir.path()).unwrap();
        for round in 0..50u64 {
            let path = format!("/d/f{round}");
            let made: Vec<Created> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..4u64)
                    .map(|t| {
                        let (m, path) = (&m, &path);
                        s.spawn(move || {
                            m.get_or_insert(path, &mut || Ok(attr(1000 * round + t)))
                                .unwrap()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let new: Vec<Attr> = made
                .iter()
                .filter_map(|c| match c {
                    Created::New(a) => Some(*a),
                    Created::Existed(_) => None,
                })
                .collect();
            assert_eq!(new.len(), 1, "{made:?}");
            assert!(made
                .iter()
                .all(|c| matches!(c, Created::Existed(a) if *a == new[0])
                    || *c == Created::New(new[0])));
            assert_eq!(m.get(&path).unwrap(), Some(new[0]));
        }
        for round in 0..50u64 {
            let a = m.get(&format!("/d/f{round}")).unwrap().unwrap();
            m.remove(&format!("/d/f{round}"), a.id, None).unwrap();
        }
        assert!(!m.has_children("/d").unwrap(), "each path counted once");
    }

    #[test]
    fn ids_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let first = {
            let m = RocksDbMeta::open(dir.path()).unwrap();
            m.next_id(7).unwrap()
        };
        let m = RocksDbMeta::open(dir.path()).unwrap();
        let second = m.next_id(7).unwrap();
        assert_eq!(madfs_placement::home_slot(first), 7);
        assert!(second > first);
    }

    #[test]
    fn inline_data() {
        let dir = tempfile::tempdir().unwrap();
        let m = RocksDbMeta::open(dir.path()).unwrap();
        m.write_inline(5, 3, b"abc", None).unwrap();
        let mut out = [9u8; 10];
        assert_eq!(m.read_inline(5, 0, &mut out).unwrap(), 6);
        assert_eq!(&out[..6], b"\0\0\0abc");
        m.truncate_inline(5, 4).unwrap();
        assert_eq!(m.read_inline(5, 0, &mut out).unwrap(), 4);
        assert_eq!(m.read_inline(5, 10, &mut out).unwrap(), 0);
    }

    #[test]
    fn prefix_iterators_end_at_their_prefix() {
        assert_eq!(prefix_end(b"A"), Some(b"B".to_vec()));
        assert_eq!(prefix_end(b"E/d\0"), Some(b"E/d\x01".to_vec()));
        assert_eq!(prefix_end(&[b'A', 0xff, 0xff]), Some(b"B".to_vec()));
        assert_eq!(prefix_end(&[0xff]), None);
        // a scan of a prefix whose keys are all deleted, with live keys after it, sees none
        let dir = tempfile::tempdir().unwrap();
        let m = RocksDbMeta::open(dir.path()).unwrap();
        for i in 0..100u32 {
            m.db.put(format!("Ax{i}"), b"v").unwrap();
        }
        for i in 0..100u32 {
            m.db.delete(format!("Ax{i}")).unwrap();
        }
        m.db.put(b"B1", b"v").unwrap();
        let mut it = prefix_iter(&m.db, b"A");
        it.seek(b"A");
        assert!(!it.valid());
        let mut it = prefix_iter(&m.db, b"B");
        it.seek(b"B");
        assert_eq!(it.key(), Some(&b"B1"[..]));
    }
}
