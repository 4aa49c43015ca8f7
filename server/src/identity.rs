//! The data directory's identity record (`identity.toml`): which cluster and which server the
//! data belongs to, and the settings it was made with. Checked at every start, before the
//! data is opened: a server refuses, with one line that says why, to serve a data directory
//! of another cluster, another server, another format or other settings, and to join a cluster
//! file of another cluster or size (docs/operations.md, "Cluster identity").

use madfs_identity::{cluster_file, AuthMode, Checksums, ClusterIdentity, Owner, FORMAT_VERSION};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Name of the record in a data directory.
pub const FILE: &str = "identity.toml";

/// What a data directory records about itself.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DataDirRecord {
    /// The server (placement bucket) whose data this is.
    pub server: u32,
    /// The cluster it belongs to.
    pub cluster: ClusterIdentity,
}

/// Settings asked for on the command line; `None`: not given (take the recorded one, or the
/// default for a new cluster).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    /// `--servers`.
    pub servers: Option<u32>,
    /// Size of a new cluster when `--servers` is not given (the MPI/Slurm job's size); never
    /// checked against a recorded one.
    pub new_servers: Option<u32>,
    /// `--chunk-size`.
    pub chunk_size: Option<u32>,
    /// `--inline-max`.
    pub inline_max: Option<u32>,
    /// `--auth` (`--insecure`: `insecure`). A new cluster uses `key`.
    pub auth: Option<AuthMode>,
    /// `--owner` (key mode). A new key-mode cluster is owned by the server's user.
    pub owner: Option<Owner>,
    /// `--checksums`. A new cluster uses `crc32c`.
    pub checksums: Option<Checksums>,
    /// `--replication` (copies of every key, 1 to 3). A new cluster keeps one.
    pub replication: Option<u32>,
    /// `--join`: a new server of a running cluster (an id after the ones the cluster was
    /// made with; `madfs-ctl add` then makes it a member).
    pub join: bool,
}

/// Most copies of a key a cluster may keep.
pub const MAX_REPLICATION: u32 = 3;
/// Default chunk size of a new cluster (16 × 47,008, the ior-hard record).
pub const DEFAULT_CHUNK_SIZE: u32 = 16 * 47008;
/// Default inline part of chunk 0 of a new cluster.
pub const DEFAULT_INLINE_MAX: u32 = 64 * 1024;

fn read_record(path: &Path) -> anyhow::Result<Option<DataDirRecord>> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{} is damaged: {}", path.display(), e.message())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
    }
}

/// The record of data directory `dir` (an error if it has none).
pub fn read_data_dir(dir: &Path) -> anyhow::Result<DataDirRecord> {
    read_record(&dir.join(FILE))?.ok_or_else(|| {
        anyhow::anyhow!(
            "{} is not a madfs data directory (no {FILE})",
            dir.display()
        )
    })
}

fn write_record(path: &Path, r: &DataDirRecord) -> anyhow::Result<()> {
    let text = format!(
        "# madfs data directory: written at its first start, checked at every start.\n\
         # Never edit: a server refuses data of another cluster, server, format or settings.\n\
         server = {}\n{}\n",
        r.server,
        r.cluster.to_line()
    );
    madfs_store::files::replace(path, text.as_bytes(), 0o600, true)?;
    std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()?;
    Ok(())
}

/// The identity the server will run with, as far as it can be known before anything is
/// opened: the data directory's record, else the cluster file's, else what is asked for a
/// new cluster (errors are left to [`settle`]).
pub fn peek(data_dir: &Path, asked: &Asked, cluster: Option<&Path>) -> (AuthMode, Option<Owner>) {
    if let Ok(Some(r)) = read_record(&data_dir.join(FILE)) {
        return (r.cluster.auth, r.cluster.owner);
    }
    if let Some(i) = cluster.and_then(|f| cluster_file::read_partial(f).ok()?.identity) {
        return (i.auth, i.owner);
    }
    (asked.auth.unwrap_or(AuthMode::Key), asked.owner)
}

/// Settles the identity of server `id` on `data_dir`: from its record, else from the cluster
/// file (the first server to start writes it there), else a new cluster made with the asked
/// settings; then checks that record, cluster file and command line agree, and writes the
/// record of a new data directory. Every refusal is one line naming what differs.
pub fn settle(
    data_dir: &Path,
    id: u32,
    asked: Asked,
    cluster: Option<&Path>,
) -> anyhow::Result<ClusterIdentity> {
    let path = data_dir.join(FILE);
    let record = read_record(&path)?;
    if record.is_none() && data_dir.join("db").exists() {
        anyhow::bail!(
            "data directory {} holds data but no {FILE}: it was made by an older madfs (data format 0); \
             this server reads format {FORMAT_VERSION} (docs/operations.md, \"Upgrades\")",
            data_dir.display()
        );
    }
    if let Some(r) = &record {
        if r.cluster.format != FORMAT_VERSION {
            anyhow::bail!(
                "data directory {} has data format {}; this server reads format {FORMAT_VERSION} \
                 (docs/operations.md, \"Upgrades\")",
                data_dir.display(),
                r.cluster.format
            );
        }
        if r.server != id {
            anyhow::bail!(
                "data directory {} belongs to server {}, not {id}",
                data_dir.display(),
                r.server
            );
        }
    }
    let proposed = match &record {
        Some(r) => r.cluster,
        None => {
            let mut c = ClusterIdentity::new(
                asked.servers.or(asked.new_servers).unwrap_or(1),
                asked.chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE),
                asked.inline_max.unwrap_or(DEFAULT_INLINE_MAX),
            )?;
            c.auth = asked.auth.unwrap_or(AuthMode::Key);
            c.checksums = asked.checksums.unwrap_or(Checksums::Crc32c);
            c.replication = asked.replication.unwrap_or(1);
            if !(1..=MAX_REPLICATION).contains(&c.replication) || c.replication > c.servers {
                anyhow::bail!(
                    "--replication {} must be between 1 and {MAX_REPLICATION}, and at most the \
                     number of servers ({})",
                    c.replication,
                    c.servers
                );
            }
            if c.auth == AuthMode::Key {
                // SAFETY: plain getters.
                let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
                c.owner = Some(asked.owner.unwrap_or(Owner { uid, gid }));
            }
            c
        }
    };
    if asked.join && record.is_none() {
        let running = cluster.and_then(|f| cluster_file::read_partial(f).ok()?.identity);
        if running.is_none() {
            anyhow::bail!(
                "--join needs the cluster file of a running cluster (--cluster-file FILE, \
                 written by its servers)"
            );
        }
    }
    let identity = match cluster {
        Some(f) => cluster_file::settle(f, &proposed)?,
        None => proposed,
    };
    if let (Some(r), Some(f)) = (&record, cluster) {
        if let Some(d) = r.cluster.difference(&identity) {
            anyhow::bail!(
                "data directory {} belongs to another cluster than cluster file {} ({d}); \
                 start it with that cluster's file, or remove the cluster file to restart the whole cluster",
                data_dir.display(),
                f.display()
            );
        }
    }
    let from = if record.is_some() {
        format!("data directory {}", data_dir.display())
    } else {
        match cluster {
            Some(f) => format!("cluster file {}", f.display()),
            None => "the cluster".into(),
        }
    };
    for (flag, asked, recorded) in [
        ("--servers", asked.servers, identity.servers),
        ("--chunk-size", asked.chunk_size, identity.chunk_size),
        ("--inline-max", asked.inline_max, identity.inline_max),
        ("--replication", asked.replication, identity.replication),
    ] {
        if let Some(v) = asked.filter(|v| *v != recorded) {
            anyhow::bail!(
                "{flag} {v} differs from {recorded}, which {from} was made with; \
                 settings of a cluster are fixed (leave the flag out to use the recorded value)"
            );
        }
    }
    if let Some(a) = asked.auth.filter(|a| *a != identity.auth) {
        anyhow::bail!(
            "authentication {a} differs from {}, which {from} was made with; \
             settings of a cluster are fixed",
            identity.auth
        );
    }
    if let Some(c) = asked.checksums.filter(|c| *c != identity.checksums) {
        anyhow::bail!(
            "--checksums {c} differs from {}, which {from} was made with; settings of a cluster are fixed",
            identity.checksums
        );
    }
    if let Some(o) = asked.owner.filter(|o| Some(*o) != identity.owner) {
        anyhow::bail!(
            "--owner {o} differs from {}, which {from} was made with; settings of a cluster are fixed",
            identity.owner.map_or("none".into(), |o| o.to_string())
        );
    }
    check_id(id, &identity, record.is_some(), asked.join, cluster)?;
    if record.is_none() {
        write_record(
            &path,
            &DataDirRecord {
                server: id,
                cluster: identity,
            },
        )?;
    }
    Ok(identity)
}

/// May server `id` start in cluster `identity`? One of the servers the cluster was made
/// with; or, with `--join` (or a data directory that joined before), a later one: an id the
/// cluster file lists already (a restart), or the next one. A join needs the cluster file of
/// a running cluster (its identity is written there).
fn check_id(
    id: u32,
    identity: &ClusterIdentity,
    recorded: bool,
    join: bool,
    cluster: Option<&Path>,
) -> anyhow::Result<()> {
    if id < identity.servers {
        if join && !recorded {
            anyhow::bail!(
                "--join is for servers after the {} the cluster was made with (ids from {}); \
                 server {id} is one of those",
                identity.servers,
                identity.servers
            );
        }
        return Ok(());
    }
    if !join && !recorded {
        anyhow::bail!(
            "server id {id} is outside cluster {} of {} servers (--servers N when the cluster is \
             made; --join to add a server to a running cluster)",
            identity.id,
            identity.servers
        );
    }
    let Some(f) = cluster else {
        anyhow::bail!("--join needs the cluster file of the running cluster (--cluster-file FILE)");
    };
    let listed = cluster_file::read_partial(f)?.servers;
    let next = listed.last().map_or(0, |e| e.id + 1);
    if !recorded && id > next {
        anyhow::bail!(
            "server id {id} would leave a gap: the cluster file {} lists servers up to {}; \
             the next server to join is {next}",
            f.display(),
            next.saturating_sub(1)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(servers: u32) -> Asked {
        Asked {
            servers: Some(servers),
            ..Asked::default()
        }
    }

    #[test]
    fn a_server_joins_with_the_next_id_only() {
        let root = tempfile::tempdir().unwrap();
        let cf = root.path().join("cluster");
        let dir = |i: u32| {
            let d = root.path().join(format!("s{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let entry = |i: u32| {
            cluster_file::parse_line(&format!("{i} 127.0.0.1:1{i} 127.0.0.1:2{i}")).unwrap()
        };
        let join = Asked {
            join: true,
            ..Asked::default()
        };
        // no running cluster: nothing to join
        let e = settle(&dir(2), 2, join, Some(&cf)).unwrap_err().to_string();
        assert!(
            e.contains("needs the cluster file of a running cluster"),
            "{e}"
        );
        let a = settle(&dir(0), 0, asked(2), Some(&cf)).unwrap();
        cluster_file::register(&cf, entry(0)).unwrap();
        cluster_file::register(&cf, entry(1)).unwrap();
        // without --join, an id past the cluster's is refused; with it, only the next one
        let e = settle(&dir(2), 2, Asked::default(), Some(&cf)).unwrap_err();
        assert!(e.to_string().contains("--join to add a server"), "{e}");
        let e = settle(&dir(3), 3, join, Some(&cf)).unwrap_err();
        assert!(
            e.to_string().contains("the next server to join is 2"),
            "{e}"
        );
        let e = settle(&dir(1), 1, join, Some(&cf)).unwrap_err();
        assert!(e.to_string().contains("one of those"), "{e}");
        assert_eq!(settle(&dir(2), 2, join, Some(&cf)).unwrap(), a);
        // it keeps the cluster's identity (2 servers made) and restarts without --join
        assert_eq!(
            settle(&dir(2), 2, Asked::default(), Some(&cf))
                .unwrap()
                .servers,
            2
        );
        cluster_file::register(&cf, entry(2)).unwrap();
        assert_eq!(cluster_file::read(&cf).unwrap().1.len(), 3);
    }

    #[test]
    fn first_start_records_and_later_starts_check() {
        let root = tempfile::tempdir().unwrap();
        let cf = root.path().join("cluster");
        let d0 = root.path().join("s0");
        let d1 = root.path().join("s1");
        std::fs::create_dir_all(&d0).unwrap();
        std::fs::create_dir_all(&d1).unwrap();
        let a = settle(&d0, 0, asked(2), Some(&cf)).unwrap();
        assert_eq!((a.servers, a.chunk_size), (2, DEFAULT_CHUNK_SIZE));
        // the second server takes the cluster file's identity, also without flags
        assert_eq!(settle(&d1, 1, Asked::default(), Some(&cf)).unwrap(), a);
        // restarts without flags take the record
        assert_eq!(settle(&d0, 0, Asked::default(), Some(&cf)).unwrap(), a);
        assert_eq!(a.checksums, Checksums::Crc32c);
        assert_eq!(a.replication, 1);
        // a replication factor above the server count (or 3) is refused at format time
        let d2 = root.path().join("s2");
        std::fs::create_dir_all(&d2).unwrap();
        let e = settle(
            &d2,
            0,
            Asked {
                servers: Some(2),
                replication: Some(3),
                ..Asked::default()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("at most the number of servers (2)"), "{e}");
        let e = settle(
            &d0,
            0,
            Asked {
                checksums: Some(Checksums::None),
                ..Asked::default()
            },
            Some(&cf),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--checksums none differs from crc32c"), "{e}");
        // the whole cluster restarted from a new cluster file: the record wins
        std::fs::remove_file(&cf).unwrap();
        assert_eq!(settle(&d1, 1, Asked::default(), Some(&cf)).unwrap(), a);
        assert_eq!(settle(&d0, 0, asked(2), Some(&cf)).unwrap(), a);
        let text = std::fs::read_to_string(d0.join(FILE)).unwrap();
        assert!(text.contains("server = 0"), "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d0.join(FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn mismatches_are_refused_with_one_line() {
        let root = tempfile::tempdir().unwrap();
        let cf = root.path().join("cluster");
        let d0 = root.path().join("s0");
        std::fs::create_dir_all(&d0).unwrap();
        settle(&d0, 0, asked(2), Some(&cf)).unwrap();
        let before = std::fs::read_to_string(d0.join(FILE)).unwrap();
        let cases: [(u32, Asked, Option<&Path>, &str); 6] = [
            (
                0,
                Asked {
                    replication: Some(2),
                    ..Asked::default()
                },
                Some(&cf),
                "--replication 2 differs from 1",
            ),
            (
                0,
                Asked {
                    inline_max: Some(4096),
                    ..Asked::default()
                },
                Some(&cf),
                "--inline-max 4096 differs from 65536",
            ),
            (0, asked(3), Some(&cf), "--servers 3 differs from 2"),
            (1, Asked::default(), Some(&cf), "belongs to server 0, not 1"),
            (
                0,
                Asked {
                    chunk_size: Some(4096),
                    ..Asked::default()
                },
                None,
                "--chunk-size 4096 differs",
            ),
            (0, Asked::default(), Some(&root.path().join("other")), ""),
        ];
        for (id, a, f, want) in cases {
            let r = settle(&d0, id, a, f);
            if want.is_empty() {
                // a fresh cluster file takes the record's identity
                r.unwrap();
                continue;
            }
            let e = format!("{:#}", r.unwrap_err());
            assert!(e.contains(want), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // a cluster file of another cluster
        let other = root.path().join("cluster2");
        let d9 = root.path().join("s9");
        std::fs::create_dir_all(&d9).unwrap();
        settle(&d9, 0, asked(2), Some(&other)).unwrap();
        let e = format!("{:#}", settle(&d0, 0, asked(2), Some(&other)).unwrap_err());
        assert!(
            e.contains("another cluster") && e.contains("cluster id"),
            "{e}"
        );
        // a server id beyond the cluster's size
        let d5 = root.path().join("s5");
        std::fs::create_dir_all(&d5).unwrap();
        let e = format!(
            "{:#}",
            settle(&d5, 5, Asked::default(), Some(&cf)).unwrap_err()
        );
        assert!(e.contains("outside cluster"), "{e}");
        assert!(!d5.join(FILE).exists());
        // nothing was changed by the refusals
        assert_eq!(std::fs::read_to_string(d0.join(FILE)).unwrap(), before);
    }

    #[test]
    fn old_and_damaged_data_directories_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("s0");
        std::fs::create_dir_all(d.join("db")).unwrap();
        let e = format!("{:#}", settle(&d, 0, asked(1), None).unwrap_err());
        assert!(e.contains("older madfs"), "{e}");
        std::fs::write(d.join(FILE), "server = 0\ncluster = { id = 1 }\n").unwrap();
        let e = format!("{:#}", settle(&d, 0, asked(1), None).unwrap_err());
        assert!(e.contains("damaged"), "{e}");
        let id = ClusterIdentity {
            format: FORMAT_VERSION + 1,
            ..ClusterIdentity::new(1, 4096, 4096).unwrap()
        };
        write_record(
            &d.join(FILE),
            &DataDirRecord {
                server: 0,
                cluster: id,
            },
        )
        .unwrap();
        let e = format!("{:#}", settle(&d, 0, asked(1), None).unwrap_err());
        assert!(
            e.contains(&format!("data format {}", FORMAT_VERSION + 1)),
            "{e}"
        );
    }
}
