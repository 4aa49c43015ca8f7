use madfs_rpc::cluster_file;
use madfs_rpc::{ClusterIdentity, Credentials, UcxSettings};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How a client finds and talks to the cluster.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The cluster's identity record (the cluster file's first line): every server's welcome
    /// must name the same cluster id and size.
    pub identity: ClusterIdentity,
    /// UCX addresses of the servers, index = server id.
    pub servers: Vec<SocketAddr>,
    /// The cluster file they came from (re-read on reconnect).
    pub cluster_file: Option<PathBuf>,
    /// Deadline of one call.
    pub timeout: Duration,
    /// UCX settings.
    pub ucx: UcxSettings,
    /// Plain-TCP ports of the servers (fallback transport), when every server has one.
    pub tcp_servers: Option<Vec<SocketAddr>>,
    /// `close` of a file written through the handle also makes its data durable (fsync).
    /// Off by default (POSIX asks no such thing of close; `fsync`, `sync` and `syncfs` make
    /// data durable); `MADFS_CLOSE_SYNC=1` turns it on.
    pub close_sync: bool,
    /// Read the chunk files of servers on this host directly instead of asking them
    /// (docs/architecture.md, "Local reads"). `MADFS_LOCAL_READS=0` turns it off.
    pub local_reads: bool,
    /// What the client proves to each server (from the identity record: the key beside the
    /// cluster file, MUNGE, or nothing on an insecure cluster).
    pub credentials: Credentials,
}

impl ClientConfig {
    /// Reads the cluster file `path`: its identity record and as many servers as that names.
    pub fn from_cluster_file(path: impl Into<PathBuf>) -> std::io::Result<Self> {
        let path = path.into();
        let (identity, entries) = cluster_file::read(&path)?;
        let credentials = Credentials::client(&identity, &path)?;
        Ok(ClientConfig {
            credentials,
            identity,
            tcp_servers: entries.iter().map(|e| e.tcp).collect(),
            close_sync: false,
            local_reads: true,
            servers: entries.iter().map(|e| e.ucx).collect(),
            cluster_file: Some(path),
            timeout: madfs_rpc::DEFAULT_TIMEOUT,
            ucx: UcxSettings::default(),
        })
    }

    /// From the environment: `MADFS_CLUSTER` (cluster file, required) and the settings of
    /// [`ClientConfig::apply_env`]. Errors are one readable line.
    pub fn from_env() -> Result<Self, String> {
        let path = std::env::var_os("MADFS_CLUSTER").ok_or_else(|| {
            "MADFS_CLUSTER is not set (path of the cluster file written by scripts/cluster.sh)"
                .to_string()
        })?;
        let mut cfg = Self::from_cluster_file(PathBuf::from(path)).map_err(|e| e.to_string())?;
        cfg.apply_env()?;
        Ok(cfg)
    }

    /// Takes the settings given in the environment: `MADFS_UCX_ERR_MODE`, `MADFS_SPIN_US`,
    /// `MADFS_CLOSE_SYNC`, `MADFS_LOCAL_READS`, `MADFS_TIMEOUT_MS`.
    pub fn apply_env(&mut self) -> Result<(), String> {
        self.ucx = UcxSettings::from_env()?;
        let switch = |name: &str, v: String| match v.as_str() {
            "0" | "off" | "no" | "false" => Ok(false),
            "1" | "on" | "yes" | "true" => Ok(true),
            _ => Err(format!("{name}={v:?}: expected 0 or 1")),
        };
        if let Ok(v) = std::env::var("MADFS_CLOSE_SYNC") {
            self.close_sync = switch("MADFS_CLOSE_SYNC", v)?;
        }
        if let Ok(v) = std::env::var("MADFS_LOCAL_READS") {
            self.local_reads = switch("MADFS_LOCAL_READS", v)?;
        }
        if let Ok(v) = std::env::var("MADFS_TIMEOUT_MS") {
            let ms: u64 = v
                .parse()
                .map_err(|_| format!("MADFS_TIMEOUT_MS={v:?} is not a number"))?;
            self.timeout = Duration::from_millis(ms.max(1));
        }
        Ok(())
    }
}
