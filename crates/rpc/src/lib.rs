//! RPC over UCX tag matching, shared by the server, the client library and the bench.
//!
//! * [`UcxSettings`]: endpoint error mode and progress spin budget (environment or CLI);
//! * [`progress`]: adaptive progress — spin briefly, then sleep on the worker's event fd —
//!   for a tokio `LocalSet` (server) and for synchronous callers ([`progress::block_on`]);
//! * [`probe`]: a server worker's watch for a receive queue stalled by a dead local sender;
//! * [`Transport`]: a client's connections to every server and its `call`;
//! * [`cluster_file`] and [`ClusterIdentity`] (from `madfs-identity`): the file that lists the
//!   servers of a cluster, and the identity record it starts with.

pub use madfs_identity::{cluster_file, ClusterId, ClusterIdentity};
pub mod callbacks;
mod credentials;
pub mod probe;
pub mod progress;
mod settings;
mod transport;
pub mod worker_loop;

pub use async_ucx::ucp::{Context, Endpoint, ErrorMode, Listener, PostedRecv, PostedSend, Worker};
pub use async_ucx::Error as UcxError;
pub use credentials::Credentials;
pub use settings::UcxSettings;
pub use transport::{RawReply, Retry, Transport, DEFAULT_TIMEOUT, FAILOVER_WINDOW, MAP_REPLY};

use std::sync::Arc;

/// Creates a UCP context (tag matching, streams for the connection handshake, wake-ups for
/// sleeping progress).
pub fn new_context() -> std::io::Result<Arc<Context>> {
    // UCX is loaded on first use (vendor/ucx1-sys): a missing UCX is an error here, not an
    // abort inside the first UCX call.
    ucx1_sys::load().map_err(std::io::Error::other)?;
    Context::new().map_err(|e| std::io::Error::other(format!("UCX context: {e}")))
}

/// The log filter directives (tracing's `EnvFilter` syntax) of `MADFS_LOG`'s value `given`
/// (`default` without one), with async-ucx's own messages off unless `given` names them: it
/// logs when an endpoint closes, which a thread's end can do after the logger's thread-locals
/// are gone (aborting the process).
pub fn log_directives(given: Option<&str>, default: &str) -> String {
    let given = given.map(str::trim).filter(|g| !g.is_empty());
    match given {
        Some(g) if g.contains("async_ucx") => g.to_string(),
        Some(g) => format!("{g},async_ucx=off"),
        None => format!("{default},async_ucx=off"),
    }
}

#[cfg(test)]
mod log_tests {
    #[test]
    fn async_ucx_is_quiet_unless_named() {
        use super::log_directives as d;
        assert_eq!(d(None, "warn"), "warn,async_ucx=off");
        assert_eq!(d(Some("debug"), "warn"), "debug,async_ucx=off");
        assert_eq!(
            d(Some("info,async_ucx=trace"), "warn"),
            "info,async_ucx=trace"
        );
        assert_eq!(d(Some(" "), "info"), "info,async_ucx=off");
    }
}
