//! `madfs-fuse`: mounts madfs through FUSE (client/src/fuse/), for programs the preload
//! cannot reach. Runs in the foreground until unmounted or signalled.
//!
//! ```text
//! madfs-fuse [--threads N] [--attr-timeout S] [--entry-timeout S] [--all-users] MOUNTPOINT
//! madfs-fuse --unmount MOUNTPOINT
//! ```

use clap::Parser;
use madfs_client::fuse::{self, Settings};
use madfs_client::ClientConfig;
use std::path::PathBuf;
use std::time::Duration;

/// Mounts the madfs cluster of MADFS_CLUSTER at MOUNTPOINT through FUSE, for programs the
/// preload library cannot reach (static binaries, raw system calls, io_uring, containers).
/// Serves in the foreground until the mount is unmounted (`madfs-fuse --unmount`,
/// `fusermount3 -u`) or it gets SIGTERM, SIGINT or SIGHUP (then it unmounts). Run by a user:
/// that user's mount (the cluster's credentials: key, MUNGE or none). Run by root with
/// --all-users: one mount for every user of the node (docs/operations.md).
#[derive(Parser, Debug)]
#[command(name = "madfs-fuse", version)]
struct Cli {
    /// Where to mount (an existing directory).
    mountpoint: PathBuf,
    /// Unmount MOUNTPOINT (a madfs FUSE mount) and exit.
    #[arg(long)]
    unmount: bool,
    /// Event-loop threads, each with its own FUSE descriptor and connections.
    #[arg(long, env = "MADFS_FUSE_THREADS", default_value_t = 4)]
    threads: usize,
    /// Seconds the kernel may keep attributes (size, mode, times) that no lease of the
    /// client cache covers (MADFS_CACHE=0, replies to the mount's own creates). What the
    /// cache keeps under a lease the kernel keeps as long, coherently (servers call it
    /// back). 0: asks again, so a file closed on another node is seen whole
    /// (close-to-open, docs/consistency.md); raise it for read-mostly data.
    #[arg(long, env = "MADFS_FUSE_ATTR_TIMEOUT", default_value_t = 0.0)]
    attr_timeout: f64,
    /// The same for names (0: names no lease covers are looked up again, so those made or
    /// removed on other nodes are seen at once).
    #[arg(long, env = "MADFS_FUSE_ENTRY_TIMEOUT", default_value_t = 0.0)]
    entry_timeout: f64,
    /// Serve every user of the node (root only): allow_other and default_permissions (the
    /// kernel checks modes with each caller's groups); the servers see each caller as
    /// themselves through the trusted-proxy role (needs the cluster's peer key, or root's
    /// MUNGE credential on a MUNGE cluster).
    #[arg(long)]
    all_users: bool,
    /// Honour the set-user-ID and set-group-ID bits of programs run from the mount (root's
    /// mount only; default nosuid: the servers clear those bits on every write by anyone but
    /// root, but a site decides whether programs on a shared file system may raise privileges).
    #[arg(long)]
    suid: bool,
    /// Keep file data in the kernel's page cache while a file is open (each open drops it).
    /// Default: reads and writes go straight to the servers, as through the preload (on
    /// kernels before 6.6, which cannot map such files, the page cache is always used).
    #[arg(long, env = "MADFS_FUSE_PAGE_CACHE")]
    page_cache: bool,
}

fn seconds(what: &str, s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_else(|_| {
        eprintln!("madfs-fuse: --{what} {s}: not a number of seconds");
        std::process::exit(2)
    })
}

fn main() {
    madfs_client::init_cli_logging();
    let cli = Cli::parse();
    if cli.unmount {
        if let Err(e) = fuse::unmount(&cli.mountpoint) {
            eprintln!("madfs-fuse: {e}");
            std::process::exit(1);
        }
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if cli.all_users && unsafe { libc::geteuid() } != 0 {
        eprintln!("madfs-fuse: --all-users is for root (a user's mount serves that user)");
        std::process::exit(2);
    }
    let settings = Settings {
        threads: cli.threads.clamp(1, 256),
        attr_timeout: seconds("attr-timeout", cli.attr_timeout),
        entry_timeout: seconds("entry-timeout", cli.entry_timeout),
        all_users: cli.all_users,
        // SAFETY: geteuid has no preconditions.
        suid: cli.suid && unsafe { libc::geteuid() } == 0,
        page_cache: cli.page_cache,
        ..Settings::default()
    };
    let config = match ClientConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("madfs-fuse: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = fuse::serve(&cli.mountpoint, config, &settings) {
        eprintln!("madfs-fuse: {}: {e}", cli.mountpoint.display());
        std::process::exit(1);
    }
}
