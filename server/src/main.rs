//! `madfs-server` command line.

use clap::Parser;
use madfs_rpc::UcxSettings;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// One madfs server: metadata in RocksDB, data chunks in a local directory, requests over UCX.
#[derive(Parser, Debug)]
#[command(name = "madfs-server", version)]
struct Args {
    /// A TOML file of settings, one key per flag of this list (its long name, `-` or `_`):
    /// `data-dir = "/local/madfs/{id}"`, `replication = 2`, `root-squash = true`. Flags on
    /// the command line win; an unknown key is refused (docs/operations.md, "Config file").
    #[arg(long)]
    config: Option<PathBuf>,
    /// Index of this server in the cluster (0..N-1). Default: the MPI/Slurm rank when started
    /// by `mpirun`/`srun` (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID), else 0.
    #[arg(long)]
    id: Option<u32>,
    /// UCX listen address (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// tarpc control port address (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    control: SocketAddr,
    /// Plain-TCP request port, the fallback transport for clients that cannot use UCX
    /// (port 0 picks a free port; default: the --listen host).
    #[arg(long)]
    tcp: Option<SocketAddr>,
    /// Data directory (created if missing); `{id}` is replaced by the server id.
    #[arg(long)]
    data_dir: PathBuf,
    /// Cluster file to register this server in (line `ID UCX_ADDR CONTROL_ADDR`).
    #[arg(long)]
    cluster_file: Option<PathBuf>,
    /// Number of servers of the cluster, fixed when the cluster is made (its identity record).
    /// Default: the recorded value; for a new cluster the MPI/Slurm size (OMPI_COMM_WORLD_SIZE,
    /// PMI_SIZE, PMIX_SIZE, SLURM_NTASKS), else 1.
    #[arg(long)]
    servers: Option<u32>,
    /// A new server of a running cluster: --id is the next id after the cluster file's
    /// servers, and the data directory is new (or one that joined before). It registers,
    /// serves nothing, and becomes a member with `madfs-ctl add ID`, which moves its share
    /// of the slots to it (docs/operations.md, "Growing a cluster").
    #[arg(long, requires = "cluster_file", conflicts_with = "servers")]
    join: bool,
    /// Default chunk (stripe) size of new files, bytes, fixed when the cluster is made
    /// (default: the recorded value; for a new cluster 16 × 47,008, the ior-hard record).
    #[arg(long)]
    chunk_size: Option<u32>,
    /// How peers prove who they are, fixed when the cluster is made: `key` (default: a
    /// random key beside the cluster file; its owner is the one user served) or `munge`
    /// (each process's MUNGE credential). docs/security.md.
    #[arg(long, value_parser = parse_auth)]
    auth: Option<madfs_identity::AuthMode>,
    /// Make (or run) a cluster without authentication: anyone who reaches a port is served as
    /// whoever it claims to be. For throw-away tests on a closed machine only.
    #[arg(long, conflicts_with = "auth")]
    insecure: bool,
    /// Key mode: the user served (UID:GID), who owns the key file; default: the server's
    /// own user. A launcher running as root for a job gives the job's user.
    #[arg(long)]
    owner: Option<madfs_identity::Owner>,
    /// Serve clients that prove uid 0 as nobody (65534:65534), as NFS's root_squash (servers
    /// acting for each other are not squashed).
    #[arg(long)]
    root_squash: bool,
    /// Request handlers (each owns preallocated buffers).
    #[arg(long, default_value_t = 16)]
    handlers: usize,
    /// IO threads for chunk IO and scans.
    #[arg(long, default_value_t = 4)]
    io_threads: usize,
    /// UCX endpoint error mode: none (allows shared memory) or peer. A replicated cluster
    /// always uses peer (docs/architecture.md, "UCX settings").
    #[arg(long, env = "MADFS_UCX_ERR_MODE", default_value = "none", value_parser = UcxSettings::parse_err_mode)]
    ucx_err_mode: madfs_rpc::ErrorMode,
    /// Microseconds UCX progress spins before sleeping on the event fd.
    #[arg(long, env = "MADFS_SPIN_US", default_value_t = 50)]
    spin_us: u64,
    /// Run metadata operations on IO threads instead of the net thread.
    #[arg(long)]
    meta_on_io_threads: bool,
    /// Bytes of each file's chunk 0 stored inline in RocksDB (the small-file threshold; the rest
    /// of chunk 0 goes to a chunk file on the same server), fixed when the cluster is made
    /// (default: the recorded value; for a new cluster 65,536).
    #[arg(long)]
    inline_max: Option<u32>,
    /// End-to-end checksums of chunk data, fixed when the cluster is made: `crc32c` (default:
    /// a crc32c per 4 KiB block, verified on every read) or `none`. docs/architecture.md.
    #[arg(long)]
    checksums: Option<madfs_identity::Checksums>,
    /// MiB kept free on the data directory's file system for metadata: writes of file data
    /// get ENOSPC below it (default: 1 % of the file system, 16 MiB to 1 GiB).
    #[arg(long)]
    reserve_mb: Option<u64>,
    /// One WAL sync per fsync request instead of group commit (for benchmarks).
    #[arg(long)]
    no_group_commit: bool,
    /// Copies of every entry and chunk (1 to 3, at most --servers; fixed when the cluster is
    /// made; docs/redundancy.md).
    #[arg(long)]
    replication: Option<u32>,
    /// Serve Prometheus metrics (counters, per-request latency histograms) on this address
    /// at /metrics (no login: bind it to localhost or a monitoring network). Default: none.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Milliseconds between the cluster map leader's heartbeats (every cluster with a
    /// cluster file runs the map: it holds the layout).
    #[arg(long, default_value_t = 200)]
    heartbeat_ms: u64,
    /// The cluster map: a follower that hears no leader for this long (to 1.25 times as
    /// long, at random) starts an election.
    #[arg(long, default_value_t = 800)]
    election_ms: u64,
    /// Replicated clusters: a server that answers none of the leader's messages for this long
    /// is marked down in the cluster map.
    #[arg(long, default_value_t = 1500)]
    down_after_ms: u64,
    /// Replicated clusters: MiB per second a rejoining server copies chunk data at while it
    /// catches up (0: as fast as it can), so that running jobs keep their speed.
    #[arg(long, default_value_t = 200)]
    resync_mib_s: u64,
    /// MiB per second of chunk data a server receives from slot moves (`madfs-ctl drain`,
    /// `add`), on average (0: as fast as it can): the copy of a batch runs at full speed
    /// while its slots are frozen, and the next batch waits. Running jobs keep their
    /// latencies: at 32, p99 stays within 3× of an idle cluster's on the project machine
    /// (docs/performance.md, `madfs-bench move`); 200 moves 6× faster at 13–27×.
    #[arg(long, default_value_t = 32)]
    move_mib_s: u64,
    /// Slots one step of a move freezes and copies together (1 to 4096): fewer make shorter
    /// pauses for the requests that wait on them, more make the move take fewer steps.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    move_batch_slots: u16,
    /// Milliseconds to wait for a reply to go out before dropping the connection.
    #[arg(long, default_value_t = 5000)]
    send_timeout_ms: u64,
    /// Milliseconds a write's data may take after its request; then the request is dropped.
    #[arg(long, default_value_t = 2000)]
    half_sent_ms: u64,
    /// Milliseconds the UCX worker may stay unable to sleep before it is probed, and the probe
    /// has to come through; a stalled worker (a local client died in the middle of a send)
    /// makes the server restart itself. 0: never watched.
    #[arg(long, default_value_t = 2000)]
    stall_ms: u64,
    /// Milliseconds a UCX connection may stay silent before the server closes it (its lease;
    /// clients reconnect before it runs out). 0: never.
    #[arg(long, default_value_t = 30_000)]
    lease_ms: u64,
    /// Milliseconds a client process's open-file references last without renewal (an active
    /// client renews every 10 s): a crashed (or that long idle) client's open-unlinked files
    /// are dropped after it.
    #[arg(long, default_value_t = 600_000)]
    open_lease_ms: u64,
    /// Client processes of one user that may hold files of this server open at once (each
    /// process of a job that opens files here is one): beyond, its opens answer EMFILE, so
    /// that one user cannot make a server keep references without bound.
    #[arg(long, default_value_t = madfs_server::state::opens::HOLDERS_PER_USER)]
    holders_per_user: usize,
    /// Milliseconds a client process may keep an answer of this server in its cache (a
    /// lease, called back before a change that makes it stale is acknowledged; a client that
    /// does not answer a callback delays that change by at most this). 0: no client caches
    /// anything. Replicated clusters cut it to 7/24 of `--down-after-ms`, less 2 ms (435 ms),
    /// so that a failover has no lease to wait out.
    #[arg(long, default_value_t = 1000)]
    cache_lease_ms: u64,
    /// Most leases of client caches this server keeps (each about 100 bytes); beyond, it
    /// grants none until some end.
    #[arg(long, default_value_t = madfs_server::state::leases::LEASES_MAX)]
    leases_max: usize,
    /// Milliseconds a TCP connection may stay idle between requests. 0: never.
    #[arg(long, default_value_t = 60_000)]
    tcp_idle_ms: u64,
    /// MiB of memory that slow requests (awaited data, unsent replies) may hold together.
    #[arg(long, default_value_t = 64)]
    park_mib: usize,
}

/// `madfs-server fsck [--repair] DATA_DIR…`: offline fsck of stopped servers' data
/// directories (docs/operations.md, "fsck").
#[derive(Parser)]
#[command(name = "madfs-server fsck")]
struct Fsck {
    /// Remove orphan chunk files (needs every server's data directory of the cluster).
    #[arg(long)]
    repair: bool,
    /// Data directories (every server's, to decide orphans).
    #[arg(required = true)]
    data_dirs: Vec<PathBuf>,
}

fn parse_auth(s: &str) -> Result<madfs_identity::AuthMode, String> {
    match s.parse()? {
        madfs_identity::AuthMode::Insecure => {
            Err("use --insecure for a cluster without authentication".into())
        }
        m => Ok(m),
    }
}

fn main() {
    use std::io::IsTerminal;
    if std::env::var_os("UCX_TCP_CM_REUSEADDR").is_none() {
        // A server restarted after a crash must get its port back at once (the cluster file
        // names it), not after TIME_WAIT. SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("UCX_TCP_CM_REUSEADDR", "y") };
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            madfs_rpc::log_directives(std::env::var("MADFS_LOG").ok().as_deref(), "info"),
        ))
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    if std::env::args().nth(1).as_deref() == Some("fsck") {
        let f = Fsck::parse_from(std::env::args().skip(1));
        match madfs_server::fsck::offline(&f.data_dirs, f.repair) {
            Ok(true) => std::process::exit(0),
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("madfs-server fsck: {e:#}");
                std::process::exit(2);
            }
        }
    }
    let a = {
        use clap::CommandFactory;
        let flags: Vec<madfs_server::config::Flag> = Args::command()
            .get_arguments()
            .filter_map(|a| {
                Some(madfs_server::config::Flag {
                    long: a.get_long()?.to_owned(),
                    takes_value: a.get_action().takes_values(),
                })
            })
            .collect();
        match madfs_server::config::expand(std::env::args_os().collect(), &flags) {
            Ok(argv) => Args::parse_from(argv),
            Err(e) => {
                eprintln!("madfs-server: {e:#}");
                std::process::exit(2);
            }
        }
    };
    if a.chunk_size
        .is_some_and(|c| c < 4096 || c > madfs_server::handlers::data::MAX_CHUNK as u32)
    {
        eprintln!(
            "madfs-server: --chunk-size must be between 4096 and {}",
            madfs_server::handlers::data::MAX_CHUNK
        );
        std::process::exit(2);
    }
    let rank_env = [
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok()));
    let id = a.id.or(rank_env).unwrap_or(0);
    let size_env = [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "SLURM_NTASKS",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok()));
    if a.servers == Some(0)
        || a.inline_max
            .is_some_and(|m| m as u64 > madfs_server::handlers::data::MAX_CHUNK)
    {
        eprintln!(
            "madfs-server: --servers must be at least 1 and --inline-max at most {}",
            madfs_server::handlers::data::MAX_CHUNK
        );
        std::process::exit(2);
    }
    // one data directory per rank when several servers share a node: `{id}` in the path
    let data_dir = std::path::PathBuf::from(
        a.data_dir
            .to_string_lossy()
            .replace("{id}", &id.to_string()),
    );
    let asked = madfs_server::identity::Asked {
        servers: a.servers,
        new_servers: size_env,
        chunk_size: a.chunk_size,
        inline_max: a.inline_max,
        auth: if a.insecure {
            Some(madfs_identity::AuthMode::Insecure)
        } else {
            a.auth
        },
        owner: a.owner,
        checksums: a.checksums,
        replication: a.replication,
        join: a.join,
    };
    // UCX shared memory and cross-memory attach work only between processes of one user:
    // a server that serves other users (MUNGE, or a key owned by someone else) must not
    // offer them, or those users' connections fail (the operator's UCX_TLS wins)
    if std::env::var_os("UCX_TLS").is_none() {
        // SAFETY: plain getter.
        let me = unsafe { libc::geteuid() };
        let other_users =
            match madfs_server::identity::peek(&data_dir, &asked, a.cluster_file.as_deref()) {
                (madfs_identity::AuthMode::Key, Some(o)) => o.uid != me,
                (madfs_identity::AuthMode::Key, None) => false,
                _ => true,
            };
        if other_users {
            // SAFETY: no other thread exists yet.
            unsafe { std::env::set_var("UCX_TLS", "^sysv,posix,cma") };
        }
    }
    let cfg = madfs_server::Config {
        id,
        listen: a.listen,
        control: a.control,
        tcp: a.tcp.unwrap_or_else(|| SocketAddr::new(a.listen.ip(), 0)),
        data_dir,
        cluster_file: a.cluster_file,
        asked,
        handlers: a.handlers,
        io_threads: a.io_threads,
        ucx: UcxSettings {
            err_mode: a.ucx_err_mode,
            spin: Duration::from_micros(a.spin_us),
        },
        meta_inline: !a.meta_on_io_threads,
        send_timeout: Duration::from_millis(a.send_timeout_ms),
        group_commit: !a.no_group_commit,
        root_squash: a.root_squash,
        reserve: a.reserve_mb.map(|m| m << 20),
        limits: madfs_server::net::Limits {
            half_sent: Duration::from_millis(a.half_sent_ms),
            lease: Duration::from_millis(a.lease_ms),
            open_lease: Duration::from_millis(a.open_lease_ms.max(1000)),
            tcp_idle: Duration::from_millis(a.tcp_idle_ms),
            stall: Duration::from_millis(a.stall_ms),
            park_bytes: a.park_mib << 20,
            ..Default::default()
        },
        holders_per_user: a.holders_per_user,
        cache_lease: Duration::from_millis(a.cache_lease_ms.min(60_000)),
        leases_max: a.leases_max,
        metrics: a.metrics,
        map: madfs_server::replica::Settings {
            heartbeat: Duration::from_millis(a.heartbeat_ms),
            election: Duration::from_millis(a.election_ms),
            down_after: Duration::from_millis(a.down_after_ms),
            resync_rate: a.resync_mib_s << 20,
            move_rate: a.move_mib_s << 20,
            move_batch: a.move_batch_slots as usize,
        },
    };
    if let Ok(n) = std::env::var(madfs_server::restart::RESTARTS) {
        tracing::warn!("restarted by itself ({n} time(s)): its UCX worker had stalled");
    }
    if let Err(e) = madfs_server::run(cfg) {
        if let Some(r) = e.downcast_ref::<madfs_server::restart::Restart>() {
            let e = madfs_server::restart::exec(r);
            eprintln!("madfs-server: restart failed: {e}");
            std::process::exit(1);
        }
        eprintln!("madfs-server: {e:#}");
        std::process::exit(1);
    }
}
