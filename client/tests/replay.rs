//! The replay cache of a replicated cluster (docs/redundancy.md, "Retries and the replay
//! cache"): a change sent again with its request id, as a client does after a failover, is
//! answered as it was the first time instead of being applied twice — on the primary that
//! applied it and on the server that replaced it.

mod common;

use common::*;
use madfs_client::FileSystem;
use madfs_proto::{Errno, Reply, Request};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn once<'a>(seq: u64, req: Request<'a>) -> Request<'a> {
    Request::Once {
        client: 0x5eed,
        seq,
        at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
        req: Box::new(req),
    }
}

/// `open(path, O_CREAT | O_EXCL | O_WRONLY, 0644)`.
fn excl_create(path: &str) -> Request<'_> {
    Request::Create {
        path,
        mode: 0o644,
        uid: 0,
        gid: 0,
        excl: true,
        trunc: false,
        access: madfs_proto::ACCESS_W,
        holder: 0,
    }
}

fn created(r: Result<madfs_rpc::RawReply, Errno>) -> Result<u64, Errno> {
    match r?.decode()?.0 {
        Reply::Created { attr, .. } => Ok(attr.id),
        other => panic!("{other:?}"),
    }
}

#[test]
fn changes_sent_again_are_answered_not_applied_twice() {
    let mut cl = cluster(4, &["--replication", "2"], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    c.mkdir("/d", 0o755).unwrap();
    let t = c.transport();
    let path = "/d/f";
    let set = madfs_placement::meta_server(path, &madfs_placement::Layout::initial(4));
    let create = excl_create(path);
    let first = once(1, create.clone());
    let id = created(t.call_sync(set, &first, &[], 512)).unwrap();
    // the same request again: the same file, not EEXIST; another request: EEXIST
    assert_eq!(created(t.call_sync(set, &first, &[], 512)), Ok(id));
    assert_eq!(
        created(t.call_sync(set, &once(2, create.clone()), &[], 512)),
        Err(Errno::EEXIST)
    );
    // an append reserves its bytes once
    let append = once(3, Request::Append { path, len: 10, id });
    let at = |r: Result<madfs_rpc::RawReply, Errno>| match r.unwrap().decode().unwrap().0 {
        Reply::Offset(o) => o,
        other => panic!("{other:?}"),
    };
    assert_eq!(at(t.call_sync(set, &append, &[], 512)), 0);
    assert_eq!(at(t.call_sync(set, &append, &[], 512)), 0);
    assert_eq!(c.stat(path).unwrap().size, 10);

    c.mkdir("/d/g", 0o755).unwrap();
    let g = "/d/g";
    let gs = madfs_placement::meta_server(g, &madfs_placement::Layout::initial(4));
    let rm = once(9, Request::Rmdir { path: g });
    for i in 0..2 {
        let r = t.call_sync(gs, &rm, &[], 512).unwrap();
        r.decode().unwrap_or_else(|e| panic!("rmdir {i}: {e:?}"));
    }
    // an unlink answers the file it removed
    let h = "/d/h";
    let hs = madfs_placement::meta_server(h, &madfs_placement::Layout::initial(4));
    let h_id = created(t.call_sync(hs, &once(5, excl_create(h)), &[], 512)).unwrap();
    let unlink = once(4, Request::Unlink { path: h });
    for i in 0..2 {
        let r = t.call_sync(hs, &unlink, &[], 512).unwrap();
        match r.decode().unwrap_or_else(|e| panic!("unlink {i}: {e:?}")).0 {
            // (with a capability to drop the file's chunks)
            Reply::Attr(a) | Reply::Granted { attr: a, .. } => assert_eq!(a.id, h_id),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(c.stat(h).unwrap_err(), Errno::ENOENT);

    // the set's primary dies: the server that replaces it has the records (they travel
    // with the changes) and answers the same
    cl.kill(set as usize);
    assert_eq!(created(t.call_sync(set, &first, &[], 512)), Ok(id));
    assert_eq!(at(t.call_sync(set, &append, &[], 512)), 0);
    assert_eq!(c.stat(path).unwrap().size, 10);
    let unlink = once(6, Request::Unlink { path });
    for i in 0..2 {
        let r = t.call_sync(set, &unlink, &[], 512).unwrap();
        match r
            .decode()
            .unwrap_or_else(|e| panic!("unlink after the kill {i}: {e:?}"))
            .0
        {
            Reply::Attr(a) | Reply::Granted { attr: a, .. } => assert_eq!(a.id, id),
            other => panic!("{other:?}"),
        }
    }
}

/// A rename of a file sent again with its request id answers as the first time (done), on
/// the primary and on its successor, whether the target's name is on the same server or
/// another one (a move with an intent record); without the id it is `ENOENT`.
#[test]
fn renames_sent_again_are_answered_not_applied_twice() {
    let mut cl = cluster(4, &["--replication", "2"], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    c.mkdir("/r", 0o755).unwrap();
    let t = c.transport();
    let set_of = |p: &str| madfs_placement::meta_server(p, &madfs_placement::Layout::initial(4));
    // a name `<prefix><i>` whose server is (or is not) `from`'s
    let target = |prefix: &str, from: &str, same: bool| {
        (0..1000)
            .map(|i| format!("{prefix}{i}"))
            .find(|p| (set_of(p) == set_of(from)) == same)
            .unwrap()
    };
    let (near, far) = (target("/r/n", "/r/a", true), target("/r/f", "/r/b", false));
    let replaced = |r: Result<madfs_rpc::RawReply, Errno>, what: &str| {
        let raw = r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
        match raw.decode().map(|d| d.0) {
            Ok(Reply::Replaced(_)) => {}
            other => panic!("{what}: {other:?}"),
        }
    };
    for (seq, (from, to)) in [(20, ("/r/a", near.as_str())), (22, ("/r/b", far.as_str()))] {
        put(&c, from, b"moved once", 64, false);
        let set = set_of(from);
        let mv = |seq| {
            once(
                seq,
                Request::Rename {
                    from,
                    to,
                    noreplace: false,
                },
            )
        };
        let first = mv(seq);
        for i in 0..2 {
            replaced(t.call_sync(set, &first, &[], 512), &format!("rename {i}"));
        }
        let r = t.call_sync(set, &mv(seq + 1), &[], 512).unwrap();
        assert_eq!(r.decode().map(drop), Err(Errno::ENOENT), "a new rename");
        assert_eq!(get(&c, to), b"moved once");
        assert_eq!(c.stat(from).unwrap_err(), Errno::ENOENT);
        if to == far {
            // its primary dies: the successor answers it from the copied record
            cl.kill(set as usize);
            replaced(t.call_sync(set, &first, &[], 512), "after the kill");
            assert_eq!(get(&c, to), b"moved once");
        }
    }
}

/// Until every server's map has all `n` servers up, in one epoch (≤ 60 s).
fn all_up(cl: &madfs_cluster::LocalCluster, n: usize) {
    let t = std::time::Instant::now();
    loop {
        let (epoch, text) = all_up_in(cl, n);
        if epoch.is_some() {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "not all up:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A set's primary dies in the middle of a move to another server (its intent record
/// written and copied, the target's server holding the entry): the rename, sent again to the
/// set's new primary, is answered only once that server finished the move, so the file has
/// exactly one name; the old primary, back, brings back neither name, and the moved-in name
/// can be removed for good. It found (2026-11-28, after `client/tests/history.rs` did) a
/// successor that saw only its own set's intent records: it answered the rename done with
/// the old name still there (two names), and the old primary, restarted later, finished the
/// stale move again over a name removed since. It also found a client whose listing failed
/// with EIO for good after a server was restarted within `--down-after-ms` (the map did not
/// change, and calls made in parallel kept the connection to the previous run).
#[test]
fn a_move_whose_primary_died_is_finished_by_its_successor() {
    let mut cl = cluster(4, &["--replication", "2"], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    c.mkdir("/m", 0o755).unwrap();
    let set_of = |p: &str| madfs_placement::meta_server(p, &madfs_placement::Layout::initial(4));
    let name = |prefix: &str, set: u32| {
        (0..1000)
            .map(|i| format!("/m/{prefix}{i}"))
            .find(|p| set_of(p) == set)
            .unwrap()
    };
    // from set 0 (servers 0, 1) to set 2 (servers 2, 3)
    let (from, to) = (name("a", 0), name("b", 2));
    let bytes = data(3901, 7);
    put(&c, &from, &bytes, 3901, true);
    cl.stop(0);
    cl.options_mut().env = vec![("MADFS_FAULT".into(), "rename-after-attach".into())];
    cl.restart(0).unwrap();
    all_up(&cl, 4);
    let names = |c: &madfs_client::Client| -> Vec<String> {
        // (after a restart within `--down-after-ms` the map has not changed: the client
        // connects again rather than calling the previous run's endpoint, which failed every
        // listing with EIO for good; a loaded machine may take a few tries to see the
        // restarted server serve)
        let t = std::time::Instant::now();
        let list = loop {
            match c.readdir("/m") {
                Ok(v) => break v,
                Err(e) => assert!(t.elapsed() < Duration::from_secs(30), "{e:?}"),
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut v: Vec<String> = list.into_iter().map(|e| format!("/m/{}", e.name)).collect();
        v.sort();
        v
    };
    let c = client(&cl, Duration::from_secs(10), "none");
    c.rename(&from, &to, false)
        .expect("the rename, finished by server 1");
    assert!(cl.log(0).contains("aborting"), "{}", cl.log(0));
    assert_eq!(c.stat(&from).unwrap_err(), Errno::ENOENT);
    assert_eq!(get(&c, &to), bytes);
    assert_eq!(names(&c), [to.as_str()]);
    // the old primary returns (its stale record dropped by the copy of its set)
    cl.options_mut().env.clear();
    cl.restart(0).unwrap();
    all_up(&cl, 4);
    assert_eq!(names(&c), [to.as_str()]);
    assert_eq!(c.stat(&from).unwrap_err(), Errno::ENOENT);
    // the moved-in name is settled: it can go, and stays gone over another restart
    c.unlink(&to).unwrap();
    cl.kill(0);
    cl.restart(0).unwrap();
    all_up(&cl, 4);
    std::thread::sleep(Duration::from_secs(2)); // (a stale move would be finished by now)
    assert_eq!(names(&c), Vec::<String>::new());
}
