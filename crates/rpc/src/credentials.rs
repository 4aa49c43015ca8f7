//! What a transport proves to each server when it connects (docs/security.md): the
//! [`Hello`] answering a server's [`Welcome`], and the check of the server's
//! [`Admission`].

use madfs_auth::{munge, Challenge, Key, Purpose};
use madfs_identity::{AuthMode, ClusterIdentity};
use madfs_proto::{Admission, Errno, Hello, Proof, Role, Welcome};
use std::path::Path;

/// How a transport authenticates.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// Nothing (a cluster made `--insecure`): the process's uid/gid are stated, believed.
    Insecure,
    /// Key mode: proves the cluster key (served as the key's owner).
    Key(Key),
    /// A server of the cluster: proves the peer key.
    Peer(Key),
    /// MUNGE: a credential of this process per connection.
    Munge,
    /// A trusted proxy acting for user `uid`/`gid` (a root-run FUSE mount opens one
    /// connection per user it serves): proved with root's MUNGE credential (`key: None`) or
    /// the peer key.
    Proxy {
        key: Option<Key>,
        uid: u32,
        gid: u32,
    },
}

/// What a hello needs kept until the admission arrives.
#[derive(Debug)]
pub struct Pending {
    challenge: Challenge,
    bytes: Vec<u8>,
}

impl Pending {
    /// The encoded hello.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Credentials {
    /// A client's credentials for the cluster of `identity`, whose cluster file is
    /// `cluster_file` (key mode reads the key beside it: only its owner can).
    pub fn client(identity: &ClusterIdentity, cluster_file: &Path) -> std::io::Result<Self> {
        match identity.auth {
            AuthMode::Insecure => Ok(Credentials::Insecure),
            AuthMode::Munge => Ok(Credentials::Munge),
            AuthMode::Key => {
                let path = madfs_auth::key_path(cluster_file);
                Key::load(&path).map(Credentials::Key).map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!(
                            "cluster key {}: {e} (a key-mode cluster serves only its key's owner)",
                            path.display()
                        ),
                    )
                })
            }
        }
    }

    /// A server's credentials towards its peers.
    pub fn peer(cluster_file: &Path) -> std::io::Result<Self> {
        Key::load(&madfs_auth::peer_key_path(cluster_file)).map(Credentials::Peer)
    }

    /// The hello answering `w` (from server `server`), for replica set `set`, from lease
    /// holder `holder` (0: none), the connection taking all its callbacks when `listens`.
    pub fn hello(
        &self,
        cluster: u64,
        server: u32,
        w: &Welcome,
        set: Option<u32>,
        (holder, listens): (u64, bool),
    ) -> Result<Pending, Errno> {
        let role = match self {
            Credentials::Peer(_) => Role::Peer,
            Credentials::Proxy { .. } => Role::Proxy,
            _ => Role::Client,
        };
        // SAFETY: plain getters.
        let (uid, gid) = match self {
            Credentials::Proxy { uid, gid, .. } => (*uid, *gid),
            _ => unsafe { (libc::geteuid(), libc::getegid()) },
        };
        let challenge = Challenge {
            cluster,
            server,
            conn: w.conn,
            server_nonce: w.nonce,
            client_nonce: madfs_auth::random().map_err(|_| Errno::EIO)?,
            stated: madfs_auth::stated(role.code(), uid, gid, set),
        };
        let (mac, cred);
        let proof = match self {
            Credentials::Insecure => Proof::Insecure,
            Credentials::Key(k) => {
                mac = k.prove(Purpose::Client, &challenge);
                Proof::Key(&mac)
            }
            Credentials::Peer(k) => {
                mac = k.prove(Purpose::Peer, &challenge);
                Proof::Key(&mac)
            }
            Credentials::Munge | Credentials::Proxy { key: None, .. } => {
                cred = munge::encode(&challenge.munge_payload()).map_err(|e| {
                    tracing::error!("madfs: {e}");
                    Errno::EACCES
                })?;
                Proof::Munge(&cred)
            }
            Credentials::Proxy { key: Some(k), .. } => {
                mac = k.prove(Purpose::Proxy, &challenge);
                Proof::Key(&mac)
            }
        };
        let groups = match self {
            Credentials::Proxy { .. } => Vec::new(),
            _ => supplementary_groups(),
        };
        let hello = Hello {
            conn: w.conn,
            role,
            nonce: &challenge.client_nonce,
            proof,
            uid,
            gid,
            groups,
            set,
            ticket: w.ticket,
            holder,
            listens,
        };
        let bytes = flexbuffers::to_vec(&hello).map_err(|_| Errno::EIO)?;
        Ok(Pending { challenge, bytes })
    }

    /// Checks server `server`'s answer to `pending`: the connection's secret, or the errno
    /// of a refusal (logged with the server's reason). The server proves it is one: in key
    /// modes that it holds the key too; in MUNGE mode with a credential for this connection
    /// made by root (or `servers_uid`, the user the servers run as).
    pub fn admitted_by(
        &self,
        server: u32,
        pending: &Pending,
        answer: &[u8],
        servers_uid: Option<u32>,
    ) -> Result<u64, Errno> {
        let a: Admission = flexbuffers::from_slice(answer).map_err(|_| Errno::EPROTO)?;
        match a {
            Admission::Refused { reason } => {
                tracing::error!("madfs: server {server} refused this client: {reason}");
                Err(Errno::EACCES)
            }
            Admission::Admitted { secret, proof, .. } => {
                let key = match self {
                    Credentials::Key(k)
                    | Credentials::Peer(k)
                    | Credentials::Proxy { key: Some(k), .. } => Some(k),
                    _ => None,
                };
                if let Some(k) = key {
                    if !k.verify(Purpose::Server, &pending.challenge, &proof) {
                        tracing::error!(
                            "madfs: server {server} does not hold the cluster key: refusing it"
                        );
                        return Err(Errno::EACCES);
                    }
                }
                if matches!(
                    self,
                    Credentials::Munge | Credentials::Proxy { key: None, .. }
                ) {
                    let d = std::str::from_utf8(&proof)
                        .map_err(|_| "not a MUNGE credential".to_string())
                        .and_then(|c| munge::decode(c).map_err(|e| e.to_string()));
                    let ok = match &d {
                        Ok(d) => {
                            d.payload == pending.challenge.server_payload()
                                && (d.uid == 0 || Some(d.uid) == servers_uid)
                        }
                        Err(_) => false,
                    };
                    if !ok {
                        tracing::error!(
                            "madfs: server {server} did not prove it is one of the cluster's \
                             servers (a MUNGE credential of root or of the servers' user for \
                             this connection): refusing it"
                        );
                        return Err(Errno::EACCES);
                    }
                }
                Ok(secret)
            }
        }
    }

    /// [`Credentials::admitted_by`] of servers that run as root.
    pub fn admitted(&self, server: u32, pending: &Pending, answer: &[u8]) -> Result<u64, Errno> {
        self.admitted_by(server, pending, answer, None)
    }
}

/// The calling process's supplementary groups (`getgroups`; empty if they cannot be read).
fn supplementary_groups() -> Vec<u32> {
    // SAFETY: a size query, then a buffer of that many entries.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut v = vec![0 as libc::gid_t; n as usize];
    // SAFETY: `v` has room for `n` group ids.
    let m = unsafe { libc::getgroups(n, v.as_mut_ptr()) };
    v.truncate(m.max(0) as usize);
    v
}
