//! Local madfs clusters for tests and benchmarks: starts `madfs-server` processes on
//! 127.0.0.1 with data under a temporary root, kills and restarts them.

use madfs_rpc::cluster_file::{self, ServerEntry};
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

/// A running local cluster; every server is killed when it is dropped.
pub struct LocalCluster {
    root: tempfile::TempDir,
    bin: PathBuf,
    opts: Options,
    servers: Vec<Server>,
}

impl LocalCluster {
    /// Starts `opts.servers` servers and waits until all listen.
    pub fn start(opts: Options) -> std::io::Result<LocalCluster> {
        let root = tempfile::Builder::new().prefix("madfs-test-").tempdir()?;
        let mut c = LocalCluster {
            root,
            bin: find_bin("madfs-server"),
            opts,
            servers: vec![],
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
            c.spawn(i, None)?;
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

    fn spawn(&mut self, i: usize, same_addr: Option<ServerEntry>) -> std::io::Result<()> {
        let s = &mut self.servers[i];
        let _ = std::fs::remove_file(s.data_dir.join("address"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.path().join(format!("server{i}.log")))?;
        let (listen, control) = match same_addr {
            Some(e) => (e.ucx.to_string(), e.control.to_string()),
            None => ("127.0.0.1:0".into(), "127.0.0.1:0".into()),
        };
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--id")
            .arg(i.to_string())
            .arg("--listen")
            .arg(listen)
            .arg("--control")
            .arg(control)
            .arg("--data-dir")
            .arg(&s.data_dir)
            .arg("--cluster-file")
            .arg(self.root.path().join("cluster"))
            .arg("--ucx-err-mode")
            .arg(&self.opts.err_mode)
            .args(&self.opts.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if std::env::var_os("UCX_NET_DEVICES").is_none() {
            cmd.env("UCX_NET_DEVICES", "lo");
        }
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)));
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

    /// Restarts server `i` on the same data directory and addresses.
    pub fn restart(&mut self, i: usize) -> std::io::Result<()> {
        self.kill(i);
        let e = self.servers[i].entry;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.spawn(i, e)?;
            match self.wait_ready(i) {
                Ok(()) => return Ok(()),
                // the port may still be held for a moment after the kill
                Err(err) if Instant::now() < deadline => {
                    let _ = err;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(err) => return Err(err),
            }
        }
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
    }
}
