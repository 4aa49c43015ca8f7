//! Adaptive UCX progress: spin for a short budget, then sleep on the worker's event fd.
//!
//! Pure busy-polling gives the lowest latency on dedicated cores but collapses (milliseconds
//! per request) when processes outnumber cores; always sleeping costs a wake-up per message.
//! Spinning for a few tens of microseconds catches the reply of a short request on a quiet
//! machine and yields the core quickly on a busy one.

use async_ucx::ucp::Worker;
use std::future::Future;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Longest sleep on the event fd before progress is tried again anyway (a safety net against
/// a lost wake-up; normally the fd wakes us first).
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(20);

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
