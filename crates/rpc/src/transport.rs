//! A client's UCX connections to the servers of a cluster, and the `call` primitive.
//!
//! One `Transport` per thread (UCX workers are `!Send`). Each call posts an exact-tag receive
//! for its reply (`tag::reply(seq)`) *before* sending, so replies land directly in the
//! caller's buffer instead of UCX's unexpected-message queue. Everything a caller waits for
//! goes through [`Transport::wait`], which has a deadline: a dead server gives `EIO`, never a
//! hang, and the connection is dropped so the next call reconnects.

use crate::callbacks::{Callbacks, Route};
use crate::cluster_file;
use crate::credentials::Credentials;
use crate::progress::block_on;
use crate::UcxSettings;
use async_ucx::ucp::{Context, Endpoint, Worker};
use async_ucx::Error as UcxError;
use madfs_proto::frame::{self, Encoder, PREFIX};
use madfs_proto::{tag, Errno, Reply, Request, Welcome};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpStream};
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
    /// The connection word of every request (`frame::CONN_WORD`).
    secret: u64,
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

/// A plain-TCP connection (fallback transport): one request at a time, in order.
struct TcpConn {
    stream: RefCell<TcpStream>,
    welcome: Welcome,
    secret: u64,
}

/// What the transport talks over.
enum Net {
    /// UCX tag matching (normal case).
    Ucx {
        _context: Arc<Context>,
        worker: Rc<Worker>,
        conns: RefCell<Vec<Option<Conn>>>,
        /// Connections given up on (a deadline passed, or the server restarted), kept open:
        /// closing an endpoint whose peer is gone (error mode `none`) is undefined behaviour
        /// in UCX, and crashed a server ("no UCT EP in the worker hash of discarded UCT EPs").
        /// One per give-up; never freed (see `Drop`).
        retired: RefCell<Vec<Rc<Endpoint>>>,
    },
    /// Plain TCP: for processes that cannot use UCX (a `fork` child of a process that had UCX
    /// running: UCX's global async thread does not exist in the child).
    Tcp {
        conns: RefCell<Vec<Option<Rc<TcpConn>>>>,
    },
}

/// Connections from this thread to every server of a cluster.
pub struct Transport {
    net: Net,
    settings: UcxSettings,
    timeout: Cell<Duration>,
    addrs: RefCell<Vec<SocketAddr>>,
    cluster_file: Option<PathBuf>,
    seq: Cell<u32>,
    enc: RefCell<Encoder>,
    /// The cluster every server must belong to (id, number of servers), from the cluster
    /// file's identity record; checked against each welcome.
    cluster: Cell<Option<(u64, u32)>>,
    /// Name of the request encoded last (what a timeout names).
    last_op: Cell<&'static str>,
    /// What this transport proves to each server.
    creds: RefCell<Credentials>,
    /// When a request last went to each server (its connection's lease, see
    /// [`Transport::fresh`]).
    used: RefCell<Vec<Instant>>,
    /// Replicated clusters (docs/redundancy.md): the server that serves each replica set
    /// now (index = the set, which is the server placement names; identity at first), the
    /// replication factor the servers' welcomes told (≤ 1: not replicated, no routing) and
    /// the epoch of the cluster map the routes come from.
    route: RefCell<Vec<u32>>,
    replication: Cell<u32>,
    map_epoch: Cell<u64>,
    /// The slot owners of the last cluster map a failover learnt (empty: the initial
    /// layout): when they change (a server removed), a refusal is about keys that moved,
    /// which the caller learns ([`Transport::failover`]).
    owners_seen: RefCell<Vec<u8>>,
    /// Servers the cluster map has removed (`madfs-ctl remove`): members of no replica set,
    /// asked for nothing.
    removed: RefCell<Vec<u32>>,
    /// The replica set each one's connection is for: itself, or for a removed server's set
    /// the set that took its slots (the next member on the ring): a client whose layout
    /// still names the removed server reaches its keys there.
    alias: RefCell<Vec<u32>>,
    /// Calls go to the server named, never elsewhere ([`Transport::no_failover`]).
    fixed: Cell<bool>,
    /// Tag kind of the requests of [`Transport::call_sync`] (`REQUEST`; a server's copies:
    /// `REPLICATE`).
    kind: Cell<u64>,
    /// A connection was given up on or a connect timed out: UCX may hold a request on an
    /// endpoint of this worker that never completes, and destroying the worker would abort
    /// the process ("pending request … should have been flushed"): it is left to the exit.
    tainted: Cell<bool>,
    /// The client cache's callbacks (UCX only).
    callbacks: Callbacks,
}

/// Closes `ep` with force (error mode `peer` only: in mode `none` that is undefined
/// behaviour for a peer that is gone). A call given up on (its deadline, or the map replaced
/// its server) may leave a send under way: a rendezvous whose data UCX reads only when the
/// peer asks for it, from the caller's buffers and scatter list, which are gone by then. A
/// frozen peer that wakes up asks, and the process read freed memory (a server died of a
/// SIGSEGV in `ucp_dt_iov_gather` under `ucp_rndv_rtr_handler` when the secondary it had
/// given up on came back, `client/tests/history.rs`). Closing with force ends every send of
/// the endpoint at once (canceled), and a late request for one finds nothing.
fn force_close(ep: &Endpoint) {
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    // the first poll calls `ucp_ep_close_nb` in force mode; what is left completes inside
    // UCX (the request is freed with the future)
    let mut close = pin!(ep.close(true));
    let _ = close.as_mut().poll(&mut cx);
}

/// Deadline of a connect in a replicated cluster: a frozen server's listener takes the
/// connection and never answers; the map (or a retry) finds the set's primary sooner.
const REPLICATED_CONNECT: Duration = Duration::from_secs(2);

/// How long calls go on being sent to a replica set's new primary after a failover began
/// (at least twice): the servers take about 1.5 s to mark a dead server down (their
/// `--down-after-ms`), a failed leader twice that.
pub const FAILOVER_WINDOW: Duration = Duration::from_secs(6);

/// The tries of one call through failovers ([`FAILOVER_WINDOW`], counted from the first
/// failure: a call may have waited long for a dead server before the map showed it).
#[derive(Debug, Default)]
pub struct Retry {
    failed_at: Option<Instant>,
    tries: u32,
}

impl Retry {
    /// May the call be sent once more?
    pub fn again(&mut self) -> bool {
        self.tries += 1;
        let since = *self.failed_at.get_or_insert_with(Instant::now);
        self.tries <= 2 || since.elapsed() < FAILOVER_WINDOW
    }
}
/// Largest reply to `Request::Map`: the states and, once slots moved, every slot's owner
/// (8 KiB).
pub const MAP_REPLY: usize = 16 << 10;
/// Deadline of asking another server for the cluster map during a failover.
const MAP_TIMEOUT: Duration = Duration::from_millis(1000);
/// How often a call waiting in a replicated cluster asks for the cluster map.
const MAP_WATCH: Duration = Duration::from_millis(400);

/// Kind byte of a TCP message carrying a [`madfs_proto::Hello`] (requests are 1, fsyncs 2).
const TCP_HELLO: u8 = 3;

/// Writes `[u32 LE length][kind][pieces…]` (requests) on a TCP stream.
fn tcp_send(s: &mut TcpStream, kind: u8, pieces: &[&[u8]]) -> std::io::Result<()> {
    let len: usize = pieces.iter().map(|p| p.len()).sum::<usize>() + 1;
    let mut head = [0u8; 5];
    head[..4].copy_from_slice(&(len as u32).to_le_bytes());
    head[4] = kind;
    let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(pieces.len() + 1);
    iov.push(IoSlice::new(&head));
    iov.extend(
        pieces
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| IoSlice::new(p)),
    );
    write_all_vectored(s, &mut iov)
}

fn write_all_vectored(s: &mut TcpStream, mut iov: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !iov.is_empty() {
        let n = s.write_vectored(iov)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut iov, n);
    }
    Ok(())
}

/// Reads one `[u32 LE length][payload]` message; returns the payload length, which may exceed
/// `out` (then only `out.len()` bytes are kept and the rest is discarded).
fn tcp_recv(s: &mut TcpStream, out: &mut [u8]) -> std::io::Result<usize> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    let keep = len.min(out.len());
    s.read_exact(&mut out[..keep])?;
    if len > keep {
        std::io::copy(
            &mut (&mut *s).take((len - keep) as u64),
            &mut std::io::sink(),
        )?;
    }
    Ok(len)
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

/// Held while a transport of this process creates its UCX worker, connects, or says goodbye
/// and destroys its worker. UCX 1.13 keys its asynchronous event handlers by fd number, one
/// table for the process: an event that arrives while a worker is busy is queued as "missed"
/// by fd, and if that fd is closed (endpoint closed) and the number reused by another
/// thread's worker before the first worker polls its queue, UCX aborts
/// (`__ucs_async_poll_missed`: "Assertion `handler->async == async' failed"; ≈ 1 % of rounds
/// of 32 threads coming and going over TCP). Sockets are created while connecting and closed
/// while dropping a transport, so doing those one thread at a time keeps a number from being
/// reused while a dying worker still polls.
static LIFECYCLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lifecycle() -> std::sync::MutexGuard<'static, ()> {
    LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner())
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
        let worker = {
            let _one = lifecycle();
            context
                .create_worker()
                .map_err(|e| std::io::Error::other(format!("UCX worker: {e}")))?
        };
        let n = addrs.len();
        let net = Net::Ucx {
            _context: context,
            worker,
            conns: RefCell::new(vec![None; n]),
            retired: RefCell::new(vec![]),
        };
        Ok(Self::with_net(net, addrs, cluster_file, settings))
    }

    /// A transport over plain TCP to the servers' TCP ports `addrs` (no UCX at all).
    pub fn new_tcp(addrs: Vec<SocketAddr>, cluster_file: Option<PathBuf>) -> Transport {
        let n = addrs.len();
        let net = Net::Tcp {
            conns: RefCell::new((0..n).map(|_| None).collect()),
        };
        Self::with_net(net, addrs, cluster_file, UcxSettings::default())
    }

    fn with_net(
        net: Net,
        addrs: Vec<SocketAddr>,
        cluster_file: Option<PathBuf>,
        settings: UcxSettings,
    ) -> Transport {
        let n = addrs.len();
        Transport {
            net,
            settings,
            timeout: Cell::new(DEFAULT_TIMEOUT),
            addrs: RefCell::new(addrs),
            cluster_file,
            seq: Cell::new(0),
            enc: RefCell::new(Encoder::default()),
            cluster: Cell::new(None),
            last_op: Cell::new("connect"),
            creds: RefCell::new(Credentials::Insecure),
            used: RefCell::new(vec![Instant::now(); n]),
            route: RefCell::new((0..n as u32).collect()),
            replication: Cell::new(0),
            map_epoch: Cell::new(0),
            owners_seen: RefCell::default(),
            removed: RefCell::default(),
            alias: RefCell::default(),
            fixed: Cell::new(false),
            tainted: Cell::new(false),
            kind: Cell::new(tag::REQUEST),
            callbacks: Callbacks::default(),
        }
    }

    /// This process keeps answers as lease holder `holder` (told in each hello from now on;
    /// UCX only: a TCP connection gets no leases), `handler` forgetting what a server's
    /// callback names.
    pub fn set_holder(&self, holder: u64, handler: crate::callbacks::Handler) {
        if !self.is_tcp() {
            let cluster = self.cluster.get().map_or(0, |(id, _)| id);
            self.callbacks.set(holder, cluster, handler);
        }
    }

    /// This transport's connections take every callback of the process's holder (made in
    /// a hello from now on: call it before the first request).
    pub fn listen(&self) {
        self.callbacks.listen();
    }

    /// Takes the callbacks waiting for this transport (the worker progressed once first)
    /// and acknowledges them. Returns how many were taken.
    pub fn take_callbacks(&self) -> usize {
        self.callbacks_now(true)
    }

    fn callbacks_now(&self, progress: bool) -> usize {
        let Net::Ucx { worker, conns, .. } = &self.net else {
            return 0;
        };
        self.callbacks.take(worker, progress, |server| {
            // (the set a server's connection is kept under: unreplicated, its own id)
            let c = conns.borrow().get(server as usize)?.clone()?;
            Some(Route {
                ep: c.ep.clone(),
                conn: c.welcome.conn,
                secret: c.secret,
            })
        })
    }

    /// What to prove to each server when connecting (default: nothing, which only an
    /// insecure cluster accepts).
    pub fn set_credentials(&self, creds: Credentials) {
        *self.creds.borrow_mut() = creds;
    }

    /// Serve only servers of cluster `id` with `servers` servers (the cluster file's identity
    /// record): a welcome from any other is refused with `EPROTO`, and logged with the
    /// reason. `replication` (the record's): from 2, calls are routed to each replica set's
    /// primary ([`Transport::failover`]).
    pub fn expect_cluster(&self, id: u64, servers: u32, replication: u32) {
        self.cluster.set(Some((id, servers)));
        if !self.fixed.get() {
            self.replication.set(replication);
        }
    }

    /// Does server `server`'s welcome belong to the expected protocol and cluster?
    fn check_welcome(&self, server: u32, w: &Welcome) -> Result<(), Errno> {
        let addr = self.addrs.borrow().get(server as usize).copied();
        let why = if w.server != server {
            Some(format!("it says it is server {}", w.server))
        } else if w.protocol != madfs_proto::PROTOCOL_VERSION {
            Some(format!(
                "it speaks protocol {}, this client {} (upgrade clients and servers together)",
                w.protocol,
                madfs_proto::PROTOCOL_VERSION
            ))
        } else {
            match self.cluster.get() {
                Some((id, _)) if id != w.cluster => Some(format!(
                    "it belongs to cluster {:016x}, the cluster file names {id:016x} (a stale cluster file?)",
                    w.cluster
                )),
                Some((_, n)) if n != w.servers => Some(format!(
                    "its cluster has {} servers, the cluster file {n}",
                    w.servers
                )),
                _ => None,
            }
        };
        match why {
            None => Ok(()),
            Some(why) => {
                tracing::error!("madfs: refusing server {server} at {addr:?}: {why}");
                Err(Errno::EPROTO)
            }
        }
    }

    /// Is this the plain-TCP fallback transport?
    pub fn is_tcp(&self) -> bool {
        matches!(self.net, Net::Tcp { .. })
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

    /// The UCX worker of this transport (None over TCP).
    pub fn worker(&self) -> Option<&Rc<Worker>> {
        match &self.net {
            Net::Ucx { worker, .. } => Some(worker),
            Net::Tcp { .. } => None,
        }
    }

    /// What server `server` said when we connected (connects if needed).
    pub fn welcome(&self, server: u32) -> Result<Welcome, Errno> {
        match &self.net {
            // an open connection's, as it is: asking is no request (see `fresh`)
            Net::Ucx { conns, .. } => match cached(conns, server as usize)? {
                Some(c) => Ok(c.welcome),
                None => Ok(self.conn(server)?.welcome),
            },
            Net::Tcp { conns } => match cached(conns, server as usize)? {
                Some(c) => Ok(c.welcome),
                None => Ok(self.tcp_conn(server)?.welcome),
            },
        }
    }

    /// The deadline of a connect: the call deadline, shorter in a replicated cluster.
    fn connect_timeout(&self) -> Duration {
        if self.replicated() {
            self.timeout.get().min(REPLICATED_CONNECT)
        } else {
            self.timeout.get()
        }
    }

    /// The server that serves replica set `set` now.
    fn serving(&self, set: u32) -> u32 {
        self.route
            .borrow()
            .get(set as usize)
            .copied()
            .unwrap_or(set)
    }

    /// The replica set a connection for `set` is made for: `set`, or for a removed server's
    /// the set that took its slots.
    fn alias(&self, set: u32) -> u32 {
        self.alias
            .borrow()
            .get(set as usize)
            .copied()
            .unwrap_or(set)
    }

    /// Is replica set `set` served by another server than its first member (a failover)?
    pub fn routed_elsewhere(&self, set: u32) -> bool {
        self.serving(set) != set
    }

    /// Calls go to the server named even in a replicated cluster (a primary's copies to
    /// its secondaries): no routing by the cluster map, no failover.
    pub fn no_failover(&self) {
        self.fixed.set(true);
        self.replication.set(0);
    }

    /// [`Transport::call_sync`] sends its requests with tag kind `kind` (a server's copies:
    /// `tag::REPLICATE`).
    pub fn set_request_kind(&self, kind: u64) {
        self.kind.set(kind);
    }

    /// Does the cluster keep copies (R ≥ 2: calls may be sent again to another server)?
    pub fn replicated(&self) -> bool {
        self.replication.get() >= 2
    }

    fn learn_replication(&self, w: &Welcome) {
        if !self.fixed.get() && w.replication > self.replication.get() {
            self.replication.set(w.replication);
        }
    }

    /// Replicated clusters: after error `e` (EREMCHG: not the primary; EIO: no answer) from
    /// the servers of replica sets `sets`, learns the cluster map from another server and
    /// routes every replica set to its primary there (the first member that is up), giving
    /// up the connections whose server changed. True if a call is worth sending again: the
    /// map moved, or the map has not moved yet (then after a pause, for the servers to
    /// notice). False when the map's slot owners changed (a server was removed): the keys
    /// moved to another replica set, which the caller learns (`Client::relayout`).
    pub fn failover(&self, sets: &[u32], e: Errno) -> bool {
        let r = self.replication.get();
        if r < 2 || !matches!(e, Errno::EREMCHG | Errno::EIO) {
            return false;
        }
        let n = self.servers();
        let failed: Vec<u32> = sets.iter().map(|s| self.serving(*s)).collect();
        let saved = self.timeout.replace(self.timeout.get().min(MAP_TIMEOUT));
        let mut map = None;
        // ask the servers after the failed ones first (the map is everywhere), then those:
        // `sets` may not name the server that failed (a file's size lives with its name),
        // and one asked may be the dead one
        let first = sets.first().copied().unwrap_or(0);
        let (mut ask, then): (Vec<u32>, Vec<u32>) = (1..=n)
            .map(|k| (first + k) % n)
            .partition(|s| !failed.contains(&self.serving(*s)));
        ask.extend(then);
        for s in ask {
            let got = self.call_sync_once(s, &Request::Map, &[], MAP_REPLY);
            if let Ok(raw) = got {
                if let Ok((
                    Reply::Map {
                        epoch,
                        states,
                        owners,
                        ..
                    },
                    _,
                )) = raw.decode()
                {
                    if states.len() == n as usize {
                        map = Some((epoch, states, owners.to_vec()));
                        break;
                    }
                }
            }
        }
        self.timeout.set(saved);
        let asked = map.is_some();
        let (moved, relaid) = match map {
            Some((epoch, states, owners)) => {
                let moved = self.learn_map(epoch, &states);
                // (a refusal by a primary the map still names: about keys, if they moved)
                let relaid = !moved && e == Errno::EREMCHG && *self.owners_seen.borrow() != owners;
                if relaid {
                    *self.owners_seen.borrow_mut() = owners;
                }
                (moved, relaid)
            }
            None => (false, false),
        };
        if relaid {
            tracing::debug!("madfs: failover of replica sets {sets:?}: slots moved");
            return false;
        }
        tracing::debug!(
            "madfs: failover of replica sets {sets:?} after {e:?} in {}: map {}",
            self.last_op.get(),
            if moved {
                "moved"
            } else if asked {
                "unchanged"
            } else {
                "unknown"
            }
        );
        if !moved {
            // the servers have not marked anything yet: give them a moment, and connect
            // again (a server restarted within `--down-after-ms` stays up in the map, and a
            // connection to its previous run answers nothing ever again); calls made in
            // parallel (`sets` empty) do not say which failed: every connection goes
            std::thread::sleep(Duration::from_millis(200));
            let every: Vec<u32> = (0..n).collect();
            for s in if sets.is_empty() { &every[..] } else { sets } {
                self.invalidate(*s);
            }
        }
        true
    }

    /// Routes every replica set to its primary in cluster map `epoch` (each server's state:
    /// 0 up, 1 down, 2 rejoining, 3 removed), if it is newer than the map known; gives up the
    /// connections whose server changed. True if the map was newer.
    pub fn learn_map(&self, epoch: u64, states: &[u8]) -> bool {
        let r = self.replication.get();
        let n = self.servers();
        if r < 2 || epoch <= self.map_epoch.get() || states.len() != n as usize {
            return false;
        }
        self.map_epoch.set(epoch);
        *self.removed.borrow_mut() = (0..n).filter(|s| states[*s as usize] == 3).collect();
        let mut changed = vec![];
        {
            let mut route = self.route.borrow_mut();
            let mut alias = self.alias.borrow_mut();
            let had = alias.len() as u32;
            alias.extend(had..route.len() as u32);
            for (set, (to, named)) in route.iter_mut().zip(alias.iter_mut()).enumerate() {
                let set = set as u32;
                let up = |s: &u32| states[*s as usize] == 0;
                // (a removed server, 3, is no member of any set any more; its slots are
                // the next member's)
                let member = |s: u32| states[s as usize] != 3;
                let first = if member(set) {
                    set
                } else {
                    madfs_placement::replicas_among(set, n, 2, member)
                        .nth(1)
                        .unwrap_or(set)
                };
                let primary = madfs_placement::replicas_among(first, n, r, member).find(up);
                if let Some(p) = primary.filter(|p| *to != *p || *named != first) {
                    *to = p;
                    *named = first;
                    changed.push(set);
                }
            }
        }
        for set in &changed {
            self.invalidate(*set);
        }
        if !changed.is_empty() {
            tracing::info!(
                "madfs: cluster map epoch {epoch}: replica sets {changed:?} served elsewhere"
            );
        }
        true
    }

    /// Has the cluster map (as learnt) removed server `s`? Such a server is asked nothing,
    /// not even for its part of a listing (it owns no slot).
    pub fn removed(&self, s: u32) -> bool {
        self.removed.borrow().contains(&s)
    }

    /// Runs `f` (calls to the servers of replica sets `sets`; empty: any) again after a
    /// failover, as [`Transport::call_sync`] does for one call: for calls made in parallel.
    pub fn failing_over<T>(
        &self,
        sets: &[u32],
        mut f: impl FnMut() -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let mut retry = Retry::default();
        loop {
            match f() {
                Err(e) if self.replicated() && retry.again() && self.failover(sets, e) => {}
                r => return r,
            }
        }
    }

    fn next_seq(&self) -> u32 {
        let s = self.seq.get().wrapping_add(1);
        self.seq.set(s);
        s
    }

    /// Gives the connection to `server` up; the next call reconnects. (A UCX endpoint is
    /// kept, not freed: see `Net::Ucx::retired`. In error mode `peer` it is closed with
    /// force first, which ends the sends still under way on it: see [`force_close`].)
    pub fn invalidate(&self, server: u32) {
        match &self.net {
            Net::Ucx { conns, retired, .. } => {
                let old = conns
                    .borrow_mut()
                    .get_mut(server as usize)
                    .and_then(Option::take);
                if let Some(old) = old {
                    self.give_up(retired, old.ep);
                }
            }
            Net::Tcp { conns } => {
                if let Some(c) = conns.borrow_mut().get_mut(server as usize) {
                    *c = None;
                }
            }
        }
    }

    /// Keeps `ep`, the endpoint of a UCX connection given up on, in `retired` (closed with force first in
    /// error mode `peer`). Never dropped: dropping closes the endpoint with force, undefined
    /// behaviour in mode `none`; the test binary of `client/tests/security.rs` aborted in
    /// UCX (discarded-endpoint assertions, heap corruption) 3 runs in 8 when a refused
    /// hello's endpoint was dropped while the server closed its side.
    fn give_up(&self, retired: &RefCell<Vec<Rc<Endpoint>>>, ep: Rc<Endpoint>) {
        self.tainted.set(true);
        if self.settings.err_mode == async_ucx::ucp::ErrorMode::Peer {
            let _one = lifecycle();
            force_close(&ep);
        }
        retired.borrow_mut().push(ep);
    }

    /// Re-reads the cluster file (a restarted server may listen elsewhere; servers that
    /// joined are added).
    fn refresh_addrs(&self) {
        if let Some(path) = &self.cluster_file {
            if let Ok((identity, entries)) = cluster_file::read(path) {
                let same = self.cluster.get().is_none_or(|(id, _)| id == identity.id.0);
                if same && entries.len() >= self.addrs.borrow().len() {
                    let tcp = self.is_tcp();
                    let new: Option<Vec<SocketAddr>> = entries
                        .iter()
                        .map(|e| if tcp { e.tcp } else { Some(e.ucx) })
                        .collect();
                    if let Some(new) = new {
                        self.grow(new.len());
                        *self.addrs.borrow_mut() = new;
                    }
                }
            }
        }
    }

    /// Learns the addresses of servers up to id `n - 1` from the cluster file, if this
    /// transport knows fewer (servers that joined since it was made: a layout names them).
    /// False if the file does not list them.
    pub fn learn_servers(&self, n: u32) -> bool {
        if self.servers() < n {
            self.refresh_addrs();
        }
        self.servers() >= n
    }

    /// Room for `n` servers in the per-server tables (none forgotten).
    fn grow(&self, n: usize) {
        let had = self.addrs.borrow().len();
        if n <= had {
            return;
        }
        match &self.net {
            Net::Ucx { conns, .. } => conns.borrow_mut().resize(n, None),
            Net::Tcp { conns } => conns.borrow_mut().resize(n, None),
        }
        self.used.borrow_mut().resize(n, Instant::now());
        self.route.borrow_mut().extend(had as u32..n as u32);
    }

    fn tcp_conn(&self, server: u32) -> Result<Rc<TcpConn>, Errno> {
        let Net::Tcp { conns } = &self.net else {
            return Err(Errno::EINVAL);
        };
        let idx = server as usize;
        if let Some(c) = cached(conns, idx)? {
            if self.fresh(idx, c.welcome.lease_ms) {
                return Ok(c);
            }
            // idle for half its lease: a new connection before the server closes this one
            conns.borrow_mut()[idx] = None;
        }
        self.refresh_addrs();
        let (set, server) = (self.alias(server), self.serving(server));
        let addr = self.addrs.borrow()[server as usize];
        let t = self.timeout.get();
        let mut s = TcpStream::connect_timeout(&addr, t).map_err(|_| Errno::EIO)?;
        let _ = s.set_nodelay(true);
        s.set_read_timeout(Some(t)).map_err(|_| Errno::EIO)?;
        s.set_write_timeout(Some(t)).map_err(|_| Errno::EIO)?;
        let mut buf = [0u8; 512];
        let op = self.last_op.replace("connect");
        let n = tcp_recv(&mut s, &mut buf).map_err(|e| self.tcp_failed(server, e));
        self.last_op.set(op);
        let n = n?;
        let welcome: Welcome =
            flexbuffers::from_slice(&buf[..n.min(buf.len())]).map_err(|_| Errno::EPROTO)?;
        self.check_welcome(server, &welcome)?;
        let creds = self.creds.borrow().clone();
        // (no leases over TCP: a server cannot call a TCP client back)
        let pending = creds.hello(welcome.cluster, server, &welcome, Some(set), (0, false))?;
        self.learn_replication(&welcome);
        tcp_send(&mut s, TCP_HELLO, &[pending.bytes()]).map_err(|_| Errno::EIO)?;
        let n = tcp_recv(&mut s, &mut buf).map_err(|_| Errno::EIO)?;
        let secret = creds.admitted_by(
            server,
            &pending,
            &buf[..n.min(buf.len())],
            self.servers_uid(),
        )?;
        let c = Rc::new(TcpConn {
            stream: RefCell::new(s),
            welcome,
            secret,
        });
        conns.borrow_mut()[idx] = Some(c.clone());
        self.touch(idx);
        Ok(c)
    }

    fn conn(&self, server: u32) -> Result<Conn, Errno> {
        let Net::Ucx {
            conns,
            worker,
            retired,
            ..
        } = &self.net
        else {
            return Err(Errno::EINVAL);
        };
        let idx = server as usize;
        if let Some(c) = cached(conns, idx)? {
            if self.fresh(idx, c.welcome.lease_ms) {
                return Ok(c);
            }
            // idle for half its lease: a new connection before the server closes this one
            self.retire(idx);
        }
        self.refresh_addrs();
        // the connection for replica set `server` goes to the server that serves it now
        let (set, server) = (self.alias(server), self.serving(server));
        let addr = self.addrs.borrow()[server as usize];
        let deadline = Instant::now() + self.connect_timeout();
        let worker = worker.clone();
        let mode = self.settings.err_mode;
        // the endpoint, once there, lives outside the future: a connect given up on (its
        // deadline, a failed welcome, a refused hello) keeps it (see `Transport::give_up`)
        let made: RefCell<Option<Rc<Endpoint>>> = RefCell::new(None);
        let fut = async {
            let mut buf = Vec::<u8>::with_capacity(512);
            // a welcome already queued is a late one, for a connect given up on before:
            // taken off and thrown away (at most a few)
            for _ in 0..16 {
                let mut stale = [MaybeUninit::<u8>::uninit(); 512];
                let mut recv = pin!(worker.tag_recv(tag::welcome(server), &mut stale));
                match futures::poll!(recv.as_mut()) {
                    Poll::Ready(_) => continue,
                    Poll::Pending => break,
                }
            }
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
                let ep = Rc::new(ep);
                *made.borrow_mut() = Some(ep.clone());
                let n = recv.await.map_err(ucx_errno)?;
                (ep, n)
            };
            // SAFETY: UCX wrote `n` bytes into the spare capacity.
            unsafe { buf.set_len(n) };
            let welcome: Welcome = flexbuffers::from_slice(&buf).map_err(|_| Errno::EPROTO)?;
            Ok::<_, Errno>(Conn {
                ep,
                welcome,
                secret: 0,
            })
        };
        let timed_out = || {
            tracing::warn!(
                "madfs: connect to server {server} ({addr}) timed out after {:?}",
                self.connect_timeout()
            );
            self.tainted.set(true);
            Errno::EIO
        };
        let made_conn = {
            let _one = lifecycle();
            block_on(worker_ref(&self.net), fut, self.settings.spin, deadline)
        }
        .ok_or_else(timed_out)
        .and_then(|r| r);
        let mut conn = match made_conn {
            Ok(c) => c,
            Err(e) => {
                if let Some(ep) = made.take() {
                    self.give_up(retired, ep);
                }
                return Err(e);
            }
        };
        drop(made.take());
        match self.admit(&mut conn, server, set, deadline) {
            Ok(()) => {
                conns.borrow_mut()[idx] = Some(conn.clone());
                self.touch(idx);
                Ok(conn)
            }
            Err(e) => {
                self.give_up(retired, conn.ep);
                Err(e)
            }
        }
    }

    /// Proves who this process is on the new connection `conn` to `server` (for replica set
    /// `set`) and takes the server's answer, the connection's secret.
    fn admit(
        &self,
        conn: &mut Conn,
        server: u32,
        set: u32,
        deadline: Instant,
    ) -> Result<(), Errno> {
        let timed_out = || {
            tracing::warn!(
                "madfs: hello to server {server} unanswered after {:?}",
                self.connect_timeout()
            );
            self.tainted.set(true);
            Errno::EIO
        };
        self.check_welcome(server, &conn.welcome)?;
        // prove who we are; the server answers with the connection's secret
        let creds = self.creds.borrow().clone();
        let pending = creds.hello(
            conn.welcome.cluster,
            server,
            &conn.welcome,
            Some(set),
            self.callbacks.holder(),
        )?;
        self.learn_replication(&conn.welcome);
        let (ep, w) = (conn.ep.clone(), conn.welcome);
        let worker2 = worker_ref(&self.net);
        let answer = async {
            let mut buf = Vec::<u8>::with_capacity(4096);
            let n = {
                let mut recv =
                    pin!(worker2.tag_recv(tag::admit(server, w.conn), buf.spare_capacity_mut()));
                if let Poll::Ready(r) = futures::poll!(recv.as_mut()) {
                    r.map_err(ucx_errno)?;
                    return Err(Errno::EPROTO);
                }
                ep.tag_send(tag::hello(w.conn), pending.bytes())
                    .await
                    .map_err(ucx_errno)?;
                recv.await.map_err(ucx_errno)?
            };
            // SAFETY: UCX wrote `n` bytes into the spare capacity.
            unsafe { buf.set_len(n) };
            Ok::<_, Errno>(buf)
        };
        let answer = block_on(worker_ref(&self.net), answer, self.settings.spin, deadline)
            .ok_or_else(timed_out)??;
        conn.secret = creds.admitted_by(server, &pending, &answer, self.servers_uid())?;
        Ok(())
    }

    /// May the connection to server `idx`, whose lease is `lease_ms`, still be used (if so,
    /// the request about to go on it is noted)? A server
    /// closes a connection that sent no request for its lease (dead and frozen clients are
    /// noticed so, whatever UCX's error mode), and tells nobody: a client that left it idle
    /// for half of that takes a new one instead (a request on the old one would go
    /// unanswered until the call's deadline).
    fn fresh(&self, idx: usize, lease_ms: u32) -> bool {
        if lease_ms == 0 {
            return true;
        }
        // one clock read per call: the call this check is for is the request noted
        let now = Instant::now();
        let mut used = self.used.borrow_mut();
        let Some(t) = used.get_mut(idx) else {
            return false;
        };
        let ok = now.saturating_duration_since(*t) < Duration::from_millis(lease_ms as u64 / 2);
        if ok {
            *t = now;
        }
        ok
    }

    /// Notes a request to server `idx` (see [`Transport::fresh`]).
    fn touch(&self, idx: usize) {
        if let Some(t) = self.used.borrow_mut().get_mut(idx) {
            *t = Instant::now();
        }
    }

    /// Says goodbye on the UCX connection to server `idx` and closes it (as [`Drop`] does,
    /// ≤ 100 ms), if it is still open: the server may have closed it already.
    fn retire(&self, idx: usize) {
        let Net::Ucx { conns, worker, .. } = &self.net else {
            return;
        };
        let Some(c) = conns.borrow_mut().get_mut(idx).and_then(Option::take) else {
            return;
        };
        let _one = lifecycle();
        let (prefix, hdr) = self.encode(&Request::Bye);
        let seq = self.next_seq();
        let fut = async {
            let h16 = head16(&c.secret.to_le_bytes(), &prefix);
            let iov = [IoSlice::new(&h16), IoSlice::new(&hdr)];
            let _ =
                c.ep.tag_send_vectored(tag::request(tag::REQUEST, c.welcome.conn, seq), &iov)
                    .await;
            let _ = c.ep.close(false).await;
        };
        let _ = block_on(
            worker,
            fut,
            self.settings.spin,
            Instant::now() + Duration::from_millis(100),
        );
    }

    /// The user the servers run as, if it is not root: the owner of the cluster file, which
    /// the servers write (a MUNGE server proves itself with a credential of root or of it).
    fn servers_uid(&self) -> Option<u32> {
        use std::os::unix::fs::MetadataExt;
        let f = self.cluster_file.as_ref()?;
        std::fs::metadata(f)
            .ok()
            .map(|m| m.uid())
            .filter(|u| *u != 0)
    }

    /// Connects to `server` now if not connected yet.
    pub fn ensure(&self, server: u32) -> Result<(), Errno> {
        match &self.net {
            Net::Ucx { .. } => self.conn(server).map(|_| ()),
            Net::Tcp { .. } => self.tcp_conn(server).map(|_| ()),
        }
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
        let done = match &self.net {
            // a replicated cluster: the call is given up as soon as the cluster map shows
            // that a server it waits for was replaced (dead or frozen), not at its deadline
            Net::Ucx { worker, .. } if self.replicated() && !involved.is_empty() => {
                let asked = self.map_server(involved);
                let mut fut = pin!(fut);
                let mut watch = pin!(self.watch_map(involved, asked));
                let both = std::future::poll_fn(|cx| {
                    if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                        return Poll::Ready(v);
                    }
                    watch.as_mut().poll(cx).map(Err)
                });
                block_on(worker, both, self.settings.spin, deadline)
            }
            // callbacks that come while the call waits are taken (a server may wait for
            // this process's acknowledgement before it answers anyone, this call included)
            Net::Ucx { worker, .. } => {
                let mut fut = pin!(fut);
                let both = std::future::poll_fn(|cx| {
                    if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                        return Poll::Ready(v);
                    }
                    self.callbacks_now(false);
                    Poll::Pending
                });
                block_on(worker, both, self.settings.spin, deadline)
            }
            // TCP calls do their (blocking, time-limited) IO inside their first poll
            Net::Tcp { .. } => poll_to_end(fut),
        };
        match done {
            Some(r) => {
                if matches!(r.as_ref().err(), Some(&Errno::EIO | &Errno::EREMCHG)) {
                    for s in involved {
                        self.invalidate(*s);
                    }
                }
                r
            }
            None => {
                let addrs = self.addrs.borrow();
                let at: Vec<String> = involved
                    .iter()
                    .map(|s| self.serving(*s))
                    .map(|s| match addrs.get(s as usize) {
                        Some(a) => format!("{s} ({a})"),
                        None => s.to_string(),
                    })
                    .collect();
                tracing::warn!(
                    "madfs: {} on server {} timed out after {:?}",
                    self.last_op.get(),
                    at.join(", "),
                    self.timeout.get()
                );
                for s in involved {
                    self.invalidate(*s);
                }
                Err(Errno::EIO)
            }
        }
    }

    /// A replica set whose server serves none of `involved`, already connected (to ask for
    /// the map while calls to `involved` wait; `None`: none is).
    fn map_server(&self, involved: &[u32]) -> Option<u32> {
        let busy: Vec<u32> = involved.iter().map(|s| self.serving(*s)).collect();
        let n = self.servers();
        let first = involved.first().copied().unwrap_or(0);
        let others: Vec<u32> = (1..=n)
            .map(|k| (first + k) % n)
            .filter(|s| !busy.contains(&self.serving(*s)))
            .collect();
        if let Some(s) = others.iter().find(|s| self.connected(**s)) {
            return Some(*s);
        }
        // none yet (a program that so far talked to these servers only): connect to one,
        // else a call waiting on a dead server would wait for its deadline
        others.into_iter().find(|s| self.ensure(*s).is_ok())
    }

    /// Is there a connection for replica set `set` (a call on it would not connect first)?
    fn connected(&self, set: u32) -> bool {
        match &self.net {
            Net::Ucx { conns, .. } => matches!(cached(conns, set as usize), Ok(Some(_))),
            Net::Tcp { conns } => matches!(cached(conns, set as usize), Ok(Some(_))),
        }
    }

    /// Resolves with EREMCHG once the cluster map, asked of replica set `asked`'s server
    /// every [`MAP_WATCH`], has a server serving one of `involved` down or rejoining; never
    /// otherwise.
    async fn watch_map(&self, involved: &[u32], asked: Option<u32>) -> Errno {
        let serving: Vec<u32> = involved.iter().map(|s| self.serving(*s)).collect();
        let Some(asked) = asked else {
            return std::future::pending().await;
        };
        loop {
            until(Instant::now() + MAP_WATCH).await;
            let op = self.last_op.get();
            let map = std::future::poll_fn({
                let mut call =
                    Box::pin(self.call(asked, tag::REQUEST, &Request::Map, &[], MAP_REPLY));
                let give_up = Instant::now() + MAP_TIMEOUT;
                move |cx| match call.as_mut().poll(cx) {
                    Poll::Ready(r) => Poll::Ready(r.ok()),
                    Poll::Pending if Instant::now() >= give_up => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            self.last_op.set(op);
            let Some(raw) = map else {
                continue;
            };
            if let Ok((Reply::Map { epoch, states, .. }, _)) = raw.decode() {
                let gone = serving
                    .iter()
                    .any(|s| states.get(*s as usize).is_some_and(|st| *st != 0));
                if gone && epoch > self.map_epoch.get() {
                    return Errno::EREMCHG;
                }
            }
        }
    }

    /// One synchronous call: connect if needed, send, wait for the reply. In a replicated
    /// cluster, a call that found no primary (EREMCHG, or no answer: EIO) goes to the
    /// replica set's new primary ([`Transport::failover`]).
    pub fn call_sync(
        &self,
        server: u32,
        req: &Request<'_>,
        bulk: &[u8],
        reply_cap: usize,
    ) -> Result<RawReply, Errno> {
        let mut retry = Retry::default();
        loop {
            let r = self.call_sync_once(server, req, bulk, reply_cap);
            match self.failed(&r) {
                Some(e) if retry.again() && self.failover(&[server], e) => {}
                _ => return r,
            }
        }
    }

    /// The errno of `r` that a failover may cure (replicated clusters only).
    pub fn failed(&self, r: &Result<RawReply, Errno>) -> Option<Errno> {
        if !self.replicated() {
            return None;
        }
        match r {
            // no answer
            Err(e) => (*e == Errno::EIO || *e == Errno::EREMCHG).then_some(*e),
            // an answer: only "not the primary" (a server's own EIO is its answer)
            Ok(raw) => {
                let prefix: &[u8; PREFIX] = raw.buf.get(..PREFIX)?.try_into().ok()?;
                let e = frame::reply_status(prefix).err()?;
                (e == Errno::EREMCHG).then_some(e)
            }
        }
    }

    fn call_sync_once(
        &self,
        server: u32,
        req: &Request<'_>,
        bulk: &[u8],
        reply_cap: usize,
    ) -> Result<RawReply, Errno> {
        self.ensure(server)?;
        self.wait(
            &[server],
            self.call(server, self.kind.get(), req, bulk, reply_cap),
        )
    }

    /// [`Self::call_sync`] that runs `meanwhile` while the request is on its way: the first
    /// poll posts the receive and sends the request, then `meanwhile` runs, then the reply
    /// is waited for. Local work the caller needs anyway (the preload's kernel fd for an
    /// `open`) so costs no time of its own. `meanwhile` runs whatever happens to the call
    /// (first, if the server cannot be reached); it must not use this transport, and must
    /// not panic: unwinding would drop the call while its receive is still posted.
    pub fn call_sync_overlapped<R>(
        &self,
        server: u32,
        req: &Request<'_>,
        bulk: &[u8],
        reply_cap: usize,
        meanwhile: impl FnOnce() -> R,
    ) -> (Result<RawReply, Errno>, R) {
        if let Err(e) = self.ensure(server) {
            let r = meanwhile();
            return match self.failed(&Err(e)) {
                Some(e) if self.failover(&[server], e) => {
                    (self.call_sync(server, req, bulk, reply_cap), r)
                }
                _ => (Err(e), r),
            };
        }
        let res = {
            let mut fut = pin!(self.call(server, tag::REQUEST, req, bulk, reply_cap));
            let waker = futures::task::noop_waker();
            let first = fut
                .as_mut()
                .poll(&mut std::task::Context::from_waker(&waker));
            let r = meanwhile();
            let res = match first {
                Poll::Ready(done) => self.wait(&[server], std::future::ready(done)),
                Poll::Pending => self.wait(&[server], fut),
            };
            (res, r)
        };
        match self.failed(&res.0) {
            Some(e) if self.failover(&[server], e) => {
                (self.call_sync(server, req, bulk, reply_cap), res.1)
            }
            _ => res,
        }
    }

    fn encode(&self, req: &Request<'_>) -> ([u8; PREFIX], Vec<u8>) {
        self.last_op.set(req.name());
        let mut enc = self.enc.borrow_mut();
        let (p, h) = enc.request(req);
        (p, h.to_vec())
    }

    fn endpoint(&self, server: u32) -> Result<(Rc<Endpoint>, u32, u64), Errno> {
        let Net::Ucx { conns, .. } = &self.net else {
            return Err(Errno::EINVAL);
        };
        match conns.borrow().get(server as usize) {
            Some(Some(c)) => Ok((c.ep.clone(), c.welcome.conn, c.secret)),
            _ => Err(Errno::ENOTCONN),
        }
    }

    /// A TCP call to `server` failed with `e`: named in the log (a timeout at warn level, as
    /// on UCX); the call fails with EIO and the connection is given up on.
    fn tcp_failed(&self, server: u32, e: std::io::Error) -> Errno {
        let addr = self.addrs.borrow().get(server as usize).copied();
        let at = addr.map_or(String::new(), |a| format!(" ({a})"));
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            tracing::warn!(
                "madfs: {} on server {server}{at} timed out after {:?}",
                self.last_op.get(),
                self.timeout.get()
            );
        } else {
            tracing::debug!("madfs: {} on server {server}{at}: {e}", self.last_op.get());
        }
        Errno::EIO
    }

    fn tcp_exchange(
        &self,
        server: u32,
        kind: u64,
        pieces: &[&[u8]],
        out: &mut [u8],
    ) -> Result<usize, Errno> {
        let c = match &self.net {
            Net::Tcp { conns } => conns
                .borrow()
                .get(server as usize)
                .cloned()
                .flatten()
                .ok_or(Errno::ENOTCONN)?,
            Net::Ucx { .. } => return Err(Errno::EINVAL),
        };
        let mut s = c.stream.borrow_mut();
        let k = if kind == tag::FSYNC { 2 } else { 1 };
        let word = c.secret.to_le_bytes();
        let mut all = [&[][..]; 5];
        all[0] = &word;
        for (slot, p) in all[1..].iter_mut().zip(pieces) {
            *slot = p;
        }
        tcp_send(&mut s, k, &all[..1 + pieces.len().min(4)])
            .map_err(|e| self.tcp_failed(server, e))?;
        let n = tcp_recv(&mut s, out).map_err(|e| self.tcp_failed(server, e))?;
        if n > out.len() {
            return Err(Errno::EMSGSIZE);
        }
        Ok(n)
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

    /// Sends `pieces` as one message with exactly tag `tag`, expecting no answer: what a
    /// hostile peer does when it puts another connection's id in its tags (tests of what
    /// servers do with it). UCX only.
    pub fn send_tagged(&self, server: u32, tag: u64, pieces: &[&[u8]]) -> Result<(), Errno> {
        self.ensure(server)?;
        let (ep, _, _) = self.endpoint(server)?;
        let iov: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        self.wait(&[server], async move {
            ep.tag_send_vectored(tag, &iov)
                .await
                .map(drop)
                .map_err(ucx_errno)
        })
    }

    /// Sends request `req` (+ `bulk`) to `server` and waits for no reply: what a client that
    /// stops or dies right after asking does, and the first half of a `WriteData` whose data
    /// is never sent (tests of what servers do with it). Returns the request's sequence
    /// number. Over TCP the request goes out on the stream, and its reply is never read.
    pub fn send_request(&self, server: u32, req: &Request<'_>, bulk: &[u8]) -> Result<u32, Errno> {
        self.ensure(server)?;
        let (prefix, hdr) = self.encode(req);
        if let Net::Tcp { conns } = &self.net {
            let c = cached(conns, server as usize)?.ok_or(Errno::ENOTCONN)?;
            let word = c.secret.to_le_bytes();
            let mut s = c.stream.borrow_mut();
            tcp_send(&mut s, 1, &[&word, &prefix, &hdr, bulk]).map_err(|_| Errno::EIO)?;
            return Ok(0);
        }
        let (ep, conn, secret) = self.endpoint(server)?;
        let seq = self.next_seq();
        let h16 = head16(&secret.to_le_bytes(), &prefix);
        let iov = [IoSlice::new(&h16), IoSlice::new(&hdr), IoSlice::new(bulk)];
        let n = if bulk.is_empty() { 2 } else { 3 };
        self.wait(&[server], async {
            ep.tag_send_vectored(tag::request(tag::REQUEST, conn, seq), &iov[..n])
                .await
                .map(drop)
                .map_err(ucx_errno)
        })?;
        Ok(seq)
    }

    /// Sends the data message of `WriteData` request `seq` (see [`Transport::send_request`]),
    /// for instance long after the server gave up on it. UCX only.
    pub fn send_data(&self, server: u32, seq: u32, data: &[u8]) -> Result<(), Errno> {
        let (ep, conn, secret) = self.endpoint(server)?;
        self.wait(&[server], async {
            ep.tag_send(tag::request_data(conn, seq, secret), data)
                .await
                .map(drop)
                .map_err(ucx_errno)
        })
    }

    /// Sends one message of tag kind `kind` (with this connection's id and a fresh sequence
    /// number) and expects no answer: what a peer that is not a madfs client might send, for
    /// tests of what servers do with it. UCX only.
    pub fn send_only(&self, server: u32, kind: u64, bytes: &[u8]) -> Result<(), Errno> {
        self.ensure(server)?;
        let (ep, conn, _) = self.endpoint(server)?;
        let seq = self.next_seq();
        self.wait(&[server], async move {
            ep.tag_send(tag::request(kind, conn, seq), bytes)
                .await
                .map(drop)
                .map_err(ucx_errno)
        })
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
        if self.is_tcp() {
            // SAFETY: u8 has no invalid bit patterns; the bytes are only written, then the
            // written prefix is what the caller reads.
            let out = unsafe { &mut *(out as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]) };
            return self.tcp_exchange(server, kind, pieces, out);
        }
        let (ep, conn, secret) = self.endpoint(server)?;
        let seq = self.next_seq();
        let mut recv = pin!(worker_ref(&self.net).tag_recv(tag::reply(seq), out));
        if let Poll::Ready(r) = futures::poll!(recv.as_mut()) {
            r.map_err(ucx_errno)?;
            return Err(Errno::EPROTO);
        }
        // connection word, prefix, header and bulk: no allocation for the scatter list; a
        // frame's prefix shares one piece with the word (a piece more costs UCX a copy step)
        let word = secret.to_le_bytes();
        let framed = pieces.first().filter(|p| p.len() == PREFIX);
        let head = framed.map_or([0u8; 16], |prefix| head16(&word, prefix));
        let mut iov = [IoSlice::new(&[]); 5];
        let mut rest = pieces;
        if framed.is_some() {
            iov[0] = IoSlice::new(&head);
            rest = &pieces[1..];
        } else {
            iov[0] = IoSlice::new(&word);
        }
        let mut k = 1;
        for p in rest.iter().filter(|p| !p.is_empty()).take(iov.len() - 1) {
            iov[k] = IoSlice::new(p);
            k += 1;
        }
        ep.tag_send_vectored(tag::request(kind, conn, seq), &iov[..k])
            .await
            .map_err(ucx_errno)?;
        recv.await.map_err(ucx_errno)
    }

    /// Sends a `Request::WriteData` and then `data` as its own contiguous message
    /// (`tag::REQUEST_DATA`, zero-copy rendezvous), and receives the reply (at most
    /// `reply_cap` bytes after the prefix). UCX transport only.
    pub async fn call_write(
        &self,
        server: u32,
        req: &Request<'_>,
        data: &[u8],
        reply_cap: usize,
    ) -> Result<RawReply, Errno> {
        let (prefix, hdr) = self.encode(req);
        let (ep, conn, secret) = self.endpoint(server)?;
        let seq = self.next_seq();
        let word = secret.to_le_bytes();
        let mut buf = Vec::<u8>::with_capacity(PREFIX + reply_cap);
        let n = {
            let mut recv =
                pin!(worker_ref(&self.net).tag_recv(tag::reply(seq), buf.spare_capacity_mut()));
            if let Poll::Ready(r) = futures::poll!(recv.as_mut()) {
                r.map_err(ucx_errno)?;
                return Err(Errno::EPROTO);
            }
            let h16 = head16(&word, &prefix);
            let head = [IoSlice::new(&h16), IoSlice::new(&hdr)];
            ep.tag_send_vectored(tag::request(tag::REQUEST, conn, seq), &head)
                .await
                .map_err(ucx_errno)?;
            ep.tag_send(tag::request_data(conn, seq, secret), data)
                .await
                .map_err(ucx_errno)?;
            recv.await.map_err(ucx_errno)?
        };
        // SAFETY: UCX wrote `n` bytes into the spare capacity.
        unsafe { buf.set_len(n) };
        Ok(RawReply { buf })
    }

    /// Sends a `Read` request and receives the data straight into `buf` (no copy). Returns the
    /// number of bytes the server had (short at the end of the stored data).
    pub async fn call_read(
        &self,
        server: u32,
        req: &Request<'_>,
        buf: &mut [u8],
    ) -> Result<usize, Errno> {
        let (prefix, hdr) = self.encode(req);
        if self.is_tcp() {
            let mut frame = vec![0u8; PREFIX + buf.len()];
            let n = self.tcp_exchange(server, tag::REQUEST, &[&prefix, &hdr], &mut frame)?;
            if n < PREFIX {
                return Err(Errno::EPROTO);
            }
            let rprefix: [u8; PREFIX] = frame[..PREFIX].try_into().unwrap();
            if frame::reply_status(&rprefix)? != 0 {
                return Err(Errno::EPROTO);
            }
            buf[..n - PREFIX].copy_from_slice(&frame[PREFIX..n]);
            return Ok(n - PREFIX);
        }
        let (ep, conn, secret) = self.endpoint(server)?;
        let seq = self.next_seq();
        let word = secret.to_le_bytes();
        if let Request::Read { len, .. } = req {
            if *len >= frame::RAW_READ_MIN {
                return self
                    .read_raw(&ep, conn, seq, (&word, &prefix, &hdr), buf)
                    .await;
            }
        }
        let mut rprefix = [0u8; PREFIX];
        let n = {
            let mut iov = [IoSliceMut::new(&mut rprefix), IoSliceMut::new(buf)];
            let mut recv = pin!(worker_ref(&self.net).tag_recv_vectored(tag::reply(seq), &mut iov));
            if let Poll::Ready(r) = futures::poll!(recv.as_mut()) {
                r.map_err(ucx_errno)?;
                return Err(Errno::EPROTO);
            }
            let h16 = head16(&word, &prefix);
            let send = [IoSlice::new(&h16), IoSlice::new(&hdr)];
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

    /// A large read (`frame::RAW_READ_MIN`): one contiguous receive straight into `buf` that
    /// takes either the raw data (`tag::reply_data`) or a framed error reply (`tag::reply`).
    /// (More data than `buf` holds is an error: EMSGSIZE.)
    async fn read_raw(
        &self,
        ep: &Endpoint,
        conn: u32,
        seq: u32,
        (word, prefix, hdr): (&[u8], &[u8], &[u8]),
        buf: &mut [u8],
    ) -> Result<usize, Errno> {
        // SAFETY: u8 and MaybeUninit<u8> have the same layout; UCX only writes into it.
        let out = unsafe {
            std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut MaybeUninit<u8>, buf.len())
        };
        let mut recv =
            pin!(worker_ref(&self.net).tag_recv_mask(tag::reply(seq), tag::REPLY_ANY_MASK, out));
        if let Poll::Ready(r) = futures::poll!(recv.as_mut()) {
            r.map_err(ucx_errno)?;
            return Err(Errno::EPROTO);
        }
        let h16 = head16(word, prefix);
        let send = [IoSlice::new(&h16), IoSlice::new(hdr)];
        ep.tag_send_vectored(tag::request(tag::REQUEST, conn, seq), &send)
            .await
            .map_err(ucx_errno)?;
        let (t, n) = recv.await.map_err(ucx_errno)?;
        if t & tag::REPLY_DATA_BIT != 0 {
            return Ok(n);
        }
        // a framed reply: an error (a successful read of this size always comes raw)
        if n < PREFIX {
            return Err(Errno::EPROTO);
        }
        let rprefix: [u8; PREFIX] = buf[..PREFIX].try_into().unwrap();
        frame::reply_status(&rprefix)?;
        Err(Errno::EPROTO)
    }
}

impl Drop for Transport {
    /// Says goodbye to every server this transport is connected to over UCX, so they drop the
    /// connection (with error mode `none` UCX would never tell them), then closes the
    /// endpoints with a flush instead of letting them be force-closed: a forced close is
    /// undefined behaviour for a peer whose endpoint has error mode `none` (UCX's
    /// `ucp_ep_close_nbx` documentation), and servers crashed in `ucp_tag_send_nb` when many
    /// client threads came and went. Best effort, ≤ 200 ms; what does not finish is
    /// force-closed.
    fn drop(&mut self) {
        let Net::Ucx {
            conns,
            worker,
            retired,
            ..
        } = &self.net
        else {
            return;
        };
        // never closed (see `Net::Ucx::retired`): they keep the worker (and its fds) alive
        // until the process exits — a leak per transport that ever gave a connection up
        for c in retired.borrow_mut().drain(..) {
            std::mem::forget(c);
        }
        if self.tainted.get() {
            // (see `Transport::tainted`): no goodbye, nothing closed or destroyed
            let net = std::mem::replace(
                &mut self.net,
                Net::Tcp {
                    conns: RefCell::new(Vec::new()),
                },
            );
            std::mem::forget(net);
            return;
        }
        // callbacks still queued are taken (and acknowledged): a message left in the
        // worker's queue makes UCX print a warning when the worker is destroyed, on the
        // program's own output
        self.callbacks_now(true);
        // the worker goes too before another thread may reuse its fds (see `LIFECYCLE`)
        let _one = lifecycle();
        let live: Vec<Conn> = conns.borrow().iter().flatten().cloned().collect();
        if live.is_empty() {
            drop(live);
            self.net = Net::Tcp {
                conns: RefCell::new(Vec::new()),
            };
            return;
        }
        let (prefix, hdr) = self.encode(&Request::Bye);
        let seqs: Vec<u32> = live.iter().map(|_| self.next_seq()).collect();
        let fut = async {
            for (c, seq) in live.iter().zip(&seqs) {
                let h16 = head16(&c.secret.to_le_bytes(), &prefix);
                let iov = [IoSlice::new(&h16), IoSlice::new(&hdr)];
                let _ =
                    c.ep.tag_send_vectored(tag::request(tag::REQUEST, c.welcome.conn, *seq), &iov)
                        .await;
            }
            for c in &live {
                let _ = c.ep.close(false).await;
            }
        };
        let done = block_on(
            worker,
            fut,
            self.settings.spin,
            Instant::now() + Duration::from_millis(200),
        );
        // callbacks that came while the goodbyes went out are taken too (not acknowledged:
        // the connections are closed; the servers drop a gone connection's holds)
        self.callbacks.take(worker, true, |_| None);
        if done.is_none() {
            // a goodbye or a flush that did not finish (a frozen server): closing that
            // endpoint would abort the process in UCX ("pending request … should have been
            // flushed"); it is left open, as a given-up connection is
            for c in live {
                std::mem::forget(c);
            }
        } else {
            drop(live);
        }
        self.net = Net::Tcp {
            conns: RefCell::new(Vec::new()),
        };
    }
}

/// The connection word and a frame's prefix as one piece of a vectored send.
fn head16(word: &[u8], prefix: &[u8]) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&word[..8]);
    h[8..].copy_from_slice(&prefix[..8]);
    h
}

/// The open connection in slot `idx`, `None` if not connected yet, EINVAL past the cluster.
fn cached<T: Clone>(slots: &RefCell<Vec<Option<T>>>, idx: usize) -> Result<Option<T>, Errno> {
    match slots.borrow().get(idx) {
        Some(c) => Ok(c.clone()),
        None => Err(Errno::EINVAL),
    }
}

fn worker_ref(net: &Net) -> &Worker {
    match net {
        Net::Ucx { worker, .. } => worker,
        Net::Tcp { .. } => unreachable!("UCX path on a TCP transport"),
    }
}

/// Polls a future whose work is all synchronous (TCP transport) until it is ready.
/// A future ready at `t` (polled by [`block_on`] at least every few milliseconds).
fn until(t: Instant) -> impl Future<Output = ()> {
    std::future::poll_fn(move |_| {
        if Instant::now() >= t {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
}

fn poll_to_end<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
    }
}
