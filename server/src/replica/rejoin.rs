//! Rejoin (docs/redundancy.md, "Rejoin"): a server the map has down (it was dead, frozen
//! or cut off, and is back) catches up before it serves again.
//!
//! It asks to be *rejoining*: from then on the primaries of its replica sets send it their
//! copies (`forward`), which it keeps aside (metadata batches) or makes and notes (chunk
//! changes) while it copies. It drops its own records and chunk data of those sets, copies
//! the current ones from each set's primary (metadata by key range, then the data of the
//! set's chunks, at a bounded rate), applies the batches it kept, counts its directories' entries again, and
//! asks to be *up*. A primary serves the copy only once every request it admitted before
//! the rejoin's map epoch is over (those do not copy to the rejoining server), so nothing
//! falls between the copy and the copies.

use super::forward::Catching;
use super::map::{Change, State};
use crate::server::Server;
use madfs_proto::{Errno, FsResult};
use madfs_store::ChunkStore;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of metadata records per page of the copy.
const PAGE: u32 = 256 << 10;
/// Bytes of chunk data per read of the copy.
const PIECE: u64 = 256 << 10;

/// Starts the thread that watches this server's state in the map and catches it up (and
/// sweeps old replay records, `replay::sweep`).
/// `rate`: bytes per second the chunk copy may take (0: unbounded).
pub fn start(ops: Arc<Server>, stop: Arc<AtomicBool>, rate: u64) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("madfs-rejoin".into())
        .spawn(move || {
            let mut swept = Instant::now();
            while !stop.load(Relaxed) {
                if let Err(e) = step(&ops, rate) {
                    tracing::warn!("rejoin: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                }
                // (also this thread's: the old replay records of this server's own set)
                if swept.elapsed() >= super::replay::SWEEP_EVERY {
                    swept = Instant::now();
                    super::replay::sweep(&ops.meta, ops.replica.as_ref(), &ops.peers, ops.id);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            crate::peer::release_thread();
        })?;
    Ok(())
}

fn step(ops: &Server, rate: u64) -> Result<(), String> {
    let Some(rep) = &ops.replica else {
        return Ok(());
    };
    let Ok(node) = rep.node() else {
        return Ok(());
    };
    if !node.current() {
        return Ok(());
    }
    let map = node.map();
    match map.state(rep.me) {
        State::Up if map.building_of(rep.me).is_empty() => {
            rep.built.lock().unwrap_or_else(|e| e.into_inner()).clear();
            Ok(())
        }
        State::Up => {
            // a removal gave this server replica sets to copy (docs/redundancy.md,
            // "Removing a server"): the same copy as a rejoin's, of those sets alone
            let sets = map.building_of(rep.me);
            begin_sets(ops, &sets);
            let t = Instant::now();
            let (records, bytes) =
                catch_up(ops, map.epoch, rate, &sets, true).map_err(|e| e.to_string())?;
            let a = rep.propose(Change::Built(rep.me))?;
            ops.stats.resync_done();
            tracing::info!(
                "rebuild: copied replica sets {sets:?} in {:.1} s ({records} records, {bytes} bytes of chunks): a copy of them in map epoch {}",
                t.elapsed().as_secs_f64(),
                a.epoch
            );
            Ok(())
        }
        // (removed for good: it serves nothing and never rejoins)
        State::Removed => Ok(()),
        State::Down => {
            // keep what the primaries send from the moment they may send it
            begin(ops);
            let a = rep.propose(Change::Rejoining(rep.me))?;
            tracing::info!("rejoin: rejoining in map epoch {}", a.epoch);
            Ok(())
        }
        State::Rejoining => {
            begin(ops);
            let t = Instant::now();
            let sets = map.sets_of(rep.me, rep.r);
            let (records, bytes) =
                catch_up(ops, map.epoch, rate, &sets, false).map_err(|e| e.to_string())?;
            rep.caught_up_now(true);
            let a = rep
                .propose(Change::Up(rep.me))
                .inspect_err(|_| rep.caught_up_now(false))?;
            ops.stats.resync_done();
            tracing::info!(
                "rejoin: caught up in {:.1} s ({records} records, {bytes} bytes of chunks): up in map epoch {}",
                t.elapsed().as_secs_f64(),
                a.epoch
            );
            Ok(())
        }
    }
}

/// From now on copies sent to this server are kept aside (if they were not already).
fn begin(ops: &Server) {
    begin_sets(ops, &[]);
}

/// From now on copies of replica sets `sets` (empty: of every set) sent to this server
/// are kept aside (if they were not already).
fn begin_sets(ops: &Server, sets: &[u32]) {
    if let Some(rep) = &ops.replica {
        rep.keep_copies_of(sets);
    }
}

/// Copies replica sets `sets` (every one this server is a member of, or those a removal
/// gave it: `building`) from their primaries in map `epoch`; returns the records and chunk
/// bytes copied.
fn catch_up(
    ops: &Server,
    epoch: u64,
    rate: u64,
    sets: &[u32],
    building: bool,
) -> FsResult<(u64, u64)> {
    let rep = ops.replica.as_ref().ok_or(Errno::EINVAL)?;
    let sets = sets.to_vec();
    let dropped = ops.meta.drop_sets(&ops.peers.layout(), &sets)?;
    tracing::info!("rejoin: copying replica sets {sets:?} (dropped {dropped} stale records)");
    ops.stats.resync_progress(0, 0);
    let mut records = 0u64;
    for &set in &sets {
        let mut after: Vec<u8> = vec![];
        loop {
            let (page, next) = ops.peers.resync_page(set, epoch, &after, PAGE, false, 0)?;
            let view: Vec<(&[u8], &[u8])> = page
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            ops.meta.put_records(&view)?;
            records += page.len() as u64;
            ops.stats.resync_progress(records, 0);
            match next {
                Some(k) => after = k,
                None => break,
            }
        }
    }
    let wiped = wipe(ops, &sets)?;
    tracing::info!("rejoin: dropped {wiped} bytes of stale chunk data");
    let mut bytes = 0u64;
    let started = Instant::now();
    for &set in &sets {
        // the cursor: a file id and a byte position in it (a page may end inside a file)
        let mut after: Vec<u8> = vec![];
        loop {
            let (files, next) = ops.peers.resync_page(set, epoch, &after, 0, true, 0)?;
            for (id, ext) in files {
                let id = u64::from_le_bytes(
                    id.get(..8)
                        .ok_or(Errno::EPROTO)?
                        .try_into()
                        .unwrap_or_default(),
                );
                for e in ext.chunks_exact(16) {
                    let pos = u64::from_le_bytes(e[..8].try_into().unwrap_or_default());
                    let len = u64::from_le_bytes(e[8..].try_into().unwrap_or_default());
                    let mut at = pos;
                    while at < pos + len {
                        let want = PIECE.min(pos + len - at);
                        let data = ops.peers.resync_read(set, id, at, want as u32)?;
                        if data.is_empty() {
                            break;
                        }
                        copy_piece(ops, id, at, &data)?;
                        at += data.len() as u64;
                        bytes += data.len() as u64;
                        ops.stats.resync_progress(records, bytes);
                        throttle(started, bytes, rate);
                    }
                }
            }
            match next {
                Some(k) if k.len() == 16 => after = k,
                Some(_) => return Err(Errno::EPROTO),
                None => break,
            }
        }
    }
    // the batches kept meanwhile, in order, then the entry counts; from then on copies are
    // applied as they come
    let mut c = rep.catching.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(kept) = c.take() {
        for (b, synced) in kept.batches {
            ops.meta.apply_batch(&b, synced)?;
        }
    }
    if building {
        *rep.built.lock().unwrap_or_else(|e| e.into_inner()) = sets.clone();
    }
    ops.meta.recount()?;
    ops.meta.forget_id_blocks();
    drop(c);
    // directories made while this server was away (ancestor checks): from every set again
    ops.learn_dirs();
    Ok((records, bytes))
}

/// Punches out this server's chunk data of replica sets `sets` (what the copy replaces: data
/// cut, punched or removed while this server was away must not outlive the copy), leaving
/// what copies sent meanwhile wrote; returns the bytes dropped.
fn wipe(ops: &Server, sets: &[u32]) -> FsResult<u64> {
    let rep = ops.replica.as_ref().ok_or(Errno::EINVAL)?;
    let (lay, cs) = (&ops.peers.layout(), ops.chunk_size as u64);
    let mut wiped = 0;
    for (id, _) in ops.chunks.ids()? {
        let c = rep.catching.lock().unwrap_or_else(|e| e.into_inner());
        let mut ranges = vec![];
        for (p, l) in ops.chunks.extents(id)? {
            ranges.extend(super::of_sets(id, p, p + l, cs, lay, sets));
        }
        for (a, b) in untouched(c.as_ref(), id, ranges) {
            ops.chunks.punch(id, a, b - a)?;
            wiped += b - a;
        }
    }
    Ok(wiped)
}

/// Writes a copied piece of file `id` at `pos`, leaving out what copies sent meanwhile
/// changed ([`untouched`]).
fn copy_piece(ops: &Server, id: u64, pos: u64, data: &[u8]) -> FsResult<()> {
    let rep = ops.replica.as_ref().ok_or(Errno::EINVAL)?;
    let c = rep.catching.lock().unwrap_or_else(|e| e.into_inner());
    let keep = untouched(c.as_ref(), id, vec![(pos, pos + data.len() as u64)]);
    for (a, b) in keep {
        let s = (a - pos) as usize;
        let e = (b - pos) as usize;
        ops.chunks.write_copied(id, a, &data[s..e])?;
    }
    Ok(())
}

/// The parts of `ranges` of file `id` that no copy sent meanwhile changed (written,
/// punched, cut or removed: those are newer than the copy).
fn untouched(c: Option<&Catching>, id: u64, mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let Some(t) = c.and_then(|c| c.touched.get(&id)) else {
        return ranges;
    };
    if t.removed {
        return vec![];
    }
    if let Some(cut) = t.cut {
        ranges = cut_ranges(ranges, cut, u64::MAX);
    }
    for (p, l) in &t.ranges {
        ranges = cut_ranges(ranges, *p, p + l);
    }
    ranges
}

/// `ranges` without `[from, to)`.
fn cut_ranges(ranges: Vec<(u64, u64)>, from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut out = vec![];
    for (a, b) in ranges {
        if to <= a || from >= b {
            out.push((a, b));
            continue;
        }
        if a < from {
            out.push((a, from));
        }
        if to < b {
            out.push((to, b));
        }
    }
    out
}

/// Sleeps so that `bytes` copied since `started` stay within `rate` bytes per second.
pub(crate) fn throttle(started: Instant, bytes: u64, rate: u64) {
    if rate == 0 {
        return;
    }
    let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
    if let Some(wait) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(wait);
    }
}

#[cfg(test)]
mod tests {
    use super::cut_ranges;

    #[test]
    fn a_copy_leaves_out_what_was_sent_meanwhile() {
        let r = vec![(0, 100)];
        assert_eq!(cut_ranges(r.clone(), 10, 20), [(0, 10), (20, 100)]);
        assert_eq!(cut_ranges(r.clone(), 0, 100), []);
        assert_eq!(cut_ranges(r.clone(), 50, u64::MAX), [(0, 50)]);
        assert_eq!(cut_ranges(r.clone(), 100, 200), [(0, 100)]);
        assert_eq!(
            cut_ranges(vec![(0, 10), (20, 30)], 5, 25),
            [(0, 5), (25, 30)]
        );
    }
}
