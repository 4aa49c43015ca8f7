//! Hard links (docs/consistency.md, "Hard links").
//!
//! A file with one name keeps its attributes in its entry: `stat` is one lookup. When it
//! gets a second name its attributes move to a record keyed by its id on its **home server**
//! (the one that keeps its chunk 0 and its open references, [`madfs_placement::home_server`];
//! the same `O<id>` record an open-unlinked file keeps, here with nlink ≥ 1), and every name
//! becomes a **stub**: an entry with the file's id and type and nlink 0
//! ([`crate::store::is_stub`]). A name's server answers lookups of a stub from the home
//! server, and sends changes of its attributes there ([`Request::Linked`]). Removing a name
//! counts one fewer at the home server; the last one forgets the file as an unlink does.
//!
//! Size publications of open descriptors (which name the file by path and id) find a stub
//! refused with ESTALE under the path's lock and go to the home server by id, as for a
//! renamed or unlinked file ([`crate::open`]).

use super::Call;
use crate::clock::now_ns;
use crate::server::{not_root, path_ok, Answer, Server};
use madfs_placement::{home_server, meta_server};
use madfs_proto::{Attr, Errno, FsResult, LinkOp, Reply, Request};
use madfs_store::rocks::Change;
use madfs_store::{is_stub, ChunkStore, MetadataStore};

impl Server {
    /// The attributes of the entry at `path` (not the root), a stub's from its home server,
    /// and whether it is a stub.
    pub(crate) fn lookup(&self, path: &str) -> FsResult<(Attr, bool)> {
        let a = self.meta.get(path)?.ok_or(Errno::ENOENT)?;
        if is_stub(&a) {
            return Ok((self.linked(a.id, LinkOp::Stat)?, true));
        }
        Ok((a, false))
    }

    /// A stub's attributes from its home server (anything else as it is).
    pub(crate) fn resolved(&self, a: Attr) -> FsResult<Attr> {
        if is_stub(&a) {
            return self.linked(a.id, LinkOp::Stat);
        }
        Ok(a)
    }

    /// `op` on the attributes of file `id` at its home server (here, or a call).
    pub(crate) fn linked(&self, id: u64, op: LinkOp) -> FsResult<Attr> {
        let home = home_server(id, &self.peers.layout());
        if home == self.here() {
            return self.linked_here(id, op);
        }
        match self.peers.call(home, &Request::Linked { id, op }, &[])? {
            Reply::Attr(a) => Ok(a),
            _ => Err(Errno::EPROTO),
        }
    }

    /// `Linked` at the home server, and every change of a file by its record here (an
    /// orphan's `SetSize`/`Append` with an empty path too): read, changed and written under
    /// the open references' lock, so the sweeper never drops a record half changed.
    pub(crate) fn linked_here(&self, id: u64, op: LinkOp) -> FsResult<Attr> {
        let now = now_ns();
        if let LinkOp::Add(Some(first)) = op {
            // the second name: the attributes come from the file's only entry, whose server
            // holds its name's lock and path lock (nothing else can touch a record not made
            // yet; no lock here, which the unlink takes before the path lock)
            if first.id != id || first.is_dir() || is_stub(&first) {
                return Err(Errno::EINVAL);
            }
            let a = Attr {
                nlink: 2,
                ctime: now,
                ..first
            };
            self.meta.put_orphan(id, Some(&a))?;
            return Ok(a);
        }
        let g = self.opens.lock();
        let found = self.meta.orphan(id)?;
        let mut a = match (found, op) {
            (Some(a), LinkOp::Stat) => return Ok(a),
            // an open-unlinked file gets no name back
            (Some(a), LinkOp::Add(_)) if a.nlink == 0 => return Err(Errno::ENOENT),
            (Some(a), _) => a,
            (None, _) => return Err(Errno::ENOENT),
        };
        match op {
            LinkOp::Stat => {}
            LinkOp::Add(_) => {
                a.nlink += 1;
                a.ctime = now;
            }
            LinkOp::Drop => {
                a.nlink = a.nlink.saturating_sub(1);
                a.ctime = now;
                if a.nlink == 0 {
                    drop(g);
                    // the last name: kept while open, else dropped (as an unlink)
                    self.forget_here(&Attr { nlink: 1, ..a })?;
                    return Ok(a);
                }
            }
            LinkOp::Mode(mode) => Change::Mode { mode, ctime: now }.apply(&mut a),
            LinkOp::Owner { uid, gid, clear } => Change::Owner {
                uid,
                gid,
                clear,
                ctime: now,
            }
            .apply(&mut a),
            LinkOp::Times { atime, mtime } => Change::Times {
                atime,
                mtime,
                ctime: now,
            }
            .apply(&mut a),
            LinkOp::Size(size) => {
                Change::Size { size, time: now }.apply(&mut a);
                self.meta.truncate_inline(id, size)?;
                self.chunks.truncate(id, size)?;
            }
            LinkOp::Grow(size) => {
                if size > a.size {
                    a.size = size;
                    a.mtime = a.mtime.max(now);
                    a.ctime = a.ctime.max(now);
                }
            }
            LinkOp::Append(len) => {
                a.size = a
                    .size
                    .checked_add(len)
                    .filter(|e| *e <= i64::MAX as u64)
                    .ok_or(Errno::EFBIG)?;
                a.mtime = now;
                a.ctime = now;
            }
        }
        self.meta.put_orphan(id, Some(&a))?;
        Ok(a)
    }

    /// A change of the attributes of file `id` named `path`: in its entry, or at its home
    /// server when the entry is a stub.
    pub(crate) fn change_file(&self, path: &str, id: u64, c: Change) -> FsResult<()> {
        if path == "/" {
            // the root directory: no entry, a record of its own ([`Ops::get`] has it as
            // changed here)
            let mut a = self.get("/")?;
            c.apply(&mut a);
            return self.meta.put_root(&a);
        }
        match self.meta.change(path, c) {
            Err(Errno::ESTALE) => {
                let op = match c {
                    Change::Mode { mode, .. } => LinkOp::Mode(mode),
                    Change::Owner {
                        uid, gid, clear, ..
                    } => LinkOp::Owner { uid, gid, clear },
                    Change::Times { atime, mtime, .. } => LinkOp::Times { atime, mtime },
                    Change::Size { size, .. } => LinkOp::Size(size),
                    Change::Touch { .. } => return Ok(()), // directories only
                };
                self.linked(id, op).map(drop)
            }
            r => r,
        }
    }

    /// `Link`: `to` becomes a new name of the file at `from` (this server's).
    pub(crate) fn link(&self, from: &str, to: &str) -> FsResult<Answer> {
        not_root(from, Errno::EPERM)?;
        not_root(to, Errno::EEXIST)?;
        path_ok(to)?;
        let (raw, a) = {
            // one more name is counted before an unlink of `from` can count one fewer
            let _n = self.opens.name_lock(from);
            let raw = self.meta.get(from)?.ok_or(Errno::ENOENT)?;
            if raw.is_dir() {
                // the kernel looks the target up first
                return Err(match self.stat_anywhere(to) {
                    Ok(_) => Errno::EEXIST,
                    Err(_) => Errno::EPERM,
                });
            }
            let a = if is_stub(&raw) {
                self.linked(raw.id, LinkOp::Add(None))?
            } else {
                let mut made = None;
                self.meta.to_stub(from, raw.id, &mut |first| {
                    made = Some(self.linked(first.id, LinkOp::Add(Some(*first)))?);
                    Ok(())
                })?;
                made.ok_or(Errno::EIO)?
            };
            (raw, a)
        };
        let stub = Attr { nlink: 0, ..raw };
        let attach = Request::Attach {
            path: to,
            attr: stub,
            replace: false,
            durable: false,
            from: None,
            src: self.here(),
        };
        let s = meta_server(to, &self.peers.layout());
        let made = if s == self.here() {
            self.attach_here(&attach).map(drop)
        } else {
            self.peers.call(s, &attach, &[]).map(drop)
        };
        if let Err(e) = made {
            if let Err(d) = self.linked(raw.id, LinkOp::Drop) {
                tracing::warn!("link of {from}: count of file {:016x} left ({d})", raw.id);
            }
            return Err(e);
        }
        self.parent_changed(to, a.ctime);
        Ok(Answer::Attr(a))
    }

    /// `Unlink` of the stub at `path` (the caller holds the name's lock): the entry goes, its
    /// home server counts one name fewer. Returns the file's attributes after.
    pub(crate) fn unlink_stub(&self, path: &str, raw: &Attr) -> FsResult<Attr> {
        self.meta.remove_entry(path)?;
        self.linked(raw.id, LinkOp::Drop)
    }
}

/// `Link`: `to` becomes a new name of the file at `from` (this server's).
pub(crate) fn link(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Link { from, to } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(from)?;
    s.link(from, to)
}

/// `Linked` (servers only): a change of the attributes of a file with several names, at its
/// home server.
pub(crate) fn linked(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Linked { id, op } = *req else {
        return Err(Errno::EINVAL);
    };
    s.linked_here(id, op).map(Answer::Attr)
}
