//! `madfs-ctl`: talks to the control port of madfs servers.
//!
//! ```text
//! madfs-ctl status  [ADDR] [--cluster FILE] [--wait SECS]
//! madfs-ctl stats   [ADDR] [--cluster FILE] [--json]
//! madfs-ctl stop    [ADDR] [--cluster FILE]
//! madfs-ctl fsck    --cluster FILE [--repair]
//! madfs-ctl drain   SERVER [--cluster FILE] [--wait SECS]
//! madfs-ctl add     SERVER [--cluster FILE] [--wait SECS]
//! ```
//! Without ADDR, every server of the cluster file. The cluster file (`--cluster`, else
//! `MADFS_CLUSTER`) also says how to log in: with the peer key or the cluster key beside it,
//! or MUNGE (docs/security.md).

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use madfs_control::{connect, context, Login};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "madfs-ctl",
    about = "Query or stop madfs servers through their control port"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args)]
struct Target {
    /// Control address of one server (host:port); default: every server of the cluster file.
    addr: Option<SocketAddr>,
    /// The cluster file: its servers (the third column) and how to log in.
    #[arg(long, env = "MADFS_CLUSTER")]
    cluster: Option<PathBuf>,
}

fn login(t: &Target) -> anyhow::Result<Login> {
    match &t.cluster {
        Some(f) => Login::for_cluster(f),
        None => Ok(Login::Insecure),
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Print each server's status; with --wait, retry until all answer.
    Status {
        #[command(flatten)]
        target: Target,
        /// Keep trying for this many seconds.
        #[arg(long, default_value_t = 0)]
        wait: u64,
        /// Expect this many servers in the cluster file (with --wait).
        #[arg(long)]
        expect: Option<usize>,
    },
    /// Print each server's counters.
    Stats {
        #[command(flatten)]
        target: Target,
        /// One JSON array: an object per server (`control`, its address; `stats`, its
        /// counters as `madfs_control::Stats` names them).
        #[arg(long)]
        json: bool,
    },
    /// Stop servers cleanly.
    Stop {
        #[command(flatten)]
        target: Target,
    },
    /// Move every slot of a server to the others while the cluster serves (unreplicated
    /// clusters): its keys, entries and chunk data go, in batches, to the servers owning the
    /// fewest slots. The server keeps its number and owns nothing afterwards.
    Drain {
        /// The server to drain (its id).
        server: u32,
        /// The cluster file.
        #[arg(long, env = "MADFS_CLUSTER")]
        cluster: PathBuf,
        /// Wait up to this many seconds for the move to finish, printing its progress.
        #[arg(long, default_value_t = 0)]
        wait: u64,
    },
    /// Make a server started with `--join` (the next id) a member of an unreplicated
    /// cluster: its share of the slots (their keys, entries and chunk data) moves to it from
    /// the others, in batches, while the cluster serves.
    Add {
        /// The server to add (its id).
        server: u32,
        /// The cluster file.
        #[arg(long, env = "MADFS_CLUSTER")]
        cluster: PathBuf,
        /// Wait up to this many seconds for the move to finish, printing its progress.
        #[arg(long, default_value_t = 0)]
        wait: u64,
    },
    /// Remove a dead server of a replicated cluster for good (the map must have it down):
    /// it leaves every replica set, its slots go to the next server, and each set is copied
    /// to the server it gained, from the set's remaining copy, while the cluster serves.
    Remove {
        /// The server to remove (its id).
        server: u32,
        /// The cluster file.
        #[arg(long, env = "MADFS_CLUSTER")]
        cluster: PathBuf,
        /// Wait up to this many seconds for the rebuild to finish, printing its progress.
        #[arg(long, default_value_t = 0)]
        wait: u64,
    },
    /// Check every server's chunk files and find orphans (the cluster file's servers).
    Fsck {
        /// The cluster file.
        #[arg(long, env = "MADFS_CLUSTER")]
        cluster: PathBuf,
        /// Remove orphan chunk files.
        #[arg(long)]
        repair: bool,
    },
}

/// A membership change `madfs-ctl` asks for.
#[derive(Clone, Copy)]
enum Membership {
    Drain,
    Add,
    Remove,
}

/// Asks the servers of `cluster` (the first that answers) for `change` of server `server`;
/// with `wait`, prints the move's progress until it is over (at most `wait` seconds).
async fn membership(
    change: Membership,
    server: u32,
    cluster: PathBuf,
    wait: u64,
) -> anyhow::Result<()> {
    let target = Target {
        addr: None,
        cluster: Some(cluster),
    };
    let login = login(&target)?;
    let addrs = control_addrs(&target)?;
    let (what, done) = match change {
        Membership::Drain => ("drain", "drains"),
        Membership::Add => ("add", "joins"),
        Membership::Remove => ("remove", "is removed"),
    };
    let mut why = None;
    let mut epoch = None;
    for a in &addrs {
        let r = async {
            let c = connect(*a, &login).await?;
            let r = match change {
                Membership::Drain => c.drain(context(10), server).await?,
                Membership::Add => c.add(context(10), server).await?,
                Membership::Remove => c.remove(context(10), server).await?,
            };
            r.map_err(|e| anyhow::anyhow!("{e}"))
        };
        match r.await {
            Ok(e) => {
                epoch = Some(e);
                break;
            }
            Err(e) => why = Some(e),
        }
    }
    let Some(epoch) = epoch else {
        bail!(
            "{what} of server {server}: {:#}",
            why.expect("no server answered")
        );
    };
    println!("server {server} {done} (map epoch {epoch})");
    if wait == 0 {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(wait);
    // (when the slots left were first seen, and how many: the rate)
    let mut since: Option<(Instant, u32)> = None;
    loop {
        let mut left = None;
        // (what the servers still copying a set have copied so far)
        let mut copied = (0u64, 0u64);
        for a in &addrs {
            let r = async {
                let c = connect(*a, &login).await?;
                c.status(context(5))
                    .await?
                    .map_err(|e| anyhow::anyhow!("{e}"))
            };
            if let Ok(Some(m)) = r.await.map(|s| s.map) {
                if let Some((r, b)) = m.resync {
                    copied = (copied.0 + r, copied.1 + b);
                }
                if left.is_none() {
                    left = Some((m.moving, m.shares, m.building));
                }
                if !matches!(change, Membership::Remove) {
                    break;
                }
            }
        }
        match left {
            Some((_, _, b)) if matches!(change, Membership::Remove) && !b.is_empty() => {
                if Instant::now() >= deadline {
                    bail!("the rebuild has not finished");
                }
                println!(
                    "{} replica set(s) to rebuild {b:?} (set, server); copied so far: {} records, {}",
                    b.len(),
                    copied.0,
                    human(copied.1)
                );
            }
            Some((0, shares, _)) => {
                println!("done: slots per server {shares:?}");
                return Ok(());
            }
            Some((n, _, _)) if Instant::now() < deadline => {
                let first = *since.get_or_insert((Instant::now(), n));
                println!("{}", progress(first, n, Instant::now()));
            }
            _ if Instant::now() >= deadline => bail!("the move has not finished"),
            _ => {}
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// ` moving=N` of a status line while slots move to the target layout (`madfs-ctl
/// add`/`drain --wait` prints the rate and the time left).
fn moving(n: u32) -> String {
    if n == 0 {
        return String::new();
    }
    format!(" moving={n}_slots")
}

/// ` rebuilding=SET:SERVER,…` of a status line while replica sets are rebuilt.
fn rebuilding(b: &[(u32, u32)]) -> String {
    if b.is_empty() {
        return String::new();
    }
    let v: Vec<String> = b.iter().map(|(s, m)| format!("{s}:{m}")).collect();
    format!(" rebuilding={}", v.join(","))
}

/// A progress line of a move: `n` slots left now (`at`), `first` the time and the count
/// first seen; the rate and the time left once there is one.
fn progress(first: (Instant, u32), n: u32, at: Instant) -> String {
    let secs = at.duration_since(first.0).as_secs_f64();
    let done = first.1.saturating_sub(n);
    if done == 0 || secs <= 0.0 {
        return format!("{n} slot(s) to move");
    }
    let rate = done as f64 / secs;
    format!(
        "{n} slot(s) to move, {rate:.0} slots/s, about {:.0} s left",
        n as f64 / rate
    )
}

fn control_addrs(t: &Target) -> anyhow::Result<Vec<SocketAddr>> {
    match (&t.addr, &t.cluster) {
        (Some(a), _) => Ok(vec![*a]),
        (None, Some(f)) => Ok(madfs_identity::cluster_file::read_partial(f)?
            .servers
            .iter()
            .map(|e| e.control)
            .collect()),
        _ => bail!("give either a control ADDR or --cluster FILE"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run(Cli::parse()).await {
        eprintln!("madfs-ctl: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Status {
            target,
            wait,
            expect,
        } => {
            let deadline = Instant::now() + Duration::from_secs(wait);
            loop {
                let attempt = async {
                    let addrs = control_addrs(&target)?;
                    if let Some(n) = expect {
                        if addrs.len() != n {
                            bail!("cluster file lists {} of {n} servers", addrs.len());
                        }
                    }
                    // every server's line, or why it did not answer
                    let mut lines: Vec<anyhow::Result<String>> = vec![];
                    for a in addrs {
                        let one = async {
                            let c = connect(a, &login(&target)?)
                                .await
                                .with_context(|| format!("control port {a}"))?;
                            let s = c
                                .status(context(5))
                                .await
                                .with_context(|| format!("status from {a}"))?
                                .map_err(|e| anyhow::anyhow!("status from {a}: {e}"))?;
                            let map = match &s.map {
                                Some(m) => {
                                    format!(
                                        " replication={} map_epoch={} states={} leader={}{}",
                                        s.replication,
                                        m.epoch,
                                        m.states.join(","),
                                        m.leader.map_or("none".into(), |l| l.to_string()),
                                        m.resync.map_or(String::new(), |(r, b)| format!(
                                            " resync={r}_records,{}",
                                            human(b)
                                        ))
                                    ) + &rebuilding(&m.building)
                                        + &moving(m.moving)
                                }
                                None => String::new(),
                            };
                            let cap = match &s.capacity {
                                Some(c) => format!(
                                    " disk={} disk_free={} metadata={}",
                                    human(c.disk_bytes),
                                    human(c.free_bytes),
                                    human(c.metadata_bytes)
                                ),
                                None => String::new(),
                            };
                            anyhow::Ok(format!(
                                "server {} of {} cluster={} ucx={} control={a} pid={} chunk_size={} err_mode={} uptime={}s data={}{cap}{map}",
                                s.id, s.servers, s.cluster, s.ucx_addr, s.pid, s.chunk_size, s.err_mode, s.uptime_s, s.data_dir
                            ))
                        };
                        lines.push(one.await);
                    }
                    Ok(lines)
                };
                match attempt.await {
                    Ok(lines) if lines.iter().all(|l| l.is_ok()) => {
                        for l in lines.into_iter().flatten() {
                            println!("{l}");
                        }
                        return Ok(());
                    }
                    Ok(lines) if Instant::now() >= deadline => {
                        // what answered, and who did not
                        let mut first = None;
                        for l in lines {
                            match l {
                                Ok(l) => println!("{l}"),
                                Err(e) => {
                                    println!("unreachable: {e:#}");
                                    first.get_or_insert(e);
                                }
                            }
                        }
                        return Err(first.expect("one failed"));
                    }
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
        Cmd::Stats { target, json } => {
            let mut all = vec![];
            for a in control_addrs(&target)? {
                let c = connect(a, &login(&target)?)
                    .await
                    .with_context(|| format!("control port {a}"))?;
                let s = c
                    .stats(context(5))
                    .await?
                    .map_err(|e| anyhow::anyhow!("stats from {a}: {e}"))?;
                if json {
                    all.push(serde_json::json!({ "control": a.to_string(), "stats": s }));
                } else {
                    println!("{a}: {}", serde_json_line(&s));
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            }
            Ok(())
        }
        Cmd::Stop { target } => {
            let mut failed = 0;
            let login = login(&target)?;
            for a in control_addrs(&target)? {
                match connect(a, &login).await {
                    Ok(c) => match c.shutdown(context(10)).await {
                        Ok(Ok(_)) => println!("stopped {a}"),
                        Ok(Err(e)) => {
                            eprintln!("madfs-ctl: stop {a}: {e}");
                            failed += 1;
                        }
                        Err(e) => {
                            eprintln!("madfs-ctl: stop {a}: {e}");
                            failed += 1;
                        }
                    },
                    Err(e) => {
                        eprintln!("madfs-ctl: {a} not reachable ({e:#}); already stopped?");
                        failed += 1;
                    }
                }
            }
            if failed > 0 {
                bail!("{failed} server(s) did not confirm the stop");
            }
            Ok(())
        }
        Cmd::Drain {
            server,
            cluster,
            wait,
        } => membership(Membership::Drain, server, cluster, wait).await,
        Cmd::Add {
            server,
            cluster,
            wait,
        } => membership(Membership::Add, server, cluster, wait).await,
        Cmd::Remove {
            server,
            cluster,
            wait,
        } => membership(Membership::Remove, server, cluster, wait).await,
        Cmd::Fsck { cluster, repair } => {
            let (v, freed) = madfs_control::fsck::cluster(&cluster, repair).await?;
            println!("{v}");
            if repair && !v.orphans.is_empty() {
                println!(
                    "repaired: {} orphan chunk files removed, {freed} bytes given back",
                    v.orphans.len()
                );
            }
            if !v.damaged.is_empty() || (!repair && !v.orphans.is_empty()) {
                bail!("fsck found damage or orphans");
            }
            Ok(())
        }
    }
}

/// Bytes in binary units, one decimal (`12.3G`).
fn human(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

fn serde_json_line(s: &madfs_control::Stats) -> String {
    let reqs: Vec<String> = s.requests.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "requests[{}] errors={} bad_frames={} drained={} forged={} refused={} in={}B out={}B conns={} live={} sync_batches={} sync_reqs={} rss={}B entries={} chunk_bytes={} moved_slots={} moved_records={} moved_bytes={}",
        reqs.join(" "),
        s.errors,
        s.bad_frames,
        s.drained,
        s.forged,
        s.refused,
        s.bytes_in,
        s.bytes_out,
        s.connections,
        s.live_connections,
        s.sync_batches,
        s.sync_requests,
        s.rss_bytes,
        s.held_entries,
        s.held_chunk_bytes,
        s.moved_slots,
        s.moved_records,
        s.moved_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_tells_the_rate_and_the_time_left() {
        let t0 = Instant::now();
        assert_eq!(progress((t0, 100), 100, t0), "100 slot(s) to move");
        let line = progress((t0, 100), 60, t0 + Duration::from_secs(2));
        assert_eq!(line, "60 slot(s) to move, 20 slots/s, about 3 s left");
    }
}
