//! The accept log of fault tests (`MADFS_ACCEPT_LOG=<file>`, off by default): one line per
//! change a primary acknowledged, `<set> <epoch> <server> <admitted ns> <answered ns>`
//! (wall clock), appended by every server of a test cluster to the same file. A checker
//! (`client/tests/history.rs`) reads it back: one primary per set and epoch, and no change
//! admitted in an older epoch after a newer epoch's primary acknowledged one — no two
//! primaries accepting writes for one range.

use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

static LOG: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();

fn log() -> Option<&'static Mutex<std::fs::File>> {
    LOG.get_or_init(|| {
        let path = std::env::var_os("MADFS_ACCEPT_LOG")?;
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                tracing::warn!("MADFS_ACCEPT_LOG {}: {e}", path.to_string_lossy());
                None
            }
        }
    })
    .as_ref()
}

/// Is the accept log on?
pub fn enabled() -> bool {
    log().is_some()
}

/// Wall-clock nanoseconds (the servers of a test share one machine, hence one clock).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Notes a change of `set` acknowledged by primary `me` in map `epoch`, admitted at
/// `admitted` (ns): one `write(2)` of one line on a file opened with `O_APPEND`, so lines of
/// several servers never mix and a killed server loses none it wrote.
pub fn accepted(set: u32, epoch: u64, me: u32, admitted: u64) {
    if let Some(f) = log() {
        let line = format!("{set} {epoch} {me} {admitted} {}\n", now_ns());
        let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
        let _ = f.write_all(line.as_bytes());
    }
}
