//! `madfs-bench move`: what clients see while a server joins (docs/operations.md, "Growing a
//! cluster"). For each `--throttle` (MiB/s a slot move copies chunk data at), a fresh local
//! cluster of `--servers` is filled with `--big-mib` of chunk data in large files and
//! `--files` small files; `--clients` client threads then run mdtest's operations in a loop
//! (create and write a 3,901-byte file, stat one, read one, delete one), first for
//! `--idle` seconds with nothing moving, then while a new server joins (`madfs-ctl add`),
//! until its last slot switched. The latencies of each operation, p50 and p99, idle against
//! during the move, and how long the move took.

use anyhow::{bail, Context};
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_cluster::{LocalCluster, Options};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct MoveArgs {
    /// Servers the cluster starts with (one more joins).
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Small files (3,901 bytes) made before the measurements.
    #[arg(long, default_value_t = 20_000)]
    files: usize,
    /// MiB of chunk data made before, in 64 large files.
    #[arg(long, default_value_t = 1024)]
    big_mib: u64,
    /// Client threads running the operations.
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// Seconds of operations with nothing moving.
    #[arg(long, default_value_t = 10)]
    idle: u64,
    /// Move throttles to compare, MiB/s (0: unbounded), each on a fresh cluster.
    #[arg(long, value_delimiter = ',', default_value = "50,200,0")]
    throttle: Vec<u64>,
    /// Slots per batch (`--move-batch-slots`).
    #[arg(long, default_value_t = 64)]
    batch: u32,
}

const OPS: [&str; 4] = ["create", "stat", "read", "delete"];
const SMALL: usize = 3901;

/// Latencies in µs per operation (index into [`OPS`]).
type Samples = [Vec<f64>; 4];

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One client thread: operations until `stop`, on files `/m/c<k>/…` (thread `k`); the
/// small files `/s/f<i>` (`files` of them) are stat'ed and read.
fn client_loop(
    cfg: &ClientConfig,
    k: usize,
    files: usize,
    stop: &AtomicBool,
    errors: &Mutex<Vec<String>>,
) -> Samples {
    let mut out: Samples = Default::default();
    let c = match Client::new(cfg) {
        Ok(c) => c,
        Err(e) => {
            errors.lock().unwrap().push(format!("client {k}: {e}"));
            return out;
        }
    };
    let body = vec![b'x'; SMALL];
    let mut buf = vec![0u8; SMALL];
    let mut n = 0usize;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (k as u64) << 32;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    while !stop.load(Relaxed) {
        let mine = format!("/m/c{k}/f{n}");
        let some = format!("/s/f{}", next() as usize % files.max(1));
        let mut time = |op: usize, f: &mut dyn FnMut() -> Result<(), String>| {
            let t = Instant::now();
            if let Err(e) = f() {
                errors.lock().unwrap().push(format!("{}: {e}", OPS[op]));
            }
            out[op].push(t.elapsed().as_secs_f64() * 1e6);
        };
        time(0, &mut || {
            let mut f = c
                .open(&mine, OpenFlags::create_trunc())
                .map_err(|e| format!("{mine}: {e}"))?;
            c.write(&mut f, 0, &body).map_err(|e| format!("{e}"))?;
            c.close(f).map_err(|e| format!("{e}"))
        });
        time(1, &mut || {
            c.stat(&some).map(drop).map_err(|e| format!("{some}: {e}"))
        });
        time(2, &mut || {
            let f = c
                .open(&some, OpenFlags::default())
                .map_err(|e| format!("{some}: {e}"))?;
            let r = c.read(&f, 0, &mut buf);
            c.close(f).map_err(|e| format!("{e}"))?;
            match r {
                Ok(SMALL) => Ok(()),
                Ok(m) => Err(format!("{some}: {m} bytes read")),
                Err(e) => Err(format!("{some}: {e}")),
            }
        });
        time(3, &mut || {
            c.unlink(&mine).map_err(|e| format!("{mine}: {e}"))
        });
        n += 1;
    }
    out
}

/// Runs the client threads until `until` says so; their samples merged, sorted.
fn measure(
    cfg: &ClientConfig,
    a: &MoveArgs,
    errors: &Mutex<Vec<String>>,
    until: &dyn Fn() -> bool,
) -> Samples {
    let stop = AtomicBool::new(false);
    let all: Vec<Samples> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..a.clients)
            .map(|k| {
                let stop = &stop;
                s.spawn(move || client_loop(cfg, k, a.files, stop, errors))
            })
            .collect();
        while !until() {
            // (a control login each time the move's end is asked)
            std::thread::sleep(Duration::from_millis(250));
        }
        stop.store(true, Relaxed);
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut out: Samples = Default::default();
    for s in all {
        for (o, v) in out.iter_mut().zip(s) {
            o.extend(v);
        }
    }
    for v in &mut out {
        v.sort_by(f64::total_cmp);
    }
    out
}

/// Slots left to move, as server 0's map says.
fn moving(cl: &LocalCluster) -> Option<u32> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let login = madfs_control::Login::for_cluster(&cl.cluster_file()).ok()?;
    rt.block_on(async {
        let c = madfs_control::connect(cl.entry(0).control, &login)
            .await
            .ok()?;
        c.status(madfs_control::context(5))
            .await
            .ok()?
            .ok()?
            .map
            .map(|m| m.moving)
    })
}

pub fn run(a: MoveArgs) -> anyhow::Result<()> {
    if a.servers < 1 || a.clients < 1 {
        bail!("--servers and --clients must be at least 1");
    }
    println!(
        "madfs-bench move: {} servers + 1 joining, {} small files, {} MiB in large files, \
         {} client threads, batches of {} slots",
        a.servers, a.files, a.big_mib, a.clients, a.batch
    );
    println!(
        "{:>9} {:>7} {:>8} | {:>19} {:>19} {:>19} {:>19}",
        "throttle",
        "move s",
        "errors",
        "create p50/p99",
        "stat p50/p99",
        "read p50/p99",
        "delete p50/p99"
    );
    for &t in &a.throttle {
        let mut cl = LocalCluster::start(Options {
            servers: a.servers,
            args: vec![
                "--move-mib-s".into(),
                t.to_string(),
                "--move-batch-slots".into(),
                a.batch.to_string(),
            ],
            ..Default::default()
        })
        .context("starting a local cluster")?;
        let cfg = ClientConfig::from_cluster_file(cl.cluster_file())?;
        fill(&cfg, &a)?;
        let errors = Mutex::new(vec![]);
        let t0 = Instant::now();
        let idle = measure(&cfg, &a, &errors, &|| {
            t0.elapsed() >= Duration::from_secs(a.idle)
        });
        let new = cl.start_joining()?;
        let (ok, out) = cl.ctl(&["add", &new.to_string()]);
        if !ok {
            bail!("madfs-ctl add {new}: {out}");
        }
        let t1 = Instant::now();
        let during = measure(&cfg, &a, &errors, &|| {
            moving(&cl) == Some(0) || t1.elapsed() > Duration::from_secs(1800)
        });
        let took = t1.elapsed().as_secs_f64();
        let errors = errors.into_inner().unwrap_or_default();
        for (name, s) in [("idle", &idle), ("moving", &during)] {
            let cell = |v: &Vec<f64>| {
                format!("{:>8.0}/{:<8.0}µs", percentile(v, 0.5), percentile(v, 0.99))
            };
            println!(
                "{:>9} {:>7} {:>8} | {} {} {} {}",
                if name == "idle" {
                    if t == 0 {
                        "unbounded".to_string()
                    } else {
                        format!("{t} MiB/s")
                    }
                } else {
                    String::new()
                },
                if name == "idle" {
                    "idle".to_string()
                } else {
                    format!("{took:.1}")
                },
                if name == "idle" {
                    String::new()
                } else {
                    errors.len().to_string()
                },
                cell(&s[0]),
                cell(&s[1]),
                cell(&s[2]),
                cell(&s[3])
            );
        }
        let ratio: Vec<String> = (0..4)
            .map(|i| {
                format!(
                    "{} {:.2}×",
                    OPS[i],
                    percentile(&during[i], 0.99) / percentile(&idle[i], 0.99).max(1.0)
                )
            })
            .collect();
        println!("{:>9} p99 moving/idle: {}", "", ratio.join(", "));
        if let Some(e) = errors.first() {
            bail!("{} operation(s) failed, the first: {e}", errors.len());
        }
    }
    Ok(())
}

/// The files the operations read, and the chunk data the move carries.
fn fill(cfg: &ClientConfig, a: &MoveArgs) -> anyhow::Result<()> {
    let c = Client::new(cfg)?;
    let io = |e: madfs_client::Errno| anyhow::anyhow!("filling: {e}");
    for d in ["/s", "/m", "/big"] {
        c.mkdir(d, 0o755).map_err(io)?;
    }
    for k in 0..a.clients {
        c.mkdir(&format!("/m/c{k}"), 0o755).map_err(io)?;
    }
    let body = vec![b's'; SMALL];
    for i in 0..a.files {
        let mut f = c
            .open(&format!("/s/f{i}"), OpenFlags::create_trunc())
            .map_err(io)?;
        c.write(&mut f, 0, &body).map_err(io)?;
        c.close(f).map_err(io)?;
    }
    let each = (a.big_mib << 20) / 64;
    for i in 0..64 {
        let path = format!("/big/f{i}");
        crate::rebuild::write_file(&c, &path, each, |_, n| vec![b'b'; n]).map_err(io)?;
    }
    Ok(())
}
