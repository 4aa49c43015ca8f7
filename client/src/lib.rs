//! madfs client library.
//!
//! * [`FileSystem`] — the one FS trait (methods default to `ENOSYS`), used by the preload
//!   library, `madfs-find` and the bench;
//! * [`Client`] — its implementation over UCX: each path goes to its metadata server
//!   ([`madfs_placement::meta_server`]), each data chunk to its data server
//!   ([`madfs_placement::chunk_server`]); multi-chunk reads and writes are issued concurrently
//!   in a bounded window.
//!
//! A `Client` belongs to one thread (UCX workers are `!Send`); every call has a deadline, so a
//! dead server gives `EIO`, never a hang.

mod client;
mod config;
mod fs;
pub mod hold;
mod local;

pub use client::{dir_pos, mutations, Client, DirCursor, OpenFile, DIR_POS_END};
pub use config::ClientConfig;
pub use fs::{DirEntry, FileSystem, OpenFlags};
pub use madfs_proto::{Attr, Errno, FindFilter, FsResult, StatFs, TimeSpec};

/// Logging of the command-line tools (`madfs`, `madfs-find`): to stderr, filtered by
/// `MADFS_LOG` (tracing's `EnvFilter` syntax; default `warn`, so a timeout or a refused
/// server is named, see `Transport::wait`).
pub fn init_cli_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("MADFS_LOG")
        .unwrap_or_else(|_| "warn,async_ucx=off".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .without_time()
        .with_writer(std::io::stderr)
        .try_init();
}
