//! The client cache stays true (docs/consistency.md, "The client cache"): process A keeps
//! stating the names of a directory (and so holds leases on them, present and absent), while
//! process B (this binary run again: another client process, another lease holder) creates,
//! unlinks, renames, chmods, chowns, retargets symbolic links, appends and closes, makes and
//! removes directories. After each of B's changes is acknowledged, A's next stat of every
//! name must give what the change left: a history check against a model of the directory.
//! The checker is shown to catch stale answers: with the servers' callbacks turned off
//! (`MADFS_FAULT=no-callbacks`) it finds them. A frozen A (SIGSTOP) delays B's change by at
//! most one lease.
//!
//! The same through a `madfs-fuse` mount: A's stats are the kernel's (its dentry and
//! attribute caches, kept as long as the mount's leases, forgotten on callbacks); with A and
//! B on two hosts (network namespaces, UCX over TCP; A also opens what it stats); and on
//! R = 2 with the primary of A's names killed mid-run and started again.
//!
//! `MADFS_COHERENCE_ROUNDS` sets the number of rounds (CI: the default, 300),
//! `MADFS_COHERENCE_FROZEN_ROUNDS` those with A frozen (CI: 5).

mod common;

use madfs_client::{Client, Errno, FileSystem, OpenFlags};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const DIR: &str = "/co";
/// Every this many rounds A waits for B without calling madfs (`MADFS_COHERENCE_IDLE`).
static IDLE_EVERY: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
const NAMES: [&str; 6] = ["f0", "f1", "f2", "d0", "l0", "l1"];

/// What a name should be, as A's model has it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    Absent,
    File { mode: u32, uid: u32, size: u64 },
    Dir { mode: u32 },
    Link { target: String },
}

/// How A reads: through the client library, or through a FUSE mount (the kernel's caches).
trait Reader {
    /// What `path` (a madfs path) is now.
    fn seen(&self, path: &str) -> Want;
    /// Lists `dir` and stats its entries (`ls -l`: statahead).
    fn walk(&self, dir: &str);
    /// The client that takes A's callbacks while B's change waits (a process that keeps
    /// calling madfs), if A has one.
    fn client(&self) -> Option<&Client>;
    /// A waits for the next command without calling madfs (a process in a barrier).
    fn pause(&self) {}
}

impl Reader for Client {
    fn seen(&self, path: &str) -> Want {
        seen(self, path)
    }

    fn walk(&self, dir: &str) {
        self.look_ahead(dir).unwrap();
    }

    fn client(&self) -> Option<&Client> {
        Some(self)
    }
}

/// A reads through the FUSE mount at `.0`.
struct Fuse(madfs_cluster::fuse::Mount);

impl Reader for Fuse {
    fn seen(&self, path: &str) -> Want {
        use std::os::unix::fs::MetadataExt;
        let p = format!("{}{path}", self.0.path());
        match std::fs::symlink_metadata(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Want::Absent,
            Err(e) => panic!("stat {p}: {e}"),
            Ok(m) if m.is_dir() => Want::Dir {
                mode: m.mode() & 0o7777,
            },
            Ok(m) if m.file_type().is_symlink() => Want::Link {
                target: std::fs::read_link(&p)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default(),
            },
            Ok(m) => Want::File {
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                size: m.size(),
            },
        }
    }

    fn walk(&self, dir: &str) {
        let d = format!("{}{dir}", self.0.path());
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let _ = std::fs::symlink_metadata(e.path());
        }
    }

    fn client(&self) -> Option<&Client> {
        None
    }
}

fn seen(c: &Client, path: &str) -> Want {
    match c.stat(path) {
        Err(Errno::ENOENT) => Want::Absent,
        Err(e) => panic!("stat {path}: {e:?}"),
        Ok(a) if a.is_dir() => Want::Dir {
            mode: a.mode & 0o7777,
        },
        Ok(a) if a.is_link() => Want::Link {
            target: c.readlink(path).unwrap_or_default(),
        },
        Ok(a) => Want::File {
            mode: a.mode & 0o7777,
            uid: a.uid,
            size: a.size,
        },
    }
}

/// What A sees of `path` when it also opens it (an open always asks the file's server): the
/// open's answer where it differs from the stat's.
fn seen_opening(c: &Client, path: &str) -> Want {
    let stat = seen(c, path);
    if matches!(stat, Want::Dir { .. } | Want::Link { .. }) {
        return stat;
    }
    let opened = match c.open_read(path) {
        Err(Errno::ENOENT) => Want::Absent,
        Err(e) => panic!("open {path}: {e:?}"),
        Ok((a, _)) if a.is_dir() => Want::Dir {
            mode: a.mode & 0o7777,
        },
        Ok((a, _)) => Want::File {
            mode: a.mode & 0o7777,
            uid: a.uid,
            size: a.size,
        },
    };
    if opened != stat {
        eprintln!("{path}: stat says {stat:?}, open {opened:?}");
    }
    opened
}

impl Want {
    /// One line (the reader on another host answers so).
    fn line(&self) -> String {
        match self {
            Want::Absent => "absent".into(),
            Want::File { mode, uid, size } => format!("file {mode} {uid} {size}"),
            Want::Dir { mode } => format!("dir {mode}"),
            Want::Link { target } => format!("link {target}"),
        }
    }

    fn parse(line: &str) -> Want {
        let w: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| w[i].parse().unwrap();
        match w[0] {
            "absent" => Want::Absent,
            "file" => Want::File {
                mode: n(1) as u32,
                uid: n(2) as u32,
                size: n(3),
            },
            "dir" => Want::Dir { mode: n(1) as u32 },
            "link" => Want::Link {
                target: w[1..].join(" "),
            },
            _ => panic!("reader answered {line:?}"),
        }
    }
}

/// Process A on another host (`MADFS_COHERENCE_READER`): answers the test's commands read
/// from stdin (`see PATH`: a stat and an open; `walk DIR`: statahead; `pause`), each with one
/// line starting with `=`. Between commands it takes its callbacks, as a process that keeps
/// calling madfs does, unless it was told to pause.
#[test]
fn reader() {
    let Some(c) = role_client("MADFS_COHERENCE_READER") else {
        return;
    };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut out = std::io::stdout().lock();
    let mut paused = false;
    loop {
        let line = if paused {
            rx.recv().ok()
        } else {
            loop {
                match rx.recv_timeout(Duration::from_micros(100)) {
                    Ok(l) => break Some(l),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        c.take_callbacks();
                    }
                    Err(_) => break None,
                }
            }
        };
        let Some(line) = line else { break };
        paused = false;
        let (cmd, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match cmd {
            "see" => writeln!(out, "={}", seen_opening(&c, arg).line()).unwrap(),
            "walk" => {
                c.look_ahead(arg).unwrap();
                writeln!(out, "=ok").unwrap();
            }
            "pause" => {
                paused = true;
                writeln!(out, "=ok").unwrap();
            }
            "counts" => {
                let n = madfs_client::cache::counts();
                writeln!(out, "={} {} {}", n.hits, n.misses, n.revoked).unwrap();
            }
            "quit" => break,
            other => panic!("unknown command {other}"),
        }
        out.flush().unwrap();
    }
}

/// A runs as [`reader`] in another process (on another host: `netns`).
struct Remote {
    child: Child,
    to: std::cell::RefCell<ChildStdin>,
    answers: std::sync::mpsc::Receiver<String>,
}

impl Remote {
    fn start(cluster: &std::path::Path, netns: Option<&str>, env: &[(&str, &str)]) -> Remote {
        let (child, to, answers) =
            spawn_role("reader", "MADFS_COHERENCE_READER", cluster, netns, env);
        Remote {
            child,
            to: std::cell::RefCell::new(to),
            answers,
        }
    }

    fn ask(&self, line: &str) -> String {
        let mut to = self.to.borrow_mut();
        writeln!(to, "{line}").unwrap();
        to.flush().unwrap();
        self.answers
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("reader's answer to {line:?}: {e}"))
    }
}

impl Reader for Remote {
    fn seen(&self, path: &str) -> Want {
        Want::parse(&self.ask(&format!("see {path}")))
    }

    fn walk(&self, dir: &str) {
        assert_eq!(self.ask(&format!("walk {dir}")), "ok");
    }

    fn client(&self) -> Option<&Client> {
        None
    }

    fn pause(&self) {
        assert_eq!(self.ask("pause"), "ok");
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = writeln!(self.to.borrow_mut(), "quit");
        let _ = self.child.wait();
    }
}

/// This binary's test `role` (`reader`, `writer`) as another process (in network namespace
/// `netns` if one is named), told the cluster through `var`, with `env`: the process, its
/// stdin, and the answers it writes (its lines starting with `=`, without it; the test
/// harness's own lines are not answers).
fn spawn_role(
    role: &str,
    var: &str,
    cluster: &std::path::Path,
    netns: Option<&str>,
    env: &[(&str, &str)],
) -> (Child, ChildStdin, std::sync::mpsc::Receiver<String>) {
    let mut child = in_netns(netns)
        .args([role, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(var, cluster)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let to = child.stdin.take().unwrap();
    let from: BufReader<ChildStdout> = BufReader::new(child.stdout.take().unwrap());
    let (tx, answers) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in from.lines().map_while(Result::ok) {
            if let Some(a) = line.trim().strip_prefix('=') {
                if tx.send(a.to_owned()).is_err() {
                    break;
                }
            }
        }
    });
    (child, to, answers)
}

/// The client of a process run for a role ([`spawn_role`]): `None` unless `var` names its
/// cluster file.
fn role_client(var: &str) -> Option<Client> {
    let cluster = std::env::var(var).ok()?;
    common::setup();
    Some(peer_client(cluster))
}

/// A client of the cluster of `cluster` (a cluster file) in UCX's peer error mode.
fn peer_client(cluster: impl AsRef<std::path::Path>) -> Client {
    let mut cfg = madfs_client::ClientConfig::from_cluster_file(cluster.as_ref()).unwrap();
    cfg.ucx.err_mode = madfs_rpc::UcxSettings::parse_err_mode("peer").unwrap();
    Client::new(&cfg).unwrap()
}

/// This test binary, run in network namespace `netns` if one is named.
fn in_netns(netns: Option<&str>) -> Command {
    let exe = std::env::current_exe().unwrap();
    match netns {
        None => Command::new(exe),
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
    }
}

/// Process B: applies the changes read from stdin, one per line, and answers each with
/// `=ok` or `=` and the errno once it is acknowledged.
#[test]
fn writer() {
    let Some(c) = role_client("MADFS_COHERENCE_WRITER") else {
        return;
    };
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split(' ').collect();
        let p = |i: usize| format!("{DIR}/{}", w[i]);
        let r = match w[0] {
            "create" => c
                .open(&p(1), OpenFlags::create_trunc())
                .and_then(|f| c.close(f)),
            "unlink" => c.unlink(&p(1)),
            "rename" => c.rename(&p(1), &p(2), false),
            "chmod" => c.chmod(&p(1), u32::from_str_radix(w[2], 8).unwrap()),
            "chown" => c.chown(&p(1), w[2].parse().unwrap(), u32::MAX),
            "symlink" => c.symlink(w[2], &p(1)),
            "append" => c.open(&p(1), OpenFlags::default()).and_then(|mut f| {
                c.append(&mut f, &vec![7u8; w[2].parse().unwrap()])?;
                c.close(f)
            }),
            "mkdir" => c.mkdir(&p(1), 0o755),
            "rmdir" => c.rmdir(&p(1)),
            // a stat of an absolute path (what gives this process a lease)
            "stat" => c.stat(w[1]).map(drop),
            "quit" => break,
            op => panic!("unknown change {op}"),
        };
        match r {
            Ok(()) => writeln!(out, "=ok").unwrap(),
            Err(e) => writeln!(out, "={}", e.raw()).unwrap(),
        }
        out.flush().unwrap();
    }
}

struct Writer {
    child: Child,
    to: ChildStdin,
    answers: std::sync::mpsc::Receiver<String>,
}

impl Writer {
    fn start(cluster: &std::path::Path) -> Writer {
        Writer::start_on(cluster, None, &[])
    }

    /// B in network namespace `netns` (another host), with `env`.
    fn start_on(cluster: &std::path::Path, netns: Option<&str>, env: &[(&str, &str)]) -> Writer {
        let (child, to, answers) =
            spawn_role("writer", "MADFS_COHERENCE_WRITER", cluster, netns, env);
        Writer { child, to, answers }
    }

    /// Sends one change and waits for its answer (`None`: ok; the errno else); `reader`
    /// (a client of the waiting process, if any) takes its callbacks meanwhile, as a process
    /// that keeps calling madfs does.
    fn change_with(&mut self, line: &str, reader: Option<&Client>) -> Option<i32> {
        writeln!(self.to, "{line}").unwrap();
        self.to.flush().unwrap();
        loop {
            match self.answers.recv_timeout(Duration::from_micros(100)) {
                Ok(a) if a == "ok" => return None,
                Ok(a) => return a.parse().ok(),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(r) = reader {
                        r.take_callbacks();
                    }
                }
                Err(e) => panic!("writer gone: {e}"),
            }
        }
    }

    fn change(&mut self, line: &str) -> Option<i32> {
        self.change_with(line, None)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = writeln!(self.to, "quit");
        let _ = self.child.wait();
    }
}

/// A random change of the model's names that the kernel would accept, and what it leaves.
fn next_change(
    rng: &mut u64,
    model: &BTreeMap<&'static str, Want>,
) -> (String, Vec<(&'static str, Want)>) {
    let mut r = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    loop {
        let name = NAMES[(r() % NAMES.len() as u64) as usize];
        let other = NAMES[(r() % NAMES.len() as u64) as usize];
        let want = model[name].clone();
        let kind = &name[..1];
        let choice = r() % 4;
        match (&want, kind) {
            (Want::Absent, "f") => {
                return (
                    format!("create {name}"),
                    vec![(
                        name,
                        Want::File {
                            mode: 0o644,
                            uid: 0,
                            size: 0,
                        },
                    )],
                )
            }
            (Want::Absent, "d") => {
                return (
                    format!("mkdir {name}"),
                    vec![(name, Want::Dir { mode: 0o755 })],
                )
            }
            (Want::Absent, "l") => {
                let target = format!("t{}", r() % 1000);
                return (
                    format!("symlink {name} {target}"),
                    vec![(name, Want::Link { target })],
                );
            }
            (Want::File { mode, uid, size }, _) => match choice {
                0 => return (format!("unlink {name}"), vec![(name, Want::Absent)]),
                1 => {
                    let m = 0o600 | (r() % 0o100) as u32;
                    return (
                        format!("chmod {name} {m:o}"),
                        vec![(
                            name,
                            Want::File {
                                mode: m,
                                uid: *uid,
                                size: *size,
                            },
                        )],
                    );
                }
                2 => {
                    let u = (r() % 3) as u32;
                    return (
                        format!("chown {name} {u}"),
                        vec![(
                            name,
                            Want::File {
                                mode: *mode,
                                uid: u,
                                size: *size,
                            },
                        )],
                    );
                }
                _ if other.starts_with('f') && other != name => {
                    return (
                        format!("rename {name} {other}"),
                        vec![(name, Want::Absent), (other, want.clone())],
                    )
                }
                _ => {
                    let n = 1 + r() % 5000;
                    return (
                        format!("append {name} {n}"),
                        vec![(
                            name,
                            Want::File {
                                mode: *mode,
                                uid: *uid,
                                size: size + n,
                            },
                        )],
                    );
                }
            },
            (Want::Dir { .. }, _) => match choice {
                0 | 1 => return (format!("rmdir {name}"), vec![(name, Want::Absent)]),
                _ => {
                    let m = 0o700 | (r() % 0o100) as u32;
                    return (
                        format!("chmod {name} {m:o}"),
                        vec![(name, Want::Dir { mode: m })],
                    );
                }
            },
            (Want::Link { .. }, _) => {
                return (format!("unlink {name}"), vec![(name, Want::Absent)])
            }
            _ => continue,
        }
    }
}

/// Runs `rounds` rounds with A a client of this process; returns the stale answers A saw
/// (name, wanted, seen, round).
fn rounds(cl: &madfs_cluster::LocalCluster, rounds: usize, seed: u64) -> Vec<String> {
    let a = common::client(cl, Duration::from_secs(10), "peer");
    rounds_of(&a, &cl.cluster_file(), rounds, seed, &mut |_| {})
}

/// [`rounds`] with A reading through a FUSE mount.
fn fuse_rounds(cl: &madfs_cluster::LocalCluster, rounds: usize, seed: u64) -> Vec<String> {
    let env = [("MADFS_UCX_ERR_MODE", "peer")];
    let m = madfs_cluster::fuse::Mount::start(cl, "mnt", &[], None, &env, 10_000);
    rounds_of(&Fuse(m), &cl.cluster_file(), rounds, seed, &mut |_| {})
}

/// The rounds of A's reads and B's changes, `between(round)` run before each round (a
/// server killed, started again); returns the stale answers A saw.
fn rounds_of(
    a: &dyn Reader,
    cluster: &std::path::Path,
    rounds: usize,
    seed: u64,
    between: &mut dyn FnMut(usize),
) -> Vec<String> {
    rounds_with(a, Writer::start(cluster), rounds, seed, between)
}

/// [`rounds_of`] with B started already.
fn rounds_with(
    a: &dyn Reader,
    mut w: Writer,
    rounds: usize,
    seed: u64,
    between: &mut dyn FnMut(usize),
) -> Vec<String> {
    // (B makes the directory)
    assert!(
        matches!(w.change("mkdir ."), None | Some(17)),
        "mkdir {DIR}"
    );
    let mut model: BTreeMap<&'static str, Want> =
        NAMES.iter().map(|n| (*n, Want::Absent)).collect();
    let mut rng = seed | 1;
    let mut stale = Vec::new();
    for round in 0..rounds {
        between(round);
        // A holds leases on every name (present or absent), every other round on the
        // directory's pages (statahead) first
        if round % 2 == 0 {
            a.walk(DIR);
        }
        for n in NAMES {
            a.seen(&format!("{DIR}/{n}"));
        }
        let (line, after) = next_change(&mut rng, &model);
        // (every fifth round A waits without calling madfs, as a process in a barrier does:
        // B's change waits for A's lease to end)
        let idle = idle_every();
        let meanwhile = a.client().filter(|_| round % idle != idle - 1);
        if round % idle == idle - 1 {
            a.pause();
        }
        let t = Instant::now();
        if let Some(e) = w.change_with(&line, meanwhile) {
            panic!("round {round}: B's {line:?} failed: errno {e}");
        }
        if t.elapsed() > Duration::from_millis(250) {
            eprintln!("round {round}: B's {line:?} took {:?}", t.elapsed());
        }
        for (n, want) in after {
            model.insert(n, want);
        }
        // B's change is acknowledged: A's next read must see it
        for (n, want) in &model {
            let got = a.seen(&format!("{DIR}/{n}"));
            if &got != want {
                stale.push(format!(
                    "round {round} after {line:?}: {n} is {got:?}, want {want:?}"
                ));
            }
        }
    }
    stale
}

/// Fails with the first stale answers, if there were any.
fn assert_none_stale(stale: &[String]) {
    assert!(
        stale.is_empty(),
        "{} stale answers: {:#?}",
        stale.len(),
        &stale[..stale.len().min(10)]
    );
}

fn idle_every() -> usize {
    *IDLE_EVERY.get_or_init(|| {
        std::env::var("MADFS_COHERENCE_IDLE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5)
            .max(1)
    })
}

fn rounds_wanted() -> usize {
    std::env::var("MADFS_COHERENCE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

#[test]
fn a_readers_cache_sees_every_acknowledged_change() {
    if std::env::var_os("MADFS_COHERENCE_WRITER").is_some() {
        return;
    }
    let lease = std::env::var("MADFS_COHERENCE_LEASE_MS").unwrap_or_else(|_| "100".into());
    let cl = common::cluster(3, &["--cache-lease-ms", &lease], "peer");
    let t = Instant::now();
    let stale = rounds(&cl, rounds_wanted(), 0x5eed);
    assert_none_stale(&stale);
    // the cache answered (the reader's hits) and the servers called back
    let c = madfs_client::cache::counts();
    let revoked: u64 = (0..3)
        .map(|i| common::stats(&cl, i).revoke_waits.iter().sum::<u64>())
        .sum();
    eprintln!(
        "{} rounds in {:?}: cache hits {}, misses {}, entries called back {}, changes that waited {revoked}",
        rounds_wanted(),
        t.elapsed(),
        c.hits,
        c.misses,
        c.revoked
    );
    assert!(c.hits > 0 && c.revoked > 0 && revoked > 0, "{c:?}");
}

/// R = 2: A's cache stays true while the primary of the names A reads is killed (its
/// set's other member takes over: no lease of the dead one is waited out, they end before
/// it can be marked down) and started again (it takes its set back once it has caught up:
/// its changes wait out the leases the other granted meanwhile).
#[test]
fn a_readers_cache_sees_every_change_across_a_failover_and_a_rejoin() {
    if std::env::var_os("MADFS_COHERENCE_WRITER").is_some() {
        return;
    }
    let n = rounds_wanted();
    let cl = std::cell::RefCell::new(common::cluster(4, &["--replication", "2"], "peer"));
    let a = common::client(&cl.borrow(), Duration::from_secs(20), "peer");
    let cluster = cl.borrow().cluster_file();
    // the server of most of the names A reads
    let primary = (0..4u32)
        .max_by_key(|s| {
            NAMES
                .iter()
                .filter(|n| {
                    madfs_placement::meta_server(
                        &format!("{DIR}/{n}"),
                        &madfs_placement::Layout::initial(4),
                    ) == *s
                })
                .count()
        })
        .unwrap() as usize;
    let t = Instant::now();
    let mut back = None;
    let mut events = |round: usize| {
        if round == n / 4 {
            eprintln!(
                "round {round}: server {primary} killed at {:?}",
                t.elapsed()
            );
            cl.borrow_mut().kill(primary);
        } else if round == n / 2 {
            eprintln!(
                "round {round}: server {primary} started again at {:?}",
                t.elapsed()
            );
            cl.borrow_mut().restart(primary).unwrap();
        } else if round > n / 2 && back.is_none() && common::all_up_in(&cl.borrow(), 4).0.is_some()
        {
            eprintln!(
                "round {round}: server {primary} is up again at {:?}",
                t.elapsed()
            );
            back = Some(round);
        }
    };
    let stale = rounds_of(&a, &cluster, n, 0xfa11, &mut events);
    assert!(
        back.is_some(),
        "server {primary} did not rejoin within the rounds"
    );
    assert_none_stale(&stale);
    let c = madfs_client::cache::counts();
    eprintln!(
        "R = 2: {n} rounds in {:?}: cache hits {}, misses {}, entries called back {}",
        t.elapsed(),
        c.hits,
        c.misses,
        c.revoked
    );
    assert!(c.hits > 0 && c.revoked > 0, "{c:?}");
}

/// Hosts made of network namespaces (`scripts/netns.sh`), removed when dropped.
struct Hosts {
    prefix: String,
    /// (namespace, address) of each host.
    hosts: Vec<(String, std::net::Ipv4Addr)>,
}

impl Hosts {
    /// `k` hosts, or why not (not root, no `ip`).
    fn up(k: usize) -> Result<Hosts, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("needs root (network namespaces)".into());
        }
        if Command::new("ip").arg("-V").output().is_err() {
            return Err("ip not found".into());
        }
        let prefix = format!("madfs-co-{}", std::process::id());
        let out = Command::new(common::procs::repo().join("scripts/netns.sh"))
            .args(["up", "-k", &k.to_string(), "--prefix", &prefix])
            .output()
            .map_err(|e| e.to_string())?;
        let h = Hosts {
            prefix,
            hosts: common::procs::text(&out.stdout)
                .lines()
                .map(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    (w[0].to_owned(), w[1].parse().unwrap())
                })
                .collect(),
        };
        assert!(
            out.status.success() && h.hosts.len() == k,
            "netns.sh up: {}",
            common::procs::show(&out)
        );
        Ok(h)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = Command::new(common::procs::repo().join("scripts/netns.sh"))
            .args(["down", "--prefix", &self.prefix])
            .output();
    }
}

/// Two client hosts and a server host (network namespaces joined by a bridge, UCX over
/// TCP): A on one host keeps stating, opening and listing while B on the other changes;
/// the stale answers A saw after B's acknowledged changes, and A's cache counts (hits,
/// misses, entries called back). `None`: no network namespaces here. `fault`: the
/// servers' `MADFS_FAULT`.
fn two_hosts(rounds: usize, fault: Option<&str>) -> Option<(Vec<String>, Vec<u64>)> {
    let hosts = match Hosts::up(3) {
        Ok(h) => h,
        Err(why) => {
            eprintln!("skipped: {why}");
            return None;
        }
    };
    common::setup();
    let net = [("UCX_TLS", "tcp"), ("UCX_NET_DEVICES", "veth0")];
    let lease = std::env::var("MADFS_COHERENCE_LEASE_MS").unwrap_or_else(|_| "100".into());
    let mut env: Vec<(String, String)> = net
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.extend(fault.map(|f| ("MADFS_FAULT".to_string(), f.to_string())));
    let cl = madfs_cluster::LocalCluster::start_on(
        madfs_cluster::Options {
            servers: 3,
            args: vec!["--cache-lease-ms".into(), lease],
            err_mode: "peer".into(),
            env,
        },
        &hosts.hosts[0].0,
        hosts.hosts[0].1,
    )
    .expect("start servers on host 0");
    let cluster = cl.cluster_file();
    let clients = [net[0], net[1], ("MADFS_LOCAL_READS", "0")];
    let a = Remote::start(&cluster, Some(&hosts.hosts[1].0), &clients);
    let b = Writer::start_on(&cluster, Some(&hosts.hosts[2].0), &clients);
    let t = Instant::now();
    let stale = rounds_with(&a, b, rounds, 0x2405, &mut |_| {});
    let counts = a.ask("counts");
    eprintln!(
        "two hosts: {rounds} rounds in {:?}; A's cache hits, misses, entries called back: {counts}",
        t.elapsed()
    );
    let counts = counts.split(' ').map(|v| v.parse().unwrap()).collect();
    drop(a);
    drop(cl);
    drop(hosts);
    Some((stale, counts))
}

#[test]
fn a_reader_on_another_host_sees_every_acknowledged_change() {
    if std::env::var_os("MADFS_COHERENCE_WRITER").is_some()
        || std::env::var_os("MADFS_COHERENCE_READER").is_some()
    {
        return;
    }
    let Some((stale, counts)) = two_hosts(rounds_wanted(), None) else {
        return;
    };
    assert_none_stale(&stale);
    // A's cache answered, and was called back
    assert!(counts[0] > 0 && counts[2] > 0, "{counts:?}");
}

#[test]
fn the_two_host_checker_catches_a_cache_without_callbacks() {
    if std::env::var_os("MADFS_COHERENCE_WRITER").is_some()
        || std::env::var_os("MADFS_COHERENCE_READER").is_some()
    {
        return;
    }
    if let Some((stale, _)) = two_hosts(100, Some("no-callbacks")) {
        assert!(!stale.is_empty(), "no stale answer with callbacks off");
    }
}

/// 3 servers that never call a lease back (`MADFS_FAULT=no-callbacks`).
fn cluster_without_callbacks() -> madfs_cluster::LocalCluster {
    common::setup();
    madfs_cluster::LocalCluster::start(madfs_cluster::Options {
        servers: 3,
        args: vec![],
        err_mode: "peer".into(),
        env: vec![("MADFS_FAULT".into(), "no-callbacks".into())],
    })
    .expect("start servers")
}

#[test]
fn the_checker_catches_a_cache_without_callbacks() {
    if std::env::var_os("MADFS_COHERENCE_WRITER").is_some() {
        return;
    }
    let stale = rounds(&cluster_without_callbacks(), 100, 0xbad);
    assert!(!stale.is_empty(), "no stale answer with callbacks off");
}

/// A reads through a FUSE mount: the kernel keeps what the mount's library keeps, and
/// forgets it when a server calls back.
#[test]
fn a_fuse_mounts_kernel_cache_sees_every_acknowledged_change() {
    if std::env::var_os("MADFS_COHERENCE_WRITER").is_some() || no_fuse() {
        return;
    }
    let lease = std::env::var("MADFS_COHERENCE_LEASE_MS").unwrap_or_else(|_| "100".into());
    let cl = common::cluster(3, &["--cache-lease-ms", &lease], "peer");
    let t = Instant::now();
    let stale = fuse_rounds(&cl, rounds_wanted(), 0xf05e);
    assert_none_stale(&stale);
    let revoked: u64 = (0..3)
        .map(|i| common::stats(&cl, i).revoke_waits.iter().sum::<u64>())
        .sum();
    eprintln!(
        "FUSE: {} rounds in {:?}, changes that waited for callbacks {revoked}",
        rounds_wanted(),
        t.elapsed()
    );
    assert!(revoked > 0, "the mount was never called back");
}

/// The FUSE reader's checker catches a kernel that keeps answers without callbacks.
#[test]
fn the_fuse_checker_catches_a_kernel_cache_without_callbacks() {
    if std::env::var_os("MADFS_COHERENCE_WRITER").is_some() || no_fuse() {
        return;
    }
    let stale = fuse_rounds(&cluster_without_callbacks(), 100, 0xbad);
    assert!(!stale.is_empty(), "no stale answer with callbacks off");
}

fn no_fuse() -> bool {
    if std::path::Path::new("/dev/fuse").exists() {
        return false;
    }
    eprintln!("skipped: no /dev/fuse");
    true
}

#[test]
fn a_frozen_reader_delays_a_change_by_at_most_one_lease() {
    if std::env::var_os("MADFS_COHERENCE_WRITER").is_some() {
        return;
    }
    let cl = common::cluster(2, &["--cache-lease-ms", "300"], "peer");
    let a = common::client(&cl, Duration::from_secs(10), "peer");
    let _ = a.mkdir("/fz", 0o755);
    let _ = a
        .open("/fz/x", OpenFlags::create_trunc())
        .and_then(|f| a.close(f));
    // a second process holds a lease on /fz/x and is then stopped
    let mut holder = Writer::start(&cl.cluster_file());
    let mut worst = Duration::ZERO;
    let mut waited = Vec::new();
    let rounds: u32 = std::env::var("MADFS_COHERENCE_FROZEN_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    for round in 0..rounds {
        // the holder stats /fz/x (a lease), then freezes
        assert_eq!(holder.change("stat /fz/x"), None);
        // SAFETY: signals to a child of this process.
        unsafe { libc::kill(holder.child.id() as i32, libc::SIGSTOP) };
        let t = Instant::now();
        a.chmod("/fz/x", 0o600 + round % 64).unwrap();
        worst = worst.max(t.elapsed());
        waited.push(t.elapsed());
        // SAFETY: as above.
        unsafe { libc::kill(holder.child.id() as i32, libc::SIGCONT) };
    }
    let mut sorted = waited.clone();
    sorted.sort();
    eprintln!(
        "changes delayed by a frozen holder, {rounds} rounds: median {:?}, max {:?}",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    assert!(
        waited.iter().any(|d| *d > Duration::from_millis(100)),
        "no change waited: {waited:?}"
    );
    eprintln!("worst delay of a change by a frozen holder: {worst:?}");
    assert!(worst < Duration::from_millis(300 + 250), "{worst:?}");
}
