//! The network side of a server: one UCX worker on the net thread (tokio current-thread
//! runtime + `LocalSet`), adaptive progress, an accept loop, and a fixed pool of request
//! handlers with preallocated buffers — memory does not grow with the number of clients.
//!
//! Request path: `ucx::handler` receives a frame on the request tag → `crate::serve::frame`
//! decodes it and passes it through the pipeline (inline for short metadata work, else on an
//! IO thread, as the table of requests says) → the reply (prefix, header, data) goes back in
//! one vectored send on `tag::reply(seq)`, or, for a large read, the data alone in one
//! contiguous send on `tag::reply_data(seq)`. fsync requests arrive on their own tag
//! (`ucx::fsync_handler`, `crate::serve::fsync`). The plain-TCP transport (`tcp`) takes the
//! same frames over a stream, to the same serve path.
//!
//! A connection is served only after its [`Hello`] proved who it is ([`crate::auth`]); every
//! request then starts with the secret the server gave it, and one whose secret is not its
//! connection's is dropped unanswered (counted as `forged`).

pub mod config;
pub mod conns;
pub mod park;
pub mod send;
pub mod tcp;
pub mod ucx;

pub use crate::serve::HEADER_ROOM;
pub use config::{Limits, NetConfig, GRACE};
pub use ucx::bind;

use crate::server::Server;
use crate::sync::SyncSender;
use conns::Conns;
use madfs_proto::tag;
use madfs_rpc::probe::{Probe, Watch};
use madfs_rpc::{worker_loop, Listener, Worker};
use park::{Net, Park};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Serves until `stop` is set, or until `probe`'s watch finds the worker stalled (an error
/// for which `madfs_rpc::probe::is_stalled` holds). Must run inside a `LocalSet`.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    worker: Rc<Worker>,
    listener: Listener,
    tcp: std::net::TcpListener,
    cfg: NetConfig,
    ops: Arc<Server>,
    sync_tx: SyncSender,
    stop: Arc<AtomicBool>,
    probe: Option<Probe>,
) -> std::io::Result<()> {
    tcp.set_nonblocking(true)?;
    let tcp = tokio::net::TcpListener::from_std(tcp)?;
    let conns = Rc::new(Conns::new(ops.stats.clone()));
    let cfg = Rc::new(cfg);
    let net = Rc::new(Net {
        worker: worker.clone(),
        conns: conns.clone(),
        cfg: cfg.clone(),
        ops: ops.clone(),
        park: Park::default(),
    });
    let s = stop.clone();
    let watch = probe.map(|probe| {
        let stats = ops.stats.clone();
        Watch {
            probe,
            // the probe's tag is one of the drained kinds
            taken: Box::new(move || stats.drained.load(Relaxed)),
            after: cfg.limits.stall,
            freeze_at: ucx::stall_fault(),
        }
    });
    let progress = tokio::task::spawn_local(worker_loop::run(
        worker.clone(),
        cfg.ucx.spin,
        move || s.load(Relaxed),
        watch,
    ));
    let mut tasks = vec![tokio::task::spawn_local(ucx::accept_loop(
        worker.clone(),
        listener,
        conns.clone(),
        cfg.clone(),
        ops.clone(),
    ))];
    tasks.push(tokio::task::spawn_local(tcp::tcp_loop(
        tcp,
        cfg.clone(),
        ops.clone(),
        sync_tx.clone(),
    )));
    tasks.push(tokio::task::spawn_local(ucx::hello_loop(
        worker.clone(),
        conns.clone(),
        cfg.clone(),
        ops.clone(),
    )));
    tasks.push(tokio::task::spawn_local(ucx::lease_loop(net.clone())));
    // the client cache's callbacks out, and their acknowledgements in
    crate::pipeline::mark_net_thread();
    let (callbacks, outbox) = tokio::sync::mpsc::unbounded_channel();
    ops.leases.set_outbox(callbacks);
    tasks.push(tokio::task::spawn_local(ucx::callback_loop(
        net.clone(),
        outbox,
    )));
    tasks.push(tokio::task::spawn_local(ucx::released_loop(net.clone())));
    for _ in 0..cfg.handlers {
        tasks.push(tokio::task::spawn_local(ucx::handler(
            net.clone(),
            tag::REQUEST,
        )));
    }
    if ops.replica.is_some() {
        for _ in 0..ucx::COPY_HANDLERS {
            tasks.push(tokio::task::spawn_local(ucx::handler(
                net.clone(),
                tag::REPLICATE,
            )));
        }
    } else {
        // an unreplicated server takes no copies: drained like the other kinds
        tasks.push(tokio::task::spawn_local(ucx::drain(
            worker.clone(),
            tag::REPLICATE,
            tag::KIND_MASK,
            ops.clone(),
        )));
    }
    for (kind, mask) in ucx::DRAINED_KINDS {
        tasks.push(tokio::task::spawn_local(ucx::drain(
            worker.clone(),
            kind,
            mask,
            ops.clone(),
        )));
    }
    for _ in 0..cfg.fsync_handlers {
        tasks.push(tokio::task::spawn_local(ucx::fsync_handler(
            worker.clone(),
            conns.clone(),
            cfg.clone(),
            ops.clone(),
            sync_tx.clone(),
        )));
    }
    while !stop.load(Relaxed) && !progress.is_finished() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in tasks {
        t.abort();
    }
    match progress.await {
        Ok(Err(e)) => Err(e),
        _ => Ok(()),
    }
}
