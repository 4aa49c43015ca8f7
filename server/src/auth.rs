//! Who a connection is (docs/security.md): every connection proves it in its [`Hello`]
//! before its first request, and is served as the identity proved here, whatever its
//! requests say. The keys live beside the cluster file (`madfs_auth::key_path`,
//! `madfs_auth::peer_key_path`); the first server of a new cluster makes them.

use crate::ops::Answer;
use madfs_auth::{munge, Challenge, Key, Purpose};
use madfs_identity::{AuthMode, ClusterIdentity, Owner};
use madfs_proto::{Errno, FsResult, Hello, Proof, Request, Role};
use std::path::{Path, PathBuf};

/// The identity a connection is served as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Every group (primary first), from this server's group database.
    pub groups: Vec<u32>,
    /// A client, or another server of the cluster.
    pub role: Role,
    /// The replica set the connection's requests are for (its hello's; `None`: this
    /// server's own). See docs/redundancy.md.
    pub set: Option<u32>,
}

impl Who {
    /// This server itself (its own user, role `Peer`): work a server does on its own behalf.
    pub fn server() -> Who {
        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Who {
            uid,
            gid,
            groups: vec![gid],
            role: Role::Peer,
            set: None,
        }
    }
}

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

/// Who a squashed root is served as.
pub const SQUASHED: u32 = 65534;

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

    fn challenge(
        &self,
        conn: u32,
        server_nonce: &[u8; 32],
        client_nonce: &[u8],
    ) -> Option<Challenge> {
        Some(Challenge {
            cluster: self.cluster,
            server: self.server,
            conn,
            server_nonce: *server_nonce,
            client_nonce: client_nonce.try_into().ok()?,
        })
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
            .challenge(conn, nonce, hello.nonce)
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
                Ok((self.stated(hello), Vec::new()))
            }
            (Role::Peer, Proof::Key(p), _) => {
                if !self.peer_key.verify(Purpose::Peer, &c, p) {
                    return Err("wrong peer key".into());
                }
                Ok((
                    Who::server(),
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
                    Vec::new(),
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

impl crate::ops::Ops {
    /// Executes `req` for `who`: what the request says about its sender is replaced by what
    /// the connection proved (new entries belong to `who`), and requests only servers may
    /// send are refused to clients.
    pub fn execute_as(
        &self,
        who: &Who,
        req: &Request<'_>,
        bulk: &[u8],
        data: &mut [u8],
    ) -> FsResult<Answer> {
        // a request id matters only where a request may be sent again to another server
        let (req, once) = match req {
            Request::Once {
                client,
                seq,
                at,
                req: inner,
            } => (&**inner, Some((*client, *seq, *at))),
            r => (r, None),
        };
        if matches!(req, Request::Once { .. }) {
            return Err(Errno::EINVAL);
        }
        let Some(rep) = &self.replica else {
            self.admits(who, req)?;
            return self.execute_checked(who, req, bulk, data);
        };
        // a replicated cluster: a copy from a primary, or a request this server must be
        // the primary for (docs/redundancy.md)
        if let Request::Replicate {
            set,
            epoch,
            from,
            op,
        } = *req
        {
            return rep.apply(self, who, set, epoch, from, op, bulk);
        }
        match *req {
            Request::Resync {
                set,
                epoch,
                after,
                max_bytes,
                files,
                after_id,
            } => return rep.resync_page(self, who, set, epoch, after, max_bytes, files, after_id),
            Request::ResyncRead { id, pos, len } => {
                if who.role != Role::Peer {
                    return Err(Errno::EPERM);
                }
                let want = (len as usize).min(data.len());
                let n = self.chunks.read_raw(id, pos, &mut data[..want])?;
                return Ok(Answer::Records(vec![(vec![], data[..n].to_vec())], None));
            }
            _ => {}
        }
        use crate::replica::{forward, history};
        let admitted = history::enabled().then(history::now_ns);
        crate::admit::check(req, who.set.unwrap_or(self.id), self.peers.servers())?;
        let target = rep.admit(who, req)?;
        let set = target.as_ref().map(|t| t.set());
        let logged = target.as_ref().map(|t| (t.set(), t.epoch()));
        let r = forward::serving(target, self, || match (once, set) {
            (Some(id), Some(set)) => {
                crate::replica::replay::once(self, set, id, |note| match note {
                    None => self.execute_checked(who, req, bulk, data),
                    Some(note) => self.replayed(who, req, note, bulk, data),
                })
            }
            _ => self.execute_checked(who, req, bulk, data),
        });
        if let (Ok(_), Some(at), Some((set, epoch))) = (&r, admitted, logged) {
            if forward::wrote() {
                history::accepted(set, epoch, self.id, at);
            }
        }
        r
    }

    /// The answer to `req`, sent again after it was applied (its replay record noted `note`):
    /// what it answered then, and the notices to other servers it may not have finished
    /// sending.
    fn replayed(
        &self,
        who: &Who,
        req: &Request<'_>,
        note: crate::replica::replay::Note,
        bulk: &[u8],
        data: &mut [u8],
    ) -> FsResult<Answer> {
        use crate::replica::replay::Note;
        match (note, req) {
            // the file it made, opened as it was then (a capability, an open reference)
            (Note::Created(_), Request::Create { .. }) => {
                let mut again = req.clone();
                if let Request::Create { excl, trunc, .. } = &mut again {
                    (*excl, *trunc) = (false, false);
                }
                match self.execute_checked(who, &again, bulk, data)? {
                    Answer::Created {
                        attr,
                        old_size,
                        cap,
                        ..
                    } => Ok(Answer::Created {
                        attr,
                        existed: false,
                        old_size,
                        cap,
                    }),
                    a => Ok(a),
                }
            }
            (Note::Created(attr), _) => Ok(Answer::Created {
                attr,
                existed: false,
                old_size: 0,
                cap: Default::default(),
            }),
            (Note::Attr(a), Request::Mkdir { path, .. }) => {
                self.dir_changed(path, Some(&a));
                Ok(Answer::Attr(a))
            }
            (Note::Attr(a), Request::Rmdir { path }) => {
                self.dir_changed(path, None);
                Ok(Answer::Attr(a))
            }
            (Note::Attr(a), _) => Ok(Answer::Attr(a)),
            (Note::Offset(o), _) => Ok(Answer::Offset(o)),
            (Note::Renamed, Request::Rename { from, .. }) => self.renamed_again(from),
            (Note::Renamed, _) => Err(Errno::EPROTO),
            (Note::Again, _) => self.execute_checked(who, req, bulk, data),
        }
    }

    fn execute_checked(
        &self,
        who: &Who,
        req: &Request<'_>,
        bulk: &[u8],
        data: &mut [u8],
    ) -> FsResult<Answer> {
        let (uid, gid) = (who.uid, who.gid);
        let owned;
        let req = match *req {
            Request::Create {
                path,
                mode,
                excl,
                trunc,
                access,
                holder,
                ..
            } => {
                owned = Request::Create {
                    path,
                    mode,
                    uid,
                    gid,
                    excl,
                    trunc,
                    access,
                    holder,
                };
                &owned
            }
            Request::Mkdir { path, mode, .. } => {
                owned = Request::Mkdir {
                    path,
                    mode,
                    uid,
                    gid,
                };
                &owned
            }
            Request::Mknod {
                path, mode, rdev, ..
            } => {
                owned = Request::Mknod {
                    path,
                    mode,
                    rdev,
                    uid,
                    gid,
                };
                &owned
            }
            Request::Symlink { path, target, .. } => {
                owned = Request::Symlink {
                    path,
                    target,
                    uid,
                    gid,
                };
                &owned
            }
            Request::Attach { .. }
            | Request::Detach { .. }
            | Request::Settle { .. }
            | Request::Touch { .. }
            | Request::Seal { .. }
            | Request::MoveState { .. }
            | Request::Forget { .. }
            | Request::Moved { .. }
            | Request::Linked { .. }
            | Request::DirSet { .. }
            | Request::DirList { .. }
                if who.role != Role::Peer =>
            {
                return Err(Errno::EPERM);
            }
            _ => req,
        };
        if who.role == Role::Peer {
            return self.execute(req, bulk, data);
        }
        let ans = match self.check(who, req)? {
            Some(changed) => self.execute(&changed, bulk, data)?,
            None => self.execute(req, bulk, data)?,
        };
        // what the request was allowed to do to a file comes back as a capability
        let key = self.peers.key();
        let rw = madfs_proto::ACCESS_R | madfs_proto::ACCESS_W;
        // a symbolic link's target is read (readlink), never written through a capability
        let granted = |a: &madfs_proto::Attr, access: u32| {
            let access = if a.is_link() {
                access & madfs_proto::ACCESS_R
            } else {
                access
            };
            crate::cap::grant(key, a.id, access, uid)
        };
        Ok(match (req, ans) {
            (Request::Open { access, .. }, Answer::Attr(a)) => {
                Answer::Granted(a, granted(&a, *access))
            }
            (
                Request::Create { access, .. },
                Answer::Created {
                    attr,
                    existed,
                    old_size,
                    ..
                },
            ) => {
                let access = if existed { *access } else { rw };
                Answer::Created {
                    attr,
                    existed,
                    old_size,
                    cap: granted(&attr, access),
                }
            }
            // (an unlink grants nothing: the file's bytes are its home server's to drop, and
            // another name of it stays someone else's)
            (
                Request::SetSize {
                    mode: madfs_proto::SizeMode::Exact | madfs_proto::SizeMode::ExactWith(_),
                    ..
                },
                Answer::Attr(a),
            ) => Answer::Granted(a, crate::cap::grant(key, a.id, madfs_proto::ACCESS_W, uid)),
            // a find lists only what the user could reach by listing directory by directory
            (Request::Find { dir, .. }, Answer::Found(paths, scanned, next)) if uid != 0 => {
                let keep = paths
                    .into_iter()
                    .filter(|rel| self.reachable(who, dir, rel))
                    .collect();
                Answer::Found(keep, scanned, next)
            }
            (_, ans) => ans,
        })
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
        }
    }

    #[test]
    fn key_mode_serves_the_owner_and_refuses_the_rest() {
        let (g, d) = gate(AuthMode::Key);
        let key = Key::load(&madfs_auth::key_path(&d.path().join("cluster"))).unwrap();
        let sn = [3u8; 32];
        let cn = [4u8; 32];
        let c = g.challenge(9, &sn, &cn).unwrap();
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
        let c = g.challenge(9, &sn, &[0; 32]).unwrap();
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
        let c = g.challenge(9, &sn, &[0; 32]).unwrap();
        let mut h = hello(Role::Proxy, Proof::Insecure, &[1; 32]);
        h.uid = 65534;
        h.gid = 65534;
        // root's credential: served as the user it states
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
            .prove(Purpose::Proxy, &g.challenge(9, &sn, &[1; 32]).unwrap());
        h.proof = Proof::Key(&k);
        assert_eq!(g.admit(&h, 9, &sn).unwrap().0.uid, 65534);
        let wrong = Key::generate()
            .unwrap()
            .prove(Purpose::Proxy, &g.challenge(9, &sn, &[1; 32]).unwrap());
        h.proof = Proof::Key(&wrong);
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
