//! The network side of a server: one UCX worker on the net thread (tokio current-thread
//! runtime + `LocalSet`), adaptive progress, an accept loop, and a fixed pool of request
//! handlers with preallocated buffers — memory does not grow with the number of clients.
//!
//! Request path: `handler` receives a frame on the request tag → `serve_frame` decodes it and
//! calls [`Ops::execute`] (inline for short metadata work, else on an IO thread; a chunk read
//! the page cache holds whole is answered inline by `read_nowait`, a large one from a mapping)
//! → the reply (prefix, header, data) goes back in one vectored send on `tag::reply(seq)`, or,
//! for a large read, the data alone in one contiguous send on `tag::reply_data(seq)`.
//! fsync requests arrive on their own tag and are queued for the sync threads (`sync.rs`).
//!
//! A connection is served only after its [`Hello`] proved who it is ([`crate::auth`]); every
//! request then starts with the secret the server gave it, and one whose secret is not its
//! connection's is dropped unanswered (counted as `forged`).

use crate::auth::{Gate, Who};
use crate::ops::{read_span, runs_inline, runs_inline_replicated, Answer, Ops};
use crate::store::chunks::Mapped;
use crate::sync::SyncSender;
use madfs_proto::frame::CONN_WORD;
use madfs_proto::frame::{self, Encoder, PREFIX};
use madfs_proto::{tag, Admission, Dirent, Errno, Hello, Reply, Request, Welcome};
use madfs_rpc::probe::{Probe, Watch};
use madfs_rpc::{progress, Endpoint, Listener, PostedSend, UcxError, UcxSettings, Worker};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// Room for a request header inside a frame.
pub const HEADER_ROOM: usize = 64 << 10;

/// Settings of the network side.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// This server's index.
    pub server_id: u32,
    /// Default chunk size (told to clients).
    pub chunk_size: u32,
    /// Request handlers (each with its own buffers).
    pub handlers: usize,
    /// Handlers for the fsync tag.
    pub fsync_handlers: usize,
    /// Largest request frame; also the size of each handler's receive buffer.
    pub max_frame: usize,
    /// Run metadata operations on the net thread instead of an IO thread.
    pub meta_inline: bool,
    /// UCX endpoint error mode and spin budget.
    pub ucx: UcxSettings,
    /// A reply that cannot be sent within this time drops the connection.
    pub send_timeout: Duration,
    /// The cluster's id (its identity record), told to clients.
    pub cluster: u64,
    /// Number of servers of the cluster, told to clients.
    pub servers: u32,
    /// Checks every connection's hello.
    pub gate: Arc<Gate>,
    /// What slow, stalled and hostile peers may hold.
    pub limits: Limits,
    /// The cluster's replication factor, told to clients.
    pub replication: u32,
}

/// What slow, stalled and hostile peers may hold of a server (docs/architecture.md,
/// "Slow and dead peers"). A request whose slow phase (a `WriteData` whose data has not
/// arrived, a reply the peer does not take) lasts longer than [`GRACE`] leaves its handler
/// and goes on in a task of its own ("parked"), within these bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time a `WriteData`'s data may take after its header; then the request is dropped
    /// (answered `ETIMEDOUT`, counted as `half_sent`) and its late data discarded.
    pub half_sent: Duration,
    /// Parked requests of one connection. A client has at most 16 requests in flight on a
    /// connection (its window), so a connection with more parked is not a working client:
    /// it is closed.
    pub conn_parked: u32,
    /// Bytes the parked requests of one connection may hold (data awaited, replies unsent);
    /// beyond: the connection is closed, as above.
    pub conn_park_bytes: usize,
    /// Memory all parked requests together may hold (buffers for awaited data, spare buffer
    /// sets for handlers whose own wait with an unsent reply). Beyond it a half-sent write is
    /// answered `EAGAIN` (the client retries) and a slow reply waits in its handler.
    pub park_bytes: usize,
    /// Parked requests of all connections together.
    pub parked_max: usize,
    /// A discard receive for the late data of a dropped request waits this long.
    pub orphan_wait: Duration,
    /// A UCX connection that sent no request for this long is closed (its lease ran out);
    /// clients learn it from the welcome and reconnect before. Zero: never.
    pub lease: Duration,
    /// A client process's open-file references last this long without renewal
    /// (`server/src/open.rs`).
    pub open_lease: Duration,
    /// A TCP connection silent for this long between requests is closed. Zero: never.
    pub tcp_idle: Duration,
    /// TCP requests served at once (each holds a buffer set while it is read, served and
    /// answered).
    pub tcp_sets: usize,
    /// The UCX worker unarmable this long is probed, and a probe not taken in as long again
    /// means its receive queue is stalled: the server restarts itself (`madfs_rpc::probe`).
    /// Zero: never watched.
    pub stall: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            half_sent: Duration::from_secs(2),
            conn_parked: 32,
            conn_park_bytes: 32 << 20,
            park_bytes: 64 << 20,
            parked_max: 4096,
            orphan_wait: Duration::from_secs(30),
            lease: Duration::from_secs(30),
            open_lease: crate::open::LEASE,
            tcp_idle: Duration::from_secs(60),
            tcp_sets: 16,
            stall: Duration::from_secs(2),
        }
    }
}

/// How long a handler waits for a slow phase of a request (a `WriteData`'s data, a reply
/// the peer has not taken yet) before the request is parked and the handler moves on. A
/// working peer on this host finishes either in well under this.
pub const GRACE: Duration = Duration::from_millis(2);

impl NetConfig {
    /// What a new connection `conn` is told first (`nonce`: its challenge; `lease`: how long
    /// it may stay silent).
    fn welcome(&self, conn: u32, nonce: [u8; 32], lease: Duration) -> Welcome {
        Welcome {
            lease_ms: lease.as_millis().min(u32::MAX as u128) as u32,
            nonce,
            protocol: madfs_proto::PROTOCOL_VERSION,
            cluster: self.cluster,
            servers: self.servers,
            conn,
            server: self.server_id,
            max_frame: self.max_frame as u32,
            chunk_size: self.chunk_size,
            replication: self.replication,
        }
    }
}

/// An admitted connection.
struct Conn {
    /// Its id (the tag's connection field).
    id: u32,
    ep: Rc<Endpoint>,
    /// The word every request of this connection starts with.
    secret: u64,
    /// Who it is served as.
    who: Arc<Who>,
    /// The lease tick ([`Conns::tick`]) of its last request.
    seen: Cell<u32>,
    /// Its requests parked now, and the bytes they hold.
    parked: Cell<u32>,
    parked_bytes: Cell<usize>,
    /// Closed (said goodbye, lease ran out, stalled, over its limits): nothing more is sent.
    dead: Cell<bool>,
}

/// A connection welcomed but not admitted yet.
struct Waiting {
    ep: Rc<Endpoint>,
    nonce: [u8; 32],
}

/// Connections by id. Endpoints are shared through `Rc`: async-ucx closes an endpoint when
/// any `Endpoint` value of it is dropped.
struct Conns {
    next: Cell<u32>,
    /// Lease clock: advanced by [`lease_loop`] every quarter lease.
    tick: Cell<u32>,
    map: RefCell<HashMap<u32, Rc<Conn>>>,
    waiting: RefCell<HashMap<u32, Waiting>>,
    stats: Arc<crate::stats::ServerStats>,
}

/// A connection that has not proved who it is within this time is dropped.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

impl Conns {
    /// A new connection, waiting for its hello: its id.
    fn insert(&self, ep: Rc<Endpoint>, nonce: [u8; 32]) -> u32 {
        loop {
            let id = self.next.get() % tag::MAX_CONN + 1;
            self.next.set(id);
            if self.map.borrow().contains_key(&id) {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(v) =
                self.waiting.borrow_mut().entry(id)
            {
                v.insert(Waiting { ep, nonce });
                return id;
            }
        }
    }

    /// Admits waiting connection `id`.
    fn admit(&self, id: u32, ep: Rc<Endpoint>, secret: u64, who: Who) {
        let mut map = self.map.borrow_mut();
        map.insert(
            id,
            Rc::new(Conn {
                id,
                ep,
                secret,
                who: Arc::new(who),
                seen: Cell::new(self.tick.get()),
                parked: Cell::new(0),
                parked_bytes: Cell::new(0),
                dead: Cell::new(false),
            }),
        );
        self.stats.live_connections.store(map.len() as u64, Relaxed);
    }

    /// Admitted connection `id`, if `secret` is its secret (else counted as forged).
    fn check(&self, id: u32, secret: u64) -> Option<Rc<Conn>> {
        match self.map.borrow().get(&id) {
            Some(c) if c.secret == secret => Some(c.clone()),
            _ => {
                self.stats.forged.fetch_add(1, Relaxed);
                None
            }
        }
    }

    fn new(stats: Arc<crate::stats::ServerStats>) -> Conns {
        Conns {
            next: Cell::new(0),
            tick: Cell::new(0),
            map: RefCell::default(),
            waiting: RefCell::default(),
            stats,
        }
    }

    fn remove(&self, id: u32) -> Option<Rc<Endpoint>> {
        let mut map = self.map.borrow_mut();
        let c = map.remove(&id);
        self.stats.live_connections.store(map.len() as u64, Relaxed);
        c.map(|c| {
            c.dead.set(true);
            c.ep.clone()
        })
    }

    /// Closes connection `c` at once (a stalled or dead peer, or one over its limits): out of
    /// the table, nothing more sent, its endpoint closed with force, which ends the sends and
    /// receives still posted on it (so their buffers may be reused).
    fn kill(&self, c: &Rc<Conn>) {
        if c.dead.replace(true) {
            return;
        }
        {
            let mut map = self.map.borrow_mut();
            if map.get(&c.id).is_some_and(|m| Rc::ptr_eq(m, c)) {
                map.remove(&c.id);
            }
            self.stats.live_connections.store(map.len() as u64, Relaxed);
        }
        self.stats.killed.fetch_add(1, Relaxed);
        force_close(c.ep.clone());
    }

    /// A client said goodbye: forget it and close the endpoint with a flush (a forced close
    /// is undefined behaviour for a peer in error mode `none`); a close that does not finish
    /// in time is forced when the endpoint is dropped.
    fn close(&self, id: u32, timeout: Duration) {
        if let Some(ep) = self.remove(id) {
            tokio::task::spawn_local(async move {
                let _ = tokio::time::timeout(timeout, ep.close(false)).await;
            });
        }
    }
}

/// Buffers owned by one handler, reused for every request it serves.
struct Bufs {
    recv: Vec<u8>,
    data: Vec<u8>,
    hdr: Vec<u8>,
    enc: Encoder,
    /// The reply's prefix and scatter list, at an address that stays put when the set moves
    /// (UCX keeps a pointer to the scatter list of a send that does not complete at once).
    out: Box<Out>,
}

/// See [`Bufs::out`].
struct Out {
    prefix: [u8; PREFIX],
    iov: [IoSlice<'static>; 3],
}

impl Bufs {
    /// A handler's set: room for the largest frame and the largest read.
    fn new(max_frame: usize) -> Bufs {
        Bufs {
            recv: Vec::with_capacity(max_frame),
            data: vec![0u8; max_frame.saturating_sub(HEADER_ROOM)],
            hdr: Vec::with_capacity(1 << 16),
            enc: Encoder::default(),
            out: Out::boxed(),
        }
    }
}

impl Out {
    fn boxed() -> Box<Out> {
        Box::new(Out {
            prefix: [0; PREFIX],
            iov: [IoSlice::new(&[]), IoSlice::new(&[]), IoSlice::new(&[])],
        })
    }
}

/// What a send reads, for a send that closing its connection did not end (see
/// [`Net::end_send`]): kept, never reused, until UCX says the send is over.
trait Held: 'static {
    fn keep_for(self, send: PostedSend);
}

impl Held for Bufs {
    /// The set stays with the send, but costs no resident memory: its receive buffer (which
    /// the send does not read) is freed, and the whole pages of its data buffer are given
    /// back to the kernel (they read as zeros, to a peer that fetches the reply late).
    fn keep_for(mut self, send: PostedSend) {
        self.recv = Vec::new();
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let (at, len) = (self.data.as_mut_ptr() as usize, self.data.len());
        let start = at.div_ceil(page) * page;
        let end = (at + len) / page * page;
        if end > start {
            // SAFETY: whole pages inside `self.data`, which nothing reads but UCX (as the
            // send's source) until the set is dropped; private anonymous pages read back as
            // zeros after MADV_DONTNEED.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
        tokio::task::spawn_local(async move {
            let _ = send.await;
            drop(self);
        });
    }
}

impl Held for Mapped {
    /// The mapping pins its file against truncation (`FsChunks`): it cannot stay for as long
    /// as the send may. Its pages are replaced by zeros at the same address, which stays
    /// reserved (leaked: a few pages of address space, nothing resident), and the mapping
    /// with its pin goes: a peer that fetches the reply late reads zeros.
    fn keep_for(self, send: PostedSend) {
        let bytes = self.bytes();
        if bytes.is_empty() {
            return drop(send);
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let start = bytes.as_ptr() as usize / page * page;
        let len = (bytes.as_ptr() as usize + bytes.len()).div_ceil(page) * page - start;
        // SAFETY: `start..start+len` is this mapping's range (page-aligned around its bytes):
        // replacing it with private zero pages changes nothing Rust code holds (only UCX reads
        // it, as the send's source); the same range is then reserved again once the mapping
        // is dropped, so nothing else is ever placed where the send reads.
        unsafe {
            let zeros = libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            if zeros == libc::MAP_FAILED {
                // keep the file mapping (and its pin) rather than free the range
                std::mem::forget(self);
                return drop(send);
            }
            // the drop unmaps our zeros and releases the pin; take the range back at once
            drop(self);
            let again = libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            );
            if again as usize != start {
                tracing::warn!("the range of a reply that was never taken was reused");
            }
        }
        // freed by UCX when (if ever) the send completes
        drop(send);
    }
}

/// A read of a chunk (`span`: file id, position, length) that the page cache holds whole,
/// answered on the net thread (see [`crate::store::chunks::FsChunks::read_nowait`]): the reply
/// prefix and the data length in `b.data`, or `None` to serve the request on an IO thread as
/// usual.
fn read_nowait(ops: &Ops, b: &mut Bufs, span: (u64, u64, usize)) -> Option<([u8; PREFIX], usize)> {
    let (id, pos, len) = span;
    let n = ops.chunks.read_nowait(id, pos, b.data.get_mut(..len)?)?;
    ops.stats.request("read");
    ops.stats.bytes_out.fetch_add(n as u64, Relaxed);
    b.hdr.clear();
    Some((frame::bulk_reply_prefix(), n))
}

/// Decodes the frame in `b.recv`, executes it, and leaves the reply header in `b.hdr`.
/// Returns the reply prefix and the length of read data in `b.data`. `data`: the length of
/// the data of a `WriteData` request, already received into `b.data`. A panic while serving
/// becomes an `EIO` reply (logged, counted as an error): the handler lives on.
fn serve_frame(ops: &Ops, b: &mut Bufs, data: Option<usize>, who: &Who) -> ([u8; PREFIX], usize) {
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serve_frame_unguarded(ops, b, data, who)
    }));
    served.unwrap_or_else(|_| {
        tracing::error!("a request panicked; answered EIO");
        ops.stats.errors.fetch_add(1, Relaxed);
        b.hdr.clear();
        (frame::error_prefix(Errno::EIO), 0)
    })
}

/// The request frame of a received message (after its connection word).
/// An fsync request `req` (frame `msg`) from `who`, over UCX or plain TCP: the receiver of
/// its result. Unreplicated: the group-commit sync threads (`SyncSender::submit`).
/// Replicated: executed as any request (`Ops::execute_as`, on an IO thread: admitted by the
/// set's primary only, its size publication and its flush copied to the secondaries) — the
/// group-commit path copies nothing, and a size it published was lost with the primary.
fn submit_fsync(
    ops: &Arc<Ops>,
    sync_tx: &SyncSender,
    who: &crate::auth::Who,
    req: &Request<'_>,
    msg: &[u8],
) -> madfs_proto::FsResult<tokio::sync::oneshot::Receiver<madfs_proto::FsResult<()>>> {
    let Request::Fsync { id, .. } = *req else {
        return Err(Errno::EINVAL);
    };
    ops.stats.request("fsync");
    ops.admits(who, req)?;
    ops.cap_check(who, req)?;
    if ops.replica.is_none() {
        return Ok(sync_tx.submit(ops, req, id));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (ops, who, msg) = (ops.clone(), who.clone(), msg.to_vec());
    tokio::task::spawn_blocking(move || {
        let r = match frame::decode_request(frame_of(&msg)) {
            Ok((req, bulk)) => ops.execute_as(&who, &req, bulk, &mut []).map(drop),
            Err(e) => Err(e),
        };
        let _ = tx.send(r);
    });
    Ok(rx)
}

fn frame_of(msg: &[u8]) -> &[u8] {
    msg.get(CONN_WORD..).unwrap_or(&[])
}

fn serve_frame_unguarded(
    ops: &Ops,
    b: &mut Bufs,
    data: Option<usize>,
    who: &Who,
) -> ([u8; PREFIX], usize) {
    let result = match frame::decode_request(frame_of(&b.recv)) {
        Err(e) => {
            ops.stats.bad_frames.fetch_add(1, Relaxed);
            Err(e)
        }
        Ok((
            Request::WriteData {
                id,
                chunk,
                offset,
                len,
                chunk_size,
                size_of,
                cap,
            },
            _,
        )) => {
            ops.stats.request("write");
            match data {
                Some(n) if n == len as usize => {
                    ops.stats.bytes_in.fetch_add(n as u64, Relaxed);
                    let w = Request::Write {
                        id,
                        chunk,
                        offset,
                        chunk_size,
                        size_of,
                        cap,
                    };
                    let started = ops.stats.latency.start();
                    let r = ops.execute_as(who, &w, &b.data[..n], &mut Vec::new());
                    ops.stats.latency.done("write", started);
                    r
                }
                // the data did not arrive whole (or not over UCX: the TCP transport has none)
                Some(_) if len as usize > b.data.len() => Err(Errno::EFBIG),
                _ => Err(Errno::EIO),
            }
        }
        Ok((req, bulk)) => {
            ops.stats.request(req.name());
            ops.stats.bytes_in.fetch_add(bulk.len() as u64, Relaxed);
            let started = ops.stats.latency.start();
            let r = ops.execute_as(who, &req, bulk, &mut b.data);
            ops.stats.latency.done(req.name(), started);
            r
        }
    };
    b.hdr.clear();
    match result {
        Err(e) => {
            ops.stats.errors.fetch_add(1, Relaxed);
            (frame::error_prefix(e), 0)
        }
        Ok(Answer::Data(n)) => {
            ops.stats.bytes_out.fetch_add(n as u64, Relaxed);
            (frame::bulk_reply_prefix(), n)
        }
        Ok(ans) => {
            let dirents;
            let reply = match &ans {
                Answer::Unit => Reply::Unit,
                Answer::Attr(a) => Reply::Attr(*a),
                Answer::Created {
                    attr,
                    existed,
                    old_size,
                    cap,
                } => Reply::Created {
                    attr: *attr,
                    existed: *existed,
                    old_size: *old_size,
                    cap: *cap,
                },
                Answer::Granted(attr, cap) => Reply::Granted {
                    attr: *attr,
                    cap: *cap,
                },
                Answer::Bool(v) => Reply::Bool(*v),
                Answer::Replaced(a) => Reply::Replaced(*a),
                Answer::Written(n) => Reply::Written(*n),
                Answer::Offset(o) => Reply::Offset(*o),
                Answer::Found(paths, scanned, next) => Reply::Found {
                    scanned: *scanned,
                    paths: paths.iter().map(String::as_str).collect(),
                    next: next.as_deref(),
                },
                Answer::StatFs(s) => Reply::StatFs(*s),
                Answer::Dirs(v, next) => Reply::Dirs {
                    entries: v
                        .iter()
                        .map(|(p, m, u, g, ver)| (p.as_str(), *m, *u, *g, *ver))
                        .collect(),
                    next: next.as_deref(),
                },
                Answer::Located(l) => Reply::Located {
                    boot: &l.boot,
                    dir: &l.dir,
                    token: l.token,
                },
                Answer::Named(p) => Reply::Named(p),
                Answer::Records(records, next) => Reply::Records {
                    records: records
                        .iter()
                        .map(|(k, v)| {
                            (
                                serde_bytes::Bytes::new(k.as_slice()),
                                serde_bytes::Bytes::new(v.as_slice()),
                            )
                        })
                        .collect(),
                    next: next.as_deref(),
                },
                Answer::Map(epoch, states, replication) => Reply::Map {
                    epoch: *epoch,
                    states: states.clone(),
                    replication: *replication,
                },
                Answer::Dirents(v, next) => {
                    dirents = v
                        .iter()
                        .map(|e| Dirent {
                            hash: e.hash,
                            id: e.attr.id,
                            kind: e.attr.mode & madfs_proto::S_IFMT,
                            name: &e.name,
                        })
                        .collect();
                    Reply::Dirents {
                        entries: dirents,
                        next: *next,
                    }
                }
                Answer::Data(_) => unreachable!(),
            };
            let (p, h) = b.enc.reply(&reply);
            b.hdr.extend_from_slice(h);
            (p, 0)
        }
    }
}

/// Creates the worker and the listener (port 0 picks a free port).
pub fn bind(
    ctx: &Arc<madfs_rpc::Context>,
    listen: SocketAddr,
) -> std::io::Result<(Rc<Worker>, Listener, SocketAddr)> {
    let worker = ctx
        .create_worker()
        .map_err(|e| std::io::Error::other(format!("UCX worker: {e}")))?;
    let listener = worker
        .create_listener(listen)
        .map_err(|e| std::io::Error::other(format!("UCX listener on {listen}: {e}")))?;
    let addr = listener
        .socket_addr()
        .map_err(|e| std::io::Error::other(format!("UCX listener address: {e}")))?;
    let addr = SocketAddr::new(listen.ip(), addr.port());
    Ok((worker, listener, addr))
}

/// Serves until `stop` is set, or until `probe`'s watch finds the worker stalled (an error
/// for which `madfs_rpc::probe::is_stalled` holds). Must run inside a `LocalSet`.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    worker: Rc<Worker>,
    listener: Listener,
    tcp: std::net::TcpListener,
    cfg: NetConfig,
    ops: Arc<Ops>,
    sync_tx: SyncSender,
    stop: Arc<AtomicBool>,
    probe: Option<Probe>,
) -> std::io::Result<()> {
    tcp.set_nonblocking(true)?;
    let tcp = tokio::net::TcpListener::from_std(tcp)?;
    let conns = Rc::new(Conns::new(ops.stats.clone()));
    let cfg = Rc::new(cfg);
    let net = Rc::new(Net {
        worker: worker.clone(),
        conns: conns.clone(),
        cfg: cfg.clone(),
        ops: ops.clone(),
        park: Park::default(),
    });
    let s = stop.clone();
    let watch = probe.map(|probe| {
        let stats = ops.stats.clone();
        Watch {
            probe,
            // the probe's tag is one of the drained kinds
            taken: Box::new(move || stats.drained.load(Relaxed)),
            after: cfg.limits.stall,
            freeze_at: stall_fault(),
        }
    });
    let progress = tokio::task::spawn_local(progress::run(
        worker.clone(),
        cfg.ucx.spin,
        move || s.load(Relaxed),
        watch,
    ));
    let mut tasks = vec![tokio::task::spawn_local(accept_loop(
        worker.clone(),
        listener,
        conns.clone(),
        cfg.clone(),
        ops.clone(),
    ))];
    tasks.push(tokio::task::spawn_local(tcp_loop(
        tcp,
        cfg.clone(),
        ops.clone(),
        sync_tx.clone(),
    )));
    tasks.push(tokio::task::spawn_local(hello_loop(
        worker.clone(),
        conns.clone(),
        cfg.clone(),
        ops.clone(),
    )));
    tasks.push(tokio::task::spawn_local(lease_loop(net.clone())));
    for _ in 0..cfg.handlers {
        tasks.push(tokio::task::spawn_local(handler(net.clone(), tag::REQUEST)));
    }
    if ops.replica.is_some() {
        for _ in 0..COPY_HANDLERS {
            tasks.push(tokio::task::spawn_local(handler(
                net.clone(),
                tag::REPLICATE,
            )));
        }
    } else {
        // an unreplicated server takes no copies: drained like the other kinds
        tasks.push(tokio::task::spawn_local(drain(
            worker.clone(),
            tag::REPLICATE,
            tag::KIND_MASK,
            ops.clone(),
        )));
    }
    for (kind, mask) in DRAINED_KINDS {
        tasks.push(tokio::task::spawn_local(drain(
            worker.clone(),
            kind,
            mask,
            ops.clone(),
        )));
    }
    for _ in 0..cfg.fsync_handlers {
        tasks.push(tokio::task::spawn_local(fsync_handler(
            worker.clone(),
            conns.clone(),
            cfg.clone(),
            ops.clone(),
            sync_tx.clone(),
        )));
    }
    while !stop.load(Relaxed) && !progress.is_finished() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in tasks {
        t.abort();
    }
    match progress.await {
        Ok(Err(e)) => Err(e),
        _ => Ok(()),
    }
}

/// Test fault `MADFS_FAULT=ucx-stall-after-ms:N`: N ms after the start the progress loop
/// behaves as if its worker's receive queue were stalled.
fn stall_fault() -> Option<std::time::Instant> {
    let f = std::env::var("MADFS_FAULT").ok()?;
    let ms: u64 = f.strip_prefix("ucx-stall-after-ms:")?.parse().ok()?;
    tracing::warn!("MADFS_FAULT={f}: the UCX worker will look stalled after {ms} ms");
    Some(std::time::Instant::now() + Duration::from_millis(ms))
}

/// Tag kinds no server receives (everything but `REQUEST`, `FSYNC`, `REQUEST_DATA`, `HELLO`
/// and `REPLICATE`), as (kind, mask) receives over the kind bits: 0 and 4 (`0x00`); 3 and 7
/// (`0x11`); 8 (`1000`); 10 and 11 (`101x`); 12–15 (`11xx`). A message of such a kind would
/// otherwise wait in UCX's unexpected queue for ever, holding its memory.
const DRAINED_KINDS: [(u64, u64); 5] = [
    (0, 0b1011 << 60),
    (0b0011 << 60, 0b1011 << 60),
    (0b1000 << 60, 0b1111 << 60),
    (0b1010 << 60, 0b1110 << 60),
    (0b1100 << 60, 0b1100 << 60),
];

/// Handlers of copies (`tag::REPLICATE`) in a replicated cluster.
const COPY_HANDLERS: usize = 4;

/// Takes messages of the tag kinds in `kind`/`mask` off the worker and drops them (counted).
async fn drain(worker: Rc<Worker>, kind: u64, mask: u64, ops: Arc<Ops>) {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 256];
    loop {
        // a longer message completes truncated: it is taken off the queue all the same
        let _ = worker.tag_recv_mask(kind, mask, &mut buf).await;
        ops.stats.drained.fetch_add(1, Relaxed);
    }
}

async fn accept_loop(
    worker: Rc<Worker>,
    mut listener: Listener,
    conns: Rc<Conns>,
    cfg: Rc<NetConfig>,
    ops: Arc<Ops>,
) {
    loop {
        let req = listener.next().await;
        let (worker, conns, cfg, ops) = (worker.clone(), conns.clone(), cfg.clone(), ops.clone());
        tokio::task::spawn_local(async move {
            let ep = match tokio::time::timeout(
                Duration::from_secs(10),
                worker.accept_with(req, cfg.ucx.err_mode),
            )
            .await
            {
                Ok(Ok(ep)) => Rc::new(ep),
                Ok(Err(e)) => return tracing::warn!("accept failed: {e}"),
                Err(_) => return tracing::warn!("accept timed out"),
            };
            let Ok(nonce) = madfs_auth::random::<32>() else {
                return tracing::error!("getrandom failed: connection dropped");
            };
            let id = conns.insert(ep.clone(), nonce);
            ops.stats.connections.fetch_add(1, Relaxed);
            let bytes =
                flexbuffers::to_vec(cfg.welcome(id, nonce, cfg.limits.lease)).unwrap_or_default();
            match tokio::time::timeout(
                cfg.send_timeout,
                ep.tag_send(tag::welcome(cfg.server_id), &bytes),
            )
            .await
            {
                Ok(Ok(_)) => tracing::debug!("connection {id} accepted"),
                _ => {
                    tracing::warn!("welcome to connection {id} failed");
                    conns.waiting.borrow_mut().remove(&id);
                    return;
                }
            }
            // no hello in time: forget it
            tokio::time::sleep(HELLO_TIMEOUT).await;
            if let Some(w) = conns.waiting.borrow_mut().remove(&id) {
                tracing::warn!("connection {id} sent no hello within {HELLO_TIMEOUT:?}; dropped");
                ops.stats.refused.fetch_add(1, Relaxed);
                drop(w);
            }
        });
    }
}

/// Receives hellos: a waiting connection that proves who it is is admitted with a fresh
/// secret; one that does not is told why and closed.
async fn hello_loop(worker: Rc<Worker>, conns: Rc<Conns>, cfg: Rc<NetConfig>, ops: Arc<Ops>) {
    let mut buf = Vec::<u8>::with_capacity(8192);
    loop {
        buf.clear();
        let Ok((t, len)) = worker
            .tag_recv_mask(tag::HELLO, tag::KIND_MASK, buf.spare_capacity_mut())
            .await
        else {
            ops.stats.bad_frames.fetch_add(1, Relaxed);
            continue;
        };
        // SAFETY: UCX wrote `len` bytes into the spare capacity.
        unsafe { buf.set_len(len) };
        let (_, conn, _) = tag::split(t);
        let Some(w) = conns.waiting.borrow_mut().remove(&conn) else {
            ops.stats.forged.fetch_add(1, Relaxed);
            continue;
        };
        let verdict = check_hello(&cfg, &buf, conn, &w.nonce).await;
        let (answer, admitted) = match verdict {
            Ok((who, proof)) => {
                let Ok(secret) = madfs_auth::random_u64() else {
                    continue;
                };
                tracing::debug!(
                    "connection {conn} admitted as uid {} ({:?})",
                    who.uid,
                    who.role
                );
                let a = Admission::Admitted {
                    secret,
                    uid: who.uid,
                    gid: who.gid,
                    proof,
                };
                (a, Some((secret, who)))
            }
            Err(reason) => {
                tracing::warn!("connection {conn} refused: {reason}");
                ops.stats.refused.fetch_add(1, Relaxed);
                (Admission::Refused { reason }, None)
            }
        };
        let bytes = flexbuffers::to_vec(&answer).unwrap_or_default();
        let ep = w.ep.clone();
        if let Some((secret, who)) = admitted {
            conns.admit(conn, w.ep, secret, who);
        }
        let (conns, cfg) = (conns.clone(), cfg.clone());
        tokio::task::spawn_local(async move {
            let sent = tokio::time::timeout(
                cfg.send_timeout,
                ep.tag_send(tag::admit(cfg.server_id, conn), &bytes),
            )
            .await;
            if !matches!(sent, Ok(Ok(_))) {
                conns.remove(conn);
            }
            if matches!(answer, Admission::Refused { .. }) {
                let _ = tokio::time::timeout(cfg.send_timeout, ep.close(false)).await;
            }
        });
    }
}

/// Decodes and checks a hello (on an IO thread: MUNGE asks munged).
async fn check_hello(
    cfg: &NetConfig,
    msg: &[u8],
    conn: u32,
    nonce: &[u8; 32],
) -> Result<(Who, Vec<u8>), String> {
    let gate = cfg.gate.clone();
    let (msg, nonce) = (msg.to_vec(), *nonce);
    tokio::task::spawn_blocking(move || {
        let hello: Hello<'_> = std::panic::catch_unwind(|| flexbuffers::from_slice(&msg))
            .map_err(|_| "malformed hello".to_string())?
            .map_err(|_| "malformed hello".to_string())?;
        gate.admit(&hello, conn, &nonce)
    })
    .await
    .unwrap_or_else(|_| Err("hello check failed".into()))
}

async fn send_reply(
    ep: &Endpoint,
    seq: u32,
    prefix: &[u8],
    hdr: &[u8],
    data: &[u8],
    timeout: Duration,
) -> bool {
    let mut iov = Vec::with_capacity(3);
    iov.push(IoSlice::new(prefix));
    if !hdr.is_empty() {
        iov.push(IoSlice::new(hdr));
    }
    if !data.is_empty() {
        iov.push(IoSlice::new(data));
    }
    // most replies complete at once (eager protocol): only arm a timer for those that do not
    let mut send = std::pin::pin!(ep.tag_send_vectored(tag::reply(seq), &iov));
    if let std::task::Poll::Ready(r) = futures::poll!(send.as_mut()) {
        return r.is_ok();
    }
    matches!(tokio::time::timeout(timeout, send).await, Ok(Ok(_)))
}

/// A small reply (no data) to `c`, from a task of its own; a peer that does not take it
/// within `timeout` is closed (before the caller's buffers go: closing ends the send).
async fn send_small(
    conns: &Conns,
    c: &Rc<Conn>,
    seq: u32,
    prefix: &[u8],
    hdr: &[u8],
    timeout: Duration,
) {
    if !c.dead.get() && !send_reply(&c.ep, seq, prefix, hdr, &[], timeout).await {
        conns.kill(c);
    }
}

/// Starts closing `ep` with force now (the close is begun before this returns: sends and
/// receives still posted on it end), and finishes it in a task if it does not complete at
/// once.
fn force_close(ep: Rc<Endpoint>) {
    let mut close = Box::pin(async move {
        let _ = ep.close(true).await;
    });
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    if close.as_mut().poll(&mut cx).is_pending() {
        tokio::task::spawn_local(close);
    }
}

/// Polls `f` once, then waits for it up to [`GRACE`]: `None` if it is not done by then.
async fn settle<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    if let Poll::Ready(v) = futures::poll!(&mut *f) {
        return Some(v);
    }
    tokio::time::timeout(GRACE, f).await.ok()
}

/// Posts the reply held in `b`: `prefix`, `b.hdr` and `n` bytes of `b.data` on
/// `tag::reply(seq)`, or (`raw`, a large read) the data alone, contiguous, on
/// `tag::reply_data(seq)` (zero-copy rendezvous).
///
/// The send reads `b`'s heap blocks (its vectors and [`Bufs::out`]) until it is over: the
/// caller keeps `b` unchanged until then (moving the set is fine, its blocks stay put).
fn post_reply(
    ep: &Endpoint,
    seq: u32,
    b: &mut Bufs,
    prefix: [u8; PREFIX],
    n: usize,
    raw: bool,
) -> Result<PostedSend, UcxError> {
    if raw {
        // SAFETY: see above: `b.data` stays put and unchanged until the send is over.
        return unsafe { ep.tag_send_posted(tag::reply_data(seq), b.data.as_ptr(), n) };
    }
    let Out { prefix: p, iov } = &mut *b.out;
    *p = prefix;
    let mut k = 0;
    for piece in [&p[..], &b.hdr[..], &b.data[..n]] {
        if !piece.is_empty() {
            // SAFETY: the pieces are in heap blocks of `b` that the caller keeps until the
            // send is over (see above); the scatter list lives in `b.out` beside them.
            iov[k] = IoSlice::new(unsafe { &*(piece as *const [u8]) });
            k += 1;
        }
    }
    // SAFETY: as above.
    unsafe { ep.tag_send_vectored_posted(tag::reply(seq), iov.as_ptr(), k) }
}

/// What a received data message (or its failure) means to `serve_frame`: its length, or
/// more than `len` (truncated or failed).
fn received(r: Result<(u64, usize), UcxError>, len: usize) -> usize {
    match r {
        Ok((_, n)) => n,
        Err(_) => len + 1,
    }
}

/// What the tasks of the net thread share.
struct Net {
    worker: Rc<Worker>,
    conns: Rc<Conns>,
    cfg: Rc<NetConfig>,
    ops: Arc<Ops>,
    park: Park,
}

/// The parked requests (see [`Limits`]).
#[derive(Default)]
struct Park {
    /// Spare buffer sets, for handlers whose own set waits with an unsent reply.
    spare: RefCell<Vec<Bufs>>,
    /// Bytes of the spare sets made (in `spare` or lent out).
    set_bytes: Cell<usize>,
    /// Bytes reserved for the data of parked half-sent writes.
    data_bytes: Cell<usize>,
    /// Parked requests.
    count: Cell<usize>,
    /// Discard receives waiting for late data.
    discards: Cell<usize>,
}

/// Spare sets kept when they come back; more are freed.
const SPARE_KEEP: usize = 4;

/// Which limit a request to be parked is over.
enum Over {
    /// Its connection's: the connection is closed.
    Conn,
    /// The server's: the request is refused or waits in its handler.
    Server,
}

/// A parked request's share of its connection's and the server's limits, given back when
/// it is dropped.
struct Ticket {
    net: Rc<Net>,
    c: Rc<Conn>,
    bytes: usize,
    data: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let (c, p) = (&self.c, &self.net.park);
        c.parked.set(c.parked.get() - 1);
        c.parked_bytes.set(c.parked_bytes.get() - self.bytes);
        p.count.set(p.count.get() - 1);
        p.data_bytes.set(p.data_bytes.get() - self.data);
    }
}

impl Net {
    /// Bytes of one buffer set.
    fn set_size(&self) -> usize {
        2 * self.cfg.max_frame - HEADER_ROOM + (1 << 16)
    }

    /// Parks a request of `c` that holds `bytes` (`data` of them reserved for awaited data).
    fn ticket(self: &Rc<Self>, c: &Rc<Conn>, bytes: usize, data: usize) -> Result<Ticket, Over> {
        let l = &self.cfg.limits;
        if c.parked.get() >= l.conn_parked || c.parked_bytes.get() + bytes > l.conn_park_bytes {
            self.ops.stats.over_limit.fetch_add(1, Relaxed);
            return Err(Over::Conn);
        }
        let p = &self.park;
        // awaited data may take three quarters of the memory: spare sets keep the rest
        if p.count.get() >= l.parked_max
            || p.set_bytes.get() + p.data_bytes.get() + data > l.park_bytes
            || p.data_bytes.get() + data > l.park_bytes / 4 * 3
        {
            return Err(Over::Server);
        }
        c.parked.set(c.parked.get() + 1);
        c.parked_bytes.set(c.parked_bytes.get() + bytes);
        p.count.set(p.count.get() + 1);
        p.data_bytes.set(p.data_bytes.get() + data);
        self.ops.stats.parked.fetch_add(1, Relaxed);
        Ok(Ticket {
            net: self.clone(),
            c: c.clone(),
            bytes,
            data,
        })
    }

    /// A spare buffer set for a handler whose own set was parked, within the memory limit.
    fn take_spare(&self) -> Option<Bufs> {
        if let Some(b) = self.park.spare.borrow_mut().pop() {
            return Some(b);
        }
        let p = &self.park;
        let size = self.set_size();
        if p.set_bytes.get() + p.data_bytes.get() + size > self.cfg.limits.park_bytes {
            return None;
        }
        p.set_bytes.set(p.set_bytes.get() + size);
        Some(Bufs::new(self.cfg.max_frame))
    }

    fn put_spare(&self, b: Bufs) {
        let mut spare = self.park.spare.borrow_mut();
        if spare.len() < SPARE_KEEP {
            spare.push(b);
        } else {
            let p = &self.park;
            p.set_bytes
                .set(p.set_bytes.get().saturating_sub(self.set_size()));
        }
    }

    /// Answers request `seq` of `c` with error `e`, from a task of its own.
    fn answer(&self, c: &Rc<Conn>, seq: u32, e: Errno) {
        if c.dead.get() {
            return;
        }
        self.ops.stats.errors.fetch_add(1, Relaxed);
        let (c, conns, timeout) = (c.clone(), self.conns.clone(), self.cfg.send_timeout);
        tokio::task::spawn_local(async move {
            let p = frame::error_prefix(e);
            send_small(&conns, &c, seq, &p, &[], timeout).await;
        });
    }

    /// Takes the data message with `tag` of a request that was dropped or refused, if it
    /// comes within [`Limits::orphan_wait`], and throws it away (a message nobody receives
    /// would stay in UCX's unexpected queue). The receive has no room: a message is taken
    /// truncated, and a rendezvous one is not transferred at all.
    fn discard(self: &Rc<Self>, tag: u64) {
        let p = &self.park;
        if p.discards.get() >= self.cfg.limits.parked_max {
            return;
        }
        p.discards.set(p.discards.get() + 1);
        let net = self.clone();
        tokio::task::spawn_local(async move {
            let mut none: [MaybeUninit<u8>; 0] = [];
            let wait = net.cfg.limits.orphan_wait;
            if tokio::time::timeout(wait, net.worker.tag_recv(tag, &mut none))
                .await
                .is_ok()
            {
                net.ops.stats.orphans.fetch_add(1, Relaxed);
            }
            net.park.discards.set(net.park.discards.get() - 1);
        });
    }

    /// Waits up to `wait` for `send` of `c` to be over; a peer that does not take it is
    /// closed. Returns `held` (what the send reads) once the send is over; if even closing
    /// does not end it, a task keeps `held` until it does, and the answer is `None`.
    async fn end_send<H: Held>(
        &self,
        c: &Rc<Conn>,
        mut send: PostedSend,
        held: H,
        wait: Duration,
    ) -> Option<H> {
        if !c.dead.get() {
            match tokio::time::timeout(wait, &mut send).await {
                Ok(Ok(())) => return Some(held),
                Ok(Err(_)) => {
                    self.conns.kill(c);
                    return Some(held);
                }
                Err(_) => {
                    tracing::debug!("connection {} took no reply within {wait:?}; closed", c.id);
                    self.conns.kill(c);
                }
            }
        }
        // closing ends the send where UCX tracks its sends per endpoint (error mode `peer`);
        // in error mode `none` a rendezvous send the peer has not taken cannot be withdrawn,
        // and a peer that was only stopped may still take it later, reading `held` where it
        // was: what it reads is kept (never reused) until UCX says the send is over
        if settle(&mut send).await.is_some() {
            return Some(held);
        }
        self.ops.stats.stuck.fetch_add(1, Relaxed);
        held.keep_for(send);
        None
    }

    /// The reply in `b` to request `seq` of `c` (see [`post_reply`]). Returns the buffer set
    /// the handler goes on with: `b` once the reply went out (or failed), or, when the peer
    /// does not take it within [`GRACE`], a spare set while `b` waits with the reply in a
    /// task of its own.
    async fn reply(
        self: &Rc<Self>,
        c: &Rc<Conn>,
        seq: u32,
        mut b: Bufs,
        prefix: [u8; PREFIX],
        n: usize,
        raw: bool,
    ) -> Bufs {
        if c.dead.get() {
            return b;
        }
        let mut send = match post_reply(&c.ep, seq, &mut b, prefix, n, raw) {
            Ok(s) => s,
            Err(_) => {
                self.conns.kill(c);
                return b;
            }
        };
        match settle(&mut send).await {
            Some(Ok(())) => return b,
            Some(Err(_)) => {
                self.conns.kill(c);
                return b;
            }
            None => {}
        }
        let wait = self.cfg.send_timeout.saturating_sub(GRACE);
        match self.ticket(c, n, 0) {
            Ok(t) => {
                if let Some(spare) = self.take_spare() {
                    let (net, c) = (self.clone(), c.clone());
                    tokio::task::spawn_local(async move {
                        if let Some(b) = net.end_send(&c, send, b, wait).await {
                            net.put_spare(b);
                        }
                        drop(t);
                    });
                    return spare;
                }
                self.ops.stats.busy.fetch_add(1, Relaxed);
            }
            Err(Over::Conn) => self.conns.kill(c),
            Err(Over::Server) => {
                self.ops.stats.busy.fetch_add(1, Relaxed);
            }
        }
        // no room to park it: the handler waits (bounded by the send timeout)
        let fresh = || Bufs::new(self.cfg.max_frame);
        self.end_send(c, send, b, wait).await.unwrap_or_else(fresh)
    }

    /// A large read's data straight from a mapping of the chunk file, to request `seq` of
    /// `c`; parked like [`Net::reply`] when the peer does not take it at once.
    async fn reply_mapped(self: &Rc<Self>, c: &Rc<Conn>, seq: u32, m: Mapped) {
        let len = m.bytes().len();
        // SAFETY: `m` (the mapping) is kept until the send is over (`end_send`).
        let posted = unsafe {
            c.ep.tag_send_posted(tag::reply_data(seq), m.bytes().as_ptr(), len)
        };
        let mut send = match posted {
            Ok(s) => s,
            Err(_) => return self.conns.kill(c),
        };
        match settle(&mut send).await {
            Some(Ok(())) => return,
            Some(Err(_)) => return self.conns.kill(c),
            None => {}
        }
        let wait = self.cfg.send_timeout.saturating_sub(GRACE);
        match self.ticket(c, len, 0) {
            Ok(t) => {
                let (net, c) = (self.clone(), c.clone());
                tokio::task::spawn_local(async move {
                    net.end_send(&c, send, m, wait).await;
                    drop(t);
                });
                return;
            }
            Err(Over::Conn) => self.conns.kill(c),
            Err(Over::Server) => {
                self.ops.stats.busy.fetch_add(1, Relaxed);
            }
        }
        self.end_send(c, send, m, wait).await;
    }

    /// Takes the data message of `WriteData` request `seq` of `c` (`len` bytes) into
    /// `b.data`: `Some(n)` when it came (`n` > `len`: truncated or failed). `None` when the
    /// request went on elsewhere: its data had not arrived within [`GRACE`], so it was
    /// parked (or refused or dropped, and answered). `b` is the set the handler goes on with
    /// either way.
    async fn take_data(
        self: &Rc<Self>,
        b: &mut Bufs,
        c: &Rc<Conn>,
        seq: u32,
        len: usize,
        denied: Option<Errno>,
    ) -> Option<usize> {
        let tag = tag::request_data(c.id, seq, c.secret);
        let room = len.min(b.data.len());
        // SAFETY: `b.data` is neither used nor freed until the receive is over: below, or in
        // the task that takes the set over.
        let posted = unsafe {
            self.worker
                .tag_recv_posted(tag, u64::MAX, b.data.as_mut_ptr().cast(), room)
        };
        let Ok(mut recv) = posted else {
            return Some(len + 1);
        };
        if let Some(r) = settle(&mut recv).await {
            return Some(received(r, len));
        }
        if !recv.cancel() {
            // the data is arriving right now (a transfer under way)
            match tokio::time::timeout(self.cfg.limits.half_sent, &mut recv).await {
                Ok(r) => return Some(received(r, len)),
                Err(_) => {
                    // stalled mid-transfer: close the peer; the set stays with the receive
                    self.ops.stats.half_sent.fetch_add(1, Relaxed);
                    self.conns.kill(c);
                    let old = std::mem::replace(b, Bufs::new(self.cfg.max_frame));
                    if settle(&mut recv).await.is_none() {
                        self.ops.stats.stuck.fetch_add(1, Relaxed);
                        tokio::task::spawn_local(async move {
                            let _ = recv.await;
                            drop(old);
                        });
                    }
                    return None;
                }
            }
        }
        // cancelled, or completed just before
        if let Poll::Ready(Ok(v)) = futures::poll!(&mut recv) {
            return Some(received(Ok(v), len));
        }
        drop(recv);
        self.park_half_sent(c, seq, len, &b.recv, denied);
        None
    }

    /// A `WriteData` whose data has not come within [`GRACE`]: waits for it in a task of its
    /// own, up to [`Limits::half_sent`] from its header, then serves it.
    fn park_half_sent(
        self: &Rc<Self>,
        c: &Rc<Conn>,
        seq: u32,
        len: usize,
        frame: &[u8],
        denied: Option<Errno>,
    ) {
        let tag = tag::request_data(c.id, seq, c.secret);
        if let Some(e) = denied {
            self.answer(c, seq, e);
            return self.discard(tag);
        }
        let t = match self.ticket(c, len, len) {
            Ok(t) => t,
            Err(Over::Conn) => {
                self.conns.kill(c);
                return self.discard(tag);
            }
            Err(Over::Server) => {
                self.ops.stats.busy.fetch_add(1, Relaxed);
                self.answer(c, seq, Errno::EAGAIN);
                return self.discard(tag);
            }
        };
        let frame = frame.to_vec();
        let (net, c) = (self.clone(), c.clone());
        tokio::task::spawn_local(async move {
            net.half_sent(&c, seq, tag, len, frame).await;
            drop(t);
        });
    }

    async fn half_sent(
        self: &Rc<Self>,
        c: &Rc<Conn>,
        seq: u32,
        tag: u64,
        len: usize,
        frame: Vec<u8>,
    ) {
        let mut data = Vec::<u8>::with_capacity(len);
        // SAFETY: `data` is neither used nor freed until the receive is over (below).
        let posted = unsafe {
            self.worker
                .tag_recv_posted(tag, u64::MAX, data.as_mut_ptr().cast(), len)
        };
        let Ok(mut recv) = posted else {
            return self.answer(c, seq, Errno::EIO);
        };
        let wait = self.cfg.limits.half_sent.saturating_sub(GRACE);
        let got = match tokio::time::timeout(wait, &mut recv).await {
            Ok(r) => received(r, len),
            Err(_) => {
                if !recv.cancel() {
                    // stalled mid-transfer: close the peer; `data` stays with the receive
                    self.conns.kill(c);
                    if settle(&mut recv).await.is_none() {
                        self.ops.stats.stuck.fetch_add(1, Relaxed);
                        tokio::task::spawn_local(async move {
                            let _ = recv.await;
                            drop(data);
                        });
                        return;
                    }
                }
                match futures::poll!(&mut recv) {
                    Poll::Ready(Ok(v)) => received(Ok(v), len),
                    _ => {
                        self.ops.stats.half_sent.fetch_add(1, Relaxed);
                        tracing::debug!("connection {}: write {seq} got no data in time", c.id);
                        self.answer(c, seq, Errno::ETIMEDOUT);
                        return self.discard(tag);
                    }
                }
            }
        };
        drop(recv);
        let got = (got <= len).then(|| {
            // SAFETY: UCX wrote `got` bytes (at most the capacity) and the receive is over.
            unsafe { data.set_len(got) };
            got
        });
        let b = Bufs {
            recv: frame,
            data,
            hdr: Vec::new(),
            enc: Encoder::default(),
            out: Out::boxed(),
        };
        let (ops, who) = (self.ops.clone(), c.who.clone());
        let served = tokio::task::spawn_blocking(move || {
            let mut b = b;
            let (p, n) = serve_frame(&ops, &mut b, got, &who);
            (b, p, n)
        })
        .await;
        let Ok((mut b, p, n)) = served else {
            return self.answer(c, seq, Errno::EIO);
        };
        if c.dead.get() {
            return;
        }
        match post_reply(&c.ep, seq, &mut b, p, n, false) {
            Ok(send) => {
                self.end_send(c, send, b, self.cfg.send_timeout).await;
            }
            Err(_) => self.conns.kill(c),
        }
    }
}

/// Advances the lease clock every quarter lease and closes connections that sent nothing for
/// a lease and have nothing in flight.
async fn lease_loop(net: Rc<Net>) {
    let lease = net.cfg.limits.lease;
    if lease.is_zero() {
        return;
    }
    let step = lease / 4;
    loop {
        tokio::time::sleep(step).await;
        let conns = &net.conns;
        let now = conns.tick.get().wrapping_add(1);
        conns.tick.set(now);
        let expired: Vec<Rc<Conn>> = conns
            .map
            .borrow()
            .values()
            // silent for four steps or more (a lease), and held by nothing but the table
            .filter(|c| now.wrapping_sub(c.seen.get()) > 4 && Rc::strong_count(c) == 1)
            .cloned()
            .collect();
        for c in expired {
            tracing::debug!("connection {} silent for {lease:?}: closed", c.id);
            net.ops.stats.expired.fetch_add(1, Relaxed);
            net.ops.stats.killed.fetch_add(1, Relaxed);
            // nothing in flight: closed with a flush, as a goodbye is (a forced close is
            // undefined behaviour for a peer in error mode `none`, which may be a client
            // that was only stopped); a close that does not finish in time is forced
            conns.close(c.id, net.cfg.send_timeout);
        }
    }
}

/// Receives requests of tag kind `kind` (`REQUEST`, or a replicated cluster's `REPLICATE`)
/// and serves them.
async fn handler(net: Rc<Net>, kind: u64) {
    let (worker, conns, cfg, ops) = (&net.worker, &net.conns, &net.cfg, &net.ops);
    let mut bufs = Some(Bufs::new(cfg.max_frame));
    loop {
        let mut b = bufs.take().expect("handler buffers");
        b.recv.clear();
        let received = worker
            .tag_recv_mask(kind, tag::KIND_MASK, b.recv.spare_capacity_mut())
            .await;
        let (t, len) = match received {
            Ok(v) => v,
            Err(e) => {
                // e.g. a frame larger than our buffer: UCX truncates it; nothing to answer
                tracing::debug!("receive failed: {e}");
                ops.stats.bad_frames.fetch_add(1, Relaxed);
                bufs = Some(b);
                continue;
            }
        };
        // SAFETY: UCX wrote `len` bytes into the spare capacity.
        unsafe { b.recv.set_len(len) };
        let (_, conn, seq) = tag::split(t);
        let word = frame::split_conn_word(&b.recv).map_or(0, |(w, _)| w);
        let Some(c) = conns.check(conn, word) else {
            // not this connection's secret: neither served nor answered (and a write's data
            // message is not taken: its tag could only be the connection's owner's)
            bufs = Some(b);
            continue;
        };
        c.seen.set(conns.tick.get());
        let who = c.who.clone();
        // a request naming a file id without a good capability is answered EACCES, nothing
        // else (its data message, if any, is still taken off the queue)
        let mut denied = None;
        let (inline, raw, span, data_len, small_write) =
            match frame::decode_request(frame_of(&b.recv)) {
                Ok((Request::Bye, _)) => {
                    ops.stats.request("bye");
                    conns.close(conn, cfg.send_timeout);
                    bufs = Some(b);
                    continue;
                }
                Ok((req, _))
                    if {
                        // (each asked once: the map may change between two questions)
                        denied = match ops.admits(&who, &req) {
                            Err(e) => Some(e),
                            Ok(()) => ops.cap_check(&who, &req).err().map(|_| Errno::EACCES),
                        };
                        denied.is_some()
                    } =>
                {
                    let data_len = match req {
                        Request::WriteData { len, .. } => Some(len as usize),
                        _ => None,
                    };
                    (true, false, None, data_len, false)
                }
                Ok((req, _)) => {
                    let raw =
                        matches!(req, Request::Read { len, .. } if len >= frame::RAW_READ_MIN);
                    // where a read of a chunk is in the local file (chunk 0 starts in RocksDB)
                    let span = match req {
                        Request::Read {
                            id,
                            chunk,
                            offset,
                            len,
                            chunk_size,
                            ..
                        } if chunk != 0 => read_span(chunk, offset, len, chunk_size)
                            .ok()
                            .map(|(pos, len)| (id, pos, len)),
                        _ => None,
                    };
                    let data_len = match req {
                        Request::WriteData { len, .. } => Some(len as usize),
                        _ => None,
                    };
                    // a write whose bytes came in the frame (< RAW_WRITE_MIN) into an open file
                    let small_write = match req {
                        Request::Write { id, chunk, .. } if chunk != 0 => {
                            ops.replica.is_none() && small_writes_inline() && ops.chunks.is_open(id)
                        }
                        _ => false,
                    };
                    let inline = if ops.replica.is_some() {
                        runs_inline_replicated(&req)
                    } else {
                        runs_inline(&req, cfg.meta_inline) || small_write
                    };
                    (inline, raw, span, data_len, small_write)
                }
                Err(_) => (true, false, None, None, false),
            };
        // a WriteData's bytes follow as their own message: always take it (a message nobody
        // receives would stay queued in UCX), straight into the data buffer; one that is not
        // there within the grace goes on in a task of its own
        let data = match data_len {
            None => None,
            Some(len) => match net.take_data(&mut b, &c, seq, len, denied).await {
                Some(n) => Some(n),
                None => {
                    bufs = Some(b);
                    continue;
                }
            },
        };
        if let Some(e) = denied {
            ops.stats.errors.fetch_add(1, Relaxed);
            let p = frame::error_prefix(e);
            b.hdr.clear();
            bufs = Some(net.reply(&c, seq, b, p, 0, false).await);
            continue;
        }
        // a large read of a chunk: sent from a mapping of the local file, no copy
        if let Some((id, pos, len)) = span.filter(|_| raw) {
            // the pieces of a streaming read are mapped here; a file not open yet is opened
            // on an IO thread
            let m = match ops.chunks.map_cached(id, pos, len) {
                Some(m) => m,
                None => {
                    let ops2 = ops.clone();
                    tokio::task::spawn_blocking(move || ops2.chunks.map_read(id, pos, len))
                        .await
                        .unwrap_or(Err(Errno::EIO))
                }
            };
            match m {
                Ok(None) => {} // the copying path below
                Ok(Some(m)) => {
                    ops.stats.request("read");
                    ops.stats
                        .bytes_out
                        .fetch_add(m.bytes().len() as u64, Relaxed);
                    if !c.dead.get() {
                        net.reply_mapped(&c, seq, m).await;
                    }
                    bufs = Some(b);
                    continue;
                }
                Err(e) => {
                    ops.stats.request("read");
                    ops.stats.errors.fetch_add(1, Relaxed);
                    let p = frame::error_prefix(e);
                    b.hdr.clear();
                    bufs = Some(net.reply(&c, seq, b, p, 0, false).await);
                    continue;
                }
            }
        }
        let nowait = span.and_then(|sp| read_nowait(ops, &mut b, sp));
        let (b, prefix, n) = if let Some((p, n)) = nowait {
            (b, p, n)
        } else if inline {
            let started = small_write.then(std::time::Instant::now);
            let (p, n) = serve_frame(ops, &mut b, data, &who);
            if let Some(t) = started {
                small_write_took(t.elapsed());
            }
            (b, p, n)
        } else if kind == tag::REPLICATE {
            // a copy's sync: never on the IO threads (see `runs_inline_replicated`)
            let ops2 = ops.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("madfs-copy-sync".into())
                .spawn(move || {
                    let (p, n) = serve_frame(&ops2, &mut b, data, &who);
                    crate::peer::release_thread();
                    let _ = tx.send((b, p, n));
                });
            match (spawned, rx.await) {
                (Ok(_), Ok(v)) => v,
                _ => {
                    tracing::error!("a copy's sync thread failed");
                    bufs = Some(Bufs::new(cfg.max_frame));
                    continue;
                }
            }
        } else {
            let ops2 = ops.clone();
            match tokio::task::spawn_blocking(move || {
                let (p, n) = serve_frame(&ops2, &mut b, data, &who);
                (b, p, n)
            })
            .await
            {
                Ok(v) => v,
                Err(e) => {
                    // an IO-thread panic is a bug; keep serving with fresh buffers
                    tracing::error!("IO task failed: {e}");
                    bufs = Some(Bufs::new(cfg.max_frame));
                    continue;
                }
            }
        };
        let raw = raw && prefix == frame::bulk_reply_prefix();
        bufs = Some(net.reply(&c, seq, b, prefix, n, raw).await);
    }
}

/// A small write that took longer than this on the net thread (the kernel throttled it, or
/// it waited for the disk) sends small writes back to the IO threads for [`INLINE_PAUSE`].
const SLOW_INLINE_WRITE: std::time::Duration = std::time::Duration::from_millis(1);
const INLINE_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

thread_local! {
    /// Small writes go to the IO threads until then (net thread only).
    static INLINE_WRITES_AFTER: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// May a small write into an open chunk file run on the net thread? A buffered write of a
/// few KiB into the page cache costs less than the hand-off to an IO thread and back (4 KiB
/// writes: 30 → 17 µs, 47,008 B: 70 → 40 µs), but it can block (dirty-page throttling, a
/// partial page read from disk; buffered `RWF_NOWAIT` writes are refused by ext4), so a slow
/// one pauses the inline path for a while.
fn small_writes_inline() -> bool {
    INLINE_WRITES_AFTER.with(|c| match c.get() {
        None => true,
        Some(t) if std::time::Instant::now() >= t => {
            c.set(None);
            true
        }
        Some(_) => false,
    })
}

fn small_write_took(d: std::time::Duration) {
    if d > SLOW_INLINE_WRITE {
        INLINE_WRITES_AFTER.with(|c| c.set(Some(std::time::Instant::now() + INLINE_PAUSE)));
    }
}

/// Receives fsync requests and hands them to the sync thread; each waiter is answered by a
/// small local task, so the receive loop never waits for a disk flush and requests that arrive
/// during one flush are batched into the next.
async fn fsync_handler(
    worker: Rc<Worker>,
    conns: Rc<Conns>,
    cfg: Rc<NetConfig>,
    ops: Arc<Ops>,
    sync_tx: SyncSender,
) {
    let mut recv = Vec::<u8>::with_capacity(4096);
    let pending = Arc::new(tokio::sync::Semaphore::new(4096));
    loop {
        recv.clear();
        let (t, len) = match worker
            .tag_recv_mask(tag::FSYNC, tag::KIND_MASK, recv.spare_capacity_mut())
            .await
        {
            Ok(v) => v,
            Err(_) => {
                ops.stats.bad_frames.fetch_add(1, Relaxed);
                continue;
            }
        };
        // SAFETY: UCX wrote `len` bytes into the spare capacity.
        unsafe { recv.set_len(len) };
        let (_, conn, seq) = tag::split(t);
        let word = frame::split_conn_word(&recv).map_or(0, |(w, _)| w);
        let Some(c) = conns.check(conn, word) else {
            continue;
        };
        c.seen.set(conns.tick.get());
        let waiter = match frame::decode_request(frame_of(&recv)) {
            Ok((req, _)) => submit_fsync(&ops, &sync_tx, &c.who, &req, &recv),
            Err(_) => {
                ops.stats.bad_frames.fetch_add(1, Relaxed);
                Err(Errno::EINVAL)
            }
        };
        let Ok(permit) = pending.clone().acquire_owned().await else {
            return;
        };
        let (conns, cfg, c) = (conns.clone(), cfg.clone(), c.clone());
        tokio::task::spawn_local(async move {
            let _permit = permit;
            let result = match waiter {
                Ok(rx) => rx.await.unwrap_or(Err(Errno::EIO)),
                Err(e) => Err(e),
            };
            let (prefix, hdr): ([u8; PREFIX], Vec<u8>) = match result {
                Ok(()) => {
                    let mut enc = Encoder::default();
                    let (p, h) = enc.reply(&Reply::Unit);
                    (p, h.to_vec())
                }
                Err(e) => (frame::error_prefix(e), Vec::new()),
            };
            send_small(&conns, &c, seq, &prefix, &hdr, cfg.send_timeout).await;
        });
    }
}

/// Plain-TCP fallback transport: the same frames over a stream, `[u32 LE len][kind][frame]`
/// in, `[u32 LE len][reply frame]` out, one request at a time per connection. Used by clients
/// that cannot run UCX (children of `fork` whose parent had UCX running). A connection holds
/// a buffer set only while a request of it is served and answered (sets come from a shared
/// pool, at most [`Limits::tcp_sets`] at once), so memory follows requests in flight, not
/// connections. A connection idle for [`Limits::tcp_idle`], one whose request is not all
/// there within the half-sent or send deadline (the longer) of its first byte, and one that does not take its
/// reply within the send timeout are closed.
async fn tcp_loop(
    listener: tokio::net::TcpListener,
    cfg: Rc<NetConfig>,
    ops: Arc<Ops>,
    sync_tx: SyncSender,
) {
    let pool: Rc<RefCell<Vec<Bufs>>> = Rc::default();
    let sets = Rc::new(tokio::sync::Semaphore::new(cfg.limits.tcp_sets.max(1)));
    // bytes of replies that slow readers have not taken yet
    let stalled: Rc<Cell<usize>> = Rc::default();
    loop {
        let Ok((s, _)) = listener.accept().await else {
            continue;
        };
        let _ = s.set_nodelay(true);
        ops.stats.connections.fetch_add(1, Relaxed);
        let (cfg, ops, sync_tx, pool, sets, stalled) = (
            cfg.clone(),
            ops.clone(),
            sync_tx.clone(),
            pool.clone(),
            sets.clone(),
            stalled.clone(),
        );
        tokio::task::spawn_local(async move {
            let shared = (&*pool, &*sets, &*stalled);
            if let Err(e) = tcp_conn(s, &cfg, &ops, &sync_tx, shared).await {
                tracing::debug!("tcp connection ended: {e}");
            }
        });
    }
}

/// Frames of at most this many bytes keep their buffer on their connection between
/// requests; a larger one's goes.
const TCP_KEEP: usize = 64 << 10;

async fn tcp_conn(
    mut s: tokio::net::TcpStream,
    cfg: &NetConfig,
    ops: &Arc<Ops>,
    sync_tx: &SyncSender,
    (pool, sets, stalled): (&RefCell<Vec<Bufs>>, &tokio::sync::Semaphore, &Cell<usize>),
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = &cfg.limits;
    let nonce = madfs_auth::random::<32>()?;
    let bytes = flexbuffers::to_vec(cfg.welcome(0, nonce, cfg.limits.tcp_idle)).unwrap_or_default();
    s.write_all(&(bytes.len() as u32).to_le_bytes()).await?;
    s.write_all(&bytes).await?;
    // the hello: `[u32 LE len][3][Hello]`, within the hello deadline
    let hello = tokio::time::timeout(HELLO_TIMEOUT, async {
        let len = s.read_u32_le().await? as usize;
        if !(2..=8192).contains(&len) {
            return Err(std::io::Error::other("bad hello"));
        }
        let mut m = vec![0u8; len];
        s.read_exact(&mut m).await?;
        if m[0] != 3 {
            return Err(std::io::Error::other("no hello"));
        }
        m.remove(0);
        Ok(m)
    })
    .await
    .map_err(|_| std::io::Error::other("no hello in time"))??;
    let (answer, admitted) = match check_hello(cfg, &hello, 0, &nonce).await {
        Ok((who, proof)) => {
            let secret = madfs_auth::random_u64()?;
            let a = Admission::Admitted {
                secret,
                uid: who.uid,
                gid: who.gid,
                proof,
            };
            (a, Some((secret, Arc::new(who))))
        }
        Err(reason) => {
            tracing::warn!("TCP connection refused: {reason}");
            ops.stats.refused.fetch_add(1, Relaxed);
            (Admission::Refused { reason }, None)
        }
    };
    let bytes = flexbuffers::to_vec(&answer).unwrap_or_default();
    s.write_all(&(bytes.len() as u32).to_le_bytes()).await?;
    s.write_all(&bytes).await?;
    let Some((secret, who)) = admitted else {
        return Ok(());
    };
    // the request being read (it becomes a buffer set's `recv` once whole)
    let mut frame: Vec<u8> = Vec::new();
    loop {
        // the first byte of the next request, within the idle limit
        let mut head = [0u8; 5];
        let first = s.read(&mut head[..1]);
        let got = if limits.tcp_idle.is_zero() {
            first.await
        } else {
            match tokio::time::timeout(limits.tcp_idle, first).await {
                Ok(r) => r,
                Err(_) => {
                    ops.stats.tcp_timeouts.fetch_add(1, Relaxed);
                    tracing::debug!("TCP connection idle for {:?}: closed", limits.tcp_idle);
                    return Ok(());
                }
            }
        };
        if got.unwrap_or(0) == 0 {
            return Ok(());
        }
        // the rest of it within a deadline from its first byte
        let read = async {
            s.read_exact(&mut head[1..]).await?;
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if len == 0 || len > cfg.max_frame + 1 {
                ops.stats.bad_frames.fetch_add(1, Relaxed);
                return Err(std::io::Error::other("bad frame length"));
            }
            frame.clear();
            frame.reserve_exact(len - 1);
            let n = (&mut s)
                .take(len as u64 - 1)
                .read_to_end(&mut frame)
                .await?;
            if n != len - 1 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            Ok(head[4])
        };
        // (a client sends a request in one piece; the server may be the slow one, so the
        // deadline is the longer of the half-sent and send deadlines)
        let deadline = limits.half_sent.max(cfg.send_timeout);
        let kind = match tokio::time::timeout(deadline, read).await {
            Ok(r) => r?,
            Err(_) => {
                ops.stats.tcp_timeouts.fetch_add(1, Relaxed);
                ops.stats.half_sent.fetch_add(1, Relaxed);
                tracing::debug!(
                    "TCP request not whole within {:?}: closed",
                    limits.half_sent
                );
                return Ok(());
            }
        };
        let _set = sets
            .acquire()
            .await
            .map_err(|_| std::io::Error::other("closed"))?;
        let mut b = pool
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Bufs::new(cfg.max_frame));
        std::mem::swap(&mut b.recv, &mut frame);
        if frame.capacity() > TCP_KEEP {
            frame = Vec::new();
        }
        if frame::split_conn_word(&b.recv).map(|(w, _)| w) != Some(secret) {
            ops.stats.forged.fetch_add(1, Relaxed);
            pool.borrow_mut().push(b);
            return Ok(());
        }
        let (b, prefix, n) = if kind == 2 {
            let result = match frame::decode_request(frame_of(&b.recv)) {
                Ok((req, _)) => match submit_fsync(ops, sync_tx, &who, &req, &b.recv) {
                    Ok(rx) => rx.await.unwrap_or(Err(Errno::EIO)),
                    Err(e) => Err(e),
                },
                Err(_) => Err(Errno::EINVAL),
            };
            let mut b = b;
            b.hdr.clear();
            let prefix = match result {
                Ok(()) => {
                    let (p, h) = b.enc.reply(&Reply::Unit);
                    let h = h.to_vec();
                    b.hdr.extend_from_slice(&h);
                    p
                }
                Err(e) => frame::error_prefix(e),
            };
            (b, prefix, 0)
        } else {
            let (inline, denied) = match frame::decode_request(frame_of(&b.recv)) {
                Ok((req, _)) if ops.replica.is_some() => (
                    runs_inline_replicated(&req),
                    ops.cap_check(&who, &req).err(),
                ),
                Ok((req, _)) => (
                    runs_inline(&req, cfg.meta_inline),
                    ops.cap_check(&who, &req).err(),
                ),
                Err(_) => (true, None),
            };
            if let Some(e) = denied {
                let mut b = b;
                b.hdr.clear();
                (b, frame::error_prefix(e), 0)
            } else if inline {
                let mut b = b;
                let (p, n) = serve_frame(ops, &mut b, None, &who);
                (b, p, n)
            } else {
                let (ops2, who) = (ops.clone(), who.clone());
                let mut b = b;
                tokio::task::spawn_blocking(move || {
                    let (p, n) = serve_frame(&ops2, &mut b, None, &who);
                    (b, p, n)
                })
                .await
                .map_err(std::io::Error::other)?
            }
        };
        let total = ((PREFIX + b.hdr.len() + n) as u32).to_le_bytes();
        // one writev, one segment for a small reply: four writes were four segments, and the
        // client, woken by the first, waited again for the rest (stat over TCP: 94 µs)
        let pieces = [&total[..], &prefix, &b.hdr, &b.data[..n]];
        // what the socket takes now; a reply it does not take whole keeps only its unsent
        // bytes (not the buffer set) while it waits for a slow reader
        let sent = write_now(&s, &pieces);
        let all: usize = pieces.iter().map(|p| p.len()).sum();
        let rest = match sent {
            Ok(k) if k < all => Some(pieces.concat().split_off(k)),
            _ => None,
        };
        pool.borrow_mut().push(b);
        drop(_set);
        sent?;
        let Some(rest) = rest else {
            continue;
        };
        if stalled.get() + rest.len() > limits.park_bytes {
            ops.stats.busy.fetch_add(1, Relaxed);
            return Ok(());
        }
        stalled.set(stalled.get() + rest.len());
        let done = tokio::time::timeout(cfg.send_timeout, s.write_all(&rest)).await;
        stalled.set(stalled.get() - rest.len());
        match done {
            Ok(r) => r?,
            Err(_) => {
                ops.stats.tcp_timeouts.fetch_add(1, Relaxed);
                tracing::debug!(
                    "TCP peer took no reply within {:?}: closed",
                    cfg.send_timeout
                );
                return Ok(());
            }
        }
    }
}

/// Writes what the socket takes of `pieces` now, without waiting: the bytes written.
fn write_now(s: &tokio::net::TcpStream, pieces: &[&[u8]]) -> std::io::Result<usize> {
    let mut iov: Vec<std::io::IoSlice<'_>> = pieces
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| std::io::IoSlice::new(p))
        .collect();
    let mut iov = &mut iov[..];
    let mut sent = 0;
    while !iov.is_empty() {
        match s.try_write_vectored(iov) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                sent += n;
                std::io::IoSlice::advance_slices(&mut iov, n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_slow_inline_write_pauses_the_inline_path() {
        assert!(small_writes_inline());
        small_write_took(Duration::from_micros(200));
        assert!(small_writes_inline(), "a fast write changes nothing");
        small_write_took(Duration::from_millis(5));
        assert!(!small_writes_inline(), "paused after a slow one");
        // the pause ends
        INLINE_WRITES_AFTER.with(|c| c.set(Some(Instant::now() - Duration::from_millis(1))));
        assert!(small_writes_inline());
        assert!(INLINE_WRITES_AFTER.with(|c| c.get()).is_none());
    }
}
