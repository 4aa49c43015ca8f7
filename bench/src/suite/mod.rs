//! `madfs-bench io500`: the IO500 phases on any directory, or on madfs and a local directory in
//! one run (`--compare`).
//!
//! Ranks are processes: spawned by this command (`--ranks P`), or started by `mpirun` (each
//! rank runs this same command; it sees `OMPI_COMM_WORLD_RANK`/`PMI_RANK`). Ranks meet at
//! barriers made of files in the directory under test (`<dir>/io500-<run>/.sync`), so the same
//! code runs on one host or many, with no MPI library linked. Rank 0 prints the results.
//!
//! Every phase goes through [`fsops::Target`]: POSIX calls on a path (so
//! `LD_PRELOAD=libmadfs.so madfs-bench io500 --dir /madfs/x` and `madfs-bench io500 --dir
//! /tmp/x` run the very same code), or the client library (`--lib`).

mod chart;
mod fsops;
mod leases;
pub(crate) mod membership;
mod phases;
mod report;

use anyhow::{bail, Context, Result};
use fsops::{Lib, Posix};
use madfs_client::{Client, ClientConfig};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::Command;

/// Phases in the order IO500 runs them, with what each reports.
pub const PHASES: &[(&str, Unit)] = &[
    ("ior-easy-write", Unit::GiBs),
    ("mdtest-easy-write", Unit::KIops),
    ("ior-hard-write", Unit::GiBs),
    ("mdtest-hard-write", Unit::KIops),
    ("find", Unit::KIops),
    ("ior-easy-read", Unit::GiBs),
    ("mdtest-easy-stat", Unit::KIops),
    ("ior-hard-read", Unit::GiBs),
    ("mdtest-hard-stat", Unit::KIops),
    ("mdtest-easy-delete", Unit::KIops),
    ("mdtest-hard-read", Unit::KIops),
    ("mdtest-hard-delete", Unit::KIops),
    ("ior-rand-4k-write", Unit::GiBs),
    ("ior-rand-4k-read", Unit::GiBs),
    ("rpc", Unit::KIops),
];

/// Phases in the bandwidth half of the score.
pub const BW_PHASES: &[&str] = &[
    "ior-easy-write",
    "ior-easy-read",
    "ior-hard-write",
    "ior-hard-read",
];
/// Phases in the metadata half of the score.
pub const MD_PHASES: &[&str] = &[
    "mdtest-easy-write",
    "mdtest-easy-stat",
    "mdtest-easy-delete",
    "mdtest-hard-write",
    "mdtest-hard-stat",
    "mdtest-hard-read",
    "mdtest-hard-delete",
    "find",
];

/// A phase that needs another one run before it.
const NEEDS: &[(&str, &str)] = &[
    ("ior-easy-read", "ior-easy-write"),
    ("ior-hard-read", "ior-hard-write"),
    ("mdtest-easy-stat", "mdtest-easy-write"),
    ("mdtest-easy-delete", "mdtest-easy-write"),
    ("mdtest-hard-stat", "mdtest-hard-write"),
    ("mdtest-hard-read", "mdtest-hard-write"),
    ("mdtest-hard-delete", "mdtest-hard-write"),
    ("ior-rand-4k-read", "ior-rand-4k-write"),
];

/// How a phase's figure is expressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    /// GiB/s of data moved.
    GiBs,
    /// Thousands of operations per second.
    KIops,
}

impl Unit {
    fn label(self) -> &'static str {
        match self {
            Unit::GiBs => "GiB/s",
            Unit::KIops => "kIOPS",
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_lowercase() {
                'k' => 1 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1 << 40,
                _ => return Err(format!("bad size suffix in {s:?} (k, m, g or t)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} too large"))
}

/// `madfs-bench io500` options.
#[derive(clap::Args, Debug, Clone)]
pub struct Io500Args {
    /// Directory under test, through POSIX calls (a path below the mount when run under
    /// LD_PRELOAD=libmadfs.so). With --lib: a madfs path such as /bench.
    #[arg(long)]
    dir: Option<String>,
    /// Use the madfs client library directly instead of POSIX calls.
    #[arg(long)]
    lib: bool,
    /// Run on madfs (through libmadfs.so, or the library with --lib) and on a local directory
    /// in one invocation; print both and their ratios. Starts a local 2-server cluster when no
    /// cluster file is given.
    #[arg(long)]
    compare: bool,
    /// Local directory for --compare.
    #[arg(long, default_value = "/tmp/madfs-bench-local")]
    local_dir: String,
    /// Ranks (worker processes) to spawn; ignored under mpirun, where every rank runs this.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// Seconds each write phase runs (IO500's stonewall); reads replay what was written.
    #[arg(long, default_value_t = 30.0)]
    stonewall: f64,
    /// Comma-separated phases to run (default: all). Reads need their write phase.
    #[arg(long, value_delimiter = ',')]
    phases: Vec<String>,
    /// ior-easy transfer size (k, m, g suffixes).
    #[arg(long, default_value = "2m", value_parser = parse_size)]
    easy_xfer: u64,
    /// ior-easy: at most this much per rank.
    #[arg(long, default_value = "4g", value_parser = parse_size)]
    easy_max: u64,
    /// ior-hard: at most this many 47,008-byte records per rank.
    #[arg(long, default_value_t = 200_000)]
    hard_max: u64,
    /// mdtest-easy: at most this many empty files per rank.
    #[arg(long, default_value_t = 1_000_000)]
    mdeasy_max: u64,
    /// mdtest-hard: at most this many 3,901-byte files per rank.
    #[arg(long, default_value_t = 1_000_000)]
    mdhard_max: u64,
    /// ior-rand-4k: size of each rank's file.
    #[arg(long, default_value = "256m", value_parser = parse_size)]
    rand_size: u64,
    /// rpc: round trips per rank (madfs targets only).
    #[arg(long, default_value_t = 20_000)]
    rpc_iters: u64,
    /// find: `madfs` (server-side, as madfs-find does) or `walk` (every rank lists the tree
    /// and stats its share of the candidates, like pfind). Default: madfs on madfs, walk on a
    /// local directory.
    #[arg(long)]
    find: Option<String>,
    /// Cluster file (default: $MADFS_CLUSTER).
    #[arg(long, env = "MADFS_CLUSTER")]
    cluster: Option<PathBuf>,
    /// libmadfs.so for the madfs ranks of --compare (default: next to this program).
    #[arg(long)]
    preload: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the results as a PNG chart here.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Keep the files written (default: everything is removed at the end).
    #[arg(long)]
    keep: bool,
    /// An argument for the servers of the local cluster --compare starts (repeat it:
    /// `--server-arg=--checksums --server-arg=none`).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Servers of the local cluster --compare starts.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    servers: u32,
    /// Membership changes while the madfs ranks run (the local cluster of --compare): servers
    /// join one at a time (`madfs-ctl add`) until there are this many.
    #[arg(long)]
    grow_to: Option<u32>,
    /// After the joins, drain this server (`madfs-ctl drain`).
    #[arg(long)]
    drain: Option<u32>,
    /// Seconds after the madfs ranks start before the first membership change.
    #[arg(long, default_value_t = 10.0)]
    change_after: f64,
}

/// Sizes and limits, the same for every rank (printed with the results).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    /// Ranks.
    pub ranks: usize,
    /// Stonewall seconds.
    pub stonewall: f64,
    /// Phases run, in order.
    pub phases: Vec<String>,
    /// ior-easy transfer bytes.
    pub easy_xfer: u64,
    /// ior-easy max bytes per rank.
    pub easy_max: u64,
    /// ior-hard record bytes.
    pub hard_record: u64,
    /// ior-hard max records per rank.
    pub hard_max: u64,
    /// mdtest-easy max files per rank.
    pub mdeasy_max: u64,
    /// mdtest-hard file bytes.
    pub mdhard_bytes: u64,
    /// mdtest-hard max files per rank.
    pub mdhard_max: u64,
    /// ior-rand-4k file bytes per rank.
    pub rand_size: u64,
    /// rpc round trips per rank.
    pub rpc_iters: u64,
    /// Keep the files.
    pub keep: bool,
}

/// One file system to run the phases on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetSpec {
    /// `madfs` or `local` (what the table calls it).
    pub label: String,
    /// Base directory (a run directory is made inside).
    pub dir: String,
    /// `posix`, `posix+libmadfs.so` or `client library`.
    pub access: String,
    /// Through the client library.
    pub lib: bool,
    /// madfs cluster file, when the target is madfs.
    pub cluster: Option<PathBuf>,
    /// The mount prefix, for a POSIX path on madfs.
    pub mount: Option<String>,
    /// `madfs` or `walk`.
    pub find: String,
}

/// What a spawned rank is told (JSON in `MADFS_BENCH_JOB`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Job {
    params: Params,
    target: TargetSpec,
    run: String,
    result_file: Option<PathBuf>,
}

/// One phase's figure for one target.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseResult {
    /// Phase name.
    pub name: String,
    /// The figure, in `unit`.
    pub value: f64,
    /// Unit.
    pub unit: Unit,
    /// Operations, all ranks.
    pub ops: u64,
    /// Bytes, all ranks.
    pub bytes: u64,
    /// Seconds (slowest rank).
    pub secs: f64,
    /// Anything else worth saying (find matches, rpc latency).
    pub note: String,
}

/// All phases of one target, with the score.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetResult {
    /// The target.
    pub target: TargetSpec,
    /// Ranks.
    pub ranks: usize,
    /// Per phase.
    pub phases: Vec<PhaseResult>,
    /// Geometric mean of the ior phases, GiB/s (when all four ran).
    pub bw: Option<f64>,
    /// Geometric mean of the mdtest phases and find, kIOPS (when all ran).
    pub md: Option<f64>,
    /// √(bw·md).
    pub score: Option<f64>,
}

fn mount() -> String {
    std::env::var("MADFS_MOUNT").unwrap_or_else(|_| "/madfs".into())
}

/// The rank and size given by our own spawner (`MADFS_BENCH_RANK`, `MADFS_BENCH_SIZE`, set
/// for the ranks madfs-bench starts itself) or by an MPI launcher.
fn rank_env() -> Option<(usize, usize)> {
    let get = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    for (r, s) in [
        ("MADFS_BENCH_RANK", "MADFS_BENCH_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
    ] {
        if let (Some(r), Some(s)) = (get(r), get(s)) {
            if r < s {
                return Some((r, s));
            }
        }
    }
    None
}

fn params(a: &Io500Args, ranks: usize) -> Result<Params> {
    let mut phases: Vec<String> = if a.phases.is_empty() {
        PHASES.iter().map(|p| p.0.to_string()).collect()
    } else {
        for p in &a.phases {
            if !PHASES.iter().any(|q| q.0 == p) {
                let all: Vec<_> = PHASES.iter().map(|q| q.0).collect();
                bail!("unknown phase {p:?}; phases are {}", all.join(", "));
            }
        }
        // canonical order, whatever order they were given in
        PHASES
            .iter()
            .filter(|q| a.phases.iter().any(|p| p == q.0))
            .map(|q| q.0.to_string())
            .collect()
    };
    phases.dedup();
    for (p, need) in NEEDS {
        if phases.iter().any(|q| q == p) && !phases.iter().any(|q| q == need) {
            bail!("phase {p} needs {need}");
        }
    }
    if a.stonewall.is_nan() || a.stonewall <= 0.0 {
        bail!("--stonewall must be positive");
    }
    if a.easy_xfer == 0 || a.rand_size < 4096 {
        bail!("--easy-xfer must be positive and --rand-size at least 4k");
    }
    if ranks == 0 {
        bail!("--ranks must be at least 1");
    }
    Ok(Params {
        ranks,
        stonewall: a.stonewall,
        phases,
        easy_xfer: a.easy_xfer,
        easy_max: a.easy_max,
        hard_record: 47_008,
        hard_max: a.hard_max,
        mdeasy_max: a.mdeasy_max,
        mdhard_bytes: 3_901,
        mdhard_max: a.mdhard_max,
        rand_size: a.rand_size,
        rpc_iters: a.rpc_iters,
        keep: a.keep,
    })
}

/// The targets the options ask for. `under_preload`: whether POSIX calls of the ranks on a
/// madfs path will be served by libmadfs.so.
fn targets(a: &Io500Args, under_preload: bool) -> Result<Vec<TargetSpec>> {
    let find = |madfs: bool| -> Result<String> {
        match a.find.as_deref() {
            None => Ok(if madfs { "madfs" } else { "walk" }.into()),
            Some("walk") => Ok("walk".into()),
            Some("madfs") if madfs => Ok("madfs".into()),
            Some("madfs") => bail!("--find madfs needs a madfs target"),
            Some(f) => bail!("--find {f:?}: expected madfs or walk"),
        }
    };
    let m = mount();
    let madfs = |dir: String| -> Result<TargetSpec> {
        Ok(TargetSpec {
            label: "madfs".into(),
            access: if a.lib {
                "client library".into()
            } else {
                "posix+libmadfs.so".into()
            },
            dir,
            lib: a.lib,
            cluster: a.cluster.clone(),
            mount: (!a.lib).then(|| m.clone()),
            find: find(true)?,
        })
    };
    let local = |dir: String| -> Result<TargetSpec> {
        Ok(TargetSpec {
            label: "local".into(),
            access: "posix".into(),
            dir,
            lib: false,
            cluster: None,
            mount: None,
            find: find(false)?,
        })
    };
    if a.compare {
        let dir = a.dir.clone().unwrap_or_else(|| {
            if a.lib {
                "/madfs-bench".into()
            } else {
                format!("{m}/madfs-bench")
            }
        });
        if !(a.lib || dir == m || dir.starts_with(&format!("{m}/"))) {
            bail!("--dir {dir}: with --compare, the madfs directory must be below the mount {m}");
        }
        return Ok(vec![madfs(dir)?, local(a.local_dir.clone())?]);
    }
    let dir = a
        .dir
        .clone()
        .context("--dir DIR is required (or --compare)")?;
    let on_madfs = a.lib || (under_preload && (dir == m || dir.starts_with(&format!("{m}/"))));
    Ok(vec![if on_madfs { madfs(dir)? } else { local(dir)? }])
}

fn preloaded() -> bool {
    std::env::var("LD_PRELOAD").is_ok_and(|v| v.contains("libmadfs"))
}

/// A client for the rank's own library calls (find, rpc, --lib).
fn client(t: &TargetSpec) -> Result<Client> {
    let file = t
        .cluster
        .clone()
        .context("a madfs target needs a cluster file (--cluster or MADFS_CLUSTER)")?;
    let mut cfg = ClientConfig::from_cluster_file(&file)?;
    cfg.apply_env().map_err(anyhow::Error::msg)?;
    Ok(Client::new(&cfg)?)
}

/// `madfs-bench io500`.
pub fn run(a: Io500Args) -> Result<()> {
    if let Ok(job) = std::env::var("MADFS_BENCH_JOB") {
        let (rank, size) = rank_env().context("MADFS_BENCH_JOB without a rank")?;
        let job: Job = serde_json::from_str(&job).context("MADFS_BENCH_JOB")?;
        let res = run_rank(&job, rank, size)?;
        if let (Some(r), Some(f)) = (res, &job.result_file) {
            std::fs::write(f, serde_json::to_vec(&r)?)?;
        }
        return Ok(());
    }
    if let Some((rank, size)) = rank_env() {
        // under mpirun: this process is one rank of every target in turn
        let p = params(&a, size)?;
        let run = ["OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID"]
            .iter()
            .find_map(|k| std::env::var(k).ok())
            .unwrap_or_else(|| "mpi".into())
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
        let mut results = Vec::new();
        for t in targets(&a, preloaded())? {
            let job = Job {
                params: p.clone(),
                target: t,
                run: run.clone(),
                result_file: None,
            };
            if let Some(r) = run_rank(&job, rank, size)? {
                results.push(r);
            }
        }
        if rank == 0 {
            report::print(&p, &results, a.json.as_deref(), a.chart.as_deref())?;
        }
        return Ok(());
    }
    coordinate(a)
}

/// Spawns the ranks of every target in turn, collects rank 0's results, reports.
fn coordinate(mut a: Io500Args) -> Result<()> {
    let p = params(&a, a.ranks)?;
    let mut ts = targets(&a, preloaded())?;
    let needs_cluster = ts.iter().any(|t| t.label == "madfs");
    let mut _cluster = None;
    let mut extra_env: Vec<(String, String)> = Vec::new();
    if needs_cluster && a.cluster.is_none() {
        if !a.compare {
            bail!("no cluster file: set MADFS_CLUSTER or --cluster");
        }
        let m = mount();
        if !a.lib {
            // the mount point as a real directory makes `..` of madfs paths resolve
            let _ = std::fs::create_dir_all(&m);
        }
        eprintln!(
            "madfs-bench: starting a local {}-server cluster (shared memory, loopback)",
            a.servers
        );
        let cl = madfs_cluster::LocalCluster::start(madfs_cluster::Options {
            servers: a.servers as usize,
            args: a.server_args.clone(),
            ..Default::default()
        })
        .context("starting a local cluster")?;
        a.cluster = Some(cl.cluster_file());
        for t in &mut ts {
            if t.label == "madfs" {
                t.cluster = a.cluster.clone();
            }
        }
        if std::env::var_os("UCX_NET_DEVICES").is_none() {
            extra_env.push(("UCX_NET_DEVICES".into(), "lo".into()));
        }
        _cluster = Some(cl);
    }
    let me = std::env::current_exe()?;
    let preload = match &a.preload {
        Some(p) => p.clone(),
        None => me.with_file_name("libmadfs.so"),
    };
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs()
    );
    let plan = (a.grow_to.is_some() || a.drain.is_some()).then(|| membership::Plan {
        grow_to: a.grow_to.unwrap_or(a.servers) as usize,
        drain: a.drain,
        after: a.change_after,
    });
    if plan.is_some() && _cluster.is_none() {
        bail!("--grow-to and --drain change the local cluster of --compare (no --cluster)");
    }
    let mut changes = vec![];
    let mut results = Vec::new();
    for t in ts {
        let result_file = std::env::temp_dir().join(format!("madfs-bench-{run}-{}.json", t.label));
        let job = Job {
            params: p.clone(),
            target: t.clone(),
            run: run.clone(),
            result_file: Some(result_file.clone()),
        };
        let job_json = serde_json::to_string(&job)?;
        eprintln!(
            "== {} ({}) in {}: {} ranks, stonewall {} s",
            t.label, t.access, t.dir, p.ranks, p.stonewall
        );
        let mut kids = Vec::new();
        for r in 0..p.ranks {
            let mut c = Command::new(&me);
            c.arg("io500")
                .env("MADFS_BENCH_JOB", &job_json)
                .env("MADFS_BENCH_RANK", r.to_string())
                .env("MADFS_BENCH_SIZE", p.ranks.to_string())
                .envs(extra_env.iter().map(|(k, v)| (k, v)));
            if t.label == "madfs" && !t.lib && a.compare {
                if !preload.exists() {
                    bail!(
                        "{} not found (build the workspace, or give --preload)",
                        preload.display()
                    );
                }
                c.env("LD_PRELOAD", &preload)
                    .env("MADFS_MOUNT", t.mount.as_deref().unwrap_or("/madfs"));
                if let Some(f) = &t.cluster {
                    c.env("MADFS_CLUSTER", f);
                }
            } else if t.label == "local" && a.compare {
                c.env_remove("LD_PRELOAD");
            }
            kids.push(c.spawn().context("spawning a rank")?);
        }
        // membership changes while the madfs ranks run
        let stop = std::sync::atomic::AtomicBool::new(false);
        let changing = match (&plan, t.label == "madfs", _cluster.as_mut()) {
            (Some(plan), true, Some(cl)) => Some((plan, cl)),
            _ => None,
        };
        let (failed, changed) = std::thread::scope(|scope| {
            let changer =
                changing.map(|(plan, cl)| scope.spawn(|| membership::run(cl, plan, &stop)));
            let failed = wait_ranks(kids);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            (failed, changer.map(|h| h.join()))
        });
        let failed = failed?;
        match changed {
            Some(Ok(Ok(c))) => changes.extend(c),
            Some(Ok(Err(e))) => bail!("membership changes: {e:#}"),
            Some(Err(_)) => bail!("membership changes: the thread panicked"),
            None => {}
        }
        if !failed.is_empty() {
            bail!("{} target failed: {}", t.label, failed.join(", "));
        }
        let raw = std::fs::read(&result_file).context("rank 0 wrote no results")?;
        let _ = std::fs::remove_file(&result_file);
        results.push(serde_json::from_slice::<TargetResult>(&raw)?);
    }
    report::print(&p, &results, a.json.as_deref(), a.chart.as_deref())?;
    if !changes.is_empty() {
        println!("membership changes during the madfs run:");
        for c in &changes {
            println!("  {}", c.summary());
        }
        if let Some(j) = &a.json {
            let mut path = j.clone().into_os_string();
            path.push(".membership.json");
            std::fs::write(path, serde_json::to_vec_pretty(&changes)?)?;
        }
    }
    Ok(())
}

/// Waits for every rank; a rank that fails stops the others (they would wait at its next
/// barrier for ever). What failed.
fn wait_ranks(kids: Vec<std::process::Child>) -> Result<Vec<String>> {
    let mut failed = Vec::new();
    let mut left: Vec<(usize, std::process::Child)> = kids.into_iter().enumerate().collect();
    while !left.is_empty() {
        let mut i = 0;
        while i < left.len() {
            match left[i].1.try_wait()? {
                Some(st) => {
                    if !st.success() {
                        failed.push(format!("rank {}: {st}", left[i].0));
                    }
                    left.remove(i);
                }
                None => i += 1,
            }
        }
        if !failed.is_empty() {
            for (r, k) in &mut left {
                let _ = k.kill();
                let _ = k.wait();
                failed.push(format!("rank {r}: stopped"));
            }
            left.clear();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(failed)
}

/// One rank's whole run on one target; rank 0 returns the results.
fn run_rank(job: &Job, rank: usize, size: usize) -> Result<Option<TargetResult>> {
    if size != job.params.ranks {
        bail!(
            "rank count {size} differs from the job's {}",
            job.params.ranks
        );
    }
    if job.target.lib {
        phases::run(&Lib(client(&job.target)?), job, rank, size)
    } else {
        phases::run(&Posix, job, rank, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert!(parse_size("2x").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999t").is_err());
    }

    #[test]
    fn phase_selection_keeps_order_and_dependencies() {
        use clap::Parser;
        #[derive(Parser)]
        struct W {
            #[command(flatten)]
            a: Io500Args,
        }
        let a = W::parse_from(["x", "--phases", "ior-easy-read,ior-easy-write"]).a;
        assert_eq!(
            params(&a, 2).unwrap().phases,
            ["ior-easy-write", "ior-easy-read"]
        );
        let a = W::parse_from(["x", "--phases", "ior-easy-read"]).a;
        assert!(params(&a, 2).unwrap_err().to_string().contains("needs"));
        let a = W::parse_from(["x", "--phases", "bogus"]).a;
        assert!(params(&a, 2).is_err());
        let a = W::parse_from(["x"]).a;
        assert_eq!(params(&a, 2).unwrap().phases.len(), PHASES.len());
    }
}
