//! Symbolic links on the mount, followed for the handlers ([`with_links`], [`stat_links`],
//! [`stat_links_with`], [`ancestors_followed`]), and the `stat` of a madfs path as this
//! process knows it (sizes its open descriptions wrote but have not published).
//!
//! A link is an entry whose data (inline chunk 0) is its target. Lookups are by full path with
//! no walk, so links are followed where they show: a link as the last component answers the
//! lookup itself (stat, open, or the server's ELOOP for chmod/truncate/utimens/chown), and a
//! link among the ancestors makes the lookup fail with ENOENT/ENOTDIR, after which (only then)
//! the ancestors are examined. Targets outside the mount go to the kernel.

use super::paths::mount;
use crate::conn;
use crate::fdtable;
use crate::path::{external, internal, resolve_in, Resolved};
use madfs_client::FileSystem;
use madfs_proto::{Attr, Errno, FsResult};
use std::ffi::CStr;

/// Size as this process knows it: the server's, or more if an open description of ours wrote
/// beyond it and has not published yet (same-process stat after write).
fn local_size(path: &str, server: u64) -> u64 {
    if fdtable::is_empty() {
        return server;
    }
    fdtable::all()
        .iter()
        .filter(|d| !d.is_dir() && d.path() == path)
        .map(|d| d.attr().size)
        .fold(server, u64::max)
}

fn stat_path(p: &str) -> FsResult<Attr> {
    let mut a = conn::with(|c| c.stat_normalized(p))?;
    if a.is_file() {
        a.size = local_size(p, a.size);
    }
    Ok(a)
}

/// Links followed for one path before ELOOP (Linux's MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// Where a path leads after its symbolic links.
enum Followed {
    Ours(String),
    /// Outside the mount: the host path, for the kernel.
    Outside(std::ffi::CString),
}

fn host_path(v: Vec<u8>) -> FsResult<Followed> {
    std::ffi::CString::new(v)
        .map(Followed::Outside)
        .map_err(|_| Errno::EINVAL)
}

/// Where the link at madfs path `link`, with target `t`, leads (plus `rest`, a relative path
/// below it).
fn link_target(link: &str, t: &str, rest: &str) -> FsResult<Followed> {
    let parent = madfs_placement::split_parent(link).map_or("/", |(p, _)| p);
    let mut joined = t.to_string();
    if !rest.is_empty() {
        joined.push('/');
        joined.push_str(rest);
    }
    let r = if t.starts_with('/') {
        internal(mount(), joined.as_bytes())?
    } else {
        resolve_in(parent, joined.as_bytes())?
    };
    match r {
        Resolved::Internal(q) => Ok(Followed::Ours(q)),
        Resolved::External if t.starts_with('/') => host_path(joined.into_bytes()),
        Resolved::External => {
            let mut v = external(mount(), parent);
            v.push(b'/');
            v.extend_from_slice(joined.as_bytes());
            host_path(v)
        }
    }
}

pub(super) fn readlink_ours(p: &str) -> FsResult<String> {
    conn::with(|c| c.readlink(p))
}

/// After ENOTDIR on `p`: where `p` leads if an ancestor is a symbolic link (None: the error
/// stands). Costs one stat of the parent when the parent is a plain directory.
fn through_ancestor(p: &str) -> FsResult<Option<Followed>> {
    if let Some((parent, _)) = madfs_placement::split_parent(p) {
        if matches!(stat_path(parent), Ok(a) if a.is_dir()) {
            return Ok(None);
        }
    }
    let mut end = 0;
    while let Some(i) = p[end + 1..].find('/') {
        end += 1 + i;
        let q = &p[..end];
        match stat_path(q) {
            Ok(a) if a.is_link() => {
                let t = readlink_ours(q)?;
                return link_target(q, &t, &p[end + 1..]).map(Some);
            }
            Ok(a) if a.is_dir() => {}
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// Runs `op` on `p`, following symbolic links: ancestors when `op` fails with ENOTDIR,
/// the last component when `op` answers ELOOP (a link) and `last` is set; `outside` runs the
/// call on a host path.
pub(crate) fn with_links<T>(
    p: &str,
    last: bool,
    op: impl Fn(&str) -> FsResult<T>,
    outside: impl FnOnce(&CStr) -> FsResult<T>,
) -> FsResult<T> {
    // no copy of the path unless a link is followed
    let mut p = std::borrow::Cow::Borrowed(p);
    for _ in 0..MAX_LINKS {
        let next = match op(&p) {
            Err(Errno::ELOOP) if last => link_target(&p, &readlink_ours(&p)?, "")?,
            // the client answers ENOENT only when every existing ancestor is a directory
            // (it refines the error), so a link among the ancestors shows as ENOTDIR
            Err(Errno::ENOTDIR) => match through_ancestor(&p)? {
                Some(f) => f,
                None => return Err(Errno::ENOTDIR),
            },
            r => return r,
        };
        match next {
            Followed::Ours(q) => p = std::borrow::Cow::Owned(q),
            Followed::Outside(h) => return outside(&h),
        }
    }
    Err(Errno::ELOOP)
}

/// `stat` with links followed (the last one too when `last`): `found(final madfs path,
/// attributes)`, or a host path.
pub(crate) fn stat_links_with<T>(
    p: &str,
    last: bool,
    found: impl Fn(&str, Attr) -> T,
) -> FsResult<Result<T, std::ffi::CString>> {
    with_links(
        p,
        true,
        |p| match stat_path(p) {
            Ok(a) if last && a.is_link() => Err(Errno::ELOOP),
            Ok(a) => Ok(Ok(found(p, a))),
            Err(e) => Err(e),
        },
        |h| Ok(Err(h.to_owned())),
    )
}

/// `stat` with links followed: the attributes, or a host path.
pub(crate) fn stat_links(p: &str, last: bool) -> FsResult<Result<Attr, std::ffi::CString>> {
    stat_links_with(p, last, |_, a| a)
}

/// `p` with the symbolic links among its ancestors followed (`None`: there are none; EXDEV
/// when one leads out of madfs, ELOOP after too many).
pub(super) fn ancestors_followed(p: &str) -> FsResult<Option<String>> {
    let mut cur = p.to_owned();
    for _ in 0..MAX_LINKS {
        match through_ancestor(&cur)? {
            None => return Ok((cur != p).then_some(cur)),
            Some(Followed::Ours(q)) => cur = q,
            Some(Followed::Outside(_)) => return Err(Errno::EXDEV),
        }
    }
    Err(Errno::ELOOP)
}
