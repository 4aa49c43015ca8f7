//! `madfs cp [OPTIONS] SRC... DST`: copies trees into, out of and within madfs in parallel
//! (stage in and out; docs/operations.md, "Stage in and out").
//!
//! * A path written `madfs:PATH`, or under the preload's mount (`MADFS_MOUNT`, default
//!   `/madfs`), is on madfs; any other path is local. Several sources, or a destination
//!   ending in `/`, go into the destination; one directory is copied as the destination,
//!   merged into it when it exists (`cp -rT`), so that running the same command again
//!   resumes it.
//! * `-j N` worker threads, each with its own [`madfs_client::Client`] (a client belongs to
//!   one thread) sharing one UCX context. They take jobs from one queue: a directory job
//!   creates the directory and queues its entries, so the walk itself is parallel; a regular
//!   file larger than a piece (`--piece-mib`, default 64 MiB, rounded up to whole chunks) is
//!   split into pieces queued in front, copied by several threads at once.
//! * Like `cp -a`: modes, access and modification times, symbolic links as links, owner
//!   and group when run as root. A directory's mode and times are set after everything in
//!   it (deepest first). Hard links become separate files; sparse files are written whole;
//!   devices, FIFOs and sockets are named and left out.
//! * Resume: a destination file with the source's size and modification time (to the
//!   second, rsync's quick check) is skipped. A file is written under its final name and
//!   gets its times last, so a file cut short by an interruption has the time of its
//!   writing, not the source's, and is copied again.
//! * Under mpirun or srun, each rank copies the files and links whose source path hashes to
//!   it; every rank walks every directory and creates it (an existing one is fine). The rank
//!   that finishes last (found with marker files in the destination's parent directory) sets
//!   the directories' modes and times.

use crate::side::{Fs, Handle, Kind, Loc, Meta, R};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use madfs_client::{Client, ClientConfig, Errno};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes one thread moves per read and write.
const BUF: usize = 8 << 20;
/// Bytes per checksum block (the chunk files' own unit).
const BLOCK: usize = madfs_checksum::BLOCK as usize;

/// `madfs cp`'s command line.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Sources, then the destination. A path `madfs:PATH` or under MADFS_MOUNT (default
    /// /madfs) is on madfs, any other is local. Several SRCs, or DST ending in `/`: each SRC
    /// goes into DST (created if missing) as DST/NAME. One directory SRC: copied as DST
    /// (merged into it if it exists, like `cp -rT`; rerun the same command to resume). One
    /// file SRC: as DST, or into DST if DST is a directory.
    #[arg(required = true, num_args = 2.., value_name = "PATH")]
    paths: Vec<String>,
    /// Worker threads, each with its own client [default: twice the cores, at most 16].
    #[arg(short = 'j', long = "threads")]
    threads: Option<usize>,
    /// Verify every file copied by reading back both sides and comparing crc32c per 4 KiB
    /// block; files the quick check would skip are compared too, and copied again if they
    /// differ.
    #[arg(long)]
    checksum: bool,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
    /// No progress and no summary (errors only).
    #[arg(short, long)]
    quiet: bool,
    /// Skip destination files with the source's size and modification time (the default).
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Copy every file again, even those the quick check would skip.
    #[arg(long)]
    overwrite: bool,
    /// Make every file durable (fsync) before closing it.
    #[arg(long)]
    sync: bool,
    /// Preserve modes, times, links and (as root) owners: always on, as with `cp -a`.
    #[arg(short = 'p', long = "preserve", short_alias = 'a')]
    preserve: bool,
    /// Files larger than this many MiB are copied in pieces of this size by several threads.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    piece_mib: u64,
}

/// This process's place among the ranks of an MPI or Slurm job (0 of 1 alone).
#[derive(Clone, Copy, Debug)]
struct Rank {
    rank: u64,
    size: u64,
}

impl Rank {
    fn from_env() -> Rank {
        let get = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        for (r, s) in [
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
            ("PMI_RANK", "PMI_SIZE"),
            ("PMIX_RANK", "PMIX_SIZE"),
            ("SLURM_PROCID", "SLURM_NTASKS"),
        ] {
            // a batch script itself has SLURM_PROCID=0 and the job's SLURM_NTASKS but is no
            // task of a step (no SLURM_STEP_ID): it copies alone
            if r == "SLURM_PROCID" && std::env::var_os("SLURM_STEP_ID").is_none() {
                continue;
            }
            if let (Some(rank), Some(size)) = (get(r), get(s)) {
                if size > 1 && rank < size {
                    return Rank { rank, size };
                }
            }
        }
        Rank { rank: 0, size: 1 }
    }

    /// Does this rank copy the entry at source `src`? (Every rank computes the same.)
    fn owns(&self, src: &Loc) -> bool {
        if self.size == 1 {
            return true;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        src.bytes().hash(&mut h);
        h.finish() % self.size == self.rank
    }

    /// The job's name for the marker directory: the same in every rank of one job.
    fn job_key(&self) -> String {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let job = match (env("SLURM_JOB_ID"), env("SLURM_STEP_ID")) {
            (Some(j), Some(s)) => Some(format!("{j}.{s}")),
            (Some(j), None) => Some(j),
            _ => env("PMIX_NAMESPACE").or_else(|| env("OMPI_MCA_ess_base_jobid")),
        };
        let job: String = job
            .unwrap_or_else(|| "job".into())
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!(".madfs-cp.{job}.{}", self.size)
    }
}

/// Counters shown in the progress line and the summary.
#[derive(Default)]
struct Stats {
    files: AtomicU64,
    bytes: AtomicU64,
    skipped: AtomicU64,
    skipped_bytes: AtomicU64,
    dirs: AtomicU64,
    links: AtomicU64,
    failed: AtomicU64,
    /// Bytes of the files found so far (the progress bar's length).
    found_bytes: AtomicU64,
}

/// Error and warning lines, kept clear of the progress bar.
struct Reporter {
    bar: Option<ProgressBar>,
}

impl Reporter {
    fn line(&self, msg: String) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{msg}")),
            None => eprintln!("{msg}"),
        }
    }
}

/// A failed step: which side, what, why.
struct Fail {
    on_dst: bool,
    op: String,
    e: Errno,
}

fn fail(on_dst: bool, op: impl Into<String>) -> impl FnOnce(Errno) -> Fail {
    move |e| Fail {
        on_dst,
        op: op.into(),
        e,
    }
}

/// A file copied in pieces by several threads.
struct Big {
    src: Loc,
    dst: Loc,
    meta: Meta,
    piece: u64,
    pieces: u64,
    /// Pieces not finished yet; whoever finishes the last one sets the attributes.
    left: AtomicU64,
    failed: AtomicBool,
}

enum Job {
    /// Copy the entry `src` to `dst`: a directory creates it and queues its entries.
    Entry {
        src: Loc,
        dst: Loc,
        /// The destination directory was just made by this process (nothing to skip in it).
        fresh: bool,
        depth: usize,
    },
    /// Piece `index` of a large file (its destination exists, created by piece 0's thread).
    Piece { big: Arc<Big>, index: u64 },
}

/// The jobs, and how many are being worked on (a job may queue more).
struct Queue {
    state: Mutex<(VecDeque<Job>, usize)>,
    cv: Condvar,
}

impl Queue {
    fn push(&self, j: Job, front: bool) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if front {
            s.0.push_front(j);
        } else {
            s.0.push_back(j);
        }
        self.cv.notify_one();
    }

    /// The next job; None once the queue is empty and no job is running.
    fn pop(&self) -> Option<Job> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(j) = s.0.pop_front() {
                s.1 += 1;
                return Some(j);
            }
            if s.1 == 0 {
                self.cv.notify_all();
                return None;
            }
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn done(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.1 -= 1;
        if s.1 == 0 && s.0.is_empty() {
            self.cv.notify_all();
        }
    }

    fn left(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }
}

/// What every worker shares.
struct Shared {
    args: Args,
    rank: Rank,
    /// Running as root: owners are copied too.
    owner: bool,
    piece: u64,
    queue: Queue,
    stats: Stats,
    rep: Reporter,
    /// Directories made or found at the destination: their attributes go on last.
    dirs: Mutex<Vec<(Loc, Meta, usize)>>,
}

impl Shared {
    fn failed(&self, src: &Loc, dst: &Loc, f: Fail) {
        self.stats.failed.fetch_add(1, Relaxed);
        let at = if f.on_dst { dst } else { src };
        self.rep.line(format!("madfs cp: {at}: {}: {}", f.op, f.e));
    }
}

/// Where a command-line path lies.
fn parse_loc(s: &str, mount: &str) -> Loc {
    if let Some(r) = s.strip_prefix("madfs:") {
        let r = r.trim_end_matches('/');
        return Loc::Madfs(if r.starts_with('/') {
            r.to_string()
        } else {
            format!("/{r}")
        });
    }
    if s == mount {
        return Loc::Madfs("/".into());
    }
    if let Some(r) = s.strip_prefix(mount).filter(|r| r.starts_with('/')) {
        let r = r.trim_end_matches('/');
        return Loc::Madfs(if r.is_empty() { "/".into() } else { r.into() });
    }
    Loc::Local(s.into())
}

/// Runs `madfs cp`; returns the exit status.
pub fn main(args: Args) -> i32 {
    let mount = std::env::var("MADFS_MOUNT").unwrap_or_else(|_| "/madfs".into());
    let mount = mount.trim_end_matches('/').to_string();
    let (dst_arg, src_args) = args.paths.split_last().expect("clap: 2 or more");
    let dst_slash = dst_arg.ends_with('/');
    let srcs: Vec<Loc> = src_args.iter().map(|s| parse_loc(s, &mount)).collect();
    let dst = parse_loc(dst_arg, &mount);
    let rank = Rank::from_env();
    // (--resume and --preserve name the default behaviour)
    let _ = (args.resume, args.preserve);

    // one UCX context for every thread's client, when madfs is involved at all
    let madfs = dst.is_madfs() || srcs.iter().any(Loc::is_madfs);
    let setup = if madfs {
        ClientConfig::from_env().and_then(|cfg| {
            madfs_rpc::new_context()
                .map(|ctx| (cfg, ctx))
                .map_err(|e| e.to_string())
        })
    } else {
        Err(String::new())
    };
    let setup = match setup {
        Ok(s) => Some(s),
        Err(_) if !madfs => None,
        Err(e) => {
            eprintln!("madfs cp: {e}");
            return 2;
        }
    };
    let make_fs = || -> std::io::Result<Fs> {
        Ok(Fs {
            client: match &setup {
                Some((cfg, ctx)) => Some(Client::with_context(ctx.clone(), cfg)?),
                None => None,
            },
        })
    };
    let main_fs = match make_fs() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("madfs cp: {e}");
            return 2;
        }
    };

    // on a terminal a bar redrawn in place; elsewhere, with --progress, a line a second
    let tty = std::io::stderr().is_terminal();
    let lines = !args.quiet && args.progress && !tty;
    let bar = (!args.quiet && tty).then(|| {
        let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(5));
        b.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{wide_bar}] {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b
    });
    let threads = args.threads.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores * 2).min(16)
    });
    // SAFETY: geteuid cannot fail.
    let owner = unsafe { libc::geteuid() } == 0;
    let piece = args.piece_mib.max(1) << 20;
    let sh = Shared {
        args,
        rank,
        owner,
        piece,
        queue: Queue {
            state: Mutex::new((VecDeque::new(), 0)),
            cv: Condvar::new(),
        },
        stats: Stats::default(),
        rep: Reporter { bar },
        dirs: Mutex::new(Vec::new()),
    };
    let start = Instant::now();

    // where each source goes: several SRCs, or DST/, go into DST; one SRC is copied as DST,
    // a directory merged into DST when it exists (as `cp -rT` does: so the same command run
    // again resumes, and no rank's decision depends on what another one made already), a
    // file or link into DST when DST is a directory (as cp does)
    let dst_is_dir = matches!(main_fs.lstat(&dst), Ok(m) if m.kind == Kind::Dir);
    let src_is_dir =
        srcs.len() == 1 && matches!(main_fs.lstat(&srcs[0]), Ok(m) if m.kind == Kind::Dir);
    let into = srcs.len() > 1 || dst_slash || (dst_is_dir && !src_is_dir);
    if into {
        if let Err(e) = main_fs.mkdir(&dst, 0o755) {
            if e != Errno::EEXIST {
                eprintln!("madfs cp: {dst}: mkdir: {e}");
                return 1;
            }
        }
    }
    let anchor = if into { dst.clone() } else { dst.parent() };
    let markers = (rank.size > 1).then(|| begin_ranks(&main_fs, &anchor, rank));
    for src in &srcs {
        let to = if into {
            match src.name().or_else(|| match src {
                Loc::Local(p) => std::fs::canonicalize(p)
                    .ok()
                    .and_then(|c| c.file_name().map(OsString::from)),
                Loc::Madfs(_) => None,
            }) {
                Some(n) => match dst.join(&n) {
                    Ok(d) => d,
                    Err(e) => {
                        sh.failed(src, &dst, fail(true, "name")(e));
                        continue;
                    }
                },
                None => dst.clone(),
            }
        } else {
            dst.clone()
        };
        if src.is_madfs() == to.is_madfs() && {
            let (s, d) = (src.bytes(), to.bytes());
            d == s || (d.starts_with(s) && d.get(s.len()) == Some(&b'/'))
        } {
            sh.failed(
                src,
                &to,
                fail(true, "cannot copy into itself")(Errno::EINVAL),
            );
            continue;
        }
        sh.queue.push(
            Job::Entry {
                src: src.clone(),
                dst: to,
                fresh: false,
                depth: 0,
            },
            false,
        );
    }

    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        if sh.rep.bar.is_some() || lines {
            let (sh, finished) = (&sh, &finished);
            s.spawn(move || {
                let mut next = Instant::now() + Duration::from_secs(1);
                while !finished.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    if let Some(b) = &sh.rep.bar {
                        tick(b, &sh.stats);
                    } else if Instant::now() >= next {
                        next += Duration::from_secs(1);
                        eprintln!("{}", progress_line(&sh.stats, start.elapsed()));
                    }
                }
            });
        }
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let (sh, make_fs) = (&sh, &make_fs);
                s.spawn(move || match make_fs() {
                    Ok(fs) => {
                        worker(sh, &fs);
                        if let Some(c) = &fs.client {
                            c.goodbye();
                        }
                    }
                    Err(e) => sh
                        .rep
                        .line(format!("madfs cp: a worker has no client: {e}")),
                })
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        finished.store(true, Relaxed);
    });
    let left = sh.queue.left();
    if left > 0 {
        sh.stats.failed.fetch_add(left as u64, Relaxed);
        sh.rep.line(format!(
            "madfs cp: {left} entries not copied (no worker left)"
        ));
    }

    // directories' modes and times, deepest first, once everything in them is there
    let last = match &markers {
        Some(m) => end_ranks(&main_fs, m, rank, &sh.rep),
        None => true,
    };
    if last {
        let mut dirs = std::mem::take(&mut *sh.dirs.lock().unwrap_or_else(|p| p.into_inner()));
        dirs.sort_by_key(|d| std::cmp::Reverse(d.2));
        set_dir_attrs(&sh, &main_fs, &dirs);
    }
    if let Some(c) = &main_fs.client {
        c.goodbye();
    }
    if let Some(b) = &sh.rep.bar {
        tick(b, &sh.stats);
        b.finish_and_clear();
    }
    let st = &sh.stats;
    let failed = st.failed.load(Relaxed);
    if !sh.args.quiet {
        let secs = start.elapsed().as_secs_f64();
        let bytes = st.bytes.load(Relaxed);
        let who = if rank.size > 1 {
            format!("rank {}/{}: ", rank.rank, rank.size)
        } else {
            String::new()
        };
        println!(
            "madfs cp: {who}{} files ({}) copied, {} skipped ({}), {} directories, {} links, \
             {failed} failed in {secs:.2} s, {:.1} MB/s",
            st.files.load(Relaxed),
            mb(bytes),
            st.skipped.load(Relaxed),
            mb(st.skipped_bytes.load(Relaxed)),
            st.dirs.load(Relaxed),
            st.links.load(Relaxed),
            bytes as f64 / 1e6 / secs.max(1e-9),
        );
    }
    i32::from(failed > 0)
}

/// Sets the directories' modes and times (deepest first). A madfs directory's time moves
/// a few ms after an entry is added to it (docs/consistency.md, "Directory times": the change
/// travels from server to server, and only moves times forward), so a time set right after
/// the last create can be overtaken: the madfs ones are checked after a pause and set again
/// where that happened.
fn set_dir_attrs(sh: &Shared, fs: &Fs, dirs: &[(Loc, Meta, usize)]) {
    let on_madfs = || dirs.iter().filter(|d| d.0.is_madfs());
    if on_madfs().next().is_some() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut failed = Vec::new();
    for (d, m, _) in dirs {
        if let Err(e) = fs.set_attrs(d, m, sh.owner, None) {
            sh.failed(d, d, fail(true, "set attributes")(e));
            failed.push(d);
        }
    }
    for round in 0..6 {
        std::thread::sleep(Duration::from_millis(10 << round));
        let moved: Vec<_> = on_madfs()
            .filter(|(d, m, _)| {
                !failed.contains(&d) && fs.lstat(d).is_ok_and(|now| now.mtime != m.mtime)
            })
            .collect();
        if moved.is_empty() {
            return;
        }
        for (d, m, _) in moved {
            let _ = fs.set_attrs(d, m, sh.owner, None);
        }
    }
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

/// `--progress` without a terminal: one line.
fn progress_line(st: &Stats, t: Duration) -> String {
    let done = st.bytes.load(Relaxed) + st.skipped_bytes.load(Relaxed);
    format!(
        "madfs cp: {:.0} s: {} of {} found, {:.1} MB/s, {} files, {} skipped, {} failed",
        t.as_secs_f64(),
        mb(done),
        mb(st.found_bytes.load(Relaxed)),
        st.bytes.load(Relaxed) as f64 / 1e6 / t.as_secs_f64().max(1e-9),
        st.files.load(Relaxed),
        st.skipped.load(Relaxed),
        st.failed.load(Relaxed)
    )
}

fn tick(b: &ProgressBar, st: &Stats) {
    b.set_length(st.found_bytes.load(Relaxed));
    b.set_position(st.bytes.load(Relaxed) + st.skipped_bytes.load(Relaxed));
    b.set_message(format!(
        "{} files, {} skipped, {} failed",
        st.files.load(Relaxed),
        st.skipped.load(Relaxed),
        st.failed.load(Relaxed)
    ));
}

/// The marker directory of a job of several ranks, entered by this rank.
fn begin_ranks(fs: &Fs, anchor: &Loc, rank: Rank) -> Loc {
    let dir = anchor
        .join(std::ffi::OsStr::new(&rank.job_key()))
        .unwrap_or_else(|_| anchor.clone());
    let _ = fs.mkdir(&dir, 0o700);
    // a marker left by a killed run of the same job and rank counts no more
    if let Ok(m) = dir.join(std::ffi::OsStr::new(&format!("{}.done", rank.rank))) {
        let _ = fs.unlink(&m);
    }
    dir
}

/// Says this rank is done; true for the rank that sees every rank done first (it removes
/// the markers and sets the directories' attributes).
fn end_ranks(fs: &Fs, dir: &Loc, rank: Rank, rep: &Reporter) -> bool {
    let mark = |name: String| dir.join(std::ffi::OsStr::new(&name));
    let r = (|| -> R<bool> {
        let mine = mark(format!("{}.done", rank.rank))?;
        match fs.create_new(&mine) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e),
        }
        let names = fs.list(dir)?;
        let done = names
            .iter()
            .filter(|(n, _)| n.to_string_lossy().ends_with(".done"))
            .count() as u64;
        if done < rank.size {
            return Ok(false);
        }
        match fs.create_new(&mark("claimed".into())?) {
            Ok(()) => {}
            Err(Errno::EEXIST) => return Ok(false),
            Err(e) => return Err(e),
        }
        for (n, _) in fs.list(dir)? {
            let _ = fs.unlink(&dir.join(&n)?);
        }
        fs.rmdir(dir)?;
        Ok(true)
    })();
    match r {
        Ok(last) => last,
        Err(e) => {
            rep.line(format!(
                "madfs cp: {dir}: rank markers: {e}; this rank sets the directories' attributes"
            ));
            true
        }
    }
}

fn worker(sh: &Shared, fs: &Fs) {
    let mut buf = vec![0u8; BUF];
    let mut back = Vec::new();
    while let Some(job) = sh.queue.pop() {
        match job {
            Job::Entry {
                src,
                dst,
                fresh,
                depth,
            } => entry(sh, fs, &src, &dst, fresh, depth, &mut buf, &mut back),
            Job::Piece { big, index } => piece(sh, fs, &big, index, None, &mut buf, &mut back),
        }
        sh.queue.done();
    }
}

#[allow(clippy::too_many_arguments)]
fn entry(
    sh: &Shared,
    fs: &Fs,
    src: &Loc,
    dst: &Loc,
    fresh: bool,
    depth: usize,
    buf: &mut [u8],
    back: &mut Vec<u8>,
) {
    let meta = match fs.lstat(src) {
        Ok(m) => m,
        Err(e) => return sh.failed(src, dst, fail(false, "stat")(e)),
    };
    if meta.kind != Kind::Dir && !sh.rank.owns(src) {
        return;
    }
    let r = match meta.kind {
        Kind::Dir => dir(sh, fs, src, dst, &meta, depth),
        Kind::File => file(sh, fs, src, dst, &meta, fresh, buf, back),
        Kind::Link => link(sh, fs, src, dst, &meta, fresh),
        Kind::Other => {
            sh.rep.line(format!(
                "madfs cp: {src}: not copied: a device, FIFO or socket"
            ));
            Ok(())
        }
    };
    if let Err(f) = r {
        sh.failed(src, dst, f);
    }
}

fn dir(sh: &Shared, fs: &Fs, src: &Loc, dst: &Loc, meta: &Meta, depth: usize) -> Result<(), Fail> {
    let fresh = match fs.mkdir(dst, meta.perm | 0o700) {
        // nothing of this process's can be in it (other ranks fill it too)
        Ok(()) => sh.rank.size == 1,
        Err(Errno::EEXIST) => {
            let m = fs.lstat(dst).map_err(fail(true, "stat"))?;
            if m.kind != Kind::Dir {
                return Err(fail(true, "mkdir")(Errno::EEXIST));
            }
            // a finished copy's read-only directory: writable again until the end
            if m.perm & 0o700 != 0o700 {
                fs.chmod(dst, m.perm | 0o700).map_err(fail(true, "chmod"))?;
            }
            false
        }
        Err(e) => return Err(fail(true, "mkdir")(e)),
    };
    sh.stats.dirs.fetch_add(1, Relaxed);
    sh.dirs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((dst.clone(), *meta, depth));
    let mut names = fs.list(src).map_err(fail(false, "readdir"))?;
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in names {
        let (s, d) = match (src.join(&name), dst.join(&name)) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) => {
                sh.failed(src, dst, fail(false, format!("name {name:?}"))(e));
                continue;
            }
            (_, Err(e)) => {
                sh.failed(src, dst, fail(true, format!("name {name:?}"))(e));
                continue;
            }
        };
        if kind != Kind::Dir && !sh.rank.owns(&s) {
            continue;
        }
        let job = Job::Entry {
            src: s,
            dst: d,
            fresh,
            depth: depth + 1,
        };
        sh.queue.push(job, false);
    }
    Ok(())
}

/// Same size and the same modification time to the second (rsync's quick check).
fn same(a: &Meta, b: &Meta) -> bool {
    a.size == b.size && a.mtime.div_euclid(1_000_000_000) == b.mtime.div_euclid(1_000_000_000)
}

#[allow(clippy::too_many_arguments)]
fn file(
    sh: &Shared,
    fs: &Fs,
    src: &Loc,
    dst: &Loc,
    meta: &Meta,
    fresh: bool,
    buf: &mut [u8],
    back: &mut Vec<u8>,
) -> Result<(), Fail> {
    sh.stats.found_bytes.fetch_add(meta.size, Relaxed);
    if !fresh {
        match fs.lstat(dst) {
            Ok(d) if d.kind == Kind::File => {
                if !sh.args.overwrite
                    && same(&d, meta)
                    && (!sh.args.checksum || verify_whole(fs, src, dst, buf, back)?)
                {
                    sh.stats.skipped.fetch_add(1, Relaxed);
                    sh.stats.skipped_bytes.fetch_add(meta.size, Relaxed);
                    return Ok(());
                }
            }
            Ok(d) if d.kind == Kind::Dir => return Err(fail(true, "create")(Errno::EISDIR)),
            Ok(_) => fs.unlink(dst).map_err(fail(true, "unlink"))?,
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(fail(true, "stat")(e)),
        }
    }
    let s = fs.open_read(src).map_err(fail(false, "open"))?;
    let d = match fs.open_write(dst, true, meta.perm & 0o777 | 0o600) {
        Ok(d) => d,
        Err(e) => {
            let _ = fs.close(s, false);
            return Err(fail(true, "create")(e));
        }
    };
    // pieces of whole chunks of the madfs side
    let chunk = meta.chunk.max(d.chunk()).max(1);
    let piece_len = sh.piece.div_ceil(chunk) * chunk;
    let pieces = meta.size.div_ceil(piece_len).max(1);
    let big = Arc::new(Big {
        src: src.clone(),
        dst: dst.clone(),
        meta: *meta,
        piece: piece_len,
        pieces,
        left: AtomicU64::new(pieces),
        failed: AtomicBool::new(false),
    });
    for index in (1..pieces).rev() {
        let job = Job::Piece {
            big: big.clone(),
            index,
        };
        sh.queue.push(job, true);
    }
    piece(sh, fs, &big, 0, Some((s, d)), buf, back);
    Ok(())
}

/// Copies piece `index` of `big` (with the handles of the file's creation for piece 0);
/// whoever copies the last piece sets the attributes.
fn piece(
    sh: &Shared,
    fs: &Fs,
    big: &Big,
    index: u64,
    handles: Option<(Handle, Handle)>,
    buf: &mut [u8],
    back: &mut Vec<u8>,
) {
    let off = index * big.piece;
    let len = big.meta.size.saturating_sub(off).min(big.piece);
    let r = (|| -> Result<Option<u32>, Fail> {
        let (s, mut d) = match handles {
            Some(h) => h,
            None => {
                if big.failed.load(Relaxed) {
                    return Ok(None);
                }
                let s = fs.open_read(&big.src).map_err(fail(false, "open"))?;
                match fs.open_write(&big.dst, false, 0) {
                    Ok(d) => (s, d),
                    Err(e) => {
                        let _ = fs.close(s, false);
                        return Err(fail(true, "open")(e));
                    }
                }
            }
        };
        let perm = d.perm();
        let copied = copy_range(sh, fs, &s, &mut d, off, len, buf, back);
        let _ = fs.close(s, false);
        let closed = fs.close(d, sh.args.sync).map_err(fail(true, "close"));
        copied?;
        closed?;
        Ok(perm)
    })();
    let perm = match r {
        Ok(p) => p,
        Err(f) => {
            big.failed.store(true, Relaxed);
            let f = Fail {
                op: if big.pieces > 1 {
                    format!("{} (bytes {off}..{})", f.op, off + len)
                } else {
                    f.op
                },
                ..f
            };
            sh.failed(&big.src, &big.dst, f);
            None
        }
    };
    if big.left.fetch_sub(1, Relaxed) != 1 || big.failed.load(Relaxed) {
        return;
    }
    // the last piece: owner, mode, then times (a file with its source's times is whole)
    let perm = if index == 0 { perm } else { None };
    match fs.set_attrs(&big.dst, &big.meta, sh.owner, perm) {
        Ok(()) => {
            sh.stats.files.fetch_add(1, Relaxed);
        }
        Err(e) => sh.failed(&big.src, &big.dst, fail(true, "set attributes")(e)),
    }
}

/// Copies `len` bytes at `off`; with `--checksum`, reads both sides back and compares.
#[allow(clippy::too_many_arguments)]
fn copy_range(
    sh: &Shared,
    fs: &Fs,
    s: &Handle,
    d: &mut Handle,
    off: u64,
    len: u64,
    buf: &mut [u8],
    back: &mut Vec<u8>,
) -> Result<(), Fail> {
    let end = off + len;
    let mut pos = off;
    while pos < end {
        let n = (end - pos).min(buf.len() as u64) as usize;
        let got = fs
            .read_full(s, pos, &mut buf[..n])
            .map_err(fail(false, "read"))?;
        if got < n {
            return Err(fail(false, "read (the file shrank while copied)")(
                Errno::EIO,
            ));
        }
        fs.write_all(d, pos, &buf[..n])
            .map_err(fail(true, "write"))?;
        sh.stats.bytes.fetch_add(n as u64, Relaxed);
        pos += n as u64;
    }
    if sh.args.checksum && !verify(fs, s, d, off, len, buf, back)? {
        return Err(fail(true, "checksum differs from the source's")(Errno::EIO));
    }
    Ok(())
}

/// Do `len` bytes at `off` read the same on both sides (crc32c of every 4 KiB block)?
fn verify(
    fs: &Fs,
    s: &Handle,
    d: &Handle,
    off: u64,
    len: u64,
    buf: &mut [u8],
    back: &mut Vec<u8>,
) -> Result<bool, Fail> {
    back.resize(buf.len(), 0);
    let end = off + len;
    let mut pos = off;
    while pos < end {
        let n = (end - pos).min(buf.len() as u64) as usize;
        let a = fs
            .read_full(s, pos, &mut buf[..n])
            .map_err(fail(false, "read back"))?;
        let b = fs
            .read_full(d, pos, &mut back[..n])
            .map_err(fail(true, "read back"))?;
        if a != n || b != n {
            return Ok(false);
        }
        let differ = buf[..n]
            .chunks(BLOCK)
            .zip(back[..n].chunks(BLOCK))
            .any(|(x, y)| madfs_checksum::block_crc(x) != madfs_checksum::block_crc(y));
        if differ {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(true)
}

/// `--checksum` of a file the quick check would skip.
fn verify_whole(
    fs: &Fs,
    src: &Loc,
    dst: &Loc,
    buf: &mut [u8],
    back: &mut Vec<u8>,
) -> Result<bool, Fail> {
    let s = fs.open_read(src).map_err(fail(false, "open"))?;
    let d = match fs.open_read(dst) {
        Ok(d) => d,
        Err(e) => {
            let _ = fs.close(s, false);
            return Err(fail(true, "open")(e));
        }
    };
    let size = match (&s, &d) {
        (_, Handle::Madfs(f)) => f.size(),
        (_, Handle::Local(f)) => f.metadata().map(|m| m.len()).unwrap_or(u64::MAX),
    };
    let r = verify(fs, &s, &d, 0, size, buf, back);
    let _ = fs.close(s, false);
    let _ = fs.close(d, false);
    r
}

fn link(sh: &Shared, fs: &Fs, src: &Loc, dst: &Loc, meta: &Meta, fresh: bool) -> Result<(), Fail> {
    let target = fs.readlink(src).map_err(fail(false, "readlink"))?;
    if !fresh {
        match fs.lstat(dst) {
            Ok(d) if d.kind == Kind::Link => {
                if fs.readlink(dst).ok().as_ref() == Some(&target) {
                    if !sh.args.overwrite && same(&d, meta) {
                        sh.stats.skipped.fetch_add(1, Relaxed);
                        return Ok(());
                    }
                    fs.set_attrs(dst, meta, sh.owner, None)
                        .map_err(fail(true, "set attributes"))?;
                    sh.stats.links.fetch_add(1, Relaxed);
                    return Ok(());
                }
                fs.unlink(dst).map_err(fail(true, "unlink"))?;
            }
            Ok(d) if d.kind == Kind::Dir => return Err(fail(true, "symlink")(Errno::EISDIR)),
            Ok(_) => fs.unlink(dst).map_err(fail(true, "unlink"))?,
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(fail(true, "stat")(e)),
        }
    }
    fs.symlink(&target, dst).map_err(fail(true, "symlink"))?;
    fs.set_attrs(dst, meta, sh.owner, None)
        .map_err(fail(true, "set attributes"))?;
    sh.stats.links.fetch_add(1, Relaxed);
    Ok(())
}
