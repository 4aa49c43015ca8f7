//! The control port of a madfs server: a tarpc service over TCP (JSON codec) with `status`,
//! `stats` and `shutdown`. Launch scripts wait on `status`; `madfs-ctl stop` stops cleanly.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// What `status` answers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Server index.
    pub id: u32,
    /// UCX listener address.
    pub ucx_addr: String,
    /// Data directory.
    pub data_dir: String,
    /// Default chunk size for new files.
    pub chunk_size: u32,
    /// Id of the server's cluster (its identity record).
    pub cluster: String,
    /// Number of servers of that cluster.
    pub servers: u32,
    /// Seconds since start.
    pub uptime_s: u64,
    /// Process id.
    pub pid: u32,
    /// UCX endpoint error mode (`none`/`peer`).
    pub err_mode: String,
}

/// What `stats` answers: counters since start.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests served, by request kind.
    pub requests: BTreeMap<String, u64>,
    /// Error replies.
    pub errors: u64,
    /// Frames that could not be decoded.
    pub bad_frames: u64,
    /// Messages with a tag kind no server receives, dropped (a peer that is not a madfs
    /// client, or a hostile one).
    #[serde(default)]
    pub drained: u64,
    /// Bulk bytes received (writes).
    pub bytes_in: u64,
    /// Bulk bytes sent (reads).
    pub bytes_out: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Connections currently open (clients say goodbye when they end).
    pub live_connections: u64,
    /// fsync batches run by the sync thread, and the requests they covered.
    pub sync_batches: u64,
    /// Requests covered by those batches.
    pub sync_requests: u64,
    /// Resident set size of the server process, bytes.
    pub rss_bytes: u64,
}

/// The control service.
#[tarpc::service]
pub trait Control {
    /// Identity and settings of the server.
    async fn status() -> Status;
    /// Counters.
    async fn stats() -> Stats;
    /// Stop the server cleanly (flushes RocksDB); answers before it exits.
    async fn shutdown() -> bool;
}

/// Connects to a control port.
pub async fn connect(addr: SocketAddr) -> anyhow::Result<ControlClient> {
    let transport =
        tarpc::serde_transport::tcp::connect(addr, tarpc::tokio_serde::formats::Json::default);
    let transport = tokio::time::timeout(Duration::from_secs(5), transport).await??;
    Ok(ControlClient::new(tarpc::client::Config::default(), transport).spawn())
}

/// A tarpc context with a deadline `secs` seconds away.
pub fn context(secs: u64) -> tarpc::context::Context {
    let mut ctx = tarpc::context::current();
    ctx.deadline = std::time::Instant::now() + Duration::from_secs(secs);
    ctx
}
