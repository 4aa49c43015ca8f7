//! Requests of a UCX connection whose slow part (data that has not come, a reply not taken)
//! outlasts the grace leave their handler and go on in tasks of their own, within the
//! bounds of `super::config::Limits` (docs/architecture.md, "Slow and dead peers").

use super::config::{NetConfig, GRACE};
use super::conns::{Conn, Conns};
use super::send::{post_reply, received, send_small, settle};
use crate::serve::{Bufs, Out};
use crate::server::Server;
use madfs_proto::frame::{self, Encoder, PREFIX};
use madfs_proto::{tag, Errno};
use madfs_rpc::{PostedSend, Worker};
use madfs_store::chunks::Mapped;
use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// What a send reads, for a send that closing its connection did not end (see
/// [`Net::end_send`]): kept, never reused, until UCX says the send is over.
pub trait Held: 'static {
    fn keep_for(self, send: PostedSend);
}

impl Held for Bufs {
    /// The set stays with the send, but costs no resident memory: its receive buffer (which
    /// the send does not read) is freed, and the whole pages of its data buffer are given
    /// back to the kernel (they read as zeros, to a peer that fetches the reply late).
    fn keep_for(mut self, send: PostedSend) {
        self.recv = Vec::new();
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let (at, len) = (self.data.as_mut_ptr() as usize, self.data.len());
        let start = at.div_ceil(page) * page;
        let end = (at + len) / page * page;
        if end > start {
            // SAFETY: whole pages inside `self.data`, which nothing reads but UCX (as the
            // send's source) until the set is dropped; private anonymous pages read back as
            // zeros after MADV_DONTNEED.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
        tokio::task::spawn_local(async move {
            let _ = send.await;
            drop(self);
        });
    }
}

impl Held for Mapped {
    /// The mapping pins its file against truncation (`FsChunks`): it cannot stay for as long
    /// as the send may. Its pages are replaced by zeros at the same address, which stays
    /// reserved (leaked: a few pages of address space, nothing resident), and the mapping
    /// with its pin goes: a peer that fetches the reply late reads zeros.
    fn keep_for(self, send: PostedSend) {
        let bytes = self.bytes();
        if bytes.is_empty() {
            return drop(send);
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let start = bytes.as_ptr() as usize / page * page;
        let len = (bytes.as_ptr() as usize + bytes.len()).div_ceil(page) * page - start;
        // SAFETY: `start..start+len` is this mapping's range (page-aligned around its bytes):
        // replacing it with private zero pages changes nothing Rust code holds (only UCX reads
        // it, as the send's source); the same range is then reserved again once the mapping
        // is dropped, so nothing else is ever placed where the send reads.
        unsafe {
            let zeros = libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            if zeros == libc::MAP_FAILED {
                // keep the file mapping (and its pin) rather than free the range
                std::mem::forget(self);
                return drop(send);
            }
            // the drop unmaps our zeros and releases the pin; take the range back at once
            drop(self);
            let again = libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            );
            if again as usize != start {
                tracing::warn!("the range of a reply that was never taken was reused");
            }
        }
        // freed by UCX when (if ever) the send completes
        drop(send);
    }
}

/// What the tasks of the net thread share.
pub struct Net {
    pub worker: Rc<Worker>,
    pub conns: Rc<Conns>,
    pub cfg: Rc<NetConfig>,
    pub ops: Arc<Server>,
    pub park: Park,
}

/// The parked requests (see [`Limits`]).
#[derive(Default)]
pub struct Park {
    /// Spare buffer sets, for handlers whose own set waits with an unsent reply.
    spare: RefCell<Vec<Bufs>>,
    /// Bytes of the spare sets made (in `spare` or lent out).
    set_bytes: Cell<usize>,
    /// Bytes reserved for the data of parked half-sent writes.
    data_bytes: Cell<usize>,
    /// Parked requests.
    count: Cell<usize>,
    /// Discard receives waiting for late data.
    discards: Cell<usize>,
}

/// Spare sets kept when they come back; more are freed.
const SPARE_KEEP: usize = 4;

/// Which limit a request to be parked is over.
pub enum Over {
    /// Its connection's: the connection is closed.
    Conn,
    /// The server's: the request is refused or waits in its handler.
    Server,
}

/// A parked request's share of its connection's and the server's limits, given back when
/// it is dropped.
pub struct Ticket {
    net: Rc<Net>,
    c: Rc<Conn>,
    bytes: usize,
    data: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let (c, p) = (&self.c, &self.net.park);
        c.parked.set(c.parked.get() - 1);
        c.parked_bytes.set(c.parked_bytes.get() - self.bytes);
        p.count.set(p.count.get() - 1);
        p.data_bytes.set(p.data_bytes.get() - self.data);
    }
}

impl Net {
    /// Bytes of one buffer set.
    pub fn set_size(&self) -> usize {
        2 * self.cfg.max_frame - crate::serve::HEADER_ROOM + (1 << 16)
    }

    /// Parks a request of `c` that holds `bytes` (`data` of them reserved for awaited data).
    pub fn ticket(
        self: &Rc<Self>,
        c: &Rc<Conn>,
        bytes: usize,
        data: usize,
    ) -> Result<Ticket, Over> {
        let l = &self.cfg.limits;
        if c.parked.get() >= l.conn_parked || c.parked_bytes.get() + bytes > l.conn_park_bytes {
            self.ops.stats.over_limit.fetch_add(1, Relaxed);
            return Err(Over::Conn);
        }
        let p = &self.park;
        // awaited data may take three quarters of the memory: spare sets keep the rest
        if p.count.get() >= l.parked_max
            || p.set_bytes.get() + p.data_bytes.get() + data > l.park_bytes
            || p.data_bytes.get() + data > l.park_bytes / 4 * 3
        {
            return Err(Over::Server);
        }
        c.parked.set(c.parked.get() + 1);
        c.parked_bytes.set(c.parked_bytes.get() + bytes);
        p.count.set(p.count.get() + 1);
        p.data_bytes.set(p.data_bytes.get() + data);
        self.ops.stats.parked.fetch_add(1, Relaxed);
        Ok(Ticket {
            net: self.clone(),
            c: c.clone(),
            bytes,
            data,
        })
    }

    /// A spare buffer set for a handler whose own set was parked, within the memory limit.
    pub fn take_spare(&self) -> Option<Bufs> {
        if let Some(b) = self.park.spare.borrow_mut().pop() {
            return Some(b);
        }
        let p = &self.park;
        let size = self.set_size();
        if p.set_bytes.get() + p.data_bytes.get() + size > self.cfg.limits.park_bytes {
            return None;
        }
        p.set_bytes.set(p.set_bytes.get() + size);
        Some(Bufs::new(self.cfg.max_frame))
    }

    pub fn put_spare(&self, b: Bufs) {
        let mut spare = self.park.spare.borrow_mut();
        if spare.len() < SPARE_KEEP {
            spare.push(b);
        } else {
            let p = &self.park;
            p.set_bytes
                .set(p.set_bytes.get().saturating_sub(self.set_size()));
        }
    }

    /// Answers request `seq` of `c` with error `e`, from a task of its own.
    pub fn answer(&self, c: &Rc<Conn>, seq: u32, e: Errno) {
        if c.dead.get() {
            return;
        }
        self.ops.stats.errors.fetch_add(1, Relaxed);
        let (c, conns, timeout) = (c.clone(), self.conns.clone(), self.cfg.send_timeout);
        tokio::task::spawn_local(async move {
            let p = frame::error_prefix(e);
            send_small(&conns, &c, seq, &p, &[], timeout).await;
        });
    }

    /// Takes the data message with `tag` of a request that was dropped or refused, if it
    /// comes within [`Limits::orphan_wait`], and throws it away (a message nobody receives
    /// would stay in UCX's unexpected queue). The receive has no room: a message is taken
    /// truncated, and a rendezvous one is not transferred at all.
    pub fn discard(self: &Rc<Self>, tag: u64) {
        let p = &self.park;
        if p.discards.get() >= self.cfg.limits.parked_max {
            return;
        }
        p.discards.set(p.discards.get() + 1);
        let net = self.clone();
        tokio::task::spawn_local(async move {
            let mut none: [MaybeUninit<u8>; 0] = [];
            let wait = net.cfg.limits.orphan_wait;
            if tokio::time::timeout(wait, net.worker.tag_recv(tag, &mut none))
                .await
                .is_ok()
            {
                net.ops.stats.orphans.fetch_add(1, Relaxed);
            }
            net.park.discards.set(net.park.discards.get() - 1);
        });
    }

    /// Waits up to `wait` for `send` of `c` to be over; a peer that does not take it is
    /// closed. Returns `held` (what the send reads) once the send is over; if even closing
    /// does not end it, a task keeps `held` until it does, and the answer is `None`.
    pub async fn end_send<H: Held>(
        &self,
        c: &Rc<Conn>,
        mut send: PostedSend,
        held: H,
        wait: Duration,
    ) -> Option<H> {
        if !c.dead.get() {
            match tokio::time::timeout(wait, &mut send).await {
                Ok(Ok(())) => return Some(held),
                Ok(Err(_)) => {
                    self.conns.kill(c);
                    return Some(held);
                }
                Err(_) => {
                    tracing::debug!("connection {} took no reply within {wait:?}; closed", c.id);
                    self.conns.kill(c);
                }
            }
        }
        // closing ends the send where UCX tracks its sends per endpoint (error mode `peer`);
        // in error mode `none` a rendezvous send the peer has not taken cannot be withdrawn,
        // and a peer that was only stopped may still take it later, reading `held` where it
        // was: what it reads is kept (never reused) until UCX says the send is over
        if settle(&mut send).await.is_some() {
            return Some(held);
        }
        self.ops.stats.stuck.fetch_add(1, Relaxed);
        held.keep_for(send);
        None
    }

    /// The reply in `b` to request `seq` of `c` (see [`post_reply`]). Returns the buffer set
    /// the handler goes on with: `b` once the reply went out (or failed), or, when the peer
    /// does not take it within [`GRACE`], a spare set while `b` waits with the reply in a
    /// task of its own.
    pub async fn reply(
        self: &Rc<Self>,
        c: &Rc<Conn>,
        seq: u32,
        mut b: Bufs,
        prefix: [u8; PREFIX],
        n: usize,
        raw: bool,
    ) -> Bufs {
        if c.dead.get() {
            return b;
        }
        let mut send = match post_reply(&c.ep, seq, &mut b, prefix, n, raw) {
            Ok(s) => s,
            Err(_) => {
                self.conns.kill(c);
                return b;
            }
        };
        match settle(&mut send).await {
            Some(Ok(())) => return b,
            Some(Err(_)) => {
                self.conns.kill(c);
                return b;
            }
            None => {}
        }
        let wait = self.cfg.send_timeout.saturating_sub(GRACE);
        match self.ticket(c, n, 0) {
            Ok(t) => {
                if let Some(spare) = self.take_spare() {
                    let (net, c) = (self.clone(), c.clone());
                    tokio::task::spawn_local(async move {
                        if let Some(b) = net.end_send(&c, send, b, wait).await {
                            net.put_spare(b);
                        }
                        drop(t);
                    });
                    return spare;
                }
                self.ops.stats.busy.fetch_add(1, Relaxed);
            }
            Err(Over::Conn) => self.conns.kill(c),
            Err(Over::Server) => {
                self.ops.stats.busy.fetch_add(1, Relaxed);
            }
        }
        // no room to park it: the handler waits (bounded by the send timeout)
        let fresh = || Bufs::new(self.cfg.max_frame);
        self.end_send(c, send, b, wait).await.unwrap_or_else(fresh)
    }

    /// A large read's data straight from a mapping of the chunk file, to request `seq` of
    /// `c`; parked like [`Net::reply`] when the peer does not take it at once.
    pub async fn reply_mapped(self: &Rc<Self>, c: &Rc<Conn>, seq: u32, m: Mapped) {
        let len = m.bytes().len();
        // SAFETY: `m` (the mapping) is kept until the send is over (`end_send`).
        let posted = unsafe {
            c.ep.tag_send_posted(tag::reply_data(seq), m.bytes().as_ptr(), len)
        };
        let mut send = match posted {
            Ok(s) => s,
            Err(_) => return self.conns.kill(c),
        };
        match settle(&mut send).await {
            Some(Ok(())) => return,
            Some(Err(_)) => return self.conns.kill(c),
            None => {}
        }
        let wait = self.cfg.send_timeout.saturating_sub(GRACE);
        match self.ticket(c, len, 0) {
            Ok(t) => {
                let (net, c) = (self.clone(), c.clone());
                tokio::task::spawn_local(async move {
                    net.end_send(&c, send, m, wait).await;
                    drop(t);
                });
                return;
            }
            Err(Over::Conn) => self.conns.kill(c),
            Err(Over::Server) => {
                self.ops.stats.busy.fetch_add(1, Relaxed);
            }
        }
        self.end_send(c, send, m, wait).await;
    }

    /// Takes the data message of `WriteData` request `seq` of `c` (`len` bytes) into
    /// `b.data`: `Some(n)` when it came (`n` > `len`: truncated or failed). `None` when the
    /// request went on elsewhere: its data had not arrived within [`GRACE`], so it was
    /// parked (or refused or dropped, and answered). `b` is the set the handler goes on with
    /// either way.
    pub async fn take_data(
        self: &Rc<Self>,
        b: &mut Bufs,
        c: &Rc<Conn>,
        seq: u32,
        len: usize,
    ) -> Option<usize> {
        let tag = tag::request_data(c.id, seq, c.secret);
        let room = len.min(b.data.len());
        // SAFETY: `b.data` is neither used nor freed until the receive is over: below, or in
        // the task that takes the set over.
        let posted = unsafe {
            self.worker
                .tag_recv_posted(tag, u64::MAX, b.data.as_mut_ptr().cast(), room)
        };
        let Ok(mut recv) = posted else {
            return Some(len + 1);
        };
        if let Some(r) = settle(&mut recv).await {
            return Some(received(r, len));
        }
        if !recv.cancel() {
            // the data is arriving right now (a transfer under way)
            match tokio::time::timeout(self.cfg.limits.half_sent, &mut recv).await {
                Ok(r) => return Some(received(r, len)),
                Err(_) => {
                    // stalled mid-transfer: close the peer; the set stays with the receive
                    self.ops.stats.half_sent.fetch_add(1, Relaxed);
                    self.conns.kill(c);
                    let old = std::mem::replace(b, Bufs::new(self.cfg.max_frame));
                    if settle(&mut recv).await.is_none() {
                        self.ops.stats.stuck.fetch_add(1, Relaxed);
                        tokio::task::spawn_local(async move {
                            let _ = recv.await;
                            drop(old);
                        });
                    }
                    return None;
                }
            }
        }
        // cancelled, or completed just before
        if let Poll::Ready(Ok(v)) = futures::poll!(&mut recv) {
            return Some(received(Ok(v), len));
        }
        drop(recv);
        self.park_half_sent(c, seq, len, &b.recv);
        None
    }

    /// A `WriteData` whose data has not come within [`GRACE`]: waits for it in a task of its
    /// own, up to [`Limits::half_sent`] from its header, then serves it.
    pub fn park_half_sent(self: &Rc<Self>, c: &Rc<Conn>, seq: u32, len: usize, frame: &[u8]) {
        let tag = tag::request_data(c.id, seq, c.secret);
        let t = match self.ticket(c, len, len) {
            Ok(t) => t,
            Err(Over::Conn) => {
                self.conns.kill(c);
                return self.discard(tag);
            }
            Err(Over::Server) => {
                self.ops.stats.busy.fetch_add(1, Relaxed);
                self.answer(c, seq, Errno::EAGAIN);
                return self.discard(tag);
            }
        };
        let frame = frame.to_vec();
        let (net, c) = (self.clone(), c.clone());
        tokio::task::spawn_local(async move {
            net.half_sent(&c, seq, tag, len, frame).await;
            drop(t);
        });
    }

    pub async fn half_sent(
        self: &Rc<Self>,
        c: &Rc<Conn>,
        seq: u32,
        tag: u64,
        len: usize,
        frame: Vec<u8>,
    ) {
        let mut data = Vec::<u8>::with_capacity(len);
        // SAFETY: `data` is neither used nor freed until the receive is over (below).
        let posted = unsafe {
            self.worker
                .tag_recv_posted(tag, u64::MAX, data.as_mut_ptr().cast(), len)
        };
        let Ok(mut recv) = posted else {
            return self.answer(c, seq, Errno::EIO);
        };
        let wait = self.cfg.limits.half_sent.saturating_sub(GRACE);
        let got = match tokio::time::timeout(wait, &mut recv).await {
            Ok(r) => received(r, len),
            Err(_) => {
                if !recv.cancel() {
                    // stalled mid-transfer: close the peer; `data` stays with the receive
                    self.conns.kill(c);
                    if settle(&mut recv).await.is_none() {
                        self.ops.stats.stuck.fetch_add(1, Relaxed);
                        tokio::task::spawn_local(async move {
                            let _ = recv.await;
                            drop(data);
                        });
                        return;
                    }
                }
                match futures::poll!(&mut recv) {
                    Poll::Ready(Ok(v)) => received(Ok(v), len),
                    _ => {
                        self.ops.stats.half_sent.fetch_add(1, Relaxed);
                        tracing::debug!("connection {}: write {seq} got no data in time", c.id);
                        self.answer(c, seq, Errno::ETIMEDOUT);
                        return self.discard(tag);
                    }
                }
            }
        };
        drop(recv);
        let got = (got <= len).then(|| {
            // SAFETY: UCX wrote `got` bytes (at most the capacity) and the receive is over.
            unsafe { data.set_len(got) };
            got
        });
        let b = Bufs {
            recv: frame,
            data,
            hdr: Vec::new(),
            enc: Encoder::default(),
            out: Out::boxed(),
        };
        let (ops, who, holder) = (self.ops.clone(), c.who.clone(), c.holder);
        let served = tokio::task::spawn_blocking(move || {
            let mut b = b;
            let (p, n) = crate::serve::frame(&ops, &mut b, got, &who, holder);
            (b, p, n)
        })
        .await;
        let Ok((mut b, p, n)) = served else {
            return self.answer(c, seq, Errno::EIO);
        };
        if c.dead.get() {
            return;
        }
        match post_reply(&c.ep, seq, &mut b, p, n, false) {
            Ok(send) => {
                self.end_send(c, send, b, self.cfg.send_timeout).await;
            }
            Err(_) => self.conns.kill(c),
        }
    }
}
