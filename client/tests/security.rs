//! Authentication (docs/security.md): who may connect, who a connection is served as, and
//! that nobody can act in another connection's name. Real servers on loopback, a real
//! `munged` for MUNGE mode, real programs run as another user with `setpriv`.

mod common;

use common::*;
use madfs_client::{Client, ClientConfig, FileSystem};
use madfs_proto::frame::Encoder;
use madfs_proto::{tag, Attr, Cap, Errno, Request};
use madfs_rpc::Credentials;
use std::process::Command;
use std::time::Duration;

fn config(cl: &madfs_cluster::LocalCluster) -> ClientConfig {
    let mut cfg = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    cfg.timeout = Duration::from_secs(10);
    cfg
}

fn ctl(args: &[&str], as_nobody: bool) -> (bool, String) {
    let bin = madfs_cluster::find_bin("madfs-ctl");
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    let out = cmd.args(args).env_remove("MADFS_CLUSTER").output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

fn names(c: &Client) -> Vec<String> {
    let mut v: Vec<String> = c
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

#[test]
fn peers_without_the_key_are_refused_and_change_nothing() {
    let cl = cluster(3, &[], "none");
    let good = Client::new(&config(&cl)).unwrap();
    put(&good, "/kept", b"hello", 5, true);
    let before = names(&good);

    // no proof, a random key, the peer role without the peer key: over UCX and TCP
    let k = madfs_auth::Key::generate().unwrap();
    for creds in [
        Credentials::Insecure,
        Credentials::Key(k.clone()),
        Credentials::Peer(k),
        Credentials::Munge,
    ] {
        let mut cfg = config(&cl);
        cfg.credentials = creds.clone();
        for c in [Client::new(&cfg).unwrap(), Client::new_tcp(&cfg).unwrap()] {
            // (a connect that fails on the way, EIO, under the load of the other tests, is
            // tried again: what is checked is the answer to the hello)
            let refused = |op: &dyn Fn() -> Result<(), Errno>| {
                let mut e = op().unwrap_err();
                for _ in 0..3 {
                    if e != Errno::EIO {
                        break;
                    }
                    eprintln!("{creds:?}: EIO, again");
                    e = op().unwrap_err();
                }
                e
            };
            assert_eq!(
                refused(&|| c.mkdir("/intruder", 0o777)),
                Errno::EACCES,
                "{creds:?}"
            );
            assert_eq!(
                refused(&|| c.stat("/kept").map(drop)),
                Errno::EACCES,
                "{creds:?}"
            );
            assert_eq!(refused(&|| c.unlink("/kept")), Errno::EACCES, "{creds:?}");
        }
    }
    assert_eq!(names(&good), before);
    assert_eq!(get(&good, "/kept"), b"hello");
    let refused: u64 = (0..3).map(|i| stats(&cl, i).refused).sum();
    assert!(refused >= 8, "refused {refused}");
    // the key is the owner's: another user cannot even read it
    let (ok, err) = {
        let bin = madfs_cluster::find_bin("madfs");
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin)
            .args(["ls", "/"])
            .env("MADFS_CLUSTER", cl.cluster_file())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert!(!ok && err.contains("cluster key"), "{err}");
}

#[test]
fn the_control_port_serves_members_only() {
    let cl = cluster(2, &[], "none");
    let file = cl.cluster_file();
    let file = file.to_str().unwrap();
    let addr = cl.entry(0).control.to_string();
    // no cluster file: nothing to prove
    let (ok, out) = ctl(&["stats", &addr], false);
    assert!(!ok && out.contains("refused the login"), "{out}");
    let (ok, out) = ctl(&["stop", &addr], false);
    assert!(!ok, "{out}");
    // another user cannot read the keys
    let (ok, out) = ctl(&["stop", "--cluster", file], true);
    assert!(!ok && out.contains("cluster key"), "{out}");
    let (ok, out) = ctl(&["stats", "--cluster", file], true);
    assert!(!ok, "{out}");
    // a wrong key
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let wrong = madfs_control::Login::Key(madfs_auth::Key::generate().unwrap(), true);
    let Err(e) = rt.block_on(madfs_control::connect(cl.entry(1).control, &wrong)) else {
        panic!("a wrong key logs in");
    };
    assert!(e.to_string().contains("refused the login"), "{e}");
    // both servers still serve; the owner may do everything
    let c = Client::new(&config(&cl)).unwrap();
    c.mkdir("/still-here", 0o755).unwrap();
    let (ok, out) = ctl(&["status", "--cluster", file], false);
    assert!(ok && out.contains("server 1 of 2"), "{out}");
    // capacity per server: the data file system and the metadata database
    assert_eq!(out.matches(" disk=").count(), 2, "{out}");
    assert_eq!(out.matches(" disk_free=").count(), 2, "{out}");
    assert_eq!(out.matches(" metadata=").count(), 2, "{out}");
    // counters as JSON, one object per server
    let (ok, out) = ctl(&["stats", "--cluster", file, "--json"], false);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v.as_array().map(|a| a.len()), Some(2), "{out}");
    assert!(
        v[0]["stats"]["requests"]["mkdir"].as_u64().unwrap_or(0)
            + v[1]["stats"]["requests"]["mkdir"].as_u64().unwrap_or(0)
            >= 1,
        "{out}"
    );
    let (ok, out) = ctl(&["stop", &addr, "--cluster", file], false);
    assert!(ok && out.contains("stopped"), "{out}");
}

/// Another client puts the victim's connection id in its tags: requests (also a goodbye)
/// with that id but without its secret, and write data under every tag the victim's writes
/// would have had without the secret. The victim's work completes unharmed, nobody is
/// answered in its name, and the servers count what they dropped.
#[test]
fn another_connections_identity_cannot_be_borrowed() {
    let cl = cluster(1, &[], "none");
    let victim = Client::new(&config(&cl)).unwrap();
    let attacker = Client::new(&config(&cl)).unwrap();
    victim.mkdir("/v", 0o755).unwrap();
    attacker.mkdir("/a", 0o755).unwrap();
    let vconn = victim.transport().welcome(0).unwrap().conn;
    let t = attacker.transport();
    let mut enc = Encoder::default();
    // a file the attacker knows the id of (its own), and the victim's next file
    let attr: Attr = victim.stat("/v").unwrap();
    let guesses = [0u64, 1, attr.id];
    for seq in 0..64u32 {
        for word in guesses {
            let w = word.to_le_bytes();
            let (p, h) = enc.request(&Request::Bye);
            t.send_tagged(0, tag::request(tag::REQUEST, vconn, seq), &[&w, &p, h])
                .unwrap();
            let (p, h) = enc.request(&Request::Stat("/v"));
            t.send_tagged(0, tag::request(tag::REQUEST, vconn, seq), &[&w, &p, h])
                .unwrap();
            let (p, h) = enc.request(&Request::Mkdir {
                path: "/planted",
                mode: 0o777,
                uid: 0,
                gid: 0,
            });
            t.send_tagged(0, tag::request(tag::REQUEST, vconn, seq), &[&w, &p, h])
                .unwrap();
        }
        // (small: a large message would wait for a receive that never comes)
        let junk = vec![0xEE; 2048];
        t.send_tagged(0, tag::request(tag::REQUEST_DATA, vconn, seq), &[&junk])
            .unwrap();
    }
    // the victim goes on: large writes (their data travels as separate messages), reads
    for i in 0..8u64 {
        let bytes = data(300 << 10, i);
        put(&victim, &format!("/v/f{i}"), &bytes, 200 << 10, i % 2 == 0);
        assert_eq!(sum(&get(&victim, &format!("/v/f{i}"))), sum(&bytes));
    }
    assert!(victim.stat("/planted").is_err());
    assert_eq!(victim.readdir("/v").unwrap().len(), 8);
    let s = stats(&cl, 0);
    assert!(s.forged >= 64 * 3 * 3, "forged {}", s.forged);
    assert!(s.live_connections >= 2, "the victim's connection was ended");
}

/// A client that sends what only servers may (an `Attach` planting an entry with made-up
/// attributes and someone else's file id, a `Detach`) is refused and nothing changes; what
/// a request says about its sender is replaced by what the connection proved.
#[test]
fn clients_cannot_plant_entries_or_claim_owners() {
    let cl = cluster(2, &["--owner", "4321:4322"], "none");
    let c = Client::new(&config(&cl)).unwrap();
    put(&c, "/victim", b"secret", 6, true);
    let v = c.stat("/victim").unwrap();
    assert_eq!((v.uid, v.gid), (4321, 4322));
    let t = c.transport();
    let forged = Attr {
        uid: 0,
        gid: 0,
        mode: libc::S_IFREG | 0o4755,
        ..v
    };
    for server in 0..2 {
        for req in [
            Request::Attach {
                path: "/setuid-root",
                attr: forged,
                replace: true,
                durable: false,
                from: None,
                src: 0,
            },
            Request::Settle {
                path: "/victim",
                id: v.id,
            },
            Request::Detach {
                path: "/victim",
                id: v.id,
            },
        ] {
            let r = t.call_sync(server, &req, b"payload", 512).unwrap();
            assert_eq!(r.decode().unwrap_err(), Errno::EPERM, "{req:?}");
        }
    }
    assert_eq!(c.stat("/setuid-root").unwrap_err(), Errno::ENOENT);
    assert_eq!(get(&c, "/victim"), b"secret");
    // a create, mkdir or symlink that names another owner makes an entry of the connection's
    for (i, req) in [
        Request::Create {
            path: "/claims-root",
            mode: 0o644,
            uid: 0,
            gid: 0,
            excl: true,
            trunc: false,
            access: 0,
            holder: 0,
        },
        Request::Mkdir {
            path: "/claims-root-dir",
            mode: 0o755,
            uid: 0,
            gid: 0,
        },
        Request::Symlink {
            path: "/claims-root-link",
            target: "/victim",
            uid: 0,
            gid: 0,
        },
    ]
    .iter()
    .enumerate()
    {
        let path = ["/claims-root", "/claims-root-dir", "/claims-root-link"][i];
        let s = madfs_placement::meta_server(path, &madfs_placement::Layout::initial(2));
        t.call_sync(s, req, &[], 512).unwrap().decode().unwrap();
        let a = c.stat_normalized(path).unwrap();
        assert_eq!((a.uid, a.gid), (4321, 4322), "{path}");
    }
    // directory renames are done by the servers (a client cannot attach): they still work
    c.mkdir("/tree", 0o755).unwrap();
    c.mkdir("/tree/sub", 0o755).unwrap();
    for i in 0..20 {
        put(
            &c,
            &format!("/tree/sub/f{i}"),
            &data(100 + i, i as u64),
            50,
            false,
        );
    }
    c.rename("/tree", "/moved", false).unwrap();
    assert_eq!(c.stat("/tree").unwrap_err(), Errno::ENOENT);
    for i in 0..20 {
        assert_eq!(
            get(&c, &format!("/moved/sub/f{i}")),
            data(100 + i, i as u64)
        );
    }
}

/// MUNGE mode: each process is served as the user munged vouches for (a file made by
/// `nobody` through the CLI belongs to nobody); a credential of another MUNGE realm is
/// refused.
#[test]
fn munge_mode_serves_the_user_munged_vouches_for() {
    setup();
    let munged = madfs_cluster::Munged::start().expect("munged (apt install munge)");
    let sock = munged.socket();
    // SAFETY: set before this test starts any client (each test binary's tests share the
    // process: only this test uses MUNGE).
    unsafe { std::env::set_var("MADFS_MUNGE_SOCKET", &sock) };
    let cl = madfs_cluster::LocalCluster::start(madfs_cluster::Options {
        servers: 2,
        args: vec!["--auth".into(), "munge".into()],
        err_mode: "none".into(),
        env: vec![("MADFS_MUNGE_SOCKET".into(), sock.display().to_string())],
    })
    .unwrap();
    let c = Client::new(&config(&cl)).unwrap();
    c.mkdir("/shared", 0o777).unwrap();
    assert_eq!(c.stat("/shared").unwrap().uid, 0);
    // another user, through the CLI: its own uid, whatever it claims
    std::fs::write("/tmp/madfs-munge-test-input", b"from nobody").unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(madfs_cluster::find_bin("madfs"))
        .args(["put", "/tmp/madfs-munge-test-input", "/shared/by-nobody"])
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_MUNGE_SOCKET", &sock)
        .env("UCX_NET_DEVICES", "lo")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = c.stat("/shared/by-nobody").unwrap();
    assert_eq!((a.uid, a.gid), (65534, 65534));
    // a trusted proxy (root's credential) acts for the user it states, checked as that user
    let mut pcfg = config(&cl);
    pcfg.credentials = Credentials::Proxy {
        key: None,
        uid: 65534,
        gid: 65534,
    };
    let p = Client::new(&pcfg).unwrap();
    p.mkdir("/shared/by-proxy", 0o755).unwrap();
    let a = c.stat("/shared/by-proxy").unwrap();
    assert_eq!((a.uid, a.gid), (65534, 65534));
    c.mkdir("/root-only", 0o755).unwrap();
    assert_eq!(p.mkdir("/root-only/x", 0o755).unwrap_err(), Errno::EACCES);
    // the control port takes root's credential
    assert_eq!(stats(&cl, 1).refused, 0);
    // a credential from another realm (a munged with another key) is refused
    let other = madfs_cluster::Munged::start().unwrap();
    unsafe { std::env::set_var("MADFS_MUNGE_SOCKET", other.socket()) };
    let c2 = Client::new(&config(&cl)).unwrap();
    assert_eq!(
        c2.mkdir("/from-elsewhere", 0o777).unwrap_err(),
        Errno::EACCES
    );
    unsafe { std::env::set_var("MADFS_MUNGE_SOCKET", &sock) };
    assert_eq!(c.stat("/from-elsewhere").unwrap_err(), Errno::ENOENT);
    assert!(stats(&cl, 0).refused + stats(&cl, 1).refused >= 1);
}

/// Requests that name a file by id carry the capability an open granted: a bare id, a forged
/// or altered capability, another file's, one with too little access are refused, and the
/// data is unchanged.
#[test]
fn data_requests_need_a_capability() {
    let cl = cluster(2, &[], "none");
    let c = Client::new(&config(&cl)).unwrap();
    let bytes = data(3 << 20, 5);
    put(&c, "/data", &bytes, 1 << 20, true);
    put(&c, "/other", b"other", 5, true);
    let ro = madfs_client::OpenFlags::default();
    let f = c.open_as("/data", ro, madfs_proto::ACCESS_R).unwrap();
    let o = c.open_as("/other", ro, madfs_proto::ACCESS_R).unwrap();
    let (id, cs, read_only) = (f.attr.id, f.attr.chunk_size, f.cap);
    assert_eq!(read_only.access, madfs_proto::ACCESS_R);
    let forged = [
        Cap::default(),
        Cap {
            id,
            ..Cap::default()
        },
        o.cap,
        Cap { id, ..o.cap },
        Cap {
            access: madfs_proto::ACCESS_R | madfs_proto::ACCESS_W,
            ..read_only
        },
        Cap {
            uid: 12345,
            ..read_only
        },
        Cap {
            expires: read_only.expires + 1000,
            ..read_only
        },
    ];
    let t = c.transport();
    let answer = |s: u32, kind: u64, req: &Request<'_>, bulk: &[u8]| {
        t.ensure(s).unwrap();
        t.wait(&[s], t.call(s, kind, req, bulk, 4096))
            .unwrap()
            .decode()
            .map(drop)
    };
    for s in 0..2 {
        for cap in forged.iter().chain([&read_only]) {
            let read = Request::Read {
                id,
                chunk: 1,
                offset: 0,
                len: 4096,
                chunk_size: cs,
                cap: *cap,
            };
            let write = Request::Write {
                id,
                chunk: 1,
                offset: 0,
                chunk_size: cs,
                size_of: None,
                cap: *cap,
            };
            let truncate = Request::TruncateChunks {
                id,
                size: 0,
                chunk_size: cs,
                cap: *cap,
            };
            let fsync = Request::Fsync {
                id,
                size_of: None,
                size: 0,
                cap: *cap,
            };
            let genuine = *cap == read_only;
            // a chunk's reads and writes go to its server (anywhere else: EREMCHG, before
            // any capability is looked at); truncations and fsyncs to every server
            let chunk_server =
                madfs_placement::chunk_server(id, 1, &madfs_placement::Layout::initial(2));
            if s == chunk_server {
                assert_eq!(
                    answer(s, tag::REQUEST, &write, b"XXXX"),
                    Err(Errno::EACCES),
                    "{cap:?}"
                );
            } else {
                assert_eq!(
                    answer(s, tag::REQUEST, &write, b"XXXX"),
                    Err(Errno::EREMCHG),
                    "{cap:?}"
                );
            }
            assert_eq!(
                answer(s, tag::REQUEST, &truncate, &[]),
                Err(Errno::EACCES),
                "{cap:?}"
            );
            if genuine {
                if s == chunk_server {
                    answer(s, tag::REQUEST, &read, &[]).unwrap();
                }
                answer(s, tag::FSYNC, &fsync, &[]).unwrap();
            } else {
                if s == chunk_server {
                    assert_eq!(
                        answer(s, tag::REQUEST, &read, &[]),
                        Err(Errno::EACCES),
                        "{cap:?}"
                    );
                }
                assert_eq!(
                    answer(s, tag::FSYNC, &fsync, &[]),
                    Err(Errno::EACCES),
                    "{cap:?}"
                );
            }
        }
    }
    assert_eq!(sum(&get(&c, "/data")), sum(&bytes));
    // the chunk's server: 8 writes, 7 reads, 8 truncations, 7 fsyncs; the other: 8
    // truncations and 7 fsyncs
    assert!((0..2).map(|i| stats(&cl, i).refused).sum::<u64>() >= 45);
}

/// `--root-squash`: a client that proves uid 0 is served as nobody, as NFS's root_squash
/// (here on a cluster whose root directory anyone may write: an insecure one's, 1777).
#[test]
fn root_squash_serves_root_as_nobody() {
    let cl = cluster(2, &["--root-squash", "--insecure"], "none");
    let c = Client::new(&config(&cl)).unwrap();
    c.mkdir("/sq", 0o755).unwrap();
    let a = c.stat("/sq").unwrap();
    assert_eq!((a.uid, a.gid), (65534, 65534));
    // nobody may not give its directory away
    assert_eq!(c.chown("/sq", 0, 0).unwrap_err(), Errno::EPERM);
}
