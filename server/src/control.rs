//! The tarpc control port (TCP, JSON): `status`, `stats`, `shutdown`.

use crate::stats::ServerStats;
use futures::{future, StreamExt};
use madfs_control::{Control, Stats, Status};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tarpc::server::{self, Channel};

#[derive(Clone)]
struct ControlServer {
    status: Status,
    ucx_addr: Arc<OnceLock<String>>,
    start: Instant,
    stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
}

impl Control for ControlServer {
    async fn status(self, _: tarpc::context::Context) -> Status {
        Status {
            uptime_s: self.start.elapsed().as_secs(),
            ucx_addr: self.ucx_addr.get().cloned().unwrap_or_default(),
            ..self.status.clone()
        }
    }

    async fn stats(self, _: tarpc::context::Context) -> Stats {
        self.stats.snapshot()
    }

    async fn shutdown(self, _: tarpc::context::Context) -> bool {
        tracing::info!("shutdown requested through the control port");
        self.stop.store(true, Relaxed);
        true
    }
}

/// Starts the control port on its own thread and runtime; returns the bound address.
/// SIGINT and SIGTERM also request a clean stop. It is started before UCX, so that a port
/// taken by someone else stops the server before UCX exists; `status` answers the UCX
/// address once `ucx_addr` holds it.
pub fn start(
    addr: SocketAddr,
    status: Status,
    ucx_addr: Arc<OnceLock<String>>,
    stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<SocketAddr> {
    let (tx, rx) = std::sync::mpsc::channel::<anyhow::Result<SocketAddr>>();
    std::thread::Builder::new()
        .name("madfs-control".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return drop(tx.send(Err(e.into()))),
            };
            rt.block_on(async move {
                let listener = match tarpc::serde_transport::tcp::listen(
                    addr,
                    tarpc::tokio_serde::formats::Json::default,
                )
                .await
                {
                    Ok(l) => l,
                    Err(e) => {
                        return drop(tx.send(Err(anyhow::anyhow!("control port {addr}: {e}"))))
                    }
                };
                let _ = tx.send(Ok(listener.local_addr()));
                let sig_stop = stop.clone();
                tokio::spawn(async move {
                    use tokio::signal::unix::{signal, SignalKind};
                    if let (Ok(mut term), Ok(mut int)) = (
                        signal(SignalKind::terminate()),
                        signal(SignalKind::interrupt()),
                    ) {
                        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
                        tracing::info!("signal received; stopping");
                        sig_stop.store(true, Relaxed);
                    }
                });
                let srv = ControlServer {
                    status,
                    ucx_addr,
                    start: Instant::now(),
                    stats,
                    stop,
                };
                listener
                    .filter_map(|r| future::ready(r.ok()))
                    .map(server::BaseChannel::with_defaults)
                    .map(|channel| {
                        let s = srv.clone();
                        channel.execute(s.serve()).for_each(|f| async move {
                            tokio::spawn(f);
                        })
                    })
                    .buffer_unordered(64)
                    .for_each(|_| async {})
                    .await;
            });
        })?;
    rx.recv()?
}
