//! The cluster file: the cluster's identity record (a TOML inline table, see the crate
//! documentation), then one line per server, `ID UCX_ADDR CONTROL_ADDR [TCP_ADDR]`, in id
//! order. `TCP_ADDR` is the server's plain-TCP port, used by clients that cannot use UCX (the
//! child of a `fork` whose parent had UCX running).
//!
//! ```text
//! # madfs cluster: ID UCX_ADDR CONTROL_ADDR TCP_ADDR
//! cluster = { id = "5f0c00001234abcd", format = 3, servers = 2, chunk_size = 752128, inline_max = 65536, auth = "key", owner = "1000:1000", replication = 1 }
//! 0 127.0.0.1:41000 127.0.0.1:42000 127.0.0.1:43000
//! 1 127.0.0.1:41001 127.0.0.1:42001 127.0.0.1:43001
//! ```
//! The first server to start writes the identity ([`settle`]); every server then registers
//! its line ([`register`]); both under an exclusive `flock`, written by rename, so a reader
//! never sees half a file. Clients read it from `MADFS_CLUSTER` ([`read`]), which refuses a
//! file without an identity or with another number of servers than the identity says.

use crate::ClusterIdentity;
use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// One server of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerEntry {
    /// Index of the server (placement bucket).
    pub id: u32,
    /// UCX listener address.
    pub ucx: SocketAddr,
    /// tarpc control address.
    pub control: SocketAddr,
    /// Plain-TCP request port (fallback transport), if the server has one.
    pub tcp: Option<SocketAddr>,
}

/// What a cluster file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFile {
    /// The identity line (absent while no server has started, or in a file of an older
    /// madfs).
    pub identity: Option<ClusterIdentity>,
    /// Server lines, sorted by id.
    pub servers: Vec<ServerEntry>,
}

fn bad(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Parses cluster-file text as it may be while servers start (identity optional, any number
/// of servers, registered in any order). No id may appear twice.
pub fn parse(text: &str) -> std::io::Result<ClusterFile> {
    let mut out: Vec<ServerEntry> = Vec::new();
    let mut identity = None;
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if ClusterIdentity::is_line(line) {
            let id = ClusterIdentity::from_line(line)
                .map_err(|e| bad(format!("cluster file line {}: {e}", no + 1)))?;
            if identity.replace(id).is_some() {
                return Err(bad(format!(
                    "cluster file line {}: a second identity line",
                    no + 1
                )));
            }
            continue;
        }
        let e = parse_line(line).map_err(|_| {
            bad(format!(
                "cluster file line {}: expected `ID UCX_ADDR CONTROL_ADDR [TCP_ADDR]`, got {line:?}",
                no + 1
            ))
        })?;
        out.push(e);
    }
    out.sort_by_key(|e| e.id);
    if let Some(w) = out.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(bad(format!(
            "cluster file: server {} is listed twice",
            w[0].id
        )));
    }
    Ok(ClusterFile {
        identity,
        servers: out,
    })
}

/// The identity and servers of a complete cluster file: an identity line, and at least as
/// many servers as it names, ids without gaps (servers that joined later follow the ones the
/// cluster was made with; which of them are members is the cluster map's business). Every
/// error is one line that names the file.
pub fn check(path: &Path, f: ClusterFile) -> std::io::Result<(ClusterIdentity, Vec<ServerEntry>)> {
    let Some(identity) = f.identity else {
        return Err(bad(format!(
            "cluster file {} has no identity line (`cluster = {{ id = ... }}`): it was not written by this madfs's servers",
            path.display()
        )));
    };
    if f.servers.len() < identity.servers as usize {
        return Err(bad(format!(
            "cluster file {} lists {} servers, but cluster {} has {} (are they all started?)",
            path.display(),
            f.servers.len(),
            identity.id,
            identity.servers,
        )));
    }
    for (i, e) in f.servers.iter().enumerate() {
        if e.id as usize != i {
            return Err(bad(format!(
                "cluster file {}: server ids must be 0..n without gaps (found {} at position {i})",
                path.display(),
                e.id
            )));
        }
    }
    Ok((identity, f.servers))
}

/// Reads a complete cluster file (see [`check`]).
pub fn read(path: &Path) -> std::io::Result<(ClusterIdentity, Vec<ServerEntry>)> {
    check(path, read_partial(path)?)
}

/// Reads a cluster file as it may be while servers start.
pub fn read_partial(path: &Path) -> std::io::Result<ClusterFile> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        std::io::Error::new(e.kind(), format!("cluster file {}: {e}", path.display()))
    })?;
    parse(&text).map_err(|e| bad(format!("{}: {e}", path.display())))
}

/// One cluster-file line for `e` (also the content of a server's `address` file).
pub fn line(e: &ServerEntry) -> String {
    match e.tcp {
        Some(t) => format!("{} {} {} {t}", e.id, e.ucx, e.control),
        None => format!("{} {} {}", e.id, e.ucx, e.control),
    }
}

fn render(f: &ClusterFile) -> String {
    let mut s = String::from("# madfs cluster: ID UCX_ADDR CONTROL_ADDR TCP_ADDR\n");
    if let Some(id) = &f.identity {
        s.push_str(&id.to_line());
        s.push('\n');
    }
    for e in &f.servers {
        s.push_str(&format!("{}\n", line(e)));
    }
    s
}

/// This process's effective uid.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Opens `path` with `opts` and `O_NOFOLLOW | O_NONBLOCK` (a FIFO neither blocks nor
/// passes), and refuses what is not a regular file of this process's user or root: the servers write beside a
/// cluster file that may lie in a directory other users can write (a job's directory), where
/// a link or a file of theirs must never be written through or believed.
fn open_own(path: &Path, what: &str, opts: &mut std::fs::OpenOptions) -> std::io::Result<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refused = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{what} {} {why}; refused", path.display()),
        )
    };
    let f = opts
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refused("is a symbolic link".into()),
            _ => std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display())),
        })?;
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        return Err(refused("is not a regular file".into()));
    }
    if m.uid() != euid() && m.uid() != 0 {
        return Err(refused(format!(
            "belongs to uid {}, not to the servers' user (uid {}) or root: another user may \
             have put it there (remove it)",
            m.uid(),
            euid()
        )));
    }
    Ok(f)
}

/// Writes `text` to `path` whole: into a new file of a random name beside it (`O_EXCL`,
/// `O_NOFOLLOW`: a link there fails the create, it is never written through), mode `mode`
/// whatever the umask, then renamed over `path` (a link at `path` is replaced, not followed).
fn replace(path: &Path, text: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tag: String = madfs_auth::random::<8>()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".tmp-{tag}"));
    let tmp = std::path::PathBuf::from(name);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
        .map_err(|e| std::io::Error::new(e.kind(), format!("cluster file {}: {e}", path.display())))
}

/// Runs `change` on the cluster file at `path` (created if missing) under an exclusive lock
/// and writes the result by rename. Lines that do not parse are dropped; an identity line
/// that does not parse is an error (never overwritten). The lock file (`PATH.lock`, 0600)
/// and the cluster file must be regular files of this process's user or root, never links
/// ([`open_own`]); the cluster file is written 0644 (clients read it) under a temporary name
/// of its own ([`replace`]).
fn update<T>(
    path: &Path,
    change: impl FnOnce(&mut ClusterFile) -> std::io::Result<T>,
) -> std::io::Result<T> {
    use std::os::unix::fs::OpenOptionsExt;
    let lock_path = path.with_extension("lock");
    let lock = open_own(
        &lock_path,
        "cluster file lock",
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600),
    )?;
    // SAFETY: flock on an fd we own; released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut text = String::new();
    match open_own(path, "cluster file", std::fs::OpenOptions::new().read(true)) {
        Ok(mut f) => {
            f.read_to_string(&mut text)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // keep other servers' lines even if the set is still incomplete
    let mut file = ClusterFile {
        identity: None,
        servers: vec![],
    };
    for (no, l) in text.lines().enumerate() {
        if ClusterIdentity::is_line(l) {
            file.identity = Some(ClusterIdentity::from_line(l.trim()).map_err(|e| {
                bad(format!(
                    "cluster file {} line {}: {e}",
                    path.display(),
                    no + 1
                ))
            })?);
        } else if let Ok(mut v) = parse_loose(l) {
            file.servers.append(&mut v);
        }
    }
    let out = change(&mut file)?;
    file.servers.sort_by_key(|e| e.id);
    replace(path, render(&file).as_bytes(), 0o644)?;
    Ok(out)
}

/// The identity of the cluster whose file is `path`: the one the file holds, or, when it holds
/// none yet (the first server to start), `proposed`, which is then written into it.
pub fn settle(path: &Path, proposed: &ClusterIdentity) -> std::io::Result<ClusterIdentity> {
    update(path, |f| Ok(*f.identity.get_or_insert(*proposed)))
}

/// Adds or replaces the line of `entry.id` in the cluster file (creating it); the identity
/// line stays as it is.
pub fn register(path: &Path, entry: ServerEntry) -> std::io::Result<()> {
    update(path, |f| {
        f.servers.retain(|e| e.id != entry.id);
        f.servers.push(entry);
        Ok(())
    })
}

fn parse_loose(line: &str) -> std::io::Result<Vec<ServerEntry>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(vec![]);
    }
    parse_line(line).map(|e| vec![e])
}

/// Parses one `ID UCX_ADDR CONTROL_ADDR [TCP_ADDR]` line (e.g. a server's `address` file).
pub fn parse_line(line: &str) -> std::io::Result<ServerEntry> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() == 3 || f.len() == 4 {
        let tcp = match f.get(3) {
            Some(t) => Some(
                t.parse()
                    .map_err(|_| bad(format!("bad TCP address in {line:?}")))?,
            ),
            None => None,
        };
        if let (Ok(id), Ok(ucx), Ok(control)) = (f[0].parse(), f[1].parse(), f[2].parse()) {
            return Ok(ServerEntry {
                id,
                ucx,
                control,
                tcp,
            });
        }
    }
    Err(bad(format!("bad line {line:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_and_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster");
        let e = |id, port: u16| ServerEntry {
            id,
            ucx: format!("127.0.0.1:{port}").parse().unwrap(),
            control: format!("127.0.0.1:{}", port + 1000).parse().unwrap(),
            tcp: (id == 1).then(|| format!("127.0.0.1:{}", port + 2000).parse().unwrap()),
        };
        let id = ClusterIdentity::new(2, 4096, 1024).unwrap();
        register(&p, e(1, 2)).unwrap();
        // the first server to settle writes the identity; later ones get it back
        assert_eq!(settle(&p, &id).unwrap(), id);
        let other = ClusterIdentity::new(2, 4096, 1024).unwrap();
        assert_eq!(settle(&p, &other).unwrap(), id);
        register(&p, e(0, 1)).unwrap();
        register(&p, e(1, 3)).unwrap();
        assert_eq!(read(&p).unwrap(), (id, vec![e(0, 1), e(1, 3)]));
    }

    fn entry(id: u32) -> ServerEntry {
        parse_line(&format!("{id} 127.0.0.1:1 127.0.0.1:2")).unwrap()
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_cluster_file_is_0644_its_lock_0600_and_no_temporary_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster");
        register(&p, entry(0)).unwrap();
        register(&p, entry(1)).unwrap();
        assert_eq!(mode(&p), 0o644);
        assert_eq!(mode(&p.with_extension("lock")), 0o600);
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["cluster", "cluster.lock"]);
    }

    #[test]
    fn nothing_is_written_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let missing = dir.path().join("made-through-a-link");
        let link = |to: &Path, at: &Path| std::os::unix::fs::symlink(to, at).unwrap();

        // the lock: a link to a missing file (made through it) or to a file (locked and
        // kept open through it) is refused
        for to in [&missing, &victim] {
            let p = dir.path().join("a");
            link(to, &p.with_extension("lock"));
            let e = register(&p, entry(0)).unwrap_err().to_string();
            assert!(e.contains("lock") && e.contains("symbolic link"), "{e}");
            assert!(!p.exists());
            std::fs::remove_file(p.with_extension("lock")).unwrap();
        }
        // the temporary file's name an older madfs used (`PATH.tmpPID`): never written to
        let p = dir.path().join("b");
        link(
            &victim,
            &p.with_extension(format!("tmp{}", std::process::id())),
        );
        register(&p, entry(0)).unwrap();
        // the cluster file itself: a link is neither read nor replaced
        let p = dir.path().join("c");
        link(&victim, &p);
        let e = register(&p, entry(0)).unwrap_err().to_string();
        assert!(
            e.contains("cluster file") && e.contains("symbolic link"),
            "{e}"
        );
        assert!(std::fs::symlink_metadata(&p).unwrap().is_symlink());
        assert!(settle(&p, &ClusterIdentity::new(1, 4096, 1024).unwrap()).is_err());

        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(!missing.exists());
    }

    #[test]
    fn a_cluster_file_or_lock_of_another_user_is_refused() {
        if euid() != 0 {
            eprintln!("needs root (chown)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster");
        let mut id = ClusterIdentity::new(1, 4096, 1024).unwrap();
        id.owner = Some(crate::Owner {
            uid: 65534,
            gid: 65534,
        });
        // another user's cluster file, whose identity would make it the cluster's owner
        std::fs::write(&p, format!("{}\n", id.to_line())).unwrap();
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        let e = settle(&p, &ClusterIdentity::new(1, 4096, 1024).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
        assert!(register(&p, entry(0)).is_err());
        assert_eq!(read_partial(&p).unwrap().servers, vec![]);
        // another user's lock
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::chown(p.with_extension("lock"), Some(65534), Some(65534)).unwrap();
        let e = register(&p, entry(0)).unwrap_err().to_string();
        assert!(
            e.contains("lock") && e.contains("belongs to uid 65534"),
            "{e}"
        );
        assert!(!p.exists());
        // root's own are fine
        std::os::unix::fs::chown(p.with_extension("lock"), Some(0), Some(0)).unwrap();
        register(&p, entry(0)).unwrap();
    }

    #[test]
    fn parse_errors_are_clear() {
        assert!(parse("0 127.0.0.1:1\n")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        // servers register in any order; a complete file has them all
        assert_eq!(
            parse("1 127.0.0.1:1 127.0.0.1:2\n").unwrap().servers.len(),
            1
        );
        assert!(
            parse("1 127.0.0.1:1 127.0.0.1:2\n1 127.0.0.1:3 127.0.0.1:4\n")
                .unwrap_err()
                .to_string()
                .contains("listed twice")
        );
        assert_eq!(
            parse("# nothing\n\n").unwrap(),
            ClusterFile {
                identity: None,
                servers: vec![]
            }
        );
    }

    #[test]
    fn a_file_without_identity_or_of_the_wrong_size_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster");
        let one = "0 127.0.0.1:1 127.0.0.1:2 127.0.0.1:3\n";
        std::fs::write(&p, one).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("no identity line"), "{e}");
        let id = ClusterIdentity::new(2, 4096, 1024).unwrap();
        std::fs::write(&p, format!("{}\n{one}", id.to_line())).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains("lists 1 servers, but cluster") && e.contains("has 2"),
            "{e}"
        );
        let two = format!("{}\n{one}1 127.0.0.1:4 127.0.0.1:5\n", id.to_line());
        std::fs::write(&p, &two).unwrap();
        assert_eq!(read(&p).unwrap().1.len(), 2);
        // servers that joined follow, without gaps
        std::fs::write(&p, format!("{two}2 127.0.0.1:6 127.0.0.1:7\n")).unwrap();
        assert_eq!(read(&p).unwrap().1.len(), 3);
        std::fs::write(&p, format!("{two}3 127.0.0.1:6 127.0.0.1:7\n")).unwrap();
        assert!(read(&p).unwrap_err().to_string().contains("without gaps"));
        // a damaged identity is never replaced by register or settle
        std::fs::write(&p, format!("cluster = {{ id = 1 }}\n{one}")).unwrap();
        assert!(register(&p, parse_line("1 127.0.0.1:4 127.0.0.1:5").unwrap()).is_err());
        assert!(settle(&p, &id).is_err());
    }
}
