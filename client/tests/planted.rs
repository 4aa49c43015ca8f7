//! Hole 6 of issue 51, outside the server's own data directory: another local user (`nobody`)
//! pre-creates the paths madfs uses and plants links in them — the launchers' default
//! directories and the files a root-run launcher writes, the preload's host FIFO directory,
//! the keys and the cluster file's lock beside a cluster file. Each is refused (or replaced by
//! a file of madfs's own, never written through), and nothing of it changes: planted
//! directories stay empty, link targets keep their bytes or stay missing.
//!
//! The users: root (the test), `nobody` (65534, the other user), and uids of no account that
//! are this test's own (`test_uid`), so that every path named after a uid (`/tmp/madfs-UID`,
//! `/tmp/madfs-fifo-UID`) belongs to this test. Needs root and `setpriv`; the Open MPI test
//! needs `mpirun` (skipped without it); Slurm is played by a stand-in `srun`.

mod common;

use common::procs::{bin_dir, repo, show, text};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

/// What went wrong, all of it (a test reports every finding, not the first).
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    fn check(&mut self, ok: bool, what: impl Into<String>) {
        if !ok {
            self.0.push(what.into());
        }
    }

    fn done(self, what: &str) {
        assert!(
            self.0.is_empty(),
            "{what}: {} finding(s):\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// A uid no account has, this test process's own (`k`: which test).
fn test_uid(k: u32) -> u32 {
    3_100_000 + (std::process::id() % 100_000) * 10 + k
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

macro_rules! need_root {
    () => {
        if !is_root() {
            eprintln!("skipping: needs root (it plays two users)");
            return;
        }
    };
}

/// `prog` run as `uid` (group `uid`, no other groups).
fn as_user(uid: u32, prog: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args(["--clear-groups", "--", prog]);
    c
}

/// Runs a shell command as `nobody` (the planting user); it must succeed.
fn nobody(script: &str) {
    let out = as_user(NOBODY, "sh").args(["-c", script]).output().unwrap();
    assert!(out.status.success(), "nobody: {script}: {}", show(&out));
}

fn script(name: &str) -> String {
    repo().join("scripts").join(name).display().to_string()
}

/// Removes a path (a link itself, not what it points at; a directory with what it holds).
fn remove(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).unwrap(),
        Ok(_) => std::fs::remove_file(p).unwrap(),
        Err(_) => {}
    }
}

/// Paths of this test outside its temporary directories, removed when it ends.
struct Owned(Vec<PathBuf>);

impl Drop for Owned {
    fn drop(&mut self) {
        for p in &self.0 {
            remove(p);
        }
    }
}

/// A directory made by root and given to `nobody` (mode 0755): a job user's directory.
fn nobodys_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(d.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Names in directory `d` (empty if it cannot be read).
fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `(owner, mode & 0o7777)` of `p` itself (not following a link).
fn owner_mode(p: &Path) -> Option<(u32, u32)> {
    let m = std::fs::symlink_metadata(p).ok()?;
    Some((m.uid(), m.mode() & 0o7777))
}

/// `scripts/cluster.sh ARGS` run as `uid` (at most 60 s).
fn cluster_sh(uid: u32, args: &[&str]) -> Output {
    let mut c = as_user(uid, "timeout");
    c.args(["-k", "5", "60", "bash", &script("cluster.sh")])
        .args(args)
        .env("MADFS_BIN_DIR", bin_dir())
        .env("UCX_NET_DEVICES", "lo")
        .stdin(Stdio::null());
    c.output().unwrap()
}

/// `cluster.sh start` of a user with its default root (`/tmp/madfs-UID`) refuses a root that
/// another user made, or a link there (to a directory of the other user's, or to one of its
/// own), or one of its own that others may write to; it writes nothing there. Without
/// anything planted it makes the root itself, 0700, and the cluster works as before.
#[test]
fn cluster_sh_refuses_a_root_it_does_not_own() {
    need_root!();
    let u = test_uid(0);
    let root = PathBuf::from(format!("/tmp/madfs-{u}"));
    let target = PathBuf::from(format!("/tmp/madfs-planted-{}-0", std::process::id()));
    let _owned = Owned(vec![root.clone(), target.clone()]);
    remove(&root);
    remove(&target);
    let mut f = Findings::default();
    let r = root.display().to_string();
    let t = target.display().to_string();
    // (what is planted, as whom, what must stay empty)
    let plants: [(&str, u32, &Path); 4] = [
        ("nobody's own directory (0777)", NOBODY, &root),
        ("a link to nobody's directory", NOBODY, &target),
        ("a link to a directory of the user's own", NOBODY, &target),
        ("the user's own directory, 0777", u, &root),
    ];
    for (k, (what, by, empty)) in plants.into_iter().enumerate() {
        match k {
            0 => nobody(&format!("mkdir -m 0777 {r}")),
            1 => nobody(&format!("mkdir -m 0777 {t} && ln -s {t} {r}")),
            2 => {
                let out = as_user(u, "mkdir")
                    .args(["-m", "0700", &t])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", show(&out));
                nobody(&format!("ln -s {t} {r}"));
            }
            _ => {
                let out = as_user(u, "sh")
                    .args(["-c", &format!("mkdir {r} && chmod 0777 {r}")])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", show(&out));
            }
        }
        let planted = owner_mode(&root);
        let out = cluster_sh(u, &["start", "-n", "1"]);
        let err = text(&out.stderr);
        f.check(
            out.status.code() == Some(1)
                && err.lines().count() == 1
                && err.contains(&r)
                && text(&out.stdout).is_empty(),
            format!(
                "{what} (made by uid {by}): start did not refuse in one line: {}",
                show(&out)
            ),
        );
        let left = names(empty);
        f.check(
            left.is_empty(),
            format!("{what}: written into {}: {left:?}", empty.display()),
        );
        f.check(
            owner_mode(&root) == planted,
            format!(
                "{what}: {r} changed from {planted:?} to {:?}",
                owner_mode(&root)
            ),
        );
        if out.status.success() {
            cluster_sh(u, &["stop"]);
        }
        remove(&root);
        remove(&target);
    }
    // nothing planted: the user's own root, private; a working cluster
    let out = cluster_sh(u, &["start", "-n", "1"]);
    f.check(
        out.status.success() && text(&out.stdout).contains(&format!("MADFS_CLUSTER={r}/cluster")),
        format!("start with nothing planted: {}", show(&out)),
    );
    f.check(
        owner_mode(&root) == Some((u, 0o700)),
        format!("the root made by start: {:?}", owner_mode(&root)),
    );
    let status = cluster_sh(u, &["status"]);
    f.check(
        status.status.success() && text(&status.stdout).contains("server 0 of 1"),
        format!("status: {}", show(&status)),
    );
    let stop = cluster_sh(u, &["stop"]);
    f.check(stop.status.success(), format!("stop: {}", show(&stop)));
    f.done("cluster.sh's default root");
}

/// A file nobody points links at: its bytes must never change.
struct Victim {
    _dir: tempfile::TempDir,
    path: PathBuf,
    missing: PathBuf,
}

const PRECIOUS: &[u8] = b"root's precious bytes\n";

impl Victim {
    /// A root-only directory with a file (`path`) and a name that must stay missing.
    fn new() -> Victim {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("precious");
        std::fs::write(&path, PRECIOUS).unwrap();
        Victim {
            missing: d.path().join("made-through-a-link"),
            path,
            _dir: d,
        }
    }

    fn check(&self, f: &mut Findings, when: &str) {
        let now = std::fs::read(&self.path).unwrap_or_default();
        f.check(
            now == PRECIOUS,
            format!("{when}: written through a link: {:?}", text(&now)),
        );
        f.check(
            !self.missing.exists(),
            format!("{when}: {} made through a link", self.missing.display()),
        );
    }
}

/// A launcher run as root for a job's user, with `--cluster` in that user's directory: the
/// user plants links at the cluster file's name and where the launcher writes its log, pid
/// record and status (and where the servers' step records itself), to root's file or to a
/// name in root's directory. They must be replaced (or removed), never written through,
/// removed through or followed.
fn plant_launcher_links(dir: &Path, v: &Victim, names: &[&str]) {
    let mut s = String::new();
    for (i, n) in ["cluster"].iter().chain(names).enumerate() {
        let to = if i % 2 == 0 { &v.path } else { &v.missing };
        s += &format!("ln -s {} {}/{n} && ", to.display(), dir.display());
    }
    nobody(&format!("{s}true"));
}

/// `mpi-cluster.sh` run as root with its cluster file in nobody's directory (nobody's job):
/// it starts and stops the servers as before, through files of its own; root's file keeps
/// its bytes, nothing is made in root's directory, the servers' log is root's own file.
#[test]
fn a_root_run_mpi_launcher_writes_through_no_link() {
    need_root!();
    if Command::new("mpirun").arg("--version").output().is_err() {
        eprintln!("skipping: mpirun not installed");
        return;
    }
    let job = nobodys_dir();
    let private = tempfile::tempdir().unwrap();
    let v = Victim::new();
    plant_launcher_links(
        job.path(),
        &v,
        &["madfs-servers.log", "cluster.status", "cluster.mpirun"],
    );
    let cluster = job.path().join("cluster").display().to_string();
    let data = private.path().join("data").display().to_string();
    let run = |args: &[&str]| {
        Command::new("timeout")
            .args(["-k", "5", "90", "bash", &script("mpi-cluster.sh")])
            .args(args)
            .env("MADFS_BIN_DIR", bin_dir())
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let mut f = Findings::default();
    let out = run(&[
        "start",
        "-n",
        "1",
        "--local",
        "--cluster",
        &cluster,
        "--data",
        &data,
        "--wait",
        "30",
    ]);
    f.check(
        out.status.success() && text(&out.stderr).contains("pid="),
        format!("start in the job user's directory: {}", show(&out)),
    );
    v.check(&mut f, "start");
    let log = job.path().join("madfs-servers.log");
    f.check(
        std::fs::symlink_metadata(&log).is_ok_and(|m| m.is_file() && m.uid() == 0),
        format!(
            "the servers' log is not root's own file: {:?}",
            owner_mode(&log)
        ),
    );
    let stop = run(&["stop", "--cluster", &cluster]);
    f.check(stop.status.success(), format!("stop: {}", show(&stop)));
    v.check(&mut f, "stop");
    f.done("a root-run mpi-cluster.sh");
}

/// A stand-in for `srun` (one task, step 7): runs the command after its options.
const FAKE_SRUN: &str = r#"#!/bin/bash
while [ $# -gt 0 ] && [ "$1" != bash ]; do shift; done
export SLURM_PROCID=0 SLURM_STEP_ID=7 SLURM_NTASKS=1
exec "$@"
"#;

/// `madfs-slurm.sh` as root for nobody's job (a prolog's environment), through a stand-in
/// `srun`: its default data directory is per user and per job, and one nobody made first is
/// refused with nothing written into it; the links nobody planted in its cluster directory
/// (log, status, the step's record) are replaced, never written through. Without anything
/// planted it makes the data directory itself, 0700; `clean` removes it.
#[test]
fn a_root_run_slurm_launcher_refuses_planted_paths() {
    need_root!();
    let job = nobodys_dir();
    let tools = tempfile::tempdir().unwrap();
    let srun = tools.path().join("srun");
    std::fs::write(&srun, FAKE_SRUN).unwrap();
    std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let jobid = (900_000_000 + std::process::id()).to_string();
    let data = PathBuf::from(format!("/tmp/madfs-data-0-{jobid}"));
    let _owned = Owned(vec![data.clone()]);
    remove(&data);
    let v = Victim::new();
    plant_launcher_links(
        job.path(),
        &v,
        &["madfs-servers.log", "cluster.step", "cluster.status"],
    );
    let cluster = job.path().join("cluster").display().to_string();
    let path = format!(
        "{}:{}",
        tools.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&str]| {
        Command::new("timeout")
            .args(["-k", "5", "60", "bash", &script("madfs-slurm.sh")])
            .args(args)
            .env("MADFS_BIN_DIR", bin_dir())
            .env("PATH", &path)
            .env("SLURM_JOB_ID", &jobid)
            .env("SLURM_JOB_NUM_NODES", "1")
            .env("SLURM_JOB_UID", NOBODY.to_string())
            .env("SLURM_JOB_GID", NOBODY.to_string())
            .env_remove("SLURM_NNODES")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let start = ["start", "--local", "--cluster", &cluster, "--wait", "20"];
    let mut f = Findings::default();

    // the default data directory, made first by nobody
    nobody(&format!("mkdir -m 0777 {}", data.display()));
    let out = run(&start);
    f.check(
        !out.status.success(),
        format!("start with nobody's data directory: {}", show(&out)),
    );
    let left = names(&data);
    f.check(
        left.is_empty(),
        format!("written into nobody's data directory: {left:?}"),
    );
    if out.status.success() {
        run(&["stop", "--cluster", &cluster]);
    }
    v.check(&mut f, "refused start");
    remove(&data);

    // nothing planted there: a directory of root's own, 0700
    let out = run(&start);
    f.check(
        out.status.success() && text(&out.stdout).contains("MADFS_CLUSTER="),
        format!("start: {}", show(&out)),
    );
    f.check(
        owner_mode(&data) == Some((0, 0o700)),
        format!("{}: {:?}", data.display(), owner_mode(&data)),
    );
    v.check(&mut f, "start");
    let stop = run(&["stop", "--cluster", &cluster]);
    f.check(stop.status.success(), format!("stop: {}", show(&stop)));
    let clean = run(&["clean", "--this-node"]);
    f.check(
        clean.status.success() && !data.exists(),
        format!("clean --this-node: {}", show(&clean)),
    );
    v.check(&mut f, "stop");
    f.done("a root-run madfs-slurm.sh");
}

/// A process's FIFO of a madfs FIFO lives in a directory private to its user
/// (`/tmp/madfs-fifo-UID`): one another user made first (open to all, or a link to one of
/// its own) fails the open with EACCES and gets nothing; without one, the preload makes it
/// 0700 and the FIFO 0600.
#[test]
fn host_fifos_live_in_a_private_directory() {
    need_root!();
    let u = test_uid(1);
    let dir = PathBuf::from(format!("/tmp/madfs-fifo-{u}"));
    let target = PathBuf::from(format!("/tmp/madfs-planted-{}-1", std::process::id()));
    let _owned = Owned(vec![dir.clone(), target.clone()]);
    remove(&dir);
    remove(&target);
    let cl = common::cluster(1, &["--insecure"], "none");
    // the test user reads the cluster file (no key: an insecure cluster)
    std::fs::set_permissions(cl.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ = std::fs::create_dir_all("/madfs");
    let fifo = format!("/madfs/planted-fifo-{}", std::process::id());
    let open = |make: bool| {
        let s = format!(
            "{}if exec 3<>{fifo}; then echo opened; else echo refused; fi",
            if make {
                format!("mkfifo {fifo}; ")
            } else {
                String::new()
            }
        );
        let out = as_user(u, "bash")
            .args(["-c", &s])
            .env("LD_PRELOAD", madfs_cluster::find_bin("libmadfs.so"))
            .env("MADFS_CLUSTER", cl.cluster_file())
            .env("MADFS_MOUNT", "/madfs")
            .env("MADFS_TIMEOUT_MS", "20000")
            .env("UCX_NET_DEVICES", "lo")
            .current_dir("/")
            .output()
            .unwrap();
        (text(&out.stdout), show(&out))
    };
    let (d, t) = (dir.display().to_string(), target.display().to_string());
    let mut f = Findings::default();
    for (k, what) in [
        "nobody's own directory (0777)",
        "a link to nobody's directory",
    ]
    .into_iter()
    .enumerate()
    {
        let empty = if k == 0 {
            nobody(&format!("mkdir -m 0777 {d}"));
            &dir
        } else {
            nobody(&format!("mkdir -m 0777 {t} && ln -s {t} {d}"));
            &target
        };
        let (got, all) = open(k == 0);
        f.check(
            got.trim() == "refused" && all.contains("Permission denied"),
            format!("{what}: the FIFO's open: {all}"),
        );
        let left = names(empty);
        f.check(left.is_empty(), format!("{what}: made there: {left:?}"));
        remove(&dir);
        remove(&target);
    }
    let (got, all) = open(false);
    f.check(
        got.trim() == "opened",
        format!("with nothing planted: {all}"),
    );
    f.check(
        owner_mode(&dir) == Some((u, 0o700)),
        format!("{d}: {:?}", owner_mode(&dir)),
    );
    let fifos = names(&dir);
    f.check(fifos.len() == 1, format!("{d} holds {fifos:?}"));
    if let Some(n) = fifos.first() {
        let p = dir.join(n);
        let kind = std::fs::symlink_metadata(&p)
            .ok()
            .map(|m| m.mode() & libc::S_IFMT);
        f.check(
            kind == Some(libc::S_IFIFO) && owner_mode(&p) == Some((u, 0o600)),
            format!("{}: {kind:?} {:?}", p.display(), owner_mode(&p)),
        );
    }
    f.done("host FIFOs");
}

/// A root `madfs-server` of a new one-server cluster whose file is `cluster`, running until
/// it registers or exits (at most 20 s); killed when dropped.
struct Server {
    child: Child,
    log: PathBuf,
    _data: tempfile::TempDir,
}

impl Server {
    fn start(cluster: &Path) -> Server {
        let data = tempfile::tempdir().unwrap();
        let log = data.path().join("server.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(madfs_cluster::find_bin("madfs-server"))
            .args(["--id", "0", "--servers", "1", "--listen", "127.0.0.1:0"])
            .args(["--control", "127.0.0.1:0", "--tcp", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data.path().join("d"))
            .arg("--cluster-file")
            .arg(cluster)
            .env("UCX_NET_DEVICES", "lo")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut s = Server {
            child,
            log,
            _data: data,
        };
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end && s.running() && !s.registered(cluster) {
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn registered(&self, cluster: &Path) -> bool {
        std::fs::read_to_string(cluster)
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("0 "))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Beside a cluster file in a directory of nobody's (a job's directory, servers run by
/// root): a peer key nobody made (with whose key nobody would log in as a server and stop
/// root's servers), a link where the cluster file's lock goes, a cluster file nobody wrote
/// (naming nobody the owner of root's cluster). The server refuses each and starts nothing;
/// nothing is made through the link, no key is given to nobody.
#[test]
fn a_server_refuses_keys_and_cluster_files_another_user_planted() {
    need_root!();
    let mut f = Findings::default();
    let v = Victim::new();

    // nobody's peer key
    let job = nobodys_dir();
    let cluster = job.path().join("cluster");
    let key: String = (0..32).map(|i| format!("{:02x}", i * 7 + 1)).collect();
    let key_file = madfs_auth::peer_key_path(&cluster);
    nobody(&format!("umask 077; echo {key} > {}", key_file.display()));
    let mut s = Server::start(&cluster);
    if s.running() {
        let stop = as_user(
            NOBODY,
            madfs_cluster::find_bin("madfs-ctl").to_str().unwrap(),
        )
        .arg("stop")
        .arg("--cluster")
        .arg(&cluster)
        .output()
        .unwrap();
        f.check(
            false,
            format!(
                "the server took nobody's peer key (nobody's `madfs-ctl stop`: {})",
                if stop.status.success() {
                    "it stopped root's server"
                } else {
                    "refused"
                }
            ),
        );
    } else {
        let log = s.log();
        f.check(
            log.contains(&key_file.display().to_string()) && log.contains("65534"),
            format!("refused, but not saying why: {log}"),
        );
    }
    f.check(
        std::fs::read_to_string(&key_file)
            .unwrap_or_default()
            .trim()
            == key,
        "nobody's key file changed",
    );
    drop(s);

    // a link where the lock goes
    let job = nobodys_dir();
    let cluster = job.path().join("cluster");
    nobody(&format!(
        "ln -s {} {}.lock",
        v.missing.display(),
        cluster.display()
    ));
    let mut s = Server::start(&cluster);
    f.check(
        !s.running() && !s.registered(&cluster),
        format!("a server started with a link at its lock: {}", s.log()),
    );
    v.check(&mut f, "the cluster file's lock");
    drop(s);

    // a cluster file nobody wrote, whose identity makes nobody the key's owner
    let job = nobodys_dir();
    let cluster = job.path().join("cluster");
    let id = madfs_rpc::ClusterIdentity::new(1, 65536, 65536)
        .unwrap()
        .to_line();
    let id = id.replace(
        "auth = \"insecure\"",
        "auth = \"key\", owner = \"65534:65534\"",
    );
    assert!(id.contains("owner"), "{id}");
    std::fs::write(job.path().join("planted"), format!("{id}\n")).unwrap();
    nobody(&format!(
        "cp {0}/planted {1} && chmod 644 {1}",
        job.path().display(),
        cluster.display()
    ));
    let mut s = Server::start(&cluster);
    f.check(
        !s.running() && !s.registered(&cluster),
        format!("a server started with nobody's cluster file: {}", s.log()),
    );
    drop(s);
    let k = madfs_auth::key_path(&cluster);
    f.check(
        owner_mode(&k).is_none_or(|(uid, _)| uid != NOBODY),
        format!(
            "root's cluster key was given to nobody: {:?}",
            owner_mode(&k)
        ),
    );
    f.done("planted keys and cluster files");
}
