//! The cluster map: an epoch and each server's state (docs/redundancy.md, "The cluster map").
//! Changed only by committed Raft entries ([`Change`]); everything else reads it.

use madfs_placement::{replicas_among, Layout, MAX_SERVERS, SLOTS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A server's state in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// Serving its replica sets.
    Up,
    /// Taken for dead: answers no client; its replica sets are served by their other members.
    Down,
    /// Back, taking its replica sets' writes, serving nothing until it has caught up.
    Rejoining,
    /// Removed for good (`madfs-ctl remove` of a dead server): no member of any replica set
    /// any more (the ring skips it, [`replicas_among`]), its slots owned by the next member.
    Removed,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Up => "up",
            State::Down => "down",
            State::Rejoining => "rejoining",
            State::Removed => "removed",
        })
    }
}

/// A change of the map: the command of a Raft log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// The server stopped answering (proposed by the Raft leader's watch).
    Down(u32),
    /// The server is back and catching up (asked by the server itself).
    Rejoining(u32),
    /// The server has caught up (asked by the server itself).
    Up(u32),
    /// `slots` are owned by server `to` from now on: the last step of their move
    /// (docs/architecture.md, "Membership changes"), proposed by their owner once `to`
    /// holds everything of them.
    Switch { slots: Vec<u16>, to: u32 },
    /// The server hands all its slots to the others (`madfs-ctl drain`): the target layout
    /// becomes the one without it, which the owners move their slots towards.
    Drain(u32),
    /// A new server, the next id, is a member (`madfs-ctl add`): up, owning nothing; the
    /// target layout gives it its share, which the owners move to it.
    Join(u32),
    /// The server, down, is gone for good (`madfs-ctl remove`, replicated clusters): it
    /// leaves every replica set, its slots go to the next member on the ring (which holds
    /// their second copy), and each member that a set gains this way copies the set from
    /// its primary (`building`) before it counts as one of its copies.
    Remove(u32),
    /// The server has copied every replica set it was building (asked by itself).
    Built(u32),
}

/// The map: raised `epoch` on every change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    pub epoch: u64,
    pub states: Vec<State>,
    /// The cluster's replication factor (fixed; set when the map is loaded).
    #[serde(default)]
    pub r: u32,
    /// Each slot's owner (`Layout::owners`); empty: the initial layout of the servers
    /// (a map made before slots moved, or by a version without layouts in the map).
    #[serde(default)]
    pub owners: Vec<u16>,
    /// The layout slots are being moved towards (empty: none, every slot is where it
    /// belongs).
    #[serde(default)]
    pub target: Vec<u16>,
    /// Members that a replica set gained by a removal and that are still copying it, as
    /// (set, member): they take the set's copies but are none of its copies yet (never its
    /// primary; [`ClusterMap::primary`]).
    #[serde(default)]
    pub building: Vec<(u32, u32)>,
}

impl ClusterMap {
    /// The map of a cluster of `n` servers before any change: every server up, epoch 0.
    pub fn new(n: u32) -> Self {
        ClusterMap {
            epoch: 0,
            states: vec![State::Up; n as usize],
            r: 0,
            owners: Vec::new(),
            target: Vec::new(),
            building: Vec::new(),
        }
    }

    /// Is `s` a member of the cluster (not removed; an id the map does not know is none)?
    pub fn member(&self, s: u32) -> bool {
        (s as usize) < self.states.len() && self.state(s) != State::Removed
    }

    /// The replica set whose first member is `first`, R = `r`: `first` and the next
    /// `r − 1` members on the ring (removed servers skipped).
    pub fn set(&self, first: u32, r: u32) -> impl Iterator<Item = u32> + '_ {
        let n = (self.states.len() as u32).max(1);
        replicas_among(first, n, r, move |s| self.member(s))
    }

    /// The replica sets server `me` is a member of (R = `r`), each named by its first
    /// member (removed servers name none).
    pub fn sets_of(&self, me: u32, r: u32) -> Vec<u32> {
        let n = self.states.len() as u32;
        (0..n)
            .filter(|f| self.member(*f) && self.set(*f, r).any(|m| m == me))
            .collect()
    }

    /// The sets server `s` is still copying after a removal.
    pub fn building_of(&self, s: u32) -> Vec<u32> {
        let b = self.building.iter();
        b.filter(|(_, m)| *m == s).map(|(set, _)| *set).collect()
    }

    /// The layout slots are being moved towards, if a move is under way.
    pub fn target(&self) -> Option<Layout> {
        let n = (self.states.len() as u32).max(1);
        Layout::from_owners(n, &self.target).filter(|t| *t != self.layout())
    }

    /// The next slots server `me` moves (at most `max`, all to one server): the first of
    /// its slots the target gives another server, and the following ones going there.
    pub fn next_moves(&self, me: u32, max: usize) -> Option<(u32, Vec<u16>)> {
        let target = self.target()?;
        let now = self.layout();
        let mut to = None;
        let mut slots = vec![];
        for (s, _, t) in now.moves(&target) {
            if now.owner(s) != me || to.is_some_and(|to| to != t) {
                continue;
            }
            to = Some(t);
            slots.push(s as u16);
            if slots.len() >= max {
                break;
            }
        }
        to.map(|t| (t, slots))
    }

    /// The layout: which server owns each slot.
    pub fn layout(&self) -> Layout {
        let n = (self.states.len() as u32).max(1);
        Layout::from_owners(n, &self.owners).unwrap_or_else(|| Layout::initial(n))
    }

    /// Each server's state as `Reply::Map` has it: 0 up, 1 down, 2 rejoining, 3 removed.
    pub fn state_codes(&self) -> Vec<u8> {
        let code = |s: &State| match s {
            State::Up => 0,
            State::Down => 1,
            State::Rejoining => 2,
            State::Removed => 3,
        };
        self.states.iter().map(code).collect()
    }

    /// The state of server `s` (a server the map does not know is down).
    pub fn state(&self, s: u32) -> State {
        self.states.get(s as usize).copied().unwrap_or(State::Down)
    }

    /// Applies `c`; true (and the epoch raised) if it changed anything. A change that does
    /// not follow from the server's state (up → rejoining, down → up, an unknown server) is
    /// ignored: entries may be proposed twice, or late.
    pub fn apply(&mut self, c: Change) -> bool {
        let (s, to) = match c {
            Change::Down(s) => (s, State::Down),
            Change::Rejoining(s) => (s, State::Rejoining),
            Change::Up(s) => (s, State::Up),
            Change::Switch { slots, to } => return self.switch(&slots, to),
            Change::Drain(s) => return self.drain(s),
            Change::Join(s) => return self.join(s),
            Change::Remove(s) => return self.remove(s),
            Change::Built(s) => {
                let before = self.building.len();
                self.building.retain(|(_, m)| *m != s);
                let changed = self.building.len() != before;
                self.epoch += changed as u64;
                return changed;
            }
        };
        let Some(from) = self.states.get(s as usize).copied() else {
            return false;
        };
        let allowed = matches!(
            (from, to),
            (State::Up, State::Down)
                | (State::Rejoining, State::Down)
                | (State::Down, State::Rejoining)
                | (State::Rejoining, State::Up)
        ) && !(to == State::Down && from == State::Up && self.last_up_of_a_set(s));
        if allowed {
            self.states[s as usize] = to;
            if to == State::Up {
                // (a rejoin copied every set it is a member of: what it was building too)
                self.building.retain(|(_, m)| *m != s);
            }
            self.epoch += 1;
        }
        allowed
    }

    /// Server `s` removed: true (and the epoch raised) if it was down on a replicated
    /// cluster whose other servers are up (one change at a time: a set with a member down
    /// besides could lose its last copy while it is rebuilt), no layout or rebuild under
    /// way, and at least R members stay. Its slots go to the next member, which holds
    /// their other copy; every member a set gains copies it first ([`Self::building`]).
    fn remove(&mut self, s: u32) -> bool {
        let others_up = (0..self.states.len() as u32)
            .filter(|o| *o != s)
            .all(|o| matches!(self.state(o), State::Up | State::Removed));
        let members = (0..self.states.len() as u32)
            .filter(|o| self.member(*o))
            .count() as u32;
        if self.r < 2
            || self.state(s) != State::Down
            || !others_up
            || self.target().is_some()
            || !self.building.is_empty()
            || members <= self.r
        {
            return false;
        }
        let old = self.clone();
        let Some(heir) = old.set(s, 2).nth(1) else {
            return false;
        };
        let now = self.layout();
        let slots: Vec<u16> = (0..SLOTS)
            .filter(|x| now.owner(*x) == s)
            .map(|x| x as u16)
            .collect();
        if !slots.is_empty() {
            let Some(next) = now.switched(&slots, heir) else {
                return false;
            };
            self.owners = next.owners().to_vec();
        }
        self.states[s as usize] = State::Removed;
        // who holds every slot of each set now: the members of each old set its slots come
        // from (the removed server aside); any other member of the new set builds it
        for f in 0..self.states.len() as u32 {
            if !self.member(f) {
                continue;
            }
            let mut holders: Vec<u32> = old.set(f, self.r).filter(|m| *m != s).collect();
            if f == heir && !slots.is_empty() {
                let of_s: Vec<u32> = old.set(s, self.r).collect();
                holders.retain(|m| of_s.contains(m));
            }
            let gained: Vec<u32> = self
                .set(f, self.r)
                .filter(|m| !holders.contains(m))
                .collect();
            self.building.extend(gained.into_iter().map(|m| (f, m)));
        }
        self.epoch += 1;
        true
    }

    /// Slots `slots` owned by `to`: true (and the epoch raised) if one changed owner. A
    /// switch to a server that is not up, or of a replicated cluster (whose slots move with
    /// their replica sets, not built yet), is ignored.
    fn switch(&mut self, slots: &[u16], to: u32) -> bool {
        if self.r >= 2 || self.state(to) != State::Up {
            return false;
        }
        let now = self.layout();
        match now.switched(slots, to) {
            Some(next) if next != now => {
                self.owners = next.owners().to_vec();
                if self.target().is_none() {
                    self.target.clear();
                }
                self.epoch += 1;
                true
            }
            _ => false,
        }
    }

    /// Server `s` is drained: the target layout (the one under way, else the layout)
    /// without it. Ignored on a replicated cluster (not built yet), for a server that owns
    /// nothing there already, or the last one owning slots.
    fn drain(&mut self, s: u32) -> bool {
        if self.r >= 2 || s as usize >= self.states.len() {
            return false;
        }
        let base = self.target().unwrap_or_else(|| self.layout());
        if base.shares()[s as usize] == 0 {
            return false;
        }
        let Some(next) = base.without(s) else {
            return false;
        };
        self.target = next.owners().to_vec();
        self.epoch += 1;
        true
    }

    /// Server `s` joins: true (and the epoch raised) if `s` is the next id. Ignored on a
    /// replicated cluster (its replica sets would change members: not built yet), and past
    /// [`MAX_SERVERS`].
    fn join(&mut self, s: u32) -> bool {
        if self.r >= 2 || s as usize != self.states.len() || s >= MAX_SERVERS {
            return false;
        }
        let base = self.target().unwrap_or_else(|| self.layout());
        // (an empty `owners` is the initial layout of the member count, which is changing)
        self.owners = self.layout().owners().to_vec();
        self.states.push(State::Up);
        self.target = base.joined().owners().to_vec();
        self.epoch += 1;
        true
    }

    /// Is `s` the only member up of a replica set it belongs to? Such a server is never
    /// marked down: if it is dead, its set is unavailable either way; if it is alive (two
    /// servers each finding the other slow to take copies), marking it down would make the
    /// set unavailable for nothing.
    fn last_up_of_a_set(&self, s: u32) -> bool {
        if self.r < 2 {
            return false;
        }
        self.sets_of(s, self.r).into_iter().any(|first| {
            self.set(first, self.r)
                .all(|m| m == s || !self.is_copy(first, m) || self.state(m) != State::Up)
        })
    }

    /// Does member `m` of set `first` hold a whole copy of it (it is building none)?
    fn is_copy(&self, first: u32, m: u32) -> bool {
        !self.building.contains(&(first, m))
    }

    /// The primary of the replica set whose first replica is `first` (R = `r`): its first
    /// member that is up; none if every member is down or rejoining.
    pub fn primary(&self, first: u32, r: u32) -> Option<u32> {
        let mut set = self.set(first, r);
        set.find(|s| self.state(*s) == State::Up && self.is_copy(first, *s))
    }

    /// The members a primary forwards that set's changes to: the other up members and the
    /// rejoining ones.
    pub fn secondaries(&self, first: u32, r: u32) -> Vec<u32> {
        let p = self.primary(first, r);
        self.set(first, r)
            .filter(|s| Some(*s) != p && matches!(self.state(*s), State::Up | State::Rejoining))
            .collect()
    }
}

/// Does server `me`, with map `now`, lead a replica set whose clients may hold leases (of
/// their caches) that another server still up granted, since `prev`, the map it served with
/// before (`None`: none)? A set taken from a primary that is down needs no wait: a primary
/// stops serving (and granting) before it can be marked down, and a replicated cluster's
/// leases end before that ([`crate::replica::lease_cap`]). One taken from a primary still
/// up (a rejoined server taking its sets back) does: the other served until it applied
/// `now`. When epochs were skipped (this server was frozen, or has just started), every led
/// set with another member not down counts.
pub fn takes_over_from_live(prev: Option<&ClusterMap>, now: &ClusterMap, me: u32, r: u32) -> bool {
    let n = now.states.len() as u32;
    let follows = prev.filter(|p| p.epoch == now.epoch || p.epoch + 1 == now.epoch);
    (0..n)
        .filter(|set| now.member(*set) && now.primary(*set, r) == Some(me))
        .any(|set| match follows {
            Some(p) => p
                .primary(set, r)
                .is_some_and(|q| q != me && now.state(q) != State::Down),
            None => {
                now.epoch > 0
                    && now
                        .set(set, r)
                        .any(|m| m != me && !matches!(now.state(m), State::Down | State::Removed))
            }
        })
}

/// The voters of a cluster of `n` servers' Raft group: all of them below 3, the first 3
/// below 5, else the first 5; the others are learners.
pub fn voters(n: u32) -> BTreeSet<u64> {
    let v = match n {
        0..=2 => n,
        3..=4 => 3,
        _ => 5,
    };
    (0..v as u64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_follow_states_and_raise_the_epoch() {
        let mut m = ClusterMap::new(4);
        assert!(!m.apply(Change::Up(1)));
        assert!(!m.apply(Change::Rejoining(1)));
        assert!(!m.apply(Change::Down(9)));
        assert_eq!(m.epoch, 0);
        assert!(m.apply(Change::Down(1)));
        assert!(!m.apply(Change::Down(1)), "twice is once");
        assert!(!m.apply(Change::Up(1)), "back only through rejoining");
        assert!(m.apply(Change::Rejoining(1)));
        assert!(m.apply(Change::Up(1)));
        assert_eq!(m.epoch, 3);
        assert_eq!(m.state(1), State::Up);
    }

    #[test]
    fn primaries_and_secondaries_follow_the_map() {
        let mut m = ClusterMap::new(4);
        assert_eq!(m.primary(3, 2), Some(3));
        assert_eq!(m.secondaries(3, 2), [0]);
        assert_eq!(m.primary(3, 1), Some(3));
        assert!(m.secondaries(3, 1).is_empty());
        m.apply(Change::Down(3));
        assert_eq!(m.primary(3, 2), Some(0));
        assert!(m.secondaries(3, 2).is_empty());
        assert_eq!(m.primary(3, 1), None, "R = 1: nobody else has it");
        m.apply(Change::Rejoining(3));
        // a rejoining member takes the writes but is not primary
        assert_eq!(m.primary(3, 2), Some(0));
        assert_eq!(m.secondaries(3, 2), [3]);
        m.apply(Change::Down(0));
        assert_eq!(m.primary(3, 2), None);
        m.apply(Change::Up(3));
        assert_eq!(m.primary(3, 2), Some(3));
    }

    #[test]
    fn the_last_member_up_of_a_set_is_never_marked_down() {
        let mut m = ClusterMap::new(2);
        m.r = 2;
        assert!(m.apply(Change::Down(1)));
        assert!(
            !m.apply(Change::Down(0)),
            "two servers each finding the other slow"
        );
        let mut m = ClusterMap::new(4);
        m.r = 2;
        assert!(m.apply(Change::Down(1)));
        assert!(
            m.apply(Change::Down(3)),
            "sets {{3, 0}} and {{2, 3}} keep a member"
        );
        assert!(!m.apply(Change::Down(0)), "set {{0, 1}} would have none");
        assert!(!m.apply(Change::Down(2)), "set {{1, 2}} would have none");
    }

    #[test]
    fn a_switch_moves_slots_to_a_server_that_is_up() {
        let mut m = ClusterMap::new(3);
        m.r = 1;
        assert_eq!(m.layout(), Layout::initial(3));
        assert!(m.apply(Change::Switch {
            slots: vec![0, 3],
            to: 2
        }));
        assert_eq!(m.epoch, 1);
        assert_eq!((m.layout().owner(0), m.layout().owner(3)), (2, 2));
        assert_eq!(m.layout().owner(1), 1);
        let again = Change::Switch {
            slots: vec![0],
            to: 2,
        };
        assert!(!m.apply(again), "twice is once");
        assert!(!m.apply(Change::Switch {
            slots: vec![1],
            to: 3
        }));
        assert!(!m.apply(Change::Switch {
            slots: vec![4096],
            to: 0
        }));
        let mut r2 = ClusterMap::new(3);
        r2.r = 2;
        assert!(!r2.apply(Change::Switch {
            slots: vec![0],
            to: 1
        }));
        assert_eq!(m.epoch, 1);
    }

    #[test]
    fn a_drain_sets_a_target_its_owners_move_towards() {
        let mut m = ClusterMap::new(3);
        m.r = 1;
        assert!(m.next_moves(0, 8).is_none());
        assert!(m.apply(Change::Drain(2)));
        assert!(!m.apply(Change::Drain(2)), "drained already");
        assert!(m.next_moves(2, 100_000).is_some());
        assert!(m.next_moves(0, 8).is_none(), "server 0 keeps its slots");
        let mut moved = 0;
        while let Some((to, slots)) = m.next_moves(2, 64) {
            assert!(to < 2 && slots.len() <= 64);
            moved += slots.len();
            assert!(m.apply(Change::Switch { slots, to }));
        }
        assert_eq!(moved, 1365);
        assert_eq!(m.layout().shares()[2], 0);
        assert!(m.target.is_empty(), "reached: none under way");
        assert!(!m.apply(Change::Drain(2)));
        assert!(m.apply(Change::Drain(1)));
        assert!(!m.apply(Change::Drain(0)), "the last server owning slots");
    }

    #[test]
    fn a_join_adds_the_next_server_and_gives_it_its_share() {
        let mut m = ClusterMap::new(3);
        m.r = 1;
        assert!(!m.apply(Change::Join(4)), "the next id only");
        assert!(m.apply(Change::Join(3)));
        assert_eq!((m.states.len(), m.state(3), m.epoch), (4, State::Up, 1));
        assert_eq!(
            m.layout().shares(),
            [1366, 1365, 1365, 0],
            "nothing moved yet"
        );
        assert!(!m.apply(Change::Join(3)), "twice is once");
        assert!(m.next_moves(3, 64).is_none(), "the new server owns nothing");
        let mut moved = 0;
        for from in 0..3 {
            while let Some((to, slots)) = m.next_moves(from, 64) {
                assert_eq!(to, 3);
                moved += slots.len();
                assert!(m.apply(Change::Switch { slots, to }));
            }
        }
        assert_eq!(moved, 1024, "the minimum: 4096 / 4");
        assert_eq!(m.layout().shares(), [1024, 1024, 1024, 1024]);
        assert!(m.target.is_empty());
        // a second join while the first one's moves are under way builds on its target
        assert!(m.apply(Change::Join(4)));
        assert!(m.apply(Change::Join(5)));
        let t = m.target().unwrap();
        let shares = t.shares();
        assert!(shares.iter().all(|c| (682..=683).contains(c)), "{shares:?}");
        // and a drain then takes a server out of that target
        assert!(m.apply(Change::Drain(1)));
        let shares = m.target().unwrap().shares();
        assert_eq!(shares[1], 0);
        assert!(
            shares.iter().all(|c| *c == 0 || (819..=820).contains(c)),
            "{shares:?}"
        );
        let mut r2 = ClusterMap::new(3);
        r2.r = 2;
        assert!(!r2.apply(Change::Join(3)), "replicated: not built");
    }

    #[test]
    fn a_removed_server_leaves_its_sets_and_their_new_members_copy_them() {
        let mut m = ClusterMap::new(4);
        m.r = 2;
        assert!(
            !m.apply(Change::Remove(1)),
            "only a server the map has down"
        );
        assert!(m.apply(Change::Down(1)));
        assert!(m.apply(Change::Remove(1)));
        assert!(!m.apply(Change::Remove(1)), "twice is once");
        assert_eq!(m.state(1), State::Removed);
        assert!(
            !m.apply(Change::Rejoining(1)),
            "a removed server never comes back"
        );
        // its slots go to server 2, which holds their other copy; set 0 is {0, 2} now,
        // which server 2 copies, and set 2 {2, 3}, which gained server 1's slots: 3 copies
        assert_eq!(m.layout().shares(), [1024, 0, 2048, 1024]);
        assert_eq!(m.building, [(0, 2), (2, 3)]);
        assert_eq!(m.set(0, 2).collect::<Vec<_>>(), [0, 2]);
        assert_eq!((m.primary(0, 2), m.secondaries(0, 2)), (Some(0), vec![2]));
        assert_eq!((m.primary(2, 2), m.secondaries(2, 2)), (Some(2), vec![3]));
        assert_eq!((m.sets_of(2, 2), m.building_of(2)), (vec![0, 2], vec![0]));
        // a member still copying is no copy: the set's only one is never marked down
        assert!(!m.apply(Change::Down(0)));
        assert!(!m.apply(Change::Down(2)));
        assert!(m.apply(Change::Built(2)));
        assert!(!m.apply(Change::Built(2)), "twice is once");
        assert!(m.apply(Change::Down(0)), "set 0 has two copies again");
        assert_eq!(m.primary(0, 2), Some(2));
        assert!(
            !m.apply(Change::Remove(0)),
            "one change at a time: 3 is building"
        );
        m.apply(Change::Rejoining(0));
        m.apply(Change::Up(0));
        assert!(m.apply(Change::Built(3)));
        assert!(m.building.is_empty());
        // a second removal: server 3's slots go to 0, and the two sets left copy each other
        assert!(m.apply(Change::Down(3)));
        assert!(m.apply(Change::Remove(3)));
        assert_eq!(m.layout().shares(), [2048, 0, 2048, 0]);
        assert_eq!(m.building, [(0, 2), (2, 0)]);
        m.apply(Change::Built(0));
        m.apply(Change::Built(2));
        assert!(m.apply(Change::Down(2)));
        assert!(!m.apply(Change::Remove(2)), "R members must stay");
        let mut r1 = ClusterMap::new(3);
        r1.r = 1;
        assert!(
            !r1.apply(Change::Remove(1)),
            "unreplicated: nothing to rebuild from"
        );
    }

    #[test]
    fn voters_are_few_and_odd_when_they_can_be() {
        assert_eq!(voters(1).len(), 1);
        assert_eq!(voters(2).len(), 2);
        assert_eq!(voters(4), (0..3).collect());
        assert_eq!(voters(16), (0..5).collect());
    }

    #[test]
    fn a_set_taken_back_from_a_live_primary_waits_out_its_leases() {
        let mut m = ClusterMap::new(3);
        m.r = 2;
        let start = m.clone();
        assert!(!takes_over_from_live(None, &m, 0, 2), "a new cluster");
        assert!(!takes_over_from_live(Some(&start), &m, 0, 2));
        // server 0 dies: server 1 leads set 0, taken from a dead server (no wait)
        m.apply(Change::Down(0));
        let down = m.clone();
        assert!(!takes_over_from_live(Some(&start), &m, 1, 2));
        m.apply(Change::Rejoining(0));
        let rejoining = m.clone();
        assert!(!takes_over_from_live(Some(&down), &m, 1, 2));
        // server 0 is back: it takes set 0 from server 1, which is up and served until now
        m.apply(Change::Up(0));
        assert!(takes_over_from_live(Some(&rejoining), &m, 0, 2));
        assert!(!takes_over_from_live(Some(&rejoining), &m, 1, 2));
        // epochs skipped (a server that slept through them, or just started): it waits
        assert!(takes_over_from_live(Some(&start), &m, 0, 2));
        assert!(takes_over_from_live(None, &m, 0, 2));
    }
}
