//! Calls from this server to the other servers of its cluster (a rename's move of an entry to
//! the target's server). Each IO thread that makes such a call keeps its own client
//! [`Transport`] (UCX workers are `!Send`), found through the cluster file and checked against
//! the cluster's identity like any client's; every call has the client deadline.

use madfs_placement::Layout;
use madfs_proto::{Errno, FsResult, Reply, Request};
use madfs_rpc::{cluster_file, ClusterIdentity, Context, Credentials, Transport, UcxSettings};
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// How this server reaches its peers.
pub struct Peers {
    identity: ClusterIdentity,
    /// Which server owns each slot (docs/architecture.md, "Placement"): the cluster map's,
    /// replaced whole when a map with another layout is applied.
    layout: arc_swap::ArcSwap<Layout>,
    cluster_file: Option<PathBuf>,
    ucx: UcxSettings,
    ctx: OnceLock<Arc<Context>>,
    /// What this server proves to its peers.
    key: madfs_auth::Key,
    /// When this server started (ns), told to its peers with `DirList`.
    started: i64,
    /// Per server id (up to `MAX_SERVERS`): when it last said it started (0: not yet).
    starts: Box<[AtomicI64]>,
    /// A replicated cluster's map as this server knows it (epoch, each server's state):
    /// calls go to each replica set's primary in it.
    map: OnceLock<MapSource>,
}

/// Where [`Peers`] reads the cluster map (epoch, each server's state as `Reply::Map` has it).
pub type MapSource = Box<dyn Fn() -> (u64, Vec<u8>) + Send + Sync>;

thread_local! {
    /// This thread's transport, and per server the start it has a connection to.
    static TRANSPORT: RefCell<Option<(Transport, Vec<i64>)>> = const { RefCell::new(None) };
    /// This thread's transport for copies to secondaries: to a server itself, never to
    /// the primary of its replica set (no failover).
    static COPIES: RefCell<Option<(Transport, Vec<i64>)>> = const { RefCell::new(None) };
    /// This thread's transport for a rejoining server's copy: to each replica set's
    /// primary, with a short deadline (a connection to a server that died meanwhile is
    /// given up on quickly, and the set's primary asked again).
    static RESYNC: RefCell<Option<(Transport, Vec<i64>)>> = const { RefCell::new(None) };
}

/// Gives up this thread's transports now: a thread that ends calls it last. (Left to the
/// thread's end, a connection closed then may log while the logger's own thread-locals are
/// already gone, which aborts the server.)
pub fn release_thread() {
    for slot in [&TRANSPORT, &COPIES, &RESYNC] {
        let t = slot.try_with(|c| c.borrow_mut().take()).ok().flatten();
        drop(t);
    }
}

/// Deadline of a rejoining server's copy calls.
const RESYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Largest reply a peer call expects (an `Attr`-sized answer).
const REPLY_CAP: usize = 512;
/// Bytes of paths asked for per `Find` page.
const FIND_PAGE: usize = 16 << 10;

impl Peers {
    /// Peers of a cluster with `identity`, listed in `cluster_file` (none: a one-server
    /// cluster has no peers).
    pub fn new(
        identity: ClusterIdentity,
        cluster_file: Option<PathBuf>,
        ucx: UcxSettings,
        key: madfs_auth::Key,
    ) -> Self {
        let starts = (0..madfs_placement::MAX_SERVERS)
            .map(|_| AtomicI64::new(0))
            .collect();
        Peers {
            layout: arc_swap::ArcSwap::from_pointee(Layout::initial(identity.servers)),
            identity,
            cluster_file,
            ucx,
            ctx: OnceLock::new(),
            key,
            started: crate::clock::now_ns(),
            starts,
            map: OnceLock::new(),
        }
    }

    /// Calls follow the cluster map `source` gives (replicated clusters).
    pub fn set_map_source(&self, source: MapSource) {
        let _ = self.map.set(source);
    }

    /// Server `server` says it started at `started` (ns): connections to an earlier run of
    /// it are dropped before their next call.
    pub fn restarted(&self, server: u32, started: i64) {
        if let Some(s) = self.starts.get(server as usize) {
            s.store(started, Relaxed);
        }
    }

    /// The UCX context peer transports are made in (the server's own).
    pub fn set_context(&self, ctx: Arc<Context>) {
        let _ = self.ctx.set(ctx);
    }

    /// The peer key (what capabilities are signed with).
    pub fn key(&self) -> &madfs_auth::Key {
        &self.key
    }

    /// Number of server ids of the cluster: the layout's (its first servers, those that
    /// joined, drained ones too: they own no slot and are asked nothing keyed).
    pub fn servers(&self) -> u32 {
        self.layout.load().servers()
    }

    /// Which server owns each slot: where every key lives. (A load, no lock: every
    /// request's admission reads it.)
    pub fn layout(&self) -> arc_swap::Guard<Arc<Layout>> {
        self.layout.load()
    }

    /// The cluster map's layout `l` replaces the one known (a slot's move switched).
    pub fn set_layout(&self, l: Layout) {
        if **self.layout.load() != l {
            self.layout.store(Arc::new(l));
        }
    }

    /// One call to server `server`: the reply (owned), or the peer's errno; `EIO` when it
    /// cannot be reached within the deadline.
    pub fn call(&self, server: u32, req: &Request<'_>, bulk: &[u8]) -> FsResult<Reply<'static>> {
        self.call_with(server, req, bulk, REPLY_CAP, |reply| {
            Ok(match reply {
                Reply::Replaced(a) => Reply::Replaced(a),
                Reply::Unit => Reply::Unit,
                Reply::Attr(a) => Reply::Attr(a),
                Reply::Bool(b) => Reply::Bool(b),
                _ => return Err(Errno::EPROTO),
            })
        })
    }

    /// One page of `Find` of every entry under `dir` on `server`, after key `after`: the
    /// paths (relative to `dir`) and the key to go on after, `None` at the end.
    pub fn find_page(
        &self,
        server: u32,
        dir: &str,
        after: &[u8],
    ) -> FsResult<(Vec<String>, Option<Vec<u8>>)> {
        let req = Request::Find {
            dir,
            filter: madfs_proto::FindFilter {
                pending: true,
                ..Default::default()
            },
            after,
            max_bytes: FIND_PAGE as u32,
            servers: 0,
        };
        self.call_with(server, &req, &[], 2 * FIND_PAGE, |reply| match reply {
            Reply::Found { paths, next, .. } => Ok((
                paths.into_iter().map(str::to_owned).collect(),
                next.map(<[u8]>::to_vec),
            )),
            _ => Err(Errno::EPROTO),
        })
    }

    /// One page of `DirList` from `server`.
    #[allow(clippy::type_complexity)]
    pub fn dir_page(
        &self,
        server: u32,
        after: &[u8],
        me: u32,
    ) -> FsResult<(Vec<(String, u32, u32, u32, i64)>, Option<Vec<u8>>)> {
        let req = Request::DirList {
            after,
            from: me,
            started: self.started,
        };
        self.call_with(server, &req, &[], 4 * FIND_PAGE, |reply| match reply {
            Reply::Dirs { entries, next } => Ok((
                entries
                    .into_iter()
                    .map(|(p, m, u, g, v)| (p.to_owned(), m, u, g, v))
                    .collect(),
                next.map(<[u8]>::to_vec),
            )),
            _ => Err(Errno::EPROTO),
        })
    }

    /// One page of a rejoining server's copy of replica set `set` from its primary
    /// (`Request::Resync`): records (or chunk files with `files`) and where to go on.
    #[allow(clippy::type_complexity)]
    pub fn resync_page(
        &self,
        set: u32,
        epoch: u64,
        after: &[u8],
        max_bytes: u32,
        files: bool,
        after_id: u64,
    ) -> FsResult<(Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>)> {
        let req = Request::Resync {
            set,
            epoch,
            after,
            max_bytes,
            files,
            after_id,
        };
        let cap = 2 * (max_bytes as usize).max(64 << 10);
        let take = |reply: Reply<'_>| match reply {
            Reply::Records { records, next } => Ok((
                records
                    .into_iter()
                    .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .collect(),
                next.map(<[u8]>::to_vec),
            )),
            _ => Err(Errno::EPROTO),
        };
        self.resync_call(set, &req, cap, take)
    }

    /// Bytes of file `id`'s chunk file at `pos` on the primary of replica set `set`.
    pub fn resync_read(&self, set: u32, id: u64, pos: u64, len: u32) -> FsResult<Vec<u8>> {
        let req = Request::ResyncRead { id, pos, len };
        let take = |reply: Reply<'_>| match reply {
            Reply::Records { mut records, .. } if records.len() == 1 => {
                Ok(records.pop().map(|(_, v)| v.to_vec()).unwrap_or_default())
            }
            _ => Err(Errno::EPROTO),
        };
        self.resync_call(set, &req, len as usize + 4096, take)
    }

    /// A call of a rejoining server's copy to the primary of replica set `set`: on a
    /// transport of its own (a short deadline), again while the primary answers EAGAIN
    /// (waiting for older requests), ≤ 10 s.
    fn resync_call<T>(
        &self,
        set: u32,
        req: &Request<'_>,
        cap: usize,
        take: impl Fn(Reply<'_>) -> FsResult<T>,
    ) -> FsResult<T> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let own = Some((RESYNC_TIMEOUT, true));
            let r = RESYNC.with(|slot| self.call_on(slot, set, req, &[], cap, &take, own));
            match r {
                Err(Errno::EAGAIN) if std::time::Instant::now() < until => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                r => return r,
            }
        }
    }

    /// Sends a copy (`Request::Replicate`) to server `server` itself, within `timeout`.
    pub fn replicate(
        &self,
        server: u32,
        req: &Request<'_>,
        bulk: &[u8],
        timeout: std::time::Duration,
    ) -> FsResult<()> {
        COPIES.with(|slot| {
            self.call_on(
                slot,
                server,
                req,
                bulk,
                REPLY_CAP,
                |reply| match reply {
                    Reply::Unit => Ok(()),
                    _ => Err(Errno::EPROTO),
                },
                Some((timeout, false)),
            )
        })
    }

    /// One call to server `server` whose reply `take` reads (borrowed replies: names, pages),
    /// with room for `cap` bytes of it.
    pub fn call_with<T>(
        &self,
        server: u32,
        req: &Request<'_>,
        bulk: &[u8],
        cap: usize,
        take: impl FnOnce(Reply<'_>) -> FsResult<T>,
    ) -> FsResult<T> {
        TRANSPORT.with(|slot| self.call_on(slot, server, req, bulk, cap, take, None))
    }

    #[allow(clippy::too_many_arguments)]
    fn call_on<T>(
        &self,
        slot: &RefCell<Option<(Transport, Vec<i64>)>>,
        server: u32,
        req: &Request<'_>,
        bulk: &[u8],
        cap: usize,
        take: impl FnOnce(Reply<'_>) -> FsResult<T>,
        // a deadline of its own, and whether calls fail over to a set's new primary
        own: Option<(std::time::Duration, bool)>,
    ) -> FsResult<T> {
        {
            let mut slot = slot.borrow_mut();
            if slot.is_none() {
                let seen = vec![0; self.starts.len()];
                let t = self.transport()?;
                if let Some((d, failover)) = own {
                    t.set_timeout(d);
                    if !failover {
                        // (the copies: to a server itself, on their own tag kind)
                        t.no_failover();
                        t.set_request_kind(madfs_proto::tag::REPLICATE);
                    }
                }
                *slot = Some((t, seen));
            }
            let (t, seen) = slot.as_mut().ok_or(Errno::EIO)?;
            // a server that joined after this transport was made: its address is read
            if server >= t.servers() {
                t.learn_servers(server + 1);
            }
            // this server's own map says where each replica set is served
            if let (Some(src), true) = (self.map.get(), own.is_none_or(|o| o.1)) {
                let (epoch, states) = src();
                t.learn_map(epoch, &states);
            }
            // a connection to an earlier run of the server would wait out the deadline
            if let (Some(now), Some(had)) = (
                self.starts.get(server as usize),
                seen.get_mut(server as usize),
            ) {
                let now = now.load(Relaxed);
                if *had != now {
                    t.invalidate(server);
                    *had = now;
                }
            }
            let raw = t.call_sync(server, req, bulk, cap)?;
            let (reply, _) = raw.decode()?;
            take(reply)
        }
    }

    fn transport(&self) -> FsResult<Transport> {
        let (Some(file), Some(ctx)) = (&self.cluster_file, self.ctx.get()) else {
            tracing::error!("a call to another server, but this server has no cluster file");
            return Err(Errno::EIO);
        };
        let (identity, entries) = cluster_file::read(file).map_err(|e| {
            tracing::error!("peers: {e}");
            Errno::EIO
        })?;
        if identity.id != self.identity.id {
            tracing::error!(
                "peers: cluster file {} names cluster {}, this server belongs to {}",
                file.display(),
                identity.id,
                self.identity.id
            );
            return Err(Errno::EIO);
        }
        let addrs = entries.iter().map(|e| e.ucx).collect();
        let t = Transport::new(ctx.clone(), addrs, Some(file.clone()), self.ucx).map_err(|e| {
            tracing::error!("peers: {e}");
            Errno::EIO
        })?;
        t.expect_cluster(identity.id.0, identity.servers, identity.replication);
        t.set_credentials(Credentials::Peer(self.key.clone()));
        Ok(t)
    }
}
