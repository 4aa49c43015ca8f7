//! What each request names, which decides the one server that may serve it (docs/security.md,
//! "One door"): the server checks it at admission, and a client that learns a new layout
//! (a slot moved, `EREMCHG`) finds with it where to send the request instead. Both sides use
//! this one function, so they never disagree on where a request belongs.

use crate::{chunk_server, home_server, meta_server, Layout};
use madfs_proto::{Cap, Request};

/// A key a request names.
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
    /// Files by capability: every one's home server.
    Caps(&'a [Cap]),
    /// Every server answers for its own part (a listing, a find, a broadcast).
    Every,
    /// Nothing in particular (a ping, the map, a copy with its own checks).
    Any,
}

use Key::{Any, Chunk, Every, Id, Path};

/// A path, or the open-unlinked file `id` at its home server when it is empty.
fn path_or_id(path: &str, id: u64) -> Key<'_> {
    if path.is_empty() {
        Id(id)
    } else {
        Path(path)
    }
}

/// The keys `req` names (a `Request::Once`: its inner request's).
pub fn keys<'r>(req: &'r Request<'r>) -> [Key<'r>; 3] {
    match req {
        Request::Once { req, .. } => match &**req {
            Request::Once { .. } => [Any; 3],
            inner => keys(inner),
        },
        Request::Stat(path) | Request::Look(path) => [Path(path), Any, Any],
        Request::Open { path, .. }
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
        | Request::Settle { path, .. } => [Path(path), Any, Any],
        Request::Rename { from, .. }
        | Request::Link { from, .. }
        | Request::MoveState { from, .. } => [Path(from), Any, Any],
        Request::Touch { dir, .. } => [Path(dir), Any, Any],
        Request::SetSize { path, id, .. }
        | Request::Append { path, id, .. }
        | Request::DropPrivs { path, id, .. }
        | Request::Readlink { path, id } => [path_or_id(path, *id), Any, Any],
        Request::Read { id, chunk, .. } => [Chunk(*id, *chunk), Any, Any],
        Request::Write {
            id, chunk, size_of, ..
        }
        | Request::WriteData {
            id, chunk, size_of, ..
        } => [
            Chunk(*id, *chunk),
            size_of.map_or(Any, |p| path_or_id(p, *id)),
            Any,
        ],
        // (an fsync that publishes a size is a writer's; an open-unlinked file's goes to its
        // home server, an empty path)
        Request::Fsync { id, size_of, .. } => {
            [size_of.map_or(Any, |p| path_or_id(p, *id)), Any, Any]
        }
        Request::Hold {
            add, release, held, ..
        } => [Key::Caps(add), Key::Ids(release), Key::Caps(held)],
        Request::Where { id, .. }
        | Request::Forget { id, .. }
        | Request::Moved { id, .. }
        | Request::Linked { id, .. } => [Id(*id), Any, Any],
        Request::LookDir { .. }
        | Request::HasChildren { .. }
        | Request::Readdir { .. }
        | Request::Find { .. }
        | Request::TruncateChunks { .. }
        | Request::Seal { .. }
        | Request::DirSet { .. }
        | Request::DirList { .. } => [Every, Any, Any],
        Request::Ping
        | Request::Bye
        | Request::Map
        | Request::Statfs
        | Request::Locate
        | Request::Sync { .. }
        | Request::Replicate { .. }
        | Request::Resync { .. }
        | Request::ResyncRead { .. }
        | Request::MoveIn { .. }
        | Request::MoveData { .. } => [Any; 3],
    }
}

/// The server of key `k` in layout `l` (`None`: a key of every server, or of none).
pub fn owner_of_key(k: &Key<'_>, l: &Layout) -> Option<u32> {
    match *k {
        Path(p) => Some(meta_server(p, l)),
        Id(id) => Some(home_server(id, l)),
        Chunk(id, c) => Some(chunk_server(id, c, l)),
        Key::Ids(v) => v.first().map(|id| home_server(*id, l)),
        Key::Caps(v) => v.first().map(|c| home_server(c.id, l)),
        Every | Any => None,
    }
}

/// The one server that holds every key of `req` in layout `l`: `None` when the request
/// names none (any server answers it, or every one for its part) or its keys are on
/// several servers (the sender must split it).
pub fn owner(req: &Request<'_>, l: &Layout) -> Option<u32> {
    let mut found = None;
    for k in keys(req) {
        let all: Vec<u32> = match k {
            Key::Ids(v) => v.iter().map(|id| home_server(*id, l)).collect(),
            Key::Caps(v) => v.iter().map(|c| home_server(c.id, l)).collect(),
            k => owner_of_key(&k, l).into_iter().collect(),
        };
        for s in all {
            match found {
                None => found = Some(s),
                Some(f) if f != s => return None,
                _ => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_belongs_to_the_server_of_its_keys() {
        let l = &Layout::initial(5);
        let p = "/a/b";
        assert_eq!(owner(&Request::Stat(p), l), Some(meta_server(p, l)));
        assert_eq!(owner(&Request::Ping, l), None);
        let id = crate::make_id(3, 9);
        let w = Request::Read {
            id,
            chunk: 2,
            offset: 0,
            len: 1,
            chunk_size: 1 << 20,
            cap: Default::default(),
        };
        assert_eq!(owner(&w, l), Some(chunk_server(id, 2, l)));
        let once = Request::Once {
            client: 1,
            seq: 1,
            at: 0,
            req: Box::new(Request::Unlink { path: p }),
        };
        assert_eq!(keys(&once), [Path(p), Any, Any]);
    }
}
