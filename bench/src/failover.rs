//! `madfs-bench failover`: the stall clients see when a server of a replicated cluster dies
//! (docs/redundancy.md). A local cluster (`--servers`, `--replication`), `--clients` client
//! threads (each its own client: its own UCX worker and connections) changing and looking up
//! files of every replica set in a loop, and `--kills` times: one server killed (SIGKILL, or
//! frozen with `--freeze`), the time until each client's next completed request and its
//! longest pause after the kill measured, the server started again (woken) and caught up.

use anyhow::{bail, Context};
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_cluster::{find_bin, LocalCluster, Options};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct FailoverArgs {
    /// Servers of the local cluster.
    #[arg(long, default_value_t = 4)]
    servers: usize,
    /// Copies of every key.
    #[arg(long, default_value_t = 2)]
    replication: u32,
    /// Client threads.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Servers killed, one after the other (each started again and caught up before the next).
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Freeze the server (SIGSTOP, then SIGCONT) instead of killing it.
    #[arg(long)]
    freeze: bool,
    /// Seconds each kill is watched for.
    #[arg(long, default_value_t = 6)]
    watch: u64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Until every server's map has every server up (`madfs-ctl status`).
fn all_up(cl: &LocalCluster, n: usize, within: Duration) -> anyhow::Result<()> {
    let t = Instant::now();
    let want = format!("states={}", vec!["up"; n].join(","));
    loop {
        if cl.ctl_status().matches(&want).count() == n {
            return Ok(());
        }
        if t.elapsed() > within {
            bail!("the servers were not all up within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn run(a: FailoverArgs) -> anyhow::Result<()> {
    if a.replication < 2 || a.replication as usize > a.servers {
        bail!("--replication must be 2 or 3, at most --servers");
    }
    // the clients' own messages (timeouts, failovers: MADFS_LOG) on stderr
    madfs_client::init_preload_logging();
    let _ = find_bin("madfs-server");
    let mut cl = LocalCluster::start(Options {
        servers: a.servers,
        args: vec!["--replication".into(), a.replication.to_string()],
        ..Default::default()
    })
    .context("starting servers")?;
    let cfg = ClientConfig::from_cluster_file(cl.cluster_file())?;
    {
        let c = Client::new(&cfg)?;
        c.mkdir("/fo", 0o755)?;
    }
    let base = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // per client: completion times (seconds since `base`)
    let done: Vec<Arc<Mutex<Vec<f64>>>> = (0..a.clients).map(|_| Arc::default()).collect();
    let mut threads = vec![];
    for (i, log) in done.iter().enumerate() {
        let (cfg, stop, log) = (cfg.clone(), stop.clone(), log.clone());
        threads.push(std::thread::spawn(move || -> anyhow::Result<u64> {
            let c = Client::new(&cfg)?;
            let dir = format!("/fo/c{i}");
            c.mkdir(&dir, 0o755)?;
            // 16 files: every replica set is among them
            let files: Vec<String> = (0..16).map(|k| format!("{dir}/f{k}")).collect();
            for f in &files {
                let h = c.open(f, OpenFlags::create_trunc())?;
                c.close(h)?;
            }
            let mut ops = 0u64;
            let mut k = 0;
            while !stop.load(Relaxed) {
                let f = &files[k % files.len()];
                k += 1;
                c.chmod(f, 0o600 + (k as u32 % 2) * 0o44)
                    .with_context(|| format!("chmod {f}"))?;
                c.stat(f).with_context(|| format!("stat {f}"))?;
                ops += 1;
                log.lock().unwrap().push(base.elapsed().as_secs_f64());
            }
            Ok(ops)
        }));
    }
    // every client running
    let t = Instant::now();
    while done.iter().any(|d| d.lock().unwrap().is_empty()) {
        if t.elapsed() > Duration::from_secs(60) {
            bail!("clients did not start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "madfs-bench failover: {} servers, replication {}, {} clients, {} {}",
        a.servers,
        a.replication,
        a.clients,
        a.kills,
        if a.freeze { "freezes" } else { "kills" }
    );
    let (mut next, mut pause) = (vec![], vec![]);
    for k in 0..a.kills {
        let victim = k % a.servers;
        std::thread::sleep(Duration::from_millis(500));
        let at = base.elapsed().as_secs_f64();
        if a.freeze {
            // SAFETY: kill(2) on a server process of this cluster.
            unsafe { libc::kill(cl.pid(victim).unwrap_or(0) as i32, libc::SIGSTOP) };
        } else {
            cl.kill(victim);
        }
        std::thread::sleep(Duration::from_secs(a.watch));
        let end = base.elapsed().as_secs_f64();
        let (mut kn, mut kp) = (vec![], vec![]);
        for (i, d) in done.iter().enumerate() {
            let d = d.lock().unwrap();
            let after: Vec<f64> = d.iter().copied().filter(|t| *t > at).collect();
            let Some(first) = after.first() else {
                drop(d);
                stop.store(true, Relaxed);
                let why = match threads.remove(i).join() {
                    Ok(Err(e)) => format!("{e:#}"),
                    Ok(Ok(_)) => "no error".into(),
                    Err(_) => "it panicked".into(),
                };
                for s in 0..a.servers {
                    let log = cl.log(s);
                    let tail: Vec<&str> = log.lines().rev().take(15).collect();
                    eprintln!("--- end of server {s}'s log");
                    tail.iter().rev().for_each(|l| eprintln!("{l}"));
                }
                bail!(
                    "client {i} completed nothing in the {} s after kill {} ({why})",
                    a.watch,
                    k + 1
                );
            };
            kn.push(first - at);
            // the longest time without a completion from the kill to the end of the watch
            let mut last = at;
            let mut gap: f64 = 0.0;
            for t in after.iter().chain(std::iter::once(&end)) {
                gap = gap.max(t - last);
                last = *t;
            }
            kp.push(gap);
        }
        kn.sort_by(f64::total_cmp);
        kp.sort_by(f64::total_cmp);
        println!(
            "  {:>2}: server {victim}: next request p50 {:.2} s, p99 {:.2} s, max {:.2} s; longest pause p99 {:.2} s",
            k + 1,
            percentile(&kn, 0.5),
            percentile(&kn, 0.99),
            kn.last().copied().unwrap_or(0.0),
            percentile(&kp, 0.99)
        );
        next.extend(kn);
        pause.extend(kp);
        if a.freeze {
            // SAFETY: as above.
            unsafe { libc::kill(cl.pid(victim).unwrap_or(0) as i32, libc::SIGCONT) };
        } else {
            cl.restart(victim).context("restarting the server")?;
        }
        all_up(&cl, a.servers, Duration::from_secs(120))?;
    }
    stop.store(true, Relaxed);
    let mut ops = 0;
    for t in threads {
        ops += t
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
    }
    next.sort_by(f64::total_cmp);
    pause.sort_by(f64::total_cmp);
    println!(
        "all {} kills x {} clients: next request after the kill p50 {:.2} s, p99 {:.2} s, max {:.2} s; longest pause p50 {:.2} s, p99 {:.2} s, max {:.2} s; {ops} loops, no error",
        a.kills,
        a.clients,
        percentile(&next, 0.5),
        percentile(&next, 0.99),
        next.last().copied().unwrap_or(0.0),
        percentile(&pause, 0.5),
        percentile(&pause, 0.99),
        pause.last().copied().unwrap_or(0.0),
    );
    Ok(())
}
