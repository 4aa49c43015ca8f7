//! Raft messages between servers, over their control ports (tarpc; logged in with the peer
//! key, which only servers hold). Each reply is also the target's **acknowledgement**: the
//! leader's heartbeats are appends, so [`Acks`] tells when each server last answered, which
//! is how the leader finds dead ones (openraft 0.9 keeps no such time per follower).

use super::{NodeId, TypeConfig};
use madfs_control::{ControlClient, Login};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::EmptyNode;
use serde::{de::DeserializeOwned, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When each server last answered this one's Raft messages (this one leading), and when
/// each last sent this one entries as the leader (this one following).
#[derive(Clone, Default)]
pub struct Acks(Arc<Mutex<Heard>>);

#[derive(Default)]
struct Heard {
    answered: HashMap<NodeId, Instant>,
    spoke: HashMap<NodeId, Instant>,
}

impl Acks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Heard> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Server `s` answered this one's message.
    pub fn heard(&self, s: NodeId) {
        self.lock().answered.insert(s, Instant::now());
    }

    pub fn last(&self, s: NodeId) -> Option<Instant> {
        self.lock().answered.get(&s).copied()
    }

    /// Leader `s` sent this server entries (or a heartbeat).
    pub fn spoke(&self, s: NodeId) {
        self.lock().spoke.insert(s, Instant::now());
    }

    pub fn last_spoke(&self, s: NodeId) -> Option<Instant> {
        self.lock().spoke.get(&s).copied()
    }
}

/// How this server reaches the others' control ports.
#[derive(Clone)]
pub struct Network {
    pub cluster_file: PathBuf,
    pub login: Arc<Login>,
    pub acks: Acks,
}

impl Network {
    /// Connects to server `target`'s control port (its address from the cluster file).
    async fn connect(&self, target: NodeId, wait: Duration) -> std::io::Result<ControlClient> {
        let f = madfs_rpc::cluster_file::read_partial(&self.cluster_file)?;
        let addr = f
            .servers
            .iter()
            .find(|e| e.id as u64 == target)
            .map(|e| e.control)
            .ok_or_else(|| std::io::Error::other(format!("server {target} not registered")))?;
        match tokio::time::timeout(wait, madfs_control::connect(addr, &self.login)).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(std::io::Error::other(format!("{e:#}"))),
            Err(_) => Err(std::io::Error::other(format!(
                "control port of server {target} ({addr}) did not answer"
            ))),
        }
    }

    /// Sends one Raft message of `kind` to `target` on `client` (connecting first when there
    /// is none); the reply's JSON.
    pub async fn call(
        &self,
        client: &mut Option<ControlClient>,
        target: NodeId,
        kind: &str,
        body: String,
        wait: Duration,
    ) -> std::io::Result<String> {
        let started = Instant::now();
        if client.is_none() {
            *client = Some(self.connect(target, wait).await?);
        }
        let c = client.as_ref().expect("connected above");
        let mut ctx = tarpc::context::current();
        ctx.deadline = Instant::now() + wait.saturating_sub(started.elapsed()).max(MIN_WAIT);
        match c.raft(ctx, kind.to_string(), body).await {
            Ok(Ok(reply)) => {
                self.acks.heard(target);
                Ok(reply)
            }
            Ok(Err(e)) => Err(std::io::Error::other(e)),
            Err(e) => {
                // the connection is given up on: the next message connects again
                *client = None;
                Err(std::io::Error::other(e.to_string()))
            }
        }
    }
}

/// The shortest deadline a message gets.
const MIN_WAIT: Duration = Duration::from_millis(200);

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, _node: &EmptyNode) -> Self::Network {
        Peer {
            net: self.clone(),
            target,
            client: None,
        }
    }
}

/// This server's connection to one other for Raft.
pub struct Peer {
    net: Network,
    target: NodeId,
    client: Option<ControlClient>,
}

impl Peer {
    async fn send<Q: Serialize, A: DeserializeOwned, E>(
        &mut self,
        kind: &str,
        rpc: &Q,
        option: &RPCOption,
    ) -> Result<A, RPCError<NodeId, EmptyNode, E>>
    where
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable = |e: std::io::Error| RPCError::Unreachable(Unreachable::new(&e));
        let body = serde_json::to_string(rpc).map_err(|e| unreachable(e.into()))?;
        let wait = option.hard_ttl();
        let reply = self
            .net
            .call(&mut self.client, self.target, kind, body, wait)
            .await
            .map_err(unreachable)?;
        let r: Result<A, E> = serde_json::from_str(&reply).map_err(|e| unreachable(e.into()))?;
        r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, EmptyNode, RaftError<NodeId>>> {
        self.send("append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, EmptyNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.send("snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, EmptyNode, RaftError<NodeId>>> {
        self.send("vote", &rpc, &option).await
    }
}
