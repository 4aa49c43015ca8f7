//! `madfs-bench data`: the data path against a local directory, in one run.
//! * ior-easy-like: each rank writes (then reads) its own file in large transfers, fsync at end;
//! * mdtest-hard-like: each rank creates files of 3,901 bytes in one shared directory, closing
//!   them without a sync on both sides, then (half as many) with durable closes: madfs's
//!   close-sync against a local `fdatasync` before each close;
//! * fsync-heavy: many clients doing small write + fsync, with and without group commit, each
//!   on its own file and all on one shared file;
//! * server memory with many connected client processes.
//!
//! madfs runs through the client library (2 local servers, shared memory); the local target
//! is a directory on this machine's file system, through `std::fs`.

use anyhow::{bail, Context};
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_cluster::{LocalCluster, Options};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct DataArgs {
    /// Worker processes per phase (ranks).
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// ior-easy: MiB written per rank.
    #[arg(long, default_value_t = 512)]
    easy_mib: usize,
    /// ior-easy: transfer size, MiB.
    #[arg(long, default_value_t = 2)]
    xfer_mib: usize,
    /// mdtest-hard: files per rank.
    #[arg(long, default_value_t = 5000)]
    hard_files: usize,
    /// fsync phase: client processes.
    #[arg(long, default_value_t = 16)]
    fsync_clients: usize,
    /// fsync phase: write+fsync calls per client.
    #[arg(long, default_value_t = 200)]
    fsyncs: usize,
    /// Connected client processes for the server memory check.
    #[arg(long, default_value_t = 64)]
    idle_clients: usize,
    /// Local directory to compare with (default: a new directory under /tmp).
    #[arg(long)]
    local_dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct DataWorkerArgs {
    phase: String,
    target: String,
    dir: String,
    rank: usize,
    n: usize,
    #[arg(long, default_value_t = 0)]
    size: usize,
    #[arg(long)]
    cluster: Option<PathBuf>,
    #[arg(long)]
    close_sync: Option<bool>,
}

fn client(cluster: &Path, close_sync: Option<bool>) -> anyhow::Result<Client> {
    let mut cfg = ClientConfig::from_cluster_file(cluster)?;
    cfg.apply_env().map_err(anyhow::Error::msg)?;
    if let Some(c) = close_sync {
        cfg.close_sync = c;
    }
    Ok(Client::new(&cfg)?)
}

fn fill(buf: &mut [u8], seed: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i.wrapping_mul(31) ^ seed) as u8;
    }
}

/// One worker process: runs a phase, prints its elapsed seconds.
pub fn worker(a: DataWorkerArgs) -> anyhow::Result<()> {
    let madfs = a.target == "madfs";
    let c = if madfs {
        Some(client(
            a.cluster.as_deref().context("--cluster")?,
            a.close_sync,
        )?)
    } else {
        None
    };
    let t0 = Instant::now();
    match a.phase.as_str() {
        "easy-write" => {
            let path = format!("{}/easy.{}", a.dir, a.rank);
            let mut buf = vec![0u8; a.size];
            fill(&mut buf, a.rank);
            if let Some(c) = &c {
                let mut f = c.open(&path, OpenFlags::create_trunc())?;
                for i in 0..a.n {
                    c.write(&mut f, (i * a.size) as u64, &buf)?;
                }
                c.close(f)?; // close-sync: data durable before close returns (ior -e)
            } else {
                let mut f = std::fs::File::create(&path)?;
                for _ in 0..a.n {
                    f.write_all(&buf)?;
                }
                f.sync_all()?;
            }
        }
        "easy-read" => {
            let path = format!("{}/easy.{}", a.dir, a.rank);
            let mut buf = vec![0u8; a.size];
            if let Some(c) = &c {
                let f = c.open(&path, OpenFlags::default())?;
                for i in 0..a.n {
                    let n = c.read(&f, (i * a.size) as u64, &mut buf)?;
                    if n != a.size {
                        bail!("short read");
                    }
                }
                c.close(f)?;
            } else {
                let mut f = std::fs::File::open(&path)?;
                for _ in 0..a.n {
                    f.read_exact(&mut buf)?;
                }
            }
        }
        "hard-write" => {
            let buf = vec![7u8; 3901];
            for i in 0..a.n {
                let path = format!("{}/hard/file.{}.{i}", a.dir, a.rank);
                if let Some(c) = &c {
                    let mut f = c.open(
                        &path,
                        OpenFlags {
                            create: true,
                            excl: true,
                            mode: 0o644,
                            ..Default::default()
                        },
                    )?;
                    c.write(&mut f, 0, &buf)?;
                    c.close(f)?;
                } else {
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)?;
                    f.write_all(&buf)?;
                    if a.close_sync == Some(true) {
                        // as durable as madfs's close-sync: the data and the new entry
                        f.sync_data()?;
                    }
                }
            }
        }
        "fsync-shared" => {
            // every rank writes its own 4 KiB records, interleaved, into one file
            let path = format!("{}/fsync.shared", a.dir);
            let (buf, ranks) = (vec![a.rank as u8; 4096], a.size.max(1));
            let at = |i: usize| ((i * ranks + a.rank) * 4096) as u64;
            if let Some(c) = &c {
                let flags = OpenFlags {
                    create: true,
                    mode: 0o644,
                    ..OpenFlags::default()
                };
                let mut f = c.open(&path, flags)?;
                for i in 0..a.n {
                    c.write(&mut f, at(i), &buf)?;
                    c.fsync(&mut f)?;
                }
                c.close(f)?;
            } else {
                use std::os::unix::fs::FileExt;
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)?;
                for i in 0..a.n {
                    f.write_all_at(&buf, at(i))?;
                    f.sync_data()?;
                }
            }
        }
        "fsync" => {
            let path = format!("{}/fsync.{}", a.dir, a.rank);
            let buf = vec![1u8; 4096];
            if let Some(c) = &c {
                let mut f = c.open(&path, OpenFlags::create_trunc())?;
                for i in 0..a.n {
                    c.write(&mut f, (i * 4096) as u64, &buf)?;
                    c.fsync(&mut f)?;
                }
                c.close(f)?;
            } else {
                let mut f = std::fs::File::create(&path)?;
                for _ in 0..a.n {
                    f.write_all(&buf)?;
                    f.sync_data()?;
                }
            }
        }
        "idle" => {
            let c = c.context("idle needs madfs")?;
            for s in 0..c.servers() {
                c.ping(s)?;
            }
            c.stat("/")?;
            println!("ready");
            std::io::stdout().flush()?;
            let mut sink = String::new();
            let _ = std::io::stdin().read_to_string(&mut sink);
            return Ok(());
        }
        p => bail!("unknown phase {p}"),
    }
    println!("{}", t0.elapsed().as_secs_f64());
    Ok(())
}

struct Ctx {
    me: PathBuf,
    cluster: PathBuf,
}

/// One phase run: what every rank does.
struct Job<'a> {
    phase: &'a str,
    target: &'a str,
    dir: &'a str,
    n: usize,
    size: usize,
    close_sync: Option<bool>,
    cluster: Option<&'a Path>,
}

impl Job<'_> {
    fn new<'a>(phase: &'a str, target: &'a str, dir: &'a str, n: usize) -> Job<'a> {
        Job {
            phase,
            target,
            dir,
            n,
            size: 0,
            close_sync: None,
            cluster: None,
        }
    }
}

impl Ctx {
    fn spawn(&self, j: &Job<'_>, rank: usize) -> anyhow::Result<Child> {
        let mut cmd = Command::new(&self.me);
        cmd.args([
            "data-worker",
            j.phase,
            j.target,
            j.dir,
            &rank.to_string(),
            &j.n.to_string(),
        ])
        .args(["--size", &j.size.to_string()])
        .arg("--cluster")
        .arg(j.cluster.unwrap_or(&self.cluster))
        .stdout(Stdio::piped())
        .stdin(Stdio::piped());
        if let Some(cs) = j.close_sync {
            cmd.arg("--close-sync").arg(cs.to_string());
        }
        if std::env::var_os("UCX_NET_DEVICES").is_none() {
            cmd.env("UCX_NET_DEVICES", "lo");
        }
        Ok(cmd.spawn()?)
    }

    /// Runs `ranks` workers of a phase at once; returns the slowest rank's seconds.
    fn phase(&self, j: &Job<'_>, ranks: usize) -> anyhow::Result<f64> {
        let kids: Vec<Child> = (0..ranks)
            .map(|r| self.spawn(j, r))
            .collect::<anyhow::Result<_>>()?;
        let mut worst: f64 = 0.0;
        for k in kids {
            let out = k.wait_with_output()?;
            if !out.status.success() {
                bail!(
                    "{} on {}: a rank failed ({})",
                    j.phase,
                    j.target,
                    out.status
                );
            }
            let secs: f64 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .context("worker output")?;
            worst = worst.max(secs);
        }
        Ok(worst)
    }
}

fn server_rss(cl: &LocalCluster, servers: usize) -> anyhow::Result<Vec<u64>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut v = vec![];
        for i in 0..servers {
            let c = madfs_control::connect(
                cl.entry(i).control,
                &madfs_control::Login::for_cluster(&cl.cluster_file())?,
            )
            .await?;
            v.push(
                c.stats(madfs_control::context(5))
                    .await?
                    .map_err(anyhow::Error::msg)?
                    .rss_bytes,
            );
        }
        Ok(v)
    })
}

pub fn run(a: DataArgs) -> anyhow::Result<()> {
    let servers = 2;
    let cl = LocalCluster::start(Options {
        servers,
        ..Default::default()
    })
    .context("starting servers")?;
    let ctx = Ctx {
        me: std::env::current_exe()?,
        cluster: cl.cluster_file(),
    };
    let local_root = match &a.local_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("madfs-bench-")
            .tempdir_in(d)?,
        None => tempfile::Builder::new()
            .prefix("madfs-bench-")
            .tempdir_in("/tmp")?,
    };
    let local = local_root.path().to_str().unwrap().to_owned();
    let mc = client(&cl.cluster_file(), None)?;
    mc.mkdir("/bench", 0o755)?;
    mc.mkdir("/bench/hard", 0o755)?;
    std::fs::create_dir(format!("{local}/hard"))?;
    let xfer = a.xfer_mib << 20;
    let transfers = a.easy_mib / a.xfer_mib;
    let gib = (a.ranks * transfers * xfer) as f64 / (1u64 << 30) as f64;
    let files = (a.ranks * a.hard_files) as f64;
    println!(
        "madfs-bench data: {} ranks, {servers} madfs servers (shared memory), local dir {local}\n  ior-easy {} MiB/rank in {} MiB transfers (fsync at end); mdtest-hard {} files/rank of 3,901 B in one dir; \
         fsync phase {} clients x {} (4 KiB write + fsync)",
        a.ranks, a.easy_mib, a.xfer_mib, a.hard_files, a.fsync_clients, a.fsyncs
    );
    let mut rows: Vec<(String, f64, f64, &str)> = vec![];
    for (name, phase, n, size, unit_amount, unit) in [
        (
            "ior-easy write",
            "easy-write",
            transfers,
            xfer,
            gib,
            "GiB/s",
        ),
        ("ior-easy read", "easy-read", transfers, xfer, gib, "GiB/s"),
    ] {
        let m = ctx.phase(
            &Job {
                size,
                ..Job::new(phase, "madfs", "/bench", n)
            },
            a.ranks,
        )?;
        let l = ctx.phase(
            &Job {
                size,
                ..Job::new(phase, "local", &local, n)
            },
            a.ranks,
        )?;
        rows.push((name.into(), unit_amount / m, unit_amount / l, unit));
    }
    // mdtest-hard: close without fsync on both sides (a local close does not fsync either)
    let m = ctx.phase(
        &Job {
            close_sync: Some(false),
            ..Job::new("hard-write", "madfs", "/bench", a.hard_files)
        },
        a.ranks,
    )?;
    let l = ctx.phase(
        &Job::new("hard-write", "local", &local, a.hard_files),
        a.ranks,
    )?;
    rows.push((
        "mdtest-hard create+3901B+close".into(),
        files / m / 1000.0,
        files / l / 1000.0,
        "kIOPS",
    ));
    // the same with durable closes: madfs's default close-sync (a WAL sync per file, shared by
    // the closes that arrive together) vs a local fdatasync before each close
    let durable = (a.hard_files / 2).max(1);
    std::fs::create_dir_all(format!("{local}/sync/hard"))?;
    mc.mkdir("/bench/sync", 0o755)?;
    mc.mkdir("/bench/sync/hard", 0o755)?;
    let sync_dir = format!("{local}/sync");
    let m = ctx.phase(
        &Job {
            close_sync: Some(true),
            ..Job::new("hard-write", "madfs", "/bench/sync", durable)
        },
        a.ranks,
    )?;
    let l = ctx.phase(
        &Job {
            close_sync: Some(true),
            ..Job::new("hard-write", "local", &sync_dir, durable)
        },
        a.ranks,
    )?;
    let files_sync = (a.ranks * durable) as f64;
    rows.push((
        "mdtest-hard, durable close".into(),
        files_sync / m / 1000.0,
        files_sync / l / 1000.0,
        "kIOPS",
    ));
    // fsync-heavy: group commit vs one sync per request (a second cluster)
    let fs_ops = (a.fsync_clients * a.fsyncs) as f64;
    let g = ctx.phase(
        &Job::new("fsync", "madfs", "/bench", a.fsyncs),
        a.fsync_clients,
    )?;
    let single = LocalCluster::start(Options {
        servers,
        args: vec!["--no-group-commit".into()],
        ..Default::default()
    })?;
    client(&single.cluster_file(), None)?.mkdir("/bench", 0o755)?;
    let single_file = single.cluster_file();
    let s = ctx.phase(
        &Job {
            cluster: Some(&single_file),
            ..Job::new("fsync", "madfs", "/bench", a.fsyncs)
        },
        a.fsync_clients,
    )?;
    let lf = ctx.phase(
        &Job::new("fsync", "local", &local, a.fsyncs),
        a.fsync_clients,
    )?;
    // the same on one shared file: there a flush of the file is shared too
    fn shared<'a>(
        cluster: Option<&'a Path>,
        target: &'a str,
        dir: &'a str,
        a: &DataArgs,
    ) -> Job<'a> {
        Job {
            size: a.fsync_clients,
            cluster,
            ..Job::new("fsync-shared", target, dir, a.fsyncs)
        }
    }
    let gs = ctx.phase(&shared(None, "madfs", "/bench", &a), a.fsync_clients)?;
    let ss = ctx.phase(
        &shared(Some(&single_file), "madfs", "/bench", &a),
        a.fsync_clients,
    )?;
    let ls = ctx.phase(&shared(None, "local", &local, &a), a.fsync_clients)?;
    drop(single);
    println!();
    println!(
        "{:<32} {:>12} {:>12} {:>8}  unit",
        "phase", "madfs", "local", "ratio"
    );
    for (name, m, l, unit) in &rows {
        println!("{name:<32} {m:>12.3} {l:>12.3} {:>7.2}x  {unit}", m / l);
    }
    println!(
        "{:<32} {:>12.0} {:>12.0} {:>7.2}x  fsyncs/s (madfs group commit vs one sync per call; local fdatasync {:.0}/s)",
        "fsync-heavy 4 KiB write+fsync",
        fs_ops / g,
        fs_ops / s,
        s / g,
        fs_ops / lf
    );
    println!(
        "{:<32} {:>12.0} {:>12.0} {:>7.2}x  fsyncs/s (same, one file shared by the clients; local fdatasync {:.0}/s)",
        "fsync-heavy, one shared file",
        fs_ops / gs,
        fs_ops / ss,
        ss / gs,
        fs_ops / ls
    );
    // memory with many connected clients
    let before = server_rss(&cl, servers)?;
    let mut idle = vec![];
    for r in 0..a.idle_clients {
        let mut k = ctx.spawn(&Job::new("idle", "madfs", "/", 0), r)?;
        let mut line = String::new();
        BufReader::new(k.stdout.as_mut().unwrap()).read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("idle client {r} did not connect");
        }
        idle.push(k);
    }
    let after = server_rss(&cl, servers)?;
    for k in &mut idle {
        drop(k.stdin.take());
    }
    for k in idle {
        let _ = k.wait_with_output();
    }
    let mib = |v: &[u64]| {
        v.iter()
            .map(|b| format!("{:.0}", *b as f64 / (1u64 << 20) as f64))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!(
        "server RSS (MiB per server): {} before, {} with {} connected client processes",
        mib(&before),
        mib(&after),
        a.idle_clients
    );
    Ok(())
}
