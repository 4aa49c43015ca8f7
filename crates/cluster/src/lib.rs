//! Local madfs clusters for tests and benchmarks: starts `madfs-server` processes on
//! 127.0.0.1 with data under a temporary root, kills and restarts them.
//!
//! Each cluster owns its ports: a block of [`PORTS_PER_BLOCK`] ports below the kernel's
//! ephemeral range (so no connecting socket is ever given one), claimed with an `flock` on a
//! file under the temporary directory for as long as the cluster lives (so two clusters, in
//! one test process or in two, never share one). A restarted server binds the ports it had;
//! nothing re-binds a port that the kernel handed out as port 0.

pub mod fuse;

use madfs_rpc::cluster_file::{self, ServerEntry};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Finds a binary of this workspace next to the running executable (`target/<profile>/`),
/// or through `MADFS_BIN_DIR`.
pub fn find_bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("MADFS_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    for _ in 0..3 {
        let p = dir.join(name);
        if p.exists() {
            return p;
        }
        if !dir.pop() {
            break;
        }
    }
    panic!(
        "{name} not found next to {} (run `cargo build --workspace` first, or set MADFS_BIN_DIR)",
        exe.display()
    );
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct Options {
    /// Number of servers.
    pub servers: usize,
    /// Extra arguments for every server (e.g. `--chunk-size 65536`).
    pub args: Vec<String>,
    /// UCX endpoint error mode (`none`/`peer`).
    pub err_mode: String,
    /// Extra environment for the servers (e.g. `UCX_TLS=tcp`).
    pub env: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            servers: 3,
            args: vec![],
            err_mode: "none".into(),
            env: vec![],
        }
    }
}

struct Server {
    child: Option<Child>,
    data_dir: PathBuf,
    entry: Option<ServerEntry>,
}

/// Ports in one block: three per server (UCX, control, plain TCP).
pub const PORTS_PER_BLOCK: u16 = 96;
/// The blocks lie in `[PORTS_FIRST, PORTS_END)`, under Linux's default ephemeral range
/// (32768–60999), which [`PortBlock::claim`] checks.
const PORTS_FIRST: u16 = 20000;
const PORTS_END: u16 = 32000;

/// A block of loopback ports owned by this process while the value lives.
pub struct PortBlock {
    _lock: std::fs::File,
    base: u16,
}

impl PortBlock {
    /// Claims a free block: its lock file is not held by anyone and every port of it binds on
    /// 127.0.0.1 now.
    pub fn claim() -> std::io::Result<PortBlock> {
        use std::os::unix::io::AsRawFd;
        let (lo, _) = ephemeral_range();
        let end = PORTS_END.min(lo);
        let blocks = (end.saturating_sub(PORTS_FIRST) / PORTS_PER_BLOCK).max(1);
        let dir = std::env::temp_dir().join("madfs-test-ports");
        std::fs::create_dir_all(&dir)?;
        // start somewhere that differs between processes, then walk the blocks
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let first = (std::process::id() ^ nanos) as u16 % blocks;
        for k in 0..blocks {
            let base = PORTS_FIRST + ((first + k) % blocks) * PORTS_PER_BLOCK;
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(format!("{base}.lock")))?;
            // SAFETY: flock on an fd we own; held until `lock` is closed.
            if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                continue;
            }
            let free = (base..base + PORTS_PER_BLOCK)
                .all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
            if free {
                return Ok(PortBlock { _lock: lock, base });
            }
        }
        Err(std::io::Error::other(format!(
            "no free block of {PORTS_PER_BLOCK} loopback ports in {PORTS_FIRST}..{end}"
        )))
    }

    /// Port `k` of the block.
    pub fn port(&self, k: u16) -> u16 {
        assert!(k < PORTS_PER_BLOCK, "port {k} outside the block");
        self.base + k
    }
}

fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| {
            let mut it = t.split_whitespace().map(|v| v.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

/// A running local cluster; every server is killed when it is dropped.
pub struct LocalCluster {
    root: tempfile::TempDir,
    bin: PathBuf,
    opts: Options,
    servers: Vec<Server>,
    ports: PortBlock,
    /// The network namespace the servers run in and its address (`None`: this one, on
    /// 127.0.0.1).
    host: Option<(String, std::net::Ipv4Addr)>,
}

impl LocalCluster {
    /// Starts `opts.servers` servers and waits until all listen.
    pub fn start(opts: Options) -> std::io::Result<LocalCluster> {
        Self::start_in(opts, None)
    }

    /// [`LocalCluster::start`] with the servers in network namespace `netns` (`ip netns
    /// exec`), listening on its address `addr` (multi-host tests: `scripts/netns.sh`).
    pub fn start_on(
        opts: Options,
        netns: &str,
        addr: std::net::Ipv4Addr,
    ) -> std::io::Result<LocalCluster> {
        Self::start_in(opts, Some((netns.to_owned(), addr)))
    }

    fn start_in(
        opts: Options,
        host: Option<(String, std::net::Ipv4Addr)>,
    ) -> std::io::Result<LocalCluster> {
        let root = tempfile::Builder::new().prefix("madfs-test-").tempdir()?;
        if opts.servers * 3 > PORTS_PER_BLOCK as usize {
            return Err(std::io::Error::other(format!(
                "at most {} servers per local cluster",
                PORTS_PER_BLOCK / 3
            )));
        }
        let mut c = LocalCluster {
            root,
            bin: find_bin("madfs-server"),
            opts,
            servers: vec![],
            ports: PortBlock::claim()?,
            host,
        };
        for i in 0..c.opts.servers {
            let data_dir = c.root.path().join(format!("server{i}"));
            c.servers.push(Server {
                child: None,
                data_dir,
                entry: None,
            });
        }
        for i in 0..c.opts.servers {
            c.spawn(i)?;
        }
        for i in 0..c.opts.servers {
            c.wait_ready(i)?;
        }
        Ok(c)
    }

    /// The cluster file clients use.
    pub fn cluster_file(&self) -> PathBuf {
        self.root.path().join("cluster")
    }

    /// The options servers are (re)started with: a change applies to the next
    /// [`LocalCluster::restart`].
    pub fn options_mut(&mut self) -> &mut Options {
        &mut self.opts
    }

    /// The root directory holding data dirs and logs.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Entry (addresses) of server `i`.
    pub fn entry(&self, i: usize) -> ServerEntry {
        self.servers[i].entry.expect("server started")
    }

    /// Pid of server `i`.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.servers[i].child.as_ref().map(|c| c.id())
    }

    /// The addresses server `i` listens on: its three ports of the cluster's block.
    pub fn addresses(&self, i: usize) -> ServerEntry {
        let ip = self
            .host
            .as_ref()
            .map_or(std::net::Ipv4Addr::LOCALHOST, |h| h.1);
        let at = |k: usize| SocketAddr::from((ip, self.ports.port((3 * i + k) as u16)));
        ServerEntry {
            id: i as u32,
            ucx: at(0),
            control: at(1),
            tcp: Some(at(2)),
        }
    }

    /// Runs `madfs-server` once more as server `i` of this cluster with `extra` arguments
    /// (a flag given there replaces the cluster's own) and no readiness wait: for tests of what a server refuses to start with. Returns its
    /// exit status and output (killed after `timeout`).
    pub fn try_server(
        &self,
        i: usize,
        extra: &[&str],
        timeout: Duration,
    ) -> std::io::Result<(std::process::ExitStatus, String)> {
        let out = self.root.path().join(format!("try{i}.log"));
        let log = std::fs::File::create(&out)?;
        // a flag in `extra` replaces the cluster's own (every one of those takes a value)
        let base = self.command(i);
        let mut args: Vec<std::ffi::OsString> = base.get_args().map(|a| a.to_owned()).collect();
        for flag in extra.iter().filter(|a| a.starts_with("--")) {
            if let Some(at) = args.iter().position(|a| a == *flag) {
                args.drain(at..(at + 2).min(args.len()));
            }
        }
        let mut cmd = Command::new(base.get_program());
        cmd.args(args)
            .envs(base.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .stdin(Stdio::null());
        let mut child = cmd
            .args(extra)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let deadline = Instant::now() + timeout;
        let st = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break child.wait()?;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ok((st, std::fs::read_to_string(&out).unwrap_or_default()))
    }

    fn command(&self, i: usize) -> Command {
        let e = self.addresses(i);
        let mut cmd = match &self.host {
            None => Command::new(&self.bin),
            Some((netns, _)) => {
                // (`ip netns exec` execs the server: the child is the server)
                let mut c = Command::new("ip");
                c.args(["netns", "exec", netns]).arg(&self.bin);
                c
            }
        };
        // (a server after the ones the cluster was made with joins it)
        let (size_flag, size) = if i < self.opts.servers {
            ("--servers", Some(self.opts.servers.to_string()))
        } else {
            ("--join", None)
        };
        cmd.arg("--id")
            .arg(i.to_string())
            .arg(size_flag)
            .args(size)
            .arg("--listen")
            .arg(e.ucx.to_string())
            .arg("--control")
            .arg(e.control.to_string())
            .arg("--tcp")
            .arg(e.tcp.expect("tcp port").to_string())
            .arg("--data-dir")
            .arg(&self.servers[i].data_dir)
            .arg("--cluster-file")
            .arg(self.root.path().join("cluster"))
            .arg("--ucx-err-mode")
            .arg(&self.opts.err_mode)
            .args(&self.opts.args)
            .stdin(Stdio::null());
        if std::env::var_os("UCX_NET_DEVICES").is_none() {
            cmd.env("UCX_NET_DEVICES", "lo");
        }
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn spawn(&mut self, i: usize) -> std::io::Result<()> {
        let mut cmd = self.command(i);
        let s = &mut self.servers[i];
        let _ = std::fs::remove_file(s.data_dir.join("address"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.path().join(format!("server{i}.log")))?;
        cmd.stdout(log.try_clone()?).stderr(log);
        s.child = Some(cmd.spawn()?);
        Ok(())
    }

    fn wait_ready(&mut self, i: usize) -> std::io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr_file = self.servers[i].data_dir.join("address");
        loop {
            if let Ok(text) = std::fs::read_to_string(&addr_file) {
                if let Ok(e) = cluster_file::parse_line(text.trim()) {
                    self.servers[i].entry = Some(e);
                    return Ok(());
                }
            }
            if let Some(child) = self.servers[i].child.as_mut() {
                if let Ok(Some(st)) = child.try_wait() {
                    let log =
                        std::fs::read_to_string(self.root.path().join(format!("server{i}.log")))
                            .unwrap_or_default();
                    return Err(std::io::Error::other(format!(
                        "server {i} exited ({st}):\n{log}"
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "server {i} did not start in time"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills server `i` with SIGKILL (no clean shutdown).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.servers[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops server `i` with SIGTERM (clean) and waits for it.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut c) = self.servers[i].child.take() {
            // SAFETY: plain kill(2) on our child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts one more server, the next id, with `--join` (the cluster file lists it; it is
    /// no member until `madfs-ctl add`), and waits until it listens. Returns its id.
    pub fn start_joining(&mut self) -> std::io::Result<usize> {
        let i = self.servers.len();
        if (i + 1) * 3 > PORTS_PER_BLOCK as usize {
            return Err(std::io::Error::other(format!(
                "at most {} servers per local cluster",
                PORTS_PER_BLOCK / 3
            )));
        }
        self.servers.push(Server {
            child: None,
            data_dir: self.root.path().join(format!("server{i}")),
            entry: None,
        });
        self.spawn(i)?;
        self.wait_ready(i)?;
        Ok(i)
    }

    /// Number of servers started (those the cluster was made with, and those that joined).
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// Runs `madfs-ctl ARGS --cluster FILE`: whether it succeeded, and its stdout and
    /// stderr.
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        match Command::new(find_bin("madfs-ctl"))
            .args(args)
            .arg("--cluster")
            .arg(self.cluster_file())
            .output()
        {
            Ok(o) => (
                o.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            ),
            Err(e) => (false, e.to_string()),
        }
    }

    /// Restarts server `i` on the same data directory and ports (its block's; nobody else
    /// binds them).
    pub fn restart(&mut self, i: usize) -> std::io::Result<()> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_ready(i)
    }

    /// What `madfs-ctl status` says of every server (its stdout; a line per server, with the
    /// map's epoch and states in a replicated cluster).
    pub fn ctl_status(&self) -> String {
        Command::new(find_bin("madfs-ctl"))
            .args(["status", "--cluster"])
            .arg(self.cluster_file())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Log of server `i`.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.root.path().join(format!("server{i}.log"))).unwrap_or_default()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.kill(i);
        }
        if std::thread::panicking() {
            // a failed test: the end of each server's log, and the whole root kept on demand
            for i in 0..self.servers.len() {
                let log = self.log(i);
                let tail: Vec<&str> = log.lines().rev().take(LOG_TAIL).collect();
                eprintln!("--- end of server {i}'s log");
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
            // `MADFS_KEEP_TEST_ROOT=1`: a failed test's cluster root (data directories, logs)
            // is kept, as /tmp/madfs-kept-<pid>-<port>
            if std::env::var_os("MADFS_KEEP_TEST_ROOT").is_some() {
                // moved out of the temporary directory's way (its removal then finds nothing)
                let kept = std::env::temp_dir().join(format!(
                    "madfs-kept-{}-{}",
                    std::process::id(),
                    self.ports.port(0)
                ));
                match std::fs::rename(self.root.path(), &kept) {
                    Ok(()) => eprintln!("--- kept {}", kept.display()),
                    Err(e) => eprintln!("--- could not keep {}: {e}", self.root.path().display()),
                }
            }
        }
    }
}

/// Lines of each server's log a failed test prints.
const LOG_TAIL: usize = 40;

/// A throw-away `munged` for tests of MUNGE authentication: its own random key, socket and
/// files in a temporary directory; stopped when dropped. Point libmunge at it with
/// `MADFS_MUNGE_SOCKET` = [`Munged::socket`]. It also ends when the process that started it
/// does (a `static` one is never dropped).
pub struct Munged {
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Munged {
    /// Starts one (needs `munged` from the `munge` package).
    pub fn start() -> std::io::Result<Munged> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir()?;
        let mut key = [0u8; 1024];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.path().join("munge.key"))?
            .write_all(&key)?;
        let p = |n: &str| dir.path().join(n);
        // under a shell that ends munged when its stdin (a pipe from this process) closes:
        // at drop, and when this process ends without dropping it (a `static` one, whose
        // directory the shell then removes too)
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"munged "$@" & m=$!; read -r _; kill $m; wait $m; rm -rf -- "$MUNGED_DIR""#)
            .env("MUNGED_DIR", dir.path())
            .arg("sh")
            .arg("--foreground")
            .arg("--force")
            .arg("--num-threads=2")
            .arg(format!("--socket={}", p("munge.sock").display()))
            .arg(format!("--key-file={}", p("munge.key").display()))
            .arg(format!("--pid-file={}", p("munged.pid").display()))
            .arg(format!("--seed-file={}", p("munged.seed").display()))
            .arg(format!("--log-file={}", p("munged.log").display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(p("munged.err"))?)
            .spawn()?;
        let err = p("munged.err");
        let m = Munged {
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !m.socket().exists() {
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "munged did not start: {}",
                    std::fs::read_to_string(&err).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(m)
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("munge.sock")
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // its shell ends munged once its stdin closes
            drop(c.stdin.take());
            let _ = c.wait();
        }
    }
}
