//! Redundancy (docs/redundancy.md): a cluster of 4 servers keeping 2 copies of everything
//! loses nothing when a server dies or freezes in the middle of real programs (tar of
//! /usr/include, `madfs-bench io500`), serves on within seconds, and heals when the server
//! comes back: a restarted or woken server catches up, after which its partner can die too.

mod common;

use madfs_cluster::{find_bin, LocalCluster, Options};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Call deadline of the programs here (failing over does not wait for it: a call to a dead
/// or frozen server is given up as soon as the cluster map has the server down).
const TIMEOUT_MS: u32 = 10_000;

/// One test at a time: four clusters of four servers with a tar or a benchmark each, on the
/// 2-core machine, measured the machine more than failover (a fault test's timing must be
/// the servers', not the scheduler's).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn replicated() -> LocalCluster {
    let _ = std::fs::create_dir_all(common::MOUNT);
    LocalCluster::start(Options {
        servers: 4,
        args: vec!["--replication".into(), "2".into()],
        ..Default::default()
    })
    .expect("start servers")
}

/// `script` under the preload, started (not waited for).
fn spawn_bash(cl: &LocalCluster, script: &str) -> Child {
    Command::new("/bin/bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_MOUNT", common::MOUNT)
        .env("MADFS_TIMEOUT_MS", TIMEOUT_MS.to_string())
        .env("UCX_NET_DEVICES", "lo")
        .env("T", cl.root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bash")
}

/// Waits for `child`, asserting it succeeded; its stdout.
fn finished(child: Child, what: &str) -> String {
    common::ok(child.wait_with_output().expect("wait"), what)
}

/// Until every server's map has every server up (a restarted or woken server caught up).
fn all_up(cl: &LocalCluster, within: Duration) -> Duration {
    let t = Instant::now();
    loop {
        let out = Command::new(find_bin("madfs-ctl"))
            .args(["status", "--cluster"])
            .arg(cl.cluster_file())
            .output()
            .expect("madfs-ctl");
        let text = String::from_utf8_lossy(&out.stdout);
        if text.matches("states=up,up,up,up").count() == 4 {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < within,
            "not all up within {within:?}:\n{text}\n{}",
            (0..4).map(|i| cl.log(i)).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(cl: &LocalCluster, i: usize, sig: i32) {
    // SAFETY: kill(2) on a server process of this test.
    unsafe { libc::kill(cl.pid(i).expect("server pid") as i32, sig) };
}

const EXTRACT: &str = r#"
    mkdir -p /madfs/r
    tar cf - -C /usr include | tar xf - -C /madfs/r
    echo extracted
"#;

const SAME: &str = r#"
    diff -r --no-dereference /usr/include /madfs/r/include && echo identical
    find /madfs/r/include | wc -l
"#;

#[test]
fn a_killed_server_loses_nothing_and_rejoins() {
    let _one = one_at_a_time();
    let mut cl = replicated();
    let tar = spawn_bash(&cl, EXTRACT);
    std::thread::sleep(Duration::from_millis(2500));
    let t = Instant::now();
    cl.kill(1);
    let out = finished(tar, "tar into madfs with server 1 killed");
    assert!(out.contains("extracted"), "{out}");
    eprintln!("tar done {:?} after the kill", t.elapsed());
    let same = common::bash(&cl, SAME, TIMEOUT_MS);
    assert!(same.contains("identical"), "{same}");

    // back: it catches up (what was written meanwhile), then its partner dies
    cl.restart(1).expect("restart server 1");
    let took = all_up(&cl, Duration::from_secs(60));
    eprintln!("server 1 caught up and up {took:?} after its restart");
    assert!(cl.log(1).contains("caught up"), "{}", cl.log(1));
    cl.kill(2);
    let again = common::bash(&cl, SAME, TIMEOUT_MS);
    assert_eq!(again, same, "after server 2 died too");
}

#[test]
fn a_frozen_server_is_replaced_and_catches_up_when_it_wakes() {
    let _one = one_at_a_time();
    let mut cl = replicated();
    let tar = spawn_bash(&cl, EXTRACT);
    std::thread::sleep(Duration::from_millis(2500));
    signal(&cl, 1, libc::SIGSTOP);
    let out = finished(tar, "tar into madfs with server 1 frozen");
    assert!(out.contains("extracted"), "{out}");
    let same = common::bash(&cl, SAME, TIMEOUT_MS);
    assert!(same.contains("identical"), "{same}");

    // awake: stale, it serves nothing until it has caught up (the writes it missed)
    signal(&cl, 1, libc::SIGCONT);
    let took = all_up(&cl, Duration::from_secs(60));
    eprintln!("server 1 caught up and up {took:?} after it woke");
    assert!(cl.log(1).contains("caught up"), "{}", cl.log(1));
    cl.kill(2);
    let again = common::bash(&cl, SAME, TIMEOUT_MS);
    assert_eq!(again, same, "after server 2 died");
}

#[test]
fn io500_runs_through_a_killed_server() {
    // in the middle of ior-easy-write (a request in flight at the kill is sent again to the
    // new primary: a write is the same write again)
    io500_through_a_kill(Duration::from_millis(1500), 3);
}

#[test]
fn io500_runs_through_a_kill_in_its_metadata_phases() {
    // in mdtest-easy-write: creates in flight at the kill are sent again with their request
    // ids, and answered from the replay records (not EEXIST)
    io500_through_a_kill(Duration::from_millis(4000), 2);
}

fn io500_through_a_kill(after: Duration, victim: usize) {
    let _one = one_at_a_time();
    let mut cl = replicated();
    common::bash(&cl, "mkdir -p /madfs/b", TIMEOUT_MS);
    let bench = Command::new(find_bin("madfs-bench"))
        .args([
            "io500",
            "--dir",
            "/madfs/b",
            "--ranks",
            "2",
            "--stonewall",
            "2",
            "--rpc-iters",
            "2000",
            "--rand-size",
            "16m",
        ])
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_MOUNT", common::MOUNT)
        .env("MADFS_TIMEOUT_MS", TIMEOUT_MS.to_string())
        .env("UCX_NET_DEVICES", "lo")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("madfs-bench");
    std::thread::sleep(after);
    cl.kill(victim);
    // every read phase checks what it reads; find checks its count
    let done = bench.wait_with_output().expect("wait");
    if !done.status.success() {
        // what the files look like now (sizes as the servers answer them)
        let ls = common::run(
            &cl,
            &[
                "/bin/bash",
                "-c",
                "ls -lR /madfs/b | grep -v '^$' | head -40",
            ],
            TIMEOUT_MS,
        );
        eprintln!("{}", String::from_utf8_lossy(&ls.stdout));
    }
    let out = common::ok(
        done,
        &format!("madfs-bench io500 with server {victim} killed"),
    );
    eprintln!("server {victim} killed {after:?} after the start:\n{out}");
    assert!(out.contains("[SCORE]"), "{out}");
}
