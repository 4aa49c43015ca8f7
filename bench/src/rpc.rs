//! `madfs-bench rpc`: UCX round-trip latency through the client library.

use anyhow::{bail, Context};
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_cluster::{find_bin, LocalCluster, Options};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct RpcArgs {
    /// Timed round trips per operation and client.
    #[arg(long, default_value_t = 20000)]
    iters: usize,
    /// Servers in the local cluster.
    #[arg(long, default_value_t = 2)]
    servers: usize,
    /// Client process counts to measure (comma separated).
    #[arg(long, default_value = "1,4", value_delimiter = ',')]
    clients: Vec<usize>,
    /// Transports to measure (comma separated: shm, tcp).
    #[arg(long, default_value = "tcp,shm", value_delimiter = ',')]
    transports: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    #[arg(long)]
    cluster: String,
    #[arg(long)]
    iters: usize,
    #[arg(long)]
    rank: usize,
    #[arg(long, default_value = "none")]
    err_mode: String,
}

/// Transport → (UCX error mode, extra environment).
fn transport_env(t: &str) -> anyhow::Result<(&'static str, Vec<(String, String)>)> {
    match t {
        // shared memory needs error mode NONE; UCX picks sysv/posix/cma between local processes
        "shm" => Ok(("none", vec![])),
        // what crosses hosts: TCP only, with UCX peer error handling
        "tcp" => Ok(("peer", vec![("UCX_TLS".into(), "tcp".into())])),
        other => bail!("unknown transport {other:?} (shm or tcp)"),
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn run(a: RpcArgs) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let _ = find_bin("madfs-server");
    println!(
        "madfs-bench rpc: {} servers, {} timed round trips per op and client, UCX_NET_DEVICES=lo",
        a.servers, a.iters
    );
    println!(
        "{:<6} {:>7} {:>14} {:>14} {:>14} {:>14}",
        "net", "clients", "ping p50 µs", "ping p99 µs", "stat p50 µs", "stat p99 µs"
    );
    for t in &a.transports {
        let (mode, env) = transport_env(t)?;
        let cluster = LocalCluster::start(Options {
            servers: a.servers,
            err_mode: mode.into(),
            env: env.clone(),
            ..Default::default()
        })
        .context("starting servers")?;
        for &k in &a.clients {
            let mut children = vec![];
            for rank in 0..k {
                let mut cmd = Command::new(&me);
                cmd.arg("rpc-worker")
                    .arg("--cluster")
                    .arg(cluster.cluster_file())
                    .arg("--iters")
                    .arg(a.iters.to_string())
                    .arg("--rank")
                    .arg(rank.to_string())
                    .arg("--err-mode")
                    .arg(mode)
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdout(Stdio::piped());
                if std::env::var_os("UCX_NET_DEVICES").is_none() {
                    cmd.env("UCX_NET_DEVICES", "lo");
                }
                children.push(cmd.spawn()?);
            }
            let mut ping50 = vec![];
            let mut ping99 = vec![];
            let mut stat50 = vec![];
            let mut stat99 = vec![];
            for c in children {
                let out = c.wait_with_output()?;
                if !out.status.success() {
                    bail!("rpc worker failed ({})", out.status);
                }
                let text = String::from_utf8_lossy(&out.stdout);
                let v: Vec<u64> = text
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if v.len() != 4 {
                    bail!("bad worker output {text:?}");
                }
                ping50.push(v[0]);
                ping99.push(v[1]);
                stat50.push(v[2]);
                stat99.push(v[3]);
            }
            ping50.sort();
            stat50.sort();
            let us = |ns: u64| ns as f64 / 1000.0;
            println!(
                "{:<6} {:>7} {:>14.1} {:>14.1} {:>14.1} {:>14.1}",
                t,
                k,
                us(percentile(&ping50, 0.5)),
                us(*ping99.iter().max().unwrap_or(&0)),
                us(percentile(&stat50, 0.5)),
                us(*stat99.iter().max().unwrap_or(&0)),
            );
        }
        drop(cluster);
    }
    println!("(p50: median over client processes of each process's median; p99: worst process)");
    Ok(())
}

pub fn worker(a: WorkerArgs) -> anyhow::Result<()> {
    let mut cfg = ClientConfig::from_cluster_file(&a.cluster)?;
    cfg.ucx.err_mode =
        madfs_rpc::UcxSettings::parse_err_mode(&a.err_mode).map_err(anyhow::Error::msg)?;
    let c = Client::new(&cfg)?;
    let n = c.servers();
    let _ = c.mkdir("/rpcbench", 0o755);
    let path = format!("/rpcbench/f{}", a.rank);
    let f = c.open(
        &path,
        OpenFlags {
            create: true,
            mode: 0o644,
            ..Default::default()
        },
    )?;
    c.close(f)?;
    let warm = (a.iters / 10).max(100);
    for i in 0..warm {
        c.ping(i as u32 % n)?;
        c.stat(&path)?;
    }
    let mut ping = Vec::with_capacity(a.iters);
    for i in 0..a.iters {
        let t = Instant::now();
        c.ping(i as u32 % n)?;
        ping.push(t.elapsed().as_nanos() as u64);
    }
    let mut stat = Vec::with_capacity(a.iters);
    for _ in 0..a.iters {
        let t = Instant::now();
        c.stat(&path)?;
        stat.push(t.elapsed().as_nanos() as u64);
    }
    ping.sort_unstable();
    stat.sort_unstable();
    println!(
        "{} {} {} {}",
        percentile(&ping, 0.5),
        percentile(&ping, 0.99),
        percentile(&stat, 0.5),
        percentile(&stat, 0.99)
    );
    Ok(())
}
