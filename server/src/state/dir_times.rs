//! Parent directory times waiting to be sent (docs/consistency.md, "Directory times"): the
//! queue `handlers::directories` fills and its thread empties.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Shortest interval between two `Touch`es of one directory.
pub const EVERY: Duration = Duration::from_millis(2);

/// Most directories queued at once: past it a touch of yet another directory is dropped
/// (times are kept best-effort; the queue never grows without bound if sending stalls).
const MAX_QUEUED: usize = 1 << 16;

/// Directory touches waiting to be sent.
#[derive(Default)]
pub struct DirTimes {
    /// Directory → the latest change time not sent yet.
    pub(crate) pending: Mutex<HashMap<String, i64>>,
    pub(crate) wake: Condvar,
}

impl DirTimes {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a touch of `dir` at `time` (kept: the latest).
    pub(crate) fn queue(&self, dir: &str, time: i64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(crate) fn the_queue_keeps_the_latest_time_and_stays_bounded() {
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
