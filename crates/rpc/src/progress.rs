//! Adaptive UCX progress: spin for a short budget, then sleep on the worker's event fd.
//!
//! Pure busy-polling gives the lowest latency on dedicated cores but collapses (milliseconds
//! per request) when processes outnumber cores; always sleeping costs a wake-up per message.
//! Spinning for a few tens of microseconds catches the reply of a short request on a quiet
//! machine and yields the core quickly on a busy one.

use crate::probe::{Suspicion, Watch};
use async_ucx::ucp::Worker;
use std::future::Future;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Longest sleep on the event fd before progress is tried again anyway (a safety net against
/// a lost wake-up; normally the fd wakes us first).
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// Drives `fut` to completion on the calling thread, progressing `worker` adaptively.
/// Returns `None` if `deadline` passes first (the future is dropped, which cancels its
/// posted receives).
pub fn block_on<F: Future>(
    worker: &Worker,
    fut: F,
    spin: Duration,
    deadline: Instant,
) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let efd = worker.event_fd().ok();
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
        if worker.progress() != 0 {
            idle_since = None;
            continue;
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        let since = *idle_since.get_or_insert(now);
        if now - since < spin {
            // give the core away if someone else wants it (processes may outnumber cores)
            std::thread::yield_now();
            continue;
        }
        if let (Some(fd), Ok(true)) = (efd, worker.arm()) {
            let wait = (deadline - now).min(MAX_SLEEP);
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = wait.as_millis().max(1) as libc::c_int;
            // SAFETY: one valid pollfd; poll only writes `revents`.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
    }
}

/// Waits at most `d` for `worker` to have something to progress (its event fd), then
/// progresses it: what a thread that only waits for incoming messages does.
pub fn sleep(worker: &Worker, d: Duration) {
    if worker.progress() != 0 {
        return;
    }
    match (worker.event_fd(), worker.arm()) {
        (Ok(fd), Ok(true)) => {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = d.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
            // SAFETY: one valid pollfd; poll only writes `revents`.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
        // events are pending already (or the worker cannot sleep: wait a little)
        (Ok(_), Ok(false)) => {}
        _ => std::thread::sleep(d.min(MAX_SLEEP)),
    }
    worker.progress();
}

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
