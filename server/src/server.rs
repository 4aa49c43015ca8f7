//! The server: its stores, its peers and what it keeps in memory, in one value that every
//! part of the request path reads ([`Server`]), and what a request's handler answers
//! ([`Answer`]). The handlers are grouped by family under `crate::handlers`; the request
//! path that leads to them is `crate::pipeline`.

use crate::peer::Peers;
use crate::replica::forward::Replication;
use crate::state::dir_times::DirTimes;
use crate::state::dirs::DirTable;
use crate::state::moving::Moving;
use crate::state::opens::OpenRefs;
use crate::state::sealed::Sealed;
use crate::stats::ServerStats;
use madfs_placement::check_normalized;
use madfs_proto::{Attr, Errno, FsResult, Request, StatFs, S_IFDIR};
use madfs_store::chunks::{FsChunks, Location};
use madfs_store::rocks::RocksMeta;
use madfs_store::{Entry, MetadataStore};
use std::sync::Arc;

/// What an operation produced.
#[derive(Debug)]
pub enum Answer {
    /// Nothing.
    Unit,
    /// Attributes.
    Attr(Attr),
    /// Create result (the capability is filled in by the pipeline: its grant).
    Created {
        attr: Attr,
        existed: bool,
        old_size: u64,
        cap: madfs_proto::Cap,
    },
    /// Attributes with a capability for that file.
    Granted(Attr, madfs_proto::Cap),
    /// Yes/no.
    Bool(bool),
    /// Entry replaced by `Attach`.
    Replaced(Option<Attr>),
    /// Bytes written.
    Written(u32),
    /// Reserved append offset.
    Offset(u64),
    /// Find results, entries examined, and the key to continue after.
    Found(Vec<String>, u64, Option<Vec<u8>>),
    /// Directories (path, mode, uid, gid, version) and the key to continue after.
    #[allow(clippy::type_complexity)]
    Dirs(Vec<(String, u32, u32, u32, i64)>, Option<Vec<u8>>),
    /// Totals.
    StatFs(StatFs),
    /// Directory slice.
    Dirents(Vec<Entry>, Option<u64>),
    /// `n` bytes of read data are in the data buffer.
    Data(usize),
    /// Where the chunk files are.
    Located(Location),
    /// The path naming an open file now (`Where`).
    Named(String),
    /// A rejoining server's copy (`Resync`): records and the key to go on after.
    #[allow(clippy::type_complexity)]
    Records(Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>),
    /// The cluster map: epoch, each server's state (0 up, 1 down, 2 rejoining, 3 removed), the
    /// replication factor, each slot's owner (u16 LE; empty: the initial layout).
    Map(u64, Vec<u8>, u32, Vec<u8>),
    /// An fsync queued for the group-commit sync threads: its result comes later.
    Queued(tokio::sync::oneshot::Receiver<FsResult<()>>),
    /// A lookup's answer (`None`: no such entry) and the lease granted with it, ms.
    Looked(Option<Attr>, u32),
    /// A statahead page (packed entries), where to go on from, its lease (ms).
    Looks(Vec<u8>, Option<u64>, u32),
}

/// The stores of one server and its settings.
pub struct Server {
    /// This server's index.
    pub id: u32,
    /// The other servers (a rename's move, the copies of a replicated cluster).
    pub peers: Arc<Peers>,
    /// Paths whose move to another server is in flight or pending.
    pub moving: Moving,
    /// Metadata and inline chunk 0.
    pub meta: RocksMeta,
    /// Data chunks.
    pub chunks: FsChunks,
    /// Default chunk size of new files.
    pub chunk_size: u32,
    /// Largest readdir reply this server builds, bytes of names.
    pub max_list_bytes: usize,
    /// Bytes of chunk 0 kept inline in RocksDB; the rest of chunk 0 lives in a chunk file on
    /// this (the metadata) server, so appending to a mid-size file never rewrites a large
    /// RocksDB value.
    pub inline_max: u64,
    /// Counters.
    pub stats: Arc<ServerStats>,
    /// Every directory's mode and owner (ancestor checks, [`crate::state::dirs`]).
    pub dirs: DirTable,
    /// Parent directory times waiting to be sent ([`crate::state::dir_times`]).
    pub dir_times: DirTimes,
    /// Directories an rmdir is removing ([`crate::state::sealed`]).
    pub sealed: Sealed,
    /// Open references of the files whose home this server is ([`crate::state::opens`]).
    pub opens: OpenRefs,
    /// A replicated cluster's primaries, fencing and copies ([`crate::replica::forward`]).
    pub replica: Option<Arc<Replication>>,
    /// This server's member of the cluster map's Raft group, once started (every cluster
    /// with a cluster file runs the map, R = 1 too: it holds the layout).
    pub node: Arc<std::sync::OnceLock<Arc<crate::replica::Node>>>,
    /// Does this server run the map (it has a cluster file)? Then it serves keys once the
    /// map was current ([`crate::replica::Node::ready`]).
    pub mapped: bool,
    /// Slots frozen for their move, and the requests in flight in each.
    pub frozen: crate::state::frozen::Frozen,
    /// Records of slots this server does not own it may hold, and the move it receives.
    pub strays: crate::state::strays::Strays,
    /// The root directory's attributes until a change of them is stored ([`root_attr`]).
    pub root: Attr,
    /// Leases of client caches on this server's answers ([`crate::state::leases`]).
    pub leases: crate::state::leases::Leases,
}

impl Server {
    /// The replica set this server acts for now: the set of the request being served (a
    /// replicated cluster's server may serve several after a failover), else its own. What
    /// placement names "this server" is compared with this.
    pub fn here(&self) -> u32 {
        crate::replica::forward::serving_set().unwrap_or(self.id)
    }

    /// Is entry `name` of `dir` in the replica set being served (replicated clusters: a
    /// server holds the entries of several sets), or owned by this server (an unreplicated
    /// one that may hold a slot move's records, [`crate::state::strays`])?
    pub fn in_set(&self, dir: &str, name: &str) -> bool {
        let set = match crate::replica::forward::serving_set() {
            Some(set) => set,
            // (unreplicated: only while it may hold records of slots it does not own)
            None if self.strays.any() => self.id,
            None => return true,
        };
        let path = if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        };
        madfs_placement::meta_server(&path, &self.peers.layout()) == set
    }

    /// Does this server hold entries of `dir` that are its own (every entry, unless it may
    /// hold records of slots it does not own: then a listing that stops at the first)?
    pub fn has_children(&self, dir: &str) -> FsResult<bool> {
        if !self.strays.any() || self.replica.is_some() {
            return self.meta.has_children(dir);
        }
        let mut start = 0;
        loop {
            let (v, next) = self.meta.list(dir, start, 64 << 10)?;
            if v.iter().any(|e| self.in_set(dir, &e.name)) {
                return Ok(true);
            }
            match next {
                Some(n) => start = n,
                None => return Ok(false),
            }
        }
    }

    /// The attributes of `path` (a name of a file with several names: from its home server).
    pub fn get(&self, path: &str) -> FsResult<Attr> {
        if path == "/" {
            return Ok(self.meta.root()?.unwrap_or(self.root));
        }
        self.resolved(self.meta.get(path)?.ok_or(Errno::ENOENT)?)
    }

    /// The cluster map epoch this server knows (0: unreplicated).
    pub fn map_epoch(&self) -> u64 {
        self.replica
            .as_ref()
            .map_or(0, |r| r.map(self.peers.servers()).epoch)
    }

    /// The attributes of `path`, from whichever server holds it.
    pub(crate) fn stat_anywhere(&self, path: &str) -> FsResult<Attr> {
        let s = madfs_placement::meta_server(path, &self.peers.layout());
        if s == self.here() {
            return self.get(path);
        }
        match self.peers.call(s, &Request::Stat(path), &[])? {
            madfs_proto::Reply::Attr(a) => Ok(a),
            _ => Err(Errno::EPROTO),
        }
    }

    /// The entry of `path` as this server holds it (a stub of a file with several names as
    /// it is), if any.
    pub fn entry(&self, path: &str) -> FsResult<Option<Attr>> {
        self.meta.get(path)
    }

    /// Runs `f` as the primary of replica set `set` (the server's own background work for
    /// that set), its changes copied like a request's; not at all where this server is not
    /// that primary. Unreplicated: `f` as it is.
    pub fn as_set(&self, set: u32, f: impl FnOnce()) {
        crate::replica::forward::as_set(self.replica.as_ref(), &self.peers, self.id, set, f)
    }

    /// [`Server::as_set`] for this server's own set.
    pub fn as_own_set(&self, f: impl FnOnce()) {
        self.as_set(self.id, f)
    }

    /// The replica sets this server is the primary of now (its own, unreplicated).
    pub fn primary_of(&self) -> Vec<u32> {
        crate::replica::forward::primary_of(self.replica.as_ref(), self.peers.servers(), self.id)
    }
}

/// Attributes of the root directory of a cluster authenticating with `auth` (key mode:
/// owned by the key's `owner`), until a chmod, chown or utimens of `/` stores others (on the
/// metadata server of `/`, `MetadataStore::put_root`): root's 0755 with MUNGE, the key
/// owner's 0755 with a key, a world-writable sticky 1777 on an insecure cluster (which
/// believes every client anyway). docs/security.md says how a site makes a scratch or
/// per-user directories.
pub fn root_attr(auth: madfs_identity::AuthMode, owner: Option<madfs_identity::Owner>) -> Attr {
    use madfs_identity::AuthMode;
    let (mode, uid, gid) = match auth {
        AuthMode::Munge => (0o755, 0, 0),
        AuthMode::Key => {
            let o = owner.unwrap_or_default();
            (0o755, o.uid, o.gid)
        }
        AuthMode::Insecure => (0o1777, 0, 0),
    };
    Attr {
        id: 1,
        mode: S_IFDIR | mode,
        nlink: 2,
        uid,
        gid,
        ..Default::default()
    }
}

/// Checks that `p` is a path in normal form (EINVAL otherwise).
pub fn path_ok(p: &str) -> FsResult<()> {
    check_normalized(p)
}

/// [`path_ok`], and `e` for the root directory.
pub fn not_root(p: &str, e: Errno) -> FsResult<()> {
    path_ok(p)?;
    if p == "/" {
        Err(e)
    } else {
        Ok(())
    }
}
