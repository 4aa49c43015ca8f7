//! Parent directory times (docs/consistency.md, "Directory times"): adding or removing an
//! entry marks its directory's mtime and ctime. The directory's entry lives on the server its
//! own path hashes to, the changed entry on another, so the change travels as a `Touch`
//! (server to server), sent by one thread per server that coalesces them: each directory gets
//! the latest time of the changes made to it, at most one `Touch` per directory every
//! [`EVERY`] (a directory holding every mdtest-hard file would otherwise cost a call per
//! create; a directory of this server is touched by the same thread, locally). A `Touch` (a merge
//! operand) applies only where the directory's ctime is older, so late or repeated ones do no
//! harm, and an explicit time set after them stays. So a `stat` of
//! the directory shows a change a moment (a few ms at most) after the change returned.

use crate::ops::Ops;
use crate::store::rocks::Change;
use crate::store::MetadataStore;
use madfs_placement::{meta_server, split_parent};
use madfs_proto::Request;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Shortest interval between two `Touch`es of one directory.
pub const EVERY: Duration = Duration::from_millis(2);

/// Most directories queued at once: past it a touch of yet another directory is dropped
/// (times are kept best-effort; the queue never grows without bound if sending stalls).
const MAX_QUEUED: usize = 1 << 16;

/// Directory touches waiting to be sent.
#[derive(Default)]
pub struct DirTimes {
    /// Directory → the latest change time not sent yet.
    pending: Mutex<HashMap<String, i64>>,
    wake: Condvar,
}

impl DirTimes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a touch of `dir` at `time` (kept: the latest).
    fn queue(&self, dir: &str, time: i64) {
        let mut p = self.lock();
        let full = p.len() >= MAX_QUEUED;
        match p.get_mut(dir) {
            Some(t) => *t = (*t).max(time),
            None if full => {}
            None => {
                p.insert(dir.to_owned(), time);
                self.wake.notify_one();
            }
        }
    }
}

impl Ops {
    /// The entry `path` was added or removed at `time`: its directory's mtime and ctime move
    /// to `time` (not the root's, which is implicit).
    pub fn parent_changed(&self, path: &str, time: i64) {
        let Some((dir, _)) = split_parent(path) else {
            return;
        };
        if dir != "/" {
            self.dir_times.queue(dir, time);
        }
    }

    /// `Touch`: directory `dir` (this server's) changed at `time`.
    pub fn touch(&self, dir: &str, time: i64) {
        if let Ok(Some(a)) = self.meta.get(dir) {
            if a.is_dir() && (a.mtime < time || a.ctime < time) {
                if let Err(e) = self.meta.change(dir, Change::Touch { time }) {
                    tracing::warn!("times of directory {dir}: {e}");
                }
            }
        }
    }
}

/// Starts the thread that sends queued touches to the directories' servers.
pub fn start(ops: Arc<Ops>, stop: Arc<std::sync::atomic::AtomicBool>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("madfs-dirtimes".into())
        .spawn(move || {
            let mut sent: HashMap<String, Instant> = HashMap::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let now = Instant::now();
                let due: Vec<(String, i64)> = {
                    let mut p = ops.dir_times.lock();
                    if p.is_empty() {
                        let (g, _) = ops
                            .dir_times
                            .wake
                            .wait_timeout(p, Duration::from_millis(200))
                            .unwrap_or_else(|e| e.into_inner());
                        p = g;
                    }
                    let ready: Vec<String> = p
                        .keys()
                        .filter(|d| sent.get(*d).is_none_or(|t| now - *t >= EVERY))
                        .cloned()
                        .collect();
                    ready
                        .into_iter()
                        .filter_map(|d| p.remove_entry(&d))
                        .collect()
                };
                if due.is_empty() {
                    // every queued directory was touched less than EVERY ago: sleep until the
                    // first of them is due (a 2 ms wait at most, not a poll)
                    let first = sent.values().map(|t| EVERY.saturating_sub(now - *t)).min();
                    std::thread::sleep(first.unwrap_or(EVERY).max(Duration::from_micros(100)));
                }
                sent.retain(|_, t| now - *t < EVERY);
                for (dir, time) in due {
                    let s = meta_server(&dir, ops.peers.servers());
                    // (a replicated cluster: through the set's primary, which copies it)
                    if s == ops.here() && ops.replica.is_none() {
                        ops.touch(&dir, time);
                    } else if let Err(e) =
                        ops.peers.call(s, &Request::Touch { dir: &dir, time }, &[])
                    {
                        tracing::debug!("touch of directory {dir} on server {s}: {e}");
                    }
                    sent.insert(dir, Instant::now());
                }
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_keeps_the_latest_time_and_stays_bounded() {
        let q = DirTimes::default();
        q.queue("/a", 5);
        q.queue("/a", 3);
        q.queue("/a", 9);
        assert_eq!(q.lock().get("/a"), Some(&9));
        for i in 0..MAX_QUEUED + 10 {
            q.queue(&format!("/d{i}"), 1);
        }
        assert_eq!(q.lock().len(), MAX_QUEUED);
        q.queue("/a", 11); // a queued directory still moves forward
        assert_eq!(q.lock().get("/a"), Some(&11));
    }
}
