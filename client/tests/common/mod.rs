//! Shared fixture of the integration tests: real `madfs-server` processes on 127.0.0.1.
#![allow(dead_code)]

pub mod procs;

use madfs_client::{Client, ClientConfig, Errno, FileSystem, OpenFlags};
use madfs_cluster::{LocalCluster, Options};
use std::sync::Once;
use std::time::Duration;

/// Keeps UCX on loopback in this process (before any UCX context exists).
pub fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("UCX_NET_DEVICES").is_none() {
            // SAFETY: runs once, before any thread of this test binary reads the environment
            // through UCX (every test calls `setup` first).
            unsafe { std::env::set_var("UCX_NET_DEVICES", "lo") };
        }
    });
}

/// Starts `n` servers with extra args.
pub fn cluster(n: usize, args: &[&str], err_mode: &str) -> LocalCluster {
    setup();
    LocalCluster::start(Options {
        servers: n,
        args: args.iter().map(|s| s.to_string()).collect(),
        err_mode: err_mode.into(),
        env: vec![],
    })
    .expect("start servers")
}

/// A client of `c` with a call deadline.
pub fn client(c: &LocalCluster, timeout: Duration, err_mode: &str) -> Client {
    let mut cfg = ClientConfig::from_cluster_file(c.cluster_file()).unwrap();
    cfg.timeout = timeout;
    cfg.ucx.err_mode = madfs_rpc::UcxSettings::parse_err_mode(err_mode).unwrap();
    Client::new(&cfg).unwrap()
}

/// Deterministic pseudo-random bytes.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Writes `bytes` to a new file `path` (in pieces of `piece` bytes) and closes it.
pub fn put(c: &Client, path: &str, bytes: &[u8], piece: usize, fsync: bool) {
    let mut f = c.open(path, OpenFlags::create_trunc()).unwrap();
    let mut off = 0;
    for part in bytes.chunks(piece.max(1)) {
        assert_eq!(c.write(&mut f, off as u64, part).unwrap(), part.len());
        off += part.len();
    }
    if fsync {
        c.fsync(&mut f).unwrap();
    }
    c.close(f).unwrap();
}

/// Reads the whole file `path`.
pub fn get(c: &Client, path: &str) -> Vec<u8> {
    let f = c.open(path, OpenFlags::default()).unwrap();
    let mut out = vec![0u8; f.size() as usize];
    let n = c.read(&f, 0, &mut out).unwrap();
    assert_eq!(n, out.len(), "short read of {path}");
    c.close(f).unwrap();
    out
}

/// Stable checksum.
pub fn sum(b: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(b)
}

/// Counters of server `i` (its control port, logged in with the cluster's keys).
pub fn stats(cl: &LocalCluster, i: usize) -> madfs_control::Stats {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let login = madfs_control::Login::for_cluster(&cl.cluster_file()).unwrap();
        let c = madfs_control::connect(cl.entry(i).control, &login)
            .await
            .unwrap();
        c.stats(madfs_control::context(5)).await.unwrap().unwrap()
    })
}

/// A request as the plain-TCP fallback carries it: `[u32 LE len][kind 1][connection secret]
/// [frame]`.
pub fn tcp_request(secret: u64, req: &madfs_proto::Request<'_>) -> Vec<u8> {
    let mut enc = madfs_proto::frame::Encoder::default();
    let (p, h) = enc.request(req);
    let mut msg = vec![];
    msg.extend_from_slice(&((8 + p.len() + h.len() + 1) as u32).to_le_bytes());
    msg.push(1);
    msg.extend_from_slice(&secret.to_le_bytes());
    msg.extend_from_slice(&p);
    msg.extend_from_slice(h);
    msg
}

/// What a renamer knows of an object: its name generation, or two candidates after a rename
/// whose answer was lost.
#[derive(Clone, Copy, Debug)]
pub enum Known {
    At(u32),
    OneOf(u32, u32),
}

/// The one name among `k`'s candidates (`name(generation)`) once exactly one exists (bounded
/// wait: a move left pending by a killed server finishes when it is back; a directory half
/// moved is finished by its server's mover).
pub fn settle(
    c: &Client,
    k: Known,
    until: std::time::Instant,
    name: &dyn Fn(u32) -> String,
) -> Option<u32> {
    let (a, b) = match k {
        Known::At(g) => (g, g),
        Known::OneOf(a, b) => (a, b),
    };
    while std::time::Instant::now() < until {
        // (a server that is down answers neither way: ask again)
        let mut there = vec![];
        let mut known = true;
        for g in [a, b] {
            match c.stat(&name(g)) {
                Ok(_) => there.push(g),
                Err(Errno::ENOENT) => {}
                Err(_) => known = false,
            }
        }
        match there[..] {
            _ if !known => std::thread::sleep(Duration::from_millis(50)),
            [g] => return Some(g),
            [g, h] if g == h => return Some(g),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    None
}

/// The map epoch when every one of the `n` servers' maps has every server up, in one epoch
/// (`None`: not so), and the status text it was read from (replicated clusters).
pub fn all_up_in(cl: &LocalCluster, n: usize) -> (Option<u64>, String) {
    let text = cl.ctl_status();
    let epochs: std::collections::BTreeSet<&str> = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("map_epoch="))
        .collect();
    let states = format!("states={}", vec!["up"; n].join(","));
    let up = text.matches(&states).count() == n && epochs.len() == 1;
    (up.then(|| epochs.first()?.parse().ok()).flatten(), text)
}

/// The cluster map as server `i` knows it (`None`: it did not answer within 2 s).
pub fn map_of(cl: &LocalCluster, i: usize) -> Option<madfs_control::MapStatus> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let login = madfs_control::Login::for_cluster(&cl.cluster_file()).ok()?;
        let c = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            madfs_control::connect(cl.entry(i).control, &login),
        )
        .await
        .ok()?
        .ok()?;
        c.status(madfs_control::context(2)).await.ok()?.ok()?.map
    })
}
