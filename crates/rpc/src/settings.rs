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
