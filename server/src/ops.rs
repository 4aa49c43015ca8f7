//! Operations: what each request does to the stores, with POSIX errnos. Pure synchronous
//! logic, run inline on the net thread (metadata) or on an IO thread (data), see
//! [`runs_inline`].

use crate::replica::forward;
use crate::stats::ServerStats;
use crate::store::chunks::{FsChunks, Location};
use crate::store::rocks::{Change, RocksMeta};
use crate::store::{is_stub, ChunkStore, Created, Entry, MetadataStore};
use madfs_placement::check_normalized;
use madfs_proto::{
    Attr, Errno, FsResult, LinkOp, ReplOp, Request, SizeMode, StatFs, TimeSpec, S_IFDIR, S_IFREG,
};
use std::sync::Arc;

/// Entries one `Find` request examines at most: a page ends there even when nothing matched,
/// so a search that matches nothing never scans a whole server in one request.
pub const FIND_SCAN_MAX: u64 = 64 * 1024;

/// Largest offset + length accepted inside one chunk (bounds memory a request can make the
/// server allocate for inline chunk 0).
pub const MAX_CHUNK: u64 = 64 << 20;

/// What an operation produced.
#[derive(Debug)]
pub enum Answer {
    /// Nothing.
    Unit,
    /// Attributes.
    Attr(Attr),
    /// Create result (the capability is filled in by [`Ops::execute_as`]).
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
    /// The cluster map: epoch, each server's state (0 up, 1 down, 2 rejoining), the
    /// replication factor.
    Map(u64, Vec<u8>, u32),
}

/// The stores of one server and its settings.
pub struct Ops {
    /// This server's index.
    pub id: u32,
    /// The other servers (a rename's move, the copies of a replicated cluster).
    pub peers: Arc<crate::peer::Peers>,
    /// Paths whose move to another server is in flight or pending.
    pub moving: crate::rename::Moving,
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
    /// Every directory's mode and owner (ancestor checks, [`crate::perm`]).
    pub dirs: crate::perm::DirTable,
    /// Parent directory times waiting to be sent ([`crate::dirtimes`]).
    pub dir_times: crate::dirtimes::DirTimes,
    /// Directories an rmdir is removing ([`crate::rmdir`]).
    pub sealed: crate::rmdir::Sealed,
    /// Open references of the files whose home this server is ([`crate::open`]).
    pub opens: crate::open::OpenRefs,
    /// A replicated cluster's primaries, fencing and copies ([`crate::replica::forward`]).
    pub replica: Option<Arc<crate::replica::forward::Replication>>,
    /// The root directory's attributes until a change of them is stored ([`root_attr`]).
    pub root: Attr,
}

impl Ops {
    /// The cluster map as this server knows it (`Request::Map`).
    fn map_answer(&self) -> Answer {
        let n = self.peers.servers();
        match &self.replica {
            None => Answer::Map(0, vec![0; n as usize], 1),
            Some(rep) => {
                let (epoch, states) = rep.map_states(n);
                Answer::Map(epoch, states, rep.r)
            }
        }
    }

    /// The replica set this server acts for now: the set of the request being served (a
    /// replicated cluster's server may serve several after a failover), else its own. What
    /// placement names "this server" is compared with this.
    pub fn here(&self) -> u32 {
        forward::serving_set().unwrap_or(self.id)
    }

    /// May this server serve `req` from `who`: does it hold every key the request names
    /// (`crate::admit`), and, on a replicated cluster, is it the primary of the connection's
    /// replica set in a current map? `EREMCHG` otherwise.
    pub fn admits(&self, who: &crate::auth::Who, req: &Request<'_>) -> FsResult<()> {
        let set = match &self.replica {
            Some(_) => who.set.unwrap_or(self.id),
            None => self.id,
        };
        crate::admit::check(req, set, self.peers.servers())?;
        match &self.replica {
            Some(r) => r.admit(who, req).map(drop),
            None => Ok(()),
        }
    }

    /// Is entry `name` of `dir` in the replica set being served (replicated clusters: a
    /// server holds the entries of several sets)?
    fn in_set(&self, dir: &str, name: &str) -> bool {
        let Some(set) = crate::replica::forward::serving_set() else {
            return true;
        };
        let path = if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        };
        madfs_placement::meta_server(&path, self.peers.servers()) == set
    }
}

/// Nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
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

/// Should this request run on the net thread (short RocksDB work) rather than an IO thread?
pub fn runs_inline(req: &Request<'_>, meta_inline: bool) -> bool {
    match req {
        Request::Once { req, .. } => runs_inline(req, meta_inline),
        Request::Ping
        | Request::Bye
        | Request::Locate
        | Request::Stat(_)
        | Request::Open { .. }
        | Request::DirSet { .. }
        | Request::Touch { .. }
        | Request::Statfs
        | Request::Hold { .. }
        | Request::Where { .. }
        | Request::Moved { .. }
        | Request::HasChildren { .. } => true,
        // the cluster map is in memory; a copy of metadata is one write
        Request::Map
        | Request::Replicate {
            op: madfs_proto::ReplOp::Batch { .. },
            ..
        } => true,
        Request::Replicate { .. } | Request::Resync { .. } | Request::ResyncRead { .. } => false,
        Request::Create { .. }
        | Request::Symlink { .. }
        | Request::Mknod { .. }
        | Request::Unlink { .. }
        | Request::Utimens { .. }
        | Request::Append { .. } => meta_inline,
        // a change of a directory is told to every other server before it is answered
        // (`perm::DirTable`); a durable attach waits for a WAL sync: never on the net thread
        Request::Mkdir { .. }
        | Request::Rmdir { .. }
        | Request::Seal { .. }
        | Request::Chmod { .. }
        | Request::Chown { .. }
        | Request::Detach { .. }
        | Request::Attach { .. }
        | Request::Settle { .. }
        | Request::MoveState { .. }
        | Request::Forget { .. }
        | Request::Link { .. }
        | Request::Linked { .. }
        | Request::DropPrivs { .. }
        | Request::DirList { .. } => false,
        // a move to another server waits for that server
        Request::Rename { .. } => false,
        // chunk 0 starts inline in RocksDB; deep into chunk 0 it is a chunk file: IO thread
        Request::Read { chunk, offset, .. }
        | Request::Write { chunk, offset, .. }
        | Request::WriteData { chunk, offset, .. } => {
            *chunk == 0 && *offset < 64 * 1024 && meta_inline
        }
        // SetSize may shrink a chunk file, which waits for replies sent from mappings of it
        // (`FsChunks::map_read`): never on the net thread that sends them
        Request::SetSize { .. }
        | Request::Readdir { .. }
        | Request::Find { .. }
        | Request::TruncateChunks { .. }
        | Request::Fsync { .. }
        | Request::Sync { .. } => false,
    }
}

/// In a replicated cluster, may `req` run on the net thread? Only what makes no copies: a
/// request that writes waits for its secondaries, and the net thread must stay free to take
/// the copies other primaries send (`replica::forward`). Copies themselves are applied
/// there (a write batch, a chunk write into the page cache), never on the IO threads: those
/// may all be waiting for copies of their own (two servers copying to each other with every
/// IO thread busy would wait for each other until the copies' deadline). A sync of a copy
/// runs on a thread of its own.
pub fn runs_inline_replicated(req: &Request<'_>) -> bool {
    matches!(
        req,
        Request::Ping
            | Request::Bye
            | Request::Locate
            | Request::Map
            | Request::Stat(_)
            | Request::Statfs
    ) || matches!(req, Request::Replicate { op, .. } if !matches!(op, ReplOp::Sync { .. }))
}

/// Where `len` bytes at `offset` of chunk `chunk` (chunk size `cs`) are in the file, or
/// `err` if they are not all in that chunk.
pub fn chunk_pos(chunk: u64, offset: u32, len: u64, cs: u32, err: Errno) -> FsResult<u64> {
    if cs == 0 || cs as u64 > MAX_CHUNK || offset as u64 + len > cs as u64 {
        return Err(err);
    }
    let pos = chunk
        .checked_mul(cs as u64)
        .and_then(|p| p.checked_add(offset as u64))
        .ok_or(Errno::EFBIG)?;
    if pos.saturating_add(len) > i64::MAX as u64 {
        return Err(Errno::EFBIG);
    }
    Ok(pos)
}

/// Where a read of `len` bytes at `offset` of chunk `chunk` (chunk size `cs`) starts in the
/// file, and its length cut at the end of the chunk.
pub fn read_span(chunk: u64, offset: u32, len: u32, cs: u32) -> FsResult<(u64, usize)> {
    let len = len.min(cs.saturating_sub(offset));
    Ok((
        chunk_pos(chunk, offset, len as u64, cs, Errno::EINVAL)?,
        len as usize,
    ))
}

pub(crate) fn path_ok(p: &str) -> FsResult<()> {
    check_normalized(p)
}

pub(crate) fn not_root(p: &str, e: Errno) -> FsResult<()> {
    path_ok(p)?;
    if p == "/" {
        Err(e)
    } else {
        Ok(())
    }
}

fn resolve(t: TimeSpec, now: i64) -> Option<i64> {
    match t {
        TimeSpec::Omit => None,
        TimeSpec::Now => Some(now),
        TimeSpec::At(v) => Some(v),
    }
}

impl Ops {
    /// Writes into chunk 0: the first `inline_max` bytes in RocksDB, the rest in a chunk file;
    /// then, with `size_of`, publishes the new end in the entry of that path — in the same
    /// RocksDB write when everything went inline (a small file's write: one WAL record).
    fn write_chunk0(&self, id: u64, off: u64, data: &[u8], size_of: Option<&str>) -> FsResult<()> {
        let t = self.inline_max;
        let end = off + data.len() as u64;
        let mut publish = size_of.map(|p| (p, end, now_ns()));
        if off < t {
            let n = (end.min(t) - off) as usize;
            // the size goes with the bytes only if they are all of them
            let with = if end <= t { publish.take() } else { None };
            self.meta.write_inline(id, off, &data[..n], with)?;
        }
        if end > t {
            let from = off.max(t);
            self.chunks
                .write(id, from, &data[(from - off) as usize..])?;
        }
        if let Some((p, size, mtime)) = publish {
            self.meta.publish_size(p, id, size, mtime)?;
        }
        Ok(())
    }

    /// Reads chunk 0 (inline part, then the chunk-file part); returns the bytes present.
    pub(crate) fn read_chunk0(&self, id: u64, off: u64, out: &mut [u8]) -> FsResult<usize> {
        let t = self.inline_max;
        let end = off + out.len() as u64;
        let mut n = 0;
        if off < t {
            let k = (end.min(t) - off) as usize;
            n = self.meta.read_inline(id, off, &mut out[..k])?;
            if end <= t {
                return Ok(n);
            }
            // the inline part may be short (a hole) while the file part has data
            out[n..k].fill(0);
        }
        let from = off.max(t);
        let skip = (from - off) as usize;
        let m = self.chunks.read(id, from, &mut out[skip..])?;
        Ok(if m > 0 { skip + m } else { n })
    }

    /// Drops the bytes of file `id` at or beyond `size` kept on this server.
    fn drop_local_chunks(&self, id: u64, size: u64) -> FsResult<()> {
        self.chunks.truncate(id, size)
    }

    /// Attributes of a new entry (a fresh id, all times now).
    fn new_attr(&self, mode: u32, nlink: u32, uid: u32, gid: u32, size: u64) -> FsResult<Attr> {
        let now = now_ns();
        Ok(Attr {
            id: self.meta.next_id()?,
            mode,
            nlink,
            uid,
            gid,
            size,
            chunk_size: self.chunk_size,
            rdev: 0,
            atime: now,
            mtime: now,
            ctime: now,
        })
    }

    /// A new entry `a` at `path` with inline data `data` (a symlink's target, or nothing):
    /// inserted unless its directory is sealed or gone, its parent's times touched.
    fn add_entry(&self, path: &str, a: Attr, data: &[u8]) -> FsResult<Answer> {
        crate::replica::replay::note(crate::replica::replay::Note::Created(a));
        self.creating(path, || self.meta.insert(path, &a, data))?;
        self.parent_changed(path, a.ctime);
        Ok(Answer::Created {
            attr: a,
            existed: false,
            old_size: 0,
            cap: Default::default(),
        })
    }

    /// The attributes of `path` (a name of a file with several names: from its home server).
    pub(crate) fn get(&self, path: &str) -> FsResult<Attr> {
        if path == "/" {
            return Ok(self.meta.root()?.unwrap_or(self.root));
        }
        self.resolved(self.meta.get(path)?.ok_or(Errno::ENOENT)?)
    }

    /// `SetSize`: `Max` publishes a lower bound (merge operator), `Exact` truncates; `id` ≠ 0
    /// only to the entry naming that file (ESTALE), an empty path to its orphan record.
    fn set_size(&self, path: &str, size: u64, mode: SizeMode, id: u64) -> FsResult<Answer> {
        if size > i64::MAX as u64 {
            return Err(Errno::EFBIG); // beyond off_t
        }
        if path.is_empty() {
            return self.set_orphan_size(id, size, mode);
        }
        not_root(path, Errno::EISDIR)?;
        let (mut a, linked) = self.lookup(path).map_err(|e| match e {
            Errno::ENOENT if id != 0 => Errno::ESTALE,
            e => e,
        })?;
        if id != 0 && a.id != id {
            return Err(Errno::ESTALE);
        }
        if a.is_link() {
            return Err(Errno::ELOOP); // the client follows the link
        }
        if a.is_dir() {
            return Err(Errno::EISDIR);
        }
        if a.is_special() {
            return Err(Errno::EINVAL); // as truncate(2) of a FIFO or device
        }
        if linked {
            // kept by id at its home server
            return match mode {
                SizeMode::Max | SizeMode::MaxWith(_) => {
                    self.linked(a.id, LinkOp::Grow(size)).map(|_| Answer::Unit)
                }
                _ => self.linked(a.id, LinkOp::Size(size)).map(Answer::Attr),
            };
        }
        match mode {
            SizeMode::Max | SizeMode::MaxWith(_) => {
                self.meta.publish_size(path, a.id, size, now_ns())?;
                Ok(Answer::Unit)
            }
            SizeMode::Exact | SizeMode::ExactWith(_) => {
                let c = Change::Size {
                    size,
                    time: now_ns(),
                };
                c.apply(&mut a);
                self.meta.truncate_inline(a.id, size)?;
                self.drop_local_chunks(a.id, size)?;
                self.change_file(path, a.id, c)?;
                Ok(Answer::Attr(a))
            }
        }
    }

    /// `SetSize` of file `id` by its record at its home server (open with its last name
    /// gone, or with several names).
    fn set_orphan_size(&self, id: u64, size: u64, mode: SizeMode) -> FsResult<Answer> {
        match mode {
            SizeMode::Max | SizeMode::MaxWith(_) => self
                .linked_here(id, LinkOp::Grow(size))
                .map(|_| Answer::Unit),
            _ => self.linked_here(id, LinkOp::Size(size)).map(Answer::Attr),
        }
    }

    /// What an fsync request does before its flush: publish the size it carries.
    pub fn fsync_publish(&self, req: &Request<'_>) -> FsResult<()> {
        if let Request::Fsync {
            id,
            size_of: Some(path),
            size,
            ..
        } = *req
        {
            // (the request's capability was checked for writing: `Ops::cap_check`)
            self.set_size(path, size, SizeMode::Max, id)?;
        }
        Ok(())
    }

    /// Executes one request. `bulk` is the request's data; read results go into `data`.
    pub fn execute(&self, req: &Request<'_>, bulk: &[u8], data: &mut [u8]) -> FsResult<Answer> {
        if self.moving.active() {
            if let Some(refused) = self.while_moving(req) {
                return Err(refused);
            }
        }
        match *req {
            Request::Ping => Ok(Answer::Unit),
            Request::Map => Ok(self.map_answer()),
            // unwrapped in `execute_as` (one level only)
            Request::Once { .. } => Err(Errno::EINVAL),
            // a replicated cluster's copies and catch-ups are served in `execute_as`
            Request::Replicate { .. } | Request::Resync { .. } | Request::ResyncRead { .. } => {
                Err(Errno::EINVAL)
            }
            Request::Stat(path) => {
                path_ok(path)?;
                self.get(path).map(Answer::Attr)
            }
            Request::Open { path, holder, .. } => {
                path_ok(path)?;
                // the lookup and the reference together: an unlink either comes first
                // (ENOENT) or finds the file open
                let _n = (holder != 0).then(|| self.opens.name_lock(path));
                let a = self.get(path)?;
                self.opened(holder, &a);
                Ok(Answer::Attr(a))
            }
            Request::Hold {
                client,
                ref add,
                ref release,
                ref held,
                gone,
            } => {
                self.opens.hold(client, add, release, held, gone);
                Ok(Answer::Unit)
            }
            Request::Where { id, client } => self.where_is(id, client),
            Request::Forget { id, attr } => {
                if id != attr.id {
                    return Err(Errno::EINVAL);
                }
                self.forget_here(&attr).map(Answer::Bool)
            }
            Request::Moved { id, to } => {
                path_ok(to)?;
                self.note_moved(id, to);
                Ok(Answer::Unit)
            }
            Request::Link { from, to } => {
                path_ok(from)?;
                self.link(from, to)
            }
            Request::Linked { id, op } => self.linked_here(id, op).map(Answer::Attr),
            Request::DropPrivs { path, id, .. } => self.drop_privs(path, id).map(Answer::Attr),
            Request::DirSet {
                path,
                mode,
                uid,
                gid,
                version,
                gone,
            } => {
                path_ok(path)?;
                let p = crate::perm::DirPerm {
                    mode,
                    uid,
                    gid,
                    version,
                };
                self.dir_set(path, p, gone)
            }
            Request::DirList {
                after,
                from,
                started,
            } => {
                self.peers.restarted(from, started);
                let (v, next) = self.dir_page(after)?;
                Ok(Answer::Dirs(v, next))
            }
            Request::Create {
                path,
                mode,
                uid,
                gid,
                excl,
                trunc,
                holder,
                ..
            } => {
                not_root(path, Errno::EISDIR)?;
                // the entry and its open reference together (see `Open`)
                let _n = (holder != 0).then(|| self.opens.name_lock(path));
                // only a new entry needs room (opening an existing file never)
                let make = &mut || {
                    self.chunks.admit_entry()?;
                    self.new_attr(S_IFREG | (mode & 0o7777), 1, uid, gid, 0)
                };
                // O_EXCL: the insert itself answers EEXIST; else one lookup under the
                // path's lock finds the entry or creates it
                let found = self.creating(path, || {
                    if excl {
                        let a = make()?;
                        crate::replica::replay::note(crate::replica::replay::Note::Created(a));
                        self.meta.insert(path, &a, &[])?;
                        Ok(Created::New(a))
                    } else {
                        self.meta.get_or_insert(path, make)
                    }
                })?;
                let found = match found {
                    Created::Existed(a) => Created::Existed(self.resolved(a)?),
                    f => f,
                };
                let (Created::New(a) | Created::Existed(a)) = &found;
                self.opened(holder, a);
                match found {
                    Created::New(attr) => {
                        self.parent_changed(path, attr.ctime);
                        Ok(Answer::Created {
                            attr,
                            existed: false,
                            old_size: 0,
                            cap: Default::default(),
                        })
                    }
                    Created::Existed(a) if a.is_dir() => Err(Errno::EISDIR),
                    // a link: the client follows it (never truncate its target string); a
                    // special file has no data to truncate (the kernel ignores O_TRUNC there)
                    Created::Existed(a) if a.is_link() || a.is_special() => Ok(Answer::Created {
                        attr: a,
                        existed: true,
                        old_size: a.size,
                        cap: Default::default(),
                    }),
                    Created::Existed(mut a) => {
                        let old_size = a.size;
                        if trunc && a.size > 0 {
                            let c = Change::Size {
                                size: 0,
                                time: now_ns(),
                            };
                            c.apply(&mut a);
                            self.meta.truncate_inline(a.id, 0)?;
                            self.drop_local_chunks(a.id, 0)?;
                            self.change_file(path, a.id, c)?;
                        }
                        Ok(Answer::Created {
                            attr: a,
                            existed: true,
                            old_size,
                            cap: Default::default(),
                        })
                    }
                }
            }
            Request::Symlink {
                path,
                target,
                uid,
                gid,
            } => {
                not_root(path, Errno::EEXIST)?;
                self.chunks.admit_entry()?;
                if target.is_empty() {
                    return Err(Errno::ENOENT);
                }
                if target.len() >= libc::PATH_MAX as usize {
                    return Err(Errno::ENAMETOOLONG);
                }
                let a = self.new_attr(libc::S_IFLNK | 0o777, 1, uid, gid, target.len() as u64)?;
                // entry and target in one batch
                self.add_entry(path, a, target.as_bytes())
            }
            Request::Mknod {
                path,
                mode,
                rdev,
                uid,
                gid,
            } => {
                not_root(path, Errno::EEXIST)?;
                if !madfs_proto::is_special(mode) {
                    return Err(Errno::EINVAL);
                }
                self.chunks.admit_entry()?;
                let dev = matches!(mode & libc::S_IFMT, libc::S_IFCHR | libc::S_IFBLK);
                let a = Attr {
                    rdev: if dev { rdev } else { 0 },
                    ..self.new_attr(mode & (libc::S_IFMT | 0o7777), 1, uid, gid, 0)?
                };
                self.add_entry(path, a, &[])
            }
            Request::Mkdir {
                path,
                mode,
                uid,
                gid,
            } => {
                not_root(path, Errno::EEXIST)?;
                self.chunks.admit_entry()?;
                let a = self.new_attr(S_IFDIR | (mode & 0o7777), 2, uid, gid, 0)?;
                crate::replica::replay::note(crate::replica::replay::Note::Attr(a));
                self.creating(path, || self.meta.insert(path, &a, &[]))?;
                self.parent_changed(path, a.ctime);
                self.dir_changed(path, Some(&a));
                Ok(Answer::Attr(a))
            }
            Request::Unlink { path } => {
                not_root(path, Errno::EISDIR)?;
                let _n = self.opens.name_lock(path);
                let raw = self.meta.get(path)?.ok_or(Errno::ENOENT)?;
                if raw.is_dir() {
                    return Err(Errno::EISDIR);
                }
                if is_stub(&raw) {
                    let a = self.unlink_stub(path, &raw)?;
                    self.parent_changed(path, now_ns());
                    return Ok(Answer::Attr(a));
                }
                let a = raw;
                crate::replica::replay::note(crate::replica::replay::Note::Attr(a));
                self.unlink_file(path, &a)?;
                self.parent_changed(path, now_ns());
                Ok(Answer::Attr(a))
            }
            Request::Rmdir { path } => self.rmdir(path),
            Request::Seal { dir, sealed } => {
                path_ok(dir)?;
                self.seal(dir, sealed)
            }
            Request::HasChildren { dir } => {
                path_ok(dir)?;
                self.meta.has_children(dir).map(Answer::Bool)
            }
            Request::Readdir {
                dir,
                start,
                max_bytes,
            } => {
                path_ok(dir)?;
                let max = (max_bytes as usize).min(self.max_list_bytes);
                let (mut v, next) = self.meta.list(dir, start, max)?;
                if self.moving.active() {
                    v.retain(|e| !self.moving.hides(dir, &e.name));
                }
                if self.replica.is_some() {
                    // this server holds other replica sets' entries too: the set asked for
                    v.retain(|e| self.in_set(dir, &e.name));
                }
                Ok(Answer::Dirents(v, next))
            }
            Request::SetSize {
                path,
                size,
                mode,
                id,
            } => self.set_size(path, size, mode, id),
            Request::Chmod { path, mode } => {
                path_ok(path)?;
                let mut a = self.get(path)?;
                if a.is_link() {
                    return Err(Errno::ELOOP); // the client follows the link
                }
                let c = Change::Mode {
                    mode,
                    ctime: now_ns(),
                };
                c.apply(&mut a);
                self.change_file(path, a.id, c)?;
                if a.is_dir() {
                    self.dir_changed(path, Some(&a));
                }
                Ok(Answer::Attr(a))
            }
            Request::Utimens {
                path,
                atime,
                mtime,
                link,
            } => {
                path_ok(path)?;
                let mut a = self.get(path)?;
                if a.is_link() && !link {
                    return Err(Errno::ELOOP); // the client follows the link
                }
                let now = now_ns();
                let c = Change::Times {
                    atime: resolve(atime, now),
                    mtime: resolve(mtime, now),
                    ctime: now,
                };
                c.apply(&mut a);
                self.change_file(path, a.id, c)?;
                Ok(Answer::Attr(a))
            }
            Request::Append { path, len, id } => {
                if path.is_empty() {
                    // by its record at its home server (open-unlinked, or several names)
                    let b = self.linked_here(id, LinkOp::Append(len))?;
                    return Ok(Answer::Offset(b.size - len));
                }
                not_root(path, Errno::EISDIR)?;
                match self.lookup(path) {
                    Ok((a, _)) if a.is_link() && (id == 0 || a.id == id) => {
                        return Err(Errno::ELOOP)
                    }
                    // a name of a file with several names: its size is kept at its home
                    Ok((a, true)) if id == 0 || a.id == id => {
                        let b = self.linked(a.id, LinkOp::Append(len))?;
                        return Ok(Answer::Offset(b.size - len));
                    }
                    // the descriptor's file was renamed or unlinked: the client asks its home
                    Err(Errno::ENOENT) if id != 0 => return Err(Errno::ESTALE),
                    Err(e) => return Err(e),
                    Ok(_) => {}
                }
                self.meta
                    .reserve_append(path, id, len, now_ns())
                    .map(Answer::Offset)
            }
            Request::Chown {
                path,
                uid,
                gid,
                link,
            } => {
                path_ok(path)?;
                let mut a = self.get(path)?;
                if a.is_link() && !link {
                    return Err(Errno::ELOOP); // the client follows the link
                }
                let c = Change::Owner {
                    uid,
                    gid,
                    clear: a.mode & !Self::chown_mode(&a, uid, gid),
                    ctime: now_ns(),
                };
                c.apply(&mut a);
                self.change_file(path, a.id, c)?;
                if a.is_dir() {
                    self.dir_changed(path, Some(&a));
                }
                Ok(Answer::Attr(a))
            }
            Request::Rename {
                from,
                to,
                noreplace,
            } => {
                let r = self.rename(from, to, noreplace)?;
                let now = now_ns();
                self.parent_changed(from, now);
                self.parent_changed(to, now);
                Ok(r)
            }
            Request::Touch { dir, time } => {
                path_ok(dir)?;
                self.touch(dir, time);
                Ok(Answer::Unit)
            }
            Request::Settle { path, id } => {
                path_ok(path)?;
                self.settle(path, id).map(|_| Answer::Unit)
            }
            Request::MoveState { from, id } => {
                path_ok(from)?;
                self.move_state(from, id).map(Answer::Bool)
            }
            Request::Attach {
                path,
                attr,
                replace,
                durable,
                from,
                src,
            } => {
                not_root(path, Errno::EISDIR)?;
                let dir = attr.is_dir();
                if !bulk.is_empty() {
                    return Err(Errno::EINVAL); // chunk 0 stays on the file's home server
                }
                // a replaced file is forgotten under its name's lock (see `Unlink`)
                let _n = self.opens.name_lock(path);
                let old = self.meta.get(path)?;
                match old {
                    Some(o) if !replace && o.id != attr.id => return Err(Errno::EEXIST),
                    // a new name of a file with several names (`Link`): never over one
                    Some(_) if !replace && from.is_none() && is_stub(&attr) => {
                        return Err(Errno::EEXIST)
                    }
                    // a directory replaces only an (empty: the client checked) directory
                    Some(o) if dir && !o.is_dir() => return Err(Errno::ENOTDIR),
                    Some(o) if !dir && o.is_dir() => return Err(Errno::EISDIR),
                    _ => {}
                }
                let attr = Attr {
                    ctime: now_ns(),
                    ..attr
                };
                let arrival = from.map(|from| crate::store::Arrival {
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
                    self.dir_changed(path, Some(&attr));
                }
                Ok(Answer::Replaced(old))
            }
            Request::Detach { path, id } => {
                not_root(path, Errno::EBUSY)?;
                let a = self.get(path)?;
                if a.id != id {
                    return Err(Errno::ENOENT);
                }
                self.meta.remove_entry(path)?;
                if a.is_dir() {
                    self.dir_changed(path, None);
                }
                Ok(Answer::Unit)
            }
            Request::Read {
                id,
                chunk,
                offset,
                len,
                chunk_size,
                ..
            } => {
                // a read past the end of the chunk is cut there
                let (pos, len) = read_span(chunk, offset, len, chunk_size)?;
                let len = len.min(data.len());
                let out = &mut data[..len];
                let n = if chunk == 0 {
                    self.read_chunk0(id, pos, out)
                } else {
                    self.chunks.read(id, pos, out)
                };
                if n == Err(Errno::EIO) {
                    tracing::error!("file {id:016x}: chunk {chunk} unreadable (EIO)");
                }
                Ok(Answer::Data(n?))
            }
            Request::Write {
                id,
                chunk,
                offset,
                chunk_size,
                size_of,
                ..
            } => {
                let pos = chunk_pos(chunk, offset, bulk.len() as u64, chunk_size, Errno::EFBIG)?;
                self.chunks.admit(bulk.len() as u64)?;
                if chunk == 0 {
                    if let Some(p) = size_of {
                        path_ok(p)?;
                    }
                    self.write_chunk0(id, offset as u64, bulk, size_of)?;
                } else {
                    self.chunks.write(id, pos, bulk)?;
                }
                Ok(Answer::Written(bulk.len() as u32))
            }
            Request::TruncateChunks {
                id,
                size,
                chunk_size,
                ..
            } => {
                if chunk_size == 0 {
                    return Err(Errno::EINVAL);
                }
                if size < chunk_size as u64
                    && madfs_placement::home_server(id, self.peers.servers()) == self.here()
                {
                    self.meta.truncate_inline(id, size)?; // chunk 0 lives here
                }
                self.chunks.truncate(id, size)?;
                Ok(Answer::Unit)
            }
            Request::Fsync { id, .. } => {
                self.fsync_publish(req)?;
                let wal = self.meta.mark();
                self.chunks.sync(id)?;
                self.meta.sync(wal)?;
                // durable on every live replica (a replicated cluster's secondaries)
                forward::chunk(ReplOp::Sync { id: Some(id) }, &[])?;
                Ok(Answer::Unit)
            }
            Request::Sync { data } => {
                let wal = self.meta.mark();
                if data {
                    self.chunks.sync_all()?;
                }
                self.meta.sync(wal)?;
                forward::chunk(ReplOp::Sync { id: None }, &[])?;
                Ok(Answer::Unit)
            }
            Request::Statfs => self.chunks.statfs().map(Answer::StatFs),
            Request::Bye => Ok(Answer::Unit),
            Request::Locate => Ok(Answer::Located(self.chunks.location().clone())),
            // its data comes as a separate message: the network side turns it into `Write`
            Request::WriteData { .. } => Err(Errno::EINVAL),
            Request::Find {
                dir,
                filter,
                after,
                max_bytes,
            } => {
                path_ok(dir)?;
                let budget = (max_bytes as usize).min(self.max_list_bytes);
                let mut found = Vec::new();
                let mut bytes = 0usize;
                let mut scanned = 0u64;
                let matcher = filter.matcher();
                // only a server's own directory rename sees what other finds do not
                let hidden = |parent: &str, name: &str| {
                    (!filter.pending && self.moving.hides(parent, name))
                        || (self.replica.is_some() && !self.in_set(parent, name))
                };
                // matches travel relative to `dir` (fewer bytes, so fewer pages)
                let base = if dir == "/" {
                    "/".to_string()
                } else {
                    format!("{dir}/")
                };
                let next = self.meta.scan_subtree(dir, after, &mut |parent, name, a| {
                    scanned += 1;
                    if matcher.matches(name, a) && !hidden(parent, name) {
                        let rel = if parent == dir {
                            name.to_string()
                        } else {
                            let sub = parent.strip_prefix(base.as_str()).unwrap_or(parent);
                            format!("{sub}/{name}")
                        };
                        bytes += rel.len() + 8;
                        found.push(rel);
                    }
                    bytes < budget && scanned < FIND_SCAN_MAX
                })?;
                Ok(Answer::Found(found, scanned, next))
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `open(path, O_CREAT | O_EXCL, 0644)` as root.
    pub(crate) fn new_file(path: &str) -> Request<'_> {
        Request::Create {
            path,
            mode: 0o644,
            uid: 0,
            gid: 0,
            excl: true,
            trunc: false,
            access: 0,
            holder: 0,
        }
    }

    pub(crate) fn ops(dir: &std::path::Path) -> Ops {
        let one = madfs_rpc::ClusterIdentity::new(1, 4096, 1024).unwrap();
        Ops {
            id: 0,
            peers: Arc::new(crate::peer::Peers::new(
                one,
                None,
                madfs_rpc::UcxSettings::default(),
                madfs_auth::Key::from_bytes([7; 32]),
            )),
            replica: None,
            dirs: Default::default(),
            dir_times: Default::default(),
            sealed: Default::default(),
            opens: crate::open::OpenRefs::new(crate::open::LEASE),
            moving: Default::default(),
            meta: RocksMeta::open(&dir.join("db"), 0).unwrap(),
            chunks: FsChunks::open(&dir.join("data"), true).unwrap(),
            chunk_size: 4096,
            max_list_bytes: 1 << 16,
            inline_max: 1024,
            stats: Arc::default(),
            root: root_attr(madfs_identity::AuthMode::Munge, None),
        }
    }

    fn create<'a>(path: &'a str, excl: bool) -> Request<'a> {
        Request::Create {
            path,
            mode: 0o644,
            uid: 0,
            gid: 0,
            excl,
            trunc: false,
            access: 0,
            holder: 0,
        }
    }

    #[test]
    fn sizes_beyond_off_t_and_finds_that_match_nothing_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let o = ops(dir.path());
        let mut d = [0u8; 16];
        let create = new_file;
        o.execute(&create("/f"), b"", &mut d).unwrap();
        let big = Request::SetSize {
            path: "/f",
            size: i64::MAX as u64 + 1,
            mode: SizeMode::Exact,
            id: 0,
        };
        assert_eq!(o.execute(&big, b"", &mut d).err(), Some(Errno::EFBIG));
        let append = Request::Append {
            path: "/f",
            len: u64::MAX,
            id: 0,
        };
        assert_eq!(o.execute(&append, b"", &mut d).err(), Some(Errno::EFBIG));
        let n = FIND_SCAN_MAX + 100;
        for i in 0..n {
            o.execute(&create(&format!("/g{i}")), b"", &mut d).unwrap();
        }
        let find = |after: &[u8]| {
            let req = Request::Find {
                dir: "/",
                filter: madfs_proto::FindFilter {
                    name: Some("nothing*"),
                    ..Default::default()
                },
                after,
                max_bytes: 1 << 20,
            };
            match o.execute(&req, b"", &mut Vec::new()).unwrap() {
                Answer::Found(paths, scanned, next) => (paths.len(), scanned, next),
                a => panic!("{a:?}"),
            }
        };
        let (found, scanned, next) = find(b"");
        assert_eq!((found, scanned), (0, FIND_SCAN_MAX));
        let (found, scanned, next) = find(&next.expect("a next page"));
        assert_eq!((found, scanned, next), (0, n + 1 - FIND_SCAN_MAX, None));
    }

    #[test]
    fn errnos() {
        let dir = tempfile::tempdir().unwrap();
        let o = ops(dir.path());
        let mut d = [0u8; 16];
        let mut run = |r: Request<'_>| o.execute(&r, b"", &mut d).map(|_| ());
        assert_eq!(run(Request::Stat("/nope")), Err(Errno::ENOENT));
        assert_eq!(run(Request::Stat("/a/../b")), Err(Errno::EINVAL));
        assert_eq!(run(Request::Stat("relative")), Err(Errno::EINVAL));
        assert_eq!(
            run(Request::Mkdir {
                path: "/d",
                mode: 0o755,
                uid: 0,
                gid: 0
            }),
            Ok(())
        );
        assert_eq!(
            run(Request::Mkdir {
                path: "/d",
                mode: 0o755,
                uid: 0,
                gid: 0
            }),
            Err(Errno::EEXIST)
        );
        assert_eq!(
            run(Request::Mkdir {
                path: "/",
                mode: 0o755,
                uid: 0,
                gid: 0
            }),
            Err(Errno::EEXIST)
        );
        assert_eq!(run(create("/d", false)), Err(Errno::EISDIR));
        assert_eq!(run(create("/d/f", true)), Ok(()));
        assert_eq!(run(create("/d/f", true)), Err(Errno::EEXIST));
        assert_eq!(run(create("/d/f", false)), Ok(()));
        assert_eq!(run(Request::Rmdir { path: "/d" }), Err(Errno::ENOTEMPTY));
        assert_eq!(run(Request::Rmdir { path: "/d/f" }), Err(Errno::ENOTDIR));
        assert_eq!(run(Request::Unlink { path: "/d" }), Err(Errno::EISDIR));
        assert_eq!(run(Request::Unlink { path: "/d/f" }), Ok(()));
        assert_eq!(run(Request::Unlink { path: "/d/f" }), Err(Errno::ENOENT));
        assert_eq!(run(Request::Rmdir { path: "/d" }), Ok(()));
        assert_eq!(run(Request::Rmdir { path: "/" }), Err(Errno::EBUSY));
        assert_eq!(
            run(Request::Write {
                id: 1,
                chunk: 0,
                offset: u32::MAX,
                chunk_size: 4096,
                size_of: None,
                cap: Default::default(),
            }),
            Err(Errno::EFBIG)
        );
        assert_eq!(
            run(Request::TruncateChunks {
                id: 1,
                size: 0,
                chunk_size: 0,
                cap: Default::default(),
            }),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn size_and_data() {
        let dir = tempfile::tempdir().unwrap();
        let o = ops(dir.path());
        let mut d = [0u8; 16];
        let Answer::Created { attr, .. } = o.execute(&create("/f", false), b"", &mut d).unwrap()
        else {
            panic!()
        };
        o.execute(
            &Request::Write {
                id: attr.id,
                chunk: 0,
                offset: 2,
                chunk_size: attr.chunk_size,
                size_of: None,
                cap: Default::default(),
            },
            b"hey",
            &mut d,
        )
        .unwrap();
        o.execute(
            &Request::SetSize {
                path: "/f",
                size: 5,
                mode: SizeMode::Max,
                id: 0,
            },
            b"",
            &mut d,
        )
        .unwrap();
        o.execute(
            &Request::SetSize {
                path: "/f",
                size: 3,
                mode: SizeMode::Max,
                id: 0,
            },
            b"",
            &mut d,
        )
        .unwrap();
        let Answer::Attr(a) = o.execute(&Request::Stat("/f"), b"", &mut d).unwrap() else {
            panic!()
        };
        assert_eq!(a.size, 5);
        let Answer::Data(n) = o
            .execute(
                &Request::Read {
                    id: attr.id,
                    chunk: 0,
                    offset: 0,
                    len: 16,
                    chunk_size: attr.chunk_size,
                    cap: Default::default(),
                },
                b"",
                &mut d,
            )
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(&d[..n], b"\0\0hey");
        let trunc = Request::Create {
            path: "/f",
            mode: 0,
            uid: 0,
            gid: 0,
            excl: false,
            trunc: true,
            access: 0,
            holder: 0,
        };
        let Answer::Created {
            attr,
            existed,
            old_size,
            ..
        } = o.execute(&trunc, b"", &mut d).unwrap()
        else {
            panic!()
        };
        assert_eq!((attr.size, existed, old_size), (0, true, 5));
    }
}

#[cfg(test)]
mod chunk0_tests {
    use super::*;

    #[test]
    fn chunk0_split_between_rocksdb_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let o = super::tests::ops(dir.path());
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        o.write_chunk0(7, 100, &data, None).unwrap(); // spans the inline part and the file part
        let mut out = vec![0xffu8; 3200];
        assert_eq!(o.read_chunk0(7, 0, &mut out).unwrap(), 3100);
        assert!(out[..100].iter().all(|b| *b == 0));
        assert_eq!(&out[100..3100], &data[..]);
        // a write only past the inline part leaves a hole that reads as zeros
        o.write_chunk0(8, 2000, b"tail", None).unwrap();
        let mut out = vec![0xffu8; 2004];
        assert_eq!(o.read_chunk0(8, 0, &mut out).unwrap(), 2004);
        assert!(out[..2000].iter().all(|b| *b == 0));
        assert_eq!(&out[2000..], b"tail");
        // small reads inside the inline part stay short at its end
        let mut out = vec![0u8; 10];
        assert_eq!(o.read_chunk0(8, 0, &mut out).unwrap(), 0);
        o.drop_local_chunks(7, 0).unwrap();
        let mut out = vec![0u8; 100];
        assert_eq!(o.read_chunk0(7, 2000, &mut out).unwrap(), 0);
        // the size is published with a small write (one batch) and after a split one
        let a = Attr {
            id: 9,
            mode: S_IFREG | 0o644,
            nlink: 1,
            chunk_size: 4096,
            ..Default::default()
        };
        o.meta.insert("/s", &a, b"").unwrap();
        o.write_chunk0(9, 0, b"small", Some("/s")).unwrap();
        assert_eq!(o.meta.get("/s").unwrap().unwrap().size, 5);
        o.write_chunk0(9, 500, &data, Some("/s")).unwrap();
        assert_eq!(o.meta.get("/s").unwrap().unwrap().size, 3500);
        o.write_chunk0(9, 1, b"m", Some("/s")).unwrap(); // never shrinks
        let mut out = vec![0u8; 3500];
        assert_eq!(o.read_chunk0(9, 0, &mut out).unwrap(), 3500);
        assert_eq!(&out[..5], b"small");
        assert_eq!(o.meta.get("/s").unwrap().unwrap().size, 3500);
    }
}
