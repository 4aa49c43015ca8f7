//! Attributes: `chmod`, `chown`, `utimensat`, sizes (`truncate`, `ftruncate`, a writer's
//! size publication, `O_APPEND` reservations) and the clearing of set-id bits before a write.
//! What the connection's user may change was decided by `crate::authorize` before a handler
//! here runs.

use super::Call;
use crate::clock::now_ns;
use crate::server::{not_root, path_ok, Answer, Server};
use madfs_proto::{privs_of, Attr, Errno, FsResult, LinkOp, Request, SizeMode, TimeSpec};
use madfs_store::rocks::Change;
use madfs_store::MetadataStore;

fn resolve(t: TimeSpec, now: i64) -> Option<i64> {
    match t {
        TimeSpec::Omit => None,
        TimeSpec::Now => Some(now),
        TimeSpec::At(v) => Some(v),
    }
}

impl Server {
    /// `SetSize`: `Max` publishes a lower bound (merge operator), `Exact` truncates; `id` ≠ 0
    /// only to the entry naming that file (ESTALE), an empty path to its orphan record.
    pub(crate) fn set_size(
        &self,
        path: &str,
        size: u64,
        mode: SizeMode,
        id: u64,
    ) -> FsResult<Answer> {
        if size > i64::MAX as u64 {
            return Err(Errno::EFBIG); // beyond off_t
        }
        if path.is_empty() {
            return self.set_orphan_size(id, size, mode);
        }
        not_root(path, Errno::EISDIR)?;
        let (mut a, linked) = self.lookup(path).map_err(|e| match e {
            Errno::ENOENT if id != 0 => Errno::ESTALE,
            e => e,
        })?;
        if id != 0 && a.id != id {
            return Err(Errno::ESTALE);
        }
        if a.is_link() {
            return Err(Errno::ELOOP); // the client follows the link
        }
        if a.is_dir() {
            return Err(Errno::EISDIR);
        }
        if a.is_special() {
            return Err(Errno::EINVAL); // as truncate(2) of a FIFO or device
        }
        if linked {
            // kept by id at its home server
            return match mode {
                SizeMode::Max | SizeMode::MaxWith(_) => {
                    self.linked(a.id, LinkOp::Grow(size)).map(|_| Answer::Unit)
                }
                _ => self.linked(a.id, LinkOp::Size(size)).map(Answer::Attr),
            };
        }
        match mode {
            SizeMode::Max | SizeMode::MaxWith(_) => {
                self.meta.publish_size(path, a.id, size, now_ns())?;
                Ok(Answer::Unit)
            }
            SizeMode::Exact | SizeMode::ExactWith(_) => {
                let c = Change::Size {
                    size,
                    time: now_ns(),
                };
                c.apply(&mut a);
                self.meta.truncate_inline(a.id, size)?;
                self.drop_local_chunks(a.id, size)?;
                self.change_file(path, a.id, c)?;
                Ok(Answer::Attr(a))
            }
        }
    }

    /// `SetSize` of file `id` by its record at its home server (open with its last name
    /// gone, or with several names).
    fn set_orphan_size(&self, id: u64, size: u64, mode: SizeMode) -> FsResult<Answer> {
        match mode {
            SizeMode::Max | SizeMode::MaxWith(_) => self
                .linked_here(id, LinkOp::Grow(size))
                .map(|_| Answer::Unit),
            _ => self.linked_here(id, LinkOp::Size(size)).map(Answer::Attr),
        }
    }

    /// `DropPrivs`: a write by someone other than root clears the set-id bits of file `id`
    /// at `path` (empty: by id at its home, an orphan or a file with several names).
    pub(crate) fn drop_privs(&self, path: &str, id: u64) -> FsResult<Attr> {
        let a = if path.is_empty() {
            self.meta.orphan(id)?.ok_or(Errno::ENOENT)?
        } else {
            path_ok(path)?;
            not_root(path, Errno::EISDIR)?;
            self.get(path).map_err(|e| match e {
                Errno::ENOENT => Errno::ESTALE,
                e => e,
            })?
        };
        if a.id != id {
            return Err(Errno::ESTALE);
        }
        let clear = privs_of(a.mode);
        if clear == 0 {
            return Ok(a);
        }
        let (uid, gid) = (u32::MAX, u32::MAX);
        if path.is_empty() {
            return self.linked(id, LinkOp::Owner { uid, gid, clear });
        }
        let c = Change::Owner {
            uid,
            gid,
            clear,
            ctime: now_ns(),
        };
        let mut b = a;
        c.apply(&mut b);
        self.change_file(path, id, c)?;
        Ok(b)
    }
}

pub(crate) fn set_size(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::SetSize {
        path,
        size,
        mode,
        id,
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    s.set_size(path, size, mode, id)
}

pub(crate) fn chmod(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Chmod { path, mode } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(path)?;
    let mut a = s.get(path)?;
    if a.is_link() {
        return Err(Errno::ELOOP); // the client follows the link
    }
    let ch = Change::Mode {
        mode,
        ctime: now_ns(),
    };
    ch.apply(&mut a);
    s.change_file(path, a.id, ch)?;
    if a.is_dir() {
        s.dir_changed(path, Some(&a))?;
    }
    Ok(Answer::Attr(a))
}

pub(crate) fn utimens(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Utimens {
        path,
        atime,
        mtime,
        link,
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    path_ok(path)?;
    let mut a = s.get(path)?;
    if a.is_link() && !link {
        return Err(Errno::ELOOP); // the client follows the link
    }
    let now = now_ns();
    let ch = Change::Times {
        atime: resolve(atime, now),
        mtime: resolve(mtime, now),
        ctime: now,
    };
    ch.apply(&mut a);
    s.change_file(path, a.id, ch)?;
    Ok(Answer::Attr(a))
}

pub(crate) fn append(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Append { path, len, id } = *req else {
        return Err(Errno::EINVAL);
    };
    if path.is_empty() {
        // by its record at its home server (open-unlinked, or several names)
        let b = s.linked_here(id, LinkOp::Append(len))?;
        return Ok(Answer::Offset(b.size - len));
    }
    not_root(path, Errno::EISDIR)?;
    match s.lookup(path) {
        Ok((a, _)) if a.is_link() && (id == 0 || a.id == id) => return Err(Errno::ELOOP),
        // a name of a file with several names: its size is kept at its home
        Ok((a, true)) if id == 0 || a.id == id => {
            let b = s.linked(a.id, LinkOp::Append(len))?;
            return Ok(Answer::Offset(b.size - len));
        }
        // the descriptor's file was renamed or unlinked: the client asks its home
        Err(Errno::ENOENT) if id != 0 => return Err(Errno::ESTALE),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    // sent again after a failover, it answers the place it reserved (`replica::replay`)
    let note = &mut |o| crate::replica::replay::note(crate::replica::replay::Note::Offset(o));
    s.meta
        .reserve_append(path, id, len, now_ns(), note)
        .map(Answer::Offset)
}

pub(crate) fn chown(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Chown {
        path,
        uid,
        gid,
        link,
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    path_ok(path)?;
    let mut a = s.get(path)?;
    if a.is_link() && !link {
        return Err(Errno::ELOOP); // the client follows the link
    }
    let ch = Change::Owner {
        uid,
        gid,
        clear: a.mode & !crate::authorize::chown_mode(&a, uid, gid),
        ctime: now_ns(),
    };
    ch.apply(&mut a);
    s.change_file(path, a.id, ch)?;
    if a.is_dir() {
        s.dir_changed(path, Some(&a))?;
    }
    Ok(Answer::Attr(a))
}

pub(crate) fn drop_privs(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::DropPrivs { path, id, .. } = *req else {
        return Err(Errno::EINVAL);
    };
    s.drop_privs(path, id).map(Answer::Attr)
}
