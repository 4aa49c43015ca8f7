//! Slot moves (docs/architecture.md, "Membership changes"): an unreplicated cluster's
//! servers move slots towards the target layout the cluster map names (`madfs-ctl drain`).
//!
//! A slot's owner moves its slots a batch at a time, each batch to one server
//! ([`source`]): it stops granting leases and calls back every lease it holds, freezes the
//! batch's slots (requests for their keys wait: `EAGAIN`) once no request admitted before
//! is in flight in them, copies their metadata records and chunk data to the new owner,
//! proposes the switch to the map, and unfreezes once it applied it (requests then find the
//! slots moved: `EREMCHG`, and the client learns the layout). A while later it drops what it
//! copied. The receiver ([`target`]) takes the pages, grants no lease from the first page
//! until it applied the switch, and drops a copy that is never switched.
//!
//! Until then both hold records of slots they do not own (`crate::state::strays`): their
//! listings leave those out. A kill anywhere leaves the map naming the old owner (the copy is
//! made again, from the start) or the new one (the old owner drops what it kept when it
//! starts again: a marker in its store says it may hold records of slots not its own).

pub mod source;
pub mod target;

use crate::server::Server;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The marker (a store key) of a server that may hold records of slots it does not own.
const STRAYS: &str = "strays";

/// A copy received and not switched for this long is given up (its sender died, or moved
/// on to other slots).
const GIVE_UP: Duration = Duration::from_secs(30);

/// How long after a switch the old owner keeps what it copied: a read admitted before the
/// freeze and answered from a mapping of the chunk file, or a client reading the chunk file
/// itself with the layout before, finishes first.
const CLEAN_AFTER: Duration = Duration::from_secs(2);

/// What a server's mover must do later: drop the records and chunk data of `slots` (none:
/// of every slot it does not own) once `due`.
struct Cleaning {
    due: Instant,
    slots: Option<Vec<u16>>,
}

/// Starts the thread that moves this server's slots and cleans up after moves; `rt` runs
/// the proposals to the map.
pub fn start(
    ops: Arc<Server>,
    stop: Arc<AtomicBool>,
    rt: tokio::runtime::Handle,
    settings: crate::replica::Settings,
) -> std::io::Result<()> {
    let mut cleanings = vec![];
    ops.strays.set_rate(settings.move_rate);
    if ops.meta.marker(STRAYS).unwrap_or(true) {
        ops.strays.mark(true);
        // a move or a cleaning was under way when this server stopped
        ops.strays.begin();
        cleanings.push(Cleaning {
            due: Instant::now(),
            slots: None,
        });
    }
    std::thread::Builder::new()
        .name("madfs-migrate".into())
        .spawn(move || {
            while !stop.load(Relaxed) {
                match step(&ops, &rt, &settings, &mut cleanings) {
                    // the receiver takes another server's batch: this one's turn comes soon
                    Ok(Next::Soon) => std::thread::sleep(Duration::from_millis(10)),
                    Ok(Next::Later) => std::thread::sleep(Duration::from_millis(100)),
                    Err(e) => {
                        tracing::warn!("slot move: {e}");
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
            crate::peer::release_thread();
        })?;
    Ok(())
}

/// When the mover's next step is due.
enum Next {
    Soon,
    Later,
}

fn step(
    ops: &Server,
    rt: &tokio::runtime::Handle,
    settings: &crate::replica::Settings,
    cleanings: &mut Vec<Cleaning>,
) -> Result<Next, String> {
    let Some(node) = ops.node.get() else {
        return Ok(Next::Later);
    };
    if !node.ready() {
        return Ok(Next::Later);
    }
    let map = node.map();
    let layout = map.layout();
    // a move received: over once switched, or given up
    if let Some(inc) = ops.strays.incoming() {
        if inc.slots.iter().all(|s| layout.owner(*s as u32) == ops.id) {
            target::switched(ops);
        } else if inc.last.elapsed() >= GIVE_UP {
            tracing::warn!(
                "slot move: the copy of {} slot(s) from server {} was never switched: dropped",
                inc.slots.len(),
                inc.from
            );
            target::give_up(ops).map_err(|e| e.to_string())?;
        }
    }
    // what was copied away, a while after the switch
    let now = Instant::now();
    let mut i = 0;
    while i < cleanings.len() {
        if cleanings[i].due <= now {
            let c = cleanings.remove(i);
            let dropped = match &c.slots {
                Some(slots) => {
                    let mut mine = vec![false; madfs_placement::SLOTS as usize];
                    slots.iter().for_each(|s| mine[*s as usize] = true);
                    source::clean(ops, &|s| mine[s as usize] && layout.owner(s) != ops.id)
                }
                None => source::clean(ops, &|s| layout.owner(s) != ops.id),
            }
            .map_err(|e| e.to_string())?;
            ops.strays.settled();
            if dropped.0 + dropped.1 > 0 {
                tracing::info!(
                    "slot move: dropped {} record(s) and {} byte(s) of chunks of slots moved away",
                    dropped.0,
                    dropped.1
                );
            }
        } else {
            i += 1;
        }
    }
    if !ops.strays.any() && cleanings.is_empty() && ops.strays.mark(false) {
        ops.meta
            .set_marker(STRAYS, false)
            .map_err(|e| e.to_string())?;
    }
    // the next batch of this server's slots the target layout gives another server
    if let Some((to, slots)) = map.next_moves(ops.id, settings.move_batch) {
        if ops.strays.mark(true) {
            ops.meta
                .set_marker(STRAYS, true)
                .map_err(|e| e.to_string())?;
        }
        let Some(moved) = source::move_batch(ops, node, rt, to, &slots)? else {
            // (server `to` receives another server's move: this one's turn comes)
            return Ok(Next::Soon);
        };
        ops.stats.moved_slots.fetch_add(moved.slots as u64, Relaxed);
        ops.stats.moved_records.fetch_add(moved.records, Relaxed);
        ops.stats.moved_bytes.fetch_add(moved.bytes, Relaxed);
        cleanings.push(Cleaning {
            due: Instant::now() + CLEAN_AFTER,
            slots: Some(slots),
        });
        tracing::info!(
            "slot move: {} slot(s) to server {to} ({} records, {} bytes of chunks, frozen {:.0} ms)",
            moved.slots,
            moved.records,
            moved.bytes,
            moved.frozen.as_secs_f64() * 1e3
        );
        // (a pause between batches: requests that waited for the frozen slots, and clients
        // learning the switch, go first; a move without it made p99 latencies of clients
        // 10 to 1,000 times their idle ones, `madfs-bench move`)
        return Ok(Next::Later);
    }
    Ok(Next::Later)
}
