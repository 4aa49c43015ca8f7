//! `madfs-server`: metadata in RocksDB, data chunks in local files, requests over UCX (and
//! plain TCP).
//!
//! A request's path, in three hops: a transport ([`net`]: UCX or TCP, bytes only) → the one
//! serve path ([`serve`]) and its pipeline ([`pipeline`]: admit, authorize, execute,
//! replicate, reply, each request's needs in one table, [`table`]) → a handler
//! ([`handlers`], by family) on the stores (`madfs_store`: RocksDB and chunk files).

pub mod admit;
pub mod authorize;
pub mod cap;
pub mod clock;
pub mod config;
pub mod control;
pub mod cursor;
#[cfg(test)]
pub mod fixture;
pub mod fsck;
pub mod gate;
pub mod handlers;
pub mod identity;
pub mod invalidate;
pub mod latency;
pub mod metrics;
pub mod migrate;
pub mod net;
pub mod peer;
pub mod pipeline;
pub mod replica;
pub mod restart;
pub mod serve;
pub mod server;
pub mod state;
pub mod stats;
pub mod sync;
pub mod table;
pub mod touches;
pub mod who;

use madfs_rpc::cluster_file::{self, ServerEntry};
use madfs_rpc::{ErrorMode, UcxSettings};
use madfs_store::MetadataStore;
use server::Server;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Everything a server is started with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Server index in the cluster.
    pub id: u32,
    /// UCX listen address (port 0: any free port).
    pub listen: SocketAddr,
    /// Control port address (port 0: any free port).
    pub control: SocketAddr,
    /// Plain-TCP request port (fallback transport; port 0: any free port).
    pub tcp: SocketAddr,
    /// Data directory (RocksDB in `db/`, chunks in `chunks/`).
    pub data_dir: PathBuf,
    /// Cluster file to register in (optional).
    pub cluster_file: Option<PathBuf>,
    /// `--servers`, `--chunk-size`, `--inline-max` as given (the cluster's identity record
    /// holds the values in force: [`identity::settle`]).
    pub asked: identity::Asked,
    /// Request handlers.
    pub handlers: usize,
    /// IO threads for blocking work.
    pub io_threads: usize,
    /// UCX settings.
    pub ucx: UcxSettings,
    /// Run metadata operations on the net thread.
    pub meta_inline: bool,
    /// Reply send timeout.
    pub send_timeout: Duration,
    /// Batch concurrent fsyncs into one WAL sync (default); off = one sync per request.
    pub group_commit: bool,
    /// Serve clients that prove uid 0 as nobody.
    pub root_squash: bool,
    /// Bytes kept free for metadata (data writes get ENOSPC below it); `None`: 1 % of the
    /// file system, 16 MiB to 1 GiB.
    pub reserve: Option<u64>,
    /// What slow, stalled and hostile peers may hold (deadlines, leases, parking).
    pub limits: net::Limits,
    /// Open-file holders one user may have on this server (`--holders-per-user`).
    pub holders_per_user: usize,
    /// How long a lease of a client cache lasts (`--cache-lease-ms`; zero: no leases, no
    /// client keeps anything). Replicated clusters grant none.
    pub cache_lease: Duration,
    /// Most leases this server keeps (`--leases-max`).
    pub leases_max: usize,
    /// Timing of the cluster map's Raft group (replicated clusters).
    pub map: replica::Settings,
    /// Address of the Prometheus endpoint (`None`: none).
    pub metrics: Option<SocketAddr>,
}

/// Raises the soft limit on open files to the hard limit: a server holds a descriptor per
/// client connection on TCP and keeps up to 256 data files open for reads (the chunk store's
/// descriptor cache), and the usual soft limit of 1,024 is reached early. Returns the soft
/// limit in force afterwards.
pub fn raise_fd_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid out-parameter and a plain value.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r = want;
            }
        }
    }
    r.rlim_cur
}

/// Checks that no other user may replace `dir` or what is below it: the directory itself (or,
/// not made yet, the nearest one above it that is) and every directory above it belong to
/// this server's user or root and are writable by no one else, unless sticky (as /tmp).
/// (A shared /tmp/madfs-data another user made first: they could move our directory away
/// and put one of theirs in its place.)
fn safe_above(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: plain getter.
    let me = unsafe { libc::geteuid() };
    let Some(there) = dir.ancestors().skip(1).find(|a| a.exists()) else {
        return Ok(());
    };
    let real = std::fs::canonicalize(there)?;
    for up in real.ancestors() {
        let u = std::fs::metadata(up)?;
        let others_write = u.mode() & 0o022 != 0 && u.mode() & 0o1000 == 0;
        if (u.uid() != me && u.uid() != 0) || others_write {
            anyhow::bail!(
                "data directory {}: {} belongs to uid {} with mode {:o}: another user could \
                 replace what is in it; refused (use a directory of this server's user)",
                dir.display(),
                up.display(),
                u.uid(),
                u.mode() & 0o7777
            );
        }
    }
    Ok(())
}

/// Checks that the data directory is this server's alone: a real directory (not a link),
/// owned by the user the server runs as (an existing directory another user made is refused:
/// the server would write its keys, its chunks and its records where that user can reach
/// them, or follow links planted there); one of its own that others could reach is closed
/// to them (0700).
fn own_data_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir)
        .map_err(|e| anyhow::anyhow!("data directory {}: {e}", dir.display()))?;
    // SAFETY: plain getter.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() {
        anyhow::bail!(
            "data directory {} is not a directory (a link?)",
            dir.display()
        );
    }
    if m.uid() != me {
        anyhow::bail!(
            "data directory {} belongs to uid {}, not to this server's user ({me}): refused",
            dir.display(),
            m.uid()
        );
    }
    if m.mode() & 0o077 != 0 {
        // its own: closed to others (a launcher's `mkdir -p` made it with the umask's mode)
        use std::os::unix::fs::PermissionsExt;
        tracing::info!(
            "data directory {}: mode {:o} made 700",
            dir.display(),
            m.mode() & 0o7777
        );
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Runs a server until it is stopped (control port `shutdown`, SIGTERM, SIGINT). Ends with
/// a [`restart::Restart`] error when it must be started again.
pub fn run(cfg: Config) -> anyhow::Result<()> {
    if cfg.id > u16::MAX as u32 {
        anyhow::bail!("server id {} too large (max {})", cfg.id, u16::MAX);
    }
    let files = raise_fd_limit();
    tracing::debug!("open-file limit {files}");
    safe_above(&cfg.data_dir)?;
    madfs_store::files::make_dir(&cfg.data_dir, 0o700)
        .map_err(|e| anyhow::anyhow!("data directory {}: {e}", cfg.data_dir.display()))?;
    own_data_dir(&cfg.data_dir)?;
    let ident = identity::settle(
        &cfg.data_dir,
        cfg.id,
        cfg.asked,
        cfg.cluster_file.as_deref(),
    )?;
    let mut cfg = cfg;
    if ident.replication > 1 && cfg.ucx.err_mode == ErrorMode::None {
        tracing::info!("replicated cluster: UCX error mode peer (a peer may die)");
    }
    cfg.ucx = cfg.ucx.for_replication(ident.replication);
    let base = gate::key_base(cfg.cluster_file.as_deref(), &cfg.data_dir);
    let mut gate = gate::Gate::open(&ident, cfg.id, &base)?;
    gate.root_squash = cfg.root_squash;
    let gate = Arc::new(gate);
    if ident.auth == madfs_identity::AuthMode::Insecure {
        tracing::warn!(
            "cluster {} runs WITHOUT AUTHENTICATION (made --insecure): anyone who reaches its \
             ports can read, change and delete everything, as any user (docs/security.md)",
            ident.id
        );
    }
    let chunk_size = ident.chunk_size;
    let stats = Arc::new(stats::ServerStats::default());
    let max_frame = chunk_size.max(1 << 20) as usize + net::HEADER_ROOM;
    let replica = Arc::new(std::sync::OnceLock::new());
    // (a store that exists: this server ran before, and clients may still hold its leases)
    let first_life = !cfg.data_dir.join("db").exists();
    let ops = Arc::new(Server {
        id: cfg.id,
        peers: Arc::new(peer::Peers::new(
            ident,
            cfg.cluster_file.clone(),
            cfg.ucx,
            gate.peer_key().clone(),
        )),
        moving: Default::default(),
        meta: madfs_store::rocks::RocksMeta::open(&cfg.data_dir.join("db"))?,
        chunks: madfs_store::chunks::FsChunks::open(
            &cfg.data_dir.join("data"),
            ident.checksums == madfs_identity::Checksums::Crc32c,
        )?,
        chunk_size,
        max_list_bytes: net::HEADER_ROOM / 2,
        inline_max: ident.inline_max as u64,
        stats: stats.clone(),
        dirs: Default::default(),
        dir_times: Default::default(),
        sealed: Default::default(),
        opens: state::opens::OpenRefs::new(cfg.limits.open_lease, cfg.holders_per_user),
        root: server::root_attr(ident.auth, ident.owner),
        // (a replicated cluster's end before a silent primary can be replaced: a new
        // primary has none of the old one's to wait out, docs/consistency.md)
        leases: state::leases::Leases::new(
            if ident.replication >= 2 {
                cfg.cache_lease.min(replica::lease_cap(cfg.map.down_after))
            } else {
                cfg.cache_lease
            },
            cfg.leases_max,
            cfg.id,
        )
        .restarted(!first_life),
        replica: (ident.replication >= 2).then(|| {
            Arc::new(replica::forward::Replication::new(
                ident.replication,
                cfg.id,
                replica.clone(),
            ))
        }),
        node: replica.clone(),
        mapped: cfg.cluster_file.is_some(),
        frozen: Default::default(),
        strays: Default::default(),
    });
    if ident.replication >= 2 {
        ops.meta.keep_own(&ops.peers.layout(), cfg.id);
        // the stores' writes reach the replica sets' secondaries (replication wraps the
        // store; the store knows nothing of it)
        let copies = Arc::new(replica::tap::Copies);
        ops.meta.set_tap(copies.clone());
        ops.chunks.set_tap(copies);
    }
    // the root directory's default mode and owner, until its server's stored ones are learnt
    ops.dirs
        .apply("/", Some(state::dirs::DirPerm::of(&ops.root)), 0);
    let reserve = ops.chunks.set_reserve(cfg.reserve)?;
    tracing::debug!("{reserve} bytes kept free for metadata");
    // every port that is not UCX's first: a port taken by someone else stops the server
    // before UCX exists (one line, no UCX teardown on the way out)
    let tcp = std::net::TcpListener::bind(cfg.tcp)
        .map_err(|e| anyhow::anyhow!("TCP port {}: {e}", cfg.tcp))?;
    let tcp_addr = tcp.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let status = madfs_control::Status {
        id: cfg.id,
        ucx_addr: String::new(),
        data_dir: cfg.data_dir.display().to_string(),
        chunk_size,
        cluster: ident.id.to_string(),
        servers: ident.servers,
        uptime_s: 0,
        pid: std::process::id(),
        err_mode: match cfg.ucx.err_mode {
            ErrorMode::None => "none".into(),
            ErrorMode::Peer => "peer".into(),
        },
        replication: ident.replication,
        map: None,
        capacity: None,
    };
    let ucx_shown = Arc::new(std::sync::OnceLock::new());
    let (control_addr, control_rt) = control::start(
        cfg.control,
        status,
        ucx_shown.clone(),
        ops.clone(),
        stop.clone(),
        gate.clone(),
        replica.clone(),
    )?;
    let ctx = madfs_rpc::new_context()?;
    ops.peers.set_context(ctx.clone());
    {
        let ops = ops.clone();
        std::thread::Builder::new()
            .name("madfs-dirs".into())
            .spawn(move || {
                ops.learn_dirs();
                peer::release_thread();
            })?;
    }
    let pending = ops.park_intents()?;
    if pending > 0 {
        tracing::info!("{pending} rename(s) left pending by the last run: finishing them");
    }
    let sync_tx = sync::start(ops.clone(), cfg.group_commit)?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_stop(peer::release_thread)
        .max_blocking_threads(cfg.io_threads.max(1))
        .thread_name("madfs-io")
        .build()?;
    let local = tokio::task::LocalSet::new();
    let (worker, listener, ucx_addr) = net::bind(&ctx, cfg.listen)?;
    let probe = if cfg.limits.stall.is_zero() {
        None
    } else {
        let address = worker
            .address()
            .map_err(|e| anyhow::anyhow!("UCX worker address: {e}"))?
            .as_ref()
            .to_vec();
        Some(madfs_rpc::probe::Probe::start(
            ctx.clone(),
            address,
            madfs_proto::tag::PROBE,
        )?)
    };
    let _ = ucx_shown.set(ucx_addr.to_string());
    let entry = ServerEntry {
        id: cfg.id,
        ucx: ucx_addr,
        control: control_addr,
        tcp: Some(tcp_addr),
    };
    if let Some(f) = &cfg.cluster_file {
        cluster_file::register(f, entry)?;
    }
    if let Some(a) = cfg.metrics {
        let bound = control_rt.block_on(metrics::start(a, ops.clone()))?;
        tracing::info!("metrics: http://{bound}/metrics");
    }
    // the cluster map (docs/redundancy.md): the layout, and a replicated cluster's states
    match (&cfg.cluster_file, ident.replication) {
        (Some(f), r) => {
            let peers = ops.peers.clone();
            let epoch_file = ops.chunks.open_epoch_file()?;
            let node = control_rt.block_on(replica::Node::start(
                cfg.id,
                ident.servers,
                ident.replication,
                &cfg.data_dir,
                f.clone(),
                cfg.map.clone(),
                Arc::new(move |epoch, l| {
                    peers.set_layout(l);
                    // (published for the clients that read chunk files here themselves)
                    if let Err(e) = epoch_file.publish(epoch) {
                        tracing::error!("the map epoch file: {e}");
                    }
                }),
            ))?;
            let _ = replica.set(node);
            if let Some(r) = &ops.replica {
                r.set_handle(control_rt.clone());
                let (r, n) = (r.clone(), ident.servers);
                ops.peers.set_map_source(Box::new(move || r.map_states(n)));
            }
            if r >= 2 {
                replica::rejoin::start(ops.clone(), stop.clone(), cfg.map.resync_rate)?;
            } else {
                migrate::start(
                    ops.clone(),
                    stop.clone(),
                    control_rt.clone(),
                    cfg.map.clone(),
                )?;
            }
        }
        (None, r) if r >= 2 => anyhow::bail!("replication {r} needs a cluster file"),
        _ => {}
    }
    // the address file is the readiness signal (tests, scripts): written last, once the
    // directory table is learnt (or given up on: `perm::Ops::learn_dirs`), so that no client
    // of a started cluster is asked to wait (EAGAIN) for it
    {
        let (ops, path) = (ops.clone(), cfg.data_dir.join("address"));
        let line = format!("{}\n", cluster_file::line(&entry));
        std::thread::Builder::new()
            .name("madfs-ready".into())
            .spawn(move || {
                // a server that joins (not a member yet) is ready to be added at once: it
                // learns the directories and the map once it is one
                let joining = ops
                    .node
                    .get()
                    .is_some_and(|n| n.map().states.len() <= ops.id as usize);
                while !ops.dirs.ready() && !joining {
                    std::thread::sleep(Duration::from_millis(5));
                }
                // a replicated cluster's server serves once it knows the current map (or
                // after a while without: `madfs-ctl status` then tells why)
                let until = std::time::Instant::now() + Duration::from_secs(30);
                while !joining
                    && (ops.replica.as_ref().is_some_and(|r| !r.current())
                        || (ops.mapped && !ops.node.get().is_some_and(|n| n.ready())))
                    && std::time::Instant::now() < until
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if let Err(e) = madfs_store::files::replace(&path, line.as_bytes(), 0o644, false) {
                    tracing::error!("{}: {e}", path.display());
                }
            })?;
    }
    println!(
        "madfs-server {} ucx={ucx_addr} control={control_addr} tcp={tcp_addr} data={}",
        cfg.id,
        cfg.data_dir.display()
    );
    tracing::info!(
        "server {} listening: ucx {ucx_addr}, control {control_addr}",
        cfg.id
    );

    let net_cfg = net::NetConfig {
        server_id: cfg.id,
        chunk_size,
        cluster: ident.id.0,
        servers: ident.servers,
        handlers: cfg.handlers.max(1),
        fsync_handlers: 1,
        max_frame,
        meta_inline: cfg.meta_inline,
        ucx: cfg.ucx,
        send_timeout: cfg.send_timeout,
        gate: gate.clone(),
        limits: cfg.limits.clone(),
        replication: ident.replication,
    };
    handlers::rename::start_mover(ops.clone(), stop.clone(), Duration::from_millis(500))?;
    handlers::directories::start_times(ops.clone(), stop.clone())?;
    handlers::open_files::start(ops.clone(), stop.clone())?;
    let served = local.block_on(
        &rt,
        net::run(
            worker,
            listener,
            tcp,
            net_cfg,
            ops.clone(),
            sync_tx,
            stop,
            probe,
        ),
    );
    if let Err(e) = &served {
        if madfs_rpc::probe::is_stalled(e) {
            // nothing short of a new UCX worker receives again: start afresh, as after a
            // crash (the WAL made durable first; everything else is where a crash leaves it)
            tracing::error!("{e}: restarting");
            let _ = ops.meta.sync(ops.meta.mark());
            return Err(anyhow::Error::new(restart::Restart {
                listen: ucx_addr,
                control: control_addr,
                tcp: tcp_addr,
            }));
        }
    }
    served?;
    drop(local);
    drop(rt);
    ops.meta.sync(ops.meta.mark())?;
    ops.meta.flush()?;
    tracing::info!("server {} stopped", cfg.id);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn fd_limit_is_raised_to_the_hard_limit() {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit on this process with valid arguments; the soft limit only
        // drops by one, briefly.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
            if r.rlim_max == libc::RLIM_INFINITY || r.rlim_max < 2 {
                return; // nothing to show
            }
            let lower = libc::rlimit {
                rlim_cur: r.rlim_max - 1,
                rlim_max: r.rlim_max,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lower), 0);
        }
        assert_eq!(super::raise_fd_limit(), r.rlim_max);
    }
}
