//! Sending replies on UCX: small ones at once, large ones posted and waited for within
//! bounds; a peer that takes nothing is closed.

use super::config::GRACE;
use super::conns::{Conn, Conns};
use crate::serve::{Bufs, Out};
use madfs_proto::frame::PREFIX;
use madfs_proto::tag;
use madfs_rpc::{Endpoint, PostedSend, UcxError};
use std::future::Future;
use std::io::IoSlice;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

/// Sends the reply to `seq` on `ep`: the prefix, the header and the data, in one vectored
/// send (a timer only for a send that does not complete at once).
pub async fn send_reply(
    ep: &Endpoint,
    seq: u32,
    prefix: &[u8],
    hdr: &[u8],
    data: &[u8],
    timeout: Duration,
) -> bool {
    let mut iov = Vec::with_capacity(3);
    iov.push(IoSlice::new(prefix));
    if !hdr.is_empty() {
        iov.push(IoSlice::new(hdr));
    }
    if !data.is_empty() {
        iov.push(IoSlice::new(data));
    }
    // most replies complete at once (eager protocol): only arm a timer for those that do not
    let mut send = std::pin::pin!(ep.tag_send_vectored(tag::reply(seq), &iov));
    if let std::task::Poll::Ready(r) = futures::poll!(send.as_mut()) {
        return r.is_ok();
    }
    matches!(tokio::time::timeout(timeout, send).await, Ok(Ok(_)))
}

/// A small reply (no data) to `c`, from a task of its own; a peer that does not take it
/// within `timeout` is closed (before the caller's buffers go: closing ends the send).
pub async fn send_small(
    conns: &Conns,
    c: &Rc<Conn>,
    seq: u32,
    prefix: &[u8],
    hdr: &[u8],
    timeout: Duration,
) {
    if !c.dead.get() && !send_reply(&c.ep, seq, prefix, hdr, &[], timeout).await {
        conns.kill(c);
    }
}

/// Polls `f` once, then waits for it up to [`GRACE`]: `None` if it is not done by then.
pub async fn settle<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    if let Poll::Ready(v) = futures::poll!(&mut *f) {
        return Some(v);
    }
    tokio::time::timeout(GRACE, f).await.ok()
}

/// Posts the reply held in `b`: `prefix`, `b.hdr` and `n` bytes of `b.data` on
/// `tag::reply(seq)`, or (`raw`, a large read) the data alone, contiguous, on
/// `tag::reply_data(seq)` (zero-copy rendezvous).
///
/// The send reads `b`'s heap blocks (its vectors and [`Bufs::out`]) until it is over: the
/// caller keeps `b` unchanged until then (moving the set is fine, its blocks stay put).
pub fn post_reply(
    ep: &Endpoint,
    seq: u32,
    b: &mut Bufs,
    prefix: [u8; PREFIX],
    n: usize,
    raw: bool,
) -> Result<PostedSend, UcxError> {
    if raw {
        // SAFETY: see above: `b.data` stays put and unchanged until the send is over.
        return unsafe { ep.tag_send_posted(tag::reply_data(seq), b.data.as_ptr(), n) };
    }
    let Out { prefix: p, iov } = &mut *b.out;
    *p = prefix;
    let mut k = 0;
    for piece in [&p[..], &b.hdr[..], &b.data[..n]] {
        if !piece.is_empty() {
            // SAFETY: the pieces are in heap blocks of `b` that the caller keeps until the
            // send is over (see above); the scatter list lives in `b.out` beside them.
            iov[k] = IoSlice::new(unsafe { &*(piece as *const [u8]) });
            k += 1;
        }
    }
    // SAFETY: as above.
    unsafe { ep.tag_send_vectored_posted(tag::reply(seq), iov.as_ptr(), k) }
}

/// What a received data message (or its failure) means to `serve_frame`: its length, or
/// more than `len` (truncated or failed).
pub fn received(r: Result<(u64, usize), UcxError>, len: usize) -> usize {
    match r {
        Ok((_, n)) => n,
        Err(_) => len + 1,
    }
}
