//! A running `madfs-fuse` mount of a [`LocalCluster`] (tests, bench): unmounted and its
//! process reaped when dropped.

use crate::{find_bin, LocalCluster};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Is `dir` a FUSE file system now?
pub fn is_fuse(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data; `c` is a NUL-terminated path.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type == 0x6573_5546
    }
}

/// `program`, run as user and group `u` with no other groups (`setpriv`).
pub fn as_user(u: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={u}"),
        &format!("--regid={u}"),
        "--clear-groups",
    ])
    .arg(program);
    c
}

/// `madfs-fuse`, run as `user` where one is given.
pub fn madfs_fuse(user: Option<u32>) -> Command {
    match user {
        Some(u) => as_user(u, find_bin("madfs-fuse")),
        None => Command::new(find_bin("madfs-fuse")),
    }
}

/// A running `madfs-fuse`; unmounted (and its process reaped) when dropped.
pub struct Mount {
    pub dir: PathBuf,
    pub child: Option<Child>,
    /// Run as this user (`setpriv`), if not root.
    pub user: Option<u32>,
}

impl Mount {
    /// Mounts the cluster at `name` under its root directory, with `args` and `env`, as
    /// `user` (root if `None`), with call deadline `timeout_ms`. Panics if no mount comes
    /// within 20 s.
    pub fn start(
        cl: &LocalCluster,
        name: &str,
        args: &[&str],
        user: Option<u32>,
        env: &[(&str, &str)],
        timeout_ms: u32,
    ) -> Mount {
        let dir = cl.root().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(u) = user {
            std::os::unix::fs::chown(&dir, Some(u), Some(u)).unwrap();
        }
        let mut cmd = madfs_fuse(user);
        let child = cmd
            .args(args)
            .arg(&dir)
            .env("MADFS_CLUSTER", cl.cluster_file())
            .env("MADFS_TIMEOUT_MS", timeout_ms.to_string())
            .env("UCX_NET_DEVICES", "lo")
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn madfs-fuse");
        let mut m = Mount {
            dir,
            child: Some(child),
            user,
        };
        let t0 = Instant::now();
        while !is_fuse(&m.dir) {
            if let Ok(Some(s)) = m.child.as_mut().unwrap().try_wait() {
                let out = m.child.take().unwrap().wait_with_output().unwrap();
                panic!(
                    "madfs-fuse ended ({s}): {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "no mount after 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn path(&self) -> String {
        self.dir.display().to_string()
    }

    /// Waits for the process to end (at most 10 s); its exit status.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("running");
        let t0 = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                self.child = None;
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "madfs-fuse still runs"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn unmount(&mut self) -> Output {
        madfs_fuse(self.user)
            .arg("--unmount")
            .arg(&self.dir)
            .output()
            .unwrap()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.is_none() {
            return;
        }
        if is_fuse(&self.dir) {
            let _ = self.unmount();
        }
        if let Some(mut c) = self.child.take() {
            let t0 = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if is_fuse(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}
