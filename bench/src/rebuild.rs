//! `madfs-bench rebuild`: how fast a replicated cluster is back to R copies after one of its
//! servers dies for good and is removed (docs/operations.md, "Replacing a dead server"). A
//! local cluster of `--servers` (R = `--replication`) is filled with `--files` small files
//! and `--big-mib` of chunk data in 64 large files; server `--victim` is killed, marked
//! down, and removed (`madfs-ctl remove --wait`). Reported: what the survivors copied
//! (records and chunk bytes, from their logs), how long until every set had R copies again,
//! the rates, and that every entry is held R times again; then the server that took the
//! victim's slots is killed too and every file is read back and compared.

use crate::suite::membership::held_by;
use anyhow::{bail, Context};
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_cluster::{LocalCluster, Options};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct RebuildArgs {
    /// Servers of the local cluster.
    #[arg(long, default_value_t = 4)]
    servers: usize,
    /// Copies of every key.
    #[arg(long, default_value_t = 2)]
    replication: u32,
    /// Small files (3,901 bytes: inline, no chunk file) made before.
    #[arg(long, default_value_t = 20_000)]
    files: usize,
    /// MiB of chunk data made before, in 64 large files.
    #[arg(long, default_value_t = 2048)]
    big_mib: u64,
    /// MiB per second the copy of chunk data may take (`--resync-mib-s`; 0: unbounded).
    #[arg(long, default_value_t = 200)]
    resync_mib_s: u64,
    /// The server killed and removed.
    #[arg(long, default_value_t = 1)]
    victim: usize,
}

const SMALL: usize = 3901;

/// The bytes of small file `i` (its number in them: a misplaced copy shows).
fn small(i: usize) -> Vec<u8> {
    let tag = format!("{i:08}");
    tag.bytes().cycle().take(SMALL).collect()
}

/// The bytes of large file `i` at `at` (`n` of them): its number and the offset's MiB.
fn big(i: usize, at: u64, n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|k| ((at + k) >> 20) as u8 ^ (i as u8).wrapping_mul(37) ^ ((at + k) as u8))
        .collect()
}

/// Until every server of `on` has the map state `state` for server `s` in its status line.
fn until_state(cl: &LocalCluster, s: usize, state: &str, within: Duration) -> anyhow::Result<()> {
    let t = Instant::now();
    loop {
        let st = cl.ctl_status();
        let ok = st.lines().filter(|l| l.contains("states=")).all(|l| {
            l.split("states=")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.split(',').nth(s).map(|x| x == state))
                .unwrap_or(false)
        });
        if ok && st.contains("states=") {
            return Ok(());
        }
        if t.elapsed() > within {
            bail!("server {s} was not {state} within {within:?}:\n{st}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn run(a: RebuildArgs) -> anyhow::Result<()> {
    if a.replication < 2 || a.servers <= a.replication as usize || a.victim >= a.servers {
        bail!("needs --replication ≥ 2, more --servers than that, and a --victim among them");
    }
    // the clients' own messages (timeouts, failovers: MADFS_LOG) on stderr
    madfs_client::init_cli_logging();
    let mut cl = LocalCluster::start(Options {
        servers: a.servers,
        args: vec![
            "--replication".into(),
            a.replication.to_string(),
            "--resync-mib-s".into(),
            a.resync_mib_s.to_string(),
        ],
        ..Default::default()
    })
    .context("starting a local cluster")?;
    for s in 0..a.servers {
        until_state(&cl, s, "up", Duration::from_secs(30))?;
    }
    let cfg = ClientConfig::from_cluster_file(cl.cluster_file())?;
    let t = Instant::now();
    fill(&cfg, &a)?;
    println!(
        "madfs-bench rebuild: {} servers, R = {}, {} small files and {} MiB in 64 large files \
         made in {:.1} s; resync at {} MiB/s",
        a.servers,
        a.replication,
        a.files,
        a.big_mib,
        t.elapsed().as_secs_f64(),
        a.resync_mib_s
    );
    let all: Vec<usize> = (0..a.servers).collect();
    let before = held_by(&cl, &all)?;

    cl.kill(a.victim);
    let t = Instant::now();
    until_state(&cl, a.victim, "down", Duration::from_secs(30))?;
    println!(
        "server {} killed: down after {:.1} s; it held {} entries and {:.2} GiB",
        a.victim,
        t.elapsed().as_secs_f64(),
        before[a.victim].entries,
        before[a.victim].bytes as f64 / (1u64 << 30) as f64
    );
    let t = Instant::now();
    let victim = a.victim.to_string();
    let (ok, out) = cl.ctl(&["remove", &victim, "--wait", "3600"]);
    let took = t.elapsed().as_secs_f64();
    if !ok {
        bail!("madfs-ctl remove {victim}: {out}");
    }
    let rest: Vec<usize> = all.iter().copied().filter(|s| *s != a.victim).collect();
    let after = held_by(&cl, &rest)?;
    let (mut records, mut bytes) = (0u64, 0u64);
    for s in &rest {
        for l in cl.log(*s).lines().filter(|l| l.contains("rebuild: copied")) {
            // "… in 0.3 s (136 records, 26805929 bytes of chunks) …"
            let nums: Vec<u64> = l
                .split(['(', ' ', ','])
                .filter_map(|w| w.parse().ok())
                .collect();
            if let [r, b, ..] = nums[..] {
                records += r;
                bytes += b;
            }
            println!("  server {s}: {}", l.split("rebuild: ").nth(1).unwrap_or(l));
        }
    }
    let held_before: u64 = before.iter().map(|h| h.entries).sum();
    let held_after: u64 = after.iter().map(|h| h.entries).sum();
    println!(
        "removed and rebuilt in {took:.1} s: {records} records and {:.2} GiB copied, \
         {:.0} records/s, {:.2} GiB/s; entries held {held_before} before, {held_after} after",
        bytes as f64 / (1u64 << 30) as f64,
        records as f64 / took,
        bytes as f64 / (1u64 << 30) as f64 / took
    );
    if held_after != held_before {
        bail!("entries held {held_after} after the rebuild, {held_before} before");
    }

    // the server that took the victim's slots dies too: every file is there
    let second = rest
        .iter()
        .copied()
        .find(|s| *s > a.victim)
        .unwrap_or(rest[0]);
    cl.kill(second);
    until_state(&cl, second, "down", Duration::from_secs(30))?;
    let t = Instant::now();
    let checked = check(&cfg, &a)?;
    println!(
        "server {second} killed too: {checked} files read back and compared in {:.1} s, 0 errors",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn fill(cfg: &ClientConfig, a: &RebuildArgs) -> anyhow::Result<()> {
    let c = Client::new(cfg)?;
    let io = |e: madfs_client::Errno| anyhow::anyhow!("filling: {e}");
    for d in ["/s", "/big"] {
        c.mkdir(d, 0o755).map_err(io)?;
    }
    for i in 0..a.files {
        let mut f = c
            .open(&format!("/s/f{i}"), OpenFlags::create_trunc())
            .map_err(io)?;
        c.write(&mut f, 0, &small(i)).map_err(io)?;
        c.close(f).map_err(io)?;
    }
    let each = (a.big_mib << 20) / 64;
    for i in 0..64 {
        write_file(&c, &format!("/big/f{i}"), each, |at, n| big(i, at, n)).map_err(io)?;
    }
    Ok(())
}

/// Makes file `path` of `size` bytes, written in 4 MiB pieces (`piece(at, n)`: the `n`
/// bytes at `at`).
pub(crate) fn write_file(
    c: &Client,
    path: &str,
    size: u64,
    piece: impl Fn(u64, usize) -> Vec<u8>,
) -> Result<(), madfs_client::Errno> {
    let mut f = c.open(path, OpenFlags::create_trunc())?;
    let mut at = 0;
    while at < size {
        let n = (4usize << 20).min((size - at) as usize);
        c.write(&mut f, at, &piece(at, n))?;
        at += n as u64;
    }
    c.close(f)
}

/// Reads every file back through a new client and compares it; the count.
fn check(cfg: &ClientConfig, a: &RebuildArgs) -> anyhow::Result<usize> {
    let c = Client::new(cfg)?;
    let read = |p: &str| -> anyhow::Result<Vec<u8>> {
        let io = |e: madfs_client::Errno| anyhow::anyhow!("{p}: {e}");
        let f = c.open(p, OpenFlags::default()).map_err(io)?;
        let mut out = vec![0u8; f.size() as usize];
        let n = c.read(&f, 0, &mut out).map_err(io)?;
        out.truncate(n);
        c.close(f).map_err(io)?;
        Ok(out)
    };
    for i in 0..a.files {
        if read(&format!("/s/f{i}"))? != small(i) {
            bail!("/s/f{i} reads back wrong");
        }
    }
    let each = (a.big_mib << 20) / 64;
    for i in 0..64 {
        if read(&format!("/big/f{i}"))? != big(i, 0, each as usize) {
            bail!("/big/f{i} reads back wrong");
        }
    }
    Ok(a.files + 64)
}
