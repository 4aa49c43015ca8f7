//! A client's UCX connections to the servers of a cluster, and the `call` primitive.
//!
//! One `Transport` per thread (UCX workers are `!Send`). Each call posts an exact-tag receive
//! for its reply (`tag::reply(seq)`) *before* sending, so replies land directly in the
//! caller's buffer instead of UCX's unexpected-message queue. Everything a caller waits for
//! goes through [`Transport::wait`], which has a deadline: a dead server gives `EIO`, never a
//! hang, and the connection is dropped so the next call reconnects.

use crate::cluster_file;
use crate::progress::block_on;
use crate::UcxSettings;
use async_ucx::ucp::{Context, Endpoint, Worker};
use async_ucx::Error as UcxError;
use madfs_proto::frame::{self, Encoder, PREFIX};
use madfs_proto::{tag, Errno, Reply, Request, Welcome};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Default deadline of one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// A connection. The endpoint is shared through `Rc` because async-ucx closes an endpoint
/// when *any* clone of an `Endpoint` is dropped.
#[derive(Clone)]
struct Conn {
    ep: Rc<Endpoint>,
    welcome: Welcome,
}

/// A decoded-on-demand reply frame.
#[derive(Debug)]
pub struct RawReply {
    buf: Vec<u8>,
}

impl RawReply {
    /// The reply body and its bulk data, or the server's errno.
    pub fn decode(&self) -> Result<(Reply<'_>, &[u8]), Errno> {
        frame::decode_reply(&self.buf)
    }
}

/// Connections from this thread to every server of a cluster.
pub struct Transport {
    _context: Arc<Context>,
    worker: Rc<Worker>,
    settings: UcxSettings,
    timeout: Cell<Duration>,
    addrs: RefCell<Vec<SocketAddr>>,
    cluster_file: Option<PathBuf>,
    conns: RefCell<Vec<Option<Conn>>>,
    seq: Cell<u32>,
    enc: RefCell<Encoder>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("servers", &self.addrs.borrow())
            .finish()
    }
}

fn ucx_errno(e: UcxError) -> Errno {
    match e {
        UcxError::MessageTruncated => Errno::EMSGSIZE,
        _ => Errno::EIO,
    }
}

impl Transport {
    /// A transport for the servers at `addrs` (index = server id). With `cluster_file`, a
    /// reconnect re-reads the file, so a server restarted on another port is found again.
    pub fn new(
        context: Arc<Context>,
        addrs: Vec<SocketAddr>,
        cluster_file: Option<PathBuf>,
        settings: UcxSettings,
    ) -> std::io::Result<Transport> {
        let worker = context
            .create_worker()
            .map_err(|e| std::io::Error::other(format!("UCX worker: {e}")))?;
        let n = addrs.len();
        Ok(Transport {
            _context: context,
            worker,
            settings,
            timeout: Cell::new(DEFAULT_TIMEOUT),
            addrs: RefCell::new(addrs),
            cluster_file,
            conns: RefCell::new(vec![None; n]),
            seq: Cell::new(0),
            enc: RefCell::new(Encoder::default()),
        })
    }

    /// Number of servers.
    pub fn servers(&self) -> u32 {
        self.addrs.borrow().len() as u32
    }

    /// Sets the deadline of each call.
    pub fn set_timeout(&self, d: Duration) {
        self.timeout.set(d);
    }

    /// The deadline of each call.
    pub fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    /// The UCX worker of this transport.
    pub fn worker(&self) -> &Rc<Worker> {
        &self.worker
    }

    /// What server `server` said when we connected (connects if needed).
    pub fn welcome(&self, server: u32) -> Result<Welcome, Errno> {
        Ok(self.conn(server)?.welcome)
    }

    fn next_seq(&self) -> u32 {
        let s = self.seq.get().wrapping_add(1);
        self.seq.set(s);
        s
    }

    /// Drops the connection to `server`; the next call reconnects.
    pub fn invalidate(&self, server: u32) {
        if let Some(c) = self.conns.borrow_mut().get_mut(server as usize) {
            *c = None;
        }
    }

    fn conn(&self, server: u32) -> Result<Conn, Errno> {
        let idx = server as usize;
        if let Some(Some(c)) = self.conns.borrow().get(idx) {
            return Ok(c.clone());
        }
        if idx >= self.conns.borrow().len() {
            return Err(Errno::EINVAL);
        }
        if let Some(path) = &self.cluster_file {
            if let Ok(entries) = cluster_file::read(path) {
                if entries.len() == self.conns.borrow().len() {
                    *self.addrs.borrow_mut() = entries.iter().map(|e| e.ucx).collect();
                }
            }
        }
        let addr = self.addrs.borrow()[idx];
        let deadline = Instant::now() + self.timeout.get();
        let worker = self.worker.clone();
        let mode = self.settings.err_mode;
        let fut = async move {
            let mut buf = Vec::<u8>::with_capacity(256);
            let (ep, n) = {
                let mut recv =
                    pin!(worker.tag_recv(tag::welcome(server), buf.spare_capacity_mut()));
                if let Poll::Ready(r) = futures::poll!(recv.as_mut()) {
                    r.map_err(ucx_errno)?;
                    return Err(Errno::EPROTO);
                }
                let ep = worker.connect_socket_with(addr, mode).await.map_err(|e| {
                    tracing::debug!("connect to server {server} at {addr}: {e}");
                    Errno::EIO
                })?;
                let n = recv.await.map_err(ucx_errno)?;
                (ep, n)
            };
            // SAFETY: UCX wrote `n` bytes into the spare capacity.
            unsafe { buf.set_len(n) };
            let welcome: Welcome = flexbuffers::from_slice(&buf).map_err(|_| Errno::EPROTO)?;
            Ok::<_, Errno>(Conn {
                ep: Rc::new(ep),
                welcome,
            })
        };
        let conn =
            block_on(&self.worker, fut, self.settings.spin, deadline).ok_or(Errno::EIO)??;
        if conn.welcome.server != server {
            return Err(Errno::EPROTO);
        }
        self.conns.borrow_mut()[idx] = Some(conn.clone());
        Ok(conn)
    }

    /// Connects to `server` now if not connected yet.
    pub fn ensure(&self, server: u32) -> Result<(), Errno> {
        self.conn(server).map(|_| ())
    }

    /// Runs `fut` (calls to the servers in `involved`, already connected with [`Self::ensure`])
    /// to completion, with the call deadline. On timeout the connections of `involved` are
    /// dropped and the result is `EIO`.
    pub fn wait<T>(
        &self,
        involved: &[u32],
        fut: impl Future<Output = Result<T, Errno>>,
    ) -> Result<T, Errno> {
        let deadline = Instant::now() + self.timeout.get();
        match block_on(&self.worker, fut, self.settings.spin, deadline) {
            Some(r) => {
                if r.as_ref().err() == Some(&Errno::EIO) {
                    for s in involved {
                        self.invalidate(*s);
                    }
                }
                r
            }
            None => {
                tracing::warn!(
                    "call to servers {involved:?} timed out after {:?}",
                    self.timeout.get()
                );
                for s in involved {
                    self.invalidate(*s);
                }
                Err(Errno::EIO)
            }
        }
    }

    /// One synchronous call: connect if needed, send, wait for the reply.
    pub fn call_sync(
        &self,
        server: u32,
        req: &Request<'_>,
        bulk: &[u8],
        reply_cap: usize,
    ) -> Result<RawReply, Errno> {
        self.ensure(server)?;
        self.wait(
            &[server],
            self.call(server, tag::REQUEST, req, bulk, reply_cap),
        )
    }

    fn encode(&self, req: &Request<'_>) -> ([u8; PREFIX], Vec<u8>) {
        let mut enc = self.enc.borrow_mut();
        let (p, h) = enc.request(req);
        (p, h.to_vec())
    }

    fn endpoint(&self, server: u32) -> Result<(Rc<Endpoint>, u32), Errno> {
        match self.conns.borrow().get(server as usize) {
            Some(Some(c)) => Ok((c.ep.clone(), c.welcome.conn)),
            _ => Err(Errno::ENOTCONN),
        }
    }

    /// Sends `req` (+ `bulk`) to a connected server on the tag of `kind` (`tag::REQUEST` or
    /// `tag::FSYNC`) and receives the reply (at most `reply_cap` bytes after the prefix).
    pub async fn call(
        &self,
        server: u32,
        kind: u64,
        req: &Request<'_>,
        bulk: &[u8],
        reply_cap: usize,
    ) -> Result<RawReply, Errno> {
        let (prefix, hdr) = self.encode(req);
        let mut buf = Vec::<u8>::with_capacity(PREFIX + reply_cap);
        let n = self
            .exchange(
                server,
                kind,
                &[&prefix, &hdr, bulk],
                buf.spare_capacity_mut(),
            )
            .await?;
        // SAFETY: UCX wrote `n` bytes into the spare capacity.
        unsafe { buf.set_len(n) };
        Ok(RawReply { buf })
    }

    /// Sends raw frame pieces with the tag of `kind` and receives the raw reply into `out`
    /// (used by `call` and by tests that send malformed frames).
    pub async fn exchange(
        &self,
        server: u32,
        kind: u64,
        pieces: &[&[u8]],
        out: &mut [std::mem::MaybeUninit<u8>],
    ) -> Result<usize, Errno> {
        let (ep, conn) = self.endpoint(server)?;
        let seq = self.next_seq();
        let mut recv = pin!(self.worker.tag_recv(tag::reply(seq), out));
        if let Poll::Ready(r) = futures::poll!(recv.as_mut()) {
            r.map_err(ucx_errno)?;
            return Err(Errno::EPROTO);
        }
        let iov: Vec<IoSlice<'_>> = pieces
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| IoSlice::new(p))
            .collect();
        ep.tag_send_vectored(tag::request(kind, conn, seq), &iov)
            .await
            .map_err(ucx_errno)?;
        recv.await.map_err(ucx_errno)
    }

    /// Sends a `Read` request and receives the data straight into `buf` (no copy). Returns the
    /// number of bytes the server had (short at the end of the stored data).
    pub async fn call_read(
        &self,
        server: u32,
        req: &Request<'_>,
        buf: &mut [u8],
    ) -> Result<usize, Errno> {
        let (ep, conn) = self.endpoint(server)?;
        let (prefix, hdr) = self.encode(req);
        let seq = self.next_seq();
        let mut rprefix = [0u8; PREFIX];
        let n = {
            let mut iov = [IoSliceMut::new(&mut rprefix), IoSliceMut::new(buf)];
            let mut recv = pin!(self.worker.tag_recv_vectored(tag::reply(seq), &mut iov));
            if let Poll::Ready(r) = futures::poll!(recv.as_mut()) {
                r.map_err(ucx_errno)?;
                return Err(Errno::EPROTO);
            }
            let send = [IoSlice::new(&prefix), IoSlice::new(&hdr)];
            ep.tag_send_vectored(tag::request(tag::REQUEST, conn, seq), &send)
                .await
                .map_err(ucx_errno)?;
            recv.await.map_err(ucx_errno)?
        };
        if n < PREFIX {
            return Err(Errno::EPROTO);
        }
        match frame::reply_status(&rprefix)? {
            0 => Ok(n - PREFIX),
            _ => Err(Errno::EPROTO),
        }
    }
}
