//! The cluster identity record: servers refuse data directories made with other settings,
//! clients refuse cluster files of the wrong size and servers of another cluster; nothing is
//! changed by a refusal.

mod common;

use common::{client, cluster, data, get, put, sum};
use madfs_client::{ClientConfig, Errno, FileSystem};
use std::path::Path;
use std::time::Duration;

fn identity_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("server1").join("identity.toml")).unwrap()
}

#[test]
fn a_server_refuses_a_data_directory_made_with_other_settings() {
    let mut cl = cluster(3, &[], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    let bytes = data(300_000, 7);
    put(&c, "/kept", &bytes, 47008, true);
    drop(c);
    let before = identity_of(cl.root());
    cl.stop(1);
    let secs = Duration::from_secs(30);
    for (args, want) in [
        (
            &["--inline-max", "4096"][..],
            "--inline-max 4096 differs from 65536",
        ),
        (&["--chunk-size", "65536"][..], "--chunk-size 65536 differs"),
        (&["--servers", "4"][..], "--servers 4 differs from 3"),
    ] {
        let (st, out) = cl.try_server(1, args, secs).unwrap();
        assert!(!st.success(), "{args:?} started: {out}");
        assert!(out.contains(want), "{args:?}: {out}");
        assert_eq!(
            out.trim().lines().count(),
            1,
            "{args:?}: one line, not {out:?}"
        );
    }
    // the same settings from a config file (`--config`): applied, and so refused alike;
    // a key the server does not know is refused before anything starts
    let conf = cl.root().join("server1.toml");
    for (toml, want) in [
        (
            "inline_max = 4096\n",
            "--inline-max 4096 differs from 65536",
        ),
        ("inline-maxx = 4096\n", "unknown key `inline-maxx`"),
        ("root-squash = 1\n", "`root-squash` is a switch"),
    ] {
        std::fs::write(&conf, toml).unwrap();
        let (st, out) = cl
            .try_server(1, &["--config", conf.to_str().unwrap()], secs)
            .unwrap();
        assert!(!st.success(), "{toml:?} started: {out}");
        assert!(out.contains(want), "{toml:?}: {out}");
    }
    // a cluster file of another cluster: make one by starting a lone server elsewhere
    let other = tempfile::tempdir().unwrap();
    let other_file = other.path().join("cluster");
    let id = madfs_rpc::ClusterIdentity::new(3, 16 * 47008, 65536).unwrap();
    madfs_rpc::cluster_file::settle(&other_file, &id).unwrap();
    let (st, out) = cl
        .try_server(1, &["--cluster-file", other_file.to_str().unwrap()], secs)
        .unwrap();
    assert!(!st.success(), "{out}");
    assert!(
        out.contains("belongs to another cluster") && out.contains("cluster id"),
        "{out}"
    );
    // nothing was changed: the record is the same, and the server starts and serves
    assert_eq!(identity_of(cl.root()), before);
    cl.restart(1).unwrap();
    let c = client(&cl, Duration::from_secs(10), "none");
    assert_eq!(sum(&get(&c, "/kept")), sum(&bytes));
}

/// Runs the `madfs` CLI with `args` on the cluster file `file`: it must fail; its stderr.
fn cli_fails(file: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(madfs_cluster::find_bin("madfs"))
        .args(args)
        .env("MADFS_CLUSTER", file)
        .output()
        .unwrap();
    assert!(!out.status.success(), "madfs {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Copies the cluster file of `cl` to `to`, changing it with `edit` (line by line).
fn edited(cl: &madfs_cluster::LocalCluster, to: &Path, edit: impl Fn(&str) -> Option<String>) {
    let text = std::fs::read_to_string(cl.cluster_file()).unwrap();
    let out: Vec<String> = text.lines().filter_map(&edit).collect();
    std::fs::write(to, out.join("\n") + "\n").unwrap();
    // the cluster key goes with it (the client proves it before it learns anything)
    std::fs::copy(
        madfs_auth::key_path(&cl.cluster_file()),
        madfs_auth::key_path(to),
    )
    .unwrap();
}

#[test]
fn a_client_refuses_a_cluster_file_of_the_wrong_size_or_cluster() {
    let cl = cluster(3, &[], "none");
    let dir = tempfile::tempdir().unwrap();
    let c = client(&cl, Duration::from_secs(10), "none");
    put(&c, "/before", b"hello", 5, true);

    // a server line missing: refused when the file is read
    let short = dir.path().join("short");
    edited(&cl, &short, |l| {
        (!l.starts_with("2 ")).then(|| l.to_string())
    });
    let e = ClientConfig::from_cluster_file(&short)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lists 2 servers, but cluster") && e.contains("has 3"),
        "{e}"
    );
    // the CLI says the same, in one line, and exits non-zero
    let err = cli_fails(&short, &["put", "/etc/hostname", "/via-short"]);
    assert!(err.contains("lists 2 servers"), "{err}");

    // identity and server lines agree with each other (2), but the servers say 3: refused at
    // the welcome, before any request
    let two = dir.path().join("two");
    edited(&cl, &two, |l| {
        if l.starts_with("2 ") {
            None
        } else {
            Some(l.replace("servers = 3", "servers = 2"))
        }
    });
    let mut cfg = ClientConfig::from_cluster_file(&two).unwrap();
    cfg.timeout = Duration::from_secs(10);
    let c2 = madfs_client::Client::new(&cfg).unwrap();
    assert_eq!(c2.stat("/before").unwrap_err(), Errno::EPROTO);
    assert_eq!(c2.mkdir("/made-by-two", 0o755).unwrap_err(), Errno::EPROTO);
    let err = cli_fails(&two, &["put", "/etc/hostname", "/via-two"]);
    assert!(
        err.contains("refusing server") && err.contains("its cluster has 3 servers"),
        "{err}"
    );

    // another cluster's id (a stale cluster file, a port taken over by another cluster)
    let stale = dir.path().join("stale");
    edited(&cl, &stale, |l| {
        Some(if l.starts_with("cluster") {
            let at = l.find("id = \"").unwrap() + 6;
            format!("{}{}{}", &l[..at], "0123456789abcdef", &l[at + 16..])
        } else {
            l.to_string()
        })
    });
    let mut cfg = ClientConfig::from_cluster_file(&stale).unwrap();
    cfg.timeout = Duration::from_secs(10);
    let c3 = madfs_client::Client::new(&cfg).unwrap();
    assert_eq!(c3.stat("/before").unwrap_err(), Errno::EPROTO);
    let err = cli_fails(&stale, &["ls", "/"]);
    assert!(
        err.contains("the cluster file names 0123456789abcdef"),
        "{err}"
    );

    // over the plain-TCP fallback too
    let t = madfs_client::Client::new_tcp(&cfg).unwrap();
    assert_eq!(t.stat("/before").unwrap_err(), Errno::EPROTO);

    // nothing was changed by any of them
    let names: Vec<String> = c
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["before".to_string()]);
    assert_eq!(get(&c, "/before"), b"hello");
}
