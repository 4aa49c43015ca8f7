//! A slot move's sending side: freeze, copy, switch ([`move_batch`]), and the cleaning of
//! what was copied ([`clean`]). See [`crate::migrate`].

use crate::replica::Node;
use crate::server::Server;
use madfs_placement::{chunk_ranges, slot_of_chunk, SLOTS};
use madfs_proto::{Errno, FsResult, Request};
use madfs_store::ChunkStore;
use std::time::{Duration, Instant};

/// Bytes of metadata records per page of the copy.
const PAGE: usize = 256 << 10;
/// Bytes of chunk data per request of the copy.
const PIECE: u64 = 256 << 10;
/// Longest wait for requests admitted before a freeze, and for the switch to be applied.
const WAIT: Duration = Duration::from_secs(10);

/// What one batch moved.
pub struct Moved {
    pub slots: usize,
    pub records: u64,
    pub bytes: u64,
    /// How long its slots were frozen.
    pub frozen: Duration,
}

/// The pause of this server's leases for a move, ended when dropped.
struct Paused<'a>(&'a Server);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.leases.resume();
    }
}

/// Moves `slots` (this server's) to server `to`: see [`crate::migrate`]. `None`: `to`
/// receives another server's move now (this one waits its turn). When it fails, nothing
/// changed here: the slots are this server's still, and unfrozen.
pub fn move_batch(
    ops: &Server,
    node: &Node,
    rt: &tokio::runtime::Handle,
    to: u32,
    slots: &[u16],
) -> Result<Option<Moved>, String> {
    let slot_bytes: Vec<u8> = slots.iter().flat_map(|s| s.to_le_bytes()).collect();
    // the first page, empty, before anything is paused or frozen: the receiver takes one
    // move at a time (`EBUSY` while it takes another server's) and drops what an earlier
    // try of this one left
    let claim = Request::MoveIn {
        from: ops.id,
        slots: &slot_bytes,
        first: true,
        ids: ops.meta.id_mark(),
        epoch: node.map().epoch,
        records: vec![],
    };
    match ops.peers.call(to, &claim, &[]) {
        Ok(_) => {}
        // (busy with another server's move, or behind this server's map)
        Err(Errno::EBUSY | Errno::EAGAIN) => return Ok(None),
        Err(e) => return Err(format!("the move's first page to server {to}: {e}")),
    }
    ops.strays.begin();
    let r = (|| {
        let mut moving = vec![false; SLOTS as usize];
        slots.iter().for_each(|s| moving[*s as usize] = true);
        let pred = |s: u32| moving[s as usize];
        // no lease of this server may outlive the switch: none granted from now, every one
        // held called back
        let revocation = ops.leases.pause();
        let _paused = Paused(ops);
        if let Some(mut r) = revocation {
            r.wait();
        }
        let freeze = ops
            .frozen
            .freeze(slots, WAIT)
            .ok_or("requests stayed in flight in the slots to move")?;
        let frozen_at = Instant::now();
        let err = |what: &str, e: Errno| format!("{what} to server {to}: {e}");
        // the records, and the id mark as it is now that the slots are frozen
        let mut after: Vec<u8> = vec![];
        let mut records = 0u64;
        loop {
            let (page, next) = ops
                .meta
                .records_of_slots(&pred, &after, PAGE)
                .map_err(|e| err("records", e))?;
            let req = Request::MoveIn {
                from: ops.id,
                slots: &slot_bytes,
                first: false,
                ids: ops.meta.id_mark(),
                epoch: 0,
                records: page
                    .iter()
                    .map(|(k, v)| {
                        (
                            serde_bytes::Bytes::new(k.as_slice()),
                            serde_bytes::Bytes::new(v.as_slice()),
                        )
                    })
                    .collect(),
            };
            ops.peers
                .call(to, &req, &[])
                .map_err(|e| err("records", e))?;
            records += page.len() as u64;
            match next {
                Some(k) => after = k,
                None => break,
            }
        }
        // the chunk data, read with its checksums checked
        // (at full speed: the slots are frozen; the receiver throttles, between moves,
        // `Strays::may_begin`)
        let cs = ops.chunk_size as u64;
        let mut bytes = 0u64;
        let ids = ops.chunks.ids().map_err(|e| format!("chunk files: {e}"))?;
        let mut buf = vec![0u8; PIECE as usize];
        for (id, _) in ids {
            let extents = ops.chunks.extents(id).map_err(|e| err("chunks", e))?;
            for (p, l) in extents {
                for (a, b) in chunk_ranges(p, p + l, cs, |c| pred(slot_of_chunk(id, c))) {
                    let mut at = a;
                    while at < b {
                        let want = PIECE.min(b - at) as usize;
                        let n = ops
                            .chunks
                            .read(id, at, &mut buf[..want])
                            .map_err(|e| err("chunks", e))?;
                        if n == 0 {
                            break;
                        }
                        let req = Request::MoveData {
                            from: ops.id,
                            id,
                            pos: at,
                        };
                        ops.peers
                            .call(to, &req, &buf[..n])
                            .map_err(|e| err("chunks", e))?;
                        at += n as u64;
                        bytes += n as u64;
                    }
                }
            }
        }
        // the switch, applied here before the slots are let go (their requests then find them
        // moved)
        let proposed = rt.block_on(node.propose_switch(slots.to_vec(), to));
        let until = Instant::now() + WAIT;
        loop {
            let l = node.map().layout();
            if slots.iter().all(|s| l.owner(*s as u32) == to) {
                break;
            }
            if Instant::now() >= until {
                return Err(format!(
                    "the switch of {} slot(s) to server {to} was not applied here ({proposed:?})",
                    slots.len()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let frozen = frozen_at.elapsed();
        drop(freeze);
        Ok(Some(Moved {
            slots: slots.len(),
            records,
            bytes,
            frozen,
        }))
    })();
    if r.is_err() {
        ops.strays.settled();
    }
    r
}

/// Drops the records and the chunk data of the slots `gone` says yes to (moved away):
/// the records and bytes dropped.
pub fn clean(ops: &Server, gone: &dyn Fn(u32) -> bool) -> FsResult<(u64, u64)> {
    let records = ops.meta.drop_slots(gone)?;
    let cs = ops.chunk_size as u64;
    let mut bytes = 0;
    for (id, _) in ops.chunks.ids()? {
        for (p, l) in ops.chunks.extents(id)? {
            for (a, b) in chunk_ranges(p, p + l, cs, |c| gone(slot_of_chunk(id, c))) {
                ops.chunks.punch(id, a, b - a)?;
                bytes += b - a;
            }
        }
    }
    Ok((records, bytes))
}
