//! Who a connection is (docs/security.md): every connection proves it in its [`Hello`]
//! before its first request, and is served as the identity proved here, whatever its
//! requests say. The keys live beside the cluster file (`madfs_auth::key_path`,
//! `madfs_auth::peer_key_path`); the first server of a new cluster makes them.

use crate::who::{Who, SQUASHED};
use madfs_auth::{munge, Challenge, Key, Purpose};
use madfs_identity::{AuthMode, ClusterIdentity, Owner};
use madfs_proto::{Hello, Proof, Role};
use std::path::{Path, PathBuf};

/// Checks hellos and control logins.
#[derive(Debug)]
pub struct Gate {
    mode: AuthMode,
    owner: Option<Owner>,
    cluster: u64,
    server: u32,
    client_key: Option<Key>,
    peer_key: Key,
    /// Serve clients that prove uid 0 as `nobody` (65534:65534), as NFS's root_squash.
    pub root_squash: bool,
}

/// Where a cluster's keys live: beside its cluster file, or in the data directory of a
/// server started without one.
pub fn key_base(cluster_file: Option<&Path>, data_dir: &Path) -> PathBuf {
    cluster_file
        .map(Path::to_path_buf)
        .unwrap_or_else(|| data_dir.join("cluster"))
}

impl Gate {
    /// The gate of server `server` of cluster `ident`, with the keys beside `base` (made
    /// there if they are not yet: the first server of a new cluster).
    pub fn open(ident: &ClusterIdentity, server: u32, base: &Path) -> anyhow::Result<Gate> {
        let peer_path = madfs_auth::peer_key_path(base);
        let peer_key = Key::load_or_create(&peer_path, None)
            .map_err(|e| anyhow::anyhow!("peer key {}: {e}", peer_path.display()))?;
        let client_key = match ident.auth {
            AuthMode::Key => {
                let path = madfs_auth::key_path(base);
                let owner = ident.owner.map(|o| (o.uid, o.gid));
                Some(
                    Key::load_or_create(&path, owner)
                        .map_err(|e| anyhow::anyhow!("cluster key {}: {e}", path.display()))?,
                )
            }
            _ => None,
        };
        if ident.auth == AuthMode::Munge && !munge::available() {
            anyhow::bail!(
                "the cluster uses MUNGE authentication but libmunge.so.2 is not installed"
            );
        }
        Ok(Gate {
            mode: ident.auth,
            owner: ident.owner,
            cluster: ident.id.0,
            server,
            client_key,
            peer_key,
            root_squash: false,
        })
    }

    /// The user a proxy's hello states, with that user's groups from this host's database.
    fn stated(&self, hello: &Hello<'_>) -> Who {
        Who {
            uid: hello.uid,
            gid: hello.gid,
            groups: madfs_auth::groups_of(hello.uid, hello.gid),
            role: Role::Client,
            set: None,
        }
    }

    /// The cluster's authentication mode.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The peer key (servers' shared secret: also what capabilities are signed with).
    pub fn peer_key(&self) -> &Key {
        &self.peer_key
    }

    /// What `hello`'s proof on connection `conn` (sent `server_nonce`) must cover: this
    /// connection, both nonces, and what the hello states of itself.
    fn challenge(
        &self,
        hello: &Hello<'_>,
        conn: u32,
        server_nonce: &[u8; 32],
    ) -> Option<Challenge> {
        Some(Challenge {
            cluster: self.cluster,
            server: self.server,
            conn,
            server_nonce: *server_nonce,
            client_nonce: hello.nonce.try_into().ok()?,
            stated: madfs_auth::stated(hello.role.code(), hello.uid, hello.gid, hello.set),
        })
    }

    /// A MUNGE-mode server's proof that it is one: a credential of its own user for this
    /// connection's challenge.
    fn munge_proof(c: &Challenge) -> Result<Vec<u8>, String> {
        munge::encode(&c.server_payload())
            .map(String::into_bytes)
            .map_err(|e| format!("the server's own MUNGE credential: {e}"))
    }

    /// Checks `hello` on connection `conn`, which was sent `nonce`: the identity to serve it
    /// as and the server's own proof (key modes), or why it is refused.
    pub fn admit(
        &self,
        hello: &Hello<'_>,
        conn: u32,
        nonce: &[u8; 32],
    ) -> Result<(Who, Vec<u8>), String> {
        let (mut who, proof) = self.admit_unsquashed(hello, conn, nonce)?;
        who.set = hello.set;
        if self.root_squash && who.uid == 0 && who.role == Role::Client {
            let who = Who {
                uid: SQUASHED,
                gid: SQUASHED,
                groups: vec![SQUASHED],
                role: Role::Client,
                set: who.set,
            };
            return Ok((who, proof));
        }
        Ok((who, proof))
    }

    fn admit_unsquashed(
        &self,
        hello: &Hello<'_>,
        conn: u32,
        nonce: &[u8; 32],
    ) -> Result<(Who, Vec<u8>), String> {
        if hello.conn != conn {
            return Err(format!("hello names connection {}, not {conn}", hello.conn));
        }
        let c = self
            .challenge(hello, conn, nonce)
            .ok_or("malformed hello (nonce)")?;
        match (hello.role, &hello.proof, self.mode) {
            (_, Proof::Insecure, AuthMode::Insecure) => Ok((
                Who {
                    uid: hello.uid,
                    gid: hello.gid,
                    // an insecure cluster believes what the client states, groups too
                    groups: if hello.groups.is_empty() {
                        madfs_auth::groups_of(hello.uid, hello.gid)
                    } else {
                        let mut g = hello.groups.clone();
                        g.push(hello.gid);
                        g.sort_unstable();
                        g.dedup();
                        g
                    },
                    role: if hello.role == Role::Peer {
                        Role::Peer
                    } else {
                        Role::Client
                    },
                    set: None,
                },
                Vec::new(),
            )),
            // a proxy: the user it states, once it proved it may state one
            (Role::Proxy, Proof::Key(p), _) => {
                if !self.peer_key.verify(Purpose::Proxy, &c, p) {
                    return Err("a proxy must prove the peer key".into());
                }
                let who = self.stated(hello);
                Ok((who, self.peer_key.prove(Purpose::Server, &c).to_vec()))
            }
            (Role::Proxy, Proof::Munge(cred), AuthMode::Munge) => {
                let d = munge_for(cred, &c)?;
                if d.uid != 0 {
                    return Err(format!("uid {} may not act for other users", d.uid));
                }
                Ok((self.stated(hello), Self::munge_proof(&c)?))
            }
            (Role::Peer, Proof::Key(p), _) => {
                if !self.peer_key.verify(Purpose::Peer, &c, p) {
                    return Err("wrong peer key".into());
                }
                Ok((
                    Who::server().clone(),
                    self.peer_key.prove(Purpose::Server, &c).to_vec(),
                ))
            }
            (Role::Client, Proof::Key(p), AuthMode::Key) => {
                let key = self.client_key.as_ref().ok_or("no cluster key")?;
                if !key.verify(Purpose::Client, &c, p) {
                    return Err("wrong cluster key".into());
                }
                let o = self.owner.unwrap_or_default();
                Ok((
                    Who {
                        uid: o.uid,
                        gid: o.gid,
                        groups: madfs_auth::groups_of(o.uid, o.gid),
                        role: Role::Client,
                        set: None,
                    },
                    key.prove(Purpose::Server, &c).to_vec(),
                ))
            }
            (Role::Client, Proof::Munge(cred), AuthMode::Munge) => {
                let d = munge_for(cred, &c)?;
                Ok((
                    Who {
                        uid: d.uid,
                        gid: d.gid,
                        groups: madfs_auth::groups_of(d.uid, d.gid),
                        role: Role::Client,
                        set: None,
                    },
                    Self::munge_proof(&c)?,
                ))
            }
            (_, proof, mode) => Err(format!(
                "the cluster authenticates with {mode}, the client offered {}",
                match proof {
                    Proof::Insecure => "nothing",
                    Proof::Key(_) => "a key proof",
                    Proof::Munge(_) => "a MUNGE credential",
                }
            )),
        }
    }
}

/// A MUNGE credential checked by munged and made for challenge `c` (whose payload it must
/// carry): what munged says of its maker.
fn munge_for(cred: &str, c: &Challenge) -> Result<munge::Decoded, String> {
    let d = munge::decode(cred).map_err(|e| e.to_string())?;
    if d.payload != c.munge_payload() {
        return Err("MUNGE credential made for another connection".into());
    }
    Ok(d)
}

impl Gate {
    /// Checks a control-port login against the connection's challenge `h`: the peer key, the
    /// cluster key (key mode), a MUNGE credential of root or of this server's user (MUNGE
    /// mode), anything on an insecure cluster.
    /// Checks a control login; `Ok(true)` for a server of the cluster (the peer key, or any
    /// caller of an insecure cluster), `Ok(false)` for an operator.
    pub fn control_login(
        &self,
        h: &madfs_control::Hello,
        proof: &madfs_control::Proof,
    ) -> Result<bool, String> {
        use madfs_control::Proof as P;
        match (proof, self.mode) {
            (_, AuthMode::Insecure) => Ok(true),
            (P::Key { peer, nonce, mac }, mode) => {
                let c = madfs_control::challenge_of(h, *nonce);
                let key = match (peer, mode) {
                    (true, _) => Some(&self.peer_key),
                    (false, AuthMode::Key) => self.client_key.as_ref(),
                    _ => None,
                };
                match key {
                    Some(k) if k.verify(Purpose::Control, &c, mac) => Ok(*peer),
                    _ => Err("wrong key".into()),
                }
            }
            (P::Munge(cred), AuthMode::Munge) => {
                let d = munge_for(cred, &madfs_control::challenge_of(h, [0; 32]))?;
                // SAFETY: plain getter.
                let me = unsafe { libc::geteuid() };
                if d.uid == 0 || d.uid == me {
                    Ok(false)
                } else {
                    Err(format!("uid {} may not control this server", d.uid))
                }
            }
            _ => Err(format!("the cluster authenticates with {}", self.mode)),
        }
    }

    /// The challenge fields of this server (cluster id, server index).
    pub fn cluster_and_server(&self) -> (u64, u32) {
        (self.cluster, self.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One munged for every test of this binary (`MADFS_MUNGE_SOCKET` is process-wide).
    fn munged() -> &'static madfs_cluster::Munged {
        static M: std::sync::OnceLock<madfs_cluster::Munged> = std::sync::OnceLock::new();
        M.get_or_init(|| {
            let m = madfs_cluster::Munged::start().unwrap();
            // SAFETY: set once, before any test of this binary uses MUNGE.
            unsafe { std::env::set_var("MADFS_MUNGE_SOCKET", m.socket()) };
            m
        })
    }

    fn gate(mode: AuthMode) -> (Gate, tempfile::TempDir) {
        let d = tempfile::tempdir().unwrap();
        let mut ident = ClusterIdentity::new(2, 1 << 20, 4096).unwrap();
        ident.auth = mode;
        ident.owner = Some(Owner { uid: 1234, gid: 55 });
        let g = Gate::open(&ident, 1, &d.path().join("cluster")).unwrap();
        (g, d)
    }

    fn hello<'a>(role: Role, proof: Proof<'a>, nonce: &'a [u8]) -> Hello<'a> {
        Hello {
            conn: 9,
            role,
            nonce,
            proof,
            uid: 0,
            gid: 0,
            groups: vec![],
            set: None,
            ticket: 0,
            holder: 0,
            listens: false,
        }
    }

    #[test]
    fn key_mode_serves_the_owner_and_refuses_the_rest() {
        let (g, d) = gate(AuthMode::Key);
        let key = Key::load(&madfs_auth::key_path(&d.path().join("cluster"))).unwrap();
        let sn = [3u8; 32];
        let cn = [4u8; 32];
        let c = g
            .challenge(&hello(Role::Client, Proof::Insecure, &cn), 9, &sn)
            .unwrap();
        let p = key.prove(Purpose::Client, &c);
        let (who, proof) = g
            .admit(&hello(Role::Client, Proof::Key(&p), &cn), 9, &sn)
            .unwrap();
        assert_eq!((who.uid, who.gid, who.role), (1234, 55, Role::Client));
        assert!(key.verify(Purpose::Server, &c, &proof));
        // the same proof for another connection, nonce, or as a peer; no proof; a wrong key
        assert!(g
            .admit(&hello(Role::Client, Proof::Key(&p), &cn), 8, &sn)
            .is_err());
        assert!(g
            .admit(&hello(Role::Client, Proof::Key(&p), &cn), 9, &[5; 32])
            .is_err());
        assert!(g
            .admit(&hello(Role::Peer, Proof::Key(&p), &cn), 9, &sn)
            .is_err());
        assert!(g
            .admit(&hello(Role::Client, Proof::Insecure, &cn), 9, &sn)
            .is_err());
        let other = Key::generate().unwrap().prove(Purpose::Client, &c);
        assert!(g
            .admit(&hello(Role::Client, Proof::Key(&other), &cn), 9, &sn)
            .is_err());
        assert!(g
            .admit(&hello(Role::Client, Proof::Munge("MUNGE:x"), &cn), 9, &sn)
            .is_err());
        // the peer key proves a peer
        let c = g
            .challenge(&hello(Role::Peer, Proof::Insecure, &cn), 9, &sn)
            .unwrap();
        let pk = g.peer_key().prove(Purpose::Peer, &c);
        let (who, _) = g
            .admit(&hello(Role::Peer, Proof::Key(&pk), &cn), 9, &sn)
            .unwrap();
        assert_eq!(who.role, Role::Peer);
    }

    /// With a real munged: a credential is good once, for the connection it was made for.
    #[test]
    fn munge_credentials_are_bound_to_one_connection_and_used_once() {
        if !munge::available() {
            eprintln!("libmunge not installed: skipped");
            return;
        }
        munged();
        let (g, _d) = gate(AuthMode::Munge);
        let sn = [6u8; 32];
        let c = g
            .challenge(&hello(Role::Client, Proof::Insecure, &[1; 32]), 9, &sn)
            .unwrap();
        let cred = munge::encode(&c.munge_payload()).unwrap();
        let h = hello(Role::Client, Proof::Munge(&cred), &[1; 32]);
        // made for connection 9 with nonce `sn`: not good for another
        assert!(g.admit(&h, 8, &sn).is_err());
        let (who, _) = g.admit(&h, 9, &sn).unwrap();
        // SAFETY: plain getter.
        assert_eq!(who.uid, unsafe { libc::getuid() });
        let e = g.admit(&h, 9, &sn).unwrap_err();
        assert!(e.contains("replayed"), "{e}");
        // forged: bytes that are no credential, and a key proof in MUNGE mode
        let forged = cred.replace('A', "B");
        let e = g
            .admit(
                &hello(Role::Client, Proof::Munge(&forged), &[1; 32]),
                9,
                &sn,
            )
            .unwrap_err();
        assert!(e.starts_with("MUNGE"), "{e}");
        assert!(g
            .admit(&hello(Role::Client, Proof::Key(&[0; 32]), &[1; 32]), 9, &sn)
            .is_err());
    }

    /// A proxy states whom it acts for only with root's MUNGE credential or the peer key.
    #[test]
    fn only_root_or_a_server_may_act_for_others() {
        if !munge::available() {
            eprintln!("libmunge not installed: skipped");
            return;
        }
        let m = munged();
        let (g, _d) = gate(AuthMode::Munge);
        let sn = [8u8; 32];
        let mut h = hello(Role::Proxy, Proof::Insecure, &[1; 32]);
        h.uid = 65534;
        h.gid = 65534;
        let c = g.challenge(&h, 9, &sn).unwrap();
        // root's credential made for a client's hello is no proxy's (what a hello states is
        // covered: a relayed credential cannot act for another user)
        let as_client = g
            .challenge(&hello(Role::Client, Proof::Insecure, &[1; 32]), 9, &sn)
            .unwrap();
        let relayed = munge::encode(&as_client.munge_payload()).unwrap();
        h.proof = Proof::Munge(&relayed);
        let e = g.admit(&h, 9, &sn).unwrap_err();
        assert!(e.contains("another connection"), "{e}");
        // root's credential for this hello: served as the user it states
        let cred = munge::encode(&c.munge_payload()).unwrap();
        h.proof = Proof::Munge(&cred);
        let (who, _) = g.admit(&h, 9, &sn).unwrap();
        assert_eq!((who.uid, who.gid, who.role), (65534, 65534, Role::Client));
        // nobody's credential (made by the munge program run as nobody): refused
        let payload = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(payload.path(), c.munge_payload()).unwrap();
        std::fs::set_permissions(
            payload.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "munge"])
            .arg("-S")
            .arg(m.socket())
            .arg("-i")
            .arg(payload.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = String::from_utf8(out.stdout).unwrap();
        h.proof = Proof::Munge(theirs.trim());
        let e = g.admit(&h, 9, &sn).unwrap_err();
        assert!(e.contains("may not act for other users"), "{e}");
        // the peer key may; a client proof may not
        let k = g
            .peer_key()
            .prove(Purpose::Proxy, &g.challenge(&h, 9, &sn).unwrap());
        h.proof = Proof::Key(&k);
        assert_eq!(g.admit(&h, 9, &sn).unwrap().0.uid, 65534);
        let wrong = Key::generate()
            .unwrap()
            .prove(Purpose::Proxy, &g.challenge(&h, 9, &sn).unwrap());
        h.proof = Proof::Key(&wrong);
        assert!(g.admit(&h, 9, &sn).is_err());
        // the peer key's proof for one user is not another's
        h.proof = Proof::Key(&k);
        h.uid = 0;
        assert!(g.admit(&h, 9, &sn).is_err());
    }

    #[test]
    fn insecure_mode_believes_the_hello() {
        let (g, _d) = gate(AuthMode::Insecure);
        let mut h = hello(Role::Client, Proof::Insecure, &[1; 32]);
        h.uid = 77;
        h.gid = 78;
        let (who, _) = g.admit(&h, 9, &[0; 32]).unwrap();
        assert_eq!((who.uid, who.gid), (77, 78));
        // its supplementary groups too
        h.groups = vec![65532, 65531];
        let (who, _) = g.admit(&h, 9, &[0; 32]).unwrap();
        assert_eq!(who.groups, vec![78, 65531, 65532]);
    }
}
