//! Group commit: one flush (a WAL sync, an `fdatasync`) shared by every waiter it covers.
//!
//! A flush makes durable what was written before it *started*. Writers advance a monotonic
//! mark (RocksDB's sequence number, a file's write count); a waiter reads the mark after its
//! data was written (its request was acknowledged before the fsync came) and is covered by
//! any flush whose start mark is at least that. So:
//! * a completed flush that started at or past the waiter's mark answers at once;
//! * a running one that started at or past it is waited for;
//! * otherwise the waiter waits for the running flush to end and then runs the next one
//!   itself, reading the mark afresh: that flush covers every waiter that arrived meanwhile.
//!
//! One flush runs at a time, and waiters that arrive during it share the next: with a flush
//! that costs *t*, the flushes per second stay ≤ 1/*t* however many waiters there are, and
//! each waiter waits at most about 2*t*. A failed flush fails every waiter it covered, and
//! later waiters with an older mark as well (after an `fdatasync` error the kernel may have
//! dropped the dirty pages: a later success does not prove the earlier data is on disk).

use madfs_proto::{Errno, FsResult};
use std::sync::{Condvar, Mutex};

#[derive(Default)]
struct State {
    /// Start mark of the running flush, if one runs.
    running: Option<u64>,
    /// Highest start mark of a completed flush (everything up to it is durable).
    flushed: u64,
    /// Start mark of the latest failed flush, and its error.
    failed: Option<(u64, Errno)>,
}

/// One shared flush (see the module docs).
#[derive(Default)]
pub struct SharedFlush {
    state: Mutex<State>,
    done: Condvar,
}

impl SharedFlush {
    /// A flush whose first run covers nothing yet (mark 0 is "nothing written").
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes durable everything written up to mark `need`. `mark` reads the current mark
    /// (called just before a flush starts); `flush` does the flush.
    pub fn cover(
        &self,
        need: u64,
        mark: impl Fn() -> u64,
        flush: impl Fn() -> FsResult<()>,
    ) -> FsResult<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some((m, e)) = st.failed {
                if m >= need {
                    return Err(e);
                }
            }
            if st.flushed >= need {
                return Ok(());
            }
            if st.running.is_some() {
                st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // lead the next flush: its start mark covers every waiter whose data is written
            let start = mark().max(need);
            st.running = Some(start);
            drop(st);
            let r = flush();
            st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            st.running = None;
            match r {
                Ok(()) => st.flushed = st.flushed.max(start),
                Err(e) => st.failed = Some((start, e)),
            }
            self.done.notify_all();
        }
    }

    /// The highest mark known to be durable.
    pub fn flushed(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).flushed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_covered_waiter_does_not_flush_again() {
        let f = SharedFlush::new();
        let runs = AtomicU64::new(0);
        let flush = || {
            runs.fetch_add(1, SeqCst);
            Ok(())
        };
        f.cover(5, || 7, flush).unwrap();
        assert_eq!(runs.load(SeqCst), 1);
        // marks 1..=7 were written before that flush started
        f.cover(7, || 7, flush).unwrap();
        f.cover(3, || 9, flush).unwrap();
        assert_eq!(runs.load(SeqCst), 1);
        // mark 8 was not
        f.cover(8, || 9, flush).unwrap();
        assert_eq!(runs.load(SeqCst), 2);
        assert_eq!(f.flushed(), 9);
    }

    /// A thread that writes (advances the mark) and waits until it is durable; its flush,
    /// if it leads one, takes `ms`.
    fn writer(
        f: &Arc<SharedFlush>,
        mark: &Arc<AtomicU64>,
        runs: &Arc<AtomicU64>,
        ms: u64,
    ) -> std::thread::JoinHandle<FsResult<()>> {
        let (f, mark, runs) = (f.clone(), mark.clone(), runs.clone());
        std::thread::spawn(move || {
            let need = mark.fetch_add(1, SeqCst) + 1;
            f.cover(
                need,
                || mark.load(SeqCst),
                || {
                    runs.fetch_add(1, SeqCst);
                    std::thread::sleep(Duration::from_millis(ms));
                    Ok(())
                },
            )
        })
    }

    #[test]
    fn waiters_that_arrive_during_a_flush_share_the_next() {
        let f = Arc::new(SharedFlush::new());
        let mark = Arc::new(AtomicU64::new(0));
        let runs = Arc::new(AtomicU64::new(0));
        // a slow first flush, then eight writers write and wait while it runs
        let first = writer(&f, &mark, &runs, 200);
        std::thread::sleep(Duration::from_millis(50));
        let waiters: Vec<_> = (0..8).map(|_| writer(&f, &mark, &runs, 20)).collect();
        first.join().unwrap().unwrap();
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        // the first flush could not cover them (they wrote after it started); one more did
        // (or, on a machine too slow to start the first within 50 ms, the first covered all)
        assert!(runs.load(SeqCst) <= 2, "{} flushes", runs.load(SeqCst));
        assert_eq!(f.flushed(), 9);
    }

    #[test]
    fn a_failed_flush_fails_what_it_covered_and_older_marks() {
        let f = SharedFlush::new();
        assert_eq!(f.cover(4, || 4, || Err(Errno::EIO)), Err(Errno::EIO));
        // an older mark is not proven durable by a later success
        assert_eq!(f.cover(2, || 6, || Ok(())), Err(Errno::EIO));
        // a newer one gets a flush of its own
        f.cover(5, || 6, || Ok(())).unwrap();
        assert_eq!(f.flushed(), 6);
    }
}
