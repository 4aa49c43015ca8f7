//! The plain-TCP transport: the same frames over a stream, one request at a time per
//! connection (for processes that cannot run UCX). It moves bytes: what a frame becomes is
//! `crate::serve`'s.

use super::config::{check_hello, NetConfig, HELLO_TIMEOUT};
use crate::serve::Bufs;
use crate::server::Server;
use crate::sync::SyncSender;
use madfs_proto::frame::{self, PREFIX};
use madfs_proto::{Admission, Errno, Reply};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Plain-TCP fallback transport: the same frames over a stream, `[u32 LE len][kind][frame]`
/// in, `[u32 LE len][reply frame]` out, one request at a time per connection. Used by clients
/// that cannot run UCX (children of `fork` whose parent had UCX running). A connection holds
/// a buffer set only while a request of it is served and answered (sets come from a shared
/// pool, at most [`Limits::tcp_sets`] at once), so memory follows requests in flight, not
/// connections. A connection idle for [`Limits::tcp_idle`], one whose request is not all
/// there within the half-sent or send deadline (the longer) of its first byte, and one that does not take its
/// reply within the send timeout are closed.
pub async fn tcp_loop(
    listener: tokio::net::TcpListener,
    cfg: Rc<NetConfig>,
    ops: Arc<Server>,
    sync_tx: SyncSender,
) {
    let pool: Rc<RefCell<Vec<Bufs>>> = Rc::default();
    let sets = Rc::new(tokio::sync::Semaphore::new(cfg.limits.tcp_sets.max(1)));
    // bytes of replies that slow readers have not taken yet
    let stalled: Rc<Cell<usize>> = Rc::default();
    loop {
        let Ok((s, _)) = listener.accept().await else {
            continue;
        };
        let _ = s.set_nodelay(true);
        ops.stats.connections.fetch_add(1, Relaxed);
        let (cfg, ops, sync_tx, pool, sets, stalled) = (
            cfg.clone(),
            ops.clone(),
            sync_tx.clone(),
            pool.clone(),
            sets.clone(),
            stalled.clone(),
        );
        tokio::task::spawn_local(async move {
            let shared = (&*pool, &*sets, &*stalled);
            if let Err(e) = tcp_conn(s, &cfg, &ops, &sync_tx, shared).await {
                tracing::debug!("tcp connection ended: {e}");
            }
        });
    }
}

/// Frames of at most this many bytes keep their buffer on their connection between
/// requests; a larger one's goes.
const TCP_KEEP: usize = 64 << 10;

async fn tcp_conn(
    mut s: tokio::net::TcpStream,
    cfg: &NetConfig,
    ops: &Arc<Server>,
    sync_tx: &SyncSender,
    (pool, sets, stalled): (&RefCell<Vec<Bufs>>, &tokio::sync::Semaphore, &Cell<usize>),
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = &cfg.limits;
    let nonce = madfs_auth::random::<32>()?;
    // (a stream is its own connection: its hello cannot be another's, no ticket to echo)
    let bytes =
        flexbuffers::to_vec(cfg.welcome(0, nonce, 0, cfg.limits.tcp_idle)).unwrap_or_default();
    s.write_all(&(bytes.len() as u32).to_le_bytes()).await?;
    s.write_all(&bytes).await?;
    // the hello: `[u32 LE len][3][Hello]`, within the hello deadline
    let hello = tokio::time::timeout(HELLO_TIMEOUT, async {
        let len = s.read_u32_le().await? as usize;
        if !(2..=8192).contains(&len) {
            return Err(std::io::Error::other("bad hello"));
        }
        let mut m = vec![0u8; len];
        s.read_exact(&mut m).await?;
        if m[0] != 3 {
            return Err(std::io::Error::other("no hello"));
        }
        m.remove(0);
        Ok(m)
    })
    .await
    .map_err(|_| std::io::Error::other("no hello in time"))??;
    let (answer, admitted) = match check_hello(cfg, &hello, 0, &nonce).await {
        Ok((who, proof)) => {
            let secret = madfs_auth::random_u64()?;
            let a = Admission::Admitted {
                secret,
                uid: who.uid,
                gid: who.gid,
                proof,
            };
            (a, Some((secret, Arc::new(who))))
        }
        Err(reason) => {
            tracing::warn!("TCP connection refused: {reason}");
            ops.stats.refused.fetch_add(1, Relaxed);
            (Admission::Refused { reason }, None)
        }
    };
    let bytes = flexbuffers::to_vec(&answer).unwrap_or_default();
    s.write_all(&(bytes.len() as u32).to_le_bytes()).await?;
    s.write_all(&bytes).await?;
    let Some((secret, who)) = admitted else {
        return Ok(());
    };
    // the request being read (it becomes a buffer set's `recv` once whole)
    let mut frame: Vec<u8> = Vec::new();
    loop {
        // the first byte of the next request, within the idle limit
        let mut head = [0u8; 5];
        let first = s.read(&mut head[..1]);
        let got = if limits.tcp_idle.is_zero() {
            first.await
        } else {
            match tokio::time::timeout(limits.tcp_idle, first).await {
                Ok(r) => r,
                Err(_) => {
                    ops.stats.tcp_timeouts.fetch_add(1, Relaxed);
                    tracing::debug!("TCP connection idle for {:?}: closed", limits.tcp_idle);
                    return Ok(());
                }
            }
        };
        if got.unwrap_or(0) == 0 {
            return Ok(());
        }
        // the rest of it within a deadline from its first byte
        let read = async {
            s.read_exact(&mut head[1..]).await?;
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if len == 0 || len > cfg.max_frame + 1 {
                ops.stats.bad_frames.fetch_add(1, Relaxed);
                return Err(std::io::Error::other("bad frame length"));
            }
            frame.clear();
            frame.reserve_exact(len - 1);
            let n = (&mut s)
                .take(len as u64 - 1)
                .read_to_end(&mut frame)
                .await?;
            if n != len - 1 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            Ok(head[4])
        };
        // (a client sends a request in one piece; the server may be the slow one, so the
        // deadline is the longer of the half-sent and send deadlines)
        let deadline = limits.half_sent.max(cfg.send_timeout);
        let kind = match tokio::time::timeout(deadline, read).await {
            Ok(r) => r?,
            Err(_) => {
                ops.stats.tcp_timeouts.fetch_add(1, Relaxed);
                ops.stats.half_sent.fetch_add(1, Relaxed);
                tracing::debug!(
                    "TCP request not whole within {:?}: closed",
                    limits.half_sent
                );
                return Ok(());
            }
        };
        let _set = sets
            .acquire()
            .await
            .map_err(|_| std::io::Error::other("closed"))?;
        let mut b = pool
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Bufs::new(cfg.max_frame));
        std::mem::swap(&mut b.recv, &mut frame);
        if frame.capacity() > TCP_KEEP {
            frame = Vec::new();
        }
        if frame::split_conn_word(&b.recv).map(|(w, _)| w) != Some(secret) {
            ops.stats.forged.fetch_add(1, Relaxed);
            pool.borrow_mut().push(b);
            return Ok(());
        }
        let (b, prefix, n) = if kind == 2 {
            let result = crate::serve::fsync(ops, sync_tx, &who, None, &b.recv)
                .await
                .unwrap_or(Err(Errno::EIO));
            let mut b = b;
            b.hdr.clear();
            let prefix = match result {
                Ok(()) => {
                    let (p, h) = b.enc.reply(&Reply::Unit);
                    let h = h.to_vec();
                    b.hdr.extend_from_slice(&h);
                    p
                }
                Err(e) => frame::error_prefix(e),
            };
            (b, prefix, 0)
        } else {
            let inline = match frame::decode_request(crate::serve::frame_of(&b.recv)) {
                Ok((req, _)) => crate::table::row(&req)
                    .runs
                    .inline(ops.replica.is_some(), cfg.meta_inline),
                Err(_) => true,
            };
            let mut b = b;
            // (a change that must wait for callbacks runs again on an IO thread)
            let done = inline
                .then(|| crate::serve::frame(ops, &mut b, None, &who, None))
                .filter(|_| !crate::pipeline::take_rerun());
            match done {
                Some((p, n)) => (b, p, n),
                None => {
                    let (ops2, who) = (ops.clone(), who.clone());
                    tokio::task::spawn_blocking(move || {
                        let (p, n) = crate::serve::frame(&ops2, &mut b, None, &who, None);
                        (b, p, n)
                    })
                    .await
                    .map_err(std::io::Error::other)?
                }
            }
        };
        let total = ((PREFIX + b.hdr.len() + n) as u32).to_le_bytes();
        // one writev, one segment for a small reply: four writes were four segments, and the
        // client, woken by the first, waited again for the rest (stat over TCP: 94 µs)
        let pieces = [&total[..], &prefix, &b.hdr, &b.data[..n]];
        // what the socket takes now; a reply it does not take whole keeps only its unsent
        // bytes (not the buffer set) while it waits for a slow reader
        let sent = write_now(&s, &pieces);
        let all: usize = pieces.iter().map(|p| p.len()).sum();
        let rest = match sent {
            Ok(k) if k < all => Some(pieces.concat().split_off(k)),
            _ => None,
        };
        pool.borrow_mut().push(b);
        drop(_set);
        sent?;
        let Some(rest) = rest else {
            continue;
        };
        if stalled.get() + rest.len() > limits.park_bytes {
            ops.stats.busy.fetch_add(1, Relaxed);
            return Ok(());
        }
        stalled.set(stalled.get() + rest.len());
        let done = tokio::time::timeout(cfg.send_timeout, s.write_all(&rest)).await;
        stalled.set(stalled.get() - rest.len());
        match done {
            Ok(r) => r?,
            Err(_) => {
                ops.stats.tcp_timeouts.fetch_add(1, Relaxed);
                tracing::debug!(
                    "TCP peer took no reply within {:?}: closed",
                    cfg.send_timeout
                );
                return Ok(());
            }
        }
    }
}

/// Writes what the socket takes of `pieces` now, without waiting: the bytes written.
fn write_now(s: &tokio::net::TcpStream, pieces: &[&[u8]]) -> std::io::Result<usize> {
    let mut iov: Vec<std::io::IoSlice<'_>> = pieces
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| std::io::IoSlice::new(p))
        .collect();
    let mut iov = &mut iov[..];
    let mut sent = 0;
    while !iov.is_empty() {
        match s.try_write_vectored(iov) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                sent += n;
                std::io::IoSlice::advance_slices(&mut iov, n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}
