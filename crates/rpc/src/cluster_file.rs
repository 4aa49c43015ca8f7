//! The cluster file: one line per server, `ID UCX_ADDR CONTROL_ADDR [TCP_ADDR]`, in id order.
//! `TCP_ADDR` is the server's plain-TCP port, used by clients that cannot use UCX (the child of
//! a `fork` whose parent had UCX running).
//!
//! ```text
//! # madfs cluster
//! 0 127.0.0.1:41000 127.0.0.1:42000 127.0.0.1:43000
//! 1 127.0.0.1:41001 127.0.0.1:42001 127.0.0.1:43001
//! ```
//! Servers register themselves into it (under an exclusive `flock`, written by rename, so a
//! reader never sees half a file); clients read it from `MADFS_CLUSTER`.

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

fn bad(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Parses cluster-file text. Ids must be 0..n without gaps.
pub fn parse(text: &str) -> std::io::Result<Vec<ServerEntry>> {
    let mut out: Vec<ServerEntry> = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
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
    for (i, e) in out.iter().enumerate() {
        if e.id as usize != i {
            return Err(bad(format!("cluster file: server ids must be 0..n without gaps or repeats (found {} at position {i})", e.id)));
        }
    }
    Ok(out)
}

/// Reads and parses a cluster file; an empty cluster is an error.
pub fn read(path: &Path) -> std::io::Result<Vec<ServerEntry>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        std::io::Error::new(e.kind(), format!("cluster file {}: {e}", path.display()))
    })?;
    let v = parse(&text)?;
    if v.is_empty() {
        return Err(bad(format!(
            "cluster file {} lists no server",
            path.display()
        )));
    }
    Ok(v)
}

/// One cluster-file line for `e` (also the content of a server's `address` file).
pub fn line(e: &ServerEntry) -> String {
    match e.tcp {
        Some(t) => format!("{} {} {} {t}", e.id, e.ucx, e.control),
        None => format!("{} {} {}", e.id, e.ucx, e.control),
    }
}

fn render(entries: &[ServerEntry]) -> String {
    let mut s = String::from("# madfs cluster: ID UCX_ADDR CONTROL_ADDR TCP_ADDR\n");
    for e in entries {
        s.push_str(&format!("{}\n", line(e)));
    }
    s
}

/// Adds or replaces the line of `entry.id` in the cluster file (creating it).
pub fn register(path: &Path, entry: ServerEntry) -> std::io::Result<()> {
    let lock_path = path.with_extension("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)?;
    // SAFETY: flock on an fd we own; released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        f.read_to_string(&mut text)?;
    }
    // keep other servers' lines even if the set is still incomplete
    let mut entries: Vec<ServerEntry> = Vec::new();
    for line in text.lines() {
        if let Ok(mut v) = parse_loose(line) {
            entries.append(&mut v);
        }
    }
    entries.retain(|e| e.id != entry.id);
    entries.push(entry);
    entries.sort_by_key(|e| e.id);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(render(&entries).as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
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
        register(&p, e(1, 2)).unwrap();
        register(&p, e(0, 1)).unwrap();
        register(&p, e(1, 3)).unwrap();
        assert_eq!(read(&p).unwrap(), vec![e(0, 1), e(1, 3)]);
    }

    #[test]
    fn parse_errors_are_clear() {
        assert!(parse("0 127.0.0.1:1\n")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        assert!(parse("1 127.0.0.1:1 127.0.0.1:2\n")
            .unwrap_err()
            .to_string()
            .contains("without gaps"));
        assert_eq!(parse("# nothing\n\n").unwrap(), vec![]);
    }
}
