//! What one rank does: the phases, the file barriers between them, and the clean-up.
//!
//! Layout of a run in `<dir>/io500-<run>/`: `ior_easy/file.<rank>`, `ior_hard/file` (shared),
//! `mdt_easy/r<rank>/file.<i>`, `mdt_hard/file.<rank>.<i>` (one shared directory), `ior_rnd/
//! file.<rank>`, `timestamp` (find's `-newer`), and `.sync/` (the barriers).
//!
//! Reads, stats and deletes replay exactly what the write phase wrote; reads and stats of rank
//! r go to rank r+1's files (IO500's task shift), and every read is checked.

use super::fsops::Target;
use super::{client, Job, PhaseResult, TargetResult, Unit, BW_PHASES, MD_PHASES, PHASES};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

/// What one rank reports for one phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct RankOut {
    ops: u64,
    bytes: u64,
    secs: f64,
    found: u64,
    p50_us: f64,
    /// The rank's client cache in the phase: hits, misses, entries called back (madfs
    /// targets under libmadfs.so).
    #[serde(default)]
    cache: Option<[u64; 3]>,
}

/// Barriers through files in a shared directory: each rank publishes `name.<rank>`
/// (atomically, by rename) and waits until it can read every rank's.
struct Sync<'a, T: Target> {
    t: &'a T,
    dir: String,
    rank: usize,
    size: usize,
    prev: Option<String>,
}

impl<T: Target> Sync<'_, T> {
    fn allgather(&mut self, name: &str, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.t
            .put(&format!("{}/{name}.{}", self.dir, self.rank), data)
            .with_context(|| format!("barrier {name}: publishing"))?;
        let mut all = Vec::with_capacity(self.size);
        for q in 0..self.size {
            all.push(self.wait_for(&format!("{}/{name}.{q}", self.dir))?);
        }
        // every rank has now passed the previous barrier: its file can go
        if let Some(p) = self.prev.replace(name.to_string()) {
            let _ = self.t.unlink(&format!("{}/{p}.{}", self.dir, self.rank));
        }
        Ok(all)
    }

    fn wait_for(&self, path: &str) -> Result<Vec<u8>> {
        let mut nap = Duration::from_micros(200);
        let t0 = Instant::now();
        loop {
            match self.t.get(path) {
                Ok(b) => return Ok(b),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("barrier: reading {path}")),
            }
            if t0.elapsed() > Duration::from_secs(3600) {
                bail!("barrier: {path} did not appear within an hour");
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }

    fn barrier(&mut self, name: &str) -> Result<()> {
        self.allgather(name, b"").map(|_| ())
    }

    /// Last step: ranks > 0 say goodbye; rank 0 waits for them, then removes the directory.
    fn finish(self) -> Result<()> {
        if self.rank != 0 {
            self.t
                .put(&format!("{}/bye.{}", self.dir, self.rank), b"")?;
            return Ok(());
        }
        for q in 1..self.size {
            self.wait_for(&format!("{}/bye.{q}", self.dir))?;
        }
        self.t.remove_tree(&self.dir)?;
        Ok(())
    }
}

/// A rank-specific pattern with each block's offset stamped in its first 16 bytes.
fn pattern(len: usize, rank: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(131) ^ rank.wrapping_mul(17)) as u8)
        .collect()
}

fn stamp(buf: &mut [u8], off: u64, rank: usize) {
    buf[..8].copy_from_slice(&off.to_le_bytes());
    buf[8..16].copy_from_slice(&(rank as u64).to_le_bytes());
}

fn check(buf: &[u8], off: u64, rank: usize, what: &str) -> Result<()> {
    let mut want = [0u8; 16];
    stamp(&mut want, off, rank);
    if buf[..16] != want {
        bail!("{what}: wrong data at offset {off} (written by rank {rank})");
    }
    Ok(())
}

/// xorshift64*: the same random offsets on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Progress on rank 0's terminal (hidden when stderr is not one).
struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    fn start(show: bool, phase: &str, stonewall: Option<f64>) -> Progress {
        if !show {
            return Progress(None);
        }
        let pb = match stonewall {
            Some(s) => {
                let pb = indicatif::ProgressBar::new((s * 10.0) as u64);
                pb.set_style(
                    indicatif::ProgressStyle::with_template(
                        "  {prefix:20} [{elapsed:>4}] {wide_bar} stonewall",
                    )
                    .expect("template"),
                );
                pb
            }
            None => {
                let pb = indicatif::ProgressBar::new_spinner();
                pb.set_style(
                    indicatif::ProgressStyle::with_template(
                        "  {prefix:20} [{elapsed:>4}] {spinner}",
                    )
                    .expect("template"),
                );
                pb
            }
        };
        pb.set_prefix(phase.to_string());
        pb.enable_steady_tick(Duration::from_millis(100));
        Progress(Some(pb))
    }

    fn tick(&self, t0: Instant) {
        if let Some(pb) = &self.0 {
            pb.set_position((t0.elapsed().as_secs_f64() * 10.0) as u64);
        }
    }

    fn done(self) {
        if let Some(pb) = self.0 {
            pb.finish_and_clear();
        }
    }
}

/// Everything a phase body may read.
struct Ctx<'a> {
    job: &'a Job,
    w: String,
    rank: usize,
    size: usize,
    done: HashMap<String, Vec<RankOut>>,
    timestamp_ns: i64,
    show: bool,
}

impl Ctx<'_> {
    fn src(&self) -> usize {
        (self.rank + 1) % self.size
    }
    fn count(&self, phase: &str, rank: usize) -> u64 {
        self.done.get(phase).map_or(0, |v| v[rank].ops)
    }
}

/// Runs every phase of `job` as rank `rank` of `size`; rank 0 returns the results.
pub(super) fn run<T: Target>(
    t: &T,
    job: &Job,
    rank: usize,
    size: usize,
) -> Result<Option<TargetResult>> {
    let base = job.target.dir.trim_end_matches('/');
    let w = format!("{base}/io500-{}", job.run);
    let mut sync = Sync {
        t,
        dir: format!("{w}/.sync"),
        rank,
        size,
        prev: None,
    };
    t.mkdir_p(&sync.dir)
        .with_context(|| format!("creating {}", sync.dir))?;
    sync.barrier("start")?;
    if rank == 0 {
        for d in ["ior_easy", "ior_hard", "mdt_easy", "mdt_hard", "ior_rnd"] {
            t.mkdir(&format!("{w}/{d}"))?;
        }
        let f = t.create(&format!("{w}/ior_hard/file"), false)?;
        t.close(f)?;
        t.put(&format!("{w}/timestamp"), b"")?;
        // coarse file-system clocks: let the timestamp be strictly older than what follows
        std::thread::sleep(Duration::from_millis(50));
    }
    sync.barrier("setup")?;
    t.mkdir(&format!("{w}/mdt_easy/r{rank}"))?;
    let show = rank == 0 && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut cx = Ctx {
        job,
        timestamp_ns: t.stat(&format!("{w}/timestamp"))?.1,
        w,
        rank,
        size,
        done: HashMap::new(),
        show,
    };
    let mut results = Vec::new();
    for phase in &job.params.phases {
        if phase == "rpc" && job.target.cluster.is_none() {
            continue;
        }
        // (what the servers saw of the client cache: counted around the phase, untimed)
        let servers = job.target.cluster.as_deref().filter(|_| rank == 0);
        let before = servers.and_then(super::leases::snapshot);
        sync.barrier(&format!("{phase}.go"))?;
        if rank == 0 && say_phases() {
            eprintln!("madfs-bench: {phase} starts");
        }
        let cache_before = super::leases::own(&cx.w);
        let mut out = run_phase(t, &cx, phase).with_context(|| format!("{phase}, rank {rank}"))?;
        out.cache = cache_before.zip(super::leases::own(&cx.w)).map(|(b, a)| {
            [
                a[0].saturating_sub(b[0]),
                a[1].saturating_sub(b[1]),
                a[2].saturating_sub(b[2]),
            ]
        });
        let all = sync.allgather(&format!("{phase}.done"), &serde_json::to_vec(&out)?)?;
        let all: Vec<RankOut> = all
            .iter()
            .map(|b| serde_json::from_slice(b))
            .collect::<Result<_, _>>()?;
        if rank == 0 {
            let mut r = summarise(&cx, phase, &all)?;
            let caches: Vec<Option<[u64; 3]>> = all.iter().map(|o| o.cache).collect();
            if let Some(n) = super::leases::own_note(&caches) {
                if !r.note.is_empty() {
                    r.note.push_str("; ");
                }
                r.note.push_str(&n);
            }
            if let (Some(b), Some(a)) = (&before, servers.and_then(super::leases::snapshot)) {
                if !r.note.is_empty() {
                    r.note.push_str("; ");
                }
                r.note.push_str(&super::leases::note(b, &a, r.ops));
            }
            eprintln!(
                "  {:20} {:>10.3} {:5}  ({:.2} s{}{})",
                r.name,
                r.value,
                r.unit.label(),
                r.secs,
                if r.note.is_empty() { "" } else { ", " },
                r.note
            );
            results.push(r);
        }
        cx.done.insert(phase.clone(), all);
    }
    if !job.params.keep {
        sync.barrier("cleanup.go")?;
        cleanup_own(t, &cx);
        sync.barrier("cleanup.done")?;
        if rank == 0 {
            for (name, _) in t.readdir(&cx.w)? {
                if name != ".sync" {
                    let p = format!("{}/{name}", cx.w);
                    let _ = t.remove_tree(&p).or_else(|_| t.unlink(&p));
                }
            }
        }
    }
    sync.barrier("end")?;
    let w = cx.w.clone();
    sync.finish()?;
    if rank != 0 {
        return Ok(None);
    }
    if !job.params.keep {
        t.rmdir(&w).with_context(|| format!("removing {w}"))?;
    }
    Ok(Some(score(job, size, results)))
}

/// `MADFS_BENCH_SAY_PHASES=1`: rank 0 says on stderr when each phase starts (fault tests
/// kill a server in a chosen phase).
fn say_phases() -> bool {
    std::env::var_os("MADFS_BENCH_SAY_PHASES").is_some_and(|v| v == "1")
}

/// Each rank removes what it wrote and no delete phase removed.
fn cleanup_own<T: Target>(t: &T, cx: &Ctx) {
    let (w, r) = (&cx.w, cx.rank);
    let _ = t.unlink(&format!("{w}/ior_easy/file.{r:08}"));
    let _ = t.unlink(&format!("{w}/ior_rnd/file.{r:08}"));
    if !cx.done.contains_key("mdtest-easy-delete") {
        for i in 0..cx.count("mdtest-easy-write", r) {
            let _ = t.unlink(&format!("{w}/mdt_easy/r{r}/file.{i}"));
        }
    }
    let _ = t.rmdir(&format!("{w}/mdt_easy/r{r}"));
    if !cx.done.contains_key("mdtest-hard-delete") {
        for i in 0..cx.count("mdtest-hard-write", r) {
            let _ = t.unlink(&format!("{w}/mdt_hard/file.{r}.{i}"));
        }
    }
}

fn unit_of(phase: &str) -> Unit {
    PHASES
        .iter()
        .find(|p| p.0 == phase)
        .map_or(Unit::KIops, |p| p.1)
}

fn summarise(cx: &Ctx, phase: &str, all: &[RankOut]) -> Result<PhaseResult> {
    let secs = all.iter().map(|o| o.secs).fold(0.0, f64::max).max(1e-9);
    let ops: u64 = all.iter().map(|o| o.ops).sum();
    let bytes: u64 = all.iter().map(|o| o.bytes).sum();
    let unit = unit_of(phase);
    let value = match unit {
        Unit::GiBs => bytes as f64 / secs / (1u64 << 30) as f64,
        Unit::KIops => ops as f64 / secs / 1e3,
    };
    let mut note = String::new();
    if phase == "find" {
        let found: u64 = all.iter().map(|o| o.found).sum();
        // the filter (-newer timestamp -size 3901c -name *01*) matches exactly the
        // mdtest-hard files whose name contains "01"
        let expect: u64 = (0..cx.size)
            .map(|r| {
                (0..cx.count("mdtest-hard-write", r))
                    .filter(|i| format!("file.{r}.{i}").contains("01"))
                    .count() as u64
            })
            .sum();
        if found != expect {
            bail!("find matched {found} files, expected {expect}");
        }
        note = format!("{found}/{ops} matched, {}", cx.job.target.find);
    }
    if phase == "rpc" {
        note = format!("p50 {:.1} µs", all[0].p50_us);
    }
    Ok(PhaseResult {
        name: phase.to_string(),
        value,
        unit,
        ops,
        bytes,
        secs,
        note,
    })
}

fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

fn score(job: &Job, size: usize, phases: Vec<PhaseResult>) -> TargetResult {
    let pick = |names: &[&str]| -> Option<f64> {
        let v: Vec<f64> = names
            .iter()
            .map(|n| phases.iter().find(|p| p.name == *n).map(|p| p.value))
            .collect::<Option<_>>()?;
        Some(geomean(&v))
    };
    let bw = pick(BW_PHASES);
    let md = pick(MD_PHASES);
    TargetResult {
        target: job.target.clone(),
        ranks: size,
        score: bw.zip(md).map(|(b, m)| (b * m).sqrt()),
        bw,
        md,
        phases,
    }
}

fn run_phase<T: Target>(t: &T, cx: &Ctx, phase: &str) -> Result<RankOut> {
    let p = &cx.job.params;
    let (w, rank, src) = (&cx.w, cx.rank, cx.src());
    let stonewalled = phase.ends_with("-write");
    let prog = Progress::start(cx.show, phase, stonewalled.then_some(p.stonewall));
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(p.stonewall);
    let mut out = RankOut::default();
    let mut tick = 0u32;
    let mut go = |out: &RankOut| {
        tick = tick.wrapping_add(1);
        if tick.is_multiple_of(64) {
            prog.tick(t0);
        }
        out.ops == 0 || Instant::now() < deadline
    };
    match phase {
        "ior-easy-write" => {
            let xfer = p.easy_xfer as usize;
            let mut buf = pattern(xfer, rank);
            let mut f = t.create(&format!("{w}/ior_easy/file.{rank:08}"), false)?;
            while out.bytes + p.easy_xfer <= p.easy_max && go(&out) {
                stamp(&mut buf, out.bytes, rank);
                t.pwrite(&mut f, out.bytes, &buf)?;
                out.bytes += p.easy_xfer;
                out.ops += 1;
            }
            t.fsync(&mut f)?;
            t.close(f)?;
        }
        "ior-easy-read" => {
            let mut buf = vec![0u8; p.easy_xfer as usize];
            let f = t.open_read(&format!("{w}/ior_easy/file.{src:08}"))?;
            for i in 0..cx.count("ior-easy-write", src) {
                let off = i * p.easy_xfer;
                if t.pread(&f, off, &mut buf)? != buf.len() {
                    bail!("short read at {off}");
                }
                check(&buf, off, src, "ior-easy-read")?;
                out.bytes += p.easy_xfer;
                out.ops += 1;
            }
            t.close(f)?;
        }
        "ior-hard-write" => {
            let mut buf = pattern(p.hard_record as usize, rank);
            let mut f = t.open_write(&format!("{w}/ior_hard/file"))?;
            while out.ops < p.hard_max && go(&out) {
                let off = (out.ops * cx.size as u64 + rank as u64) * p.hard_record;
                stamp(&mut buf, off, rank);
                t.pwrite(&mut f, off, &buf)?;
                out.bytes += p.hard_record;
                out.ops += 1;
            }
            t.fsync(&mut f)?;
            t.close(f)?;
        }
        "ior-hard-read" => {
            let mut buf = vec![0u8; p.hard_record as usize];
            let f = t.open_read(&format!("{w}/ior_hard/file"))?;
            for i in 0..cx.count("ior-hard-write", src) {
                let off = (i * cx.size as u64 + src as u64) * p.hard_record;
                if t.pread(&f, off, &mut buf)? != buf.len() {
                    bail!("short read at {off}");
                }
                check(&buf, off, src, "ior-hard-read")?;
                out.bytes += p.hard_record;
                out.ops += 1;
            }
            t.close(f)?;
        }
        "mdtest-easy-write" => {
            while out.ops < p.mdeasy_max && go(&out) {
                let f = t.create(&format!("{w}/mdt_easy/r{rank}/file.{}", out.ops), true)?;
                t.close(f)?;
                out.ops += 1;
            }
        }
        "mdtest-easy-stat" => {
            for i in 0..cx.count("mdtest-easy-write", src) {
                let (sz, _, _) = t.stat(&format!("{w}/mdt_easy/r{src}/file.{i}"))?;
                if sz != 0 {
                    bail!("mdt_easy/r{src}/file.{i}: size {sz}, expected 0");
                }
                out.ops += 1;
            }
        }
        "mdtest-easy-delete" => {
            for i in 0..cx.count("mdtest-easy-write", rank) {
                t.unlink(&format!("{w}/mdt_easy/r{rank}/file.{i}"))?;
                out.ops += 1;
            }
        }
        "mdtest-hard-write" => {
            let buf = pattern(p.mdhard_bytes as usize, rank);
            while out.ops < p.mdhard_max && go(&out) {
                let mut f = t.create(&format!("{w}/mdt_hard/file.{rank}.{}", out.ops), true)?;
                t.pwrite(&mut f, 0, &buf)?;
                t.close(f)?;
                out.ops += 1;
                out.bytes += p.mdhard_bytes;
            }
        }
        "mdtest-hard-stat" => {
            for i in 0..cx.count("mdtest-hard-write", src) {
                let (sz, _, _) = t.stat(&format!("{w}/mdt_hard/file.{src}.{i}"))?;
                if sz != p.mdhard_bytes {
                    bail!(
                        "mdt_hard/file.{src}.{i}: size {sz}, expected {}",
                        p.mdhard_bytes
                    );
                }
                out.ops += 1;
            }
        }
        "mdtest-hard-read" => {
            let want = pattern(p.mdhard_bytes as usize, src);
            let mut buf = vec![0u8; p.mdhard_bytes as usize];
            for i in 0..cx.count("mdtest-hard-write", src) {
                let f = t.open_read(&format!("{w}/mdt_hard/file.{src}.{i}"))?;
                let n = t.pread(&f, 0, &mut buf)?;
                t.close(f)?;
                if n != buf.len() || buf != want {
                    bail!("mdt_hard/file.{src}.{i}: wrong content");
                }
                out.ops += 1;
                out.bytes += n as u64;
            }
        }
        "mdtest-hard-delete" => {
            for i in 0..cx.count("mdtest-hard-write", rank) {
                t.unlink(&format!("{w}/mdt_hard/file.{rank}.{i}"))?;
                out.ops += 1;
            }
        }
        "find" => find(t, cx, &mut out)?,
        "ior-rand-4k-write" | "ior-rand-4k-read" => {
            let blocks = p.rand_size / 4096;
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (rank as u64 + 1));
            let path = format!("{w}/ior_rnd/file.{rank:08}");
            let mut buf = pattern(4096, rank);
            if phase == "ior-rand-4k-write" {
                let mut f = t.create(&path, false)?;
                while out.ops < blocks && go(&out) {
                    t.pwrite(&mut f, (rng.next() % blocks) * 4096, &buf)?;
                    out.ops += 1;
                }
                t.fsync(&mut f)?;
                t.close(f)?;
            } else {
                let f = t.open_read(&path)?;
                for _ in 0..cx.count("ior-rand-4k-write", rank) {
                    let off = (rng.next() % blocks) * 4096;
                    t.pread(&f, off, &mut buf)?;
                    out.ops += 1;
                }
                t.close(f)?;
            }
            out.bytes = out.ops * 4096;
        }
        "rpc" => {
            let c = client(&cx.job.target)?;
            let n = c.servers();
            let mut lat = Vec::with_capacity(p.rpc_iters as usize);
            for s in 0..n {
                c.ping(s)?; // connect outside the measurement
            }
            let t1 = Instant::now();
            for i in 0..p.rpc_iters {
                let s = Instant::now();
                c.ping((i % n as u64) as u32)?;
                lat.push(s.elapsed().as_secs_f64() * 1e6);
            }
            out.secs = t1.elapsed().as_secs_f64();
            out.ops = p.rpc_iters;
            lat.sort_by(f64::total_cmp);
            out.p50_us = lat.get(lat.len() / 2).copied().unwrap_or(f64::NAN);
            prog.done();
            return Ok(out);
        }
        other => bail!("unknown phase {other}"),
    }
    out.secs = t0.elapsed().as_secs_f64();
    prog.done();
    Ok(out)
}

/// IO500's find: `-newer timestamp -size 3901c -name *01*` over the whole run directory.
fn find<T: Target>(t: &T, cx: &Ctx, out: &mut RankOut) -> Result<()> {
    let size = cx.job.params.mdhard_bytes;
    if cx.job.target.find == "madfs" {
        // server-side, as `madfs-find` does: rank 0 asks every server at once
        if cx.rank != 0 {
            return Ok(());
        }
        let c = client(&cx.job.target)?;
        let dir = match &cx.job.target.mount {
            Some(m) => cx.w.strip_prefix(m.as_str()).unwrap_or(&cx.w).to_string(),
            None => cx.w.clone(),
        };
        let filter = madfs_client::FindFilter {
            name: Some("*01*"),
            size: Some((size, 1)),
            newer_than: Some(cx.timestamp_ns),
            kind: None,
            pending: false,
        };
        let (paths, scanned) = c.find(if dir.is_empty() { "/" } else { &dir }, &filter)?;
        // the barrier files are not part of the tree IO500 searches
        out.found = paths.iter().filter(|p| !p.contains("/.sync/")).count() as u64;
        out.ops = scanned;
        return Ok(());
    }
    // pfind-like walk: every rank lists every directory; rank r stats candidates k ≡ r
    let mut k = 0usize;
    let mut stack = vec![cx.w.clone()];
    while let Some(d) = stack.pop() {
        let mut entries = t.readdir(&d)?;
        entries.sort();
        for (name, is_dir) in entries {
            if d == cx.w && name == ".sync" {
                continue;
            }
            let path = format!("{d}/{name}");
            let mine = k % cx.size == cx.rank;
            k += 1;
            if is_dir {
                stack.push(path.clone());
            }
            if !mine {
                continue;
            }
            out.ops += 1;
            if !is_dir && name.contains("01") {
                let (sz, mtime, _) = t.stat(&path)?;
                if sz == size && mtime > cx.timestamp_ns {
                    out.found += 1;
                }
            }
        }
    }
    Ok(())
}
