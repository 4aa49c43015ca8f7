//! Authentication of madfs peers (docs/security.md).
//!
//! - [`Key`]: 32 random bytes in a 0600 file. A cluster has two: the *client key*
//!   (`<cluster file>.key`, key mode: whoever holds it acts as the key owner) and the *peer
//!   key* (`<cluster file>.peer-key`, every mode: servers prove to each other, and to the
//!   control port, that they are servers). Proofs are HMAC-SHA256 (the `hmac` and `sha2`
//!   crates) over a [`Challenge`]: both nonces, the cluster, the server, the connection and
//!   the role, so a proof is good for one connection only.
//! - [`munge`]: MUNGE credentials through the system's libmunge, loaded at run time.
//! - [`groups_of`]: supplementary groups from the server's own group database (NSS).

pub mod munge;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Bytes of a key, a nonce and a proof.
pub const LEN: usize = 32;

/// What a proof is for: the same key never proves one thing for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Purpose {
    /// A client process (key mode).
    Client = 1,
    /// A server connecting to another server.
    Peer = 2,
    /// The server's answer: it holds the key too (mutual authentication).
    Server = 3,
    /// A login on a control port.
    Control = 4,
    /// A trusted proxy stating the user it acts for (peer key).
    Proxy = 5,
}

/// What a proof binds: a proof made for one connection is worthless for any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge {
    /// The cluster's id.
    pub cluster: u64,
    /// The server's index.
    pub server: u32,
    /// The connection id the server gave.
    pub conn: u32,
    /// The server's fresh nonce (sent in its welcome).
    pub server_nonce: [u8; LEN],
    /// The client's fresh nonce (sent with its proof).
    pub client_nonce: [u8; LEN],
    /// What the hello says of itself besides its proof ([`stated`]: the role it claims, the
    /// user and group it states, the replica set it is for): covered by the proof, so that a
    /// proof made for one hello is worthless for another that claims more (a root
    /// credential made for a client is no proxy's for another user).
    pub stated: [u8; 16],
}

/// The `stated` field of a [`Challenge`]: role (as the protocol numbers it), uid, gid and
/// replica set (`u32::MAX`: none).
pub fn stated(role: u8, uid: u32, gid: u32, set: Option<u32>) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0] = role;
    b[4..8].copy_from_slice(&uid.to_le_bytes());
    b[8..12].copy_from_slice(&gid.to_le_bytes());
    b[12..].copy_from_slice(&set.unwrap_or(u32::MAX).to_le_bytes());
    b
}

impl Challenge {
    fn bytes(&self, p: Purpose) -> Vec<u8> {
        let mut m = Vec::with_capacity(16 + 1 + 8 + 4 + 4 + 2 * LEN + 16);
        m.extend_from_slice(b"madfs-auth-v2\0\0\0");
        m.push(p as u8);
        m.extend_from_slice(&self.cluster.to_le_bytes());
        m.extend_from_slice(&self.server.to_le_bytes());
        m.extend_from_slice(&self.conn.to_le_bytes());
        m.extend_from_slice(&self.server_nonce);
        m.extend_from_slice(&self.client_nonce);
        m.extend_from_slice(&self.stated);
        m
    }

    /// The payload a MUNGE credential for this challenge carries (the client nonce is not
    /// part of it: MUNGE itself refuses a replayed credential).
    pub fn munge_payload(&self) -> Vec<u8> {
        let mut c = *self;
        c.client_nonce = [0; LEN];
        c.bytes(Purpose::Client)
    }

    /// The payload of a server's MUNGE credential answering this challenge (MUNGE mode's
    /// proof that the server is one: made by root or the servers' user, for this connection
    /// and this client's nonce).
    pub fn server_payload(&self) -> Vec<u8> {
        self.bytes(Purpose::Server)
    }
}

/// A secret key (with its HMAC state keyed once: a MAC then costs the message's blocks only).
#[derive(Clone)]
pub struct Key([u8; LEN], Hmac<Sha256>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(…)")
    }
}

impl Key {
    /// A fresh random key.
    pub fn generate() -> io::Result<Key> {
        Ok(Key::from_bytes(random()?))
    }

    /// A key from its bytes.
    pub fn from_bytes(b: [u8; LEN]) -> Key {
        // HMAC takes keys of any length
        let mac = <Hmac<Sha256> as Mac>::new_from_slice(&b).expect("HMAC key");
        Key(b, mac)
    }

    /// Reads a key file (64 hex digits). Refused: a symbolic link (the file is opened with
    /// `O_NOFOLLOW`), anything but a regular file, a file that group or others may read or
    /// write (the key would not be a secret), and a file of another user than this process's
    /// (effective uid) or root's — another user may have put it there, with a key of its
    /// own. Root may use any user's key (a root-run tool for a job's cluster, whose key is the
    /// job user's).
    pub fn load(path: &Path) -> io::Result<Key> {
        let me = euid();
        Key::load_owned(path, (me != 0).then_some(&[me, 0]))
    }

    /// [`Key::load`] of a file owned by one of `owners` (`None`: anyone).
    fn load_owned(path: &Path, owners: Option<&[u32]>) -> io::Result<Key> {
        let refused = |why: String| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("key file {} {why}", path.display()),
            )
        };
        // O_NONBLOCK: a FIFO put in its place neither blocks the open nor passes for a key
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => refused("is a symbolic link: refused".into()),
                _ => e,
            })?;
        let meta = f.metadata()?;
        if !meta.file_type().is_file() {
            return Err(refused("is not a regular file: refused".into()));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(refused(format!(
                "has mode {:o}: it must be readable by its owner only (chmod 600)",
                meta.mode() & 0o777
            )));
        }
        if let Some(owners) = owners.filter(|o| !o.contains(&meta.uid())) {
            let mut names: Vec<String> = owners.iter().map(|u| format!("uid {u}")).collect();
            names.dedup();
            return Err(refused(format!(
                "belongs to uid {}, not to {}: another user may have put it there; refused \
                 (remove it, or give it to the key's user)",
                meta.uid(),
                names.join(" or ")
            )));
        }
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        parse_hex(text.trim()).map(Key::from_bytes).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("key file {}: expected 64 hex digits", path.display()),
            )
        })
    }

    /// Writes a new key file (0600; an existing file, or a link, at `path` is an error,
    /// `AlreadyExists`) and gives it to `owner` (uid, gid) when set. The file appears whole:
    /// it is written under a temporary name of its own (random, created with `O_EXCL`: a link
    /// there fails the create, it is never written through) and linked into place (`link(2)`
    /// replaces nothing); a file that took the temporary name's place meanwhile (another user
    /// who may write in the directory) is found out and is an error, so the key at `path` is
    /// the one returned or none. A server starting beside this one never reads half a key.
    pub fn create(path: &Path, owner: Option<(u32, u32)>) -> io::Result<Key> {
        let key = Key::generate()?;
        let tag: String = random::<8>()?.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = with_suffix(path, &format!(".tmp-{tag}"));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| {
                // (not `AlreadyExists`: that would say the key exists)
                io::Error::other(format!("temporary key file {}: {e}", tmp.display()))
            })?;
        let written = (|| {
            let hex: String = key.0.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(f, "{hex}")?;
            f.sync_all()?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
            }
            std::fs::hard_link(&tmp, path)?;
            let (ours, there) = (f.metadata()?, std::fs::symlink_metadata(path)?);
            if (ours.dev(), ours.ino()) != (there.dev(), there.ino()) {
                return Err(io::Error::other(format!(
                    "key file {}: another file took the place of its temporary file {} while it \
                     was written (does another user write in that directory?)",
                    path.display(),
                    tmp.display()
                )));
            }
            Ok(())
        })();
        let _ = std::fs::remove_file(&tmp);
        written.map(|_| key)
    }

    /// The key at `path`, made there first if there is none (`owner` as in [`Key::create`]).
    /// An existing key is taken only if it belongs to the user it would have been given to
    /// (`owner`, else this process's), to this process's user or to root ([`Key::load`]'s
    /// other checks too): a key another user put there first is refused, not served with.
    pub fn load_or_create(path: &Path, owner: Option<(u32, u32)>) -> io::Result<Key> {
        match Key::create(path, owner) {
            Ok(k) => Ok(k),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let me = euid();
                let want = owner.map_or(me, |(uid, _)| uid);
                Key::load_owned(path, Some(&[want, me, 0]))
            }
            Err(e) => Err(e),
        }
    }

    fn mac(&self) -> Hmac<Sha256> {
        self.1.clone()
    }

    /// The proof of `purpose` for challenge `c`.
    pub fn prove(&self, purpose: Purpose, c: &Challenge) -> [u8; LEN] {
        let mut m = self.mac();
        m.update(&c.bytes(purpose));
        m.finalize().into_bytes().into()
    }

    /// Is `proof` this key's proof of `purpose` for `c`? (Constant-time comparison.)
    pub fn verify(&self, purpose: Purpose, c: &Challenge, proof: &[u8]) -> bool {
        let mut m = self.mac();
        m.update(&c.bytes(purpose));
        m.verify_slice(proof).is_ok()
    }

    /// A MAC of `data` under this key (capabilities and other tokens servers check).
    pub fn sign(&self, data: &[u8]) -> [u8; LEN] {
        let mut m = self.mac();
        m.update(data);
        m.finalize().into_bytes().into()
    }

    /// Is `mac` the first `mac.len()` (at least 16) bytes of [`Key::sign`] of `data`?
    /// (Constant-time comparison.)
    pub fn verify_signed(&self, data: &[u8], mac: &[u8]) -> bool {
        if mac.len() < 16 {
            return false;
        }
        let mut m = self.mac();
        m.update(data);
        m.verify_truncated_left(mac).is_ok()
    }
}

fn parse_hex(s: &str) -> Option<[u8; LEN]> {
    if s.len() != 2 * LEN {
        return None;
    }
    let mut out = [0u8; LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The client key of the cluster whose cluster file is `cluster_file`.
pub fn key_path(cluster_file: &Path) -> PathBuf {
    with_suffix(cluster_file, ".key")
}

/// The peer key of the cluster whose cluster file is `cluster_file`.
pub fn peer_key_path(cluster_file: &Path) -> PathBuf {
    with_suffix(cluster_file, ".peer-key")
}

/// This process's effective uid.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn with_suffix(p: &Path, s: &str) -> PathBuf {
    let mut o = p.as_os_str().to_os_string();
    o.push(s);
    PathBuf::from(o)
}

/// `N` random bytes from getrandom(2).
pub fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    let mut got = 0;
    while got < N {
        // SAFETY: writes at most `N - got` bytes into `b[got..]`.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), N - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(b)
}

/// A random non-zero 64-bit number (connection secrets).
pub fn random_u64() -> io::Result<u64> {
    loop {
        let v = u64::from_le_bytes(random()?);
        if v != 0 {
            return Ok(v);
        }
    }
}

/// The primary group of `uid` in this host's user database, if it has an entry.
pub fn primary_gid(uid: u32) -> Option<u32> {
    passwd(uid).map(|(_, gid)| gid)
}

fn passwd(uid: u32) -> Option<(std::ffi::CString, u32)> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: zeroed passwd is a valid out-parameter for getpwuid_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pw`'s strings.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut res) };
    if rc != 0 || res.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded: pw_name is a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) }.to_owned();
    Some((name, pw.pw_gid))
}

/// The groups of `uid` (primary group `gid` first) in this host's group database
/// (getgrouplist(3), through NSS): what a server believes, never what a client says. A uid
/// without a passwd entry has only `gid`.
pub fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    let Some((name, _)) = passwd(uid) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let want = n;
        // SAFETY: `groups` holds `n` entries; getgrouplist writes at most that many and
        // stores the number it has in `n`.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n as usize);
            if let Some(p) = groups.iter().position(|g| *g == gid) {
                groups.remove(p);
            }
            groups.insert(0, gid);
            return groups;
        }
        if n <= want {
            n = want * 2;
        }
        if n > 65536 {
            return vec![gid];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn challenge() -> Challenge {
        Challenge {
            cluster: 7,
            server: 1,
            conn: 3,
            server_nonce: [1; LEN],
            client_nonce: [2; LEN],
            stated: stated(1, 0, 0, None),
        }
    }

    #[test]
    fn proofs_bind_purpose_and_challenge() {
        let k = Key::generate().unwrap();
        let c = challenge();
        let p = k.prove(Purpose::Client, &c);
        assert!(k.verify(Purpose::Client, &c, &p));
        assert!(!k.verify(Purpose::Peer, &c, &p));
        assert!(!k.verify(Purpose::Server, &c, &p));
        for other in [
            Challenge { conn: 4, ..c },
            Challenge {
                stated: stated(5, 1234, 1234, None),
                ..c
            },
            Challenge { server: 2, ..c },
            Challenge { cluster: 8, ..c },
            Challenge {
                server_nonce: [9; LEN],
                ..c
            },
            Challenge {
                client_nonce: [9; LEN],
                ..c
            },
        ] {
            assert!(!k.verify(Purpose::Client, &other, &p));
        }
        assert!(!Key::generate().unwrap().verify(Purpose::Client, &c, &p));
        assert!(!k.verify(Purpose::Client, &c, &p[..31]));
    }

    #[test]
    fn key_files_are_private() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.key");
        let k = Key::create(&p, None).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        let c = challenge();
        assert!(Key::load(&p)
            .unwrap()
            .verify(Purpose::Client, &c, &k.prove(Purpose::Client, &c)));
        assert_eq!(
            Key::create(&p, None).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        let again = Key::load_or_create(&p, None).unwrap();
        assert_eq!(again.0, k.0);
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
        let e = Key::load(&p).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::write(d.path().join("bad"), "zz").unwrap();
        std::fs::set_permissions(
            d.path().join("bad"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        assert!(Key::load(&d.path().join("bad")).is_err());
        assert_eq!(
            key_path(Path::new("/a/cluster")),
            PathBuf::from("/a/cluster.key")
        );
        assert_eq!(
            peer_key_path(Path::new("/a/cluster")),
            PathBuf::from("/a/cluster.peer-key")
        );
    }

    /// A key in a file of its own, readable by its owner only.
    fn key_file(p: &Path) -> Key {
        let k = Key::create(p, None).unwrap();
        assert_eq!(std::fs::metadata(p).unwrap().mode() & 0o777, 0o600);
        k
    }

    #[test]
    fn a_key_is_never_read_through_a_link_or_from_a_fifo() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real.key");
        key_file(&real);
        let link = d.path().join("c.peer-key");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = Key::load(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // a link where a server would make its key: not followed, not loaded
        let e = Key::load_or_create(&link, None).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        // a link to a missing file: nothing is made through it
        let dangling = d.path().join("d.key");
        let target = d.path().join("made-through-a-link");
        std::os::unix::fs::symlink(&target, &dangling).unwrap();
        assert!(Key::load_or_create(&dangling, None).is_err());
        assert!(!target.exists());
        // a FIFO answers at once (a plain open would wait for a writer forever)
        let fifo = d.path().join("f.key");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = fifo.clone();
        std::thread::spawn(move || tx.send(Key::load(&f2).map(drop)));
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("loading a FIFO as a key blocked");
        assert!(r.unwrap_err().to_string().contains("not a regular file"));
    }

    #[test]
    fn a_key_of_another_user_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.peer-key");
        let k = key_file(&p);
        if euid() != 0 {
            eprintln!("the owners part needs root (chown)");
            return;
        }
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        // a server (root) making or taking its own key: not one another user put there
        let e = Key::load_or_create(&p, None).unwrap_err();
        assert!(e.to_string().contains("belongs to uid 65534"), "{e}");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        // the key of a job's user, given to that user (`--owner`): taken
        assert_eq!(
            Key::load_or_create(&p, Some((65534, 65534))).unwrap().0,
            k.0
        );
        // root may use any user's key (a root-run tool for a job's cluster)
        assert_eq!(Key::load(&p).unwrap().0, k.0);
        // a process of another user may not: it reads only its own or root's
        let e = Key::load_owned(&p, Some(&[1234, 0])).unwrap_err();
        assert!(
            e.to_string()
                .contains("belongs to uid 65534, not to uid 1234 or uid 0"),
            "{e}"
        );
        // a key made for a user is that user's, 0600
        let q = d.path().join("c.key");
        Key::create(&q, Some((65534, 65534))).unwrap();
        let m = std::fs::metadata(&q).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (65534, 65534, 0o600));
    }

    #[test]
    fn a_new_key_leaves_no_temporary_file_and_replaces_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.key");
        // what an older madfs's predictable temporary name would have been: left alone
        let old_tmp = with_suffix(&p, &format!(".tmp{}", std::process::id()));
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, &old_tmp).unwrap();
        let k = key_file(&p);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let mut names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let tmp_name = old_tmp.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(names, ["c.key", tmp_name.as_str(), "victim"]);
        // a second create finds the key there (AlreadyExists) and changes nothing
        assert_eq!(
            Key::create(&p, None).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(Key::load(&p).unwrap().0, k.0);
    }

    #[test]
    fn root_has_group_zero() {
        assert_eq!(groups_of(0, 0)[0], 0);
        assert_eq!(groups_of(4_000_000_000, 77), vec![77]);
    }
}
