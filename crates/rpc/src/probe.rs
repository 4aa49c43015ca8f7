//! The stall watch of a server's UCX worker (docs/architecture.md, "A stalled receive queue").
//!
//! UCX's shared-memory transport gives each worker one receive FIFO that every local sender
//! writes into: a sender claims a slot, fills it, then marks it written. A sender killed
//! between the claim and the mark leaves a slot that is never marked, and the receiver reads
//! the FIFO in order: nothing behind that slot is ever received again, the FIFO fills and every
//! local sender waits. The worker then never sleeps either (it cannot be armed while the FIFO
//! holds an unread slot), so its progress loop spins and receives nothing.
//!
//! [`Watch`] recognises that state from outside UCX: a worker that has not been armable for a
//! while is sent a [`Probe`] (a message from a worker of a thread of its own, over the same
//! transport). A worker that takes the probe is healthy (it was busy, or had sends pending to
//! a peer that does not read); one that does not take it within as long again is stalled for
//! good, and [`crate::worker_loop::run`] ends with [`Stalled`]. Nothing short of a new worker
//! (the server restarts itself) gets its FIFO moving again.

use crate::progress::block_on;
use async_ucx::ucp::{Context, ErrorMode};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// What [`crate::worker_loop::run`] returns (inside an `io::Error`) when its worker is stalled.
#[derive(Debug)]
pub struct Stalled(pub Duration);

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the UCX worker's receive queue is stalled (no message taken for {:.1} s, a probe \
             not taken): a local peer died in the middle of a send",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for Stalled {}

/// Is `e` the error [`crate::worker_loop::run`] ends with for a stalled worker?
pub fn is_stalled(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Stalled>())
}

/// The probe's message (static: a send given up on may still read it).
static PAYLOAD: [u8; 8] = *b"madfs-pb";

/// A thread with a UCX worker of its own, connected to another worker of this process, that
/// sends it one small message on request.
pub struct Probe {
    tx: mpsc::Sender<()>,
    /// Probes the thread began to send.
    tried: Arc<AtomicU64>,
}

impl Probe {
    /// Starts the thread; `address` is the probed worker's address, `tag` the tag its probes
    /// carry (the probed side takes and counts them).
    pub fn start(ctx: Arc<Context>, address: Vec<u8>, tag: u64) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let tried = Arc::new(AtomicU64::new(0));
        let t = tried.clone();
        std::thread::Builder::new()
            .name("madfs-probe".into())
            .spawn(move || {
                let made = ctx.create_worker().and_then(|w| {
                    // shared memory has no peer failure handling: error mode none
                    let ep = w.connect_addr_bytes(&address, ErrorMode::None)?;
                    Ok((w, ep))
                });
                let (worker, ep) = match made {
                    Ok(v) => {
                        let _ = ready_tx.send(Ok(()));
                        v
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                while rx.recv().is_ok() {
                    t.fetch_add(1, Relaxed);
                    // a send that cannot complete (the probed FIFO full) is given up on: the
                    // request stays with UCX, reading the static payload
                    let deadline = Instant::now() + Duration::from_millis(500);
                    let _ = block_on(
                        &worker,
                        ep.tag_send(tag, &PAYLOAD),
                        Duration::from_micros(20),
                        deadline,
                    );
                }
                // the endpoint is never closed: its peer may be the stalled worker
                std::mem::forget(ep);
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Probe { tx, tried }),
            Ok(Err(e)) => Err(std::io::Error::other(format!("UCX stall probe: {e}"))),
            Err(_) => Err(std::io::Error::other("UCX stall probe: thread ended")),
        }
    }

    /// Asks for one probe (sent by the probe's thread soon after).
    pub fn send(&self) {
        let _ = self.tx.send(());
    }

    /// How many probes the thread began to send.
    pub fn tried(&self) -> u64 {
        self.tried.load(Relaxed)
    }
}

/// How a progress loop watches its worker for a stall.
pub struct Watch {
    pub probe: Probe,
    /// Probes the worker took so far (the drain of [`Probe`]'s tag counts them).
    pub taken: Box<dyn Fn() -> u64>,
    /// How long the worker may stay unarmable before it is probed, and how long the probe
    /// then has to be taken.
    pub after: Duration,
    /// Test fault: from this moment the loop behaves as if its worker were stalled (it
    /// progresses nothing and cannot be armed).
    pub freeze_at: Option<Instant>,
}

/// The watch's state in one progress loop.
#[derive(Default)]
pub(crate) struct Suspicion {
    /// Since when the worker could not be armed (reset by a successful arm or a probe taken).
    since: Option<Instant>,
    /// A probe asked for: when, the probe thread's count before it, the worker's taken count.
    probe: Option<(Instant, u64, u64)>,
}

impl Suspicion {
    /// The worker could be armed: it is not stalled.
    pub(crate) fn clear(&mut self) {
        self.since = None;
        self.probe = None;
    }

    /// The worker could not be armed at `now`: `Err` once it is known stalled.
    pub(crate) fn unarmable(&mut self, w: &Watch, now: Instant) -> std::io::Result<()> {
        let since = *self.since.get_or_insert(now);
        match self.probe {
            None => {
                if now - since >= w.after {
                    self.probe = Some((now, w.probe.tried(), (w.taken)()));
                    w.probe.send();
                }
            }
            Some((at, tried, taken)) => {
                if (w.taken)() != taken {
                    // the probe came through: busy, not stalled
                    self.clear();
                } else if w.probe.tried() == tried {
                    // the probe thread has not run yet (a loaded machine): wait for it
                    self.probe = Some((now, tried, taken));
                } else if now - at >= w.after {
                    return Err(std::io::Error::other(Stalled(now - since)));
                }
            }
        }
        Ok(())
    }
}
