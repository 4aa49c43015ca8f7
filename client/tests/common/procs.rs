//! What the tests that run scripts and watch processes share (multihost.rs, slurm.rs).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_owned()
}

/// Where the built programs are.
pub fn bin_dir() -> PathBuf {
    madfs_cluster::find_bin("madfs-server")
        .parent()
        .expect("bin dir")
        .to_owned()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A finished program's status and output, for a failure message.
pub fn show(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    )
}

pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits (at most `limit`) until `done` holds.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
