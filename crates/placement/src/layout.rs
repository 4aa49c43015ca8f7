//! Slots: the unit of placement a membership change moves (docs/architecture.md,
//! "Placement").
//!
//! Every key hashes to one of [`SLOTS`] slots; a [`Layout`] names each slot's owner. The owner
//! of a slot is its metadata server (R = 1) or the first member of its replica set (R ≥ 2:
//! the owner and the next R − 1 servers on the ring, [`crate::replicas`]). A join, a drain or
//! a removal is a new layout that moves only the slots it must: [`Layout::joined`] gives the
//! new server its share taken from the fullest servers, [`Layout::without`] gives a leaving
//! server's slots to the emptiest others, one slot at a time, so every server keeps its share
//! within one slot and exactly the minimum moves (tested below). Jump hashing, used before,
//! cannot remove an arbitrary member; a slot table can, and it is the record a migration
//! walks: one slot after another, each with its own epoch.

use crate::hash64;

/// Number of slots of every cluster: with up to 64 servers every one holds ≥ 64 of them, so
/// the shares differ by at most one slot (≤ 1.6 %), and a slot is small enough to move in
/// one step (1/4096 of the namespace) yet few enough that the whole table is 8 KiB.
pub const SLOTS: u32 = 4096;

/// Most server ids a cluster may have (its first servers and those that joined, drained
/// ones included): each then still owns ≥ 4 slots.
pub const MAX_SERVERS: u32 = 1024;

/// Which server owns each slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Server ids run `0..servers` (a drained server keeps its number and owns no slot).
    servers: u32,
    owners: Box<[u16]>,
}

/// The slot of a 64-bit hash: its position scaled to `0..SLOTS` (Lemire's multiply-shift,
/// which keeps the hash's uniformity without a division).
pub fn slot_of_hash(h: u64) -> u32 {
    ((h as u128 * SLOTS as u128) >> 64) as u32
}

impl Layout {
    /// The layout of a new cluster of `servers` servers: slot *i* on server *i* mod `servers`,
    /// so the shares differ by at most one slot.
    pub fn initial(servers: u32) -> Layout {
        assert!(
            (1..=u16::MAX as u32).contains(&servers),
            "a cluster has 1 to 65535 servers"
        );
        Layout {
            servers,
            owners: (0..SLOTS).map(|i| (i % servers) as u16).collect(),
        }
    }

    /// The number of server ids (members and drained ones alike).
    pub fn servers(&self) -> u32 {
        self.servers
    }

    /// The owner of `slot`.
    #[inline]
    pub fn owner(&self, slot: u32) -> u32 {
        self.owners[(slot % SLOTS) as usize] as u32
    }

    /// How many slots each server owns (index = server id).
    pub fn shares(&self) -> Vec<u32> {
        let mut c = vec![0u32; self.servers as usize];
        for o in self.owners.iter() {
            c[*o as usize] += 1;
        }
        c
    }

    /// The layout after server `self.servers()` joins: it takes ⌊SLOTS / (members + 1)⌋
    /// slots, each from the server that owns the most then (the highest id among equals, its
    /// highest slot), so the others keep their shares within one slot of each other.
    pub fn joined(&self) -> Layout {
        let new = self.servers;
        let mut next = Layout {
            servers: new + 1,
            owners: self.owners.clone(),
        };
        let mut shares = next.shares();
        let members = shares.iter().filter(|c| **c > 0).count() as u32;
        shares.push(0);
        for _ in 0..SLOTS / (members + 1) {
            let (from, _) = shares
                .iter()
                .enumerate()
                .max_by_key(|(i, c)| (**c, *i))
                .expect("a layout has a server");
            let slot = (0..SLOTS)
                .rev()
                .find(|s| next.owner(*s) == from as u32)
                .expect("the fullest server owns a slot");
            next.owners[slot as usize] = new as u16;
            shares[from] -= 1;
            shares[new as usize] += 1;
        }
        next
    }

    /// The layout after server `gone` leaves (drained, or removed when dead): each of its
    /// slots, lowest first, goes to the server that owns the fewest then (the lowest id among
    /// equals). `None` when it is the last server owning slots.
    pub fn without(&self, gone: u32) -> Option<Layout> {
        let mut next = self.clone();
        let mut shares = self.shares();
        if shares
            .iter()
            .enumerate()
            .all(|(i, c)| i as u32 == gone || *c == 0)
        {
            return None;
        }
        for slot in 0..SLOTS {
            if next.owner(slot) != gone {
                continue;
            }
            let (to, _) = shares
                .iter()
                .enumerate()
                .filter(|(i, c)| *i as u32 != gone && **c > 0)
                .min_by_key(|(i, c)| (**c, *i))?;
            next.owners[slot as usize] = to as u16;
            shares[to] += 1;
            shares[gone as usize] -= 1;
        }
        Some(next)
    }

    /// Each slot's owner, slot by slot (what the cluster map keeps and sends).
    pub fn owners(&self) -> &[u16] {
        &self.owners
    }

    /// The layout of `servers` server ids whose slots are owned by `owners` (one per slot);
    /// `None` when that is no layout (another count of slots, an owner out of range, no
    /// server).
    pub fn from_owners(servers: u32, owners: &[u16]) -> Option<Layout> {
        let fits = (1..=u16::MAX as u32).contains(&servers)
            && owners.len() == SLOTS as usize
            && owners.iter().all(|o| (*o as u32) < servers);
        fits.then(|| Layout {
            servers,
            owners: owners.into(),
        })
    }

    /// The layout with `slots` owned by `to` (a slot's move switched); `None` when `to` is
    /// no server of it or a slot is out of range.
    pub fn switched(&self, slots: &[u16], to: u32) -> Option<Layout> {
        if to >= self.servers || slots.iter().any(|s| *s as u32 >= SLOTS) {
            return None;
        }
        let mut next = self.clone();
        for s in slots {
            next.owners[*s as usize] = to as u16;
        }
        Some(next)
    }

    /// The slots whose owner differs between `self` and `to`: (slot, old owner, new owner).
    pub fn moves(&self, to: &Layout) -> Vec<(u32, u32, u32)> {
        (0..SLOTS)
            .filter(|s| self.owner(*s) != to.owner(*s))
            .map(|s| (s, self.owner(s), to.owner(s)))
            .collect()
    }
}

/// The slot of a normalised path (its entry, and the directory table of a directory).
#[inline]
pub fn path_slot(path: &str) -> u32 {
    slot_of_hash(hash64(path.as_bytes(), crate::PATH_SEED))
}

/// The slot of chunk `chunk` ≥ 1 of file `id` (chunk 0 lives in the id's home slot).
#[inline]
pub fn chunk_slot(id: u64, chunk: u64) -> u32 {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&id.to_le_bytes());
    key[8..].copy_from_slice(&chunk.to_le_bytes());
    slot_of_hash(hash64(&key, crate::CHUNK_SEED))
}

/// Bits of a file id that name its home slot (its low bits: [`SLOTS`] = 2¹²).
pub const SLOT_BITS: u32 = 12;

/// Ids a server (or a replicated cluster's replica set) can make: its counter's bound.
pub const ID_COUNTER_END: u64 = 1 << (64 - SLOT_BITS);

/// The home slot of file `id`: its low [`SLOT_BITS`] bits, which the server that made it
/// set to the slot of the path it was created under (so its chunk 0, open references and
/// orphan record start beside its entry and move with that slot).
#[inline]
pub fn home_slot(id: u64) -> u32 {
    (id & (SLOTS as u64 - 1)) as u32
}

/// A file id of home slot `slot` and counter `n` (< [`ID_COUNTER_END`]). The counter takes
/// the high bits, so the ids one server makes grow with time whatever their slots: keys by
/// id (inline chunk 0) stay in creation order in RocksDB, as a phase that reads or removes
/// files in that order wants (with the slot in the high bits, mdtest-hard-read ran at 0.81×
/// and the deletes at 0.75–0.85×: every read landed in another block).
#[inline]
pub fn make_id(slot: u32, n: u64) -> u64 {
    (n << SLOT_BITS) | (slot % SLOTS) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_goes_through_its_owners_and_switches_slots() {
        let l = Layout::initial(3);
        assert_eq!(Layout::from_owners(3, l.owners()), Some(l.clone()));
        assert_eq!(
            Layout::from_owners(2, l.owners()),
            None,
            "owner 2 of 2 servers"
        );
        assert_eq!(Layout::from_owners(3, &l.owners()[1..]), None);
        let m = l.switched(&[0, 5, 4095], 1).expect("a server of it");
        assert_eq!(
            (m.owner(0), m.owner(5), m.owner(4095), m.owner(1)),
            (1, 1, 1, 1)
        );
        assert_eq!(m.owner(2), 2);
        assert_eq!(l.moves(&m).len(), 3);
        assert_eq!(l.switched(&[0], 3), None);
        assert_eq!(l.switched(&[4096], 0), None);
    }

    /// Copies of slots a change makes (replicas counted): a slot whose owner changes at R
    /// copies moves to each member of its new replica set that was not in its old one.
    fn copies_moved(a: &Layout, b: &Layout, r: u32) -> usize {
        (0..SLOTS)
            .map(|s| {
                let old: Vec<u32> = crate::replicas(a.owner(s), a.servers(), r).collect();
                crate::replicas(b.owner(s), b.servers(), r)
                    .filter(|m| !old.contains(m))
                    .count()
            })
            .sum()
    }

    fn spread(l: &Layout) -> (u32, u32) {
        let s: Vec<u32> = l.shares().into_iter().filter(|c| *c > 0).collect();
        (*s.iter().min().unwrap(), *s.iter().max().unwrap())
    }

    #[test]
    fn initial_layouts_are_even() {
        for n in [1, 2, 3, 4, 6, 7, 64, 100] {
            let (lo, hi) = spread(&Layout::initial(n));
            assert!(hi - lo <= 1, "{n}: {lo}..{hi}");
        }
    }

    #[test]
    fn a_join_moves_its_share_and_no_more() {
        let mut l = Layout::initial(4);
        for n in 4..12u32 {
            let next = l.joined();
            let moves = l.moves(&next);
            // exactly the newcomer's share, every move to the newcomer
            assert_eq!(moves.len() as u32, SLOTS / (n + 1), "{n} → {}", n + 1);
            assert!(moves.iter().all(|(_, _, to)| *to == n));
            let (lo, hi) = spread(&next);
            assert!(hi - lo <= 1, "{n}: {lo}..{hi}");
            l = next;
        }
    }

    #[test]
    fn a_drain_moves_the_leavers_slots_only() {
        let l = Layout::initial(6);
        for gone in 0..6 {
            let next = l.without(gone).unwrap();
            let moves = l.moves(&next);
            assert_eq!(moves.len() as u32, l.shares()[gone as usize]);
            assert!(moves.iter().all(|(_, from, _)| *from == gone));
            assert_eq!(next.shares()[gone as usize], 0);
            let (lo, hi) = spread(&next);
            assert!(hi - lo <= 1, "without {gone}: {lo}..{hi}");
            // and a later join fills the gap again, evenly
            let (lo, hi) = spread(&next.joined());
            assert!(hi - lo <= 1);
        }
        assert_eq!(Layout::initial(1).without(0), None);
    }

    /// The figures of docs/architecture.md ("Placement"): paths per server and what a join
    /// moves, against the minimum.
    #[test]
    fn join_and_drain_figures() {
        let keys = 200_000u32;
        let per_server = |l: &Layout| {
            let mut c = vec![0u32; l.servers() as usize];
            for i in 0..keys {
                c[l.owner(path_slot(&format!("/mdtest/dir.{}/file.{i}", i % 64))) as usize] += 1;
            }
            c
        };
        let four = Layout::initial(4);
        let five = four.joined();
        let six = five.joined();
        let drained = six.without(2).unwrap();
        for r in [1, 2] {
            let moved = copies_moved(&six, &drained, r);
            eprintln!(
                "R = {r}, drain of 1 of 6: {moved} slot copies moved, its own {}",
                six.shares()[2] * r
            );
        }
        for (name, l) in [
            ("4", &four),
            ("4+1", &five),
            ("4+2", &six),
            ("4+2-1", &drained),
        ] {
            let c: Vec<u32> = per_server(l).into_iter().filter(|c| *c > 0).collect();
            let mean = keys as f64 / c.len() as f64;
            let worst = c
                .iter()
                .map(|x| (*x as f64 / mean - 1.0).abs())
                .fold(0.0, f64::max);
            eprintln!(
                "{name} servers: paths per server {c:?}, worst {:.2} % off the mean",
                worst * 100.0
            );
            assert!(worst < 0.02, "{c:?}");
        }
        // copies moved per join, replicas counted, against the minimum (the newcomer's share)
        for r in [1, 2, 3] {
            for (a, b) in [(&four, &five), (&five, &six)] {
                let moved = copies_moved(a, b, r) as f64;
                let min = (SLOTS * r) as f64 / b.servers() as f64;
                let ratio = moved / min;
                eprintln!(
                    "R = {r}, {} → {} servers: {moved} slot copies moved, minimum {min:.0}: {ratio:.2}×",
                    a.servers(),
                    b.servers()
                );
                assert!(ratio >= 0.99, "r {r}: {ratio}");
                if r == 1 {
                    assert!(ratio < 1.01, "r {r}: {ratio}");
                }
            }
        }
    }

    #[test]
    fn home_slots() {
        assert_eq!(home_slot(make_id(17, 5)), 17);
        assert_eq!(make_id(17, 5) >> SLOT_BITS, 5);
        assert_eq!(1 << SLOT_BITS, SLOTS);
        // one server's ids grow with its counter, whatever their slots
        assert!(make_id(4095, 5) < make_id(0, 6));
    }
}
