//! The tarpc control port (TCP, JSON): `status`, `stats`, `shutdown`, after a login
//! ([`crate::auth::Gate::control_login`]) on each connection.

use crate::gate::Gate;
use crate::server::Server;
use crate::stats::ServerStats;
use futures::{future, StreamExt};
use madfs_control::{Control, FsckReport, Hello, Proof, Stats, Status};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tarpc::server::{self, Channel};

#[derive(Clone)]
struct ControlServer {
    status: Status,
    ucx_addr: Arc<OnceLock<String>>,
    start: Instant,
    stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
    gate: Arc<Gate>,
    /// This connection's challenge, whether it logged in, and whether as a server.
    session: Arc<(Hello, AtomicBool, AtomicBool)>,
    /// The cluster map's Raft node (replicated clusters, once started).
    replica: Arc<OnceLock<Arc<crate::replica::Node>>>,
    /// The server's operations (fsck reads its stores).
    ops: Arc<Server>,
}

const NOT_LOGGED_IN: &str = "not logged in";

/// How long a control connection may wait before it logs in.
const LOGIN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Control connections that may wait for their login at once.
const UNLOGGED: usize = 1024;

impl ControlServer {
    /// This server's member of the cluster map (membership changes are proposed there).
    fn map_node(&self) -> Result<Arc<crate::replica::Node>, String> {
        self.replica.get().cloned().ok_or_else(|| {
            "this server runs no cluster map (started without a cluster file)".into()
        })
    }

    fn member(&self) -> Result<(), String> {
        if self.session.1.load(Relaxed) {
            Ok(())
        } else {
            Err(NOT_LOGGED_IN.into())
        }
    }
}

impl Control for ControlServer {
    async fn challenge(self, _: tarpc::context::Context) -> Hello {
        self.session.0
    }

    async fn login(self, _: tarpc::context::Context, proof: Proof) -> Result<(), String> {
        let gate = self.gate.clone();
        let h = self.session.0;
        // MUNGE asks munged: not on the runtime's thread
        let r = tokio::task::spawn_blocking(move || gate.control_login(&h, &proof))
            .await
            .unwrap_or_else(|_| Err("login check failed".into()));
        match &r {
            Ok(server) => {
                self.session.2.store(*server, Relaxed);
                self.session.1.store(true, Relaxed);
            }
            Err(e) => {
                tracing::warn!("control login refused: {e}");
                self.stats.refused.fetch_add(1, Relaxed);
            }
        }
        r.map(drop)
    }

    async fn status(self, _: tarpc::context::Context) -> Result<Status, String> {
        self.member()?;
        Ok(Status {
            uptime_s: self.start.elapsed().as_secs(),
            ucx_addr: self.ucx_addr.get().cloned().unwrap_or_default(),
            map: self.replica.get().map(|n| madfs_control::MapStatus {
                resync: self.stats.resync(),
                ..n.map_status()
            }),
            capacity: capacity(&self.ops),
            ..self.status.clone()
        })
    }

    async fn stats(self, _: tarpc::context::Context) -> Result<Stats, String> {
        self.member()?;
        let mut s = self.stats.snapshot();
        // what it holds (a scan of the directory counts and of the chunk directory)
        let ops = self.ops.clone();
        let held = tokio::task::spawn_blocking(move || {
            let entries = ops.meta.entries_held().unwrap_or(0);
            let bytes = ops.chunks.ids().map_or(0, |v| v.iter().map(|e| e.1).sum());
            (entries, bytes)
        })
        .await
        .map_err(|e| e.to_string())?;
        (s.held_entries, s.held_chunk_bytes) = held;
        Ok(s)
    }

    async fn shutdown(self, _: tarpc::context::Context) -> Result<bool, String> {
        self.member()?;
        tracing::info!("shutdown requested through the control port");
        self.stop.store(true, Relaxed);
        Ok(true)
    }

    async fn fsck(self, _: tarpc::context::Context) -> Result<FsckReport, String> {
        self.member()?;
        let (id, servers) = (self.status.id, self.status.servers);
        let checksums = self.ops.chunks.checksums();
        let ops = self.ops.clone();
        tokio::task::spawn_blocking(move || {
            crate::fsck::scan(id, servers, checksums, &ops.meta, &ops.chunks)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }

    async fn raft(
        self,
        _: tarpc::context::Context,
        kind: String,
        body: String,
    ) -> Result<String, String> {
        self.member()?;
        if !self.session.2.load(Relaxed) {
            return Err("Raft messages come from servers only".into());
        }
        match self.replica.get() {
            Some(n) => n.clone().handle(&kind, &body).await,
            None => Err("no cluster map here (yet)".into()),
        }
    }

    async fn drain(self, _: tarpc::context::Context, server: u32) -> Result<u64, String> {
        self.member()?;
        let epoch = self.map_node()?.propose_drain(server).await?;
        tracing::info!("server {server} drained (map epoch {epoch}): its slots move away");
        Ok(epoch)
    }

    async fn add(self, _: tarpc::context::Context, server: u32) -> Result<u64, String> {
        self.member()?;
        let epoch = self.map_node()?.propose_join(server).await?;
        tracing::info!("server {server} added (map epoch {epoch}): slots move to it");
        Ok(epoch)
    }

    async fn remove(self, _: tarpc::context::Context, server: u32) -> Result<u64, String> {
        self.member()?;
        let epoch = self.map_node()?.propose_remove(server).await?;
        tracing::info!("server {server} removed (map epoch {epoch}): its replica sets are rebuilt");
        Ok(epoch)
    }

    async fn fsck_remove(self, _: tarpc::context::Context, ids: Vec<u64>) -> Result<u64, String> {
        self.member()?;
        let ops = self.ops.clone();
        tokio::task::spawn_blocking(move || crate::fsck::remove(&ops.meta, &ops.chunks, &ids))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }
}

/// The server's capacity (`status`, and the metrics endpoint): the data directory's file
/// system and the metadata database.
pub fn capacity(ops: &Server) -> Option<madfs_control::Capacity> {
    use madfs_store::ChunkStore;
    let fs = ops.chunks.statfs().ok()?;
    Some(madfs_control::Capacity {
        disk_bytes: fs.blocks * fs.bsize,
        free_bytes: fs.bavail * fs.bsize,
        metadata_bytes: ops.meta.disk_bytes(),
    })
}

/// Starts the control port on its own thread and runtime; returns the bound address and
/// the runtime (the cluster map's Raft member runs there too).
/// SIGINT and SIGTERM also request a clean stop. It is started before UCX, so that a port
/// taken by someone else stops the server before UCX exists; `status` answers the UCX
/// address once `ucx_addr` holds it.
pub fn start(
    addr: SocketAddr,
    status: Status,
    ucx_addr: Arc<OnceLock<String>>,
    ops: Arc<Server>,
    stop: Arc<AtomicBool>,
    gate: Arc<Gate>,
    replica: Arc<OnceLock<Arc<crate::replica::Node>>>,
) -> anyhow::Result<(SocketAddr, tokio::runtime::Handle)> {
    let (tx, rx) =
        std::sync::mpsc::channel::<anyhow::Result<(SocketAddr, tokio::runtime::Handle)>>();
    std::thread::Builder::new()
        .name("madfs-control".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return drop(tx.send(Err(e.into()))),
            };
            rt.block_on(async move {
                let listener = match tarpc::serde_transport::tcp::listen(
                    addr,
                    tarpc::tokio_serde::formats::Json::default,
                )
                .await
                {
                    Ok(l) => l,
                    Err(e) => {
                        return drop(tx.send(Err(anyhow::anyhow!("control port {addr}: {e}"))))
                    }
                };
                let _ = tx.send(Ok((
                    listener.local_addr(),
                    tokio::runtime::Handle::current(),
                )));
                let sig_stop = stop.clone();
                tokio::spawn(async move {
                    use tokio::signal::unix::{signal, SignalKind};
                    if let (Ok(mut term), Ok(mut int)) = (
                        signal(SignalKind::terminate()),
                        signal(SignalKind::interrupt()),
                    ) {
                        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
                        tracing::info!("signal received; stopping");
                        sig_stop.store(true, Relaxed);
                    }
                });
                let (cluster, server) = gate.cluster_and_server();
                let srv = ControlServer {
                    status,
                    ucx_addr,
                    start: Instant::now(),
                    stats: ops.stats.clone(),
                    ops,
                    stop,
                    gate,
                    replica,
                    session: Arc::new((
                        Hello {
                            cluster,
                            server,
                            nonce: [0; 32],
                        },
                        AtomicBool::new(false),
                        AtomicBool::new(false),
                    )),
                };
                // every connection is a task of its own; one that has not logged in within
                // LOGIN_WAIT is closed, and at most UNLOGGED wait at once (more are closed at
                // once): idle connections never keep the servers' Raft or an operator out
                let unlogged = Arc::new(tokio::sync::Semaphore::new(UNLOGGED));
                listener
                    .filter_map(|r| future::ready(r.ok()))
                    .for_each(|transport| {
                        let (srv, unlogged) = (srv.clone(), unlogged.clone());
                        async move {
                            let Ok(waiting) = unlogged.try_acquire_owned() else {
                                tracing::debug!("control port: too many connections not logged in");
                                return;
                            };
                            let mut s = srv;
                            // a fresh challenge and login state per connection
                            let nonce = madfs_auth::random::<32>().unwrap_or_default();
                            s.session = Arc::new((
                                Hello {
                                    nonce,
                                    ..s.session.0
                                },
                                AtomicBool::new(false),
                                AtomicBool::new(false),
                            ));
                            let session = s.session.clone();
                            let serve = tokio::spawn(
                                server::BaseChannel::with_defaults(transport)
                                    .execute(s.serve())
                                    .for_each(|f| async move {
                                        tokio::spawn(f);
                                    }),
                            );
                            tokio::spawn(async move {
                                let until = tokio::time::Instant::now() + LOGIN_WAIT;
                                while !session.1.load(Relaxed) {
                                    if serve.is_finished() {
                                        return;
                                    }
                                    if tokio::time::Instant::now() >= until {
                                        serve.abort();
                                        return;
                                    }
                                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                                }
                                drop(waiting);
                            });
                        }
                    })
                    .await;
            });
        })?;
    rx.recv()?
}
