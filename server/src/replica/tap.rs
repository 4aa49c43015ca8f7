//! What replication sees of the stores: their tap (`madfs_store::Tap`), which hands every
//! write made while a replica set's request is served here to that set's copies
//! (`super::forward`), with the request's replay record (`super::replay`).

use madfs_proto::{FsResult, ReplOp};

/// The stores' tap on a replicated server (installed by `crate::run`): every write made while
/// a request of a replica set is served here goes to the set's secondaries, with the replay
/// record of the request being served in the same batch (`super::replay`).
pub struct Copies;

impl madfs_store::Tap for Copies {
    fn active(&self) -> bool {
        super::forward::active()
    }

    fn extra(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        super::replay::pending()
    }

    fn batch(&self, data: &[u8], synced: bool) -> FsResult<()> {
        super::forward::batch(data, synced)
    }

    fn chunk(&self, op: ReplOp, bulk: &[u8]) -> FsResult<()> {
        super::forward::chunk(op, bulk)
    }

    fn id_scope(&self) -> Option<(u32, u64)> {
        super::forward::serving_in()
    }
}
