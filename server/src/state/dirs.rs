//! Every directory's mode and owner, on every server (ShardFS's idea: directories are few and
//! change rarely): a path's ancestors live on other servers, and checking search permission
//! on them is a few hash lookups here instead of round trips. The directories' servers keep it
//! current (`handlers::directories`): a change is sent to every server before it is
//! answered, and a starting server learns the table from every peer before it checks anyone
//! but root. An update never overwrites a newer one (its version is the directory's ctime).

use madfs_proto::Attr;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::RwLock;

/// What the table keeps of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirPerm {
    /// Permission bits (with the sticky bit).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// ctime at the directory's server: an update with an older one is stale.
    pub version: i64,
}

impl DirPerm {
    /// From a directory's attributes.
    pub fn of(a: &Attr) -> DirPerm {
        DirPerm {
            mode: a.mode & 0o7777,
            uid: a.uid,
            gid: a.gid,
            version: a.ctime,
        }
    }
}

/// Every directory of the cluster (see the module documentation). Removed directories stay
/// as tombstones (`None`) so that a late, older update cannot bring them back.
#[derive(Default)]
pub struct DirTable {
    map: RwLock<HashMap<String, (Option<DirPerm>, i64)>>,
    ready: AtomicBool,
}

impl DirTable {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, (Option<DirPerm>, i64)>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory at `path` (the root is always there: as learnt, else [`ROOT`] until
    /// the server sets its cluster's default).
    pub fn get(&self, path: &str) -> Option<DirPerm> {
        let m = self.read();
        match m.get(path) {
            Some((p, _)) => *p,
            None if path == "/" => Some(ROOT),
            None => None,
        }
    }

    /// Applies an update: `Some` (made or changed) or `None` (gone), unless the table holds
    /// a newer one.
    pub fn apply(&self, path: &str, perm: Option<DirPerm>, version: i64) {
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        match m.get(path) {
            Some((_, v)) if *v > version => {}
            _ => {
                m.insert(path.to_owned(), (perm, version));
            }
        }
    }

    /// Is `path` known to be a removed directory (a tombstone: its server said it is gone)?
    /// (Unknown is not removed: the table is kept best-effort.)
    pub fn removed(&self, path: &str) -> bool {
        path != "/" && matches!(self.read().get(path), Some((None, _)))
    }

    /// Has the table been learnt from every server (or given up waiting for the missing)?
    pub fn ready(&self) -> bool {
        self.ready.load(Relaxed)
    }

    /// The table is learnt (or the missing servers given up on for now).
    pub fn set_ready(&self) {
        self.ready.store(true, Relaxed);
    }

    /// Number of live directories (tests, logs).
    pub fn len(&self) -> usize {
        self.read().values().filter(|(p, _)| p.is_some()).count()
    }

    /// Is the table empty?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The root directory before the server set its cluster's default (`crate::server::root_attr`).
const ROOT: DirPerm = DirPerm {
    mode: 0o755,
    uid: 0,
    gid: 0,
    version: 0,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_updates_win_and_tombstones_stay() {
        let t = DirTable::default();
        let p = |mode, version| DirPerm {
            mode,
            uid: 1,
            gid: 1,
            version,
        };
        t.apply("/a", Some(p(0o755, 10)), 10);
        t.apply("/a", Some(p(0o700, 5)), 5); // stale
        assert_eq!(t.get("/a").unwrap().mode, 0o755);
        t.apply("/a", None, 20);
        t.apply("/a", Some(p(0o755, 10)), 10); // a late page of a table being learnt
        assert_eq!(t.get("/a"), None);
        t.apply("/a", Some(p(0o711, 30)), 30); // made again
        assert_eq!(t.get("/a").unwrap().mode, 0o711);
        assert_eq!(t.get("/").unwrap().mode, 0o755);
        t.apply("/", Some(p(0o1777, 0)), 0);
        assert_eq!(t.get("/").unwrap().mode, 0o1777);
    }
}
