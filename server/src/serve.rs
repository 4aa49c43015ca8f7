//! The one serve path of every transport (docs/architecture.md, "One door"): UCX and the
//! plain-TCP fallback only move bytes; what a request frame becomes, and what its reply
//! frame holds, is decided here, once, for both of them and for fsync: decode → the pipeline
//! (`crate::pipeline`) → the reply's prefix, header and data in the handler's buffers.

use crate::handlers::Call;
use crate::server::{Answer, Server};
use crate::state::leases::Holder;
use crate::sync::SyncSender;
use crate::who::Who;
use madfs_proto::frame::{self, Encoder, CONN_WORD, PREFIX};
use madfs_proto::{Dirent, Errno, FsResult, Reply, Request};
use std::io::IoSlice;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Room for a request header inside a frame.
pub const HEADER_ROOM: usize = 64 << 10;

/// Buffers owned by one handler, reused for every request it serves.
pub struct Bufs {
    pub recv: Vec<u8>,
    pub data: Vec<u8>,
    pub hdr: Vec<u8>,
    pub enc: Encoder,
    /// The reply's prefix and scatter list, at an address that stays put when the set moves
    /// (UCX keeps a pointer to the scatter list of a send that does not complete at once).
    pub out: Box<Out>,
}

/// See [`Bufs::out`].
pub struct Out {
    pub prefix: [u8; PREFIX],
    pub iov: [IoSlice<'static>; 3],
}

impl Bufs {
    /// A handler's set: room for the largest frame and the largest read.
    pub fn new(max_frame: usize) -> Bufs {
        Bufs {
            recv: Vec::with_capacity(max_frame),
            data: vec![0u8; max_frame.saturating_sub(HEADER_ROOM)],
            hdr: Vec::with_capacity(1 << 16),
            enc: Encoder::default(),
            out: Out::boxed(),
        }
    }
}

impl Out {
    pub fn boxed() -> Box<Out> {
        Box::new(Out {
            prefix: [0; PREFIX],
            iov: [IoSlice::new(&[]), IoSlice::new(&[]), IoSlice::new(&[])],
        })
    }
}

/// A read of a chunk (`span`: file id, position, length) that the page cache holds whole,
/// answered on the net thread (`madfs_store::chunks::FsChunks::read_nowait`), once the
/// pipeline admitted it (`crate::pipeline::check`): the reply prefix and the data length in
/// `b.data`, or `None` to serve the request as usual.
pub fn read_nowait(
    s: &Server,
    b: &mut Bufs,
    span: (u64, u64, usize),
) -> Option<([u8; PREFIX], usize)> {
    let (id, pos, len) = span;
    let n = s.chunks.read_nowait(id, pos, b.data.get_mut(..len)?)?;
    s.stats.request("read");
    s.stats.bytes_out.fetch_add(n as u64, Relaxed);
    b.hdr.clear();
    Some((frame::bulk_reply_prefix(), n))
}

/// The request frame of a received message (after its connection word).
pub fn frame_of(msg: &[u8]) -> &[u8] {
    msg.get(CONN_WORD..).unwrap_or(&[])
}

/// Decodes the frame in `b.recv`, serves it, and leaves the reply header in `b.hdr`.
/// Returns the reply prefix and the length of read data in `b.data`. `data`: the length of
/// the data of a `WriteData` request, already received into `b.data`. A panic while serving
/// becomes an `EIO` reply (logged, counted as an error): the transport's handler lives on.
pub fn frame(
    s: &Server,
    b: &mut Bufs,
    data: Option<usize>,
    who: &Who,
    holder: Option<Holder>,
) -> ([u8; PREFIX], usize) {
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let result = serve(s, b, data, who, holder);
        encode(s, b, result)
    }));
    served.unwrap_or_else(|_| {
        tracing::error!("a request panicked; answered EIO");
        s.stats.errors.fetch_add(1, Relaxed);
        b.hdr.clear();
        (frame::error_prefix(Errno::EIO), 0)
    })
}

/// The pipeline's answer to the frame in `b.recv`.
fn serve(
    s: &Server,
    b: &mut Bufs,
    data: Option<usize>,
    who: &Who,
    holder: Option<Holder>,
) -> FsResult<Answer> {
    let (req, bulk) = match frame::decode_request(frame_of(&b.recv)) {
        Ok(v) => v,
        Err(e) => {
            s.stats.bad_frames.fetch_add(1, Relaxed);
            return Err(e);
        }
    };
    s.stats.request(req.name());
    // a `WriteData`'s bytes came as a message of their own, into the data buffer
    let (req, bulk, read_into): (Request<'_>, &[u8], &mut [u8]) = match req {
        Request::WriteData {
            id,
            chunk,
            offset,
            len,
            chunk_size,
            size_of,
            cap,
        } => match data {
            Some(n) if n == len as usize => {
                let w = Request::Write {
                    id,
                    chunk,
                    offset,
                    chunk_size,
                    size_of,
                    cap,
                };
                (w, &b.data[..n], &mut [])
            }
            // the data did not arrive whole (or not over UCX: the TCP transport has none)
            Some(_) if len as usize > b.data.len() => return Err(Errno::EFBIG),
            _ => return Err(Errno::EIO),
        },
        req => (req, bulk, &mut b.data[..]),
    };
    s.stats.bytes_in.fetch_add(bulk.len() as u64, Relaxed);
    let started = s.stats.latency.start();
    let mut c = Call {
        who,
        bulk,
        data: read_into,
        sync: None,
        holder,
        no_leases: false,
    };
    let r = crate::pipeline::serve(s, &mut c, &req);
    s.stats.latency.done(req.name(), started);
    r
}

/// An fsync request (frame `msg`) from `who`, over UCX or plain TCP: the receiver of its
/// result. Served as any request (admitted, authorized, its size published); on an
/// unreplicated cluster it is then queued for the group-commit sync threads, on a
/// replicated one it is flushed and copied on an IO thread.
pub fn fsync(
    s: &Arc<Server>,
    sync: &SyncSender,
    who: &Arc<Who>,
    holder: Option<Holder>,
    msg: &[u8],
) -> tokio::sync::oneshot::Receiver<FsResult<()>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let req = match frame::decode_request(frame_of(msg)) {
        Ok((req, _)) => req,
        Err(_) => {
            // (what this tag takes is an fsync: anything else is an invalid one)
            s.stats.bad_frames.fetch_add(1, Relaxed);
            let _ = tx.send(Err(Errno::EINVAL));
            return rx;
        }
    };
    s.stats.request("fsync");
    if crate::table::row(&req)
        .runs
        .inline(s.replica.is_some(), true)
    {
        let mut c = Call {
            who,
            bulk: &[],
            data: &mut [],
            sync: Some(sync),
            holder,
            no_leases: false,
        };
        let r = match crate::pipeline::serve(s, &mut c, &req) {
            Ok(Answer::Queued(q)) => return q,
            r => r.map(drop),
        };
        // (one that must wait for callbacks goes on as one that runs on an IO thread)
        if !crate::pipeline::take_rerun() {
            let _ = tx.send(r);
            return rx;
        }
    }
    let (s, who, msg) = (s.clone(), who.clone(), msg.to_vec());
    tokio::task::spawn_blocking(move || {
        let r = match frame::decode_request(frame_of(&msg)) {
            Ok((req, _)) => {
                let mut c = Call::own(&who);
                c.holder = holder;
                crate::pipeline::serve(&s, &mut c, &req).map(drop)
            }
            Err(e) => Err(e),
        };
        let _ = tx.send(r);
    });
    rx
}

/// The reply frame of `result` in `b`: its prefix, and the length of read data in `b.data`.
/// A refusal by admission (`EREMCHG`) carries the map epoch this server knows
/// (`madfs_proto::Refusal`), so that a client can tell a stale map of its own.
fn encode(s: &Server, b: &mut Bufs, result: FsResult<Answer>) -> ([u8; PREFIX], usize) {
    let ops = s;
    b.hdr.clear();
    match result {
        Err(Errno::EREMCHG) => {
            ops.stats.errors.fetch_add(1, Relaxed);
            let refusal = madfs_proto::Refusal {
                epoch: ops.map_epoch(),
            };
            let (p, h) = b.enc.refusal(Errno::EREMCHG, &refusal);
            b.hdr.extend_from_slice(h);
            (p, 0)
        }
        Err(e) => {
            ops.stats.errors.fetch_add(1, Relaxed);
            (frame::error_prefix(e), 0)
        }
        Ok(Answer::Data(n)) => {
            ops.stats.bytes_out.fetch_add(n as u64, Relaxed);
            (frame::bulk_reply_prefix(), n)
        }
        Ok(ans) => {
            let dirents;
            let reply = match &ans {
                Answer::Unit => Reply::Unit,
                Answer::Attr(a) => Reply::Attr(*a),
                Answer::Created {
                    attr,
                    existed,
                    old_size,
                    cap,
                } => Reply::Created {
                    attr: *attr,
                    existed: *existed,
                    old_size: *old_size,
                    cap: *cap,
                },
                Answer::Granted(attr, cap) => Reply::Granted {
                    attr: *attr,
                    cap: *cap,
                },
                Answer::Bool(v) => Reply::Bool(*v),
                Answer::Replaced(a) => Reply::Replaced(*a),
                Answer::Written(n) => Reply::Written(*n),
                Answer::Offset(o) => Reply::Offset(*o),
                Answer::Found(paths, scanned, next) => Reply::Found {
                    scanned: *scanned,
                    paths: paths.iter().map(String::as_str).collect(),
                    next: next.as_deref(),
                },
                Answer::StatFs(s) => Reply::StatFs(*s),
                Answer::Dirs(v, next) => Reply::Dirs {
                    entries: v
                        .iter()
                        .map(|(p, m, u, g, ver)| (p.as_str(), *m, *u, *g, *ver))
                        .collect(),
                    next: next.as_deref(),
                },
                Answer::Located(l) => Reply::Located {
                    boot: &l.boot,
                    dir: &l.dir,
                    token: l.token,
                },
                Answer::Named(p) => Reply::Named(p),
                Answer::Records(records, next) => Reply::Records {
                    records: records
                        .iter()
                        .map(|(k, v)| {
                            (
                                serde_bytes::Bytes::new(k.as_slice()),
                                serde_bytes::Bytes::new(v.as_slice()),
                            )
                        })
                        .collect(),
                    next: next.as_deref(),
                },
                Answer::Map(epoch, states, replication, owners) => Reply::Map {
                    epoch: *epoch,
                    states: states.clone(),
                    replication: *replication,
                    owners: owners.clone(),
                },
                Answer::Dirents(v, next) => {
                    dirents = v
                        .iter()
                        .map(|e| Dirent {
                            hash: e.hash,
                            id: e.attr.id,
                            kind: e.attr.mode & madfs_proto::S_IFMT,
                            name: &e.name,
                        })
                        .collect();
                    Reply::Dirents {
                        entries: dirents,
                        next: *next,
                    }
                }
                Answer::Looked(attr, lease_ms) => Reply::Looked {
                    attr: *attr,
                    lease_ms: *lease_ms,
                },
                Answer::Looks(page, next, lease_ms) => Reply::Looks {
                    entries: page,
                    next: *next,
                    lease_ms: *lease_ms,
                },
                Answer::Data(_) => unreachable!(),
                // (an fsync's queue answers through `fsync`, never here)
                Answer::Queued(_) => Reply::Unit,
            };
            let (p, h) = b.enc.reply(&reply);
            b.hdr.extend_from_slice(h);
            (p, 0)
        }
    }
}
