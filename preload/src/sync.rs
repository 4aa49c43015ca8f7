//! Durability calls beyond a file's own `fsync` (docs/consistency.md, "Durability"):
//! `sync(2)` and `syncfs(2)` make everything the cluster acknowledged durable on every
//! server, after this process published the sizes it holds; an `fsync` of a directory makes
//! the entries' changes durable (a WAL sync on every server: a directory's entries are
//! spread over all of them).

use crate::conn;
use crate::fdtable;
use crate::hooks::{flush_all, zero};

type Ret = Option<isize>;

/// `sync`: the cluster's part first (this process's sizes, then every server's metadata
/// and chunk files), then the kernel's own (`None`: the host's file systems too). `sync`
/// cannot fail; a cluster that cannot be reached is left as it is.
pub fn sys_sync() -> Ret {
    if conn::configured() {
        flush_all();
        let _ = conn::with(|c| c.sync_all(true));
    }
    None
}

/// `syncfs` of a madfs descriptor: as `sync` for the cluster (EIO if a server cannot be
/// reached).
pub fn sys_syncfs(fd: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    flush_all();
    zero(conn::with(|c| c.sync_all(true)))
}

/// `fsync` of a madfs directory.
pub fn dir_fsync() -> Ret {
    zero(conn::with(|c| c.sync_all(false)))
}
