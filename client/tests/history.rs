//! A randomized history of kills and pauses (docs/redundancy.md, "Checking it"): clients
//! (half over UCX, half over plain TCP) write, append, create, rename and remove through a
//! replicated cluster (R = 2, 4 servers) while
//! servers are killed and restarted, or frozen (SIGSTOP) and woken, one at a time at random,
//! and with `MADFS_HISTORY_REMOVE=1` at last one is killed for good and removed (its replica
//! sets rebuilt).
//! Every client records what it was acknowledged; afterwards the file system must hold every
//! acknowledged change exactly once (no lost or duplicated writes, appends, creates, renames or
//! removals), and the servers' accept log (`MADFS_ACCEPT_LOG`) must show one primary per
//! replica set at a time: no change admitted by an older epoch's primary after a newer
//! primary acknowledged one.
//!
//! `MADFS_HISTORY_SEED` replays a schedule; `MADFS_HISTORY_FAULTS` sets how many faults
//! (default 4, for CI; longer runs on a workstation).

mod common;

use common::*;
use madfs_client::{Client, FileSystem, OpenFlags};
use madfs_cluster::{LocalCluster, Options};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SERVERS: usize = 4;
const WORKERS: usize = 4;
/// Size of one record of a worker's own file (records straddle chunk boundaries).
const REC: u64 = 12_345;
/// Record slots of a worker's own file (written over and over: 12 MiB, 17 chunks).
const SLOTS: u64 = 1024;
/// Size of one record of the shared append log.
const LINE: usize = 32;

/// A small deterministic generator (splitmix64) for the schedule and the workload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What one worker was told.
#[derive(Default)]
struct Told {
    /// Records of its own file: slot → the sequence number last written there, and whether
    /// that write was acknowledged.
    writes: BTreeMap<u64, (u64, bool)>,
    /// Writes made.
    wrote: usize,
    /// Appends to the shared log: sequence number → offset acknowledged (None: failed).
    appends: BTreeMap<u64, Option<u64>>,
    /// Files it created (acknowledged) and tried to create (not).
    created: BTreeSet<u64>,
    tried: BTreeSet<u64>,
    /// Files it removed, and files it renamed from `f<seq>` to `m<seq>` (acknowledged).
    removed: BTreeSet<u64>,
    renamed: BTreeSet<u64>,
    /// Files whose removal or rename failed: either may have happened (not checked, and left
    /// alone from then on).
    unsure: BTreeSet<u64>,
    /// Every error, as the operation and its errno.
    errors: Vec<String>,
    /// Operations made.
    ops: usize,
}

fn seed_of(w: usize, seq: u64) -> u64 {
    ((w as u64) << 40) | seq
}

/// The name of worker `w`'s file `seq` now.
fn name_of(w: usize, seq: u64, renamed: &BTreeSet<u64>) -> String {
    let prefix = if renamed.contains(&seq) { 'm' } else { 'f' };
    format!("/h/d{w}/{prefix}{seq}")
}

fn line(w: usize, seq: u64) -> Vec<u8> {
    let mut l = format!("{w:02}:{seq:010}:").into_bytes();
    l.resize(LINE - 1, b'.');
    l.push(b'\n');
    l
}

fn worker(c: Client, w: usize, seed: u64, stop: Arc<AtomicBool>) -> Told {
    let mut told = Told::default();
    let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0xA5A5_5A5A));
    let own = format!("/h/own{w}");
    let mut f = c.open(&own, OpenFlags::create_trunc()).expect("own file");
    let mut log = c
        .open(
            "/h/log",
            OpenFlags {
                create: true,
                excl: false,
                trunc: false,
                mode: 0o644,
            },
        )
        .expect("log");
    let mut seq = 0u64;
    while !stop.load(Relaxed) {
        seq += 1;
        told.ops += 1;
        match rng.below(10) {
            0..=3 => {
                let slot = rng.below(SLOTS);
                let r = c.write(&mut f, slot * REC, &data(REC as usize, seed_of(w, seq)));
                told.writes.insert(slot, (seq, r.is_ok()));
                told.wrote += 1;
                if let Err(e) = r {
                    told.errors.push(format!("write {seq}: {e:?}"));
                }
            }
            4 | 5 => {
                let r = c.append(&mut log, &line(w, seq));
                told.appends.insert(seq, r.as_ref().ok().copied());
                if let Err(e) = r {
                    told.errors.push(format!("append {seq}: {e:?}"));
                }
            }
            6 | 7 => {
                told.tried.insert(seq);
                let path = format!("/h/d{w}/f{seq}");
                let flags = OpenFlags {
                    create: true,
                    excl: true,
                    trunc: false,
                    mode: 0o644,
                };
                let r = c.open(&path, flags).and_then(|mut g| {
                    c.write(&mut g, 0, &data(100, seed_of(w, seq)))?;
                    c.close(g)
                });
                match r {
                    Ok(()) => {
                        told.created.insert(seq);
                    }
                    Err(e) => told.errors.push(format!("create {path}: {e:?}")),
                }
            }
            8 => {
                // a removal or a rename (to `m<seq>`) of one of its files
                let live: Vec<u64> = told
                    .created
                    .difference(&told.removed)
                    .filter(|s| !told.unsure.contains(s))
                    .copied()
                    .collect();
                if !live.is_empty() {
                    let victim = live[rng.below(live.len() as u64) as usize];
                    let path = name_of(w, victim, &told.renamed);
                    if told.renamed.contains(&victim) || rng.below(2) == 0 {
                        match c.unlink(&path) {
                            Ok(()) => {
                                told.removed.insert(victim);
                            }
                            Err(e) => {
                                told.unsure.insert(victim);
                                told.errors.push(format!("unlink {path}: {e:?}"))
                            }
                        }
                    } else {
                        let to = format!("/h/d{w}/m{victim}");
                        match c.rename(&path, &to, false) {
                            Ok(()) => {
                                told.renamed.insert(victim);
                            }
                            Err(e) => {
                                told.unsure.insert(victim);
                                told.errors.push(format!("rename {path}: {e:?}"))
                            }
                        }
                    }
                }
            }
            _ => {
                if let Err(e) = c.fsync(&mut f) {
                    told.errors.push(format!("fsync {seq}: {e:?}"));
                }
            }
        }
    }
    if let Err(e) = c.close(f) {
        told.errors.push(format!("close own: {e:?}"));
    }
    if let Err(e) = c.close(log) {
        told.errors.push(format!("close log: {e:?}"));
    }
    told
}

/// Until every server's map has every server up and stays so for twice `--down-after-ms`
/// (a server back within `--down-after-ms` is marked down later, by a primary whose copy it
/// missed, and then catches up): one fault at a time.
fn all_up(cl: &LocalCluster, within: Duration) {
    let t = Instant::now();
    let mut since: Option<(u64, Instant)> = None;
    loop {
        let (epoch, text) = all_up_in(cl, SERVERS);
        match (epoch, since) {
            (Some(e), Some((s, at))) if e == s => {
                if at.elapsed() >= Duration::from_millis(3000) {
                    return;
                }
            }
            (Some(e), _) => since = Some((e, Instant::now())),
            (None, _) => since = None,
        }
        assert!(
            t.elapsed() < within,
            "not all up within {within:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(cl: &LocalCluster, i: usize, sig: i32) {
    // SAFETY: kill(2) on a server process of this test.
    unsafe { libc::kill(cl.pid(i).expect("server pid") as i32, sig) };
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Kills a random server for good and removes it (`madfs-ctl remove`): back once every
/// other server has it removed and its replica sets are rebuilt.
fn remove_one(cl: &mut LocalCluster, rng: &mut Rng, schedule: &mut Vec<String>) {
    // a server back from the last fault may still be marked down: a primary whose copy it
    // missed proposes that 2 × `--down-after-ms` after the copy failed, and again for up to
    // four elections (`Replication::give_up_on`); killing its partner before that lands
    // would be a double failure (its set's only current copy gone)
    std::thread::sleep(Duration::from_secs(4));
    all_up(cl, Duration::from_secs(90));
    let gone = rng.below(SERVERS as u64) as usize;
    let t = Instant::now();
    cl.kill(gone);
    let rest: Vec<usize> = (0..SERVERS).filter(|s| *s != gone).collect();
    let on_all = |what: &str, want: &dyn Fn(&madfs_control::MapStatus) -> bool| {
        while !rest
            .iter()
            .all(|s| map_of(cl, *s).is_some_and(|m| want(&m)))
        {
            if t.elapsed() > Duration::from_secs(90) {
                let maps: Vec<_> = rest.iter().map(|s| map_of(cl, *s)).collect();
                let logs: Vec<String> = rest.iter().map(|s| cl.log(*s)).collect();
                panic!(
                    "removal of {gone}: not {what} after 90 s: {maps:?}\n{}",
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    on_all("down", &|m| m.states[gone] == "down");
    let (ok, out) = cl.ctl(&["remove", &gone.to_string(), "--wait", "90"]);
    assert!(ok, "madfs-ctl remove {gone}: {out}");
    on_all("removed and rebuilt", &|m| {
        m.states[gone] == "removed" && m.building.is_empty()
    });
    let what = format!(
        "killed server {gone} for good, removed, its sets rebuilt {:?} after",
        t.elapsed()
    );
    eprintln!("{what}");
    schedule.push(what);
    // (the workers go on a while on the rebuilt sets)
    std::thread::sleep(Duration::from_millis(1000));
}

#[test]
fn kills_and_pauses_lose_and_duplicate_nothing() {
    let seed = env_u64("MADFS_HISTORY_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    let faults = env_u64("MADFS_HISTORY_FAULTS").unwrap_or(4);
    eprintln!("MADFS_HISTORY_SEED={seed} MADFS_HISTORY_FAULTS={faults}");
    setup();
    let accept_log = tempfile::NamedTempFile::new().unwrap();
    let mut cl = LocalCluster::start(Options {
        servers: SERVERS,
        args: vec!["--replication".into(), "2".into()],
        // error mode peer all the same: a replicated cluster's servers and clients take it
        // whatever is asked (`UcxSettings::for_replication`)
        err_mode: "none".into(),
        env: vec![(
            "MADFS_ACCEPT_LOG".into(),
            accept_log.path().to_string_lossy().into_owned(),
        )],
    })
    .expect("start servers");
    let timeout = Duration::from_secs(10);
    let c = client(&cl, timeout, "none");
    c.mkdir("/h", 0o755).unwrap();
    for w in 0..WORKERS {
        c.mkdir(&format!("/h/d{w}"), 0o755).unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (file, stop) = (cl.cluster_file(), stop.clone());
            std::thread::spawn(move || {
                let mut cfg = madfs_client::ClientConfig::from_cluster_file(file).unwrap();
                cfg.timeout = timeout;
                // half of them over plain TCP (as the preload's first calls go)
                let c = if w % 2 == 0 {
                    Client::new(&cfg).unwrap()
                } else {
                    Client::new_tcp(&cfg).unwrap()
                };
                worker(c, w, seed, stop)
            })
        })
        .collect();

    // the schedule: one fault at a time, each healed (caught up) before the next
    let mut rng = Rng(seed);
    let mut schedule = vec![];
    for _ in 0..faults {
        std::thread::sleep(Duration::from_millis(800 + rng.below(1500)));
        let victim = rng.below(SERVERS as u64) as usize;
        let kill = rng.below(2) == 0;
        let hold = Duration::from_millis(300 + rng.below(3000));
        let t = Instant::now();
        if kill {
            cl.kill(victim);
            std::thread::sleep(hold);
            cl.restart(victim).expect("restart");
        } else {
            signal(&cl, victim, libc::SIGSTOP);
            std::thread::sleep(hold);
            signal(&cl, victim, libc::SIGCONT);
        }
        all_up(&cl, Duration::from_secs(90));
        let what = format!(
            "{} server {victim} for {hold:?}, all up again (and for 3 s) {:?} after",
            if kill { "killed" } else { "froze" },
            t.elapsed() - hold
        );
        eprintln!("{what}");
        schedule.push(what);
    }
    // last (`MADFS_HISTORY_REMOVE=1`), a server lost for good: marked down, removed, its
    // replica sets rebuilt on the others (`madfs-ctl remove`) while the workers go on
    if env_u64("MADFS_HISTORY_REMOVE") == Some(1) {
        remove_one(&mut cl, &mut rng, &mut schedule);
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Relaxed);
    let told: Vec<Told> = workers.into_iter().map(|h| h.join().unwrap()).collect();

    // what the file system holds now
    let mut problems = vec![];
    let log = get(&c, "/h/log");
    let mut seen: HashMap<(usize, u64), Vec<u64>> = HashMap::new();
    let mut holes = 0;
    for (k, rec) in log.chunks(LINE).enumerate() {
        if rec.iter().all(|b| *b == 0) {
            holes += 1;
            continue;
        }
        let text = String::from_utf8_lossy(rec);
        let mut it = text.split(':');
        let parsed = (|| {
            let w: usize = it.next()?.parse().ok()?;
            let seq: u64 = it.next()?.parse().ok()?;
            (rec == line(w, seq).as_slice()).then_some((w, seq))
        })();
        match parsed {
            Some(key) => seen.entry(key).or_default().push((k * LINE) as u64),
            None => problems.push(format!("log record {k} is garbage: {text:?}")),
        }
    }
    let mut counts = [0usize; 7];
    for (w, t) in told.iter().enumerate() {
        let own = get(&c, &format!("/h/own{w}"));
        counts[0] += t.wrote;
        for (&slot, &(seq, acked)) in &t.writes {
            if !acked {
                continue; // either record may be there
            }
            let at = (slot * REC) as usize;
            let want = data(REC as usize, seed_of(w, seq));
            if own.get(at..at + REC as usize) != Some(want.as_slice()) {
                problems.push(format!(
                    "worker {w}: acknowledged write {seq} (slot {slot}) lost"
                ));
            }
        }
        for (&seq, &at) in &t.appends {
            counts[1] += 1;
            let places = seen.get(&(w, seq)).cloned().unwrap_or_default();
            if places.len() > 1 {
                problems.push(format!("worker {w}: append {seq} found at {places:?}"));
            }
            if let Some(at) = at {
                if places != [at] {
                    problems.push(format!(
                        "worker {w}: append {seq} acknowledged at {at}, found at {places:?}"
                    ));
                }
            }
        }
        // (seq, renamed) of every name in the directory
        let names: BTreeSet<(u64, bool)> = c
            .readdir(&format!("/h/d{w}"))
            .unwrap()
            .into_iter()
            .filter_map(|e| {
                let (p, n) = e.name.split_at(1);
                Some((n.parse().ok()?, p == "m"))
            })
            .collect();
        counts[2] += t.created.len();
        counts[3] += t.removed.len();
        counts[6] += t.renamed.len();
        for seq in t.created.difference(&t.removed) {
            if t.unsure.contains(seq) {
                continue;
            }
            let path = name_of(w, *seq, &t.renamed);
            if !names.contains(&(*seq, t.renamed.contains(seq))) {
                problems.push(format!("worker {w}: {path} lost"));
            } else if get(&c, &path) != data(100, seed_of(w, *seq)) {
                problems.push(format!("worker {w}: {path} holds other bytes"));
            }
        }
        for (seq, moved) in &names {
            if t.unsure.contains(seq) {
                continue;
            }
            if t.removed.contains(seq) {
                problems.push(format!(
                    "worker {w}: removed {seq} is back (renamed: {moved})"
                ));
            } else if !t.tried.contains(seq) {
                problems.push(format!("worker {w}: {seq} was never created"));
            } else if *moved != t.renamed.contains(seq) {
                problems.push(format!(
                    "worker {w}: file {seq} under the wrong name (m: {moved})"
                ));
            }
        }
        counts[4] += t.errors.len();
    }
    for key in seen.keys() {
        if !told
            .get(key.0)
            .is_some_and(|t| t.appends.contains_key(&key.1))
        {
            problems.push(format!("log holds {key:?}, never appended"));
        }
    }

    // the accept log: one primary per set and epoch, none admitting after a newer one
    let accepts = std::fs::read_to_string(accept_log.path()).unwrap();
    // (set, epoch) → (servers, latest admission, earliest answer)
    let mut by: BTreeMap<(u32, u64), (BTreeSet<u32>, u64, u64)> = BTreeMap::new();
    for l in accepts.lines() {
        let v: Vec<u64> = l.split(' ').filter_map(|x| x.parse().ok()).collect();
        let [set, epoch, server, admitted, answered] = v[..] else {
            problems.push(format!("accept log: {l:?}"));
            continue;
        };
        counts[5] += 1;
        let e = by
            .entry((set as u32, epoch))
            .or_insert((BTreeSet::new(), 0, u64::MAX));
        e.0.insert(server as u32);
        e.1 = e.1.max(admitted);
        e.2 = e.2.min(answered);
    }
    for ((set, epoch), (servers, ..)) in &by {
        if servers.len() > 1 {
            problems.push(format!("set {set}, epoch {epoch}: primaries {servers:?}"));
        }
    }
    for ((s1, e1), (p1, admitted, _)) in &by {
        for ((s2, e2), (p2, _, answered)) in &by {
            if s1 == s2 && e1 < e2 && p1 != p2 && admitted > answered {
                problems.push(format!(
                    "set {s1}: server {p1:?} (epoch {e1}) admitted a change {} µs after \
                     server {p2:?} (epoch {e2}) acknowledged one",
                    (admitted - answered) / 1000
                ));
            }
        }
    }
    let primaries: BTreeMap<u32, BTreeSet<u32>> =
        by.iter().fold(BTreeMap::new(), |mut m, ((s, _), (p, ..))| {
            m.entry(*s).or_default().extend(p);
            m
        });
    eprintln!(
        "{} writes, {} appends, {} creates, {} removals, {} renames, {} errors; log {} records \
         ({holes} holes); {} acknowledged changes in the accept log over {} set epochs, \
         primaries per set {primaries:?}",
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        counts[6],
        counts[4],
        log.len() / LINE,
        counts[5],
        by.len()
    );
    // a failed operation is acknowledged nothing (its effect, if any, is not checked), but
    // failing over should fail nothing: a few (a call past its deadline on a loaded machine)
    // are reported, more fail the test
    let ops: usize = told.iter().map(|t| t.ops).sum();
    let errors: Vec<&String> = told.iter().flat_map(|t| &t.errors).collect();
    for e in &errors {
        eprintln!("error: {e}");
    }
    if errors.len() > (ops / 1000).max(2) {
        problems.push(format!("{} of {ops} operations failed", errors.len()));
    }
    assert!(
        problems.is_empty(),
        "seed {seed}, schedule {schedule:#?}:\n{}",
        problems.join("\n")
    );
    assert!(counts[5] > 100, "too few changes to judge: {counts:?}");
}
