use async_ucx::ucp::ErrorMode;
use std::time::Duration;

/// UCX settings shared by clients and servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UcxSettings {
    /// Endpoint error handling. `None` (default) lets UCX use shared-memory transports between
    /// processes of one host; `Peer` makes UCX report dead peers but forces network transports.
    pub err_mode: ErrorMode,
    /// How long progress spins with nothing to do before it sleeps on the event fd.
    pub spin: Duration,
}

impl Default for UcxSettings {
    fn default() -> Self {
        UcxSettings {
            err_mode: ErrorMode::None,
            spin: Duration::from_micros(50),
        }
    }
}

impl UcxSettings {
    /// Parses an error mode name (`none` or `peer`).
    pub fn parse_err_mode(s: &str) -> Result<ErrorMode, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(ErrorMode::None),
            "peer" => Ok(ErrorMode::Peer),
            other => Err(format!(
                "unknown UCX error mode {other:?} (expected none or peer)"
            )),
        }
    }

    /// These settings for a cluster keeping `replication` copies: error mode `Peer` when it
    /// keeps more than one, whatever was asked. Error mode `None` promises UCX that no peer
    /// ever dies; a replicated cluster is made to outlive its servers, and UCX 1.13 aborts
    /// a process whose TCP endpoint to a dead peer still had sends queued (`stubs.c:102
    /// Assertion '0' failed` in `uct_tcp_ep_pending_purge`, found by the randomized kill
    /// test, `client/tests/history.rs`).
    pub fn for_replication(mut self, replication: u32) -> Self {
        if replication > 1 {
            self.err_mode = ErrorMode::Peer;
        }
        self
    }

    /// Reads `MADFS_UCX_ERR_MODE` (none|peer) and `MADFS_SPIN_US` over the defaults.
    pub fn from_env() -> Result<Self, String> {
        let mut s = UcxSettings::default();
        if let Ok(v) = std::env::var("MADFS_UCX_ERR_MODE") {
            s.err_mode = Self::parse_err_mode(&v)?;
        }
        if let Ok(v) = std::env::var("MADFS_SPIN_US") {
            let us: u64 = v
                .parse()
                .map_err(|_| format!("MADFS_SPIN_US={v:?} is not a number"))?;
            s.spin = Duration::from_micros(us);
        }
        Ok(s)
    }
}
