//! The crash test of issue 32: 1,000 file renames and 50 directory renames across servers
//! while servers are SIGKILLed (and restarted) at random points, and separately while the
//! renaming client processes are SIGKILLed at random points. Afterwards every file has
//! exactly one name and its data, and every directory exactly one name and all it held.
//! (Durability of fsync'ed entries and of `sync` is shown in `e2e.rs`.)

mod common;

use common::{client, cluster, data, get, put, settle, sum, Known};
use madfs_client::{Client, Errno, FileSystem};
use std::io::{BufRead, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const FILES: usize = 40;
const DIRS: usize = 5;
/// File renames and directory renames each test wants acknowledged.
const FILE_RENAMES: usize = 1000;
const DIR_RENAMES: usize = 50;
/// What each renamed directory holds (files; `sub` is a subdirectory).
const MEMBERS: [&str; 8] = ["x0", "x1", "x2", "x3", "x4", "big", "sub/y0", "sub/y1"];

fn fname(i: usize, g: u32) -> String {
    format!("/c/f{i}.{g}")
}

fn dname(j: usize, g: u32) -> String {
    format!("/c/d{j}.{g}")
}

fn file_bytes(i: usize) -> Vec<u8> {
    data(if i.is_multiple_of(3) { 150_000 } else { 3901 }, i as u64)
}

fn member_bytes(j: usize, m: usize) -> Vec<u8> {
    data(
        if MEMBERS[m] == "big" { 200_000 } else { 3901 },
        1000 + (j * 16 + m) as u64,
    )
}

fn populate(c: &Client) {
    c.mkdir("/c", 0o755).unwrap();
    for i in 0..FILES {
        put(c, &fname(i, 0), &file_bytes(i), 47008, false);
    }
    for j in 0..DIRS {
        let d = dname(j, 0);
        c.mkdir(&d, 0o755).unwrap();
        c.mkdir(&format!("{d}/sub"), 0o755).unwrap();
        for (m, name) in MEMBERS.iter().enumerate() {
            put(c, &format!("{d}/{name}"), &member_bytes(j, m), 47008, false);
        }
    }
}

fn names(c: &Client, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = c
        .readdir(dir)
        .unwrap_or_else(|e| panic!("readdir {dir}: {e:?}"))
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

/// Every file has exactly one name (the one acknowledged or one of two candidates) and its
/// data; every directory exactly one name, everything it held, nothing else.
/// Returns each directory's generation.
fn verify(c: &Client, files: &[Known], dirs: &[Known]) -> Vec<u32> {
    let until = Instant::now() + Duration::from_secs(60);
    let mut want = vec![];
    let mut gens = vec![];
    for (i, k) in files.iter().enumerate() {
        let g = settle(c, *k, until, &|g| fname(i, g))
            .unwrap_or_else(|| panic!("file {i} ({k:?}): no single name"));
        assert_eq!(sum(&get(c, &fname(i, g))), sum(&file_bytes(i)), "file {i}");
        want.push(format!("f{i}.{g}"));
    }
    for (j, k) in dirs.iter().enumerate() {
        let g = settle(c, *k, until, &|g| dname(j, g))
            .unwrap_or_else(|| panic!("directory {j} ({k:?}): no single name"));
        let d = dname(j, g);
        for (m, name) in MEMBERS.iter().enumerate() {
            let p = format!("{d}/{name}");
            if let Err(e) = c.stat(&p) {
                let other = dname(j, g + 1);
                let all = c.find("/c", &Default::default()).map(|(v, _)| {
                    v.into_iter()
                        .filter(|p| p.contains(&format!("d{j}.")))
                        .collect::<Vec<_>>()
                });
                panic!(
                    "{p} ({k:?}): {e:?}; all: {all:?}; {d}: {:?}, {other}: {:?}",
                    c.readdir(&d)
                        .map(|v| v.into_iter().map(|e| e.name).collect::<Vec<_>>()),
                    c.readdir(&other)
                        .map(|v| v.into_iter().map(|e| e.name).collect::<Vec<_>>())
                );
            }
            assert_eq!(sum(&get(c, &p)), sum(&member_bytes(j, m)), "{p}");
        }
        let top = ["big", "sub", "x0", "x1", "x2", "x3", "x4"];
        assert_eq!(names(c, &d), top, "{d}");
        assert_eq!(names(c, &format!("{d}/sub")), ["y0", "y1"], "{d}/sub");
        want.push(format!("d{j}.{g}"));
        gens.push(g);
    }
    want.sort();
    assert_eq!(names(c, "/c"), want);
    gens
}

/// An xorshift step.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The answer of a rename: acknowledged, or unknown (the call failed with a server down).
fn outcome(r: Result<(), Errno>, g: u32, what: &str) -> (Known, bool) {
    match r {
        Ok(()) => (Known::At(g + 1), true),
        Err(Errno::EIO | Errno::ETIMEDOUT | Errno::EAGAIN) => (Known::OneOf(g, g + 1), false),
        Err(e) => panic!("rename of {what} gen {g}: {e:?}"),
    }
}

#[test]
fn renames_of_files_and_directories_survive_random_server_kills() {
    // (a restarted server's changes wait out the client-cache leases of its former life, one
    // lease: short here, where a server is killed every half second)
    let mut cl = cluster(3, &["--cache-lease-ms", "50"], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    populate(&c);
    let cluster_file = cl.cluster_file();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let kills = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    let (files, dirs, acked) = std::thread::scope(|s| {
        let renamer = s.spawn(|| {
            let mut files = vec![Known::At(0); FILES];
            let mut dirs = vec![Known::At(0); DIRS];
            let (mut fa, mut da) = (0, 0);
            let mut cfg = madfs_client::ClientConfig::from_cluster_file(&cluster_file).unwrap();
            cfg.timeout = Duration::from_secs(2);
            let c = Client::new(&cfg).unwrap();
            let until = Instant::now() + Duration::from_secs(240);
            let mut round = 0;
            // (and through at least 10 server kills)
            while (fa < FILE_RENAMES || da < DIR_RENAMES || kills.load(Relaxed) < 10)
                && Instant::now() < until
            {
                for (i, k) in files.iter_mut().enumerate() {
                    let soon = Instant::now() + Duration::from_secs(5);
                    let Some(g) = settle(&c, *k, soon, &|g| fname(i, g)) else {
                        continue; // a server is down: later
                    };
                    let (known, ok) =
                        outcome(c.rename(&fname(i, g), &fname(i, g + 1), false), g, "file");
                    *k = known;
                    fa += ok as usize;
                }
                for j in [(2 * round) % DIRS, (2 * round + 1) % DIRS] {
                    let soon = Instant::now() + Duration::from_secs(5);
                    let Some(g) = settle(&c, dirs[j], soon, &|g| dname(j, g)) else {
                        continue;
                    };
                    let (known, ok) = outcome(
                        c.rename(&dname(j, g), &dname(j, g + 1), false),
                        g,
                        "directory",
                    );
                    dirs[j] = known;
                    da += ok as usize;
                }
                round += 1;
            }
            stop.store(true, Relaxed);
            (files, dirs, (fa, da))
        });
        // a random server killed every 0.2 to 0.7 s, restarted 0.3 s later
        let mut x = 0x2545_f491_4f6c_dd1du64;
        while !stop.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(200 + next(&mut x) % 500));
            let victim = (next(&mut x) % 3) as usize;
            cl.kill(victim);
            kills.fetch_add(1, Relaxed);
            std::thread::sleep(Duration::from_millis(300));
            cl.restart(victim).unwrap();
        }
        renamer.join().unwrap()
    });
    let kills = kills.load(Relaxed);
    eprintln!(
        "{} file and {} directory renames acknowledged in {:.0} s, {kills} server kills",
        acked.0,
        acked.1,
        started.elapsed().as_secs_f64()
    );
    assert!(
        acked.0 >= FILE_RENAMES && acked.1 >= DIR_RENAMES,
        "{acked:?}"
    );
    assert!(kills >= 10, "{kills} kills");
    let c = client(&cl, Duration::from_secs(10), "none");
    let _ = verify(&c, &files, &dirs);
}

/// `madfs mv` processes renaming files and directories across servers, SIGKILLed at random
/// moments. A client killed in the middle of a send over shared memory can leave a server's
/// UCX receive queue stalled (in about one run of four before the stall watch): that server
/// restarts itself (`madfs_rpc::probe`) and the calls lost with it time out (EIO: either name).
#[test]
fn renames_of_files_and_directories_survive_killed_clients() {
    // (a rename may wait for this process's cache leases on what it moves, up to one lease,
    // after its sender is killed: short leases, and a pause after each kill, below)
    let cl = cluster(3, &["--cache-lease-ms", "50"], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    populate(&c);
    let mut files = vec![Known::At(0); FILES];
    let mut dirs = vec![Known::At(0); DIRS];
    let (mut fa, mut da, mut killed) = (0, 0, 0);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let started = Instant::now();
    let until = started + Duration::from_secs(240);
    while (fa < FILE_RENAMES || da < DIR_RENAMES) && Instant::now() < until {
        let c = client(&cl, Duration::from_secs(10), "none");
        // a batch: every file and two directories, in a random order, for one `madfs mv`
        // process that is SIGKILLed at a random moment
        let mut batch: Vec<(bool, usize, u32)> = vec![];
        for (i, k) in files.iter_mut().enumerate() {
            let soon = Instant::now() + Duration::from_secs(20);
            let Some(g) = settle(&c, *k, soon, &|g| fname(i, g)) else {
                let logs: Vec<String> = (0..3).map(|s| cl.log(s)).collect();
                panic!(
                    "file {i} {k:?}: no single name; {:?} {:?}\n{}",
                    c.stat(&fname(i, 0)).map(|a| a.id),
                    c.find("/c", &Default::default()).map(|(v, _)| v
                        .into_iter()
                        .filter(|p| p.starts_with(&format!("/c/f{i}.")))
                        .collect::<Vec<_>>()),
                    logs.join("\n")
                );
            };
            *k = Known::At(g);
            batch.push((false, i, g));
        }
        for _ in 0..2 {
            let j = (next(&mut x) % DIRS as u64) as usize;
            if batch.iter().any(|b| b.0 && b.1 == j) {
                continue;
            }
            let g = settle(&c, dirs[j], until, &|g| dname(j, g)).expect("one name");
            dirs[j] = Known::At(g);
            batch.push((true, j, g));
        }
        for i in (1..batch.len()).rev() {
            batch.swap(i, (next(&mut x) % (i as u64 + 1)) as usize);
        }
        let name = |&(dir, i, g): &(bool, usize, u32), h: u32| {
            let _ = g;
            if dir {
                dname(i, h)
            } else {
                fname(i, h)
            }
        };
        let mut child = std::process::Command::new(madfs_cluster::find_bin("madfs"))
            .args(["mv", "--stdin"])
            .env("MADFS_CLUSTER", cl.cluster_file())
            .env("UCX_NET_DEVICES", "lo")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("madfs mv");
        let mut input = String::new();
        for b in &batch {
            input.push_str(&format!("{} {}\n", name(b, b.2), name(b, b.2 + 1)));
        }
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        // killed once it is connected to every server and renaming (its first answer came),
        // 0-40 ms later: in the middle of a rename, file or directory
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut answers: Vec<String> = vec![];
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap_or(0) > 0 && line == "ready\n",
            "{line}"
        );
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) > 0 {
            answers.push(line.trim_end().to_string());
        }
        std::thread::sleep(Duration::from_millis(next(&mut x) % 40));
        let _ = child.kill();
        killed += child.wait().is_ok_and(|s| s.code().is_none()) as usize;
        // a rename the killed process sent may still wait for callbacks (to this process,
        // which does not call madfs meanwhile) at its server: at most one lease
        std::thread::sleep(Duration::from_millis(120));
        answers.extend(out.lines().map_while(Result::ok));
        for (n, b) in batch.iter().enumerate() {
            let (dir, i, g) = *b;
            let k = match answers.get(n).map(String::as_str) {
                Some("ok") => {
                    if dir {
                        da += 1
                    } else {
                        fa += 1
                    }
                    Known::At(g + 1)
                }
                // timed out (a server restarting): done or not
                Some("error 5") => Known::OneOf(g, g + 1),
                Some(other) => panic!("{}: {other}", name(b, g)),
                // killed during this one (or before it was sent: either name)
                None if n == answers.len() => Known::OneOf(g, g + 1),
                None => Known::At(g),
            };
            if dir {
                dirs[i] = k;
            } else {
                files[i] = k;
            }
        }
    }
    let restarts = (0..3)
        .filter(|s| cl.log(*s).contains("restarted by itself"))
        .count();
    eprintln!(
        "{fa} file and {da} directory renames acknowledged in {:.0} s, {killed} clients killed, \
         {restarts} server(s) restarted by their stall watch",
        started.elapsed().as_secs_f64()
    );
    assert!(fa >= FILE_RENAMES && da >= DIR_RENAMES, "{fa} {da}");
    assert!(killed >= 5, "{killed} clients killed mid-batch");
    // a client of its own: the first one's connection to a server that restarted itself
    // since would lose its first call (EIO at the deadline: error mode none cannot tell)
    let c = client(&cl, Duration::from_secs(10), "none");
    let _ = verify(&c, &files, &dirs);
}

/// The server doing a directory rename aborts at a point of it (`MADFS_FAULT`): after its
/// intent record, after the new directory, half way through the descendants. After its
/// restart the rename is finished: the directory and everything it held under the new name
/// only.
#[test]
fn a_server_killed_mid_directory_rename_finishes_it_after_restart() {
    for point in [
        "dirrename-after-attach",
        "dirrename-after-intent",
        "dirrename-halfway",
    ] {
        // every server would abort there; server 0 is the one that renames
        common::setup();
        let mut cl = madfs_cluster::LocalCluster::start(madfs_cluster::Options {
            servers: 3,
            err_mode: "none".into(),
            env: vec![("MADFS_FAULT".into(), point.into())],
            ..Default::default()
        })
        .expect("start servers");
        let c = client(&cl, Duration::from_secs(3), "none");
        populate(&c);
        // a directory of server 0 (the one that will abort), renamed to a name elsewhere
        let j = (0..DIRS)
            .find(|j| {
                madfs_placement::meta_server(&dname(*j, 0), &madfs_placement::Layout::initial(3))
                    == 0
            })
            .expect("a directory on server 0");
        let t0 = Instant::now();
        let r = c.rename(&dname(j, 0), &dname(j, 1), false);
        assert!(r.is_err(), "{point}: the server died");
        // (a peer's call to the restarted server may first wait out its stale connection)
        let t = Instant::now();
        while !cl.log(0).contains("aborting") {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{point}: {}",
                cl.log(0)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cl.options_mut().env.clear();
        cl.restart(0).unwrap();
        // the restarted server finishes the rename: the old name goes last
        let c = client(&cl, Duration::from_secs(10), "none");
        let t = Instant::now();
        while c.stat(&dname(j, 0)).is_ok() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{point}: {}\n{}\n{}",
                cl.log(0),
                cl.log(1),
                cl.log(2)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("{point}: finished after {:?}", t0.elapsed());
        let mut dirs = vec![Known::At(0); DIRS];
        dirs[j] = Known::At(1);
        let _ = verify(&c, &[Known::At(0); FILES], &dirs);
        assert!(
            cl.log(0).contains("pending rename"),
            "{point}: {}",
            cl.log(0)
        );
    }
}
