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
use crate::ops::{read_span, runs_inline, Answer, Ops};
use crate::sync::SyncSender;
use madfs_proto::frame::CONN_WORD;
use madfs_proto::frame::{self, Encoder, PREFIX};
use madfs_proto::{tag, Admission, Dirent, Errno, Hello, Reply, Request, Welcome};
use madfs_rpc::{progress, Endpoint, Listener, UcxSettings, Worker};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
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
}

impl NetConfig {
    /// What a new connection `conn` is told first (`nonce`: its challenge).
    fn welcome(&self, conn: u32, nonce: [u8; 32]) -> Welcome {
        Welcome {
            nonce,
            protocol: madfs_proto::PROTOCOL_VERSION,
            cluster: self.cluster,
            servers: self.servers,
            conn,
            server: self.server_id,
            max_frame: self.max_frame as u32,
            chunk_size: self.chunk_size,
        }
    }
}

/// An admitted connection.
struct Conn {
    ep: Rc<Endpoint>,
    /// The word every request of this connection starts with.
    secret: u64,
    /// Who it is served as.
    who: Arc<Who>,
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
                ep,
                secret,
                who: Arc::new(who),
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

    fn get(&self, id: u32) -> Option<Rc<Endpoint>> {
        self.map.borrow().get(&id).map(|c| c.ep.clone())
    }

    fn new(stats: Arc<crate::stats::ServerStats>) -> Conns {
        Conns {
            next: Cell::new(0),
            map: RefCell::default(),
            waiting: RefCell::default(),
            stats,
        }
    }

    fn remove(&self, id: u32) -> Option<Rc<Endpoint>> {
        let mut map = self.map.borrow_mut();
        let c = map.remove(&id);
        self.stats.live_connections.store(map.len() as u64, Relaxed);
        c.map(|c| c.ep.clone())
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
                    ops.execute_as(who, &w, &b.data[..n], &mut Vec::new())
                }
                // the data did not arrive whole (or not over UCX: the TCP transport has none)
                Some(_) if len as usize > b.data.len() => Err(Errno::EFBIG),
                _ => Err(Errno::EIO),
            }
        }
        Ok((req, bulk)) => {
            ops.stats.request(req.name());
            ops.stats.bytes_in.fetch_add(bulk.len() as u64, Relaxed);
            ops.execute_as(who, &req, bulk, &mut b.data)
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

/// Serves until `stop` is set. Must run inside a `LocalSet`.
pub async fn run(
    worker: Rc<Worker>,
    listener: Listener,
    tcp: std::net::TcpListener,
    cfg: NetConfig,
    ops: Arc<Ops>,
    sync_tx: SyncSender,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    tcp.set_nonblocking(true)?;
    let tcp = tokio::net::TcpListener::from_std(tcp)?;
    let conns = Rc::new(Conns::new(ops.stats.clone()));
    let cfg = Rc::new(cfg);
    let s = stop.clone();
    let progress =
        tokio::task::spawn_local(progress::run(worker.clone(), cfg.ucx.spin, move || {
            s.load(Relaxed)
        }));
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
    for _ in 0..cfg.handlers {
        tasks.push(tokio::task::spawn_local(handler(
            worker.clone(),
            conns.clone(),
            cfg.clone(),
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
    while !stop.load(Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in tasks {
        t.abort();
    }
    let _ = progress.await;
    Ok(())
}

/// Tag kinds no server receives (everything but `REQUEST`, `FSYNC`, `REQUEST_DATA` and
/// `HELLO`), as three (kind, mask) receives over the kind bits: 0 and 4 (`0x00`); 3 and 7
/// (`0x11`); 8–15 (`1xxx`). A message of such a kind would otherwise wait in UCX's
/// unexpected queue for ever, holding its memory.
const DRAINED_KINDS: [(u64, u64); 3] = [
    (0, 0b1011 << 60),
    (0b0011 << 60, 0b1011 << 60),
    (0b1000 << 60, 0b1000 << 60),
];

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
            let bytes = flexbuffers::to_vec(cfg.welcome(id, nonce)).unwrap_or_default();
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
                ep.tag_send(tag::admit(cfg.server_id), &bytes),
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

/// Sends the raw data of a large read (`frame::RAW_READ_MIN`) on `tag::reply_data(seq)`.
async fn send_raw(ep: &Endpoint, seq: u32, data: &[u8], timeout: Duration) -> bool {
    let mut send = std::pin::pin!(ep.tag_send(tag::reply_data(seq), data));
    if let std::task::Poll::Ready(r) = futures::poll!(send.as_mut()) {
        return r.is_ok();
    }
    matches!(tokio::time::timeout(timeout, send).await, Ok(Ok(_)))
}

async fn handler(worker: Rc<Worker>, conns: Rc<Conns>, cfg: Rc<NetConfig>, ops: Arc<Ops>) {
    let mut bufs = Some(Bufs {
        recv: Vec::with_capacity(cfg.max_frame),
        data: vec![0u8; cfg.max_frame.saturating_sub(HEADER_ROOM)],
        hdr: Vec::with_capacity(1 << 16),
        enc: Encoder::default(),
    });
    loop {
        let mut b = bufs.take().expect("handler buffers");
        b.recv.clear();
        let received = worker
            .tag_recv_mask(tag::REQUEST, tag::KIND_MASK, b.recv.spare_capacity_mut())
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
                Ok((req, _)) if ops.cap_check(&who, &req).is_err() => {
                    denied = Some(Errno::EACCES);
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
                            small_writes_inline() && ops.chunks.is_open(id)
                        }
                        _ => false,
                    };
                    let inline = runs_inline(&req, cfg.meta_inline) || small_write;
                    (inline, raw, span, data_len, small_write)
                }
                Err(_) => (true, false, None, None, false),
            };
        // a WriteData's bytes follow as their own message: always take it (a message nobody
        // receives would stay queued in UCX), straight into the data buffer
        let data = match data_len {
            None => None,
            Some(len) => {
                let room = len.min(b.data.len());
                // SAFETY: u8 and MaybeUninit<u8> have the same layout; UCX only writes.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(
                        b.data.as_mut_ptr() as *mut std::mem::MaybeUninit<u8>,
                        room,
                    )
                };
                let recv = worker.tag_recv(tag::request_data(conn, seq, c.secret), out);
                // (a receive that times out is cancelled; one whose transfer already began
                // cannot be, but a client that stalls mid-transfer fails it long before this)
                match tokio::time::timeout(cfg.send_timeout, recv).await {
                    Ok(Ok(n)) => Some(n),
                    Ok(Err(_)) => Some(len + 1), // truncated (too long) or failed
                    Err(_) => None,
                }
            }
        };
        if let Some(e) = denied {
            ops.stats.errors.fetch_add(1, Relaxed);
            if let Some(ep) = conns.get(conn) {
                let p = frame::error_prefix(e);
                if !send_reply(&ep, seq, &p, &[], &[], cfg.send_timeout).await {
                    conns.remove(conn);
                }
            }
            bufs = Some(b);
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
            let sent = match (m, conns.get(conn)) {
                (Ok(None), _) => None, // the copying path below
                (_, None) => Some(true),
                (Ok(Some(m)), Some(ep)) => {
                    ops.stats.request("read");
                    ops.stats
                        .bytes_out
                        .fetch_add(m.bytes().len() as u64, Relaxed);
                    Some(send_raw(&ep, seq, m.bytes(), cfg.send_timeout).await)
                }
                (Err(e), Some(ep)) => {
                    ops.stats.request("read");
                    ops.stats.errors.fetch_add(1, Relaxed);
                    let p = frame::error_prefix(e);
                    Some(send_reply(&ep, seq, &p, &[], &[], cfg.send_timeout).await)
                }
            };
            if let Some(ok) = sent {
                if !ok {
                    tracing::warn!("reply to connection {conn} failed; dropping it");
                    conns.remove(conn);
                }
                bufs = Some(b);
                continue;
            }
        }
        let nowait = span.and_then(|sp| read_nowait(&ops, &mut b, sp));
        let (b, prefix, n) = if let Some((p, n)) = nowait {
            (b, p, n)
        } else if inline {
            let started = small_write.then(std::time::Instant::now);
            let (p, n) = serve_frame(&ops, &mut b, data, &who);
            if let Some(t) = started {
                small_write_took(t.elapsed());
            }
            (b, p, n)
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
                    bufs = Some(Bufs {
                        recv: Vec::with_capacity(cfg.max_frame),
                        data: vec![0u8; cfg.max_frame.saturating_sub(HEADER_ROOM)],
                        hdr: Vec::new(),
                        enc: Encoder::default(),
                    });
                    continue;
                }
            }
        };
        if let Some(ep) = conns.get(conn) {
            let sent = if raw && prefix == frame::bulk_reply_prefix() {
                // a large read: the data alone, contiguous (zero-copy rendezvous)
                send_raw(&ep, seq, &b.data[..n], cfg.send_timeout).await
            } else {
                send_reply(&ep, seq, &prefix, &b.hdr, &b.data[..n], cfg.send_timeout).await
            };
            if !sent {
                tracing::warn!("reply to connection {conn} failed; dropping it");
                conns.remove(conn);
            }
        }
        bufs = Some(b);
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
        let waiter = match frame::decode_request(frame_of(&recv)) {
            Ok((req @ Request::Fsync { id, .. }, _)) => {
                ops.stats.request("fsync");
                match ops.cap_check(&c.who, &req) {
                    Ok(()) => Ok(sync_tx.submit(&ops, &req, id)),
                    Err(e) => Err(e),
                }
            }
            Ok(_) => Err(Errno::EINVAL),
            Err(_) => {
                ops.stats.bad_frames.fetch_add(1, Relaxed);
                Err(Errno::EINVAL)
            }
        };
        let Ok(permit) = pending.clone().acquire_owned().await else {
            return;
        };
        let (conns, cfg) = (conns.clone(), cfg.clone());
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
            if let Some(ep) = conns.get(conn) {
                if !send_reply(&ep, seq, &prefix, &hdr, &[], cfg.send_timeout).await {
                    conns.remove(conn);
                }
            }
        });
    }
}

/// Plain-TCP fallback transport: the same frames over a stream, `[u32 LE len][kind][frame]`
/// in, `[u32 LE len][reply frame]` out, one request at a time per connection. Used by clients
/// that cannot run UCX (children of `fork` whose parent had UCX running). Buffers come from a
/// shared pool, so memory follows requests in flight, not connections.
async fn tcp_loop(
    listener: tokio::net::TcpListener,
    cfg: Rc<NetConfig>,
    ops: Arc<Ops>,
    sync_tx: SyncSender,
) {
    let pool: Rc<RefCell<Vec<Bufs>>> = Rc::default();
    loop {
        let Ok((s, _)) = listener.accept().await else {
            continue;
        };
        let _ = s.set_nodelay(true);
        ops.stats.connections.fetch_add(1, Relaxed);
        let (cfg, ops, sync_tx, pool) = (cfg.clone(), ops.clone(), sync_tx.clone(), pool.clone());
        tokio::task::spawn_local(async move {
            if let Err(e) = tcp_conn(s, &cfg, &ops, &sync_tx, &pool).await {
                tracing::debug!("tcp connection ended: {e}");
            }
        });
    }
}

async fn tcp_conn(
    mut s: tokio::net::TcpStream,
    cfg: &NetConfig,
    ops: &Arc<Ops>,
    sync_tx: &SyncSender,
    pool: &Rc<RefCell<Vec<Bufs>>>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let nonce = madfs_auth::random::<32>()?;
    let bytes = flexbuffers::to_vec(cfg.welcome(0, nonce)).unwrap_or_default();
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
    loop {
        let len = match s.read_u32_le().await {
            Ok(l) => l as usize,
            Err(_) => return Ok(()),
        };
        if len == 0 || len > cfg.max_frame + 1 {
            ops.stats.bad_frames.fetch_add(1, Relaxed);
            return Ok(());
        }
        let kind = s.read_u8().await?;
        let mut b = pool.borrow_mut().pop().unwrap_or_else(|| Bufs {
            recv: Vec::new(),
            data: vec![0u8; cfg.max_frame.saturating_sub(HEADER_ROOM)],
            hdr: Vec::new(),
            enc: Encoder::default(),
        });
        b.recv.resize(len - 1, 0);
        s.read_exact(&mut b.recv).await?;
        if frame::split_conn_word(&b.recv).map(|(w, _)| w) != Some(secret) {
            ops.stats.forged.fetch_add(1, Relaxed);
            return Ok(());
        }
        let (b, prefix, n) = if kind == 2 {
            let result = match frame::decode_request(frame_of(&b.recv)) {
                Ok((req @ Request::Fsync { id, .. }, _)) => {
                    ops.stats.request("fsync");
                    match ops.cap_check(&who, &req) {
                        Ok(()) => sync_tx
                            .submit(ops, &req, id)
                            .await
                            .unwrap_or(Err(Errno::EIO)),
                        Err(e) => Err(e),
                    }
                }
                _ => Err(Errno::EINVAL),
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
        write_all_vectored(&mut s, &[&total, &prefix, &b.hdr, &b.data[..n]]).await?;
        pool.borrow_mut().push(b);
    }
}

/// Writes every byte of `pieces` with as few `writev` calls as the socket allows.
async fn write_all_vectored(
    s: &mut tokio::net::TcpStream,
    pieces: &[&[u8]],
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut iov: Vec<std::io::IoSlice<'_>> = pieces
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| std::io::IoSlice::new(p))
        .collect();
    let mut iov = &mut iov[..];
    while !iov.is_empty() {
        let n = s.write_vectored(iov).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut iov, n);
    }
    Ok(())
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
