//! [`Client`]: the [`FileSystem`] over UCX.

use crate::fs::{DirEntry, FileSystem, OpenFlags};
use crate::local::{self, LocalReads};
use crate::ClientConfig;
use futures::future::join_all;
use madfs_placement::{chunk_server, home_server, meta_server, normalize, split_parent, Layout};
use madfs_proto::frame::{self, PREFIX};
use madfs_proto::{
    tag, Attr, Cap, Errno, FindFilter, FsResult, Reply, Request, SizeMode, StatFs, TimeSpec,
};
use madfs_rpc::{RawReply, Transport};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

mod open;
pub use open::{OpenKind, OpenSpec, Opening};

/// Chunk RPCs in flight at once for one large read or write.
const WINDOW: usize = 16;
/// Reply room for metadata replies.
const SMALL_REPLY: usize = 512;
/// Names per readdir page (bytes), and the room for its reply.
const LIST_BYTES: u32 = 16 << 10;
const LIST_REPLY: usize = 64 << 10;
use madfs_rpc::MAP_REPLY;
/// Bytes of matches per find page (the server caps pages at half its 64 KiB header room).
const FIND_BYTES: u32 = 32 << 10;
/// Header room the server keeps in each frame (`net::HEADER_ROOM` on the server).
const HEADER_ROOM: usize = 64 << 10;

/// An open file.
#[derive(Debug, Clone)]
pub struct OpenFile {
    /// Normalised path.
    pub path: String,
    /// Attributes when opened (size as published then).
    pub attr: Attr,
    /// What the open was granted: every data request of the file carries it.
    pub cap: Cap,
    meta: u32,
    /// The file has no name left (open-unlinked): its home server's orphan record stands
    /// for its entry (`meta` is the home server, requests name it by an empty path).
    orphan: bool,
    /// Highest offset written through this handle.
    written: u64,
    dirty: bool,
    /// Servers holding data written since the last fsync.
    touched: BTreeSet<u32>,
}

impl OpenFile {
    /// A handle of the regular file at `path` (normal form; its entry on server `meta`),
    /// opened with `attr` and granted `cap`.
    fn opened(path: String, attr: Attr, cap: Cap, meta: u32) -> OpenFile {
        OpenFile {
            path,
            attr,
            cap,
            meta,
            orphan: false,
            written: 0,
            dirty: false,
            touched: BTreeSet::new(),
        }
    }

    /// Size as this handle sees it: published size or what it wrote, whichever is larger.
    pub fn size(&self) -> u64 {
        self.attr.size.max(self.written)
    }

    /// Highest offset written through this handle (not yet published if `dirty`).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Has this handle written beyond the size it last published?
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Where the file is known to be now: its path (empty once it has no name left).
    pub fn whereabouts(&self) -> &str {
        if self.orphan {
            ""
        } else {
            &self.path
        }
    }

    /// Counts writes made through another handle of the same open file up to `end`, not
    /// published yet: the next `fsync` (or `close`) of this handle publishes them.
    pub fn wrote(&mut self, end: u64) {
        self.written = self.written.max(end);
        self.dirty = true;
    }
}

/// Directory position of an entry: its name hash without the lowest bit, so that positions,
/// and the `telldir`/`lseek` cookies built on them, fit a signed 64-bit `off_t`. Entries are
/// listed in position order, and a position never changes while the entry exists.
pub fn dir_pos(hash: u64) -> u64 {
    hash >> 1
}

/// One past the largest directory position.
pub const DIR_POS_END: u64 = 1 << 63;

/// A listing of one directory in position order ([`Client::dir_cursor`]). An entry present
/// for the whole listing is returned exactly once, whatever is created or removed meanwhile.
#[derive(Debug)]
pub struct DirCursor {
    dir: String,
    to: u64,
    /// The name hash the cursor started from, and the last entry it returned (hash and
    /// name): where servers that joined meanwhile are read from.
    from: u64,
    last: Option<u64>,
    last_name: String,
    /// Per server: fetched entries not yet returned, and the hash to fetch from next.
    servers: Vec<(VecDeque<DirEntry>, Option<u64>)>,
}

/// Counts the directories removed or renamed by the clients of this process (the preload has
/// one client per thread). A client forgets every directory it knew to exist when the count
/// has moved, so no thread trusts a directory that another thread took away.
static DIRS_GONE: AtomicU64 = AtomicU64::new(0);

/// Counts the requests that change something (entries, attributes, data) sent by the clients
/// of this process, counted before they are sent: see [`mutations`].
static MUTATIONS: AtomicU64 = AtomicU64::new(0);

/// How many changing requests the clients of this process have begun so far. Attributes a
/// client read after seeing this value are still what the servers hold (for this process)
/// while it has not moved: the preload answers `fstat` right after `open` from the
/// attributes `open` fetched, instead of asking again.
pub fn mutations() -> u64 {
    MUTATIONS.load(Ordering::Acquire)
}

/// A changing request is about to be sent.
fn mutating(req: &Request<'_>) {
    if req.mutates() {
        mutated();
    }
}

/// Something is about to change (a write, whose requests are built per chunk).
fn mutated() {
    MUTATIONS.fetch_add(1, Ordering::AcqRel);
}

/// Directories a client saw exist (normalised paths), valid while [`DIRS_GONE`] is `gen`.
#[derive(Default)]
struct KnownDirs {
    gen: u64,
    dirs: HashSet<String>,
}

impl KnownDirs {
    /// The set, emptied first if directories went away since it was filled.
    fn at(&mut self, gen: u64) -> &mut HashSet<String> {
        if self.gen != gen {
            self.dirs.clear();
            self.gen = gen;
        }
        &mut self.dirs
    }
}

/// Lookups that went to a server and found an entry, one after another in one directory
/// with no change of this client there in between, before the directory's pages are fetched
/// (statahead); and, while it has none, again every [`STATAHEAD_AGAIN`] such lookups. (A
/// lookup that finds nothing does not count: creating files looks each name up first
/// through FUSE, and a directory being filled would be fetched again and again.)
const STATAHEAD_AFTER: u32 = 8;
const STATAHEAD_AGAIN: u32 = 256;

/// How long a directory whose pages were not kept (too big for the cache, or a server
/// granted no lease) is not fetched again.
const STATAHEAD_PAUSE: std::time::Duration = std::time::Duration::from_secs(30);

/// Lookups of one thread that went to a server, in the directory it looked in last.
#[derive(Default)]
struct Statahead {
    dir: String,
    misses: u32,
    /// The count just reached [`STATAHEAD_AFTER`] (or a multiple of [`STATAHEAD_AGAIN`]).
    armed: bool,
    /// The directory's pages were fetched and not kept, then.
    refused: Option<std::time::Instant>,
}

impl Statahead {
    /// A lookup in `dir` is about to go to a server: time to fetch its pages instead?
    fn due(&mut self, dir: &str, has_pages: impl Fn() -> bool) -> bool {
        if self.dir != dir || !std::mem::take(&mut self.armed) {
            return false;
        }
        let paused = self.refused.is_some_and(|t| t.elapsed() < STATAHEAD_PAUSE);
        !paused && !has_pages()
    }

    /// A lookup in `dir` went to a server and `found` an entry or not.
    fn missed(&mut self, dir: &str, found: bool) {
        if self.dir != dir {
            self.dir.clear();
            self.dir.push_str(dir);
            self.misses = 0;
            self.armed = false;
            self.refused = None;
        }
        if found {
            self.misses = self.misses.saturating_add(1);
            let n = self.misses;
            self.armed =
                n == STATAHEAD_AFTER || (n > STATAHEAD_AFTER && n.is_multiple_of(STATAHEAD_AGAIN));
        }
    }

    /// This client changed something in `dir`: the count starts over.
    fn changed(&mut self, dir: &str) {
        if self.dir == dir {
            self.misses = 0;
            self.armed = false;
        }
    }

    /// The pages of the directory last looked in were not kept.
    fn refused(&mut self) {
        self.refused = Some(std::time::Instant::now());
    }
}

/// Most directories one client remembers (then it starts over).
const KNOWN_DIRS_MAX: usize = 65536;

/// Sequence numbers of this process's request ids (`Request::Once`; the client number is its
/// holder number, new in a fork child).
static ONCE_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What [`Client::look_kept`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Looked {
    /// The entry (`None`: no such entry, its parent a directory).
    pub attr: Option<Attr>,
    /// The end of the lease this process keeps the answer under (`None`: not kept).
    pub until: Option<std::time::Instant>,
    /// Kept by a statahead page of the directory (called back as `dir/`), not on its own.
    pub page: bool,
}

/// The madfs client of one thread.
pub struct Client {
    /// The cluster's id (what this process's cache keeps answers under).
    cluster: u64,
    /// When to fetch a directory's pages (`crate::cache`, statahead).
    statahead: RefCell<Statahead>,
    close_sync: bool,
    t: Transport,
    /// Which server owns each slot: where every key lives (the cluster map's, learnt again
    /// when a server refuses a request for a key it no longer holds, [`Client::relayout`]).
    layout: RefCell<Rc<Layout>>,
    /// The map epoch of `layout` (0: the initial layout, not asked yet).
    layout_epoch: std::cell::Cell<u64>,
    known_dirs: RefCell<KnownDirs>,
    uid: u32,
    gid: u32,
    local: LocalReads,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.layout().servers())
            .finish()
    }
}

/// Whom the servers serve a connection with `creds` as: a proxy's, the user it states
/// (kept answers are that user's); else this process's user.
fn served_as(creds: &madfs_rpc::Credentials) -> (u32, u32) {
    match creds {
        madfs_rpc::Credentials::Proxy { uid, gid, .. } => (*uid, *gid),
        // SAFETY: getuid/getgid cannot fail.
        _ => unsafe { (libc::getuid(), libc::getgid()) },
    }
}

fn attr_of(r: Reply<'_>) -> FsResult<Attr> {
    match r {
        Reply::Attr(a) | Reply::Granted { attr: a, .. } => Ok(a),
        _ => Err(Errno::EPROTO),
    }
}

/// Attributes and the capability a reply granted.
fn granted(r: Reply<'_>) -> FsResult<(Attr, Cap)> {
    match r {
        Reply::Granted { attr, cap } => Ok((attr, cap)),
        _ => Err(Errno::EPROTO),
    }
}

/// One piece of a large read or write: chunk index, offset in chunk, range in the buffer.
fn pieces(
    offset: u64,
    len: usize,
    chunk_size: u64,
    max_piece: usize,
) -> Vec<(u64, u32, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let chunk = pos / chunk_size;
        let in_chunk = pos % chunk_size;
        let n = ((chunk_size - in_chunk) as usize)
            .min(len - done)
            .min(max_piece);
        out.push((chunk, in_chunk as u32, done..done + n));
        done += n;
    }
    out
}

impl Client {
    fn read_once(&self, f: &OpenFile, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        let size = f.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len().min((size - offset) as usize);
        let cs = f.attr.chunk_size.max(1) as u64;
        let max_piece = self.max_piece(f.meta)?;
        let plan = pieces(offset, len, cs, max_piece);
        let mut rest = &mut buf[..len];
        let mut slices = Vec::with_capacity(plan.len());
        let layout = self.layout();
        // (a replicated cluster's layout never changes: its map epoch moves with failovers)
        let checked = !self.t.replicated();
        // the epoch each local server published before its files were read here
        let mut read_at: Vec<(u32, u64)> = vec![];
        for (chunk, in_chunk, range) in &plan {
            let (head, tail) = rest.split_at_mut(range.len());
            rest = tail;
            let server = chunk_server(f.attr.id, *chunk, &layout);
            // chunks ≥ 1 of a server on this host: straight from its chunk file, while this
            // client's layout is as new as the server's map
            if *chunk > 0 && self.is_local(server) {
                let before = match read_at.iter().find(|(s, _)| *s == server) {
                    _ if !checked => Some(0),
                    Some((_, e)) => Some(*e),
                    None => self.local.published(server),
                };
                // a newer map there: learnt first (a read of another layout goes again)
                if before.is_some_and(|e| e > self.layout_epoch.get()) && self.relayout(server) {
                    return Err(Errno::EAGAIN);
                }
                if let Some(e) = before.filter(|e| *e <= self.layout_epoch.get()) {
                    let pos = chunk * cs + *in_chunk as u64;
                    if let Some(n) = self.local.read(server, f.attr.id, pos, head) {
                        head[n..].fill(0);
                        if checked && !read_at.iter().any(|(s, _)| *s == server) {
                            read_at.push((server, e));
                        }
                        continue;
                    }
                }
            }
            self.t.ensure(server)?;
            slices.push((server, *chunk, *in_chunk, head));
        }
        // a slot of a server read here moved meanwhile: the read again
        if read_at
            .iter()
            .any(|(s, e)| self.local.published(*s) != Some(*e))
        {
            return Err(Errno::EAGAIN);
        }
        for group in slices.chunks_mut(WINDOW) {
            let involved: Vec<u32> = group.iter().map(|g| g.0).collect();
            let futs = group.iter_mut().map(|(server, chunk, in_chunk, buf)| {
                let req = Request::Read {
                    id: f.attr.id,
                    chunk: *chunk,
                    offset: *in_chunk,
                    len: buf.len() as u32,
                    chunk_size: cs as u32,
                    cap: f.cap,
                };
                let server = *server;
                async move {
                    let n = self.t.call_read(server, &req, buf).await?;
                    // a hole or the unwritten end of a chunk reads as zeros
                    buf[n..].fill(0);
                    Ok::<_, Errno>(())
                }
            });
            let results = self.t.wait(&involved, async { Ok(join_all(futs).await) })?;
            for r in results {
                r?;
            }
        }
        Ok(len)
    }

    fn write_once(&self, f: &mut OpenFile, offset: u64, data: &[u8]) -> FsResult<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        // a set-id file's write capability says its bits go first (the kernel clears them)
        if f.cap.access & madfs_proto::ACCESS_PRIVS != 0 {
            self.drop_privs(f)?;
        }
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > i64::MAX as u64 {
            return Err(Errno::EFBIG);
        }
        let cs = f.attr.chunk_size.max(1) as u64;
        let max_piece = self.max_piece(f.meta)?;
        let plan = pieces(offset, data.len(), cs, max_piece);
        let mut calls = Vec::with_capacity(plan.len());
        let layout = self.layout();
        for (chunk, in_chunk, range) in plan {
            let server = chunk_server(f.attr.id, chunk, &layout);
            self.t.ensure(server)?;
            f.touched.insert(server);
            calls.push((server, chunk, in_chunk, &data[range]));
        }
        let id = f.attr.id;
        let cap = f.cap;
        // a write that stays in chunk 0 publishes the file's size in the same request, when
        // chunk 0's server (the file's home) holds its entry too
        let all_inline = calls.iter().all(|c| c.1 == 0);
        let mut with_size = !f.orphan && chunk_server(id, 0, &layout) == f.meta;
        let path = f.path.clone();
        mutated();
        // (a write that publishes the size changes the entry: see `Client::call`)
        if with_size {
            crate::cache::forget(self.cluster, &path);
        }
        for group in calls.chunks(WINDOW) {
            let involved: Vec<u32> = group.iter().map(|g| g.0).collect();
            // a server short of room for writes whose data is slow to come answers EAGAIN
            // (docs/architecture.md): the group is sent again after a pause (a write of the
            // same bytes at the same place is the same write)
            let give_up = std::time::Instant::now() + self.t.timeout();
            let mut pause = std::time::Duration::from_millis(1);
            loop {
                let futs = group.iter().map(|(server, chunk, in_chunk, bulk)| {
                    let size_of = (*chunk == 0 && with_size).then_some(path.as_str());
                    // large pieces: header and data as two messages, the data contiguous
                    let data_apart = bulk.len() >= frame::RAW_WRITE_MIN && !self.t.is_tcp();
                    let req = if data_apart {
                        Request::WriteData {
                            id,
                            chunk: *chunk,
                            offset: *in_chunk,
                            len: bulk.len() as u32,
                            chunk_size: cs as u32,
                            size_of,
                            cap,
                        }
                    } else {
                        Request::Write {
                            id,
                            chunk: *chunk,
                            offset: *in_chunk,
                            chunk_size: cs as u32,
                            size_of,
                            cap,
                        }
                    };
                    async move {
                        let raw = if data_apart {
                            self.t.call_write(*server, &req, bulk, SMALL_REPLY).await?
                        } else {
                            self.t
                                .call(*server, tag::REQUEST, &req, bulk, SMALL_REPLY)
                                .await?
                        };
                        match raw.decode()?.0 {
                            Reply::Written(n) if n as usize == bulk.len() => Ok(()),
                            _ => Err(Errno::EIO),
                        }
                    }
                });
                let results = self.t.wait(&involved, async { Ok(join_all(futs).await) })?;
                match results.into_iter().find(|r| r.is_err()) {
                    None => break,
                    // the path names another file now (renamed or unlinked while open):
                    // written again without the size, which the next publication takes
                    // to where the file is
                    Some(Err(Errno::ESTALE)) if with_size => with_size = false,
                    Some(Err(Errno::EAGAIN)) if std::time::Instant::now() < give_up => {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(std::time::Duration::from_millis(50));
                    }
                    Some(r) => r?,
                }
            }
        }
        if with_size {
            crate::cache::forget(self.cluster, &path);
        }
        f.written = f.written.max(end);
        if all_inline && with_size {
            f.attr.size = f.attr.size.max(end);
        } else {
            f.dirty = true;
        }
        Ok(data.len())
    }

    fn fsync_once(&self, f: &mut OpenFile) -> FsResult<()> {
        let mut servers: BTreeSet<u32> = std::mem::take(&mut f.touched);
        // data may also have been written through other handles (other fds, other processes
        // sharing the open file): cover every server that can hold a chunk of the file
        let cs = f.attr.chunk_size.max(1) as u64;
        let chunks = f.size().div_ceil(cs);
        let layout = self.layout();
        if chunks > 4 * layout.servers() as u64 {
            servers.extend(0..layout.servers());
        } else {
            servers.extend((0..chunks.max(1)).map(|c| chunk_server(f.attr.id, c, &layout)));
        }
        let deadline = std::time::Instant::now() + self.t.timeout();
        let mut pause = std::time::Duration::from_millis(1);
        let mut moves = 0;
        loop {
            let mut involved = servers.clone();
            involved.insert(f.meta);
            let involved: Vec<u32> = involved.into_iter().collect();
            for s in &involved {
                self.t.ensure(*s)?;
            }
            // the metadata server's request also publishes the size (no SetSize of its own)
            let plain = Request::Fsync {
                id: f.attr.id,
                size_of: None,
                size: 0,
                cap: f.cap,
            };
            let publishing = Request::Fsync {
                id: f.attr.id,
                size_of: f.dirty.then_some(f.whereabouts()),
                size: f.written,
                cap: f.cap,
            };
            // (a publication changes the entry: see `Client::call`)
            let published = f.dirty.then(|| f.whereabouts().to_owned());
            published
                .iter()
                .for_each(|p| crate::cache::forget(self.cluster, p));
            let futs = involved.iter().map(|s| {
                let req = if *s == f.meta { &publishing } else { &plain };
                self.t.call(*s, tag::FSYNC, req, &[], SMALL_REPLY)
            });
            let results = self.t.wait(&involved, async { Ok(join_all(futs).await) });
            published
                .iter()
                .for_each(|p| crate::cache::forget(self.cluster, p));
            let results = results?;
            let failed = results
                .into_iter()
                .map(|r| r.and_then(|raw| raw.decode().map(drop)))
                .find(|r| r.is_err());
            match failed {
                None => break,
                // the file was renamed or unlinked while open: its size goes where it is now
                Some(Err(Errno::ESTALE)) if moves < 8 => {
                    moves += 1;
                    self.relocate(f)?;
                }
                // its name is being moved right now
                Some(Err(Errno::EAGAIN)) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(50));
                }
                Some(r) => r?,
            }
        }
        if f.dirty {
            f.dirty = false;
            f.attr.size = f.attr.size.max(f.written);
        }
        Ok(())
    }

    /// A read, write or fsync of `f` failed with `e`: in a replicated cluster, is it worth sending
    /// again after a failover (`Transport::failover`) of the replica sets of its chunks?
    fn failover_file(&self, f: &OpenFile, e: Errno) -> bool {
        if matches!(e, Errno::EREMCHG | Errno::EIO) && self.t.replicated() && self.relayout(f.meta)
        {
            // a removal gave the file's slots to another replica set
            return true;
        }
        if e == Errno::EREMCHG && !self.t.replicated() {
            // a slot of the file moved: the layout is learnt again (or, when the refusing
            // server has not applied the move yet, after a pause)
            if !self.relayout(f.meta) {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            return true;
        }
        if e == Errno::EAGAIN && !self.t.replicated() {
            // a slot of the file is frozen for its move (a write sends its own again)
            std::thread::sleep(std::time::Duration::from_millis(5));
            return true;
        }
        let layout = self.layout();
        let sets: Vec<u32> = (0..layout.servers() as u64)
            .map(|c| chunk_server(f.attr.id, c, &layout))
            .collect();
        self.t.failover(&sets, e)
    }

    /// A client for the cluster in `cfg`. Connections are opened lazily, on first use.
    pub fn new(cfg: &ClientConfig) -> std::io::Result<Client> {
        let ctx = madfs_rpc::new_context()?;
        Self::with_context(ctx, cfg)
    }

    /// Like [`Client::new`], sharing a UCX context.
    pub fn with_context(
        ctx: std::sync::Arc<madfs_rpc::Context>,
        cfg: &ClientConfig,
    ) -> std::io::Result<Client> {
        if cfg.servers.is_empty() {
            return Err(std::io::Error::other("cluster has no server"));
        }
        let ucx = cfg.ucx.for_replication(cfg.identity.replication);
        let t = Transport::new(ctx, cfg.servers.clone(), cfg.cluster_file.clone(), ucx)?;
        t.set_timeout(cfg.timeout);
        t.expect_cluster(
            cfg.identity.id.0,
            cfg.identity.servers,
            cfg.identity.replication,
        );
        t.set_credentials(cfg.credentials.clone());
        // this process keeps answers under leases, called back through this transport
        if crate::cache::enabled() {
            t.set_holder(crate::hold::holder(), crate::cache::on_callback);
        }
        let (uid, gid) = served_as(&cfg.credentials);
        Ok(Client {
            cluster: cfg.identity.id.0,
            statahead: RefCell::default(),
            close_sync: cfg.close_sync,
            local: LocalReads::new(
                cfg.local_reads,
                cfg.identity.checksums == madfs_identity::Checksums::Crc32c,
                t.servers(),
            ),
            layout: RefCell::new(Rc::new(Layout::initial(cfg.identity.servers))),
            layout_epoch: Default::default(),
            t,
            known_dirs: RefCell::default(),
            uid,
            gid,
        })
    }

    /// A client that talks plain TCP to the servers' fallback ports (no UCX): for processes
    /// where UCX cannot run, such as the child of a `fork` whose parent had UCX running.
    pub fn new_tcp(cfg: &ClientConfig) -> std::io::Result<Client> {
        let addrs = cfg.tcp_servers.clone().ok_or_else(|| {
            std::io::Error::other("the cluster file lists no TCP port for some server")
        })?;
        let t = Transport::new_tcp(addrs, cfg.cluster_file.clone());
        t.set_timeout(cfg.timeout);
        t.expect_cluster(
            cfg.identity.id.0,
            cfg.identity.servers,
            cfg.identity.replication,
        );
        t.set_credentials(cfg.credentials.clone());
        let (uid, gid) = served_as(&cfg.credentials);
        Ok(Client {
            cluster: cfg.identity.id.0,
            statahead: RefCell::default(),
            close_sync: cfg.close_sync,
            local: LocalReads::new(
                cfg.local_reads,
                cfg.identity.checksums == madfs_identity::Checksums::Crc32c,
                t.servers(),
            ),
            layout: RefCell::new(Rc::new(Layout::initial(cfg.identity.servers))),
            layout_epoch: Default::default(),
            t,
            known_dirs: RefCell::default(),
            uid,
            gid,
        })
    }

    /// From `MADFS_CLUSTER` and friends.
    pub fn from_env() -> std::io::Result<Client> {
        let cfg = ClientConfig::from_env().map_err(std::io::Error::other)?;
        Self::new(&cfg)
    }

    /// The underlying transport (raw calls for benchmarks and tests).
    pub fn transport(&self) -> &Transport {
        &self.t
    }

    /// Does `close` of a written file fsync (the close-sync setting)?
    pub fn close_sync(&self) -> bool {
        self.close_sync
    }

    /// Number of servers.
    pub fn servers(&self) -> u32 {
        self.layout().servers()
    }

    /// Which server owns each slot (as this client knows it).
    pub fn layout(&self) -> Rc<Layout> {
        self.layout.borrow().clone()
    }

    /// Metadata server of a normalised path.
    pub fn meta_of(&self, path: &str) -> u32 {
        meta_server(path, &self.layout.borrow())
    }

    /// A server refused a request for a key it does not hold (`EREMCHG`): the layout is
    /// asked of `asked` (the server that refused, whose map is at least as new as the
    /// refusal; on a replicated cluster the primary of that set) and learnt. True if it
    /// changed (the request is worth sending again to the server the new layout names).
    /// On a replicated cluster whose set `asked` has no server left, the others are asked.
    pub fn relayout(&self, asked: u32) -> bool {
        let mut got = self.layout_of(asked);
        if got.is_err() && self.t.replicated() {
            let n = self.servers();
            let others = (1..n)
                .map(|k| (asked + k) % n)
                .filter(|s| !self.t.removed(*s));
            got = others
                .map(|s| self.layout_of(s))
                .find(Result::is_ok)
                .unwrap_or(got);
        }
        match got {
            // (a server that has not applied the latest map yet answers an older one; the
            // addresses of servers that joined come from the cluster file)
            Ok((epoch, l))
                if epoch > self.layout_epoch.get() && self.t.learn_servers(l.servers()) =>
            {
                self.local.grow(l.servers());
                self.layout_epoch.set(epoch);
                let new = *self.layout.borrow().as_ref() != l;
                if new {
                    tracing::debug!("madfs: the layout of map epoch {epoch} learnt");
                    *self.layout.borrow_mut() = Rc::new(l);
                }
                new
            }
            Ok(_) => false,
            Err(e) => {
                tracing::debug!("madfs: the layout asked of server {asked}: {e}");
                false
            }
        }
    }

    /// The map epoch and layout server `asked` knows (`Request::Map`).
    fn layout_of(&self, asked: u32) -> FsResult<(u64, Layout)> {
        self.t
            .call_sync(asked, &Request::Map, &[], MAP_REPLY)
            .and_then(|raw| match raw.decode()?.0 {
                Reply::Map {
                    epoch,
                    owners,
                    states,
                    ..
                } => {
                    // (servers that joined are in the states)
                    let n = if states.is_empty() {
                        self.servers()
                    } else {
                        states.len() as u32
                    };
                    if owners.is_empty() {
                        return Ok((epoch, Layout::initial(n)));
                    }
                    let owners: Vec<u16> = owners
                        .chunks_exact(2)
                        .map(|b| u16::from_le_bytes([b[0], b[1]]))
                        .collect();
                    Ok((epoch, Layout::from_owners(n, &owners).ok_or(Errno::EPROTO)?))
                }
                _ => Err(Errno::EPROTO),
            })
    }

    /// Is `server` on this host with chunk files this process can read (local reads)?
    fn is_local(&self, server: u32) -> bool {
        // a replica set served by another server after a failover: over the wire (the
        // chunk files found first were its first server's)
        if self.t.routed_elsewhere(server) {
            return false;
        }
        self.local.is_local(server, || {
            self.t.ensure(server)?;
            let raw = self
                .t
                .call_sync(server, &Request::Locate, &[], SMALL_REPLY)?;
            local::located(raw.decode()?.0)
        })
    }

    /// An open file of this process is closed for good (the `FileSystem::close` of `f`, or
    /// the last descriptor of the preload's description): its home server learns it lazily
    /// ([`crate::hold`]).
    pub fn closed(&self, f: &OpenFile) {
        if f.attr.is_file() && crate::hold::closed(f.attr.id) {
            self.flush_releases_quietly();
        }
    }

    /// [`Client::flush_releases`], a failure only logged (a server that misses a release
    /// keeps the file until this process's lease runs out).
    pub fn flush_releases_quietly(&self) {
        if let Err(e) = self.flush_releases() {
            tracing::debug!("releases not told: {e}");
        }
    }

    /// `call` for the modules of this crate.
    pub(crate) fn call_server(&self, server: u32, req: &Request<'_>) -> FsResult<Reply<'static>> {
        self.call(server, req)
    }

    /// One request to `server`. `EAGAIN` (a path whose rename is in flight on that server, a
    /// server still learning the directory table) is retried until the call deadline, then
    /// answered `EIO`.
    fn call(&self, server: u32, req: &Request<'_>) -> FsResult<Reply<'static>> {
        mutating(req);
        // what this process kept of what it changes is forgotten before the change is sent
        // and again once it is answered (a lookup of another thread may have been answered
        // in between: the server does not call back the process that makes the change)
        let changed = req.paths_changed();
        changed
            .iter()
            .for_each(|p| crate::cache::forget(self.cluster, p));
        for (dir, _) in changed.iter().filter_map(|p| split_parent(p)) {
            self.statahead.borrow_mut().changed(dir);
        }
        let r = self.call_retrying(server, req);
        changed
            .iter()
            .for_each(|p| crate::cache::forget(self.cluster, p));
        r
    }

    /// [`Client::call`] without the cache's part. A refusal for a key the server does not
    /// hold (`EREMCHG`: a slot moved, docs/architecture.md "Membership changes") is sent
    /// again to the server the layout names then, learnt from the server that refused.
    fn call_retrying(&self, server: u32, req: &Request<'_>) -> FsResult<Reply<'static>> {
        let deadline = std::time::Instant::now() + self.t.timeout();
        let mut server = server;
        let mut pause = std::time::Duration::from_millis(1);
        let mut waited = 0;
        loop {
            match self.call_busy(server, req) {
                // (replicated: the transport has tried the set's other members; the slots
                // may have gone to another set, a server removed)
                Err(e @ (Errno::EREMCHG | Errno::EIO))
                    if self.t.replicated() && std::time::Instant::now() < deadline =>
                {
                    if self.relayout(server) {
                        match madfs_placement::keys::owner(req, &self.layout()) {
                            Some(to) => server = to,
                            None => return Err(Errno::EREMCHG),
                        }
                    } else if e == Errno::EREMCHG && waited < 3 {
                        // the layout is the one known: the set's primary is changing
                        // (again after a pause, as the transport's failover would)
                        waited += 1;
                        std::thread::sleep(std::time::Duration::from_millis(200));
                    } else {
                        return Err(e);
                    }
                }
                Err(Errno::EREMCHG)
                    if !self.t.replicated() && std::time::Instant::now() < deadline =>
                {
                    self.relayout(server);
                    match madfs_placement::keys::owner(req, &self.layout()) {
                        Some(to) if to != server => server = to,
                        // the owner named has not applied the change yet, or it is under
                        // way: again after a pause
                        Some(_) => {
                            std::thread::sleep(pause);
                            pause = (pause * 2).min(std::time::Duration::from_millis(50));
                        }
                        // its keys are on several servers now: the caller splits it
                        None => return Err(Errno::EREMCHG),
                    }
                }
                r => return r,
            }
        }
    }

    /// [`Client::call_retrying`] without the refusals' part.
    fn call_busy(&self, server: u32, req: &Request<'_>) -> FsResult<Reply<'static>> {
        // a change that must not be applied twice goes with a request id where a failover
        // may send it again (the servers' replay cache, docs/redundancy.md)
        let once;
        let req = if self.t.replicated() && req.needs_once() {
            once = Request::Once {
                client: crate::hold::holder(),
                seq: ONCE_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                req: Box::new(req.clone()),
            };
            &once
        } else {
            req
        };
        let first = small_reply(self.t.call_sync(server, req, &[], SMALL_REPLY)?);
        if first != Err(Errno::EAGAIN) {
            return first;
        }
        let deadline = std::time::Instant::now() + self.t.timeout();
        let mut pause = std::time::Duration::from_millis(1);
        while std::time::Instant::now() < deadline {
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
            match small_reply(self.t.call_sync(server, req, &[], SMALL_REPLY)?) {
                Err(Errno::EAGAIN) => {}
                r => return r,
            }
        }
        tracing::warn!(
            "madfs: {} on server {server}: its path stayed busy (a pending rename) for {:?}",
            req.name(),
            self.t.timeout()
        );
        Err(Errno::EIO)
    }

    /// [`Client::stat_normalized`] that runs `meanwhile` while the request is on its way
    /// (`Transport::call_sync_overlapped`): the preload's `open` makes its kernel fd there.
    pub fn open_normalized_overlapped<R>(
        &self,
        path: &str,
        access: u32,
        meanwhile: impl FnOnce() -> R,
    ) -> (FsResult<(Attr, Cap)>, R) {
        let (raw, r) = self.t.call_sync_overlapped(
            self.meta_of(path),
            &Request::Open {
                path,
                access,
                holder: crate::hold::holder(),
            },
            &[],
            SMALL_REPLY,
            meanwhile,
        );
        let res = match raw.and_then(small_reply) {
            Err(Errno::ENOENT) => Err(self.refine_enoent(path)),
            // busy (a rename in flight, a server still learning the directories), or the
            // path's slot moved: as `call`
            Err(Errno::EAGAIN | Errno::EREMCHG) => self.call(
                self.meta_of(path),
                &Request::Open {
                    path,
                    access,
                    holder: crate::hold::holder(),
                },
            ),
            r => r,
        };
        let res = res.and_then(granted).and_then(|(a, cap)| {
            self.held(self.meta_of(path), &a, cap)?;
            Ok((a, cap))
        });
        (res, r)
    }

    /// A regular file opened with this process as holder (granted `cap`) is held: counted
    /// here, and told to its home server when the entry's server (which counted it
    /// otherwise) is another.
    fn held(&self, meta: u32, a: &Attr, cap: Cap) -> FsResult<()> {
        if !a.is_file() {
            return Ok(());
        }
        crate::hold::opened(a.id, cap);
        if home_server(a.id, &self.layout()) != meta {
            if let Err(e) = self.hold_elsewhere(a.id, cap) {
                crate::hold::closed(a.id);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The file of `f` has no entry at its path any more (ESTALE): asks its home server
    /// where it is now and points `f` there (a rename's new path, or its orphan record).
    fn relocate(&self, f: &mut OpenFile) -> FsResult<()> {
        let home = home_server(f.attr.id, &self.layout());
        let deadline = std::time::Instant::now() + self.t.timeout();
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            match self.where_is(f.attr.id) {
                Ok(Ok(p)) => {
                    f.meta = self.meta_of(&p);
                    f.path = p;
                    f.orphan = false;
                    return Ok(());
                }
                Ok(Err(_)) => {
                    f.orphan = true;
                    f.meta = home;
                    return Ok(());
                }
                // a rename or removal of it is finishing on another server
                Err(Errno::EAGAIN) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(50));
                }
                Err(Errno::EAGAIN) => return Err(Errno::EIO),
                Err(e) => return Err(e),
            }
        }
    }

    /// The server of `f`'s entry (or orphan record) in the layout known now (it may have
    /// moved: [`Client::relayout`]).
    fn replace_file(&self, f: &mut OpenFile) {
        f.meta = if f.orphan {
            home_server(f.attr.id, &self.layout())
        } else {
            self.meta_of(&f.path)
        };
    }

    /// `Where` of open file `id` at its home server: `Ok(path)` naming it now, or
    /// `Err(attributes)` of its orphan record (no name left).
    fn where_is(&self, id: u64) -> FsResult<Result<String, Attr>> {
        let req = Request::Where {
            id,
            client: crate::hold::holder(),
        };
        let raw = self
            .t
            .call_sync(home_server(id, &self.layout()), &req, &[], SMALL_REPLY)?;
        match raw.decode()?.0 {
            Reply::Named(p) => Ok(Ok(p.to_owned())),
            Reply::Attr(a) => Ok(Err(a)),
            _ => Err(Errno::EPROTO),
        }
    }

    /// Runs `op` on `f`, following the file when its path no longer names it (ESTALE: it
    /// was renamed or unlinked while open).
    fn following<T>(
        &self,
        f: &mut OpenFile,
        mut op: impl FnMut(&Self, &mut OpenFile) -> FsResult<T>,
    ) -> FsResult<T> {
        for _ in 0..8 {
            match op(self, f) {
                Err(Errno::ESTALE) => self.relocate(f)?,
                r => return r,
            }
        }
        Err(Errno::EIO)
    }

    /// `fstat` of an open file: its entry's attributes, found where the file is now; nlink 0
    /// once it has no name.
    pub fn fstat(&self, f: &mut OpenFile) -> FsResult<Attr> {
        let id = f.attr.id;
        self.following(f, |c, f| {
            if f.orphan {
                // its orphan record (a path instead: followed like a rename)
                return c.where_is(id)?.map_or_else(Ok, |_| Err(Errno::ESTALE));
            }
            match c.stat_norm(&f.path) {
                Ok(a) if a.id == id => Ok(a),
                Ok(_) | Err(Errno::ENOENT) => Err(Errno::ESTALE),
                Err(e) => Err(e),
            }
        })
    }

    /// `access(2)` of a path in normal form: may this connection's user do `mask`
    /// (`ACCESS_*`; 0: does it exist)? A link answers for itself (the caller follows it).
    pub fn access_normalized(&self, path: &str, mask: u32) -> FsResult<Attr> {
        let req = Request::Open {
            path,
            access: mask,
            holder: 0,
        };
        attr_of(self.call_on(path, &req)?)
    }

    /// A handle for a file whose path (normalised) and attributes are already known, e.g. an
    /// open file inherited by another process.
    pub fn handle(&self, path: String, attr: Attr, cap: Cap) -> OpenFile {
        let meta = self.meta_of(&path);
        OpenFile {
            cap,
            path,
            attr,
            meta,
            orphan: false,
            written: 0,
            dirty: false,
            touched: BTreeSet::new(),
        }
    }

    /// [`Client::handle`] of a file known to be at `whereabouts` now
    /// ([`OpenFile::whereabouts`]: an empty path for a file with no name left).
    pub fn handle_at(&self, path: &str, whereabouts: &str, attr: Attr, cap: Cap) -> OpenFile {
        let mut f = self.handle(path.to_owned(), attr, cap);
        if whereabouts.is_empty() {
            f.orphan = true;
            f.meta = home_server(attr.id, &self.layout());
        } else if whereabouts != path {
            f.path = whereabouts.to_owned();
            f.meta = self.meta_of(whereabouts);
        }
        f
    }

    /// `stat` of a path already in normal form (skips normalisation; the preload library has
    /// normalised while resolving).
    pub fn stat_normalized(&self, path: &str) -> FsResult<Attr> {
        self.look_kept(path)?.attr.ok_or(Errno::ENOENT)
    }

    /// Fetches the statahead pages of directory `dir` now (what a listing followed by stats
    /// of its entries wants: `ls -l`, `find`, `du`), when this process keeps answers.
    pub fn look_ahead(&self, dir: &str) -> FsResult<()> {
        if !crate::cache::enabled() {
            return Ok(());
        }
        let dir = normalize(dir)?;
        self.fetch_pages(&dir).map(drop)
    }

    /// Statahead: every server's slice of `dir`, entries with their attributes, in pages
    /// fetched from all servers at once, kept under the servers' leases on the slices
    /// (`crate::cache::pages_put`; not kept when a slice grants none, or they would not
    /// fit). Returns whether they were kept.
    fn fetch_pages(&self, dir: &str) -> FsResult<bool> {
        // (a replicated cluster's set whose primary died: fetched again from the new one)
        self.t
            .failing_over(&[], || self.all_members(|| self.fetch_pages_once(dir)))
    }

    fn fetch_pages_once(&self, dir: &str) -> FsResult<bool> {
        let all = self.connect_all()?;
        let n = self.layout().servers();
        let gen = crate::cache::generation();
        let sent = std::time::Instant::now();
        let futs = all.iter().map(|&s| async move {
            let mut entries: std::collections::HashMap<String, Option<Attr>> = Default::default();
            let mut lease = u32::MAX;
            let mut start = 0;
            loop {
                let req = Request::LookDir {
                    dir,
                    start,
                    max_bytes: 2 * LIST_BYTES,
                    servers: n,
                };
                let raw = self.t.call(s, tag::REQUEST, &req, &[], LIST_REPLY).await?;
                let Reply::Looks {
                    entries: page,
                    next,
                    lease_ms,
                } = raw.decode()?.0
                else {
                    return Err(Errno::EPROTO);
                };
                lease = lease.min(lease_ms);
                if lease == 0 {
                    return Ok((s, entries, 0));
                }
                entries.extend(madfs_proto::looks_entries(page).map(|(n, a)| (n.to_owned(), a)));
                match next {
                    Some(n) => start = n,
                    None => return Ok((s, entries, lease)),
                }
            }
        });
        let slices = self.t.wait(&all, async { Ok(join_all(futs).await) })?;
        let mut kept = Vec::with_capacity(slices.len());
        let mut lease = u32::MAX;
        for r in slices {
            let (s, entries, l) = r?;
            if l == 0 {
                return Ok(false);
            }
            lease = lease.min(l);
            kept.push((s, entries));
        }
        let until = sent + std::time::Duration::from_millis(lease as u64);
        Ok(crate::cache::pages_put(
            self.cluster,
            dir,
            self.uid,
            kept,
            until,
            gen,
        ))
    }

    /// Callbacks taken by this client go to `handler`, which forgets what they name as
    /// `crate::cache::on_callback` does and may do more (`madfs-fuse` tells the kernel).
    /// With `listens`, this client's connections ask for every callback of the process
    /// (a thread that waits for them: [`Client::wait_callbacks`]). Before the first request.
    pub fn call_back_with(&self, handler: madfs_rpc::callbacks::Handler, listens: bool) {
        if crate::cache::enabled() {
            self.t.set_holder(crate::hold::holder(), handler);
            if listens {
                self.t.listen();
            }
        }
    }

    /// Waits at most `d` for callbacks (UCX: the worker's event), takes them; returns how
    /// many.
    pub fn wait_callbacks(&self, d: std::time::Duration) -> usize {
        let n = self.t.take_callbacks();
        if n > 0 {
            return n;
        }
        if let Some(w) = self.t.worker() {
            madfs_rpc::progress::sleep(w, d);
        } else {
            std::thread::sleep(d);
        }
        self.t.take_callbacks()
    }

    /// Takes the cache's callbacks waiting for this thread's connections (what every call
    /// does first): a process that waits for something else than madfs may call it now and
    /// then, so that writers elsewhere do not wait for its leases to end. Returns how many.
    pub fn take_callbacks(&self) -> usize {
        self.t.take_callbacks()
    }

    /// The entry at normalised `path` (`None`: none, its parent a directory), from this
    /// process's cache (`crate::cache`) or from its server, which may let the answer be
    /// kept; callbacks waiting for this thread are taken first. With it, how long this
    /// process may give the answer again without asking (what a cache above it, the
    /// kernel's through `madfs-fuse`, may keep it for): until `until`, unless a server calls
    /// back first (`crate::cache::on_callback`).
    pub fn look_kept(&self, path: &str) -> FsResult<Looked> {
        if !crate::cache::enabled() {
            let attr = match self.call_on(path, &Request::Stat(path)) {
                Ok(r) => Some(attr_of(r)?),
                Err(Errno::ENOENT) => None,
                Err(e) => return Err(e),
            };
            return Ok(Looked {
                attr,
                until: None,
                page: false,
            });
        }
        self.t.take_callbacks();
        let server = self.meta_of(path);
        let kept = |k: crate::cache::Kept| Looked {
            attr: k.attr,
            until: Some(k.until),
            page: k.page,
        };
        if let Some(k) = crate::cache::lookup(self.cluster, path, Some(server), self.uid) {
            return Ok(kept(k));
        }
        if let Some((dir, _)) = split_parent(path) {
            // names of one directory looked up one after another: its pages, from every
            // server at once (statahead)
            if self
                .statahead
                .borrow_mut()
                .due(dir, || crate::cache::has_pages(self.cluster, dir))
            {
                match self.fetch_pages(dir) {
                    Ok(true) => {
                        let k = crate::cache::lookup(self.cluster, path, Some(server), self.uid);
                        if let Some(k) = k {
                            return Ok(kept(k));
                        }
                    }
                    Ok(false) => self.statahead.borrow_mut().refused(),
                    Err(e) => {
                        tracing::debug!("statahead of {dir}: {e}");
                        self.statahead.borrow_mut().refused();
                    }
                }
            }
        }
        crate::cache::missed();
        let gen = crate::cache::generation();
        let sent = std::time::Instant::now();
        match self.call_on(path, &Request::Look(path))? {
            Reply::Looked { attr, lease_ms } => {
                if let Some((dir, _)) = split_parent(path) {
                    self.statahead.borrow_mut().missed(dir, attr.is_some());
                }
                let a = crate::cache::Answer {
                    cluster: self.cluster,
                    path,
                    uid: self.uid,
                    attr,
                };
                let until = crate::cache::put(a, sent, lease_ms, gen);
                Ok(Looked {
                    attr,
                    until,
                    page: false,
                })
            }
            _ => Err(Errno::EPROTO),
        }
    }

    /// A request about `path` to its metadata server, with a server's ENOENT refined (a
    /// missing ancestor stays ENOENT, one that is not a directory becomes ENOTDIR).
    fn call_on(&self, path: &str, req: &Request<'_>) -> FsResult<Reply<'static>> {
        match self.call(self.meta_of(path), req) {
            Err(Errno::ENOENT) => Err(self.refine_enoent(path)),
            r => r,
        }
    }

    /// The normal form of a path about to be created, its parent checked.
    fn new_entry(&self, path: &str) -> FsResult<String> {
        let path = normalize(path)?;
        if path == "/" {
            return Err(Errno::EEXIST);
        }
        self.check_parent(&path)?;
        Ok(path)
    }

    /// Server-side find: every entry under `dir` (any depth) passing `filter`, evaluated by all
    /// servers in parallel over their own key ranges. Returns (paths sorted, entries examined).
    pub fn find(&self, dir: &str, filter: &FindFilter<'_>) -> FsResult<(Vec<String>, u64)> {
        self.t
            .failing_over(&[], || self.all_members(|| self.find_once(dir, filter)))
    }

    fn find_once(&self, dir: &str, filter: &FindFilter<'_>) -> FsResult<(Vec<String>, u64)> {
        let dir = self.directory(dir)?;
        let all = self.connect_all()?;
        let n = self.layout().servers();
        let dir = dir.as_str();
        let futs = all.iter().map(|&s| async move {
            let mut out = Vec::new();
            let mut scanned = 0u64;
            let mut after: Vec<u8> = Vec::new();
            loop {
                let req = Request::Find {
                    dir,
                    filter: *filter,
                    after: &after,
                    max_bytes: FIND_BYTES,
                    servers: n,
                };
                let raw = self.t.call(s, tag::REQUEST, &req, &[], LIST_REPLY).await?;
                match raw.decode()?.0 {
                    Reply::Found {
                        paths,
                        scanned: n,
                        next,
                    } => {
                        scanned += n;
                        out.extend(paths.into_iter().map(|rel| {
                            if dir == "/" {
                                format!("/{rel}")
                            } else {
                                format!("{dir}/{rel}")
                            }
                        }));
                        match next {
                            Some(k) => after = k.to_vec(),
                            None => return Ok::<_, Errno>((out, scanned)),
                        }
                    }
                    _ => return Err(Errno::EPROTO),
                }
            }
        });
        let parts = self.t.wait(&all, async { Ok(join_all(futs).await) })?;
        let mut paths = Vec::new();
        let mut scanned = 0;
        for p in parts {
            let (v, n) = p?;
            paths.extend(v);
            scanned += n;
        }
        paths.sort();
        Ok((paths, scanned))
    }

    /// A cursor over the entries of `dir` whose positions ([`dir_pos`]) lie in `[from, to)`,
    /// in position order, merged from every server a page at a time.
    pub fn dir_cursor(&self, dir: &str, from: u64, to: u64) -> FsResult<DirCursor> {
        let dir = self.directory(dir)?;
        let all = self.connect_all()?;
        let to = to.min(DIR_POS_END);
        let start = (from < to).then_some(from << 1);
        // (by server id; a removed server has nothing to list)
        let servers = (0..self.layout().servers())
            .map(|s| (VecDeque::new(), start.filter(|_| all.contains(&s))))
            .collect();
        Ok(DirCursor {
            dir,
            to,
            from: from << 1,
            last: None,
            last_name: String::new(),
            servers,
        })
    }

    /// The next entry of a [`DirCursor`], or `None` at its end. When servers joined since
    /// the cursor was made (a server answers `EREMCHG`), the layout is learnt and the new
    /// servers are read too, from the last entry returned on: an entry moved to one of them
    /// after its old server's page was fetched is skipped the second time (entries come in
    /// position order, and none is returned twice).
    pub fn dir_next(&self, c: &mut DirCursor) -> FsResult<Option<DirEntry>> {
        let mut tries = 0;
        loop {
            if let Err(e) = self.dir_fill(c) {
                if !self.again_after_join(e, &mut tries) {
                    return Err(e);
                }
                let from = c.last.map_or(c.from, |h| h);
                while c.servers.len() < self.servers() as usize {
                    c.servers.push((VecDeque::new(), Some(from)));
                }
                continue;
            }
            let best = c
                .servers
                .iter()
                .enumerate()
                .filter_map(|(i, (buf, _))| buf.front().map(|e| (i, e)))
                .min_by(|x, y| (x.1.hash, &x.1.name).cmp(&(y.1.hash, &y.1.name)))
                .map(|(i, _)| i);
            let Some(e) = best.and_then(|i| c.servers[i].0.pop_front()) else {
                return Ok(None);
            };
            let seen = c
                .last
                .is_some_and(|h| (e.hash, e.name.as_str()) <= (h, c.last_name.as_str()));
            if !seen {
                // (the name into a buffer kept: no allocation per entry)
                c.last = Some(e.hash);
                c.last_name.clear();
                c.last_name.push_str(&e.name);
                return Ok(Some(e));
            }
        }
    }

    /// Fetches the next page of every server of `c` whose fetched entries are all returned
    /// and that has more.
    fn dir_fill(&self, c: &mut DirCursor) -> FsResult<()> {
        let empty: Vec<u32> = (0..c.servers.len() as u32)
            .filter(|&s| {
                let (buf, next) = &c.servers[s as usize];
                buf.is_empty() && next.is_some() && !self.t.removed(s)
            })
            .collect();
        if empty.is_empty() {
            return Ok(());
        }
        let (dir, to, n) = (c.dir.as_str(), c.to, c.servers.len() as u32);
        let pages = self.t.failing_over(&empty, || {
            for s in &empty {
                self.t.ensure(*s)?;
            }
            let futs = empty.iter().map(|&s| {
                let start = c.servers[s as usize].1.unwrap_or(0);
                self.list_page(s, n, dir, start, to)
            });
            let pages = self.t.wait(&empty, async { Ok(join_all(futs).await) })?;
            // a page that failed is asked for again (after a failover)
            pages.into_iter().collect::<FsResult<Vec<_>>>()
        })?;
        for (&s, page) in empty.iter().zip(pages) {
            let (entries, next) = page;
            let slot = &mut c.servers[s as usize];
            slot.0.extend(entries);
            slot.1 = next;
        }
        Ok(())
    }

    /// Lists `dir` as `k` position ranges at once (every range on every server concurrently);
    /// the same entries, in the same order, as [`FileSystem::readdir`].
    pub fn readdir_parallel(&self, dir: &str, k: usize) -> FsResult<Vec<DirEntry>> {
        self.t.failing_over(&[], || {
            self.all_members(|| self.readdir_parallel_once(dir, k))
        })
    }

    fn readdir_parallel_once(&self, dir: &str, k: usize) -> FsResult<Vec<DirEntry>> {
        let k = k.clamp(1, 4096) as u64;
        let dir = self.directory(dir)?;
        let all = self.connect_all()?;
        let n = self.layout().servers();
        let step = DIR_POS_END / k;
        let dir = dir.as_str();
        let all_ref = &all;
        let futs = (0..k).flat_map(|i| {
            let (from, to) = (
                i * step,
                if i + 1 == k {
                    DIR_POS_END
                } else {
                    (i + 1) * step
                },
            );
            all_ref.iter().map(move |&s| async move {
                let mut out = Vec::new();
                let mut start = from << 1;
                loop {
                    let (page, next) = self.list_page(s, n, dir, start, to).await?;
                    out.extend(page);
                    match next {
                        Some(n) => start = n,
                        None => return Ok::<_, Errno>(out),
                    }
                }
            })
        });
        let parts = self.t.wait(&all, async { Ok(join_all(futs).await) })?;
        let mut out = Vec::new();
        for p in parts {
            out.extend(p?);
        }
        out.sort_by(|a, b| (a.hash, &a.name).cmp(&(b.hash, &b.name)));
        Ok(out)
    }

    /// One page of server `s`'s slice of `dir` from name hash `start`: the entries with
    /// positions below `to`, and the hash to continue from (`None`: nothing more below `to`).
    async fn list_page(
        &self,
        s: u32,
        servers: u32,
        dir: &str,
        start: u64,
        to: u64,
    ) -> FsResult<(Vec<DirEntry>, Option<u64>)> {
        let req = Request::Readdir {
            dir,
            start,
            max_bytes: LIST_BYTES,
            servers,
        };
        let raw = self.t.call(s, tag::REQUEST, &req, &[], LIST_REPLY).await?;
        match raw.decode()?.0 {
            Reply::Dirents { entries, next } => Ok((
                entries
                    .into_iter()
                    .filter(|e| dir_pos(e.hash) < to)
                    .map(|e| DirEntry {
                        hash: e.hash,
                        ino: e.id,
                        kind: e.kind,
                        name: e.name.to_owned(),
                    })
                    .collect(),
                next.filter(|n| dir_pos(*n) < to),
            )),
            _ => Err(Errno::EPROTO),
        }
    }

    /// Publishes `size` as a lower bound of the size of open file `f` (merge with max on the
    /// server), wherever the file is now.
    pub fn publish_size(&self, f: &mut OpenFile, size: u64) -> FsResult<()> {
        f.written = f.written.max(size);
        f.dirty = true;
        self.publish(f)
    }

    /// `sync(2)` for the cluster: everything every server acknowledged is made durable
    /// (metadata WAL and, with `data`, every chunk file). Without `data`: an fsync of a
    /// directory (its entries are spread over every server).
    pub fn sync_all(&self, data: bool) -> FsResult<()> {
        self.broadcast(&Request::Sync { data }).map(drop)
    }

    /// `mknod` of a FIFO, socket or (as root) character or block device at `path`, `rdev`
    /// as `dev_t`. EINVAL for another type; EEXIST if `path` exists.
    pub fn mknod(&self, path: &str, mode: u32, rdev: u64) -> FsResult<Attr> {
        if !madfs_proto::is_special(mode) {
            return Err(Errno::EINVAL);
        }
        let path = self.new_entry(path)?;
        let req = Request::Mknod {
            path: &path,
            mode,
            rdev: madfs_proto::encode_dev(rdev).ok_or(Errno::EINVAL)?,
            uid: self.uid,
            gid: self.gid,
        };
        match self.call(self.meta_of(&path), &req)? {
            Reply::Created { attr, .. } => Ok(attr),
            _ => Err(Errno::EPROTO),
        }
    }

    /// `link(2)`: `to` becomes a new name of the file at `from` (a symbolic link there gets
    /// the name itself). Returns the file's attributes, its names counted.
    pub fn link(&self, from: &str, to: &str) -> FsResult<Attr> {
        let from = normalize(from)?;
        let to = self.new_entry(to)?;
        let req = Request::Link {
            from: &from,
            to: &to,
        };
        match self.call(self.meta_of(&from), &req) {
            Ok(r) => attr_of(r),
            // which of the two paths is missing (or leads through a non-directory)?
            Err(Errno::ENOENT) => match self.stat_normalized(&from) {
                Ok(_) => Err(self.refine_enoent(&to)),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// `truncate`, or with `cap` (the capability of an open for writing) `ftruncate`: the
    /// open's permission stands for the file's mode bits.
    pub fn truncate_with(&self, path: &str, size: u64, cap: Option<Cap>) -> FsResult<()> {
        let path = normalize(path)?;
        let req = Request::SetSize {
            path: &path,
            size,
            mode: cap.map_or(SizeMode::Exact, SizeMode::ExactWith),
            id: 0,
        };
        let (a, cap) = granted(self.call_on(&path, &req)?)?;
        self.drop_chunks(a.id, size, a.chunk_size, cap)
    }

    /// `ftruncate` of open file `f` (written through a descriptor opened for writing: its
    /// capability stands for the mode bits), wherever the file is now.
    pub fn ftruncate(&self, f: &mut OpenFile, size: u64) -> FsResult<()> {
        let cap = f.cap;
        let id = f.attr.id;
        let (a, cap) = self.following(f, |c, f| {
            let req = Request::SetSize {
                path: f.whereabouts(),
                size,
                mode: SizeMode::ExactWith(cap),
                id,
            };
            granted(c.call(f.meta, &req)?)
        })?;
        f.attr.size = size;
        f.written = f.written.min(size);
        self.drop_chunks(a.id, size, a.chunk_size, cap)
    }

    /// Before a write by someone other than root: the file's set-id bits go, as the kernel
    /// clears them (one request, only where the open's capability says so). The server grants
    /// a capability to write with from then on.
    fn drop_privs(&self, f: &mut OpenFile) -> FsResult<()> {
        let (id, cap) = (f.attr.id, f.cap);
        let (a, cap) = self.following(f, |c, f| {
            let req = Request::DropPrivs {
                path: f.whereabouts(),
                id,
                cap,
            };
            granted(c.call(f.meta, &req)?)
        })?;
        f.attr.mode = a.mode;
        f.cap = cap;
        Ok(())
    }

    /// Round trip of an empty request to `server`.
    pub fn ping(&self, server: u32) -> FsResult<()> {
        self.call(server, &Request::Ping).map(|_| ())
    }

    /// Runs `f`, a request sent to every server (a listing, a find), again while a server
    /// says servers joined that this client's layout lacks (`EREMCHG`: the layout is learnt
    /// from the servers, the newest first found) or that it has not applied the join this
    /// client knows of yet (`EAGAIN`).
    fn all_members<T>(&self, f: impl Fn() -> FsResult<T>) -> FsResult<T> {
        let mut tries = 0;
        loop {
            match f() {
                Err(e) if self.again_after_join(e, &mut tries) => {}
                r => return r,
            }
        }
    }

    /// After error `e` of a request sent to every server (`tries` so far): whether to send
    /// it again. `EREMCHG`: servers joined that this client's layout lacks (the layout is
    /// learnt from the servers, the newest first found); `EAGAIN`: a server has not applied
    /// a join this client knows of yet (after a pause).
    fn again_after_join(&self, e: Errno, tries: &mut u32) -> bool {
        if self.t.replicated() {
            return false;
        }
        *tries += 1;
        match e {
            Errno::EREMCHG if *tries <= 50 => {
                if !(0..self.servers()).any(|s| self.relayout(s)) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                true
            }
            Errno::EAGAIN if *tries <= 500 => {
                std::thread::sleep(std::time::Duration::from_millis(5));
                true
            }
            _ => false,
        }
    }

    /// Connects to every server (those connected already are kept; removed ones are left
    /// out); returns their ids.
    pub fn connect_all(&self) -> FsResult<Vec<u32>> {
        let mut all: Vec<u32> = (0..self.layout().servers()).collect();
        for s in &all {
            if self.t.removed(*s) {
                continue;
            }
            // (a replicated cluster's set whose server is gone: connected to its new primary)
            self.t.failing_over(&[*s], || self.t.ensure(*s))?;
        }
        // (the map learnt meanwhile may have removed some: their sets are others')
        all.retain(|s| !self.t.removed(*s));
        Ok(all)
    }

    /// The normalised path of an existing directory (ENOENT/ENOTDIR otherwise).
    fn directory(&self, path: &str) -> FsResult<String> {
        let path = normalize(path)?;
        if !self.stat_normalized(&path)?.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        Ok(path)
    }

    /// `utimens`; with `link`, of a symbolic link itself (`AT_SYMLINK_NOFOLLOW`) instead of
    /// failing with ELOOP there.
    pub fn utimens_at(
        &self,
        path: &str,
        atime: TimeSpec,
        mtime: TimeSpec,
        link: bool,
    ) -> FsResult<()> {
        let path = normalize(path)?;
        let req = Request::Utimens {
            path: &path,
            atime,
            mtime,
            link,
        };
        self.call_on(&path, &req).map(|_| ())
    }

    /// `chown`; with `link`, of a symbolic link itself (`lchown`).
    pub fn chown_at(&self, path: &str, uid: u32, gid: u32, link: bool) -> FsResult<()> {
        let path = normalize(path)?;
        let req = Request::Chown {
            path: &path,
            uid,
            gid,
            link,
        };
        self.call_on(&path, &req).map(|_| ())
    }

    /// Sends a request to every server at once (connecting first).
    fn broadcast(&self, req: &Request<'_>) -> FsResult<Vec<Reply<'static>>> {
        mutating(req);
        self.t.failing_over(&[], || self.broadcast_once(req))
    }

    fn broadcast_once(&self, req: &Request<'_>) -> FsResult<Vec<Reply<'static>>> {
        let all = self.connect_all()?;
        let futs = all
            .iter()
            .map(|s| self.t.call(*s, tag::REQUEST, req, &[], SMALL_REPLY));
        let raws = self.t.wait(&all, async { Ok(join_all(futs).await) })?;
        raws.into_iter()
            .map(|r| {
                let raw = r?;
                Ok(match raw.decode()?.0 {
                    Reply::Bool(b) => Reply::Bool(b),
                    Reply::StatFs(s) => Reply::StatFs(s),
                    Reply::Attr(a) => Reply::Attr(a),
                    _ => Reply::Unit,
                })
            })
            .collect()
    }

    /// ENOENT on `path`: is the reason a missing ancestor (ENOENT) or one that is not a
    /// directory (ENOTDIR)? Only runs on error paths; a parent this client saw to be a
    /// directory (creating in it, or an earlier miss) costs no request: a lookup of a name
    /// that does not exist is one round trip, as a hit is.
    fn refine_enoent(&self, path: &str) -> Errno {
        let mut p = path;
        while let Some((parent, _)) = split_parent(p) {
            if parent == "/" || self.dir_known(parent) {
                return Errno::ENOENT;
            }
            let gen = DIRS_GONE.load(Ordering::Acquire);
            match self.stat_kept(parent) {
                Ok((a, _)) if !a.is_dir() => return Errno::ENOTDIR,
                Ok((_, kept)) => {
                    if !kept {
                        self.dir_seen(parent, gen);
                    }
                    return Errno::ENOENT;
                }
                Err(_) => p = parent,
            }
        }
        Errno::ENOENT
    }

    /// Is `dir` a directory, as far as this process knows without asking? What the cache
    /// keeps under a lease says so (coherently: a server calls it back); else, where no
    /// lease was granted (the cache off, TCP, a replicated cluster), whether this client saw
    /// it exist as a directory with no directory removed or renamed in this process since.
    fn dir_known(&self, dir: &str) -> bool {
        let server = self.meta_of(dir);
        if let Some(k) = crate::cache::lookup(self.cluster, dir, Some(server), self.uid) {
            return k.attr.is_some_and(|a| a.is_dir());
        }
        let gen = DIRS_GONE.load(Ordering::Acquire);
        self.known_dirs.borrow_mut().at(gen).contains(dir)
    }

    /// `dir` was a directory in a reply to a request sent when [`DIRS_GONE`] was `gen`.
    fn dir_seen(&self, dir: &str, gen: u64) {
        if DIRS_GONE.load(Ordering::Acquire) != gen {
            return; // a directory went away meanwhile: perhaps this one
        }
        let mut k = self.known_dirs.borrow_mut();
        let dirs = k.at(gen);
        if dirs.len() >= KNOWN_DIRS_MAX {
            dirs.clear();
        }
        dirs.insert(dir.to_owned());
    }

    /// A directory was removed or renamed: every client of this process forgets what it knew.
    fn dirs_gone() {
        DIRS_GONE.fetch_add(1, Ordering::AcqRel);
    }

    fn stat_norm(&self, path: &str) -> FsResult<Attr> {
        self.stat_kept(path).map(|(a, _)| a)
    }

    /// [`Client::stat_norm`], and whether the cache keeps the answer under a lease.
    fn stat_kept(&self, path: &str) -> FsResult<(Attr, bool)> {
        if crate::cache::enabled() {
            let l = self.look_kept(path)?;
            return l.attr.map(|a| (a, l.until.is_some())).ok_or(Errno::ENOENT);
        }
        Ok((
            attr_of(self.call(self.meta_of(path), &Request::Stat(path))?)?,
            false,
        ))
    }

    /// The parent of a path being created must exist and be a directory.
    fn check_parent(&self, path: &str) -> FsResult<()> {
        let Some((parent, _)) = split_parent(path) else {
            return Err(Errno::EEXIST);
        };
        if parent == "/" || self.dir_known(parent) {
            return Ok(());
        }
        let gen = DIRS_GONE.load(Ordering::Acquire);
        match self.stat_kept(parent) {
            Ok((a, kept)) if a.is_dir() => {
                if !kept {
                    self.dir_seen(parent, gen);
                }
                Ok(())
            }
            Ok(_) => Err(Errno::ENOTDIR),
            Err(Errno::ENOENT) => Err(self.refine_enoent(parent)),
            Err(e) => Err(e),
        }
    }

    fn publish(&self, f: &mut OpenFile) -> FsResult<()> {
        if f.dirty {
            let (size, id, cap) = (f.written, f.attr.id, f.cap);
            self.following(f, |c, f| {
                let req = Request::SetSize {
                    path: f.whereabouts(),
                    size,
                    mode: SizeMode::MaxWith(cap),
                    id,
                };
                c.call(f.meta, &req)
            })?;
            f.dirty = false;
            f.attr.size = f.attr.size.max(f.written);
        }
        Ok(())
    }

    fn drop_chunks(&self, id: u64, size: u64, chunk_size: u32, cap: Cap) -> FsResult<()> {
        let req = Request::TruncateChunks {
            id,
            size,
            chunk_size,
            cap,
        };
        self.broadcast(&req).map(|_| ())
    }

    /// The most bulk data one request may carry to `server`.
    fn max_piece(&self, server: u32) -> FsResult<usize> {
        let w = self.t.welcome(server)?;
        Ok((w.max_frame as usize)
            .saturating_sub(HEADER_ROOM + PREFIX)
            .max(4096))
    }
}

impl FileSystem for Client {
    type File = OpenFile;

    fn stat(&self, path: &str) -> FsResult<Attr> {
        let path = normalize(path)?;
        self.stat_normalized(&path)
    }

    /// Opens for reading and writing where the user may, else (EACCES) for reading only;
    /// [`Client::open_as`] asks for an exact access.
    fn open(&self, path: &str, flags: OpenFlags) -> FsResult<OpenFile> {
        let rw = madfs_proto::ACCESS_R | madfs_proto::ACCESS_W;
        match self.open_as(path, flags, rw) {
            Err(Errno::EACCES) if !flags.trunc => self.open_as(path, flags, madfs_proto::ACCESS_R),
            r => r,
        }
    }
    fn read(&self, f: &OpenFile, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        let mut retry = madfs_rpc::Retry::default();
        loop {
            match self.read_once(f, offset, buf) {
                Err(e) if retry.again() && self.failover_file(f, e) => {}
                r => return r,
            }
        }
    }

    fn write(&self, f: &mut OpenFile, offset: u64, data: &[u8]) -> FsResult<usize> {
        let mut retry = madfs_rpc::Retry::default();
        loop {
            // a write sent again is the same write (the same bytes at the same place)
            match self.write_once(f, offset, data) {
                Err(e) if retry.again() && self.failover_file(f, e) => self.replace_file(f),
                r => return r,
            }
        }
    }

    fn fsync(&self, f: &mut OpenFile) -> FsResult<()> {
        let mut retry = madfs_rpc::Retry::default();
        loop {
            match self.fsync_once(f) {
                Err(e) if retry.again() && self.failover_file(f, e) => self.replace_file(f),
                r => return r,
            }
        }
    }

    fn close(&self, mut f: OpenFile) -> FsResult<()> {
        let r = if self.close_sync && (f.dirty || !f.touched.is_empty()) {
            self.fsync(&mut f)
        } else {
            self.publish(&mut f)
        };
        self.closed(&f);
        r
    }

    fn append(&self, f: &mut OpenFile, data: &[u8]) -> FsResult<u64> {
        let (id, len) = (f.attr.id, data.len() as u64);
        let off = self.following(f, |c, f| {
            let req = Request::Append {
                path: f.whereabouts(),
                len,
                id,
            };
            match c.call(f.meta, &req)? {
                Reply::Offset(o) => Ok(o),
                _ => Err(Errno::EPROTO),
            }
        })?;
        self.write(f, off, data)?;
        Ok(off)
    }

    fn truncate(&self, path: &str, size: u64) -> FsResult<()> {
        self.truncate_with(path, size, None)
    }

    fn unlink(&self, path: &str) -> FsResult<()> {
        let path = normalize(path)?;
        // our own closes first: a file this process just closed is not kept as open
        self.flush_releases_quietly();
        // the file's home server drops its bytes everywhere, or keeps it while it is open
        self.call_on(&path, &Request::Unlink { path: &path })
            .map(drop)
    }

    fn mkdir(&self, path: &str, mode: u32) -> FsResult<()> {
        let path = self.new_entry(path)?;
        let req = Request::Mkdir {
            path: &path,
            mode,
            uid: self.uid,
            gid: self.gid,
        };
        self.call(self.meta_of(&path), &req)?;
        Ok(())
    }

    fn symlink(&self, target: &str, path: &str) -> FsResult<()> {
        let path = self.new_entry(path)?;
        let req = Request::Symlink {
            path: &path,
            target,
            uid: self.uid,
            gid: self.gid,
        };
        self.call(self.meta_of(&path), &req)?;
        Ok(())
    }

    fn link(&self, from: &str, to: &str) -> FsResult<()> {
        Client::link(self, from, to).map(drop)
    }

    fn readlink(&self, path: &str) -> FsResult<String> {
        let path = normalize(path)?;
        // its server answers with the target (a link is never opened for its data)
        let req = Request::Readlink { path: &path, id: 0 };
        let server = self.meta_of(&path);
        let deadline = std::time::Instant::now() + self.t.timeout();
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            let raw = self.t.call_sync(server, &req, &[], 8192)?;
            match raw.decode() {
                Ok((Reply::Named(t), _)) => return Ok(t.to_owned()),
                Ok(_) => return Err(Errno::EPROTO),
                // (a server still learning the directory table)
                Err(Errno::EAGAIN) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(50));
                }
                Err(Errno::ENOENT) => return Err(self.refine_enoent(&path)),
                Err(e) => return Err(e),
            }
        }
    }

    fn rmdir(&self, path: &str) -> FsResult<()> {
        let path = normalize(path)?;
        if path == "/" {
            return Err(Errno::EBUSY);
        }
        // the directory's server checks every server (server/src/rmdir.rs)
        let removed = self.call_on(&path, &Request::Rmdir { path: &path });
        Self::dirs_gone();
        removed.map(drop)
    }

    fn readdir(&self, path: &str) -> FsResult<Vec<DirEntry>> {
        self.readdir_parallel(path, 1)
    }

    fn chown(&self, path: &str, uid: u32, gid: u32) -> FsResult<()> {
        self.chown_at(path, uid, gid, false)
    }

    fn rename(&self, from: &str, to: &str, noreplace: bool) -> FsResult<()> {
        let from = normalize(from)?;
        let to = normalize(to)?;
        if from == "/" || to == "/" {
            return Err(Errno::EBUSY);
        }
        let a = self.stat(&from)?;
        if to.starts_with(&format!("{from}/")) {
            return Err(Errno::EINVAL);
        }
        if from == to {
            return Ok(());
        }
        if !a.is_dir() {
            self.check_parent(&to)?;
        }
        // a file it replaces may be one this process just closed (see `unlink`)
        self.flush_releases_quietly();
        // the source's server moves the entry, or a directory's whole subtree
        // (docs/consistency.md, "rename")
        let req = Request::Rename {
            from: &from,
            to: &to,
            noreplace,
        };
        let r = self.call(self.meta_of(&from), &req);
        if a.is_dir() {
            // the old directories are gone: no client of this process may trust them
            Self::dirs_gone();
        }
        match r {
            // (the bytes of a replaced file are dropped by the servers)
            Ok(Reply::Replaced(_)) => Ok(()),
            Ok(_) => Err(Errno::EPROTO),
            Err(Errno::ENOENT) => Err(self.refine_enoent(&from)),
            Err(e) => Err(e),
        }
    }

    fn chmod(&self, path: &str, mode: u32) -> FsResult<()> {
        let path = normalize(path)?;
        self.call_on(&path, &Request::Chmod { path: &path, mode })
            .map(|_| ())
    }

    fn utimens(&self, path: &str, atime: TimeSpec, mtime: TimeSpec) -> FsResult<()> {
        self.utimens_at(path, atime, mtime, false)
    }

    fn statfs(&self) -> FsResult<StatFs> {
        let mut total = StatFs {
            namelen: madfs_placement::NAME_MAX as u64,
            ..Default::default()
        };
        for r in self.broadcast(&Request::Statfs)? {
            if let Reply::StatFs(s) = r {
                // report in the first server's block size
                if total.bsize == 0 {
                    total.bsize = s.bsize;
                }
                let scale = |v: u64| v.saturating_mul(s.bsize) / total.bsize.max(1);
                total.blocks += scale(s.blocks);
                total.bfree += scale(s.bfree);
                total.bavail += scale(s.bavail);
                total.files += s.files;
                total.ffree += s.ffree;
            }
        }
        Ok(total)
    }
}

/// The decoded reply of a call whose answers own no borrowed data.
fn small_reply(raw: RawReply) -> FsResult<Reply<'static>> {
    let (r, _) = raw.decode()?;
    // the small replies used here own no borrowed data
    Ok(match r {
        Reply::Unit => Reply::Unit,
        Reply::Attr(a) => Reply::Attr(a),
        Reply::Created {
            attr,
            existed,
            old_size,
            cap,
        } => Reply::Created {
            attr,
            existed,
            old_size,
            cap,
        },
        Reply::Bool(b) => Reply::Bool(b),
        Reply::Written(n) => Reply::Written(n),
        Reply::Offset(o) => Reply::Offset(o),
        Reply::StatFs(s) => Reply::StatFs(s),
        Reply::Replaced(a) => Reply::Replaced(a),
        Reply::Granted { attr, cap } => Reply::Granted { attr, cap },
        Reply::Looked { attr, lease_ms } => Reply::Looked { attr, lease_ms },
        Reply::Dirents { .. }
        | Reply::Named(_)
        | Reply::Found { .. }
        | Reply::Located { .. }
        | Reply::Dirs { .. }
        | Reply::Map { .. }
        | Reply::Records { .. }
        | Reply::Looks { .. } => return Err(Errno::EPROTO),
    })
}

#[cfg(test)]
mod tests {
    use super::pieces;

    #[test]
    fn split_into_chunk_pieces() {
        assert_eq!(
            pieces(0, 10, 4, 100),
            vec![(0, 0, 0..4), (1, 0, 4..8), (2, 0, 8..10)]
        );
        assert_eq!(pieces(5, 2, 4, 100), vec![(1, 1, 0..2)]);
        assert_eq!(
            pieces(0, 8, 8, 3),
            vec![(0, 0, 0..3), (0, 3, 3..6), (0, 6, 6..8)]
        );
        assert!(pieces(3, 0, 4, 4).is_empty());
    }
}
