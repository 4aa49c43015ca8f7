//! Admission (docs/security.md, "One door"): a request is served only by the server that
//! holds what it names — a path's metadata server, a file's home server, a chunk's server —
//! or, on a replicated cluster, by the primary of that key's replica set. A request sent to
//! any other server is refused with `EREMCHG` before anything else looks at it: a server that
//! served it would act on a copy of the namespace that is not its own (a second `/alice`
//! owned by someone else, whose directory-table update replaced the real one everywhere).

use madfs_placement::{chunk_server, home_server, meta_server};
use madfs_proto::{Errno, FsResult, Request};

/// What a request names, which decides the one server that may serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    /// A path: its metadata server.
    Path(&'a str),
    /// A file by id: its home server.
    Id(u64),
    /// Chunk `.1` of file `.0`: that chunk's server.
    Chunk(u64, u64),
    /// Files by id: every one's home server.
    Ids(&'a [u64]),
    /// Every server answers for its own part (a listing, a find, a broadcast).
    Every,
    /// Nothing in particular (a ping, the map, a copy with its own checks).
    Any,
}

/// The keys `req` names (the second is usually [`Key::Any`]): a `Request::Once` names its
/// inner request's.
pub fn keys<'a>(req: &'a Request<'a>) -> [Key<'a>; 2] {
    use Key::*;
    let path_or_id = |path: &'a str, id: u64| if path.is_empty() { Id(id) } else { Path(path) };
    match req {
        Request::Once { req, .. } => keys(req),
        Request::Stat(path)
        | Request::Open { path, .. }
        | Request::Create { path, .. }
        | Request::Mkdir { path, .. }
        | Request::Mknod { path, .. }
        | Request::Symlink { path, .. }
        | Request::Unlink { path }
        | Request::Rmdir { path }
        | Request::Chmod { path, .. }
        | Request::Utimens { path, .. }
        | Request::Chown { path, .. }
        | Request::Attach { path, .. }
        | Request::Detach { path, .. }
        | Request::Settle { path, .. } => [Path(path), Any],
        Request::Rename { from, .. } | Request::Link { from, .. } => [Path(from), Any],
        Request::MoveState { from, .. } => [Path(from), Any],
        Request::Touch { dir, .. } => [Path(dir), Any],
        Request::SetSize { path, id, .. }
        | Request::Append { path, id, .. }
        | Request::DropPrivs { path, id, .. } => [path_or_id(path, *id), Any],
        Request::Where { id, .. }
        | Request::Forget { id, .. }
        | Request::Moved { id, .. }
        | Request::Linked { id, .. } => [Id(*id), Any],
        // (the held ids too: [`check`])
        Request::Hold { add, release, .. } => [Ids(add), Ids(release)],
        Request::Read { id, chunk, .. } => [Chunk(*id, *chunk), Any],
        Request::Write {
            id, chunk, size_of, ..
        }
        | Request::WriteData {
            id, chunk, size_of, ..
        } => [Chunk(*id, *chunk), size_of.map_or(Any, Path)],
        Request::Fsync { size_of, .. } => [size_of.map_or(Any, Path), Any],
        Request::Readdir { .. }
        | Request::Find { .. }
        | Request::HasChildren { .. }
        | Request::Seal { .. }
        | Request::DirSet { .. }
        | Request::DirList { .. }
        | Request::TruncateChunks { .. } => [Every, Any],
        Request::Ping
        | Request::Bye
        | Request::Map
        | Request::Statfs
        | Request::Sync { .. }
        | Request::Locate
        | Request::Replicate { .. }
        | Request::Resync { .. }
        | Request::ResyncRead { .. } => [Any, Any],
    }
}

/// The held ids of a `Hold`, which [`keys`] leaves out (two keys): checked as well.
fn held<'a>(req: &'a Request<'a>) -> Option<&'a [u64]> {
    match req {
        Request::Once { req, .. } => held(req),
        Request::Hold { held, .. } => Some(held),
        _ => None,
    }
}

/// Is every key of `req` placed on `set` (a server, or a replica set named by its first
/// member) among `n` servers? `EREMCHG` if one is not.
pub fn check(req: &Request<'_>, set: u32, n: u32) -> FsResult<()> {
    let ours = |owner: u32| if owner == set { Ok(()) } else { Err(Errno::EREMCHG) };
    let ids = |ids: &[u64]| ids.iter().try_for_each(|id| ours(home_server(*id, n)));
    for key in keys(req) {
        match key {
            Key::Path(p) => ours(meta_server(p, n))?,
            Key::Id(id) => ours(home_server(id, n))?,
            Key::Chunk(id, c) => ours(chunk_server(id, c, n))?,
            Key::Ids(v) => ids(v)?,
            Key::Every | Key::Any => {}
        }
    }
    if let Some(v) = held(req) {
        ids(v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_served_by_its_server_only() {
        let n = 5;
        let p = "/a/b";
        let home = meta_server(p, n);
        for s in 0..n {
            let r = check(&Request::Stat(p), s, n);
            assert_eq!(r.is_ok(), s == home, "server {s}");
            let rm = Request::Rename {
                from: p,
                to: "/elsewhere",
                noreplace: false,
            };
            assert_eq!(check(&rm, s, n).is_ok(), s == home);
            assert!(check(&Request::Ping, s, n).is_ok());
            let ls = Request::Readdir {
                dir: p,
                start: 0,
                max_bytes: 1,
            };
            assert!(check(&ls, s, n).is_ok());
        }
        // a chunk's server, and a size published with chunk 0 on the path's server too
        let id = (2u64 << 48) | 7;
        let w = |chunk, size_of| Request::Write {
            id,
            chunk,
            offset: 0,
            chunk_size: 4096,
            size_of,
            cap: Default::default(),
        };
        assert!(check(&w(0, None), 2, n).is_ok());
        assert!(check(&w(0, None), 1, n).is_err());
        let c3 = chunk_server(id, 3, n);
        assert!(check(&w(3, None), c3, n).is_ok());
        assert!(check(&w(3, None), (c3 + 1) % n, n).is_err());
        let elsewhere = (0..n).find(|s| *s != 2).unwrap();
        let named = (0..1000)
            .map(|i| format!("/f{i}"))
            .find(|p| meta_server(p, n) == elsewhere)
            .unwrap();
        assert!(check(&w(0, Some(&named)), 2, n).is_err());
        // every held id's home
        let h = Request::Hold {
            client: 1,
            add: vec![],
            release: vec![],
            held: vec![id, (3u64 << 48) | 1],
            gone: false,
        };
        assert!(check(&h, 2, n).is_err() && check(&h, 3, n).is_err());
    }
}
