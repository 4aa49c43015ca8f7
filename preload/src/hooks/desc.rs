//! The open file behind a madfs fd's description, for the fd-based handlers: the client's
//! handle of it ([`file`]), its access mode ([`acc`]), its attributes ([`stat_fd`]), and
//! making its size known ([`publish`]) or durable ([`sync_desc`]).

use crate::conn;
use crate::fdtable::Desc;
use madfs_client::{Client, FileSystem, OpenFile};
use madfs_hookabi::raw;
use madfs_proto::{Attr, FsResult};
use std::sync::atomic::Ordering::*;

/// The open file of description `d`, where this process found it last (see `Desc::found_at`
/// for what comes back from an operation).
pub(super) fn file(c: &Client, d: &Desc) -> OpenFile {
    match d.whereabouts() {
        Some(at) => c.handle_at(d.path(), &at, d.attr(), d.cap()),
        None => c.handle(d.path().to_owned(), d.attr(), d.cap()),
    }
}

pub(super) fn acc(d: &Desc) -> i32 {
    d.flags() & libc::O_ACCMODE
}

pub(super) fn stat_fd(d: &Desc) -> FsResult<Attr> {
    if let Some(a) = d.fresh_attr() {
        return Ok(a);
    }
    let mine = d.attr();
    // the file's entry where it is now (renamed: under its new name; unlinked: its home
    // server's orphan record, nlink 0)
    let mut a = conn::with(|c| {
        let mut f = file(c, d);
        let a = c.fstat(&mut f);
        d.found_at(f.whereabouts());
        a
    })?;
    if a.is_file() {
        a.size = a.size.max(mine.size);
    }
    Ok(a)
}

pub(crate) fn publish(d: &Desc) -> FsResult<()> {
    if let Some(size) = d.take_dirty() {
        let r = conn::with(|c| {
            let mut f = file(c, d);
            let r = c.publish_size(&mut f, size);
            d.found_at(f.whereabouts());
            r
        });
        if crate::entry::TRACE.load(Relaxed) {
            let msg = format!("[madfs] publish {} size={size}: {r:?}\n", d.path());
            // SAFETY: raw write to stderr.
            unsafe {
                raw!(
                    libc::SYS_write as isize,
                    2isize,
                    msg.as_ptr() as isize,
                    msg.len() as isize,
                )
            };
        }
        if r.is_err() {
            // keep it dirty: another holder of the description may still publish it
            d.wrote(size, false);
        }
        r?;
    }
    Ok(())
}

/// fsync of the file behind `d`; its unpublished size travels in the fsync request to the
/// metadata server (one round trip instead of a `SetSize` first).
pub(super) fn sync_desc(d: &Desc) -> FsResult<()> {
    let size = d.take_dirty();
    let r = conn::with(|c| {
        let mut f = file(c, d);
        if let Some(end) = size {
            f.wrote(end);
        }
        let r = c.fsync(&mut f);
        d.found_at(f.whereabouts());
        r
    });
    if let (Err(_), Some(end)) = (&r, size) {
        // keep it dirty: another holder of the description may still publish it
        d.wrote(end, false);
    }
    r
}
