//! Slow, stalled and dead peers hold no handler and no memory for long: half-sent writes,
//! clients that stop or die with large reads outstanding, idle and trickling TCP
//! connections, and connections whose lease ran out (docs/architecture.md, "Slow and dead
//! peers").

mod common;

use common::*;
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_proto::{Request, Welcome};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

fn alive(pid: Option<u32>) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid.is_some_and(|p| unsafe { libc::kill(p as i32, 0) } == 0)
}

/// The slowest of `n` rounds of stat + small write + read back on `c`.
fn slowest_round(c: &Client, n: usize, tag: &str) -> Duration {
    let mut worst = Duration::ZERO;
    for i in 0..n {
        let t = Instant::now();
        let p = format!("/probe-{tag}-{i}");
        put(c, &p, &data(5000, i as u64), 5000, false);
        assert_eq!(get(c, &p), data(5000, i as u64));
        c.stat(&p).unwrap();
        c.unlink(&p).unwrap();
        worst = worst.max(t.elapsed());
    }
    worst
}

/// A `madfs stall` process, killed when dropped.
pub struct Staller(Child);

impl Drop for Staller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `madfs stall`: a client that asks for 16 large reads of `path` and never takes them.
fn staller(cl: &madfs_cluster::LocalCluster, path: &str, tcp: bool) -> Staller {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_madfs"));
    cmd.args(["stall", path, "--reads", "16"])
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_LOCAL_READS", "0")
        .env("UCX_NET_DEVICES", "lo")
        .stdout(Stdio::piped());
    if tcp {
        cmd.arg("--tcp");
    }
    let mut child = Staller(cmd.stderr(Stdio::null()).spawn().unwrap());
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "staller said {line:?}");
    child
}

fn signal(child: &Staller, sig: i32) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.0.id() as i32, sig) };
}

#[test]
fn half_sent_writes_and_stalled_readers_hold_no_handler() {
    let cl = cluster(1, &["--half-sent-ms", "1500"], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    let cs = c.transport().welcome(0).unwrap().chunk_size as usize;
    let big = data(18 * cs, 7);
    put(&c, "/big", &big, 1 << 20, true);

    // 4 connections × 12 writes whose data never comes: three times the 16 handlers
    let mut hostile = vec![];
    for h in 0..4 {
        let hc = client(&cl, Duration::from_secs(10), "none");
        let f = hc
            .open(&format!("/hostile{h}"), OpenFlags::create_trunc())
            .unwrap();
        let mut seqs = vec![];
        for k in 0..12u64 {
            let req = Request::WriteData {
                id: f.attr.id,
                chunk: 1 + k,
                offset: 0,
                len: 1 << 20,
                chunk_size: cs as u32,
                size_of: None,
                cap: f.cap,
            };
            seqs.push(hc.transport().send_request(0, &req, &[]).unwrap());
        }
        hostile.push((hc, seqs));
    }
    // and two clients with 16 large reads each: one stopped, one killed
    let stopped = staller(&cl, "/big", false);
    signal(&stopped, libc::SIGSTOP);
    drop(staller(&cl, "/big", false)); // killed

    let worst = slowest_round(&c, 50, "a");
    assert!(
        worst < Duration::from_millis(500),
        "a round took {worst:?} beside stalled peers"
    );
    let st = stats(&cl, 0);
    assert!(st.parked >= 48, "parked {}", st.parked);

    // past the deadline every half-sent write is dropped; its late data is taken and thrown away
    std::thread::sleep(Duration::from_millis(2000));
    let (hc, seqs) = &hostile[0];
    hc.transport()
        .send_data(0, seqs[0], &vec![1u8; 1 << 20])
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let st = stats(&cl, 0);
    assert_eq!(st.half_sent, 48, "{st:?}");
    assert!(st.orphans >= 1, "{st:?}");
    // after the send timeout (5 s) the stalled readers' connections are closed
    // (their 32 replies stay "stuck": in error mode none UCX cannot withdraw a rendezvous send
    // the peer has not taken, so what it reads is kept)
    std::thread::sleep(Duration::from_millis(3500));
    let st = stats(&cl, 0);
    assert!(st.killed >= 2, "{st:?}");
    eprintln!("after the stalls: {st:?}");
    assert!(slowest_round(&c, 20, "b") < Duration::from_millis(500));
    assert_eq!(get(&c, "/big"), big);
    // the replies never taken do not hold the file against truncation
    let t = Instant::now();
    put(&c, "/big", b"short", 5, false);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "truncate took {:?}",
        t.elapsed()
    );
    assert_eq!(get(&c, "/big"), b"short");
    drop(stopped);
    assert!(alive(cl.pid(0)), "server died:\n{}", cl.log(0));
    // replies pending to a stopped reader are not a stalled worker
    assert!(!cl.log(0).contains("restarted by itself"), "{}", cl.log(0));
}

/// An admitted plain-TCP connection to server `i`, as a hostile peer holds one: the stream
/// and the connection's secret.
fn tcp_peer(cl: &madfs_cluster::LocalCluster, i: u32) -> (TcpStream, u64) {
    let cfg = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    let addr = cfg.tcp_servers.as_ref().unwrap()[i as usize];
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let recv = |s: &mut TcpStream| {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut m = vec![0u8; u32::from_le_bytes(len) as usize];
        s.read_exact(&mut m).unwrap();
        m
    };
    let welcome: Welcome = flexbuffers::from_slice(&recv(&mut s)).unwrap();
    let pending = cfg
        .credentials
        .hello(welcome.cluster, i, &welcome, None, (0, false))
        .unwrap();
    let hello = pending.bytes();
    s.write_all(&(hello.len() as u32 + 1).to_le_bytes())
        .unwrap();
    s.write_all(&[3]).unwrap();
    s.write_all(hello).unwrap();
    let answer = recv(&mut s);
    let secret = cfg.credentials.admitted(i, &pending, &answer).unwrap();
    (s, secret)
}

/// Is the server's end of `s` closed (EOF or reset within `wait`)?
fn closed(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn idle_and_trickling_tcp_connections_are_closed() {
    let cl = cluster(
        1,
        // (a TCP request's deadline is the longer of the half-sent and send deadlines)
        &[
            "--tcp-idle-ms",
            "1000",
            "--half-sent-ms",
            "800",
            "--send-timeout-ms",
            "1000",
        ],
        "none",
    );
    let cfg = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    let good = Client::new_tcp(&cfg).unwrap();
    put(&good, "/t", b"tcp", 3, false);

    // idle: closed after the idle limit
    let (mut idle, _) = tcp_peer(&cl, 0);
    // trickling: a request that comes a byte at a time is closed at its deadline
    let (mut slow, secret) = tcp_peer(&cl, 0);
    let msg = tcp_request(secret, &Request::Stat("/t"));
    let started = Instant::now();
    let mut cut = false;
    for b in &msg {
        if slow.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        // the good client is served meanwhile
        assert_eq!(get(&good, "/t"), b"tcp");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(cut || closed(&mut slow, Duration::from_secs(2)));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        closed(&mut idle, Duration::from_secs(3)),
        "idle connection kept"
    );
    let st = stats(&cl, 0);
    assert!(st.tcp_timeouts >= 2, "{st:?}");
    // a well-behaved client idle past the limit reconnects on its next request
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(get(&good, "/t"), b"tcp");
    assert!(alive(cl.pid(0)));
}

#[test]
fn silent_connections_lose_their_lease_and_clients_come_back() {
    let cl = cluster(1, &["--lease-ms", "1200"], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    put(&c, "/l", b"lease", 5, false);
    let before = stats(&cl, 0);
    // a peer that says nothing more (as a killed one): its connection goes
    let quiet = client(&cl, Duration::from_secs(10), "none");
    quiet.stat("/l").unwrap();
    std::mem::forget(quiet); // no goodbye
    std::thread::sleep(Duration::from_millis(2500));
    let st = stats(&cl, 0);
    assert!(st.expired > before.expired, "{st:?}");
    // this client was silent as long: it reconnects before its next request, transparently
    let t = Instant::now();
    assert_eq!(get(&c, "/l"), b"lease");
    assert!(t.elapsed() < Duration::from_secs(2));
    // while it keeps talking, its connection stays
    let conns = stats(&cl, 0).connections;
    for _ in 0..10 {
        // (an open: a stat may be answered from the cache, with no request)
        assert_eq!(get(&c, "/l"), b"lease");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(stats(&cl, 0).connections, conns);
}

/// A server whose UCX worker stalls (a local client killed in the middle of a send leaves its
/// shared-memory receive queue stuck for good; here the test fault that makes the progress
/// loop look so) restarts itself on the same addresses within a few seconds: calls lost with
/// the old worker time out, the next ones are served, and nothing written before is lost.
#[test]
fn a_stalled_worker_restarts_its_server() {
    setup();
    let cl = madfs_cluster::LocalCluster::start(madfs_cluster::Options {
        servers: 2,
        args: vec!["--stall-ms".into(), "500".into()],
        err_mode: "none".into(),
        env: vec![("MADFS_FAULT".into(), "ucx-stall-after-ms:2500".into())],
    })
    .expect("start servers");
    let started = Instant::now();
    let entries = [cl.entry(0), cl.entry(1)];
    let pids = [cl.pid(0), cl.pid(1)];
    let c = client(&cl, Duration::from_secs(3), "none");
    for i in 0..20u64 {
        put(&c, &format!("/s{i}"), &data(6000, i), 6000, false);
    }
    // 2.5 s, then 0.5 s unarmable, then 0.5 s for the probe: restarted by 4 s or so
    let restarted = |i: usize| cl.log(i).contains("restarted by itself (1 time(s))");
    while !(restarted(0) && restarted(1)) {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no restart:\n{}\n{}",
            cl.log(0),
            cl.log(1)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("both restarted {:?} after the start", started.elapsed());
    assert!(
        cl.log(0).contains("receive queue is stalled"),
        "{}",
        cl.log(0)
    );
    // the same processes (a new image), the same addresses, the fault not inherited
    assert_eq!([cl.pid(0), cl.pid(1)], pids);
    assert!(alive(cl.pid(0)) && alive(cl.pid(1)));
    let listed = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    assert_eq!(listed.tcp_servers.unwrap().len(), 2);
    assert_eq!([cl.entry(0), cl.entry(1)], entries);
    // a call on a connection to the old worker may be lost (EIO after the deadline, or at
    // once when the worker's progress already saw the connection fail and the new image
    // does not listen yet); the client then reconnects
    let t = Instant::now();
    let mut lost = 0;
    for i in 0..20u64 {
        let p = format!("/s{i}");
        loop {
            match c.stat(&p) {
                Ok(a) => break assert_eq!(a.size, 6000),
                Err(madfs_client::Errno::EIO) if lost < 8 => {
                    lost += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("{p}: {e:?}\n{}", cl.log(0)),
            }
        }
        assert_eq!(get(&c, &p), data(6000, i), "{p}");
    }
    eprintln!("read back after {:?}, {lost} call(s) lost", t.elapsed());
    put(&c, "/after", b"after", 5, false);
    assert_eq!(get(&c, "/after"), b"after");
    // still served after a while (the fault is gone with the old image)
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(get(&c, "/after"), b"after");
    assert!(!cl.log(0).contains("restarted by itself (2 time(s))"));
}
