//! The control port of a madfs server: a tarpc service over TCP (JSON codec) with `status`,
//! `stats` and `shutdown`. Launch scripts wait on `status`; `madfs-ctl stop` stops cleanly.
//!
//! Every connection logs in first (`challenge`, then `login` with a proof): the peer key
//! (the servers' user), the cluster key (key mode: its owner) or a MUNGE credential of root or
//! the servers' user (MUNGE mode). Anything else is answered "not logged in".

pub mod fsck;

pub use fsck::{Damage, FsckReport, Verdict};
use madfs_auth::{Challenge, Key, Purpose};
use madfs_identity::AuthMode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
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
    /// Copies of every key (the cluster's replication factor).
    #[serde(default)]
    pub replication: u32,
    /// The cluster map as this server knows it (clusters with replication ≥ 2).
    #[serde(default)]
    pub map: Option<MapStatus>,
    /// Capacity: the data directory's file system (total and free bytes) and what the
    /// metadata database holds.
    #[serde(default)]
    pub capacity: Option<Capacity>,
}

/// A server's capacity as `status` answers it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Size of the file system holding the data directory, bytes.
    pub disk_bytes: u64,
    /// Free bytes on it (for unprivileged writers).
    pub free_bytes: u64,
    /// Bytes the metadata database (RocksDB, with chunk 0 inline) holds.
    pub metadata_bytes: u64,
}

/// The cluster map as one server knows it (docs/redundancy.md).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct MapStatus {
    /// The map's epoch (raised by every change).
    pub epoch: u64,
    /// Each server's state: `up`, `down`, `rejoining`, `removed`.
    pub states: Vec<String>,
    /// The Raft group's leader this server knows of.
    pub leader: Option<u32>,
    /// While this server catches up (rejoining): records and chunk bytes copied so far.
    #[serde(default)]
    pub resync: Option<(u64, u64)>,
    /// Slots each server owns (docs/architecture.md, "Placement").
    #[serde(default)]
    pub shares: Vec<u32>,
    /// Slots still to move to reach the target layout (0: none under way).
    #[serde(default)]
    pub moving: u32,
    /// Replica sets being rebuilt after a removal, as (set, server copying it).
    #[serde(default)]
    pub building: Vec<(u32, u32)>,
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
    /// Requests that carried another connection's id without its secret: dropped unanswered.
    #[serde(default)]
    pub forged: u64,
    /// Connections refused at their hello (wrong key, bad credential, none in time).
    #[serde(default)]
    pub refused: u64,
    /// Bulk bytes received (writes).
    pub bytes_in: u64,
    /// Bulk bytes sent (reads).
    pub bytes_out: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Connections currently open (clients say goodbye when they end).
    pub live_connections: u64,
    /// Requests parked: their data or their reply took longer than the grace (docs/architecture.md).
    #[serde(default)]
    pub parked: u64,
    /// Half-sent writes dropped because their data did not come in time.
    #[serde(default)]
    pub half_sent: u64,
    /// Late data messages of dropped or refused requests, taken and thrown away.
    #[serde(default)]
    pub orphans: u64,
    /// Requests refused with `EAGAIN` or kept in their handler (server-wide parking limits).
    #[serde(default)]
    pub busy: u64,
    /// Requests over their connection's parking limits (the connection was closed).
    #[serde(default)]
    pub over_limit: u64,
    /// Connections the server closed: stalled, dead, over their limits, lease run out.
    #[serde(default)]
    pub killed: u64,
    /// Of those, connections whose lease ran out.
    #[serde(default)]
    pub expired: u64,
    /// Buffers kept aside because closing a connection did not end a transfer (should be 0).
    #[serde(default)]
    pub stuck: u64,
    /// TCP connections closed for idling or for a request not read in time.
    #[serde(default)]
    pub tcp_timeouts: u64,
    /// fsync batches run by the sync thread, and the requests they covered.
    pub sync_batches: u64,
    /// Requests covered by those batches.
    pub sync_requests: u64,
    /// Resident set size of the server process, bytes.
    pub rss_bytes: u64,
    /// Changes that waited for the client cache's callbacks, by how long they waited: count
    /// per power of two of microseconds (index k: less than 2^k µs).
    #[serde(default)]
    pub revoke_waits: Vec<u64>,
    /// Leases of client caches held now.
    #[serde(default)]
    pub leases_held: u64,
    /// Slots this server moved to others (drains, joins), and their metadata records and
    /// chunk bytes.
    #[serde(default)]
    pub moved_slots: u64,
    #[serde(default)]
    pub moved_records: u64,
    #[serde(default)]
    pub moved_bytes: u64,
    /// Entries this server holds now (its directories' counts; `madfs-ctl stats` only).
    #[serde(default)]
    pub held_entries: u64,
    /// Bytes of chunk files (and their checksum records) on its disk (`madfs-ctl stats`
    /// only).
    #[serde(default)]
    pub held_chunk_bytes: u64,
}

/// What a control port says first: the challenge a login proves itself against.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The cluster's id.
    pub cluster: u64,
    /// The server's index.
    pub server: u32,
    /// A fresh nonce for this connection.
    pub nonce: [u8; 32],
}

/// A login's proof.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// Nothing: an insecure cluster's control port takes it.
    Insecure,
    /// HMAC of the challenge (purpose `Control`) under the peer key (`peer`) or the
    /// cluster key; `nonce` is the client's.
    Key {
        peer: bool,
        nonce: [u8; 32],
        mac: Vec<u8>,
    },
    /// A MUNGE credential whose payload is the challenge.
    Munge(String),
}

/// The control service.
#[tarpc::service]
pub trait Control {
    /// This connection's challenge.
    async fn challenge() -> Hello;
    /// Proves who the caller is; every other call needs it.
    async fn login(proof: Proof) -> Result<(), String>;
    /// Identity and settings of the server.
    async fn status() -> Result<Status, String>;
    /// Counters.
    async fn stats() -> Result<Stats, String>;
    /// Stop the server cleanly (flushes RocksDB); answers before it exits.
    async fn shutdown() -> Result<bool, String>;
    /// Scans this server's chunk files (every block against its checksum) and entries.
    async fn fsck() -> Result<FsckReport, String>;
    /// Removes the chunk files of `ids` (orphans the caller decided on with every server's
    /// report) that no entry of this server names; returns the bytes given back.
    async fn fsck_remove(ids: Vec<u64>) -> Result<u64, String>;
    /// A Raft message between servers (servers only: the peer key's login): `kind` names the
    /// call (`append`, `vote`, `snapshot`, `propose`), `body` is its JSON; answers JSON.
    async fn raft(kind: String, body: String) -> Result<String, String>;
    /// Drains server `server` of an unreplicated cluster: its slots move to the others while
    /// the cluster serves. Answers the map epoch that asks for it.
    async fn drain(server: u32) -> Result<u64, String>;
    /// Adds server `server` (started with `--join`, the next id) to an unreplicated
    /// cluster: it becomes a member and its share of the slots moves to it while the cluster
    /// serves. Answers the map epoch that has it.
    async fn add(server: u32) -> Result<u64, String>;
    /// Removes server `server` of a replicated cluster for good (it is dead: the map has it
    /// down): its replica sets are rebuilt to R copies on the others from their remaining
    /// copies while the cluster serves. Answers the map epoch that has it.
    async fn remove(server: u32) -> Result<u64, String>;
}

/// The challenge of a control login (`client_nonce`: the caller's).
pub fn challenge_of(h: &Hello, client_nonce: [u8; 32]) -> Challenge {
    Challenge {
        cluster: h.cluster,
        server: h.server,
        conn: u32::MAX,
        server_nonce: h.nonce,
        client_nonce,
        stated: [0; 16],
    }
}

/// What a control client can prove.
#[derive(Debug, Clone)]
pub enum Login {
    /// Nothing (insecure clusters only).
    Insecure,
    /// A key: the peer key (`true`) or the cluster key.
    Key(Key, bool),
    /// MUNGE.
    Munge,
}

impl Login {
    /// The best this process can prove to the cluster of `cluster_file`: the peer key if it
    /// can read it, else the cluster key (key mode), else MUNGE (MUNGE mode).
    pub fn for_cluster(cluster_file: &Path) -> anyhow::Result<Login> {
        let f = madfs_identity::cluster_file::read_partial(cluster_file)?;
        let mode = f.identity.map(|i| i.auth);
        if mode == Some(AuthMode::Insecure) {
            return Ok(Login::Insecure);
        }
        if let Ok(k) = Key::load(&madfs_auth::peer_key_path(cluster_file)) {
            return Ok(Login::Key(k, true));
        }
        match mode {
            Some(AuthMode::Key) => {
                let p = madfs_auth::key_path(cluster_file);
                let k = Key::load(&p).map_err(|e| {
                    anyhow::anyhow!(
                        "cluster key {}: {e} (only its owner may control this cluster)",
                        p.display()
                    )
                })?;
                Ok(Login::Key(k, false))
            }
            Some(AuthMode::Munge) => Ok(Login::Munge),
            _ => Ok(Login::Insecure),
        }
    }

    fn proof(&self, h: &Hello) -> anyhow::Result<Proof> {
        let nonce = madfs_auth::random::<32>()?;
        let c = challenge_of(h, nonce);
        Ok(match self {
            Login::Insecure => Proof::Insecure,
            Login::Key(k, peer) => Proof::Key {
                peer: *peer,
                nonce,
                mac: k.prove(Purpose::Control, &c).to_vec(),
            },
            Login::Munge => Proof::Munge(
                madfs_auth::munge::encode(&c.munge_payload()).map_err(anyhow::Error::msg)?,
            ),
        })
    }
}

/// Connects to a control port and logs in with `login`.
pub async fn connect(addr: SocketAddr, login: &Login) -> anyhow::Result<ControlClient> {
    let transport =
        tarpc::serde_transport::tcp::connect(addr, tarpc::tokio_serde::formats::Json::default);
    let transport = tokio::time::timeout(Duration::from_secs(5), transport).await??;
    let c = ControlClient::new(tarpc::client::Config::default(), transport).spawn();
    let h = c.challenge(context(5)).await?;
    c.login(context(5), login.proof(&h)?)
        .await?
        .map_err(|e| anyhow::anyhow!("control port {addr} refused the login: {e}"))?;
    Ok(c)
}

/// A tarpc context with a deadline `secs` seconds away.
pub fn context(secs: u64) -> tarpc::context::Context {
    let mut ctx = tarpc::context::current();
    ctx.deadline = std::time::Instant::now() + Duration::from_secs(secs);
    ctx
}
