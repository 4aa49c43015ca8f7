//! `madfs-bench find`: IO500's find (`-newer STAMP -size 3901c -name '*01*'`) over a large
//! tree, three ways:
//! * `madfs-find` — the filter runs on every server over its own keys (one prefix scan each);
//! * GNU `find` through `LD_PRELOAD=libmadfs.so` — a directory walk with a `stat` per entry;
//! * a pfind-style walk through the client library — P ranks each list every directory and
//!   `stat` their share (`index % P == rank`) of the entries whose name matches.
//!
//! Trees, created through the client library by P worker processes:
//! * `hard` (mdtest-hard-like): `/findbench/hard/file.<rank>.<i>`, N files of 3,901 bytes in
//!   one directory;
//! * `easy` (mdtest-easy-like): `/findbench/easy/r<rank>/file.<i>`, N/P empty files per rank
//!   directory (so `-size 3901c` matches nothing there, as in IO500).
//!
//! The three must find the same files (the run fails otherwise); the tree is removed at the end.

use anyhow::{bail, Context};
use madfs_client::{Client, ClientConfig, FileSystem, FindFilter, OpenFlags};
use madfs_cluster::{LocalCluster, Options};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the trees live (madfs path).
const ROOT: &str = "/findbench";
/// Mount point of the preload library and of `madfs-find` paths.
const MOUNT: &str = "/madfs";
/// IO500's find filter.
const SIZE: u64 = 3901;
const NAME: &str = "*01*";
/// Call deadline for the bench's clients unless `MADFS_TIMEOUT_MS` says otherwise: listing a
/// directory of a million entries is one call and may take longer than the default 15 s.
const TIMEOUT_MS: u64 = 300_000;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One directory holding every file (mdtest-hard-like, 3,901-byte files).
    Hard,
    /// One directory per rank (mdtest-easy-like, empty files).
    Easy,
    /// Both, one after the other.
    Both,
}

#[derive(clap::Args, Debug)]
pub struct FindArgs {
    /// Files in each tree.
    #[arg(long, default_value_t = 1_000_000)]
    files: usize,
    /// Worker processes (ranks) for creation, the pfind-style walk and removal.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// Cluster file of running servers (default: start 2 local servers).
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Which tree(s) to search.
    #[arg(long, value_enum, default_value_t = Layout::Both)]
    layout: Layout,
    /// Skip GNU find through the preload library (slow on large trees).
    #[arg(long)]
    skip_gnu: bool,
}

#[derive(clap::Args, Debug)]
pub struct FindWorkerArgs {
    /// create | walk | remove
    phase: String,
    /// hard | easy
    layout: String,
    rank: usize,
    ranks: usize,
    /// Files in the whole tree.
    files: usize,
    #[arg(long)]
    cluster: PathBuf,
    /// walk: the stamp's mtime, ns.
    #[arg(long, default_value_t = 0)]
    newer_ns: i64,
}

fn timeout_ms() -> u64 {
    std::env::var("MADFS_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(TIMEOUT_MS)
}

fn client(cluster: &Path) -> anyhow::Result<Client> {
    let mut cfg = ClientConfig::from_cluster_file(cluster)?;
    cfg.apply_env().map_err(anyhow::Error::msg)?;
    cfg.timeout = Duration::from_millis(timeout_ms().max(1));
    // creation as mdtest does it: close without fsync (a local close does not fsync either)
    cfg.close_sync = false;
    Ok(Client::new(&cfg)?)
}

/// Files of rank `rank` when `files` are shared by `ranks`.
fn share(files: usize, ranks: usize, rank: usize) -> usize {
    files / ranks + usize::from(rank < files % ranks)
}

fn layout_dir(layout: &str) -> String {
    format!("{ROOT}/{layout}")
}

/// Madfs path of file `i` of `rank`.
fn file_path(layout: &str, rank: usize, i: usize) -> String {
    match layout {
        "hard" => format!("{ROOT}/hard/file.{rank}.{i}"),
        _ => format!("{ROOT}/easy/r{rank}/file.{i}"),
    }
}

/// The filter every method applies.
fn filter(newer_ns: i64) -> FindFilter<'static> {
    FindFilter {
        name: Some(NAME),
        size: Some((SIZE, 1)),
        newer_than: Some(newer_ns),
        kind: None,
        pending: false,
    }
}

/// One worker process: runs a phase, prints `seconds matched examined`.
pub fn worker(a: FindWorkerArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let c = client(&a.cluster)?;
    let layout = a.layout.as_str();
    let n = share(a.files, a.ranks, a.rank);
    let (mut matched, mut examined) = (0u64, 0u64);
    match a.phase.as_str() {
        "create" => {
            if layout == "easy" {
                c.mkdir(&format!("{ROOT}/easy/r{}", a.rank), 0o755)?;
            }
            let buf = vec![7u8; SIZE as usize];
            let flags = OpenFlags {
                create: true,
                excl: true,
                mode: 0o644,
                ..Default::default()
            };
            for i in 0..n {
                let path = file_path(layout, a.rank, i);
                let mut f = c
                    .open(&path, flags)
                    .with_context(|| format!("create {path}"))?;
                if layout == "hard" {
                    c.write(&mut f, 0, &buf)?;
                }
                c.close(f)?;
            }
        }
        "walk" => {
            // pfind-like: every rank lists every directory; rank r examines entries k ≡ r (mod P)
            // and stats those whose name matches
            let root = layout_dir(layout);
            let f = filter(a.newer_ns);
            let name_ok = |name: &str| f.name.is_none_or(|p| madfs_proto::fnmatch(p, name));
            // the start directory is a candidate too (as for find)
            if a.rank == 0 {
                examined += 1;
                let name = root.rsplit('/').next().unwrap_or("");
                if name_ok(name) && f.matches(name, &c.stat(&root)?) {
                    matched += 1;
                }
            }
            let mut k = 0usize;
            let mut stack = vec![root];
            while let Some(d) = stack.pop() {
                for e in c.readdir(&d).with_context(|| format!("readdir {d}"))? {
                    let mine = k % a.ranks == a.rank;
                    k += 1;
                    let is_dir = e.kind == libc::S_IFDIR;
                    if is_dir {
                        stack.push(format!("{d}/{}", e.name));
                    }
                    if !mine {
                        continue;
                    }
                    examined += 1;
                    if name_ok(&e.name) {
                        let path = format!("{d}/{}", e.name);
                        let attr = c.stat(&path).with_context(|| format!("stat {path}"))?;
                        if f.matches(&e.name, &attr) {
                            matched += 1;
                        }
                    }
                }
            }
        }
        "remove" => {
            for i in 0..n {
                let path = file_path(layout, a.rank, i);
                c.unlink(&path).with_context(|| format!("unlink {path}"))?;
            }
            if layout == "easy" {
                c.rmdir(&format!("{ROOT}/easy/r{}", a.rank))?;
            }
        }
        p => bail!("unknown phase {p}"),
    }
    println!("{} {matched} {examined}", t0.elapsed().as_secs_f64());
    Ok(())
}

struct Ctx {
    me: PathBuf,
    cluster: PathBuf,
    ranks: usize,
    files: usize,
}

/// What the ranks of one phase reported together.
struct PhaseOut {
    /// Slowest rank, seconds.
    secs: f64,
    matched: u64,
    examined: u64,
}

/// Environment for every process the bench starts: loopback UCX, a long call deadline.
fn bench_env(cmd: &mut Command) {
    if std::env::var_os("UCX_NET_DEVICES").is_none() {
        cmd.env("UCX_NET_DEVICES", "lo");
    }
    if std::env::var_os("MADFS_TIMEOUT_MS").is_none() {
        cmd.env("MADFS_TIMEOUT_MS", TIMEOUT_MS.to_string());
    }
}

impl Ctx {
    fn spawn(
        &self,
        phase: &str,
        layout: &str,
        rank: usize,
        newer_ns: i64,
    ) -> anyhow::Result<Child> {
        let mut cmd = Command::new(&self.me);
        cmd.args([
            "find-worker",
            phase,
            layout,
            &rank.to_string(),
            &self.ranks.to_string(),
            &self.files.to_string(),
        ])
        .arg("--cluster")
        .arg(&self.cluster)
        .arg("--newer-ns")
        .arg(newer_ns.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
        bench_env(&mut cmd);
        Ok(cmd.spawn()?)
    }

    /// Runs every rank of a phase at once.
    fn phase(&self, phase: &str, layout: &str, newer_ns: i64) -> anyhow::Result<PhaseOut> {
        let kids: Vec<Child> = (0..self.ranks)
            .map(|r| self.spawn(phase, layout, r, newer_ns))
            .collect::<anyhow::Result<_>>()?;
        let mut out = PhaseOut {
            secs: 0.0,
            matched: 0,
            examined: 0,
        };
        let mut failed = None;
        for (r, k) in kids.into_iter().enumerate() {
            let o = k.wait_with_output()?;
            if !o.status.success() {
                failed.get_or_insert(format!("{phase} {layout}: rank {r} failed ({})", o.status));
                continue;
            }
            let s = String::from_utf8_lossy(&o.stdout);
            let v: Vec<&str> = s.split_whitespace().collect();
            let [secs, matched, examined] = v[..] else {
                bail!("{phase} {layout}: rank {r} printed {s:?}");
            };
            out.secs = out.secs.max(secs.parse()?);
            out.matched += matched.parse::<u64>()?;
            out.examined += examined.parse::<u64>()?;
        }
        if let Some(e) = failed {
            bail!(e);
        }
        Ok(out)
    }
}

/// Removes a leftover tree (sequentially, through one client).
fn rm_tree(c: &Client, path: &str) -> anyhow::Result<u64> {
    let mut n = 0;
    for e in c.readdir(path)? {
        let p = format!("{path}/{}", e.name);
        if e.kind == libc::S_IFDIR {
            n += rm_tree(c, &p)?;
        } else {
            c.unlink(&p).with_context(|| format!("unlink {p}"))?;
            n += 1;
        }
    }
    c.rmdir(path).with_context(|| format!("rmdir {path}"))?;
    Ok(n + 1)
}

/// The last lines of a child's stderr, for error messages.
fn tail(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

fn count_lines(b: &[u8]) -> u64 {
    b.iter().filter(|&&c| c == b'\n').count() as u64
}

/// Runs a find program over the layout's tree with IO500's filter (under the preload when
/// `preload` is given); returns seconds from spawn to exit and the output (success checked).
fn timed_find(
    program: &Path,
    preload: Option<&Path>,
    cluster: &Path,
    layout: &str,
) -> anyhow::Result<(f64, std::process::Output)> {
    let mut cmd = Command::new(program);
    cmd.arg(format!("{MOUNT}{ROOT}/{layout}"))
        .args(["-newer", &format!("{MOUNT}{ROOT}/{layout}.stamp")])
        .args(["-size", &format!("{SIZE}c"), "-name", NAME])
        .env("MADFS_CLUSTER", cluster)
        .env("MADFS_MOUNT", MOUNT)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match preload {
        Some(p) => cmd.env("LD_PRELOAD", p),
        None => cmd.env_remove("LD_PRELOAD"),
    };
    bench_env(&mut cmd);
    let t0 = Instant::now();
    let out = cmd.spawn()?.wait_with_output()?;
    let secs = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            program.display(),
            out.status,
            tail(&out.stderr)
        );
    }
    Ok((secs, out))
}

/// `madfs-find`: returns (seconds, matched, examined) from its `MATCHED x/y` line.
fn run_madfs_find(find: &Path, cluster: &Path, layout: &str) -> anyhow::Result<(f64, u64, u64)> {
    let (secs, out) = timed_find(find, None, cluster, layout)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout.lines().count() as u64;
    let last = stdout.lines().last().unwrap_or("");
    let (x, y) = last
        .strip_prefix("MATCHED ")
        .and_then(|r| r.split_once('/'))
        .with_context(|| format!("madfs-find: last line {last:?}, expected MATCHED x/y"))?;
    let (x, y): (u64, u64) = (x.parse()?, y.parse()?);
    if lines != x + 1 {
        bail!("madfs-find printed {} paths but MATCHED {x}", lines - 1);
    }
    Ok((secs, x, y))
}

/// GNU find through the preload library: returns (seconds, matches).
fn run_gnu_find(preload: &Path, cluster: &Path, layout: &str) -> anyhow::Result<(f64, u64)> {
    let (secs, out) = timed_find(Path::new("/usr/bin/find"), Some(preload), cluster, layout)?;
    if !out.stderr.is_empty() {
        eprintln!("GNU find stderr:\n{}", tail(&out.stderr));
    }
    Ok((secs, count_lines(&out.stdout)))
}

/// One measured way of running the find.
struct Row {
    method: &'static str,
    secs: f64,
    matches: u64,
}

/// Creates, searches (three ways) and removes one tree; returns its table rows.
fn bench_layout(
    ctx: &Ctx,
    c: &Client,
    layout: &str,
    skip_gnu: bool,
) -> anyhow::Result<(u64, Vec<Row>)> {
    let (files, ranks) = (ctx.files, ctx.ranks);
    let dir = layout_dir(layout);
    c.mkdir(&dir, 0o755)?;
    let stamp = format!("{ROOT}/{layout}.stamp");
    c.close(c.open(&stamp, OpenFlags::create_trunc())?)?;
    let newer_ns = c.stat(&stamp)?.mtime;
    std::thread::sleep(Duration::from_millis(50));

    let made = ctx.phase("create", layout, 0)?;
    let dirs = if layout == "easy" { ranks } else { 0 };
    println!(
        "{layout}: created {files} files{} with {ranks} ranks in {:.2} s: {:.0} creates/s",
        if dirs > 0 {
            format!(" in {dirs} directories")
        } else {
            String::new()
        },
        made.secs,
        files as f64 / made.secs
    );
    // what the filter must find: 3,901-byte files (hard only) whose name contains "01"
    let expected = if layout == "hard" {
        (0..ranks)
            .map(|r| {
                (0..share(files, ranks, r))
                    .filter(|i| format!("file.{r}.{i}").contains("01"))
                    .count() as u64
            })
            .sum()
    } else {
        0
    };
    // entries in the tree: the start directory, the rank directories, the files
    let entries = (1 + dirs + files) as u64;

    let me = &ctx.me;
    let mut rows = vec![];
    let (secs, matches, examined) =
        run_madfs_find(&me.with_file_name("madfs-find"), &ctx.cluster, layout)?;
    println!("{layout}: madfs-find {secs:.3} s, MATCHED {matches}/{examined}");
    if examined != entries {
        println!("{layout}: note: madfs-find examined {examined} entries, the tree has {entries}");
    }
    rows.push(Row {
        method: "madfs-find",
        secs,
        matches,
    });
    if !skip_gnu {
        let (secs, matches) =
            run_gnu_find(&me.with_file_name("libmadfs.so"), &ctx.cluster, layout)?;
        println!("{layout}: GNU find (preload) {secs:.3} s, {matches} matches");
        rows.push(Row {
            method: "GNU find (preload)",
            secs,
            matches,
        });
    }
    let w = ctx.phase("walk", layout, newer_ns)?;
    println!(
        "{layout}: pfind-style walk ({ranks} ranks) {:.3} s, {} matches, {} entries examined",
        w.secs, w.matched, w.examined
    );
    if w.examined != entries {
        println!(
            "{layout}: note: the walk examined {} entries, the tree has {entries}",
            w.examined
        );
    }
    rows.push(Row {
        method: "pfind-style walk",
        secs: w.secs,
        matches: w.matched,
    });

    let gone = ctx.phase("remove", layout, 0)?;
    c.rmdir(&dir)?;
    c.unlink(&stamp)?;
    println!(
        "{layout}: removed {files} files with {ranks} ranks in {:.2} s: {:.0} unlinks/s",
        gone.secs,
        files as f64 / gone.secs
    );
    std::io::stdout().flush()?;

    if rows.iter().any(|r| r.matches != rows[0].matches) || rows[0].matches != expected {
        let got: Vec<String> = rows
            .iter()
            .map(|r| format!("{} {}", r.method, r.matches))
            .collect();
        bail!(
            "{layout}: match counts differ: {} (expected {expected})",
            got.join(", ")
        );
    }
    Ok((entries, rows))
}

pub fn run(a: FindArgs) -> anyhow::Result<()> {
    if a.ranks == 0 || a.files == 0 {
        bail!("--ranks and --files must be at least 1");
    }
    let me = std::env::current_exe()?;
    for bin in ["madfs-find", "libmadfs.so"] {
        if !me.with_file_name(bin).exists() && (bin == "madfs-find" || !a.skip_gnu) {
            bail!(
                "{} not found (build the workspace: cargo build --release --workspace)",
                me.with_file_name(bin).display()
            );
        }
    }
    let servers = 2;
    let (_cl, cluster) = match &a.cluster {
        Some(f) => (
            None,
            std::fs::canonicalize(f).with_context(|| format!("{}", f.display()))?,
        ),
        None => {
            let cl = LocalCluster::start(Options {
                servers,
                ..Default::default()
            })
            .context("starting servers")?;
            let f = cl.cluster_file();
            (Some(cl), f)
        }
    };
    if !a.skip_gnu {
        // the mount point as a real directory makes `/madfs/..` resolve like on any mount
        if let Err(e) = std::fs::create_dir_all(MOUNT) {
            eprintln!("warning: cannot create {MOUNT}: {e}");
        }
    }
    let ctx = Ctx {
        me,
        cluster,
        ranks: a.ranks,
        files: a.files,
    };
    let c = client(&ctx.cluster)?;
    if c.stat(ROOT).is_ok() {
        let n = rm_tree(&c, ROOT)?;
        println!("removed a leftover {ROOT} ({n} entries)");
    }
    c.mkdir(ROOT, 0o755)?;
    println!(
        "madfs-bench find: {} files per tree, {} ranks, {}; filter -newer STAMP -size {SIZE}c -name '{NAME}'",
        a.files,
        a.ranks,
        match &a.cluster {
            Some(f) => format!("cluster {}", f.display()),
            None => format!("{servers} local madfs servers"),
        }
    );
    let layouts: &[&str] = match a.layout {
        Layout::Hard => &["hard"],
        Layout::Easy => &["easy"],
        Layout::Both => &["hard", "easy"],
    };
    let mut results = vec![];
    for l in layouts {
        results.push((*l, bench_layout(&ctx, &c, l, a.skip_gnu)?));
    }
    c.rmdir(ROOT)?;
    if c.readdir("/")?
        .iter()
        .any(|e| e.name == ROOT.trim_start_matches('/'))
    {
        bail!("{ROOT} is still there after the run");
    }

    println!();
    println!(
        "{:<7} {:>9} {:<20} {:>10} {:>14} {:>9}",
        "layout", "files", "method", "seconds", "entries/s", "matches"
    );
    for (l, (entries, rows)) in &results {
        for r in rows {
            println!(
                "{l:<7} {:>9} {:<20} {:>10.3} {:>14.0} {:>9}",
                a.files,
                r.method,
                r.secs,
                *entries as f64 / r.secs,
                r.matches
            );
        }
    }
    println!();
    for (l, (_, rows)) in &results {
        let mf = rows[0].secs;
        let of = |m: &str| {
            rows.iter()
                .find(|r| r.method == m)
                .map_or("-".to_string(), |r| format!("{:.1}x", r.secs / mf))
        };
        println!(
            "{l}: madfs-find speed-up: {} over GNU find (preload), {} over the pfind-style walk",
            of("GNU find (preload)"),
            of("pfind-style walk")
        );
    }
    Ok(())
}
