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

pub mod cache;
mod client;
mod config;
mod fs;
pub mod fuse;
pub mod hold;
mod local;

pub use client::{
    dir_pos, mutations, Client, DirCursor, Looked, OpenFile, OpenKind, OpenSpec, Opening,
    DIR_POS_END,
};
pub use config::ClientConfig;
pub use fs::{DirEntry, FileSystem, OpenFlags};
pub use madfs_proto::{Attr, Errno, FindFilter, FsResult, StatFs, TimeSpec};

/// `MADFS_LOG`'s filter (tracing's `EnvFilter` syntax), `warn` without it; async-ucx's own
/// messages only where the filter names them ([`madfs_rpc::log_directives`]).
fn log_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::new(madfs_rpc::log_directives(
        std::env::var("MADFS_LOG").ok().as_deref(),
        "warn",
    ))
}

/// Logging of a program running under the preload, set up when it first talks to the
/// servers: events of `MADFS_LOG`'s level (default `warn`: a timeout names the operation, the
/// server and its address; a refused server says why; `off`: nothing) go to stderr, or to the
/// file `MADFS_LOG_FILE` (appended; kept at a high descriptor number, out of the program's
/// way), one line each, prefixed with `madfs[PID]`.
pub fn init_preload_logging() {
    let filter = log_filter();
    let file = std::env::var_os("MADFS_LOG_FILE").and_then(|p| {
        use std::os::fd::{AsRawFd, FromRawFd};
        let f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(p)
            .ok()?;
        // SAFETY: duplicates an open descriptor to a free one at or above 900 (close-on-exec);
        // the original is closed when `f` drops.
        let high = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 900) };
        // SAFETY: `high` is a descriptor this process just made and owns.
        (high >= 0).then(|| unsafe { std::fs::File::from_raw_fd(high) })
    });
    let sink = std::sync::Arc::new(Sink {
        file: file.map(std::sync::Mutex::new),
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_target(false)
        .with_writer(move || LineWriter(sink.clone(), Vec::new()))
        .try_init();
}

/// Where the preload's log lines go.
struct Sink {
    file: Option<std::sync::Mutex<std::fs::File>>,
}

/// One event's line, written whole (with the process's id) when the event is done.
struct LineWriter(std::sync::Arc<Sink>, Vec<u8>);

impl std::io::Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.1.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if self.1.is_empty() {
            return;
        }
        let mut line = format!("madfs[{}]: ", std::process::id()).into_bytes();
        line.extend_from_slice(&self.1);
        match &self.0.file {
            Some(f) => {
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                let _ = std::io::Write::write_all(&mut *f, &line);
            }
            None => {
                let _ = std::io::Write::write_all(&mut std::io::stderr(), &line);
            }
        }
    }
}

/// Logging of the command-line tools (`madfs`, `madfs-find`): to stderr, filtered by
/// `MADFS_LOG` (tracing's `EnvFilter` syntax; default `warn`, so a timeout or a refused
/// server is named, see `Transport::wait`).
pub fn init_cli_logging() {
    use std::io::IsTerminal;
    let filter = log_filter();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .without_time()
        .with_writer(std::io::stderr)
        .try_init();
}
