//! Entries: what makes, finds and removes a name (`stat`, `open(O_CREAT)`, `mkdir`,
//! `mknod`, `symlink`, `unlink`, `rmdir`). A new entry belongs to the connection's user, with
//! the group a set-group-ID directory gives (`crate::authorize::init_owner`); whatever a
//! request says of its owner is never read.
//!
//! `rmdir` against concurrent creates (docs/consistency.md, "rmdir"): a directory's entries
//! are spread over every server, so its server first **seals** it on every server (`Seal`,
//! answered with whether that server holds entries in it), then removes it and tells every
//! server it is gone, or unseals it (ENOTEMPTY). A create in a sealed directory waits
//! (EAGAIN, the client retries) and one in a directory the server's table knows was removed
//! is ENOENT; the seal and a create's check-and-insert exclude each other, so a create racing
//! an rmdir of its parent either lands before the seal (and the rmdir says ENOTEMPTY) or
//! after the removal (ENOENT): never an entry in a removed directory.

use super::Call;
use crate::clock::now_ns;
use crate::server::{not_root, path_ok, Answer, Server};
use crate::who::Who;
use madfs_placement::split_parent;
use madfs_proto::{Attr, Errno, FsResult, Reply, Request, S_IFDIR, S_IFMT, S_IFREG};
use madfs_store::rocks::Change;
use madfs_store::{is_stub, Created, MetadataStore};

impl Server {
    /// Attributes of a new entry at `path` (a fresh id of its slot, all times now).
    pub(crate) fn new_attr(
        &self,
        path: &str,
        mode: u32,
        nlink: u32,
        uid: u32,
        gid: u32,
        size: u64,
    ) -> FsResult<Attr> {
        let now = now_ns();
        Ok(Attr {
            id: self.meta.next_id(madfs_placement::path_slot(path))?,
            mode,
            nlink,
            uid,
            gid,
            size,
            chunk_size: self.chunk_size,
            rdev: 0,
            atime: now,
            mtime: now,
            ctime: now,
        })
    }

    /// A new entry `a` at `path` with inline data `data` (a symlink's target, or nothing):
    /// inserted unless its directory is sealed or gone, its parent's times touched.
    fn add_entry(&self, path: &str, a: Attr, data: &[u8]) -> FsResult<Answer> {
        crate::replica::replay::note(crate::replica::replay::Note::Created(a));
        self.creating(path, || self.meta.insert(path, &a, data))?;
        self.parent_changed(path, a.ctime);
        Ok(Answer::Created {
            attr: a,
            existed: false,
            old_size: 0,
            cap: Default::default(),
        })
    }

    /// Who owns a new entry of mode `mode` at `path` made by `who`, and its mode: the
    /// connection's user, and the group (and S_ISGID) a set-group-ID directory gives.
    fn new_owner(&self, who: &Who, path: &str, mode: u32) -> (u32, (u32, u32)) {
        let parent = split_parent(path).and_then(|(p, _)| self.dirs.get(p));
        (
            who.uid,
            crate::authorize::init_owner(who, parent.as_ref(), mode),
        )
    }
}

impl Server {
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
        let busy = self.has_children(dir);
        if !matches!(busy, Ok(false)) {
            sealed.remove(dir);
        }
        busy.map(Answer::Bool)
    }

    /// `Rmdir` of `path` (this server's directory).
    pub fn rmdir(&self, path: &str) -> FsResult<Answer> {
        not_root(path, Errno::EBUSY)?;
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
            // every server learns it is gone (creates in it are ENOENT from then on; one that
            // missed it learns it when it starts: the removal itself is done)
            let _ = self.dir_changed(path, None);
        }
        unseal(&others);
        removed.map(|_| Answer::Attr(a))
    }
}

pub(crate) fn stat(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Stat(path) = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(path)?;
    s.get(path).map(Answer::Attr)
}

/// `Look`: a stat whose answer the client may keep, under a lease of its process
/// (`crate::state::leases`): the entry, or its absence from a directory (the pipeline
/// checked that the parent is one). A file with several names gets none: its attributes are
/// kept by id, and other servers' names of it change them.
pub(crate) fn look(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Look(path) = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(path)?;
    match s.get(path) {
        Ok(a) => {
            let several = a.mode & S_IFMT != S_IFDIR && a.nlink > 1;
            let ms = if several {
                0
            } else {
                s.leases.grant(path, c.lease_holder())
            };
            Ok(Answer::Looked(Some(a), ms))
        }
        // no such name in a directory (root's requests skip the ancestors' checks: an
        // ancestor that is no directory is the client's to tell, ENOTDIR, as for `Stat`)
        Err(Errno::ENOENT) if split_parent(path).is_some_and(|(d, _)| s.dirs.get(d).is_some()) => {
            Ok(Answer::Looked(None, s.leases.grant(path, c.lease_holder())))
        }
        Err(e) => Err(e),
    }
}

pub(crate) fn create(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Create {
        path,
        mode,
        excl,
        trunc,
        holder,
        ..
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    not_root(path, Errno::EISDIR)?;
    let (uid, (mode, gid)) = s.new_owner(c.who, path, S_IFREG | (mode & 0o7777));
    // the entry and its open reference together (see `Open`)
    let _n = (holder != 0).then(|| s.opens.name_lock(path));
    // only a new entry needs room (opening an existing file never)
    let make = &mut || {
        s.chunks.admit_entry()?;
        s.new_attr(path, mode, 1, uid, gid, 0)
    };
    // O_EXCL: the insert itself answers EEXIST; else one lookup under the
    // path's lock finds the entry or creates it
    let found = s.creating(path, || {
        if excl {
            let a = make()?;
            crate::replica::replay::note(crate::replica::replay::Note::Created(a));
            s.meta.insert(path, &a, &[])?;
            Ok(Created::New(a))
        } else {
            s.meta.get_or_insert(path, make)
        }
    })?;
    let found = match found {
        Created::Existed(a) => Created::Existed(s.resolved(a)?),
        f => f,
    };
    let (Created::New(a) | Created::Existed(a)) = &found;
    s.opened(c.who.uid, holder, a)?;
    match found {
        Created::New(attr) => {
            s.parent_changed(path, attr.ctime);
            Ok(Answer::Created {
                attr,
                existed: false,
                old_size: 0,
                cap: Default::default(),
            })
        }
        Created::Existed(a) if a.is_dir() => Err(Errno::EISDIR),
        // a link: the client follows it (never truncate its target string); a
        // special file has no data to truncate (the kernel ignores O_TRUNC there)
        Created::Existed(a) if a.is_link() || a.is_special() => Ok(Answer::Created {
            attr: a,
            existed: true,
            old_size: a.size,
            cap: Default::default(),
        }),
        Created::Existed(mut a) => {
            let old_size = a.size;
            if trunc && a.size > 0 {
                let ch = Change::Size {
                    size: 0,
                    time: now_ns(),
                };
                ch.apply(&mut a);
                s.meta.truncate_inline(a.id, 0)?;
                s.drop_local_chunks(a.id, 0)?;
                s.change_file(path, a.id, ch)?;
            }
            Ok(Answer::Created {
                attr: a,
                existed: true,
                old_size,
                cap: Default::default(),
            })
        }
    }
}

pub(crate) fn symlink(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Symlink { path, target, .. } = *req else {
        return Err(Errno::EINVAL);
    };
    not_root(path, Errno::EEXIST)?;
    s.chunks.admit_entry()?;
    if target.is_empty() {
        return Err(Errno::ENOENT);
    }
    if target.len() >= libc::PATH_MAX as usize {
        return Err(Errno::ENAMETOOLONG);
    }
    let (uid, (mode, gid)) = s.new_owner(c.who, path, libc::S_IFLNK | 0o777);
    let a = s.new_attr(path, mode, 1, uid, gid, target.len() as u64)?;
    // entry and target in one batch
    s.add_entry(path, a, target.as_bytes())
}

pub(crate) fn mknod(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Mknod {
        path, mode, rdev, ..
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    not_root(path, Errno::EEXIST)?;
    if !madfs_proto::is_special(mode) {
        return Err(Errno::EINVAL);
    }
    s.chunks.admit_entry()?;
    let dev = matches!(mode & libc::S_IFMT, libc::S_IFCHR | libc::S_IFBLK);
    let (uid, (mode, gid)) = s.new_owner(c.who, path, mode & (libc::S_IFMT | 0o7777));
    let a = Attr {
        rdev: if dev { rdev } else { 0 },
        ..s.new_attr(path, mode, 1, uid, gid, 0)?
    };
    s.add_entry(path, a, &[])
}

pub(crate) fn mkdir(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Mkdir { path, mode, .. } = *req else {
        return Err(Errno::EINVAL);
    };
    not_root(path, Errno::EEXIST)?;
    s.chunks.admit_entry()?;
    let (uid, (mode, gid)) = s.new_owner(c.who, path, S_IFDIR | (mode & 0o7777));
    let a = s.new_attr(path, mode, 2, uid, gid, 0)?;
    crate::replica::replay::note(crate::replica::replay::Note::Attr(a));
    s.creating(path, || s.meta.insert(path, &a, &[]))?;
    s.parent_changed(path, a.ctime);
    s.dir_changed(path, Some(&a))?;
    Ok(Answer::Attr(a))
}

pub(crate) fn unlink(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Unlink { path } = *req else {
        return Err(Errno::EINVAL);
    };
    not_root(path, Errno::EISDIR)?;
    let _n = s.opens.name_lock(path);
    let raw = s.meta.get(path)?.ok_or(Errno::ENOENT)?;
    if raw.is_dir() {
        return Err(Errno::EISDIR);
    }
    if is_stub(&raw) {
        let a = s.unlink_stub(path, &raw)?;
        s.parent_changed(path, now_ns());
        return Ok(Answer::Attr(a));
    }
    let a = raw;
    crate::replica::replay::note(crate::replica::replay::Note::Attr(a));
    s.unlink_file(path, &a)?;
    s.parent_changed(path, now_ns());
    Ok(Answer::Attr(a))
}

/// `Readlink`: the target of the symbolic link at `path` (or, from another server, of link
/// `id`, whose target this server keeps: its home).
pub(crate) fn readlink(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Readlink { path, id } = *req else {
        return Err(Errno::EINVAL);
    };
    let (id, len) = if path.is_empty() {
        (id, libc::PATH_MAX as usize)
    } else {
        path_ok(path)?;
        let a = s.get(path)?;
        if !a.is_link() {
            return Err(Errno::EINVAL);
        }
        let home = madfs_placement::home_server(a.id, &s.peers.layout());
        if home != s.here() {
            // its target stayed with its home server when its entry moved here
            let req = Request::Readlink { path: "", id: a.id };
            let take = |r: Reply<'_>| match r {
                Reply::Named(t) => Ok(t.to_owned()),
                _ => Err(Errno::EPROTO),
            };
            return s
                .peers
                .call_with(home, &req, &[], 8192, take)
                .map(Answer::Named);
        }
        (a.id, a.size as usize)
    };
    let mut target = vec![0u8; len.min(libc::PATH_MAX as usize)];
    let n = s.read_chunk0(id, 0, &mut target)?;
    target.truncate(n);
    String::from_utf8(target)
        .map(Answer::Named)
        .map_err(|_| Errno::EIO)
}

pub(crate) fn rmdir(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Rmdir { path } = *req else {
        return Err(Errno::EINVAL);
    };
    s.rmdir(path)
}

pub(crate) fn seal(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Seal { dir, sealed } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(dir)?;
    s.seal(dir, sealed)
}

#[cfg(test)]
mod tests {
    use crate::fixture::{new_file, server};
    use crate::server::Answer;
    use madfs_proto::{Errno, Request};

    #[test]
    fn readlink_answers_a_links_target_and_einval_for_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        let link = Request::Symlink {
            path: "/l",
            target: "some/where",
            uid: 0,
            gid: 0,
        };
        s.execute(&link).unwrap();
        s.execute(&new_file("/f")).unwrap();
        let of = |path| s.execute(&Request::Readlink { path, id: 0 });
        assert!(matches!(of("/l"), Ok(Answer::Named(t)) if t == "some/where"));
        assert_eq!(of("/f").err(), Some(Errno::EINVAL));
        assert_eq!(of("/none").err(), Some(Errno::ENOENT));
    }
}
