//! The cluster map of a replicated cluster (docs/redundancy.md): its Raft group, run by the
//! servers, marks a server down when it dies or freezes, and back up when it returns; every
//! server learns each change.

mod common;

use common::*;
use madfs_client::FileSystem;
use madfs_cluster::LocalCluster;
use madfs_control::MapStatus;
use std::time::{Duration, Instant};

/// Waits until every server of `on` knows a map for which `want` holds; returns how long it
/// took and the maps.
fn until(
    cl: &LocalCluster,
    on: &[usize],
    within: Duration,
    what: &str,
    want: impl Fn(&MapStatus) -> bool,
) -> (Duration, Vec<MapStatus>) {
    let t = Instant::now();
    loop {
        let maps: Vec<Option<MapStatus>> = on.iter().map(|i| map_of(cl, *i)).collect();
        if maps.iter().all(|m| m.as_ref().is_some_and(&want)) {
            return (t.elapsed(), maps.into_iter().flatten().collect());
        }
        if t.elapsed() > within {
            let logs: Vec<String> = on.iter().map(|i| cl.log(*i)).collect();
            panic!(
                "{what}: not within {within:?}: {maps:?}\n{}",
                logs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn all_up(m: &MapStatus) -> bool {
    m.states.iter().all(|s| s == "up")
}

fn signal(pid: Option<u32>, sig: i32) {
    // SAFETY: kill(2) on a server process of this test.
    unsafe { libc::kill(pid.unwrap() as i32, sig) };
}

#[test]
fn servers_are_marked_down_and_back_in_the_map() {
    let mut cl = cluster(4, &["--replication", "2"], "none");
    let every = [0, 1, 2, 3];
    let (t, maps) = until(&cl, &every, Duration::from_secs(15), "a leader", |m| {
        m.leader.is_some() && all_up(m) && m.states.len() == 4
    });
    let leader = maps[0].leader.unwrap() as usize;
    eprintln!(
        "leader {leader} known everywhere after {t:?}, epoch {}",
        maps[0].epoch
    );

    // a server killed (not the leader): down on every other server
    let victim = (leader + 3) % 4;
    let rest: Vec<usize> = every.iter().copied().filter(|s| *s != victim).collect();
    cl.kill(victim);
    let (t, maps) = until(&cl, &rest, Duration::from_secs(10), "kill", |m| {
        m.states[victim] == "down"
    });
    eprintln!(
        "server {victim} killed: down everywhere after {t:?} (epoch {})",
        maps[0].epoch
    );
    assert!(t < Duration::from_secs(4), "{t:?}");
    let down_epoch = maps[0].epoch;

    // restarted: rejoining, then up, on every server (itself included)
    cl.restart(victim).unwrap();
    let (t, maps) = until(&cl, &every, Duration::from_secs(15), "rejoin", |m| {
        all_up(m) && m.epoch >= down_epoch + 2
    });
    eprintln!(
        "server {victim} back up everywhere after {t:?} (epoch {})",
        maps[0].epoch
    );

    // the leader killed: a new leader, which marks the old one down
    let others: Vec<usize> = every.iter().copied().filter(|s| *s != leader).collect();
    cl.kill(leader);
    let (t, maps) = until(&cl, &others, Duration::from_secs(15), "leader kill", |m| {
        m.states[leader] == "down" && m.leader.is_some_and(|l| l as usize != leader)
    });
    eprintln!(
        "leader {leader} killed: new leader {:?}, old one down after {t:?}",
        maps[0].leader
    );
    assert!(t < Duration::from_secs(5), "{t:?}");
    cl.restart(leader).unwrap();
    until(&cl, &every, Duration::from_secs(15), "leader back", all_up);

    // a frozen server (SIGSTOP) is marked down; woken, it learns it and comes back
    let m = map_of(&cl, 0).unwrap();
    let frozen = (m.leader.unwrap() as usize + 1) % 4;
    let awake: Vec<usize> = every.iter().copied().filter(|s| *s != frozen).collect();
    signal(cl.pid(frozen), libc::SIGSTOP);
    let (t, maps) = until(&cl, &awake, Duration::from_secs(10), "freeze", |m| {
        m.states[frozen] == "down"
    });
    eprintln!(
        "server {frozen} frozen: down after {t:?} (epoch {})",
        maps[0].epoch
    );
    let frozen_epoch = maps[0].epoch;
    signal(cl.pid(frozen), libc::SIGCONT);
    let (t, maps) = until(&cl, &every, Duration::from_secs(15), "thaw", |m| {
        all_up(m) && m.epoch >= frozen_epoch + 2
    });
    eprintln!(
        "server {frozen} woken: up again after {t:?} (epoch {})",
        maps[0].epoch
    );
    // every server has the same map
    assert!(
        maps.windows(2).all(|w| w[0].epoch == w[1].epoch),
        "{maps:?}"
    );
}

/// An unreplicated cluster runs the map too (it holds the layout, docs/architecture.md
/// "Membership changes"), but never marks a server down: nobody could take its keys over.
#[test]
fn unreplicated_clusters_run_the_map_and_mark_nobody_down() {
    let mut cl = cluster(3, &[], "none");
    let (_, maps) = until(&cl, &[0, 1, 2], Duration::from_secs(15), "a map", |m| {
        m.leader.is_some()
    });
    for m in &maps {
        assert_eq!(m.epoch, 0);
        assert!(all_up(m));
        assert_eq!(m.shares, [1366, 1365, 1365]);
        assert_eq!(m.moving, 0);
    }
    let leader = maps[0].leader.unwrap() as usize;
    let dead = (leader + 1) % 3;
    cl.kill(dead);
    std::thread::sleep(Duration::from_secs(3));
    let alive: Vec<usize> = (0..3).filter(|i| *i != dead).collect();
    for i in alive {
        let m = map_of(&cl, i).expect("a map");
        assert!(all_up(&m) && m.epoch == 0, "server {i}: {m:?}");
    }
}

/// A rejoining server copies a file of tens of thousands of data extents (a sparse file
/// written in pieces): the primary's listing pages end inside the file (whole-file pages
/// overflowed the reply, `EMSGSIZE`, and the rejoin never finished). Then the file's other
/// copy is killed: the rejoined server serves every byte.
#[test]
fn a_file_of_many_extents_is_copied_on_rejoin() {
    use madfs_client::{FileSystem, OpenFlags};
    let mut cl = cluster(4, &["--replication", "2"], "none");
    let every = [0, 1, 2, 3];
    until(&cl, &every, Duration::from_secs(20), "start", all_up);
    let c = client(&cl, Duration::from_secs(10), "none");
    let mut f = c.open("/sparse", OpenFlags::create_trunc()).unwrap();
    // 30,000 extents of 100 bytes, 8 KiB apart (about 40 per chunk, in every set)
    let piece = data(100, 7);
    for i in 0..30_000u64 {
        c.write(&mut f, i * 8192, &piece).unwrap();
    }
    c.fsync(&mut f).unwrap();
    c.close(f).unwrap();
    let want = get(&c, "/sparse");
    // each server has been away once, then its partner is killed: nothing is lost
    let victim = 1;
    cl.kill(victim);
    until(&cl, &[0, 2, 3], Duration::from_secs(10), "kill", |m| {
        m.states[victim] == "down"
    });
    cl.restart(victim).unwrap();
    let (t, _) = until(&cl, &every, Duration::from_secs(60), "rejoin", all_up);
    eprintln!("server {victim} rejoined in {t:?}");
    cl.kill(victim + 1);
    until(&cl, &[0, 1, 3], Duration::from_secs(10), "partner", |m| {
        m.states[victim + 1] == "down"
    });
    assert!(
        sum(&get(&c, "/sparse")) == sum(&want),
        "sparse file changed"
    );
}

/// A file's size, published by its writer's fsync and close, is on its name's secondary:
/// killing the primary afterwards leaves the size as it was — over plain TCP too (the
/// preload's first calls), whose fsyncs once published the size on the primary alone
/// (io500 found a file one chunk short after its primary died).
#[test]
fn a_published_size_survives_the_primary() {
    use madfs_client::{FileSystem, OpenFlags};
    let mut cl = cluster(4, &["--replication", "2"], "none");
    let every = [0, 1, 2, 3];
    until(&cl, &every, Duration::from_secs(20), "start", all_up);
    let cfg = madfs_client::ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    let c = madfs_client::Client::new_tcp(&cfg).unwrap();
    c.mkdir("/d", 0o755).unwrap();
    let mut sizes = vec![];
    for i in 0..8u64 {
        let path = format!("/d/f{i}");
        let mut f = c.open(&path, OpenFlags::create_trunc()).unwrap();
        let piece = data(1 << 20, i);
        for k in 0..5 {
            c.write(&mut f, k << 20, &piece).unwrap();
        }
        if i % 2 == 0 {
            c.fsync(&mut f).unwrap();
        }
        c.close(f).unwrap();
        sizes.push((path, 5u64 << 20));
    }
    let victim =
        madfs_placement::meta_server("/d/f0", &madfs_placement::Layout::initial(4)) as usize;
    cl.kill(victim);
    let rest: Vec<usize> = every.iter().copied().filter(|s| *s != victim).collect();
    until(&cl, &rest, Duration::from_secs(10), "kill", |m| {
        m.states[victim] == "down"
    });
    for (path, size) in &sizes {
        assert_eq!(c.stat(path).unwrap().size, *size, "{path}");
    }
}

/// A primary gives up on a frozen secondary in the middle of a copy large enough for a
/// rendezvous (its data read only when the receiver asks for it), and the secondary wakes
/// up and asks: the primary must not read the given-up call's buffers, long gone. It did
/// (2026-11-28, found by `client/tests/history.rs`): a server died of a SIGSEGV in
/// `ucp_dt_iov_gather` under `ucp_rndv_rtr_handler`. Now a connection given up on in error
/// mode `peer` is closed with force, which ends its sends. Three rounds of freeze, copy and
/// thaw; every file written meanwhile reads back, from a primary that stayed up.
#[test]
fn a_copy_given_up_on_is_not_sent_when_its_receiver_wakes() {
    setup();
    // (a rendezvous from 8 KiB on, whatever UCX would pick)
    let cl = LocalCluster::start(madfs_cluster::Options {
        servers: 4,
        args: vec!["--replication".into(), "2".into()],
        err_mode: "none".into(),
        env: vec![("UCX_RNDV_THRESH".into(), "8192".into())],
    })
    .expect("start servers");
    let every = [0, 1, 2, 3];
    until(&cl, &every, Duration::from_secs(15), "a leader", |m| {
        m.leader.is_some() && all_up(m)
    });
    let c = client(&cl, Duration::from_secs(20), "none");
    c.mkdir("/z", 0o755).unwrap();
    // files of replica set 0 (primary: server 0), made first (every IO thread of server 0
    // then has its connection to server 1); then, server 1 asleep, a chunk 0 of 60 KiB each:
    // a copy of its write batch is a rendezvous over TCP
    let set0: Vec<String> = (0..)
        .map(|i| format!("/z/f{i}"))
        .filter(|p| madfs_placement::meta_server(p, &madfs_placement::Layout::initial(4)) == 0)
        .take(24)
        .collect();
    for p in &set0 {
        put(&c, p, b"", 1, false);
    }
    let paths = &set0[..3];
    for (round, p) in paths.iter().enumerate() {
        let m = map_of(&cl, 0).unwrap();
        signal(cl.pid(1), libc::SIGSTOP);
        // server 0 gives up on the copy, then on server 1
        let mut f = c.open(p, madfs_client::OpenFlags::default()).unwrap();
        c.write(&mut f, 0, &data(60_000, round as u64)).unwrap();
        c.close(f).unwrap();
        let (_, maps) = until(&cl, &[0, 2, 3], Duration::from_secs(10), "frozen", |x| {
            x.states[1] == "down"
        });
        assert!(maps[0].epoch > m.epoch);
        signal(cl.pid(1), libc::SIGCONT);
        until(&cl, &every, Duration::from_secs(20), "thawed", |x| {
            all_up(x) && x.epoch >= maps[0].epoch + 2
        });
        assert!(
            cl.pid(0).is_some() && map_of(&cl, 0).is_some(),
            "server 0 died:\n{}",
            cl.log(0)
        );
    }
    for (round, p) in paths.iter().enumerate() {
        assert_eq!(get(&c, p), data(60_000, round as u64), "{p}");
    }
    assert!(!cl.log(0).contains("Caught signal"), "{}", cl.log(0));
}
