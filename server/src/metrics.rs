//! The Prometheus endpoint (`--metrics ADDR`, docs/operations.md "Monitoring"): a plain HTTP
//! listener that answers `GET /metrics` with the server's counters and per-request latency
//! histograms in the Prometheus text format (encoded by the `prometheus-client` crate).
//! Off unless asked for; bind it to localhost (or a network only the monitoring reaches): it
//! needs no login and says nothing beyond counts and times.

use crate::server::Server;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The metrics text of `ops`'s server now.
pub fn render(ops: &Server) -> String {
    let s = ops.stats.snapshot();
    let mut r = Registry::with_prefix("madfs");
    let requests = Family::<Vec<(&'static str, String)>, Counter>::default();
    for (op, n) in &s.requests {
        requests.get_or_create(&vec![("op", op.clone())]).inc_by(*n);
    }
    r.register("requests", "Requests served, by kind", requests);
    r.register(
        "request_seconds",
        "Time to serve a request, by kind",
        ops.stats.latency.family.clone(),
    );
    let counters: [(&str, &str, u64); 13] = [
        ("errors", "Error replies", s.errors),
        ("bytes_in", "Write payload bytes", s.bytes_in),
        ("bytes_out", "Read payload bytes", s.bytes_out),
        ("connections", "Connections accepted", s.connections),
        ("refused", "Connections refused at their hello", s.refused),
        (
            "bad_frames",
            "Frames that could not be decoded",
            s.bad_frames,
        ),
        ("killed", "Connections closed by the server", s.killed),
        ("sync_batches", "Group-commit fsync batches", s.sync_batches),
        ("sync_requests", "fsync requests covered", s.sync_requests),
        (
            "half_sent",
            "Writes whose data did not come in time",
            s.half_sent,
        ),
        (
            "moved_slots",
            "Slots moved to other servers (drains, joins)",
            s.moved_slots,
        ),
        (
            "moved_records",
            "Metadata records of the slots moved",
            s.moved_records,
        ),
        (
            "moved_bytes",
            "Chunk bytes of the slots moved",
            s.moved_bytes,
        ),
    ];
    for (name, help, v) in counters {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        r.register(name, help, c);
    }
    let gauge = |v: u64| {
        let g = Gauge::<i64>::default();
        g.set(v.min(i64::MAX as u64) as i64);
        g
    };
    let mut gauges = vec![
        (
            "live_connections",
            "Connections open now",
            s.live_connections,
        ),
        ("resident_bytes", "Resident set size", s.rss_bytes),
    ];
    if let Some(c) = crate::control::capacity(ops) {
        gauges.push((
            "data_bytes",
            "Size of the file system holding the data directory",
            c.disk_bytes,
        ));
        gauges.push((
            "data_free_bytes",
            "Free bytes of the file system holding the data directory",
            c.free_bytes,
        ));
    }
    if let Some(n) = ops.node.get() {
        let m = n.map();
        let left = m.target().map_or(0, |t| m.layout().moves(&t).len() as u64);
        gauges.push((
            "slots_to_move",
            "Slots a membership change still has to move (the whole cluster's)",
            left,
        ));
    }
    for (name, help, v) in gauges {
        r.register(name, help, gauge(v));
    }
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &r).is_err() {
        out.clear();
    }
    out
}

/// Starts the endpoint on `addr` in the current runtime; returns the bound address.
pub async fn start(addr: SocketAddr, ops: Arc<Server>) -> std::io::Result<SocketAddr> {
    let l = tokio::net::TcpListener::bind(addr).await?;
    let bound = l.local_addr()?;
    ops.stats
        .latency
        .on
        .store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            let ops = ops.clone();
            tokio::spawn(async move {
                // one request per connection, its head within 5 s and 8 KiB
                let mut head = Vec::with_capacity(512);
                let mut buf = [0u8; 1024];
                let read = tokio::time::timeout(Duration::from_secs(5), async {
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return false,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    true
                })
                .await;
                if read != Ok(true) {
                    return;
                }
                let (status, body) =
                    if head.starts_with(b"GET /metrics ") || head.starts_with(b"GET /metrics?") {
                        ("200 OK", render(&ops))
                    } else {
                        ("404 Not Found", "only /metrics here\n".to_string())
                    };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    Ok(bound)
}
