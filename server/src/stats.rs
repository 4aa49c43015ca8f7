//! Server counters, served by the control port.

use madfs_control::Stats;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Counters since start.
#[derive(Default)]
pub struct ServerStats {
    requests: Mutex<BTreeMap<&'static str, u64>>,
    /// Error replies.
    pub errors: AtomicU64,
    /// Undecodable frames.
    pub bad_frames: AtomicU64,
    /// Messages with a tag kind no server receives, taken off UCX's queue and dropped.
    pub drained: AtomicU64,
    /// Requests whose connection word was not their connection's secret (dropped unanswered).
    pub forged: AtomicU64,
    /// Connections refused at their hello (or that sent none in time).
    pub refused: AtomicU64,
    /// Write payload bytes.
    pub bytes_in: AtomicU64,
    /// Read payload bytes.
    pub bytes_out: AtomicU64,
    /// Accepted connections.
    pub connections: AtomicU64,
    /// Connections currently in the table.
    pub live_connections: AtomicU64,
    /// Requests parked: their data or their reply took longer than the grace.
    pub parked: AtomicU64,
    /// Half-sent writes dropped: their data did not come in time.
    pub half_sent: AtomicU64,
    /// Late data messages of dropped or refused requests, taken and thrown away.
    pub orphans: AtomicU64,
    /// Requests refused (`EAGAIN`) or kept in their handler: the server's parking limits.
    pub busy: AtomicU64,
    /// Requests over their connection's parking limits (the connection is closed).
    pub over_limit: AtomicU64,
    /// Connections closed by the server: stalled, dead, over their limits, lease run out.
    pub killed: AtomicU64,
    /// Of those, connections whose lease ran out (silent too long).
    pub expired: AtomicU64,
    /// Buffers kept aside because closing a connection did not end a transfer into or out of
    /// them (should stay 0).
    pub stuck: AtomicU64,
    /// TCP connections closed: idle too long, or a request not read in time.
    pub tcp_timeouts: AtomicU64,
    /// fsync batches.
    pub sync_batches: AtomicU64,
    /// fsync requests covered.
    pub sync_requests: AtomicU64,
    /// Time to serve each kind of request (`--metrics`; `server/src/metrics.rs`).
    pub latency: crate::latency::Latency,
    /// While this server catches up (`replica::rejoin`): records and chunk bytes copied.
    resync: Mutex<Option<(u64, u64)>>,
    /// Changes that waited for callbacks, per power of two of microseconds waited.
    revoke_waits: [AtomicU64; REVOKE_BUCKETS],
    /// Leases held (updated by the lease clock and `snapshot`'s caller).
    pub leases_held: AtomicU64,
    /// Slots moved to other servers, and their records and chunk bytes.
    pub moved_slots: AtomicU64,
    pub moved_records: AtomicU64,
    pub moved_bytes: AtomicU64,
}

/// Buckets of [`ServerStats::revoked`]: up to 2^31 µs.
const REVOKE_BUCKETS: usize = 32;

impl ServerStats {
    /// Counts one request of kind `name`.
    pub fn request(&self, name: &'static str) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name)
            .or_default() += 1;
    }

    /// A change waited `d` for the client cache's callbacks.
    pub fn revoked(&self, d: std::time::Duration) {
        let us = d.as_micros().max(1) as u64;
        let k = (64 - us.leading_zeros() as usize).min(REVOKE_BUCKETS - 1);
        self.revoke_waits[k].fetch_add(1, Relaxed);
    }

    /// Catching up: `records` and `bytes` copied so far.
    pub fn resync_progress(&self, records: u64, bytes: u64) {
        *self.resync.lock().unwrap_or_else(|e| e.into_inner()) = Some((records, bytes));
    }

    /// Caught up.
    pub fn resync_done(&self) {
        *self.resync.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The catch-up's progress, while there is one.
    pub fn resync(&self) -> Option<(u64, u64)> {
        *self.resync.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A snapshot for the control port.
    pub fn snapshot(&self) -> Stats {
        Stats {
            requests: self
                .requests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            errors: self.errors.load(Relaxed),
            bad_frames: self.bad_frames.load(Relaxed),
            drained: self.drained.load(Relaxed),
            forged: self.forged.load(Relaxed),
            refused: self.refused.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            bytes_out: self.bytes_out.load(Relaxed),
            connections: self.connections.load(Relaxed),
            live_connections: self.live_connections.load(Relaxed),
            parked: self.parked.load(Relaxed),
            half_sent: self.half_sent.load(Relaxed),
            orphans: self.orphans.load(Relaxed),
            busy: self.busy.load(Relaxed),
            over_limit: self.over_limit.load(Relaxed),
            killed: self.killed.load(Relaxed),
            expired: self.expired.load(Relaxed),
            stuck: self.stuck.load(Relaxed),
            tcp_timeouts: self.tcp_timeouts.load(Relaxed),
            sync_batches: self.sync_batches.load(Relaxed),
            sync_requests: self.sync_requests.load(Relaxed),
            rss_bytes: rss_bytes(),
            revoke_waits: self.revoke_waits.iter().map(|c| c.load(Relaxed)).collect(),
            leases_held: self.leases_held.load(Relaxed),
            moved_slots: self.moved_slots.load(Relaxed),
            moved_records: self.moved_records.load(Relaxed),
            moved_bytes: self.moved_bytes.load(Relaxed),
            held_entries: 0,
            held_chunk_bytes: 0,
        }
    }
}

/// Resident set size of this process.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}
