//! `madfs-bench`: measurements of madfs.
//! * `io500` — the IO500 phases on any directory through POSIX (or the client library), or on
//!   madfs and a local directory side by side (`--compare`), with the IO500 score;
//! * `rpc` — round-trip latency of an empty request and of a `stat` over UCX;
//! * `preload` — the cost of the LD_PRELOAD layer;
//! * `data` — data-path figures against the client library (fsync group commit, server memory);
//! * `find` — IO500's find on a large tree: `madfs-find` vs GNU find through the preload vs a
//!   pfind-style walk through the client library;
//! * `failover` — the stall clients of a replicated cluster see when one of its servers dies;
//! * `move` — the latencies clients see while a server joins, at several move throttles;
//! * `rebuild` — how fast a replicated cluster has R copies again after a server is removed.

mod data;
mod failover;
mod find;
mod moves;
mod preload;
mod rebuild;
mod rpc;
mod suite;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "madfs-bench", about = "madfs benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// IO500 phases (ior-easy/hard, mdtest-easy/hard, find, ior-rand-4k, rpc) on a directory,
    /// or on madfs and a local directory in one run (--compare), with the IO500 score.
    Io500(suite::Io500Args),
    /// RPC latency (empty request and stat) on TCP and shared memory, 1 and N clients.
    Rpc(rpc::RpcArgs),
    /// (internal) one measuring client process of `rpc`.
    #[command(hide = true)]
    RpcWorker(rpc::WorkerArgs),
    /// Data path vs a local directory: ior-easy-like, mdtest-hard-like, fsync group commit,
    /// server memory with many clients.
    Data(data::DataArgs),
    /// (internal) one rank of `data`.
    #[command(hide = true)]
    DataWorker(data::DataWorkerArgs),
    /// IO500's find filter on a large tree (mdtest-hard-like and mdtest-easy-like): madfs-find
    /// vs GNU find through LD_PRELOAD vs a pfind-style walk through the client library.
    Find(find::FindArgs),
    /// (internal) one rank of `find`.
    #[command(hide = true)]
    FindWorker(find::FindWorkerArgs),
    /// Cost of the LD_PRELOAD layer: stat and open+close through libmadfs.so vs the client
    /// library, and the overhead on programs that never touch the mount.
    Preload(preload::PreloadArgs),
    /// (internal) the measured process of `preload`.
    #[command(hide = true)]
    PreloadWorker(preload::PreloadWorkerArgs),
    /// The stall clients of a replicated cluster see when a server dies (or freezes): time
    /// from the kill to each client's next completed request, over many kills.
    Failover(failover::FailoverArgs),
    /// Latencies of mdtest's operations (p50, p99) while a server joins, against with
    /// nothing moving, at several move throttles.
    Move(moves::MoveArgs),
    /// A server of a replicated cluster killed for good and removed: how fast its replica
    /// sets have R copies again; then another one killed, and every file read back.
    Rebuild(rebuild::RebuildArgs),
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Io500(a) => suite::run(a),
        Cmd::Rpc(a) => rpc::run(a),
        Cmd::RpcWorker(a) => rpc::worker(a),
        Cmd::Preload(a) => preload::run(a),
        Cmd::Data(a) => data::run(a),
        Cmd::DataWorker(a) => data::worker(a),
        Cmd::Find(a) => find::run(a),
        Cmd::FindWorker(a) => find::worker(a),
        Cmd::PreloadWorker(a) => preload::worker(a),
        Cmd::Failover(a) => failover::run(a),
        Cmd::Move(a) => moves::run(a),
        Cmd::Rebuild(a) => rebuild::run(a),
    };
    if let Err(e) = r {
        eprintln!("madfs-bench: {e:#}");
        std::process::exit(1);
    }
}
