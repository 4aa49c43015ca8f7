//! The UCX transport: the accept loop, hellos, a fixed pool of request handlers with
//! preallocated buffers (memory does not grow with clients), the fsync tag's handler, the
//! lease clock, and drains for tags nobody receives. It moves bytes: what a frame becomes is
//! `crate::serve`'s (a chunk read the page cache holds whole is answered on the net thread,
//! a large one from a mapping of the chunk file, once the pipeline admitted it).

use super::config::HELLO_TIMEOUT;
use super::config::{check_hello, NetConfig};
use super::conns::{Conn, Conns};
use super::park::Net;
use super::send::send_small;
use crate::handlers::data::read_span;
use crate::serve::Bufs;
use crate::server::Server;
use crate::sync::SyncSender;
use madfs_proto::frame::{self, Encoder, PREFIX};
use madfs_proto::{tag, Admission, Errno, Reply, Request};
use madfs_rpc::{Listener, Worker};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// Creates the worker and the listener (port 0 picks a free port).
pub fn bind(
    ctx: &Arc<madfs_rpc::Context>,
    listen: SocketAddr,
) -> std::io::Result<(Rc<Worker>, Listener, SocketAddr)> {
    let worker = ctx
        .create_worker()
        .map_err(|e| std::io::Error::other(format!("UCX worker: {e}")))?;
    let listener = worker
        .create_listener(listen)
        .map_err(|e| std::io::Error::other(format!("UCX listener on {listen}: {e}")))?;
    let addr = listener
        .socket_addr()
        .map_err(|e| std::io::Error::other(format!("UCX listener address: {e}")))?;
    let addr = SocketAddr::new(listen.ip(), addr.port());
    Ok((worker, listener, addr))
}

/// Test fault `MADFS_FAULT=ucx-stall-after-ms:N`: N ms after the start the progress loop
/// behaves as if its worker's receive queue were stalled.
pub fn stall_fault() -> Option<std::time::Instant> {
    let f = std::env::var("MADFS_FAULT").ok()?;
    let ms: u64 = f.strip_prefix("ucx-stall-after-ms:")?.parse().ok()?;
    tracing::warn!("MADFS_FAULT={f}: the UCX worker will look stalled after {ms} ms");
    Some(std::time::Instant::now() + Duration::from_millis(ms))
}
/// Tag kinds no server receives (everything but `REQUEST`, `FSYNC`, `REQUEST_DATA`, `HELLO`,
/// `REPLICATE` and `RELEASED`), as (kind, mask) receives over the kind bits: 0 and 4
/// (`0x00`); 3 and 7 (`0x11`); 8 (`1000`); 10 (`1010`); 12–15 (`11xx`). A message of such a
/// kind would otherwise wait in UCX's unexpected queue for ever, holding its memory.
pub const DRAINED_KINDS: [(u64, u64); 5] = [
    (0, 0b1011 << 60),
    (0b0011 << 60, 0b1011 << 60),
    (0b1000 << 60, 0b1111 << 60),
    (0b1010 << 60, 0b1111 << 60),
    (0b1100 << 60, 0b1100 << 60),
];

/// Handlers of copies (`tag::REPLICATE`) in a replicated cluster.
pub const COPY_HANDLERS: usize = 4;

/// Takes messages of the tag kinds in `kind`/`mask` off the worker and drops them (counted).
pub async fn drain(worker: Rc<Worker>, kind: u64, mask: u64, ops: Arc<Server>) {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 256];
    loop {
        // a longer message completes truncated: it is taken off the queue all the same
        let _ = worker.tag_recv_mask(kind, mask, &mut buf).await;
        ops.stats.drained.fetch_add(1, Relaxed);
    }
}

pub async fn accept_loop(
    worker: Rc<Worker>,
    mut listener: Listener,
    conns: Rc<Conns>,
    cfg: Rc<NetConfig>,
    ops: Arc<Server>,
) {
    loop {
        let req = listener.next().await;
        let (worker, conns, cfg, ops) = (worker.clone(), conns.clone(), cfg.clone(), ops.clone());
        tokio::task::spawn_local(async move {
            let ep = match tokio::time::timeout(
                Duration::from_secs(10),
                worker.accept_with(req, cfg.ucx.err_mode),
            )
            .await
            {
                Ok(Ok(ep)) => Rc::new(ep),
                Ok(Err(e)) => return tracing::warn!("accept failed: {e}"),
                Err(_) => return tracing::warn!("accept timed out"),
            };
            let Ok(nonce) = madfs_auth::random::<32>() else {
                return tracing::error!("getrandom failed: connection dropped");
            };
            let Ok(ticket) = madfs_auth::random_u64() else {
                return tracing::error!("getrandom failed: connection dropped");
            };
            let Some(id) = conns.insert(ep.clone(), nonce, ticket) else {
                return tracing::error!("no connection id free: connection dropped");
            };
            ops.stats.connections.fetch_add(1, Relaxed);
            let bytes = flexbuffers::to_vec(cfg.welcome(id, nonce, ticket, cfg.limits.lease))
                .unwrap_or_default();
            match tokio::time::timeout(
                cfg.send_timeout,
                ep.tag_send(tag::welcome(cfg.server_id), &bytes),
            )
            .await
            {
                Ok(Ok(_)) => tracing::debug!("connection {id} accepted"),
                _ => {
                    tracing::warn!("welcome to connection {id} failed");
                    conns.waiting.borrow_mut().remove(&id);
                    return;
                }
            }
            // no hello in time: forget it
            tokio::time::sleep(HELLO_TIMEOUT).await;
            if let Some(w) = conns.waiting.borrow_mut().remove(&id) {
                tracing::warn!("connection {id} sent no hello within {HELLO_TIMEOUT:?}; dropped");
                ops.stats.refused.fetch_add(1, Relaxed);
                drop(w);
            }
        });
    }
}

/// Receives hellos: a waiting connection that proves who it is is admitted with a fresh
/// secret; one that does not is told why and closed.
pub async fn hello_loop(
    worker: Rc<Worker>,
    conns: Rc<Conns>,
    cfg: Rc<NetConfig>,
    ops: Arc<Server>,
) {
    let mut buf = Vec::<u8>::with_capacity(8192);
    loop {
        buf.clear();
        let Ok((t, len)) = worker
            .tag_recv_mask(tag::HELLO, tag::KIND_MASK, buf.spare_capacity_mut())
            .await
        else {
            ops.stats.bad_frames.fetch_add(1, Relaxed);
            continue;
        };
        // SAFETY: UCX wrote `len` bytes into the spare capacity.
        unsafe { buf.set_len(len) };
        let (_, conn, _) = tag::split(t);
        // a hello that does not echo its connection's ticket (sent only to that connection's
        // endpoint) is not that connection's: dropped, and the connection still waits for
        // its own (a process that guesses connection ids cannot have them refused)
        let Some(w) = conns.take_waiting(conn, &buf) else {
            ops.stats.forged.fetch_add(1, Relaxed);
            continue;
        };
        let verdict = check_hello(&cfg, &buf, conn, &w.nonce).await;
        let (answer, admitted) = match verdict {
            Ok((who, proof)) => {
                let Ok(secret) = madfs_auth::random_u64() else {
                    continue;
                };
                tracing::debug!(
                    "connection {conn} admitted as uid {} ({:?})",
                    who.uid,
                    who.role
                );
                let a = Admission::Admitted {
                    secret,
                    uid: who.uid,
                    gid: who.gid,
                    proof,
                };
                (a, Some((secret, who)))
            }
            Err(reason) => {
                tracing::warn!("connection {conn} refused: {reason}");
                ops.stats.refused.fetch_add(1, Relaxed);
                (Admission::Refused { reason }, None)
            }
        };
        let bytes = flexbuffers::to_vec(&answer).unwrap_or_default();
        let ep = w.ep.clone();
        if let Some((secret, who)) = admitted {
            // the client process whose cache the connection's leases are for
            let holder = std::panic::catch_unwind(|| {
                flexbuffers::from_slice::<madfs_proto::Hello<'_>>(&buf)
                    .map_or((0, false), |h| (h.holder, h.listens))
            })
            .unwrap_or((0, false));
            conns.admit(conn, w.ep, secret, who, holder);
        }
        let (conns, cfg) = (conns.clone(), cfg.clone());
        tokio::task::spawn_local(async move {
            let sent = tokio::time::timeout(
                cfg.send_timeout,
                ep.tag_send(tag::admit(cfg.server_id, conn), &bytes),
            )
            .await;
            if !matches!(sent, Ok(Ok(_))) {
                conns.remove(conn);
            }
            if matches!(answer, Admission::Refused { .. }) {
                let _ = tokio::time::timeout(cfg.send_timeout, ep.close(false)).await;
            }
        });
    }
}
/// Sends the client cache's callbacks (`crate::state::leases`) on the connections they are
/// for; one whose connection is gone is waited out by its change (its lease's end).
pub async fn callback_loop(
    net: Rc<Net>,
    mut outbox: tokio::sync::mpsc::UnboundedReceiver<crate::state::leases::Outgoing>,
) {
    while let Some(o) = outbox.recv().await {
        let to = net.conns.callback_route(o.holder, o.conn);
        let timeout = net.cfg.send_timeout;
        let bytes = Rc::new(o.bytes);
        for c in to {
            let bytes = bytes.clone();
            tokio::task::spawn_local(async move {
                let _ = tokio::time::timeout(timeout, c.ep.tag_send(o.tag, &bytes)).await;
            });
        }
    }
}

/// Takes the acknowledgements of callbacks (`tag::RELEASED`: the connection's secret and the
/// callback's id).
pub async fn released_loop(net: Rc<Net>) {
    let mut buf = [MaybeUninit::<u8>::uninit(); 16];
    loop {
        let Ok((t, len)) = net
            .worker
            .tag_recv_mask(tag::RELEASED, tag::KIND_MASK, &mut buf)
            .await
        else {
            net.ops.stats.bad_frames.fetch_add(1, Relaxed);
            continue;
        };
        if len != 16 {
            net.ops.stats.bad_frames.fetch_add(1, Relaxed);
            continue;
        }
        // SAFETY: UCX wrote all 16 bytes.
        let b: [u8; 16] = unsafe { std::mem::transmute(buf) };
        let (word, id) = b.split_at(8);
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let id = u64::from_le_bytes(id.try_into().unwrap_or_default());
        let (_, conn, _) = tag::split(t);
        if let Some(h) = net.conns.check(conn, word).and_then(|c| c.holder) {
            net.ops.leases.released(h.holder, id);
        }
    }
}

/// Advances the lease clock every quarter lease and closes connections that sent nothing for
/// a lease and have nothing in flight.
pub async fn lease_loop(net: Rc<Net>) {
    let lease = net.cfg.limits.lease;
    if lease.is_zero() {
        return;
    }
    let step = lease / 4;
    loop {
        tokio::time::sleep(step).await;
        net.ops.leases.expire();
        let held = net.ops.leases.counts().held as u64;
        net.ops.stats.leases_held.store(held, Relaxed);
        let conns = &net.conns;
        let now = conns.tick.get().wrapping_add(1);
        conns.tick.set(now);
        let expired: Vec<Rc<Conn>> = conns
            .map
            .borrow()
            .values()
            // silent for four steps or more (a lease), and held by nothing but the table
            .filter(|c| now.wrapping_sub(c.seen.get()) > 4 && Rc::strong_count(c) == 1)
            .cloned()
            .collect();
        for c in expired {
            tracing::debug!("connection {} silent for {lease:?}: closed", c.id);
            net.ops.stats.expired.fetch_add(1, Relaxed);
            net.ops.stats.killed.fetch_add(1, Relaxed);
            // nothing in flight: closed with a flush, as a goodbye is (a forced close is
            // undefined behaviour for a peer in error mode `none`, which may be a client
            // that was only stopped); a close that does not finish in time is forced
            conns.close(c.id, net.cfg.send_timeout);
        }
    }
}

/// Receives requests of tag kind `kind` (`REQUEST`, or a replicated cluster's `REPLICATE`)
/// and serves them.
pub async fn handler(net: Rc<Net>, kind: u64) {
    let (worker, conns, cfg, ops) = (&net.worker, &net.conns, &net.cfg, &net.ops);
    let mut bufs = Some(Bufs::new(cfg.max_frame));
    loop {
        let mut b = bufs.take().expect("handler buffers");
        b.recv.clear();
        let received = worker
            .tag_recv_mask(kind, tag::KIND_MASK, b.recv.spare_capacity_mut())
            .await;
        let (t, len) = match received {
            Ok(v) => v,
            Err(e) => {
                // e.g. a frame larger than our buffer: UCX truncates it; nothing to answer
                tracing::debug!("receive failed: {e}");
                ops.stats.bad_frames.fetch_add(1, Relaxed);
                bufs = Some(b);
                continue;
            }
        };
        // SAFETY: UCX wrote `len` bytes into the spare capacity.
        unsafe { b.recv.set_len(len) };
        let (_, conn, seq) = tag::split(t);
        let word = frame::split_conn_word(&b.recv).map_or(0, |(w, _)| w);
        let Some(c) = conns.check(conn, word) else {
            // not this connection's secret: neither served nor answered (and a write's data
            // message is not taken: its tag could only be the connection's owner's)
            bufs = Some(b);
            continue;
        };
        conns.heard(&c);
        let who = c.who.clone();
        // a request naming a file id without a good capability is answered EACCES, nothing
        // else (its data message, if any, is still taken off the queue)
        let mut denied = None;
        let (inline, raw, span, data_len, small_write) =
            match frame::decode_request(crate::serve::frame_of(&b.recv)) {
                Ok((Request::Bye, _)) => {
                    ops.stats.request("bye");
                    conns.close(conn, cfg.send_timeout);
                    bufs = Some(b);
                    continue;
                }
                Ok((req, _)) => {
                    let raw =
                        matches!(req, Request::Read { len, .. } if len >= frame::RAW_READ_MIN);
                    // where a read of a chunk is in the local file (chunk 0 starts in RocksDB)
                    let span = match req {
                        Request::Read {
                            id,
                            chunk,
                            offset,
                            len,
                            chunk_size,
                            ..
                        } if chunk != 0 => read_span(chunk, offset, len, chunk_size)
                            .ok()
                            .map(|(pos, len)| (id, pos, len)),
                        _ => None,
                    };
                    let data_len = match req {
                        Request::WriteData { len, .. } => Some(len as usize),
                        _ => None,
                    };
                    // a write whose bytes came in the frame (< RAW_WRITE_MIN) into an open file
                    let small_write = match req {
                        Request::Write { id, chunk, .. } if chunk != 0 => {
                            ops.replica.is_none() && small_writes_inline() && ops.chunks.is_open(id)
                        }
                        _ => false,
                    };
                    let runs = crate::table::row(&req).runs;
                    let inline = runs.inline(ops.replica.is_some(), cfg.meta_inline) || small_write;
                    // a chunk read answered from the page cache or a mapping skips the serve
                    // path: the pipeline admits and authorizes it first
                    if span.is_some() {
                        denied = crate::pipeline::check(ops, &who, &req).err();
                    }
                    (inline, raw, span, data_len, small_write)
                }
                Err(_) => (true, false, None, None, false),
            };
        // a WriteData's bytes follow as their own message: always take it (a message nobody
        // receives would stay queued in UCX), straight into the data buffer; one that is not
        // there within the grace goes on in a task of its own
        let data = match data_len {
            None => None,
            Some(len) => match net.take_data(&mut b, &c, seq, len).await {
                Some(n) => Some(n),
                None => {
                    bufs = Some(b);
                    continue;
                }
            },
        };
        if let Some(e) = denied {
            ops.stats.errors.fetch_add(1, Relaxed);
            let p = frame::error_prefix(e);
            b.hdr.clear();
            bufs = Some(net.reply(&c, seq, b, p, 0, false).await);
            continue;
        }
        // a large read of a chunk: sent from a mapping of the local file, no copy
        if let Some((id, pos, len)) = span.filter(|_| raw) {
            // the pieces of a streaming read are mapped here; a file not open yet is opened
            // on an IO thread
            let m = match ops.chunks.map_cached(id, pos, len) {
                Some(m) => m,
                None => {
                    let ops2 = ops.clone();
                    tokio::task::spawn_blocking(move || ops2.chunks.map_read(id, pos, len))
                        .await
                        .unwrap_or(Err(Errno::EIO))
                }
            };
            match m {
                Ok(None) => {} // the copying path below
                Ok(Some(m)) => {
                    ops.stats.request("read");
                    ops.stats
                        .bytes_out
                        .fetch_add(m.bytes().len() as u64, Relaxed);
                    if !c.dead.get() {
                        net.reply_mapped(&c, seq, m).await;
                    }
                    bufs = Some(b);
                    continue;
                }
                Err(e) => {
                    ops.stats.request("read");
                    ops.stats.errors.fetch_add(1, Relaxed);
                    let p = frame::error_prefix(e);
                    b.hdr.clear();
                    bufs = Some(net.reply(&c, seq, b, p, 0, false).await);
                    continue;
                }
            }
        }
        let holder = c.holder;
        let nowait = span.and_then(|sp| crate::serve::read_nowait(ops, &mut b, sp));
        // served on the net thread; a change that must wait for callbacks runs again on an
        // IO thread
        let inline = match nowait {
            Some(v) => Some(v),
            None if inline => {
                let started = small_write.then(std::time::Instant::now);
                let (p, n) = crate::serve::frame(ops, &mut b, data, &who, holder);
                if let Some(t) = started {
                    small_write_took(t.elapsed());
                }
                (!crate::pipeline::take_rerun()).then_some((p, n))
            }
            None => None,
        };
        let (b, prefix, n) = if let Some((p, n)) = inline {
            (b, p, n)
        } else if kind == tag::REPLICATE {
            // a copy's sync: never on the IO threads (`crate::table`, `Replicate`)
            let ops2 = ops.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("madfs-copy-sync".into())
                .spawn(move || {
                    let (p, n) = crate::serve::frame(&ops2, &mut b, data, &who, holder);
                    crate::peer::release_thread();
                    let _ = tx.send((b, p, n));
                });
            match (spawned, rx.await) {
                (Ok(_), Ok(v)) => v,
                _ => {
                    tracing::error!("a copy's sync thread failed");
                    bufs = Some(Bufs::new(cfg.max_frame));
                    continue;
                }
            }
        } else {
            let ops2 = ops.clone();
            match tokio::task::spawn_blocking(move || {
                let (p, n) = crate::serve::frame(&ops2, &mut b, data, &who, holder);
                (b, p, n)
            })
            .await
            {
                Ok(v) => v,
                Err(e) => {
                    // an IO-thread panic is a bug; keep serving with fresh buffers
                    tracing::error!("IO task failed: {e}");
                    bufs = Some(Bufs::new(cfg.max_frame));
                    continue;
                }
            }
        };
        let raw = raw && prefix == frame::bulk_reply_prefix();
        bufs = Some(net.reply(&c, seq, b, prefix, n, raw).await);
    }
}

/// A small write that took longer than this on the net thread (the kernel throttled it, or
/// it waited for the disk) sends small writes back to the IO threads for [`INLINE_PAUSE`].
const SLOW_INLINE_WRITE: std::time::Duration = std::time::Duration::from_millis(1);
const INLINE_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

thread_local! {
    /// Small writes go to the IO threads until then (net thread only).
    static INLINE_WRITES_AFTER: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// May a small write into an open chunk file run on the net thread? A buffered write of a
/// few KiB into the page cache costs less than the hand-off to an IO thread and back (4 KiB
/// writes: 30 → 17 µs, 47,008 B: 70 → 40 µs), but it can block (dirty-page throttling, a
/// partial page read from disk; buffered `RWF_NOWAIT` writes are refused by ext4), so a slow
/// one pauses the inline path for a while.
fn small_writes_inline() -> bool {
    INLINE_WRITES_AFTER.with(|c| match c.get() {
        None => true,
        Some(t) if std::time::Instant::now() >= t => {
            c.set(None);
            true
        }
        Some(_) => false,
    })
}

fn small_write_took(d: std::time::Duration) {
    if d > SLOW_INLINE_WRITE {
        INLINE_WRITES_AFTER.with(|c| c.set(Some(std::time::Instant::now() + INLINE_PAUSE)));
    }
}

/// Receives fsync requests and hands them to the sync thread; each waiter is answered by a
/// small local task, so the receive loop never waits for a disk flush and requests that arrive
/// during one flush are batched into the next.
pub async fn fsync_handler(
    worker: Rc<Worker>,
    conns: Rc<Conns>,
    cfg: Rc<NetConfig>,
    ops: Arc<Server>,
    sync_tx: SyncSender,
) {
    let mut recv = Vec::<u8>::with_capacity(4096);
    let pending = Arc::new(tokio::sync::Semaphore::new(4096));
    loop {
        recv.clear();
        let (t, len) = match worker
            .tag_recv_mask(tag::FSYNC, tag::KIND_MASK, recv.spare_capacity_mut())
            .await
        {
            Ok(v) => v,
            Err(_) => {
                ops.stats.bad_frames.fetch_add(1, Relaxed);
                continue;
            }
        };
        // SAFETY: UCX wrote `len` bytes into the spare capacity.
        unsafe { recv.set_len(len) };
        let (_, conn, seq) = tag::split(t);
        let word = frame::split_conn_word(&recv).map_or(0, |(w, _)| w);
        let Some(c) = conns.check(conn, word) else {
            continue;
        };
        conns.heard(&c);
        let waiter = crate::serve::fsync(&ops, &sync_tx, &c.who, c.holder, &recv);
        let Ok(permit) = pending.clone().acquire_owned().await else {
            return;
        };
        let (conns, cfg, c) = (conns.clone(), cfg.clone(), c.clone());
        tokio::task::spawn_local(async move {
            let _permit = permit;
            let result = waiter.await.unwrap_or(Err(Errno::EIO));
            let (prefix, hdr): ([u8; PREFIX], Vec<u8>) = match result {
                Ok(()) => {
                    let mut enc = Encoder::default();
                    let (p, h) = enc.reply(&Reply::Unit);
                    (p, h.to_vec())
                }
                Err(e) => (frame::error_prefix(e), Vec::new()),
            };
            send_small(&conns, &c, seq, &prefix, &hdr, cfg.send_timeout).await;
        });
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_slow_inline_write_pauses_the_inline_path() {
        assert!(small_writes_inline());
        small_write_took(Duration::from_micros(200));
        assert!(small_writes_inline(), "a fast write changes nothing");
        small_write_took(Duration::from_millis(5));
        assert!(!small_writes_inline(), "paused after a slow one");
        // the pause ends
        INLINE_WRITES_AFTER.with(|c| c.set(Some(Instant::now() - Duration::from_millis(1))));
        assert!(small_writes_inline());
        assert!(INLINE_WRITES_AFTER.with(|c| c.get()).is_none());
    }
}
