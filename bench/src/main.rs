//! `madfs-bench`: measurements of madfs. Today: `rpc`, the round-trip latency of an empty
//! request and of a `stat` over UCX, on TCP and on shared memory, with 1 and with several
//! client processes against a local cluster. (The IO500-style phases grow here.)

mod data;
mod preload;
mod rpc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "madfs-bench", about = "madfs benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
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
    /// Cost of the LD_PRELOAD layer: stat and open+close through libmadfs.so vs the client
    /// library, and the overhead on programs that never touch the mount.
    Preload(preload::PreloadArgs),
    /// (internal) the measured process of `preload`.
    #[command(hide = true)]
    PreloadWorker(preload::PreloadWorkerArgs),
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Rpc(a) => rpc::run(a),
        Cmd::RpcWorker(a) => rpc::worker(a),
        Cmd::Preload(a) => preload::run(a),
        Cmd::Data(a) => data::run(a),
        Cmd::DataWorker(a) => data::worker(a),
        Cmd::PreloadWorker(a) => preload::worker(a),
    };
    if let Err(e) = r {
        eprintln!("madfs-bench: {e:#}");
        std::process::exit(1);
    }
}
