//! Several hosts on one machine: Linux network namespaces joined by a bridge
//! (`scripts/netns.sh`), three servers started by `scripts/mpi-cluster.sh` through mpirun with
//! the namespaces as its hosts (`scripts/netns-rsh.sh` as Open MPI's rsh agent), and the
//! `madfs` CLI run on the other hosts. Over UCX (TCP transport, peer error mode) and over the
//! plain-TCP fallback transport: a file written on one host reads back byte-exact on another;
//! with one server's cable pulled, calls to that server fail with EIO within the client
//! deadline while the others keep serving; plugged back in, service resumes. Also: a start-up
//! that fails leaves nothing running. Needs root, iproute2 and Open MPI; skips with a printed
//! reason otherwise. Every namespace, server and mpirun is removed when a test ends, passed or
//! failed (`Hosts`'s Drop).

mod common;

use common::data;
use common::procs::{alive, bin_dir, repo, show, text, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Server hosts; one more host is the client (and runs mpirun).
const SERVERS: usize = 3;
/// Client call deadline (`MADFS_TIMEOUT_MS`).
const TIMEOUT_MS: u64 = 3000;
/// How much longer than the deadline a failing CLI command may take (process start, UCX).
const SLACK: Duration = Duration::from_secs(4);

/// One test at a time: the deadline checks want the two cores to themselves.
static SERIAL: Mutex<()> = Mutex::new(());

fn script(name: &str) -> String {
    repo().join("scripts").join(name).display().to_string()
}

/// Why this machine cannot run these tests, if it cannot.
fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces)".into());
    }
    for (prog, arg) in [
        ("ip", "-V"),
        ("mpirun", "--version"),
        ("unshare", "--version"),
        ("timeout", "--version"),
    ] {
        if Command::new(prog).arg(arg).output().is_err() {
            return Some(format!("{prog} not found"));
        }
    }
    None
}

macro_rules! skip_unless_possible {
    () => {
        if let Some(why) = skip_reason() {
            eprintln!("skipping: {why}");
            return;
        }
    };
}

/// Processes in network namespace `ns`.
fn pids_in(ns: &str) -> Vec<u32> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .expect("ip netns pids");
    text(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The namespaces of one test, and the clusters started in them. Dropping it stops those
/// clusters and removes the namespaces (with whatever still runs in them).
struct Hosts {
    prefix: String,
    /// (namespace name, address): servers' hosts first, the client's last.
    hosts: Vec<(String, String)>,
    dir: tempfile::TempDir,
    clusters: Vec<PathBuf>,
}

impl Hosts {
    fn up() -> Hosts {
        static N: AtomicUsize = AtomicUsize::new(0);
        let prefix = format!(
            "madfs-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tempfile::Builder::new()
            .prefix("madfs-multihost-")
            .tempdir()
            .expect("tempdir");
        let mut h = Hosts {
            prefix,
            hosts: vec![],
            dir,
            clusters: vec![],
        };
        let out = Command::new("timeout")
            .args(["-k", "5", "60", &script("netns.sh"), "up", "-k"])
            .arg((SERVERS + 1).to_string())
            .args(["--prefix", &h.prefix])
            .output()
            .expect("run netns.sh");
        assert!(out.status.success(), "netns.sh up: {}", show(&out));
        for line in text(&out.stdout).lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(w.len(), 3, "netns.sh up printed {line:?}");
            h.hosts.push((w[0].to_owned(), w[1].to_owned()));
        }
        assert_eq!(h.hosts.len(), SERVERS + 1, "{}", show(&out));
        h
    }

    fn client(&self) -> &str {
        &self.hosts[SERVERS].0
    }

    fn host_of(&self, addr: &str) -> &str {
        &self
            .hosts
            .iter()
            .find(|(_, a)| a == addr)
            .unwrap_or_else(|| panic!("no host has address {addr}"))
            .0
    }

    /// Runs `args` on `host` with `env`, killed after `limit_s` seconds.
    fn exec(&self, host: &str, env: &[(&str, String)], limit_s: u64, args: &[&str]) -> Output {
        let mut c = Command::new(script("netns.sh"));
        c.args(["exec", host, "timeout", "-k", "5", &limit_s.to_string()])
            .args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("run netns.sh exec")
    }

    /// A hostfile naming the server hosts, one slot each (rank i on host i).
    fn hostfile(&self, path: &Path) {
        let body: String = self.hosts[..SERVERS]
            .iter()
            .map(|(name, _)| format!("{name} slots=1\n"))
            .collect();
        std::fs::write(path, body).expect("write hostfile");
    }

    /// `scripts/mpi-cluster.sh start` on the client host, servers on the others, extra
    /// arguments `more` before `--`. The cluster is stopped on drop even if this fails.
    fn start(&mut self, dir: &Path, env: &[(&str, String)], more: &[&str]) -> Output {
        std::fs::create_dir_all(dir).expect("cluster dir");
        let cluster = dir.join("cluster");
        let hostfile = dir.join("hostfile");
        self.hostfile(&hostfile);
        self.clusters.push(cluster.clone());
        let (mpi, rsh) = (script("mpi-cluster.sh"), script("netns-rsh.sh"));
        let (c, h, d) = (
            cluster.display().to_string(),
            hostfile.display().to_string(),
            dir.join("data").display().to_string(),
        );
        let mut args = vec![
            "bash",
            &mpi,
            "start",
            "-n",
            "3",
            "--hostfile",
            &h,
            "--rsh-agent",
            &rsh,
            "--cluster",
            &c,
            "--data",
            &d,
            "--allow-run-as-root",
        ];
        args.extend_from_slice(more);
        args.extend_from_slice(&["--", "--chunk-size", "65536"]);
        self.exec(self.client(), env, 200, &args)
    }

    /// `scripts/mpi-cluster.sh stop` on the client host.
    fn stop(&mut self, cluster: &Path) -> Output {
        let out = self.exec(
            self.client(),
            &[("MADFS_BIN_DIR", bin_dir().display().to_string())],
            120,
            &[
                "bash",
                &script("mpi-cluster.sh"),
                "stop",
                "--cluster",
                &cluster.display().to_string(),
            ],
        );
        self.clusters.retain(|c| c != cluster);
        out
    }

    /// True once no process is left on the server hosts (mpirun's daemons included).
    fn servers_hosts_empty(&self, limit: Duration) -> bool {
        wait_until(limit, || {
            self.hosts[..SERVERS]
                .iter()
                .all(|(ns, _)| pids_in(ns).is_empty())
        })
    }

    fn link(&self, host: &str, state: &str) {
        let out = Command::new(script("netns.sh"))
            .args(["link", host, state])
            .output()
            .expect("netns.sh link");
        assert!(out.status.success(), "netns.sh link: {}", show(&out));
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // a test that failed with a cable pulled: plug it back so that the stop can reach all
        for (host, _) in &self.hosts[..self.hosts.len().min(SERVERS)] {
            let _ = Command::new(script("netns.sh"))
                .args(["link", host, "up"])
                .output();
        }
        for c in self.clusters.clone() {
            let out = self.stop(&c);
            if !out.status.success() {
                eprintln!("mpi-cluster.sh stop (teardown): {}", show(&out));
            }
        }
        let out = Command::new("timeout")
            .args(["-k", "5", "60", &script("netns.sh"), "down", "--prefix"])
            .arg(&self.prefix)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!("netns.sh down: {}", show(&o)),
            Err(e) => eprintln!("netns.sh down: {e}"),
        }
    }
}

/// Server id → address (the host part of its UCX address), from the cluster file.
fn server_addrs(cluster: &Path) -> Vec<String> {
    let body = std::fs::read_to_string(cluster).expect("read cluster file");
    let mut out = vec![];
    for line in body.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() >= 3 && w[0].parse::<u32>().is_ok() {
            let addr: std::net::SocketAddr = w[1].parse().expect("server address");
            out.push((w[0].parse::<u32>().unwrap(), addr.ip().to_string()));
        }
    }
    out.sort();
    out.into_iter().map(|(_, a)| a).collect()
}

/// The pids `mpi-cluster.sh start` printed (its status lines, `... pid=N ...`).
fn status_pids(out: &Output) -> Vec<u32> {
    text(&out.stderr)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("pid="))
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Runs the whole scenario with clients on `transport` (`ucx` or `tcp`).
fn scenario(transport: &str) {
    let mut h = Hosts::up();
    let dir = h.dir.path().join(transport);
    let cluster = dir.join("cluster");
    let bins = bin_dir().display().to_string();
    let ucx_env = |v: &mut Vec<(&str, String)>| {
        v.push(("UCX_TLS", "tcp".into()));
        v.push(("UCX_NET_DEVICES", "veth0".into()));
        v.push(("MADFS_UCX_ERR_MODE", "peer".into()));
    };
    let mut server_env = vec![("MADFS_BIN_DIR", bins.clone())];
    ucx_env(&mut server_env);

    let t = Instant::now();
    let out = h.start(&dir, &server_env, &["--wait", "120"]);
    assert!(out.status.success(), "mpi-cluster.sh start: {}", show(&out));
    eprintln!("[{transport}] 3 servers up in {:?}", t.elapsed());
    assert!(text(&out.stdout).contains("export MADFS_CLUSTER="));
    let pids = status_pids(&out);
    assert_eq!(pids.len(), SERVERS, "{}", show(&out));
    // rank i on host i, each at its host's address
    let addrs = server_addrs(&cluster);
    assert_eq!(
        addrs,
        h.hosts[..SERVERS]
            .iter()
            .map(|(_, a)| a.clone())
            .collect::<Vec<_>>()
    );

    let mut client_env = vec![
        ("MADFS_CLUSTER", cluster.display().to_string()),
        ("MADFS_TIMEOUT_MS", TIMEOUT_MS.to_string()),
        ("MADFS_TRANSPORT", transport.to_owned()),
        // chunk files are on the same file system here; a real other host could not read them
        ("MADFS_LOCAL_READS", "0".into()),
    ];
    ucx_env(&mut client_env);
    let madfs = env!("CARGO_BIN_EXE_madfs");
    let cli = |host: &str, args: &[&str]| {
        let mut a = vec![madfs];
        a.extend_from_slice(args);
        let t = Instant::now();
        let o = h.exec(host, &client_env, 60, &a);
        (o, t.elapsed())
    };
    let ok = |host: &str, args: &[&str]| {
        let (o, _) = cli(host, args);
        assert!(o.status.success(), "madfs {args:?} on {host}: {}", show(&o));
        o
    };
    let fails_with_eio = |host: &str, args: &[&str]| {
        let (o, took) = cli(host, args);
        assert!(
            !o.status.success(),
            "madfs {args:?} on {host} succeeded with a server cut off"
        );
        assert!(
            text(&o.stderr).contains("Input/output error"),
            "madfs {args:?} on {host}: not EIO: {}",
            show(&o)
        );
        assert!(
            took < Duration::from_millis(TIMEOUT_MS) + SLACK,
            "madfs {args:?} on {host} took {took:?} (deadline {TIMEOUT_MS} ms)"
        );
        eprintln!("[{transport}] madfs {args:?}: EIO after {took:?}");
    };

    // written on the client host, read back on a server host and on the client host
    let client = h.client().to_owned();
    let (h0, h2) = (h.hosts[0].0.clone(), h.hosts[2].0.clone());
    let bytes = data((1 << 20) + 4321, 7); // 17 chunks of 64 KiB over all servers
    let input = dir.join("in.bin");
    std::fs::write(&input, &bytes).unwrap();
    let (input_s, out0, out1) = (
        input.display().to_string(),
        dir.join("out0.bin").display().to_string(),
        dir.join("out1.bin").display().to_string(),
    );
    ok(&client, &["mkdir", "/mh"]);
    ok(&client, &["put", &input_s, "/mh/big", "--sync"]);
    ok(&h0, &["get", "/mh/big", &out0]);
    assert!(std::fs::read(&out0).unwrap() == bytes, "read back on {h0}");

    // small files whose metadata lives on the server to be cut off, and on another one
    let down = 1u32;
    let on = |want: bool| {
        (0..1000)
            .map(|i| format!("/mh/f{i}"))
            .find(|p| {
                (madfs_placement::meta_server(p, &madfs_placement::Layout::initial(SERVERS as u32))
                    == down)
                    == want
            })
            .expect("a path for each server")
    };
    let (cut_path, kept_path) = (on(true), on(false));
    let small = dir.join("small.txt");
    std::fs::write(&small, b"small file\n").unwrap();
    let small_s = small.display().to_string();
    ok(&client, &["put", &small_s, &cut_path, "--sync"]);
    ok(&client, &["put", &small_s, &kept_path, "--sync"]);

    // pull server 1's cable: calls to it fail with EIO within the deadline, the others serve
    let down_host = h.host_of(&addrs[down as usize]).to_owned();
    h.link(&down_host, "down");
    fails_with_eio(&client, &["ping"]);
    fails_with_eio(&client, &["stat", &cut_path]);
    fails_with_eio(&client, &["get", "/mh/big", &out1]);
    fails_with_eio(&h2, &["stat", &cut_path]);
    ok(&client, &["stat", &kept_path]);

    // plug it back: service resumes
    h.link(&down_host, "up");
    let t = Instant::now();
    let mut tries = 0;
    let back = wait_until(Duration::from_secs(60), || {
        tries += 1;
        tries > 30 || cli(&client, &["ping"]).0.status.success()
    });
    assert!(back && tries <= 30, "server {down} did not come back");
    eprintln!(
        "[{transport}] service back {:?} after the link",
        t.elapsed()
    );
    ok(&client, &["stat", &cut_path]);
    ok(&h2, &["get", "/mh/big", &out1]);
    assert!(std::fs::read(&out1).unwrap() == bytes, "read back on {h2}");
    ok(&h2, &["put", &input_s, "/mh/big2"]);
    ok(&client, &["get", "/mh/big2", &out1]);
    assert!(std::fs::read(&out1).unwrap() == bytes, "big2 read back");

    // stop: every server ends, and nothing is left on the server hosts
    let out = h.stop(&cluster);
    assert!(out.status.success(), "mpi-cluster.sh stop: {}", show(&out));
    assert!(
        wait_until(Duration::from_secs(20), || !pids.iter().any(|p| alive(*p))),
        "servers {pids:?} still running after stop"
    );
    assert!(
        h.servers_hosts_empty(Duration::from_secs(20)),
        "processes left on the server hosts"
    );
}

#[test]
fn ucx_tcp_across_namespaces() {
    skip_unless_possible!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    scenario("ucx");
}

#[test]
fn plain_tcp_across_namespaces() {
    skip_unless_possible!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    scenario("tcp");
}

/// Two servers come up, the third never does (its address lookup hangs): start gives up
/// after --wait, stops the two through their control ports, ends mpirun, and exits 1, leaving
/// nothing running on the server hosts.
#[test]
fn failed_start_leaves_nothing_running() {
    skip_unless_possible!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut h = Hosts::up();
    let dir = h.dir.path().join("failed");
    let env = vec![
        ("MADFS_BIN_DIR", bin_dir().display().to_string()),
        ("UCX_TLS", "tcp".into()),
        ("UCX_NET_DEVICES", "veth0".into()),
    ];
    let ipcmd =
        r#"if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then sleep 600; fi; hostname -I | cut -d" " -f1"#;
    let t = Instant::now();
    let out = h.start(&dir, &env, &["--wait", "8", "--ip-of-host", ipcmd]);
    let took = t.elapsed();
    assert!(!out.status.success(), "start succeeded: {}", show(&out));
    assert!(
        text(&out.stderr).contains("did not come up"),
        "{}",
        show(&out)
    );
    assert!(took < Duration::from_secs(60), "start took {took:?}");
    // the two that started had registered; they are gone now, and so is everything else
    let registered = server_addrs(&dir.join("cluster"));
    assert_eq!(registered.len(), 2, "{}", show(&out));
    assert!(
        h.servers_hosts_empty(Duration::from_secs(20)),
        "processes left on the server hosts: {}",
        show(&out)
    );
    eprintln!("failed start cleaned up in {took:?}");
}
