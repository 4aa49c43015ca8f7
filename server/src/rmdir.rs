//! `rmdir` against concurrent creates (docs/consistency.md, "rmdir"): a directory's entries
//! are spread over every server, so its server first **seals** it on every server (`Seal`,
//! answered with whether that server holds entries in it), then removes it and tells every
//! server it is gone, or unseals it (ENOTEMPTY). A create in a sealed directory waits
//! (EAGAIN, the client retries) and one in a directory the server's table knows was removed
//! is ENOENT; the seal and a create's check-and-insert exclude each other, so a create racing
//! an rmdir of its parent either lands before the seal (and the rmdir says ENOTEMPTY) or
//! after the removal (ENOENT): never an entry in a removed directory.

use crate::ops::{now_ns, Answer, Ops};
use crate::store::MetadataStore;
use madfs_placement::split_parent;
use madfs_proto::{Errno, FsResult, Reply, Request};
use std::collections::HashSet;
use std::sync::RwLock;

/// Directories being removed on some server, sealed here.
#[derive(Default)]
pub struct Sealed {
    set: RwLock<HashSet<String>>,
}

impl Ops {
    /// Runs `make` (which adds the entry `path`) unless `path`'s directory is sealed (EAGAIN)
    /// or known to be gone (ENOENT); a seal waits for it.
    pub fn creating<T>(&self, path: &str, make: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
        let Some((dir, _)) = split_parent(path) else {
            return make();
        };
        let sealed = self.sealed.set.read().unwrap_or_else(|e| e.into_inner());
        if !sealed.is_empty() && sealed.contains(dir) {
            return Err(Errno::EAGAIN);
        }
        if self.dirs.removed(dir) {
            return Err(Errno::ENOENT);
        }
        make()
    }

    /// Forgets a seal of `dir` (a directory of that name exists again).
    pub fn unsealed(&self, dir: &str) {
        let sealed = self.sealed.set.read().unwrap_or_else(|e| e.into_inner());
        if sealed.is_empty() || !sealed.contains(dir) {
            return;
        }
        drop(sealed);
        let mut sealed = self.sealed.set.write().unwrap_or_else(|e| e.into_inner());
        sealed.remove(dir);
    }

    /// `Seal`: seals `dir` here and answers whether this server holds entries in it, or
    /// unseals it.
    pub fn seal(&self, dir: &str, seal: bool) -> FsResult<Answer> {
        let mut sealed = self.sealed.set.write().unwrap_or_else(|e| e.into_inner());
        if !seal {
            sealed.remove(dir);
            return Ok(Answer::Bool(false));
        }
        sealed.insert(dir.to_owned());
        let busy = self.meta.has_children(dir);
        if !matches!(busy, Ok(false)) {
            sealed.remove(dir);
        }
        busy.map(Answer::Bool)
    }

    /// `Rmdir` of `path` (this server's directory).
    pub fn rmdir(&self, path: &str) -> FsResult<Answer> {
        crate::ops::not_root(path, Errno::EBUSY)?;
        let a = self.get(path)?;
        if !a.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let others: Vec<u32> = (0..self.peers.servers())
            .filter(|s| *s != self.here())
            .collect();
        let unseal = |upto: &[u32]| {
            let _ = self.seal(path, false);
            let req = Request::Seal {
                dir: path,
                sealed: false,
            };
            for s in upto {
                if let Err(e) = self.peers.call(*s, &req, &[]) {
                    tracing::warn!("rmdir {path}: server {s} not unsealed ({e})");
                }
            }
        };
        match self.seal(path, true)? {
            Answer::Bool(false) => {}
            _ => {
                unseal(&[]);
                return Err(Errno::ENOTEMPTY);
            }
        }
        let req = Request::Seal {
            dir: path,
            sealed: true,
        };
        for (i, s) in others.iter().enumerate() {
            let r = match self.peers.call(*s, &req, &[]) {
                Ok(Reply::Bool(false)) => Ok(()),
                Ok(Reply::Bool(true)) => Err(Errno::ENOTEMPTY),
                Ok(_) => Err(Errno::EPROTO),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                unseal(&others[..=i]);
                return Err(e);
            }
        }
        crate::replica::replay::note(crate::replica::replay::Note::Attr(a));
        let removed = self.meta.remove(path, a.id, None);
        if removed.is_ok() {
            self.parent_changed(path, now_ns());
            // every server learns it is gone (creates in it are ENOENT from then on)
            self.dir_changed(path, None);
        }
        unseal(&others);
        removed.map(|_| Answer::Attr(a))
    }
}
