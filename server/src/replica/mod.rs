//! Redundancy (docs/redundancy.md): the cluster map and its Raft group.
//!
//! * [`map`]: the map itself (epoch, each server up, down or rejoining), replica sets'
//!   primaries and secondaries;
//! * [`store`]: the Raft log and the map's state machine, durable in `<data-dir>/raft`;
//! * [`net`]: Raft messages over the servers' control ports, and when each server last
//!   answered;
//! * [`Node`]: this server's member of the group: answers the others' messages, and runs the
//!   duties of the leader (add every server, mark silent ones down);
//! * [`forward`]: primaries, fencing and the copies a primary sends its secondaries;
//! * [`rejoin`]: a server that was marked down catches up, then is up again;
//! * [`replay`]: the replay records of changes that may be sent again;
//! * [`tap`]: what replication sees of the stores' writes;
//! * [`history`]: the accept log fault tests check.

pub mod forward;
pub mod history;
pub mod map;
pub mod net;
pub mod rejoin;
pub mod replay;
pub mod store;
pub mod tap;

use map::{Change, ClusterMap, State};
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{Config, EmptyNode, ServerState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub type NodeId = u64;

/// What applying an entry answers: the map's epoch after it, and whether it changed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Applied {
    pub epoch: u64,
    pub changed: bool,
}

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Change,
        R = Applied,
        NodeId = NodeId,
        Node = EmptyNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;

/// Timing of the map's Raft group and watch.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The leader's heartbeat to every member.
    pub heartbeat: Duration,
    /// A follower that hears no leader for a random time in `election..1.25×election` starts
    /// an election.
    pub election: Duration,
    /// A server that answered none of the leader's messages for this long is marked down.
    pub down_after: Duration,
    /// Bytes per second a rejoining server copies chunk data at (0: unbounded).
    pub resync_rate: u64,
    /// Bytes per second of chunk data a server receives from slot moves, on average (0:
    /// unbounded).
    pub move_rate: u64,
    /// Slots one step of a move freezes and copies together.
    pub move_batch: usize,
}

impl Default for Settings {
    fn default() -> Self {
        // for a loaded 2-core machine: a heartbeat every 200 ms, an election only after
        // 0.8 s of silence, a server down after 1.5 s
        Settings {
            heartbeat: Duration::from_millis(200),
            election: Duration::from_millis(800),
            down_after: Duration::from_millis(1500),
            resync_rate: 200 << 20,
            move_rate: 32 << 20,
            move_batch: 64,
        }
    }
}

/// This server's member of the cluster map's Raft group.
pub struct Node {
    id: u32,
    servers: u32,
    raft: Raft,
    machine: store::MapMachine,
    net: net::Network,
    settings: Settings,
    /// When this server last took the leader's entries, and the leader's commit index then.
    took: std::sync::Mutex<Option<(Instant, u64)>>,
    /// Set when this server took the leader's entries after a lapse of the lease (it was
    /// frozen, starved or cut off, or it just started): the entries it takes then may have
    /// waited in its socket all along, delivered in a burst with an old commit index, so it
    /// is current again only with entries that came after a quiet spell of half a
    /// heartbeat (sent afresh, after the leader heard from it again: by then it has the
    /// map that replaced it, if one did).
    lapsed: std::sync::atomic::AtomicBool,
    /// Set once the map was current ([`Node::ready`]).
    ready: std::sync::atomic::AtomicBool,
}

impl Node {
    /// Starts this server's member (inside the control port's runtime) and its duties.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        id: u32,
        servers: u32,
        replication: u32,
        data_dir: &Path,
        cluster_file: PathBuf,
        settings: Settings,
        on_layout: store::OnLayout,
    ) -> anyhow::Result<Arc<Node>> {
        let db = store::open(data_dir)?;
        let machine = store::MapMachine::load(db.clone(), servers, replication, Some(on_layout))?;
        let login = madfs_control::Login::for_cluster(&cluster_file)?;
        let net = net::Network {
            cluster_file,
            login: Arc::new(login),
            acks: net::Acks::default(),
        };
        let config = Config {
            cluster_name: "madfs-cluster-map".into(),
            heartbeat_interval: settings.heartbeat.as_millis() as u64,
            election_timeout_min: settings.election.as_millis() as u64,
            // (also the leader's lease: votes are refused that long after its last word)
            election_timeout_max: settings.election.as_millis() as u64 * 5 / 4,
            ..Default::default()
        };
        let config = Arc::new(config.validate()?);
        let raft = Raft::new(
            id as u64,
            config,
            net.clone(),
            store::LogStore::new(db),
            machine.clone(),
        )
        .await?;
        let node = Arc::new(Node {
            id,
            servers,
            raft,
            machine,
            net,
            settings,
            took: Default::default(),
            lapsed: std::sync::atomic::AtomicBool::new(true),
            ready: Default::default(),
        });
        tokio::spawn(node.clone().duties());
        Ok(node)
    }

    /// The map as this server applied it.
    pub fn map(&self) -> ClusterMap {
        self.machine.map()
    }

    /// The timing settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Is this server's map current, so that it may serve as a primary? The leader: a
    /// quorum acknowledged it within the lease; any other member: it took the leader's
    /// entries within the lease and applied everything the leader had committed then. The
    /// lease (two thirds of `--down-after-ms`) runs out before the leader may mark this
    /// server down: a server frozen or cut off long enough to be replaced has stopped
    /// serving by then, and serves again only once it knows the map that replaced it.
    pub fn current(&self) -> bool {
        let now = self.current_now();
        if now && !self.ready.load(std::sync::atomic::Ordering::Relaxed) {
            self.ready.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        now
    }

    /// Has this server's map been current once since it started ([`Node::current`])? An
    /// unreplicated server serves from then on: it has learnt the layout that may have
    /// changed while it was away. (One load: every request's admission asks.)
    pub fn ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn current_now(&self) -> bool {
        let lease = self.settings.down_after * 2 / 3;
        let m = self.raft.metrics().borrow().clone();
        if m.state == ServerState::Leader {
            // (a group of one: the leader is its own quorum)
            return self.servers == 1
                || m.millis_since_quorum_ack
                    .is_some_and(|ms| ms < lease.as_millis() as u64);
        }
        if self.lapsed.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        let applied = m.last_applied.map_or(0, |l| l.index);
        match *self.took.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((at, commit)) => at.elapsed() < lease && applied >= commit,
            None => false,
        }
    }

    /// Proposes `slots` owned by server `to` (the switch of their move).
    pub async fn propose_switch(&self, slots: Vec<u16>, to: u32) -> Result<Applied, String> {
        self.propose(Change::Switch { slots, to }, 0).await
    }

    /// Proposes server `s` drained (`madfs-ctl drain`): the epoch of the map that asks
    /// for it.
    pub async fn propose_drain(&self, s: u32) -> Result<u64, String> {
        let m = self.map();
        if m.r >= 2 {
            return Err("draining a server of a replicated cluster is not built yet".into());
        }
        if s as usize >= m.states.len() {
            return Err(format!(
                "no server {s} (the cluster has {})",
                m.states.len()
            ));
        }
        one_at_a_time(&m)?;
        let a = self.propose(Change::Drain(s), 0).await?;
        if !a.changed {
            return Err(format!(
                "server {s} owns no slot in the layout under way, or is the last one that does"
            ));
        }
        Ok(a.epoch)
    }

    /// Proposes server `s` a member (`madfs-ctl add`): the epoch of the map that has it.
    /// It must be the next id and listed in the cluster file (where the others find it).
    pub async fn propose_join(&self, s: u32) -> Result<u64, String> {
        let m = self.map();
        if m.r >= 2 {
            return Err("adding a server to a replicated cluster is not built yet".into());
        }
        let n = m.states.len() as u32;
        if s < n {
            return Err(format!("server {s} is a member already"));
        }
        if s > n {
            return Err(format!("the next server to add is {n}, not {s}"));
        }
        one_at_a_time(&m)?;
        let f = madfs_rpc::cluster_file::read_partial(&self.net.cluster_file)
            .map_err(|e| e.to_string())?;
        if !f.servers.iter().any(|e| e.id == s) {
            return Err(format!(
                "server {s} is not in the cluster file: start it with --join --id {s} first"
            ));
        }
        // (it must answer: else its share would wait on it)
        let mut probe = None;
        self.net
            .call(
                &mut probe,
                s as u64,
                "hello",
                String::new(),
                Duration::from_secs(2),
            )
            .await
            .map_err(|e| format!("server {s} does not answer: {e}"))?;
        let a = self.propose(Change::Join(s), 0).await?;
        if !a.changed {
            return Err(format!("server {s} could not be added"));
        }
        Ok(a.epoch)
    }

    /// Proposes server `s` removed for good (`madfs-ctl remove`): the epoch of the map that
    /// has it. Only a replicated cluster's server that the map has down, while every other
    /// is up and nothing else moves or is rebuilt.
    pub async fn propose_remove(&self, s: u32) -> Result<u64, String> {
        let m = self.map();
        if m.r < 2 {
            return Err(
                "removing a server of an unreplicated cluster would lose what it holds: \
                 drain it while it runs (madfs-ctl drain)"
                    .into(),
            );
        }
        if s as usize >= m.states.len() {
            return Err(format!(
                "no server {s} (the cluster has {})",
                m.states.len()
            ));
        }
        if m.state(s) != State::Down {
            return Err(format!(
                "server {s} is {}: only a server the map has down can be removed",
                m.state(s)
            ));
        }
        if let Some(o) = (0..m.states.len() as u32)
            .find(|o| *o != s && !matches!(m.state(*o), State::Up | State::Removed))
        {
            return Err(format!(
                "server {o} is {} too: remove one server at a time, with the others up",
                m.state(o)
            ));
        }
        one_at_a_time(&m)?;
        if !m.building.is_empty() {
            return Err(format!(
                "replica sets are still being rebuilt ({:?} as (set, server)): ask again once \
                 that is over (madfs-ctl status)",
                m.building
            ));
        }
        let a = self.propose(Change::Remove(s), 0).await?;
        if !a.changed {
            return Err(format!(
                "server {s} could not be removed (fewer than {} servers would stay)",
                m.r + 1
            ));
        }
        Ok(a.epoch)
    }

    /// Proposes server `s` down (a primary whose copies it does not take).
    pub async fn propose_down(&self, s: u32) -> Result<Applied, String> {
        self.propose(Change::Down(s), 0).await
    }

    /// Commits `c` through the leader (`rejoin`: this server rejoining, then up).
    pub async fn propose_change(&self, c: Change) -> Result<Applied, String> {
        self.propose(c, 0).await
    }

    /// The map and the leader, for `madfs-ctl status`.
    pub fn map_status(&self) -> madfs_control::MapStatus {
        let m = self.map();
        madfs_control::MapStatus {
            epoch: m.epoch,
            states: m.states.iter().map(|s| s.to_string()).collect(),
            leader: self
                .raft
                .metrics()
                .borrow()
                .current_leader
                .map(|l| l as u32),
            resync: None,
            shares: m.layout().shares(),
            moving: m.target().map_or(0, |t| m.layout().moves(&t).len() as u32),
            building: m.building.clone(),
        }
    }

    /// Answers another server's Raft message (the control port's `raft` call).
    pub async fn handle(self: Arc<Self>, kind: &str, body: &str) -> Result<String, String> {
        fn json<T: Serialize>(v: &T) -> Result<String, String> {
            serde_json::to_string(v).map_err(|e| e.to_string())
        }
        let bad = |e: serde_json::Error| format!("bad Raft message: {e}");
        match kind {
            "append" => {
                let rpc: AppendEntriesRequest<TypeConfig> =
                    serde_json::from_str(body).map_err(bad)?;
                // heard from the leader: should this server lead next, it knows since when
                // the old one has been silent
                self.net
                    .acks
                    .spoke(rpc.vote.leader_id().voted_for().unwrap_or(u64::MAX));
                let commit = rpc.leader_commit.map_or(0, |l| l.index);
                let at = Instant::now();
                let r = self.raft.append_entries(rpc).await;
                if matches!(r, Ok(openraft::raft::AppendEntriesResponse::Success)) {
                    let lease = self.settings.down_after * 2 / 3;
                    let mut took = self.took.lock().unwrap_or_else(|e| e.into_inner());
                    let quiet = took.map(|(last, _)| at.duration_since(last));
                    if quiet.is_none_or(|q| q >= lease) {
                        self.lapsed.store(true, std::sync::atomic::Ordering::SeqCst);
                    } else if quiet.is_some_and(|q| q >= self.settings.heartbeat / 2) {
                        // entries after a quiet spell, not out of a burst: sent afresh
                        self.lapsed
                            .store(false, std::sync::atomic::Ordering::SeqCst);
                    }
                    *took = Some((at, commit));
                }
                json(&r)
            }
            "vote" => {
                let rpc: VoteRequest<NodeId> = serde_json::from_str(body).map_err(bad)?;
                json(&self.raft.vote(rpc).await)
            }
            "snapshot" => {
                let rpc: InstallSnapshotRequest<TypeConfig> =
                    serde_json::from_str(body).map_err(bad)?;
                json(&self.raft.install_snapshot(rpc).await)
            }
            "propose" => {
                let c: Change = serde_json::from_str(body).map_err(bad)?;
                json(&self.propose(c, 0).await)
            }
            // (a server about to be added: is it there?)
            "hello" => Ok(String::new()),

            _ => Err(format!("unknown Raft message {kind:?}")),
        }
    }

    /// Commits `c` through the leader (this server's Raft, or the leader's, `hops` deep).
    async fn propose(&self, c: Change, hops: u32) -> Result<Applied, String> {
        match self.raft.client_write(c.clone()).await {
            Ok(r) => Ok(r.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                let Some(leader) = f.leader_id.filter(|l| *l != self.id as u64 && hops < 2) else {
                    return Err("no leader".into());
                };
                let body = serde_json::to_string(&c).map_err(|e| e.to_string())?;
                let reply = self
                    .net
                    .call(&mut None, leader, "propose", body, Duration::from_secs(2))
                    .await
                    .map_err(|e| e.to_string())?;
                serde_json::from_str::<Result<Applied, String>>(&reply)
                    .map_err(|e| e.to_string())?
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Runs for the server's life: every heartbeat, the duties of the leader (the first
    /// voter also makes the group once every voter is registered). (A server the map has
    /// down catches up in [`rejoin`].)
    async fn duties(self: Arc<Self>) {
        let mut leading_since: Option<Instant> = None;
        let mut tick = tokio::time::interval(self.settings.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let metrics = self.raft.metrics().borrow().clone();
            if !self.ready() {
                self.current();
            }
            if self.id == 0 && metrics.current_term == 0 && metrics.current_leader.is_none() {
                self.make_group().await;
            }
            if metrics.state == ServerState::Leader {
                let since = *leading_since.get_or_insert_with(Instant::now);
                let members: BTreeSet<NodeId> = metrics
                    .membership_config
                    .membership()
                    .nodes()
                    .map(|(id, _)| *id)
                    .collect();
                let voters: BTreeSet<NodeId> =
                    metrics.membership_config.membership().voter_ids().collect();
                self.lead(since, &members, &voters).await;
            } else {
                leading_since = None;
            }
        }
    }

    /// The first voter makes the group (once; a restarted cluster has it already).
    async fn make_group(&self) {
        let voters = map::voters(self.servers);
        let Ok(f) = madfs_rpc::cluster_file::read_partial(&self.net.cluster_file) else {
            return;
        };
        let registered: BTreeSet<NodeId> = f.servers.iter().map(|e| e.id as u64).collect();
        if !voters.is_subset(&registered) {
            return;
        }
        match self.raft.initialize(voters.clone()).await {
            Ok(()) => tracing::info!("cluster map: Raft group of voters {voters:?} made"),
            Err(e) => tracing::debug!("cluster map: initialize: {e}"),
        }
    }

    /// The leader adds the map's servers that are not members of the group yet (as
    /// learners: the first ones, and those that joined) and marks down the ones that
    /// answered nothing for `down_after`.
    async fn lead(&self, since: Instant, members: &BTreeSet<NodeId>, voters: &BTreeSet<NodeId>) {
        let n = (self.map().states.len() as u32).max(self.servers);
        let map = self.map();
        for s in 0..n as u64 {
            if !members.contains(&s) && map.state(s as u32) != State::Removed {
                match self.raft.add_learner(s, EmptyNode {}, false).await {
                    Ok(_) => tracing::info!("cluster map: server {s} added as a learner"),
                    Err(e) => tracing::debug!("cluster map: add learner {s}: {e}"),
                }
            }
        }
        if map.r < 2 {
            // unreplicated: nobody could take a silent server's keys over
            return;
        }
        if voters
            .iter()
            .any(|v| map.state(*v as u32) == State::Removed)
        {
            self.replace_voters(&map).await;
        }
        for s in 0..self.servers {
            if s == self.id || matches!(map.state(s), State::Down | State::Removed) {
                continue;
            }
            // a server is given `down_after` from when it last answered this one, but at
            // least half of it from this server's first heartbeat as leader (answers to an
            // older leadership may be from long before, and a follower hears no other
            // follower) — except the leader this server followed until shortly before it
            // took over: its silence since it last spoke is real (its death is what made
            // this election), so a dead leader is marked down as soon as a dead follower
            let grace = since
                .checked_sub(self.settings.down_after / 2)
                .unwrap_or(since);
            let answered = self.net.acks.last(s as u64);
            let followed = self
                .net
                .acks
                .last_spoke(s as u64)
                .filter(|t| since.saturating_duration_since(*t) < self.settings.down_after * 2);
            let heard = match followed {
                Some(t) => answered.map_or(t, |a| a.max(t)),
                None => answered.map_or(since, |t| t.max(grace)),
            };
            if heard.elapsed() >= self.settings.down_after {
                tracing::warn!(
                    "cluster map: server {s} answered nothing for {:.1} s: marking it down",
                    heard.elapsed().as_secs_f64()
                );
                if let Err(e) = self.propose(Change::Down(s), 0).await {
                    tracing::warn!("cluster map: server {s} down: {e}");
                }
            }
        }
    }
}

impl Node {
    /// A removed server leaves the Raft group: the voters become the first members (as
    /// many as [`map::voters`] gives their count), so the group keeps its quorum through
    /// the next failure.
    async fn replace_voters(&self, map: &ClusterMap) {
        let members: Vec<NodeId> = (0..map.states.len() as u32)
            .filter(|s| map.member(*s))
            .map(u64::from)
            .collect();
        let k = map::voters(members.len() as u32).len();
        let want: BTreeSet<NodeId> = members.into_iter().take(k).collect();
        match self.raft.change_membership(want.clone(), false).await {
            Ok(_) => tracing::info!("cluster map: voters now {want:?} (a server was removed)"),
            Err(e) => tracing::warn!("cluster map: voters {want:?}: {e}"),
        }
    }
}

/// Refuses a membership change while the slots of another are moving: a server that joins
/// learns the directory table from every other once they have its join, and a directory's
/// record moving between two others meanwhile (a drain) could be missed (docs/architecture.md,
/// "Membership changes").
fn one_at_a_time(m: &ClusterMap) -> Result<(), String> {
    match m.target() {
        Some(t) => Err(format!(
            "another membership change is under way ({} slot(s) left to move): ask again once \
             it is over (madfs-ctl status)",
            m.layout().moves(&t).len()
        )),
        None => Ok(()),
    }
}

/// The longest lease of a client cache a replicated cluster grants (`--cache-lease-ms` is
/// cut to it): with what the server adds ([`crate::state::leases`]: 1/64 and 2 ms) it ends
/// before a third of `down_after`, the time between the moment a primary that went silent
/// stops serving ([`Node::current`]: two thirds of `down_after` after it last took the
/// leader's entries) and the moment it can be marked down. So a set's new primary after a
/// failover has no lease of the dead one to wait out: failover takes no longer with leases.
/// (1.5 s: 435 ms.)
pub fn lease_cap(down_after: Duration) -> Duration {
    (down_after * 7 / 24).saturating_sub(Duration::from_millis(2))
}

/// How long after a map change a server that lost a replica set in it (still up) may go on
/// serving it: until it applies the change, or else until its map is no longer current.
pub fn serving_lag(down_after: Duration) -> Duration {
    down_after * 2 / 3
}

/// The parts of `[from, to)` of file `id`'s chunk file (chunks of `cs` bytes, each at its
/// byte position in the file) whose chunks belong to one of replica sets `sets` in layout
/// `l` (a set is named by its first member: the chunk's placement).
pub fn of_sets(
    id: u64,
    from: u64,
    to: u64,
    cs: u64,
    l: &madfs_placement::Layout,
    sets: &[u32],
) -> Vec<(u64, u64)> {
    madfs_placement::chunk_ranges(from, to, cs, |c| {
        sets.contains(&madfs_placement::chunk_server(id, c, l))
    })
}

#[cfg(test)]
mod set_tests {
    #[test]
    fn a_replicated_lease_ends_before_its_primary_can_be_marked_down() {
        for ms in [100, 300, 1500, 5000] {
            let d = std::time::Duration::from_millis(ms);
            let l = super::lease_cap(d);
            let full = l + l / 64 + std::time::Duration::from_millis(2);
            assert!(full < d / 3, "{ms}: {full:?}");
        }
    }

    use super::of_sets;

    #[test]
    fn a_sets_chunks_are_cut_out_of_a_range() {
        let (id, n, cs) = (0x0002_0000_0001_0523u64, 4, 100);
        let l = &madfs_placement::Layout::initial(n);
        let set_of = |c: u64| madfs_placement::chunk_server(id, c, l);
        let all: Vec<u32> = (0..n).collect();
        assert_eq!(of_sets(id, 50, 1000, cs, l, &all), [(50, 1000)]);
        let s = set_of(3);
        let got = of_sets(id, 0, 1000, cs, l, &[s]);
        assert!(got
            .iter()
            .any(|r| *r == (300, 400) || (r.0 <= 300 && r.1 >= 400)));
        for c in 0..10 {
            let inside = got.iter().any(|(a, b)| *a <= c * cs && (c + 1) * cs <= *b);
            assert_eq!(inside, set_of(c) == s, "chunk {c}");
        }
        assert_eq!(of_sets(id, 10, 10, cs, l, &all), []);
    }
}
