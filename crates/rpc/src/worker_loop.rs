//! The progress task of a server's UCX worker (a tokio `LocalSet`): [`crate::progress`]'s
//! spin-then-sleep, on the worker's event fd registered with tokio, with the stall watch of
//! [`crate::probe`].

use crate::probe::{Suspicion, Watch};
use crate::progress::MAX_SLEEP;
use async_ucx::ucp::Worker;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Progress task for a tokio `LocalSet` (server side). Runs until `stop()` returns true, or,
/// with a `watch`, until the worker is found stalled (an error for which
/// [`crate::probe::is_stalled`] holds).
pub async fn run(
    worker: Rc<Worker>,
    spin: Duration,
    stop: impl Fn() -> bool,
    watch: Option<Watch>,
) -> std::io::Result<()> {
    use tokio::io::unix::AsyncFd;
    let fd = worker
        .event_fd()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    // SAFETY: the fd is the worker's event fd; `worker` is held by this function for the
    // whole life of `afd`, so the fd stays open and unchanged while it is registered.
    let afd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?;
    let mut idle_since: Option<Instant> = None;
    let mut idle_polls = 0u32;
    let mut suspicion = Suspicion::default();
    let freeze_at = watch.as_ref().and_then(|w| w.freeze_at);
    while !stop() {
        if freeze_at.is_some_and(|t| Instant::now() >= t) {
            // test fault: nothing is received, the worker cannot be armed
            if let Some(w) = &watch {
                suspicion.unarmable(w, Instant::now())?;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        if worker.progress() != 0 {
            // callbacks woke handler tasks: let them run
            idle_since = None;
            idle_polls = 0;
            tokio::task::yield_now().await;
            continue;
        }
        let now = Instant::now();
        let since = *idle_since.get_or_insert(now);
        if now - since < spin {
            std::thread::yield_now();
            // hand the thread to other tasks (IO-thread completions, timers) now and then;
            // a tokio yield costs a driver poll, so not on every spin
            idle_polls += 1;
            if idle_polls.is_multiple_of(8) {
                tokio::task::yield_now().await;
            }
            continue;
        }
        if let Ok(true) = worker.arm() {
            suspicion.clear();
            if let Ok(Ok(mut guard)) = tokio::time::timeout(MAX_SLEEP, afd.readable()).await {
                guard.clear_ready();
            }
        } else if let Some(w) = &watch {
            suspicion.unarmable(w, now)?;
        }
        idle_since = None;
    }
    Ok(())
}
