//! Membership changes of an unreplicated cluster (docs/architecture.md, "Membership
//! changes"): a server drained while a client writes and reads; a server added (3 → 4) and
//! drained again (4 → 3), the CI's short form; every byte and every entry stays, an added
//! server takes its share and no more, a drained one ends up owning and holding nothing, and
//! clients follow the new layout without noticing.

mod common;

use common::procs::{bin_dir, show};
use common::*;
use madfs_client::{Client, FileSystem, OpenFlags};
use madfs_cluster::LocalCluster;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of file `i` of the tree: empty, inline, a few chunks, many chunks.
fn size_of(i: usize) -> usize {
    match i % 4 {
        0 => 0,
        1 => 100 + i,
        2 => 3 * 65536 + i,
        _ => 20 * 65536 + 7,
    }
}

fn tree(c: &Client, dirs: usize, files: usize) {
    for d in 0..dirs {
        c.mkdir(&format!("/d{d}"), 0o755).unwrap();
        for f in 0..files {
            let i = d * files + f;
            put(
                c,
                &format!("/d{d}/f{f}"),
                &data(size_of(i), i as u64),
                65536,
                false,
            );
        }
    }
}

fn check_tree(c: &Client, dirs: usize, files: usize, who: &str) {
    for d in 0..dirs {
        let names = c
            .readdir(&format!("/d{d}"))
            .unwrap_or_else(|e| panic!("{who}: readdir /d{d}: {e}"));
        assert_eq!(names.len(), files, "{who}: entries of /d{d}");
        for f in 0..files {
            let i = d * files + f;
            let got = get(c, &format!("/d{d}/f{f}"));
            assert!(
                got == data(size_of(i), i as u64),
                "{who}: /d{d}/f{f}: {} bytes, {} expected",
                got.len(),
                size_of(i)
            );
        }
    }
}

#[test]
fn a_server_drained_while_a_client_works_hands_everything_over() {
    let cl = cluster(
        3,
        &["--chunk-size", "65536", "--move-batch-slots", "128"],
        "none",
    );
    let t0 = Instant::now();
    let c = client(&cl, Duration::from_secs(20), "none");
    let (dirs, files) = (4, 60);
    tree(&c, dirs, files);
    eprintln!("tree made in {:?}", t0.elapsed());
    c.mkdir("/w", 0o755).unwrap();
    // a file kept open through the move, read afterwards with the layout of before (its
    // chunks on this host are read from the chunk files: they must not be the old owner's)
    let held_path = "/d1/f3";
    let held = c.open(held_path, OpenFlags::default()).unwrap();
    let i = files + 3;

    // a client that goes on creating, writing and reading back through the move
    let (stop, worker) = working_client(&cl, false);
    std::thread::sleep(Duration::from_millis(300));

    let took = ctl_waiting(&cl, &["drain", "2"]);
    stop.store(true, Relaxed);
    let made = worker.join().expect("the working client");
    eprintln!("drained in {took:?}; the working client made {made} files meanwhile");

    // (after the old owners dropped what they copied)
    std::thread::sleep(Duration::from_secs(3));
    let mut back = vec![0u8; size_of(i)];
    assert_eq!(c.read(&held, 0, &mut back).unwrap(), back.len());
    assert!(
        back == data(size_of(i), i as u64),
        "{held_path} read through a handle of before"
    );
    c.close(held).unwrap();

    // every server knows the layout: server 2 owns nothing, the others half each
    for i in 0..3 {
        let m = map_of(&cl, i).expect("a map");
        assert_eq!(m.moving, 0, "server {i}");
        assert_eq!(m.shares[2], 0, "server {i}: {:?}", m.shares);
        assert_eq!(m.shares[0] + m.shares[1], 4096);
        assert!(m.shares[0].abs_diff(m.shares[1]) <= 1, "{:?}", m.shares);
    }
    // the client of before (its layout is the initial one) and a new one see everything
    eprintln!("checking at {:?}", t0.elapsed());
    check_tree(&c, dirs, files, "the first client");
    eprintln!("checked at {:?}", t0.elapsed());
    let fresh = client(&cl, Duration::from_secs(20), "none");
    check_tree(&fresh, dirs, files, "a new client");
    check_made(&fresh, made, false, "a new client");
    // a while after its last switch the drained server holds no entry and no chunk byte
    std::thread::sleep(Duration::from_secs(4));
    let held = stats(&cl, 2);
    eprintln!("server 2 after the drain: {held:?}");
    let data_dir = cl.root().join("server2").join("data");
    let bytes = chunk_bytes(&cl, 2);
    assert_eq!(
        bytes,
        0,
        "chunk bytes left on the drained server: {}",
        left(&data_dir)
    );
    // and the namespace still works: everything removed, the directories too
    remove_all(&fresh, dirs, files, made);
}

/// Bytes of file `/w/f<k>` the working client makes: as the tree's ([`size_of`]), or with
/// `small` at most 64 KiB (kept inline: no chunk file).
fn made_size(k: usize, small: bool) -> usize {
    if small {
        size_of(k).min(1000 + k)
    } else {
        size_of(k)
    }
}

/// A client (its own thread) that creates, writes and reads back files `/w/f<k>`
/// ([`made_size`]) until `stop` is set (at least 20): returns how many it made. `/w` must
/// exist.
fn working_client(
    cl: &LocalCluster,
    small: bool,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<usize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (stop, file) = (stop.clone(), cl.cluster_file());
        std::thread::spawn(move || {
            let mut cfg = madfs_client::ClientConfig::from_cluster_file(file).unwrap();
            cfg.timeout = Duration::from_secs(20);
            let c = Client::new(&cfg).unwrap();
            let mut made = 0usize;
            while !stop.load(Relaxed) || made < 20 {
                let p = format!("/w/f{made}");
                let bytes = data(made_size(made, small), 1_000_000 + made as u64);
                let t = Instant::now();
                let mut f = c.open(&p, OpenFlags::create_trunc()).unwrap();
                let t1 = t.elapsed();
                if !bytes.is_empty() {
                    c.write(&mut f, 0, &bytes).unwrap();
                }
                let t2 = t.elapsed();
                c.close(f).unwrap();
                let t3 = t.elapsed();
                let back = get(&c, &p);
                if t.elapsed() > Duration::from_secs(1) {
                    eprintln!(
                        "slow: {p} open {t1:?} write {t2:?} close {t3:?} all {:?}",
                        t.elapsed()
                    );
                }
                assert!(back == bytes, "/w/f{made} read back wrong");
                if made > 0 {
                    let k = (made * 7919) % made;
                    let again = get(&c, &format!("/w/f{k}"));
                    assert!(
                        again == data(made_size(k, small), 1_000_000 + k as u64),
                        "/w/f{k} read again wrong"
                    );
                }
                made += 1;
            }
            made
        })
    };
    (stop, worker)
}

/// Every file the working client made reads back right through `c`, and `/w` lists them.
fn check_made(c: &Client, made: usize, small: bool, who: &str) {
    assert_eq!(c.readdir("/w").unwrap().len(), made, "{who}: entries of /w");
    for k in 0..made {
        assert!(
            get(c, &format!("/w/f{k}")) == data(made_size(k, small), 1_000_000 + k as u64),
            "{who}: /w/f{k}"
        );
    }
}

/// Removes the tree and what the working client made; the root is empty afterwards.
fn remove_all(c: &Client, dirs: usize, files: usize, made: usize) {
    for d in 0..dirs {
        for f in 0..files {
            c.unlink(&format!("/d{d}/f{f}")).unwrap();
        }
        c.rmdir(&format!("/d{d}")).unwrap();
    }
    for k in 0..made {
        c.unlink(&format!("/w/f{k}")).unwrap();
    }
    c.rmdir("/w").unwrap();
    assert!(c.readdir("/").unwrap().is_empty());
}

/// Runs `madfs-ctl ARGS --wait 120` on `cl`, which must succeed; how long it took.
fn ctl_waiting(cl: &LocalCluster, args: &[&str]) -> Duration {
    let t = Instant::now();
    let out = std::process::Command::new(bin_dir().join("madfs-ctl"))
        .args(args)
        .args(["--wait", "120", "--cluster"])
        .arg(cl.cluster_file())
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", show(&out));
    t.elapsed()
}

/// Bytes of chunk data server `i` holds.
fn chunk_bytes(cl: &LocalCluster, i: usize) -> u64 {
    du(&cl.root().join(format!("server{i}")).join("data"))
}

#[test]
fn a_server_added_takes_its_share_and_drains_again_while_a_client_works() {
    let mut cl = cluster(
        3,
        &["--chunk-size", "65536", "--move-batch-slots", "128"],
        "none",
    );
    let c = client(&cl, Duration::from_secs(20), "none");
    let (dirs, files) = (4, 60);
    tree(&c, dirs, files);
    c.mkdir("/w", 0o755).unwrap();
    let held_path = "/d2/f5";
    let held = c.open(held_path, OpenFlags::default()).unwrap();
    let i = 2 * files + 5;
    let before: Vec<u64> = (0..3).map(|s| chunk_bytes(&cl, s)).collect();
    let total: u64 = before.iter().sum();

    // (its files small: the chunk data is the tree's, whose moves are measured)
    let (stop, worker) = working_client(&cl, true);
    std::thread::sleep(Duration::from_millis(300));
    // a fourth server starts with --join: listed, no member, serving nothing yet
    let new = cl.start_joining().unwrap();
    assert_eq!(new, 3);
    let took = ctl_waiting(&cl, &["add", "3"]);
    eprintln!("server 3 added in {took:?}");
    for s in 0..4 {
        let m = map_of(&cl, s).expect("a map");
        assert_eq!(m.moving, 0, "server {s}");
        assert_eq!(m.shares, [1024, 1024, 1024, 1024], "server {s}");
    }
    // the client of before (it knows 3 servers) lists and reads everything, through a
    // handle of before too
    check_tree(&c, dirs, files, "the first client, after the join");
    std::thread::sleep(Duration::from_secs(3));
    let mut back = vec![0u8; size_of(i)];
    assert_eq!(c.read(&held, 0, &mut back).unwrap(), back.len());
    assert!(
        back == data(size_of(i), i as u64),
        "{held_path} after the join"
    );
    // the new server got a quarter of the tree's chunk data: the minimum, no more
    let after: Vec<u64> = (0..4).map(|s| chunk_bytes(&cl, s)).collect();
    eprintln!("chunk bytes per server: before {before:?}, after the join {after:?}");
    let share = after[3] as f64 / (total as f64 / 4.0);
    assert!(
        (0.8..=1.2).contains(&share),
        "moved {share:.2}× the minimum"
    );
    let now: u64 = after.iter().sum();
    assert!(
        now.abs_diff(total) * 100 <= total,
        "{total} bytes before, {now} after"
    );

    // and it drains again: 4 → 3
    let took = ctl_waiting(&cl, &["drain", "3"]);
    eprintln!("server 3 drained in {took:?}");
    stop.store(true, Relaxed);
    let made = worker.join().expect("the working client");
    eprintln!("the working client made {made} files meanwhile");
    for s in 0..4 {
        let m = map_of(&cl, s).expect("a map");
        assert_eq!(
            (m.moving, m.shares[3]),
            (0, 0),
            "server {s}: {:?}",
            m.shares
        );
    }
    check_tree(&c, dirs, files, "the first client, after the drain");
    check_made(&c, made, true, "the first client");
    let fresh = client(&cl, Duration::from_secs(20), "none");
    check_tree(&fresh, dirs, files, "a new client");
    check_made(&fresh, made, true, "a new client");
    assert_eq!(c.read(&held, 0, &mut back).unwrap(), back.len());
    assert!(
        back == data(size_of(i), i as u64),
        "{held_path} after the drain"
    );
    c.close(held).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(chunk_bytes(&cl, 3), 0, "chunk bytes left on server 3");
    remove_all(&fresh, dirs, files, made);
}

/// Bytes of disk the chunk files under the chunk directory `dir` take (allocated blocks):
/// its subdirectories' files, record files left out (a record file keeps its first block,
/// of zeros: every block a hole).
fn du(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for sub in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(sub.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if e.path().extension().is_none() {
                total += e.metadata().unwrap().blocks() * 512;
            }
        }
    }
    total
}

/// The chunk files under the chunk directory `dir` that take disk blocks, with their sizes.
fn left(dir: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut out = String::new();
    for sub in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(sub.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let m = e.metadata().unwrap();
            if m.blocks() > 0 && e.path().extension().is_none() {
                out += &format!(
                    "{} size {} blocks {}\n",
                    e.path().display(),
                    m.len(),
                    m.blocks()
                );
            }
        }
    }
    out
}

/// Waits until no slot is left to move (server 0's map), at most `secs`; how long it took.
fn moves_done(cl: &LocalCluster, secs: u64) -> Duration {
    let t = Instant::now();
    loop {
        if map_of(cl, 0).is_some_and(|m| m.moving == 0) {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "moves not done in {secs} s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_join_finishes_after_its_source_its_target_and_the_leader_are_killed_mid_move() {
    // slow moves (4 MiB/s, batches of 32 slots) so that the kills land in the middle
    let mut cl = cluster(
        3,
        &[
            "--chunk-size",
            "65536",
            "--move-batch-slots",
            "32",
            "--move-mib-s",
            "4",
        ],
        "none",
    );
    let c = client(&cl, Duration::from_secs(20), "none");
    let (dirs, files) = (4, 60);
    tree(&c, dirs, files);
    let total: u64 = (0..3).map(|s| chunk_bytes(&cl, s)).sum();
    drop(c);
    let new = cl.start_joining().unwrap();
    let (ok, out) = cl.ctl(&["add", &new.to_string()]);
    assert!(ok, "{out}");
    let left = |cl: &LocalCluster| map_of(cl, 0).map_or(0, |m| m.moving);
    std::thread::sleep(Duration::from_millis(1500));
    // a source (server 1 gives its slots too), then the receiver, then the map's leader
    eprintln!("killing server 1 with {} slots left", left(&cl));
    cl.kill(1);
    std::thread::sleep(Duration::from_millis(500));
    cl.restart(1).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    eprintln!(
        "killing server 3 (the new one) with {} slots left",
        left(&cl)
    );
    cl.kill(3);
    std::thread::sleep(Duration::from_millis(500));
    cl.restart(3).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let leader = map_of(&cl, 0).and_then(|m| m.leader).unwrap_or(0) as usize;
    eprintln!(
        "killing server {leader} (the leader) with {} slots left",
        left(&cl)
    );
    assert!(
        left(&cl) > 0,
        "the move ended before the last kill: slow it down"
    );
    cl.kill(leader);
    std::thread::sleep(Duration::from_millis(500));
    cl.restart(leader).unwrap();
    eprintln!(
        "the move finished {:?} after the last restart",
        moves_done(&cl, 180)
    );
    for s in 0..4 {
        let m = map_of(&cl, s).expect("a map");
        assert_eq!(m.shares, [1024, 1024, 1024, 1024], "server {s}");
    }
    // nothing lost: every byte and entry reads back; nothing doubled: once the old owners
    // cleaned, the servers hold what they held before, together
    let fresh = client(&cl, Duration::from_secs(20), "none");
    check_tree(&fresh, dirs, files, "after the kills");
    std::thread::sleep(Duration::from_secs(4));
    let now: Vec<u64> = (0..4).map(|s| chunk_bytes(&cl, s)).collect();
    let sum: u64 = now.iter().sum();
    eprintln!("chunk bytes: {total} before, {now:?} after");
    assert!(
        sum.abs_diff(total) * 100 <= total,
        "{total} before, {sum} after"
    );
    for d in 0..dirs {
        for f in 0..files {
            fresh.unlink(&format!("/d{d}/f{f}")).unwrap();
        }
        fresh.rmdir(&format!("/d{d}")).unwrap();
    }
    assert!(fresh.readdir("/").unwrap().is_empty());
}

/// Waits until every server of `on` knows a map for which `want` holds (at most `secs`).
fn until_map(
    cl: &LocalCluster,
    on: &[usize],
    secs: u64,
    what: &str,
    want: impl Fn(&madfs_control::MapStatus) -> bool,
) -> Duration {
    let t = Instant::now();
    loop {
        let maps: Vec<_> = on.iter().map(|i| map_of(cl, *i)).collect();
        if maps.iter().all(|m| m.as_ref().is_some_and(&want)) {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{what}: not within {secs} s: {maps:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_dead_server_removed_has_its_replica_sets_rebuilt_and_a_second_death_loses_nothing() {
    let mut cl = cluster(4, &["--replication", "2", "--chunk-size", "65536"], "none");
    let every = [0, 1, 2, 3];
    until_map(&cl, &every, 20, "a leader", |m| {
        m.leader.is_some() && m.states.iter().all(|s| s == "up")
    });
    madfs_client::init_cli_logging();
    let c = client(&cl, Duration::from_secs(20), "none");
    let (dirs, files) = (4, 40);
    tree(&c, dirs, files);
    c.mkdir("/w", 0o755).unwrap();

    // server 1 dies for good; the map has it down, then it is removed while a client works
    cl.kill(1);
    let rest = [0, 2, 3];
    until_map(&cl, &rest, 20, "server 1 down", |m| m.states[1] == "down");
    let (stop, worker) = working_client(&cl, false);
    std::thread::sleep(Duration::from_millis(300));
    let took = ctl_waiting(&cl, &["remove", "1"]);
    until_map(&cl, &rest, 20, "server 1 removed, sets rebuilt", |m| {
        m.states[1] == "removed" && m.building.is_empty()
    });
    stop.store(true, Relaxed);
    let made = worker.join().expect("the working client");
    let copied: Vec<String> = rest
        .iter()
        .flat_map(|i| {
            let log = cl.log(*i);
            let lines: Vec<String> = log
                .lines()
                .filter(|l| l.contains("rebuild: copied"))
                .map(|l| format!("server {i}: {l}"))
                .collect();
            lines
        })
        .collect();
    eprintln!(
        "removed and rebuilt in {took:?}; the working client made {made} files meanwhile\n{}",
        copied.join("\n")
    );
    for i in rest {
        let m = map_of(&cl, i).expect("a map");
        assert_eq!(m.shares, [1024, 0, 2048, 1024], "server {i}");
    }

    // two copies of every entry again: the members hold twice the namespace
    let entries = (dirs + dirs * files + 1 + made) as u64;
    let held: Vec<u64> = rest.iter().map(|i| stats(&cl, *i).held_entries).collect();
    assert_eq!(
        held.iter().sum::<u64>(),
        2 * entries,
        "entries held {held:?}"
    );
    check_tree(&c, dirs, files, "the client of before");
    check_made(&c, made, false, "the client of before");

    // a second server dies (the one that took server 1's slots): nothing is lost
    cl.kill(2);
    until_map(&cl, &[0, 3], 20, "server 2 down", |m| m.states[2] == "down");
    let fresh = client(&cl, Duration::from_secs(20), "none");
    check_tree(&fresh, dirs, files, "a new client, server 2 dead");
    check_made(&fresh, made, false, "a new client, server 2 dead");
    check_tree(&c, dirs, files, "the client of before, server 2 dead");
}
