//! `scripts/madfs-slurm.sh` under a real Slurm of one node: the test writes a slurm.conf of its
//! own (node and controller on 127.0.0.1, `proctrack/linuxproc`, no cgroups, MUNGE through a
//! throw-away munged with its own key and socket), starts slurmctld and slurmd, and submits
//! jobs. A batch job (`sbatch --wait`) starts 3 servers with `madfs-slurm.sh start -n 3
//! --local`, writes a file with the `madfs` CLI and reads it back in a job step of its own
//! beside the servers' step, byte-exact; `madfs-ctl status` lists the 3 servers; `stop` ends
//! them and their step; `clean` removes the data. An allocation (`salloc`) whose third server
//! never comes up: `start` gives up after `--wait`, stops the two that did, cancels the step,
//! exits 1. Both check that nothing they started is left running. Needs root and Slurm
//! (slurmctld, slurmd, sbatch, salloc, srun, munged: Debian's `slurm-wlm`, `munge`); skips
//! with a printed reason otherwise. The daemons, and every process whose command line or
//! environment names the test's directory (everything its jobs started), are ended when a
//! test ends, passed or failed (`Slurm`'s Drop).

mod common;

use common::data;
use common::procs::{alive, bin_dir, repo, show, text, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One test at a time: both use the same ports.
static SERIAL: Mutex<()> = Mutex::new(());

/// slurmctld's and slurmd's ports (taken only for a test's Slurm).
const CTLD_PORT: u16 = 46817;
const SLURMD_PORT: u16 = 46818;
/// The one node's name in slurm.conf (`slurmd -N`).
const NODE: &str = "madfstest";

fn script() -> String {
    repo().join("scripts/madfs-slurm.sh").display().to_string()
}

/// Why this machine cannot run these tests, if it cannot.
fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (slurmd runs jobs as their users)".into());
    }
    for (prog, arg) in [
        ("slurmctld", "-V"),
        ("slurmd", "-V"),
        ("sbatch", "--version"),
        ("salloc", "--version"),
        ("srun", "--version"),
        ("sinfo", "--version"),
        ("squeue", "--version"),
        ("scancel", "--version"),
        ("munged", "--version"),
        ("timeout", "--version"),
    ] {
        if Command::new(prog).arg(arg).output().is_err() {
            return Some(format!(
                "{prog} not found (Debian: apt install slurm-wlm munge)"
            ));
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

/// `port` if nothing listens on it, else one the system picks.
fn port_or_free(port: u16) -> u16 {
    if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
        return port;
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("local addr").port()
}

/// The parent of a process (0 if it is gone).
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // "PID (COMM) STATE PPID ...": COMM may hold spaces, so start after its ')'
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// Processes (pid, command line) other than `except` and the children of `parents` whose
/// command line or environment contains `needle`: what the jobs of a test started (they
/// inherit `SLURM_CONF`, which names the test's directory).
fn processes_naming(needle: &str, except: &[u32], parents: &[u32]) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut out = vec![];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || except.contains(&pid) || parents.contains(&parent(pid)) {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let has = |b: &[u8]| b.windows(needle.len()).any(|w| w == needle.as_bytes());
        if has(&cmdline) || has(&environ) {
            let cmd = text(&cmdline).replace('\0', " ");
            // a zombie (an empty command line) has ended; its parent reaps it
            if !cmd.trim().is_empty() {
                out.push((pid, cmd));
            }
        }
    }
    out
}

/// A Slurm of one node (this machine, as `NODE` at 127.0.0.1) and its munged, all in one
/// temporary directory. Dropping it cancels its jobs, ends whatever they left running, and
/// stops the daemons.
struct Slurm {
    dir: tempfile::TempDir,
    conf: PathBuf,
    munged: Option<madfs_cluster::Munged>,
    daemons: Vec<(&'static str, Child)>,
}

impl Slurm {
    fn up() -> Slurm {
        let dir = tempfile::Builder::new()
            .prefix("madfs-slurm-")
            .tempdir()
            .expect("tempdir");
        let munged = madfs_cluster::Munged::start().expect("start munged");
        let d = dir.path();
        for sub in ["state", "spool", "work"] {
            std::fs::create_dir_all(d.join(sub)).expect("mkdir");
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let host = text(
            &Command::new("hostname")
                .arg("-s")
                .output()
                .expect("hostname -s")
                .stdout,
        )
        .trim()
        .to_owned();
        let (ctld_port, slurmd_port) = (port_or_free(CTLD_PORT), port_or_free(SLURMD_PORT));
        let p = |n: &str| d.join(n).display().to_string();
        let conf = d.join("slurm.conf");
        let body = format!(
            "ClusterName=madfstest\n\
             SlurmctldHost=localhost(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={sock}\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctld_pid}\n\
             SlurmdPidFile={slurmd_pid}\n\
             SlurmctldLogFile={ctld_log}\n\
             SlurmdLogFile={slurmd_log}\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             MpiDefault=none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SchedulerType=sched/builtin\n\
             ReturnToService=2\n\
             KillWait=5\n\
             NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=madfstest Nodes={NODE} Default=YES MaxTime=INFINITE State=UP\n",
            sock = munged.socket().display(),
            state = p("state"),
            spool = p("spool"),
            ctld_pid = p("slurmctld.pid"),
            slurmd_pid = p("slurmd.pid"),
            ctld_log = p("slurmctld.log"),
            slurmd_log = p("slurmd.log"),
        );
        std::fs::write(&conf, body).expect("write slurm.conf");
        let mut s = Slurm {
            conf,
            munged: Some(munged),
            daemons: vec![],
            dir,
        };
        let conf_s = s.conf.display().to_string();
        for (name, args) in [
            ("slurmctld", vec!["-D", "-f", &conf_s]),
            ("slurmd", vec!["-D", "-f", &conf_s, "-N", NODE]),
        ] {
            let err = std::fs::File::create(s.dir.path().join(format!("{name}.err")))
                .expect("daemon stderr");
            let child = Command::new(name)
                .args(&args)
                .env("SLURM_CONF", &s.conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("start {name}: {e}"));
            s.daemons.push((name, child));
        }
        let t = Instant::now();
        let idle = wait_until(Duration::from_secs(30), || {
            let o = s.cmd("sinfo").args(["-h", "-n", NODE, "-o", "%t"]).output();
            o.is_ok_and(|o| text(&o.stdout).trim() == "idle")
        });
        assert!(idle, "node {NODE} not idle after 30 s:\n{}", s.logs());
        eprintln!("slurm up in {:?}", t.elapsed());
        s
    }

    /// A Slurm command (client) of this Slurm.
    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The end of the daemons' logs.
    fn logs(&self) -> String {
        let mut out = String::new();
        for f in ["slurmctld.log", "slurmd.log", "slurmctld.err", "slurmd.err"] {
            let body = std::fs::read_to_string(self.path(f)).unwrap_or_default();
            let lines: Vec<&str> = body.lines().collect();
            out += &format!("--- {f}\n");
            for l in &lines[lines.len().saturating_sub(20)..] {
                out += l;
                out += "\n";
            }
        }
        out
    }

    /// The daemons' pids.
    fn daemon_pids(&self) -> Vec<u32> {
        self.daemons.iter().map(|(_, c)| c.id()).collect()
    }

    /// What the jobs left running: processes that name this Slurm's directory, other than
    /// the daemons and slurmctld's children (slurmscriptd); slurmd's children are the jobs'
    /// slurmstepd, and count.
    fn leftovers(&self) -> Vec<(u32, String)> {
        let ctld: Vec<u32> = self
            .daemons
            .iter()
            .filter(|(name, _)| *name == "slurmctld")
            .map(|(_, c)| c.id())
            .collect();
        processes_naming(
            &self.dir.path().display().to_string(),
            &self.daemon_pids(),
            &ctld,
        )
    }

    /// Environment of a job: the binaries, loopback UCX.
    fn job_env(&self, c: &mut Command) {
        c.env("MADFS_BIN_DIR", bin_dir())
            .env("MADFS_CLI", env!("CARGO_BIN_EXE_madfs"))
            .env("MADFS_SLURM", script())
            .env("UCX_NET_DEVICES", "lo")
            .env("MADFS_LOG", "info");
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        let _ = self
            .cmd("scancel")
            .args(["--quiet", "--partition", "madfstest"])
            .output();
        // the jobs' steps end once cancelled; anything still naming the directory is ended
        if !wait_until(Duration::from_secs(15), || self.leftovers().is_empty()) {
            for (pid, cmd) in self.leftovers() {
                eprintln!("teardown: killing {pid} ({cmd})");
                // SAFETY: kill has no memory-safety preconditions; the pid names a process
                // that carries this test's directory.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        for (name, child) in &mut self.daemons {
            // SAFETY: as above; the pid is our own child, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let t = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if t.elapsed() > Duration::from_secs(10) {
                    eprintln!("teardown: {name} did not end on SIGTERM; SIGKILL");
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // slurmstepd of a cancelled job may outlive slurmd briefly
        wait_until(Duration::from_secs(10), || self.leftovers().is_empty());
        for (pid, cmd) in self.leftovers() {
            eprintln!("teardown: killing {pid} ({cmd})");
            // SAFETY: as above.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        self.munged.take();
    }
}

/// The pids of `madfs-ctl status` lines (`... pid=N ...`).
fn status_pids(s: &str) -> Vec<u32> {
    s.split_whitespace()
        .filter_map(|w| w.strip_prefix("pid="))
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Servers registered in a cluster file (lines "ID UCX_ADDR CONTROL_ADDR ...").
fn registered(cluster: &Path) -> usize {
    std::fs::read_to_string(cluster)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 3 && w[0].parse::<u32>().is_ok()
        })
        .count()
}

/// The batch job: start 3 servers, use them (one client step beside the servers' step),
/// stop them, remove their data. `$W` is its working directory.
const JOB: &str = r#"#!/bin/bash
set -euo pipefail
W="$1"
t0=$SECONDS
eval "$("$MADFS_SLURM" start -n 3 --local --cluster "$W/cluster" --data "$W/data" --wait 60 \
  -- --chunk-size 65536)"
echo "started in $((SECONDS - t0)) s"
cp "$W/cluster.srun" "$W/srun.rec"
"$MADFS_BIN_DIR/madfs-ctl" status --cluster "$MADFS_CLUSTER" >"$W/status.txt"
"$MADFS_CLI" mkdir /slurm
"$MADFS_CLI" put "$W/in.bin" /slurm/in.bin --sync
# a step of the job's own, beside the servers' step (which overlaps every other step)
srun -n 1 "$MADFS_CLI" get /slurm/in.bin "$W/out.bin"
squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' >"$W/steps.txt"
"$MADFS_SLURM" status --cluster "$MADFS_CLUSTER" >/dev/null
"$MADFS_SLURM" stop --cluster "$MADFS_CLUSTER"
squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' >"$W/steps-after.txt"
"$MADFS_SLURM" clean --cluster "$MADFS_CLUSTER" --data "$W/data"
echo "done in $((SECONDS - t0)) s"
"#;

#[test]
fn batch_job_starts_uses_and_stops_servers() {
    skip_unless_possible!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = Slurm::up();
    let w = slurm.path("work");
    let bytes = data((1 << 20) + 4321, 11); // 17 chunks of 64 KiB over 3 servers
    std::fs::write(w.join("in.bin"), &bytes).unwrap();
    let job = w.join("job.sh");
    std::fs::write(&job, JOB).unwrap();
    let out_file = w.join("job.out");

    let t = Instant::now();
    let mut c = slurm.cmd("timeout");
    c.args(["-k", "5", "120", "sbatch", "--wait", "-N", "1", "-n", "3"])
        // more tasks than CPUs where the machine has fewer than 3 (SLURM_OVERCOMMIT reaches
        // the job's steps)
        .arg("--overcommit")
        .arg(format!("--output={}", out_file.display()))
        .arg(&job)
        .arg(&w);
    slurm.job_env(&mut c);
    let out = c.output().expect("run sbatch");
    let took = t.elapsed();
    let job_out = std::fs::read_to_string(&out_file).unwrap_or_default();
    let log = std::fs::read_to_string(w.join("madfs-servers.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "job failed: {}\n--- job output\n{job_out}\n--- servers' log\n{log}",
        show(&out)
    );
    eprintln!("batch job done in {took:?}:\n{job_out}");

    // the file came back byte-exact through the client step
    assert!(
        std::fs::read(w.join("out.bin")).unwrap() == bytes,
        "read back"
    );
    // 3 servers, one per task of the servers' step, ids 0..2
    let status = std::fs::read_to_string(w.join("status.txt")).unwrap();
    for k in 0..3 {
        assert!(
            status.contains(&format!("server {k} of 3 ")),
            "status:\n{status}"
        );
    }
    let pids = status_pids(&status);
    assert_eq!(pids.len(), 3, "status:\n{status}");
    // the servers ran as a step named madfs-server; after stop only the batch step is left
    let steps = std::fs::read_to_string(w.join("steps.txt")).unwrap();
    assert!(steps.contains("madfs-server"), "steps:\n{steps}");
    let after = std::fs::read_to_string(w.join("steps-after.txt")).unwrap();
    assert!(
        !after.contains("madfs-server"),
        "steps after stop:\n{after}"
    );
    // start recorded "PID STARTTIME STEP"; that srun and the servers have ended
    let rec = std::fs::read_to_string(w.join("srun.rec")).unwrap();
    let f: Vec<&str> = rec.split_whitespace().collect();
    assert_eq!(f.len(), 3, "srun record {rec:?}");
    let srun: u32 = f[0].parse().expect("srun pid");
    assert!(f[2].contains('.'), "step {:?}", f[2]);
    assert!(
        wait_until(Duration::from_secs(10), || !pids.iter().any(|p| alive(*p))),
        "servers {pids:?} still running after stop"
    );
    assert!(
        wait_until(Duration::from_secs(10), || {
            !alive(srun)
                || !text(&std::fs::read(format!("/proc/{srun}/cmdline")).unwrap_or_default())
                    .contains("srun")
        }),
        "srun {srun} still running after stop"
    );
    // stop removed the record, clean the data
    assert!(!w.join("cluster.srun").exists());
    assert!(!w.join("data").exists(), "clean left {}", w.display());
    assert!(
        wait_until(Duration::from_secs(15), || slurm.leftovers().is_empty()),
        "left running: {:?}",
        slurm.leftovers()
    );
    assert!(took < Duration::from_secs(60), "job took {took:?}");
}

/// Two servers come up, the third never does (its address lookup hangs): start gives up after
/// --wait, stops the two through their control ports, cancels the step, and exits 1; nothing
/// of it is left running.
#[test]
fn failed_start_leaves_nothing_running() {
    skip_unless_possible!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = Slurm::up();
    let w = slurm.path("work");
    let cluster = w.join("cluster");
    let ipcmd = r#"if [ "$SLURM_PROCID" = 2 ]; then sleep 600; fi; echo 127.0.0.1"#;
    let t = Instant::now();
    let mut c = slurm.cmd("timeout");
    c.args([
        "-k",
        "5",
        "120",
        "salloc",
        "-N",
        "1",
        "-n",
        "3",
        "--overcommit",
        "bash",
    ])
    .arg(script())
    .args(["start", "-n", "3", "--wait", "5", "--ip-of-host", ipcmd])
    .arg("--cluster")
    .arg(&cluster)
    .arg("--data")
    .arg(w.join("data"));
    slurm.job_env(&mut c);
    let out = c.output().expect("run salloc");
    let took = t.elapsed();
    assert!(!out.status.success(), "start succeeded: {}", show(&out));
    assert!(
        text(&out.stderr).contains("did not come up"),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stderr).contains("cancelling step"),
        "{}",
        show(&out)
    );
    // the two that started had registered; they are gone now, and so is everything else
    assert_eq!(registered(&cluster), 2, "{}", show(&out));
    assert!(!w.join("cluster.srun").exists(), "record left behind");
    assert!(
        wait_until(Duration::from_secs(15), || slurm.leftovers().is_empty()),
        "left running: {:?}\n{}",
        slurm.leftovers(),
        show(&out)
    );
    assert!(took < Duration::from_secs(40), "start took {took:?}");
    eprintln!("failed start cleaned up in {took:?}");
}
