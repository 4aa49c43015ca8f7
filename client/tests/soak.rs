//! Soak: 64 hostile or stalled peers beside 4 well-behaved clients, once over UCX shared
//! memory and once over the TCP fallback (issue 31). The peers: 16 connections sending writes
//! whose data never comes (and now and then comes late), 8 idle and 8 byte-at-a-time TCP
//! connections, 16 client processes that ask for 16 large reads each and are stopped
//! (SIGSTOP) or killed (SIGKILL), and 16 connections flooding tags no server receives. The
//! well-behaved clients create, write, read back (checksum), stat and unlink files: every
//! request must be answered within 5 s, nothing may be lost, and each server's resident set
//! must stay within 256 MiB.
//!
//! Duration: `MADFS_SOAK_SECS` (default 15; the run is 60).

mod common;

use common::*;
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_cluster::LocalCluster;
use madfs_proto::{tag, Request, Welcome};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(5);
const RSS_MAX: u64 = 256 << 20;

fn secs() -> u64 {
    std::env::var("MADFS_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15)
}

fn rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        << 10
}

/// What the well-behaved clients did.
#[derive(Default)]
struct Figures {
    requests: AtomicU64,
    files: AtomicU64,
    max_latency_us: AtomicU64,
    slowest: Mutex<&'static str>,
    /// Requests answered after their deadline (checked at the end: a panic in a client
    /// thread would unwind through UCX while the others run).
    late: AtomicU64,
}

impl Figures {
    /// Runs `f` as one timed request.
    fn timed<T>(&self, what: &'static str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let v = f();
        let d = t.elapsed();
        self.requests.fetch_add(1, Relaxed);
        if self.max_latency_us.fetch_max(d.as_micros() as u64, Relaxed) < d.as_micros() as u64 {
            *self.slowest.lock().unwrap() = what;
        }
        if d >= DEADLINE {
            eprintln!("{what} took {d:?}");
            self.late.fetch_add(1, Relaxed);
        }
        v
    }
}

/// A well-behaved client: files of mixed sizes written, read back, checked, statted, removed.
fn good_client(c: &Client, k: usize, stop: &AtomicBool, fig: &Figures) {
    let dir = format!("/good{k}");
    fig.timed("mkdir", || c.mkdir(&dir, 0o755).unwrap());
    let mut i = 0u64;
    let mut kept = vec![];
    while !stop.load(Relaxed) {
        let len = [1000, 47_008, 300_000, 1 << 20, 3 << 20][(i % 5) as usize];
        let bytes = data(len, i * 31 + k as u64);
        let p = format!("{dir}/f{i}");
        let mut f = fig.timed("create", || c.open(&p, OpenFlags::create_trunc()).unwrap());
        let mut off = 0;
        for piece in bytes.chunks(1 << 20) {
            fig.timed("write", || c.write(&mut f, off, piece).unwrap());
            off += piece.len() as u64;
        }
        if i.is_multiple_of(3) {
            fig.timed("fsync", || c.fsync(&mut f).unwrap());
        }
        fig.timed("close", || c.close(f).unwrap());
        let attr = fig.timed("stat", || c.stat(&p).unwrap());
        assert_eq!(attr.size, len as u64, "{p}");
        let f = fig.timed("open", || c.open(&p, OpenFlags::default()).unwrap());
        let mut back = vec![0u8; len];
        let n = fig.timed("read", || c.read(&f, 0, &mut back).unwrap());
        fig.timed("close", || c.close(f).unwrap());
        assert_eq!(n, len, "{p}");
        assert_eq!(sum(&back), sum(&bytes), "{p} read back wrong");
        if i.is_multiple_of(4) {
            kept.push((p, sum(&bytes)));
        } else {
            fig.timed("unlink", || c.unlink(&p).unwrap());
        }
        fig.files.fetch_add(1, Relaxed);
        i += 1;
    }
    // nothing lost: every file kept reads back whole
    for (p, s) in kept {
        assert_eq!(sum(&get(c, &p)), s, "{p} lost");
    }
}

/// Writes whose data never comes, four at a time; now and then the data comes late.
fn half_sender(cl: &LocalCluster, k: usize, stop: &AtomicBool) {
    let c = client(cl, Duration::from_secs(10), "none");
    let f = c
        .open(&format!("/half{k}"), OpenFlags::create_trunc())
        .unwrap();
    let cs = c.transport().welcome(0).unwrap().chunk_size;
    let mut round = 0u64;
    while !stop.load(Relaxed) {
        let mut seqs = vec![];
        for j in 0..4u64 {
            let chunk = 1 + (round * 4 + j) % 64;
            let server = madfs_placement::chunk_server(f.attr.id, chunk, &c.layout());
            let req = Request::WriteData {
                id: f.attr.id,
                chunk,
                offset: 0,
                len: 1 << 20,
                chunk_size: cs,
                size_of: None,
                cap: f.cap,
            };
            // a connection closed by the server (over its limits) is one more stalled peer
            if let Ok(seq) = c.transport().send_request(server, &req, &[]) {
                seqs.push((server, seq));
            }
        }
        std::thread::sleep(Duration::from_millis(700));
        if round % 5 == 4 {
            // late data, after the deadline
            std::thread::sleep(Duration::from_millis(1500));
            if let Some((server, seq)) = seqs.first() {
                let _ = c.transport().send_data(*server, *seq, &vec![7u8; 1 << 20]);
            }
        }
        round += 1;
    }
}

/// An admitted plain-TCP connection to server `i`: the stream and its secret.
fn tcp_peer(cl: &LocalCluster, i: u32) -> Option<(TcpStream, u64)> {
    let cfg = ClientConfig::from_cluster_file(cl.cluster_file()).ok()?;
    let addr = cfg.tcp_servers.as_ref()?[i as usize];
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let recv = |s: &mut TcpStream| -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).ok()?;
        let mut m = vec![0u8; u32::from_le_bytes(len) as usize];
        s.read_exact(&mut m).ok()?;
        Some(m)
    };
    let welcome: Welcome = flexbuffers::from_slice(&recv(&mut s)?).ok()?;
    let pending = cfg
        .credentials
        .hello(welcome.cluster, i, &welcome, None, (0, false))
        .ok()?;
    let hello = pending.bytes();
    s.write_all(&(hello.len() as u32 + 1).to_le_bytes()).ok()?;
    s.write_all(&[3]).ok()?;
    s.write_all(hello).ok()?;
    let answer = recv(&mut s)?;
    let secret = cfg.credentials.admitted(i, &pending, &answer).ok()?;
    Some((s, secret))
}

/// Idle TCP connections (`trickle` false) or requests sent a byte every 150 ms; a connection
/// the server closes is opened again.
fn tcp_hostile(cl: &LocalCluster, k: usize, trickle: bool, stop: &AtomicBool) {
    let server = (k % 2) as u32;
    while !stop.load(Relaxed) {
        let Some((mut s, secret)) = tcp_peer(cl, server) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        if !trickle {
            // until the server closes it (idle limit) or the soak ends
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut b = [0u8; 16];
            while !stop.load(Relaxed) {
                match s.read(&mut b) {
                    Ok(0) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    _ => break,
                }
            }
            continue;
        }
        let msg = tcp_request(secret, &Request::Stat("/"));
        for b in &msg {
            if stop.load(Relaxed) || s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

/// A `madfs stall` process (16 large reads never taken), killed when dropped.
struct Staller(Child);

impl Drop for Staller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn staller(cl: &LocalCluster, tcp: bool) -> Option<Staller> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_madfs"));
    cmd.args(["stall", "/big", "--reads", "16"])
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("UCX_NET_DEVICES", "lo")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if tcp {
        cmd.arg("--tcp");
    }
    let mut child = Staller(cmd.spawn().ok()?);
    let mut line = String::new();
    BufReader::new(child.0.stdout.take()?)
        .read_line(&mut line)
        .ok()?;
    (line.trim() == "ready").then_some(child)
}

/// Stallers, one at a time in this slot: stopped (even `k`) or killed (odd), replaced every 4 s.
fn stall_slot(cl: &LocalCluster, k: usize, tcp: bool, stop: &AtomicBool) {
    while !stop.load(Relaxed) {
        let Some(s) = staller(cl, tcp) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(
                s.0.id() as i32,
                if k.is_multiple_of(2) {
                    libc::SIGSTOP
                } else {
                    libc::SIGKILL
                },
            )
        };
        for _ in 0..20 {
            if stop.load(Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        drop(s);
    }
}

/// Messages of tag kinds no server receives, and requests with a wrong secret.
fn flooder(cl: &LocalCluster, k: usize, stop: &AtomicBool) {
    let c = client(cl, Duration::from_secs(10), "none");
    let server = (k % 2) as u32;
    let junk = vec![0x5au8; 200 + 37 * k];
    let mut i = 0u64;
    while !stop.load(Relaxed) {
        let kind = [0, 4 << 60, 3 << 60, 9 << 60, 15 << 60][(i % 5) as usize];
        if c.transport().send_only(server, kind, &junk).is_err() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if i.is_multiple_of(10) {
            let _ = c.transport().send_tagged(
                server,
                tag::request(tag::REQUEST, 1 + k as u32, 9),
                &[&junk],
            );
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One soak at a time (two would share the machine's cores).
static ONE: Mutex<()> = Mutex::new(());

fn soak(tcp: bool) {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let secs = secs();
    let name = if tcp { "TCP" } else { "UCX shared memory" };
    // a reply a stopped reader never takes keeps its file mapped, and so holds back
    // truncation of the files of that mapping's pin shard, until the send timeout closes the
    // reader (docs/architecture.md): 3 s here, so that a well-behaved truncation never waits
    // longer than that
    let cl = cluster(
        2,
        &[
            "--tcp-idle-ms",
            "5000",
            "--lease-ms",
            "10000",
            "--send-timeout-ms",
            "3000",
        ],
        "none",
    );
    let setup = client(&cl, Duration::from_secs(10), "none");
    let cs = setup.transport().welcome(0).unwrap().chunk_size as usize;
    put(&setup, "/big", &data(18 * cs, 3), 1 << 20, true);
    let pids: Vec<u32> = (0..2).map(|i| cl.pid(i).unwrap()).collect();
    let stop = AtomicBool::new(false);
    let fig = Figures::default();
    let max_rss = Mutex::new(vec![0u64; 2]);
    let started = Instant::now();
    std::thread::scope(|sc| {
        let (cl, stop, fig, max_rss, pids) = (&cl, &stop, &fig, &max_rss, &pids);
        for k in 0..16 {
            sc.spawn(move || half_sender(cl, k, stop));
            sc.spawn(move || tcp_hostile(cl, k, k % 2 == 1, stop));
            sc.spawn(move || stall_slot(cl, k, tcp, stop));
            sc.spawn(move || flooder(cl, k, stop));
        }
        sc.spawn(move || {
            while !stop.load(Relaxed) {
                let mut m = max_rss.lock().unwrap();
                for (i, pid) in pids.iter().enumerate() {
                    m[i] = m[i].max(rss(*pid));
                }
                drop(m);
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        let goods: Vec<_> = (0..4)
            .map(|k| {
                sc.spawn(move || {
                    let mut cfg = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
                    cfg.timeout = Duration::from_secs(10);
                    // every read asks the servers (no local reads of chunk files)
                    cfg.local_reads = false;
                    let c = if tcp {
                        Client::new_tcp(&cfg).unwrap()
                    } else {
                        Client::new(&cfg).unwrap()
                    };
                    good_client(&c, k, stop, fig)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Relaxed);
        for g in goods {
            if let Err(e) = g.join() {
                stop.store(true, Relaxed);
                std::panic::resume_unwind(e);
            }
        }
    });
    let took = started.elapsed();
    let rss = max_rss.lock().unwrap().clone();
    let st: Vec<_> = (0..2).map(|i| stats(&cl, i)).collect();
    println!(
        "soak over {name}, {secs} s (took {took:.1?}): {} well-behaved requests ({} files), \
         max latency {:.1} ms ({}), max RSS {} / {} MiB",
        fig.requests.load(Relaxed),
        fig.files.load(Relaxed),
        fig.max_latency_us.load(Relaxed) as f64 / 1000.0,
        fig.slowest.lock().unwrap(),
        rss[0] >> 20,
        rss[1] >> 20,
    );
    for (i, s) in st.iter().enumerate() {
        println!(
            "  server {i}: parked {} half_sent {} orphans {} busy {} over_limit {} killed {} \
             expired {} stuck {} tcp_timeouts {} drained {} forged {} live {}",
            s.parked,
            s.half_sent,
            s.orphans,
            s.busy,
            s.over_limit,
            s.killed,
            s.expired,
            s.stuck,
            s.tcp_timeouts,
            s.drained,
            s.forged,
            s.live_connections
        );
    }
    for (i, r) in rss.iter().enumerate() {
        assert!(*r > 0 && *r < RSS_MAX, "server {i} RSS {r}");
        // SAFETY: signal 0 only checks that the process exists.
        assert_eq!(
            unsafe { libc::kill(pids[i] as i32, 0) },
            0,
            "server {i} died"
        );
    }
    assert!(fig.files.load(Relaxed) > 0);
    for i in 0..pids.len() {
        assert!(
            !cl.log(i).contains("restarted by itself"),
            "server {i} restarted: {}",
            cl.log(i)
        );
    }
    assert_eq!(
        fig.late.load(Relaxed),
        0,
        "requests answered after {DEADLINE:?}"
    );
}

#[test]
fn soak_shared_memory() {
    soak(false);
}

#[test]
fn soak_tcp() {
    soak(true);
}
