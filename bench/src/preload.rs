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
    /// CPU seconds per variant for each program that never touches the mount (rounds of
    /// plain, preloaded, plain: at least 21, at most 2,001); more rounds narrow the
    /// confidence intervals.
    #[arg(long, default_value_t = 2.0)]
    program_seconds: f64,
    /// Preload the build's own `libmadfs.so` instead of an installed copy (see
    /// [`installed_copy`]).
    #[arg(long)]
    as_built: bool,
    /// Run the programs that never touch the mount (plain and preloaded alike) on this CPU
    /// only: a pair of runs then never straddles two cores of different speed, which on a
    /// many-core node is most of the noise (docs/performance.md).
    #[arg(long)]
    cpu: Option<usize>,
}

/// The preload libraries as an install leaves them: copied with `write(2)` into `dir`. The
/// build's output is written by rust-lld through a shared mapping and sits in the page cache
/// in single pages; a copy sits in large folios where the kernel and file system have them,
/// and every process start maps it faster (docs/performance.md, docs/operations.md).
fn installed_copy(dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    for name in ["libmadfs.so", "libmadfs_core.so"] {
        let to = dir.join(name);
        std::fs::write(&to, std::fs::read(find_bin(name))?)
            .with_context(|| format!("copying {name}"))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(dir.join("libmadfs.so"))
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

/// Pins the calling thread, and so the programs it starts from now on, to `cpu`.
fn pin_to_cpu(cpu: usize) -> anyhow::Result<()> {
    // SAFETY: an all-zero cpu_set_t is an empty set; CPU_SET and sched_setaffinity only
    // write and read that set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            bail!("--cpu {cpu}: no such CPU");
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!("--cpu {cpu}: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What [`time_cmd`] reports for one program, in ms and %.
struct Timing {
    /// Medians of the wall time, plain and preloaded.
    wall: [f64; 2],
    /// Medians of the CPU time, plain and preloaded.
    cpu: [f64; 2],
    /// CPU overhead from the minima of both.
    cpu_min_pct: f64,
    /// CPU overhead as the median over rounds of preloaded / the mean of the plain runs
    /// just before and just after it, with its 95 % confidence interval.
    cpu_paired: Paired,
    /// The second plain run of each round against the first: what this machine's noise
    /// alone makes of "no overhead" (an A/A comparison), min and paired.
    noise_min_pct: f64,
    noise_paired: Paired,
    runs: usize,
}

/// A median of per-round ratios, in % over 1, with a distribution-free 95 % confidence
/// interval for it (order statistics of the sorted ratios, binomial normal approximation:
/// the true median lies between the ratios ranked n/2 ∓ 0.98·√n).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Paired {
    median: f64,
    lo: f64,
    hi: f64,
}

impl Paired {
    fn of(mut ratios: Vec<f64>) -> Paired {
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        if n == 0 {
            return Paired {
                median: f64::NAN,
                lo: f64::NAN,
                hi: f64::NAN,
            };
        }
        let half = 0.98 * (n as f64).sqrt();
        let lo = ((n as f64 / 2.0 - half).floor().max(0.0)) as usize;
        let hi = ((n as f64 / 2.0 + half).ceil() as usize).min(n - 1);
        let pct = |r: f64| (r - 1.0) * 100.0;
        Paired {
            median: pct(ratios[n / 2]),
            lo: pct(ratios[lo]),
            hi: pct(ratios[hi]),
        }
    }
}

/// CPU of `b` over `a` in % from the minima of both.
fn min_overhead(a: &[(u64, u64)], b: &[(u64, u64)]) -> f64 {
    let min = |v: &[(u64, u64)]| v.iter().map(|x| x.1).min().unwrap_or(0) as f64;
    (min(b) / min(a).max(1.0) - 1.0) * 100.0
}

/// Rounds of `argv` plain, preloaded and plain again (this VM's speed drifts; runs side by
/// side see the same drift), as many as fit in about `budget` of CPU per variant, at least
/// 21 and at most 2,001. Besides minima and medians, the median over rounds of the
/// preloaded run over the mean of the two plain runs around it: a drift, even one within
/// the round, cancels out, and the median ignores the rounds a neighbour's burst hit. The
/// second plain run against the first gives the noise floor the overhead must be read
/// against.
fn time_cmd(lib: &std::path::Path, argv: &[&str], budget: Duration) -> anyhow::Result<Timing> {
    let first = time_cmd_once(None, argv)?;
    let runs = (budget.as_nanos() as u64 / first.1.max(1)).clamp(21, 2001) as usize;
    let (mut plain, mut pre, mut plain2) = (vec![], vec![], vec![]);
    for _ in 0..runs {
        plain.push(time_cmd_once(None, argv)?);
        pre.push(time_cmd_once(Some(lib), argv)?);
        plain2.push(time_cmd_once(None, argv)?);
    }
    let med = |v: &[(u64, u64)], f: fn(&(u64, u64)) -> u64| median(v.iter().map(f).collect());
    // CPU of each round's plain, preloaded and second plain run (≥ 1 ns: no division by 0)
    let cpu = |i: usize| [plain[i], pre[i], plain2[i]].map(|r| r.1.max(1) as f64);
    let cpu_paired = Paired::of(
        (0..runs)
            .map(cpu)
            .map(|[a, p, b]| p / ((a + b) / 2.0))
            .collect(),
    );
    let noise_paired = Paired::of((0..runs).map(cpu).map(|[a, _, b]| b / a).collect());
    Ok(Timing {
        // median() divides by 1000: ns -> µs
        wall: [med(&plain, |x| x.0) / 1e3, med(&pre, |x| x.0) / 1e3],
        cpu: [med(&plain, |x| x.1) / 1e3, med(&pre, |x| x.1) / 1e3],
        cpu_min_pct: min_overhead(&plain, &pre),
        cpu_paired,
        noise_min_pct: min_overhead(&plain, &plain2),
        noise_paired,
        runs,
    })
}

pub fn run(a: PreloadArgs) -> anyhow::Result<()> {
    let cl = LocalCluster::start(Options {
        servers: 2,
        ..Default::default()
    })
    .context("starting servers")?;
    let lib = if a.as_built {
        find_bin("libmadfs.so")
    } else {
        installed_copy(cl.root())?
    };
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
        "madfs-bench preload: 2 servers, shared memory, medians of {} operations; {} rounds; {}",
        a.iters,
        rounds.len(),
        if a.as_built {
            format!("the build's {}", lib.display())
        } else {
            "an installed copy of libmadfs.so".into()
        }
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
        "(21–2,001 rounds of plain, preloaded, plain; wall and CPU: medians; CPU = user + \
         system of the child; paired: median over rounds of preloaded / the mean of the plain \
         runs around it, [its 95 % confidence interval]; A/A: the second plain run against \
         the first, this machine's noise)"
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
    if let Some(cpu) = a.cpu {
        pin_to_cpu(cpu)?;
        println!("(programs, plain and preloaded, pinned to CPU {cpu})");
    }
    println!(
        "{:<30} {:>19} {:>19} {:>5} {:>7} {:>21} {:>7} {:>21}",
        "program",
        "wall ms plain/pre",
        "CPU ms plain/pre",
        "runs",
        "CPU +%",
        "paired [95 % CI]",
        "A/A min",
        "A/A paired [95 % CI]"
    );
    let budget = Duration::from_secs_f64(a.program_seconds.max(0.0));
    for argv in programs.iter().map(Vec::as_slice) {
        let t = time_cmd(&lib, argv, budget)?;
        let name: String = argv
            .iter()
            .map(|a| a.rsplit('/').next().unwrap_or(a))
            .collect::<Vec<_>>()
            .join(" ");
        let paired = |p: Paired| format!("{:+.1} [{:+.1}, {:+.1}]", p.median, p.lo, p.hi);
        println!(
            "{:<30} {:>8.2} / {:<8.2} {:>8.2} / {:<8.2} {:>5} {:>+7.1} {:>21} {:>+7.1} {:>21}",
            name.chars().take(30).collect::<String>(),
            t.wall[0],
            t.wall[1],
            t.cpu[0],
            t.cpu[1],
            t.runs,
            t.cpu_min_pct,
            paired(t.cpu_paired),
            t.noise_min_pct,
            paired(t.noise_paired)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_median_and_its_interval_come_from_order_statistics() {
        // ratios 1.00, 1.01, …, 1.99 in reverse order: the median is the 51st (1.50); the
        // interval runs from rank 50 - 9.8 (rounded out: 40) to 50 + 9.8 (60)
        let p = Paired::of((0..100).rev().map(|i| 1.0 + i as f64 / 100.0).collect());
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(p.median, 50.0), "{p:?}");
        assert!(close(p.lo, 40.0) && close(p.hi, 60.0), "{p:?}");
        // few rounds: the interval is clamped to the extremes
        let p = Paired::of(vec![1.02, 0.98, 1.0]);
        assert!(
            close(p.median, 0.0) && close(p.lo, -2.0) && close(p.hi, 2.0),
            "{p:?}"
        );
        assert!(Paired::of(vec![]).median.is_nan());
    }
}
