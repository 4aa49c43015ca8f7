//! `madfs-bench preload`: what the LD_PRELOAD layer costs.
//! * stat and open+close latency through `libmadfs.so` next to the same operations through the
//!   client library directly, and a raw UCX round trip (`ping`), on shared memory;
//! * the overhead on programs that never touch the mount (a syscall loop and `find`).

use anyhow::{bail, Context};
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_cluster::{find_bin, LocalCluster, Options};
use std::ffi::CString;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct PreloadArgs {
    /// Timed operations per measurement.
    #[arg(long, default_value_t = 20000)]
    iters: usize,
    /// Rounds of (ping, library, preload, ping) measurements; each round's ratios use the
    /// mean of the pings around it (this VM's speed drifts from second to second).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

#[derive(clap::Args, Debug)]
pub struct PreloadWorkerArgs {
    /// `madfs` (stat/open+close of a madfs path) or `local` (syscalls on local paths).
    mode: String,
    #[arg(long)]
    iters: usize,
}

fn median(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2] as f64 / 1000.0
}

fn timed(iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters / 10 {
        f();
    }
    let mut v = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_nanos() as u64);
    }
    median(v)
}

/// Runs inside the measured process (with or without LD_PRELOAD): prints medians in µs.
pub fn worker(a: PreloadWorkerArgs) -> anyhow::Result<()> {
    match a.mode.as_str() {
        "madfs" => {
            let p = CString::new("/madfs/bench/f")?;
            // SAFETY: plain libc calls on a valid path and buffer.
            let stat = timed(a.iters, || unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                assert_eq!(libc::stat(p.as_ptr(), &mut st), 0);
            });
            // SAFETY: as above.
            let open = timed(a.iters, || unsafe {
                let fd = libc::open(p.as_ptr(), libc::O_RDONLY);
                assert!(fd >= 0);
                libc::close(fd);
            });
            println!("{stat} {open}");
        }
        "local" => {
            let p = CString::new("/tmp")?;
            // SAFETY: as above.
            let stat = timed(a.iters, || unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                libc::stat(p.as_ptr(), &mut st);
            });
            println!("{stat}");
        }
        m => bail!("unknown worker mode {m}"),
    }
    Ok(())
}

fn measure(
    lib: Option<&std::path::Path>,
    cluster: &std::path::Path,
    mode: &str,
    iters: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["preload-worker", mode, "--iters", &iters.to_string()])
        .env("MADFS_CLUSTER", cluster)
        .env("UCX_NET_DEVICES", "lo");
    if let Some(l) = lib {
        cmd.env("LD_PRELOAD", l);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("worker failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect())
}

/// One run of `argv` (with the preload library if `lib`): (wall, CPU = user + system) in
/// nanoseconds. The CPU time of the child comes from `wait4`; it is what the preload adds
/// to, and it varies far less on this VM than the wall clock.
fn time_cmd_once(lib: Option<&std::path::Path>, argv: &[&str]) -> anyhow::Result<(u64, u64)> {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]).stdout(std::process::Stdio::null());
    if let Some(l) = lib {
        cmd.env("LD_PRELOAD", l)
            .env("MADFS_CLUSTER", "/nonexistent");
    }
    let t = Instant::now();
    let child = cmd.spawn()?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 reaps our own child and fills both.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above (the Child is not waited for again: it is dropped unreaped-by-std).
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    let wall = t.elapsed().as_nanos() as u64;
    if r < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{argv:?} failed");
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    Ok((wall, tv(ru.ru_utime) + tv(ru.ru_stime)))
}

/// What [`time_cmd`] reports for one program, in ms and %.
struct Timing {
    /// Medians of the wall time, plain and preloaded.
    wall: [f64; 2],
    /// Medians of the CPU time, plain and preloaded.
    cpu: [f64; 2],
    /// CPU overhead from the minima of both.
    cpu_min_pct: f64,
    /// CPU overhead as the median over runs of (preloaded / the plain run just before).
    cpu_paired_pct: f64,
    /// The same two figures for a second plain run in each round against the first: what
    /// this machine's noise alone makes of "no overhead" (an A/A comparison).
    noise_min_pct: f64,
    noise_paired_pct: f64,
    runs: usize,
}

/// CPU of `b` over `a` in %: from the minima, and as the median of the per-round ratios.
fn overhead(a: &[(u64, u64)], b: &[(u64, u64)]) -> (f64, f64) {
    let min = |v: &[(u64, u64)]| v.iter().map(|x| x.1).min().unwrap_or(0) as f64;
    let ratios: Vec<u64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| y.1 * 1_000_000 / x.1.max(1))
        .collect();
    // median() divides by 1000: the ratios (x 1e6) -> x 1e3
    (
        (min(b) / min(a).max(1.0) - 1.0) * 100.0,
        (median(ratios) / 1e3 - 1.0) * 100.0,
    )
}

/// Rounds of `argv` plain, preloaded and plain again (this VM's speed drifts; runs side by
/// side see the same drift), as many as fit in about `budget` of CPU per variant, at least
/// 21 and at most 201. Besides minima and medians, the median of the per-round ratios: a
/// drift between rounds cancels out, and the median ignores the rounds a neighbour's burst
/// hit. The second plain run gives the noise floor the overhead must be read against.
fn time_cmd(lib: &std::path::Path, argv: &[&str], budget: Duration) -> anyhow::Result<Timing> {
    let first = time_cmd_once(None, argv)?;
    let runs = (budget.as_nanos() as u64 / first.1.max(1)).clamp(21, 201) as usize;
    let (mut plain, mut pre, mut plain2) = (vec![], vec![], vec![]);
    for _ in 0..runs {
        plain.push(time_cmd_once(None, argv)?);
        pre.push(time_cmd_once(Some(lib), argv)?);
        plain2.push(time_cmd_once(None, argv)?);
    }
    let med = |v: &[(u64, u64)], f: fn(&(u64, u64)) -> u64| median(v.iter().map(f).collect());
    let (cpu_min_pct, cpu_paired_pct) = overhead(&plain, &pre);
    let (noise_min_pct, noise_paired_pct) = overhead(&plain, &plain2);
    Ok(Timing {
        // median() divides by 1000: ns -> µs
        wall: [med(&plain, |x| x.0) / 1e3, med(&pre, |x| x.0) / 1e3],
        cpu: [med(&plain, |x| x.1) / 1e3, med(&pre, |x| x.1) / 1e3],
        cpu_min_pct,
        cpu_paired_pct,
        noise_min_pct,
        noise_paired_pct,
        runs,
    })
}

pub fn run(a: PreloadArgs) -> anyhow::Result<()> {
    let lib = find_bin("libmadfs.so");
    let cl = LocalCluster::start(Options {
        servers: 2,
        ..Default::default()
    })
    .context("starting servers")?;
    let mut cfg = ClientConfig::from_cluster_file(cl.cluster_file())?;
    cfg.ucx.err_mode = madfs_rpc::ErrorMode::None;
    let c = Client::new(&cfg)?;
    let _ = c.mkdir("/bench", 0o755);
    let f = c.open(
        "/bench/f",
        OpenFlags {
            create: true,
            mode: 0o644,
            ..Default::default()
        },
    )?;
    c.close(f)?;
    let meta = c.meta_of("/bench/f");
    // per round: ping, stat, open+close (library), stat, open+close (preload)
    let mut rounds: Vec<[f64; 5]> = vec![];
    for _ in 0..a.rounds.max(1) {
        let p0 = timed(a.iters, || c.ping(meta).unwrap());
        let stat = timed(a.iters, || {
            c.stat("/bench/f").unwrap();
        });
        let open = timed(a.iters, || {
            let f = c.open("/bench/f", OpenFlags::default()).unwrap();
            c.close(f).unwrap();
        });
        let pre = measure(Some(&lib), &cl.cluster_file(), "madfs", a.iters)?;
        let p1 = timed(a.iters, || c.ping(meta).unwrap());
        rounds.push([(p0 + p1) / 2.0, stat, open, pre[0], pre[1]]);
    }
    let local_plain = measure(None, &cl.cluster_file(), "local", a.iters * 5)?;
    let local_pre = measure(Some(&lib), &cl.cluster_file(), "local", a.iters * 5)?;
    let mid = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "madfs-bench preload: 2 servers, shared memory, medians of {} operations; {} rounds",
        a.iters,
        rounds.len()
    );
    println!(
        "{:<38} {:>8} {:>8} {:>14}",
        "operation", "µs", "× ping", "× ping, rounds"
    );
    for (col, name) in [
        "UCX round trip (ping, client lib)",
        "stat, client library",
        "open+close, client library",
        "stat(2) through libmadfs.so",
        "open(2)+close(2) through libmadfs.so",
    ]
    .iter()
    .enumerate()
    {
        let us = mid(rounds.iter().map(|r| r[col]).collect());
        let ratios: Vec<f64> = rounds.iter().map(|r| r[col] / r[0]).collect();
        let (lo, hi) = (
            ratios.iter().copied().fold(f64::MAX, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
        );
        println!(
            "{name:<38} {us:>8.2} {:>8.2} {:>6.2}–{:<6.2}",
            mid(ratios),
            lo,
            hi
        );
    }
    println!();
    println!("programs that never touch the mount:");
    println!(
        "{:<34} {:>10.3} µs plain, {:.3} µs preloaded ({:+.1} %)",
        "stat(\"/tmp\") syscall",
        local_plain[0],
        local_pre[0],
        (local_pre[0] / local_plain[0] - 1.0) * 100.0
    );
    println!(
        "(21–201 rounds of plain, preloaded, plain; wall and CPU: medians; CPU = user + system \
         of the child; paired: median over rounds of preloaded / the plain run before it; \
         A/A: the second plain run against the first, this machine's noise)"
    );
    // programs that do work between their syscalls: a 64 MiB file to hash (in the page
    // cache), a compile, a Python loop
    let tmp = tempfile::Builder::new()
        .prefix("madfs-bench-preload-")
        .tempdir_in("/tmp")?;
    let data = tmp.path().join("data");
    std::fs::write(
        &data,
        (0..64u32 << 20)
            .map(|i| i.wrapping_mul(2_654_435_761) as u8)
            .collect::<Vec<u8>>(),
    )?;
    let src = tmp.path().join("t.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\
         int main(int c, char **v) { char b[64]; snprintf(b, sizeof b, \"%d\", c); \
         puts(strlen(b) > 1 ? v[0] : b); return EXIT_SUCCESS; }\n",
    )?;
    let obj = tmp.path().join("t.o");
    let (data, src, obj) = (
        data.to_string_lossy().into_owned(),
        src.to_string_lossy().into_owned(),
        obj.to_string_lossy().into_owned(),
    );
    let mut programs: Vec<Vec<&str>> = vec![
        vec!["/bin/true"],
        vec!["/usr/bin/find", "/usr/include"],
        vec!["/bin/tar", "-C", "/usr", "-cf", "/dev/null", "include"],
        vec!["/usr/bin/sha256sum", &data],
        vec![
            "/usr/bin/python3",
            "-c",
            "sum(i * i for i in range(2_000_000))",
        ],
    ];
    if std::path::Path::new("/usr/bin/cc").exists() {
        programs.push(vec!["/usr/bin/cc", "-O2", "-c", &src, "-o", &obj]);
    }
    println!(
        "{:<34} {:>22} {:>22} {:>5} {:>16} {:>16}",
        "program",
        "wall ms plain/preload",
        "CPU ms plain/preload",
        "runs",
        "CPU +% min/paired",
        "A/A % min/paired"
    );
    for argv in programs.iter().map(Vec::as_slice) {
        let t = time_cmd(&lib, argv, Duration::from_secs(2))?;
        let name: String = argv
            .iter()
            .map(|a| a.rsplit('/').next().unwrap_or(a))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{:<34} {:>10.2} / {:<9.2} {:>10.2} / {:<9.2} {:>5} {:>+7.1} / {:<+7.1} {:>+7.1} / {:<+7.1}",
            name.chars().take(34).collect::<String>(),
            t.wall[0],
            t.wall[1],
            t.cpu[0],
            t.cpu[1],
            t.runs,
            t.cpu_min_pct,
            t.cpu_paired_pct,
            t.noise_min_pct,
            t.noise_paired_pct
        );
    }
    Ok(())
}
