//! The network side's settings, and the check of a connection's hello.

use crate::gate::Gate;
use crate::who::Who;
use madfs_proto::{Hello, Welcome};
use madfs_rpc::UcxSettings;
use std::sync::Arc;
use std::time::Duration;

/// A connection that has not proved who it is within this time is dropped.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

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
            open_lease: crate::state::opens::LEASE,
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
    /// What a new connection `conn` is told first (`nonce`: its challenge; `ticket`: what
    /// its hello must echo; `lease`: how long it may stay silent).
    pub fn welcome(&self, conn: u32, nonce: [u8; 32], ticket: u64, lease: Duration) -> Welcome {
        Welcome {
            ticket,
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

/// Decodes and checks a hello (on an IO thread: MUNGE asks munged).
pub async fn check_hello(
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
