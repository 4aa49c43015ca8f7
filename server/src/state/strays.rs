//! Records of slots a server does not own (docs/architecture.md, "Membership changes"): a
//! slot move's copy on its receiver before the switch, and on its old owner after it until
//! it is cleaned. While there may be any, listings, finds and emptiness checks leave out the
//! entries of slots this server does not own (a count here says so), and the receiver of a
//! move in progress is noted with it.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A slot move this server receives.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The sender (the slots' owner).
    pub from: u32,
    pub slots: Vec<u16>,
    /// When its last page came.
    pub last: Instant,
}

/// See the module documentation.
#[derive(Default)]
pub struct Strays {
    /// Reasons this server may hold records of slots it does not own (moves under way,
    /// cleanings due).
    count: AtomicU32,
    incoming: Mutex<Option<Incoming>>,
    /// Whether the store's marker says so (it is written only when this changes).
    marked: std::sync::atomic::AtomicBool,
    /// Receiving: `--move-mib-s` in bytes per second (0: unbounded), the chunk bytes of the
    /// move under way, when it began, and when the next one may (the throttle).
    rate: std::sync::atomic::AtomicU64,
    pace: Mutex<Pace>,
}

#[derive(Default)]
struct Pace {
    bytes: u64,
    began: Option<Instant>,
    next: Option<Instant>,
}

impl Strays {
    /// May this server hold records of slots it does not own?
    pub fn any(&self) -> bool {
        self.count.load(Relaxed) > 0
    }

    /// One more reason (until [`Strays::settled`]).
    pub fn begin(&self) {
        self.count.fetch_add(1, Relaxed);
    }

    /// One reason fewer.
    pub fn settled(&self) {
        let _ = self
            .count
            .fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_sub(1)));
    }

    /// Notes whether the store's marker is set; true if that changes it (the caller
    /// writes the marker then).
    pub fn mark(&self, on: bool) -> bool {
        self.marked.swap(on, Relaxed) != on
    }

    /// The move this server receives, if any.
    pub fn incoming(&self) -> Option<Incoming> {
        self.lock().clone()
    }

    /// Notes a page of a move from `from` of `slots`: true if it is a new one (another
    /// move's, or none was under way).
    pub fn received(&self, from: u32, slots: &[u16]) -> bool {
        let mut g = self.lock();
        let new = g
            .as_ref()
            .is_none_or(|i| i.from != from || i.slots != slots);
        *g = Some(Incoming {
            from,
            slots: slots.to_vec(),
            last: Instant::now(),
        });
        new
    }

    /// The move received is over (switched or given up): the one it was, if any.
    pub fn take_incoming(&self) -> Option<Incoming> {
        self.lock().take()
    }

    /// The throttle of moves received (bytes per second, 0: unbounded).
    pub fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Relaxed);
    }

    /// May a new move be received now? Moves are throttled where they arrive: the chunk
    /// bytes a receiver takes from all its senders together average at most the throttle,
    /// by waiting between moves (their copies themselves run at full speed: the slots are
    /// frozen meanwhile).
    pub fn may_begin(&self) -> bool {
        let mut p = self.paced();
        if p.next.is_some_and(|t| Instant::now() < t) {
            return false;
        }
        *p = Pace {
            began: Some(Instant::now()),
            ..Pace::default()
        };
        true
    }

    /// `bytes` of chunk data of the move under way came.
    pub fn received_bytes(&self, bytes: u64) {
        self.paced().bytes += bytes;
    }

    /// The move received ended: the next may begin once the throttle allows.
    pub fn paced_end(&self) {
        let rate = self.rate.load(Relaxed);
        let mut p = self.paced();
        if let (Some(began), true) = (p.began, rate > 0) {
            let due = Duration::from_secs_f64(p.bytes as f64 / rate as f64);
            p.next = Some(began + due);
        }
    }

    fn paced(&self) -> std::sync::MutexGuard<'_, Pace> {
        self.pace.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Incoming>> {
        self.incoming.lock().unwrap_or_else(|e| e.into_inner())
    }
}
