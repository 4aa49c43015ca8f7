//! The background sync path: fsync requests (own UCX tag) are handed to one thread per server
//! that group-commits — one WAL sync plus one fdatasync per dirty chunk file covers every
//! request that arrived while the previous batch was being made durable.

use crate::ops::Ops;
use crate::store::{ChunkStore, MetadataStore};
use madfs_proto::FsResult;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

/// One waiter: the file to make durable and where to say it is done.
pub type SyncJob = (u64, oneshot::Sender<FsResult<()>>);

/// Starts the sync thread; it ends when every sender is dropped. `group_commit: false` makes
/// one WAL sync per request (the baseline the benchmark compares against).
pub fn start(ops: Arc<Ops>, group_commit: bool) -> std::io::Result<mpsc::Sender<SyncJob>> {
    let (tx, rx) = mpsc::channel::<SyncJob>();
    std::thread::Builder::new()
        .name("madfs-sync".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut batch = vec![first];
                if group_commit {
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                }
                let ids: BTreeSet<u64> = batch.iter().map(|(id, _)| *id).collect();
                let mut result = ops.meta.sync();
                for id in ids {
                    if result.is_ok() {
                        result = ops.chunks.sync(id);
                    }
                }
                ops.stats.sync_batches.fetch_add(1, Relaxed);
                ops.stats
                    .sync_requests
                    .fetch_add(batch.len() as u64, Relaxed);
                for (_, done) in batch {
                    let _ = done.send(result);
                }
            }
        })?;
    Ok(tx)
}
