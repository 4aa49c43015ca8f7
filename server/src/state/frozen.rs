//! Slots frozen for their move (docs/architecture.md, "Membership changes"): while a slot's
//! records and chunks are copied to its new owner, requests for its keys wait (`EAGAIN`,
//! which clients send again after a pause), and the copy starts only once every request
//! admitted before the freeze is over. Each request counts itself in flight in the slots of
//! its keys from admission to its answer: two atomic operations per slot, no lock.

use madfs_placement::SLOTS;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// The slots of one request's keys (at most three, or a list of files' home slots).
#[derive(Debug, Default)]
pub struct Slots {
    few: [u32; 3],
    n: usize,
    more: Vec<u32>,
}

impl Slots {
    /// Adds `slot` (a slot named twice is counted twice, and let go twice).
    pub fn push(&mut self, slot: u32) {
        if self.n < self.few.len() {
            self.few[self.n] = slot;
            self.n += 1;
        } else {
            self.more.push(slot);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.few[..self.n].iter().chain(&self.more).copied()
    }
}

/// The freeze state of every slot of one server.
pub struct Frozen {
    inflight: Box<[AtomicU32]>,
    frozen: Box<[AtomicBool]>,
}

impl Default for Frozen {
    fn default() -> Self {
        Frozen {
            inflight: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
            frozen: (0..SLOTS).map(|_| AtomicBool::new(false)).collect(),
        }
    }
}

/// A request in flight in its slots, until dropped.
pub struct Inside<'a> {
    gate: &'a Frozen,
    slots: Slots,
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        for s in self.slots.iter() {
            self.gate.inflight[s as usize].fetch_sub(1, SeqCst);
        }
    }
}

/// Slots frozen until dropped.
pub struct Freeze<'a> {
    gate: &'a Frozen,
    slots: Vec<u16>,
}

impl Drop for Freeze<'_> {
    fn drop(&mut self) {
        for s in &self.slots {
            self.gate.frozen[*s as usize].store(false, SeqCst);
        }
    }
}

impl Frozen {
    /// A request whose keys are in `slots` enters; `None` (answer `EAGAIN`) when one of
    /// them is frozen.
    pub fn enter(&self, slots: Slots) -> Option<Inside<'_>> {
        let inside = Inside { gate: self, slots };
        for s in inside.slots.iter() {
            self.inflight[s as usize].fetch_add(1, SeqCst);
        }
        // (counted first, then looked: a freeze that set its flag before this load waits
        // for the count; one after it sees the count)
        if inside
            .slots
            .iter()
            .any(|s| self.frozen[s as usize].load(SeqCst))
        {
            return None;
        }
        Some(inside)
    }

    /// Freezes `slots` and waits until no request admitted before is in flight in them
    /// (at most `wait`: `None` then, nothing frozen).
    pub fn freeze(&self, slots: &[u16], wait: Duration) -> Option<Freeze<'_>> {
        let f = Freeze {
            gate: self,
            slots: slots.to_vec(),
        };
        for s in slots {
            self.frozen[*s as usize].store(true, SeqCst);
        }
        let until = Instant::now() + wait;
        let mut pause = Duration::from_micros(50);
        while slots
            .iter()
            .any(|s| self.inflight[*s as usize].load(SeqCst) > 0)
        {
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(v: &[u32]) -> Slots {
        let mut s = Slots::default();
        v.iter().for_each(|x| s.push(*x));
        s
    }

    #[test]
    fn a_freeze_waits_for_requests_inside_and_keeps_new_ones_out() {
        let g = Frozen::default();
        let inside = g.enter(slots(&[1, 2, 2, 3, 4])).expect("nothing frozen");
        assert!(
            g.freeze(&[4], Duration::from_millis(5)).is_none(),
            "a request is inside slot 4"
        );
        assert!(g.enter(slots(&[5])).is_some(), "the failed freeze let go");
        drop(inside);
        let f = g.freeze(&[4, 7], Duration::from_millis(5)).expect("empty");
        assert!(g.enter(slots(&[7])).is_none());
        assert!(g.enter(slots(&[1, 4])).is_none());
        assert!(g.enter(slots(&[1])).is_some());
        drop(f);
        assert!(g.enter(slots(&[1, 4, 7])).is_some());
        assert!(
            g.freeze(&[1, 4, 7], Duration::ZERO).is_some(),
            "counts back to zero"
        );
    }
}
