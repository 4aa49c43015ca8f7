//! The table of requests (docs/architecture.md, "One door"): for each request, who may send
//! it, what it must be admitted by (the keys it names, `madfs_placement::keys`, which
//! clients use too: `crate::admit`), what permission it
//! needs (`crate::authorize`), what capability it grants, what entries it touches
//! (`crate::touches`), where it runs, and its handler (`crate::handlers`). The pipeline
//! reads a request's row and nothing else decides these.
//!
//! Adding a request: its type (`madfs_proto::Request`), its row here, its handler.

use crate::authorize::Perm;
use crate::handlers::{
    attributes, control, data, directories, entries, links, open_files, rename, Call,
};
use crate::server::{Answer, Server};
use crate::touches::Touches;
use crate::who::Who;
use madfs_placement::keys::{keys, Key};
use madfs_proto::{FsResult, ReplOp, Request, SizeMode, ACCESS_R, ACCESS_W};

/// Who may send a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Senders {
    /// Clients, proxies (served as the user they state) and servers.
    Anyone,
    /// Servers of the cluster only (the peer key): `EPERM` from anyone else.
    Servers,
}

/// What a request's answer grants: a capability for the file it names (`crate::cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Nothing.
    Nothing,
    /// What an open wanted (a symbolic link: nothing; its target is read with `Readlink`).
    Open(u32),
    /// What a create wanted of an existing file; reading and writing of a new one.
    Create(u32),
    /// Writing (a truncate's, whose client drops the bytes on the other servers; a
    /// `DropPrivs`', which lets its holder write).
    Write,
}

/// Where a request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// On the net thread (in memory, or one point lookup), replicated or not.
    Net,
    /// On the net thread unless the cluster is replicated (then it may copy, or wait for a
    /// copy: an IO thread).
    Local,
    /// Short metadata work: on the net thread unless `--meta-on-io-threads` or replicated.
    Meta,
    /// On an IO thread (it may block: a scan, a flush, a call to another server).
    Io,
}

/// A request's handler.
pub type Handler = fn(&Server, &mut Call<'_>, &Request<'_>) -> FsResult<Answer>;

/// A request's row.
pub struct Row<'r> {
    /// Who may send it.
    pub senders: Senders,
    /// The keys it names: the server that holds them all serves it (`crate::admit`).
    pub admit: [Key<'r>; 3],
    /// What it needs to be allowed.
    pub perm: Perm<'r>,
    /// What its answer grants.
    pub grant: Grant,
    /// What entries it reads or changes.
    pub touches: Touches<'r>,
    /// Where it runs.
    pub runs: Runs,
    /// What it does.
    pub handler: Handler,
}

impl Runs {
    /// Does a request that runs so go on the net thread of a server whose cluster is
    /// `replicated`, run with metadata inline or not?
    pub fn inline(self, replicated: bool, meta_inline: bool) -> bool {
        match self {
            Runs::Net => true,
            Runs::Local => !replicated,
            Runs::Meta => meta_inline && !replicated,
            Runs::Io => false,
        }
    }
}

/// A path's entry is touched, if the request names one (not an open-unlinked file).
fn changes(path: &str) -> Touches<'_> {
    if path.is_empty() {
        Touches::Nothing
    } else {
        Touches::Changes(path)
    }
}

/// Chunk 0 near its start is in RocksDB (short work); anything else is file IO.
fn chunk_runs(chunk: u64, offset: u32) -> Runs {
    if chunk == 0 && offset < 64 * 1024 {
        Runs::Meta
    } else {
        Runs::Io
    }
}

/// The row of `req` (a `Request::Once`: its inner request's).
pub fn row<'r>(req: &'r Request<'r>) -> Row<'r> {
    use Senders::{Anyone, Servers};
    let row = |senders, perm, grant, touches, runs, handler: Handler| Row {
        senders,
        admit: keys(req),
        perm,
        grant,
        touches,
        runs,
        handler,
    };
    let none = Perm::Nothing;
    let nothing = Touches::Nothing;
    match req {
        Request::Once { req, .. } => row_of_once(req),
        Request::Ping => row(
            Anyone,
            none,
            Grant::Nothing,
            nothing,
            Runs::Net,
            control::ping,
        ),
        Request::Bye => row(
            Anyone,
            none,
            Grant::Nothing,
            nothing,
            Runs::Net,
            control::bye,
        ),
        Request::Map => row(
            Anyone,
            none,
            Grant::Nothing,
            nothing,
            Runs::Net,
            control::map,
        ),
        Request::Statfs => row(
            Anyone,
            none,
            Grant::Nothing,
            nothing,
            Runs::Net,
            data::statfs,
        ),
        Request::Locate => row(
            Anyone,
            none,
            Grant::Nothing,
            nothing,
            Runs::Net,
            data::locate,
        ),
        Request::Sync { .. } => row(Anyone, none, Grant::Nothing, nothing, Runs::Io, data::sync),
        Request::Stat(path) => row(
            Anyone,
            Perm::Lookup(path),
            Grant::Nothing,
            Touches::Looks(path),
            Runs::Net,
            entries::stat,
        ),
        Request::Look(path) => row(
            Anyone,
            Perm::Lookup(path),
            Grant::Nothing,
            Touches::Looks(path),
            Runs::Net,
            entries::look,
        ),
        Request::LookDir { dir, .. } => row(
            Anyone,
            Perm::LookIn(dir),
            Grant::Nothing,
            nothing,
            Runs::Io,
            directories::look_dir,
        ),
        Request::Open { path, access, .. } => row(
            Anyone,
            Perm::Open {
                path,
                access: *access,
            },
            Grant::Open(*access),
            nothing,
            Runs::Local,
            open_files::open,
        ),
        Request::Create {
            path,
            excl,
            trunc,
            access,
            ..
        } => row(
            Anyone,
            Perm::CreateOrOpen {
                path,
                access: *access,
                excl: *excl,
                trunc: *trunc,
            },
            Grant::Create(*access),
            Touches::Changes(path),
            Runs::Meta,
            entries::create,
        ),
        Request::Mkdir { path, .. } => row(
            Anyone,
            Perm::Create(path),
            Grant::Nothing,
            Touches::Changes(path),
            Runs::Io,
            entries::mkdir,
        ),
        Request::Mknod { path, mode, .. } => row(
            Anyone,
            Perm::Mknod(path, *mode),
            Grant::Nothing,
            Touches::Changes(path),
            Runs::Meta,
            entries::mknod,
        ),
        Request::Symlink { path, .. } => row(
            Anyone,
            Perm::Create(path),
            Grant::Nothing,
            Touches::Changes(path),
            Runs::Meta,
            entries::symlink,
        ),
        Request::Unlink { path } => row(
            Anyone,
            Perm::Delete(path),
            Grant::Nothing,
            Touches::Removes(path),
            Runs::Meta,
            entries::unlink,
        ),
        Request::Rmdir { path } => row(
            Anyone,
            Perm::Delete(path),
            Grant::Nothing,
            Touches::Removes(path),
            Runs::Io,
            entries::rmdir,
        ),
        Request::HasChildren { dir } => row(
            Anyone,
            Perm::List(dir),
            Grant::Nothing,
            nothing,
            Runs::Local,
            directories::has_children,
        ),
        Request::Readdir { dir, .. } => row(
            Anyone,
            Perm::List(dir),
            Grant::Nothing,
            nothing,
            Runs::Io,
            directories::readdir,
        ),
        Request::Find { dir, .. } => row(
            Anyone,
            Perm::List(dir),
            Grant::Nothing,
            nothing,
            Runs::Io,
            directories::find,
        ),
        Request::SetSize { path, mode, id, .. } => row(
            Anyone,
            Perm::Size {
                path,
                mode: *mode,
                id: *id,
            },
            match mode {
                SizeMode::Exact | SizeMode::ExactWith(_) => Grant::Write,
                SizeMode::Max | SizeMode::MaxWith(_) => Grant::Nothing,
            },
            changes(path),
            Runs::Io,
            attributes::set_size,
        ),
        Request::Append { path, id, .. } => row(
            Anyone,
            Perm::Append { path, id: *id },
            Grant::Nothing,
            changes(path),
            Runs::Meta,
            attributes::append,
        ),
        Request::Chmod { path, mode } => row(
            Anyone,
            Perm::Chmod(path, *mode),
            Grant::Nothing,
            Touches::Changes(path),
            Runs::Io,
            attributes::chmod,
        ),
        Request::Utimens {
            path,
            atime,
            mtime,
            link,
        } => row(
            Anyone,
            Perm::Utimens {
                path,
                atime: *atime,
                mtime: *mtime,
                link: *link,
            },
            Grant::Nothing,
            Touches::Changes(path),
            Runs::Meta,
            attributes::utimens,
        ),
        Request::Chown {
            path,
            uid,
            gid,
            link,
        } => row(
            Anyone,
            Perm::Chown {
                path,
                uid: *uid,
                gid: *gid,
                link: *link,
            },
            Grant::Nothing,
            Touches::Changes(path),
            Runs::Io,
            attributes::chown,
        ),
        Request::DropPrivs { path, id, cap } => row(
            Anyone,
            Perm::DropPrivs {
                path,
                id: *id,
                cap: *cap,
            },
            Grant::Write,
            changes(path),
            Runs::Io,
            attributes::drop_privs,
        ),
        Request::Rename { from, to, .. } => row(
            Anyone,
            Perm::Rename { from, to },
            Grant::Nothing,
            Touches::Moves { from, to },
            Runs::Io,
            rename::rename,
        ),
        // (by id: a server asking a link's home for its target)
        Request::Readlink { path, .. } => row(
            if path.is_empty() { Servers } else { Anyone },
            Perm::Lookup(path),
            Grant::Nothing,
            Touches::Looks(path),
            Runs::Local,
            entries::readlink,
        ),
        Request::Link { from, to } => row(
            Anyone,
            Perm::Link { from, to },
            Grant::Nothing,
            Touches::Links { from, to },
            Runs::Io,
            links::link,
        ),
        Request::Read {
            id,
            chunk,
            offset,
            cap,
            ..
        } => row(
            Anyone,
            Perm::Cap {
                id: *id,
                need: ACCESS_R,
                cap: *cap,
                size_of: None,
            },
            Grant::Nothing,
            nothing,
            chunk_runs(*chunk, *offset),
            data::read,
        ),
        Request::Write {
            id,
            chunk,
            offset,
            size_of,
            cap,
            ..
        }
        | Request::WriteData {
            id,
            chunk,
            offset,
            size_of,
            cap,
            ..
        } => row(
            Anyone,
            Perm::Cap {
                id: *id,
                need: ACCESS_W,
                cap: *cap,
                size_of: *size_of,
            },
            Grant::Nothing,
            // a size published to a name being moved would stay behind: the writer waits
            size_of.map_or(nothing, changes),
            chunk_runs(*chunk, *offset),
            if matches!(req, Request::Write { .. }) {
                data::write
            } else {
                data::write_data
            },
        ),
        Request::TruncateChunks { id, cap, .. } => row(
            Anyone,
            Perm::Cap {
                id: *id,
                need: ACCESS_W,
                cap: *cap,
                size_of: None,
            },
            Grant::Nothing,
            nothing,
            Runs::Io,
            data::truncate_chunks,
        ),
        // (an fsync that publishes a size is a writer's; an open-unlinked file's goes to its
        // home server, an empty path)
        Request::Fsync {
            id, size_of, cap, ..
        } => row(
            Anyone,
            Perm::Cap {
                id: *id,
                need: size_of.map_or(0, |_| ACCESS_W),
                cap: *cap,
                size_of: *size_of,
            },
            Grant::Nothing,
            size_of.map_or(nothing, changes),
            Runs::Local,
            data::fsync,
        ),
        Request::Hold { add, .. } => row(
            Anyone,
            Perm::Holds(add),
            Grant::Nothing,
            nothing,
            Runs::Local,
            open_files::hold,
        ),
        Request::Where { .. } => row(
            Anyone,
            none,
            Grant::Nothing,
            nothing,
            Runs::Local,
            open_files::where_is,
        ),
        // servers only, from here on
        Request::Forget { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            open_files::forget,
        ),
        Request::Moved { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Local,
            open_files::moved,
        ),
        Request::Linked { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            links::linked,
        ),
        Request::Attach { path, attr, .. } => row(
            Servers,
            none,
            Grant::Nothing,
            Touches::Arrives { path, id: attr.id },
            Runs::Io,
            rename::attach,
        ),
        Request::Detach { path, .. } => row(
            Servers,
            none,
            Grant::Nothing,
            Touches::Removes(path),
            Runs::Io,
            rename::detach,
        ),
        Request::Settle { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            rename::settle,
        ),
        Request::MoveState { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            rename::move_state,
        ),
        Request::Touch { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Local,
            directories::touch,
        ),
        Request::Seal { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            entries::seal,
        ),
        Request::DirSet { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Local,
            directories::dir_set,
        ),
        Request::DirList { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            directories::dir_list,
        ),
        // a replicated cluster's copies: applied on the net thread (the IO threads may all
        // wait for copies of their own), a sync of one on a thread of its own
        Request::Replicate { op, .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            if matches!(op, ReplOp::Sync { .. }) {
                Runs::Io
            } else {
                Runs::Net
            },
            control::replicate,
        ),
        Request::Resync { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            control::resync,
        ),
        Request::ResyncRead { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            control::resync_read,
        ),
        Request::MoveIn { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            control::move_in,
        ),
        Request::MoveData { .. } => row(
            Servers,
            none,
            Grant::Nothing,
            nothing,
            Runs::Io,
            control::move_data,
        ),
    }
}

/// The row of a `Request::Once`'s inner request (one level: a `Once` in a `Once` is refused).
fn row_of_once<'r>(req: &'r Request<'r>) -> Row<'r> {
    match req {
        Request::Once { .. } => Row {
            senders: Senders::Anyone,
            admit: [Key::Any; 3],
            perm: Perm::Nothing,
            grant: Grant::Nothing,
            touches: Touches::Nothing,
            runs: Runs::Net,
            handler: control::once,
        },
        req => row(req),
    }
}

impl Server {
    /// Runs `req` as this server itself (work a server does on its own behalf, or asks of
    /// itself as it would of another server): its handler, no admission, permission or
    /// grant.
    pub fn execute(&self, req: &Request<'_>) -> FsResult<Answer> {
        self.execute_with(req, &[], &mut [])
    }

    /// [`Server::execute`] with bulk data and a read buffer.
    pub fn execute_with(
        &self,
        req: &Request<'_>,
        bulk: &[u8],
        data: &mut [u8],
    ) -> FsResult<Answer> {
        let row = row(req);
        // (a rename's steps wait for the moves of what they touch, as anyone's)
        if let Some(e) = self.moving.guard(&row.touches) {
            return Err(e);
        }
        // what it changes is called back from client caches first, as anyone's change
        let _revocation = crate::invalidate::invalidate_own(self, req, &row.touches);
        let mut c = Call::own(Who::server());
        c.bulk = bulk;
        c.data = data;
        (row.handler)(self, &mut c, req)
    }
}

#[cfg(test)]
mod tests {
    use crate::fixture::{create, new_file, server};
    use crate::handlers::directories::FIND_SCAN_MAX;
    use crate::server::Answer;
    use madfs_proto::{Errno, Request, SizeMode};

    #[test]
    fn sizes_beyond_off_t_and_finds_that_match_nothing_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let o = server(dir.path());
        let mut d = [0u8; 16];
        let create = new_file;
        o.execute_with(&create("/f"), b"", &mut d).unwrap();
        let big = Request::SetSize {
            path: "/f",
            size: i64::MAX as u64 + 1,
            mode: SizeMode::Exact,
            id: 0,
        };
        assert_eq!(o.execute_with(&big, b"", &mut d).err(), Some(Errno::EFBIG));
        let append = Request::Append {
            path: "/f",
            len: u64::MAX,
            id: 0,
        };
        assert_eq!(
            o.execute_with(&append, b"", &mut d).err(),
            Some(Errno::EFBIG)
        );
        let n = FIND_SCAN_MAX + 100;
        for i in 0..n {
            o.execute_with(&create(&format!("/g{i}")), b"", &mut d)
                .unwrap();
        }
        let find = |after: &[u8]| {
            let req = Request::Find {
                dir: "/",
                filter: madfs_proto::FindFilter {
                    name: Some("nothing*"),
                    ..Default::default()
                },
                after,
                max_bytes: 1 << 20,
                servers: 0,
            };
            match o.execute_with(&req, b"", &mut Vec::new()).unwrap() {
                Answer::Found(paths, scanned, next) => (paths.len(), scanned, next),
                a => panic!("{a:?}"),
            }
        };
        let (found, scanned, next) = find(b"");
        assert_eq!((found, scanned), (0, FIND_SCAN_MAX));
        let (found, scanned, next) = find(&next.expect("a next page"));
        assert_eq!((found, scanned, next), (0, n + 1 - FIND_SCAN_MAX, None));
    }

    #[test]
    fn errnos() {
        let dir = tempfile::tempdir().unwrap();
        let o = server(dir.path());
        let mut d = [0u8; 16];
        let mut run = |r: Request<'_>| o.execute_with(&r, b"", &mut d).map(|_| ());
        assert_eq!(run(Request::Stat("/nope")), Err(Errno::ENOENT));
        assert_eq!(run(Request::Stat("/a/../b")), Err(Errno::EINVAL));
        assert_eq!(run(Request::Stat("relative")), Err(Errno::EINVAL));
        assert_eq!(
            run(Request::Mkdir {
                path: "/d",
                mode: 0o755,
                uid: 0,
                gid: 0
            }),
            Ok(())
        );
        assert_eq!(
            run(Request::Mkdir {
                path: "/d",
                mode: 0o755,
                uid: 0,
                gid: 0
            }),
            Err(Errno::EEXIST)
        );
        assert_eq!(
            run(Request::Mkdir {
                path: "/",
                mode: 0o755,
                uid: 0,
                gid: 0
            }),
            Err(Errno::EEXIST)
        );
        assert_eq!(run(create("/d", false)), Err(Errno::EISDIR));
        assert_eq!(run(create("/d/f", true)), Ok(()));
        assert_eq!(run(create("/d/f", true)), Err(Errno::EEXIST));
        assert_eq!(run(create("/d/f", false)), Ok(()));
        assert_eq!(run(Request::Rmdir { path: "/d" }), Err(Errno::ENOTEMPTY));
        assert_eq!(run(Request::Rmdir { path: "/d/f" }), Err(Errno::ENOTDIR));
        assert_eq!(run(Request::Unlink { path: "/d" }), Err(Errno::EISDIR));
        assert_eq!(run(Request::Unlink { path: "/d/f" }), Ok(()));
        assert_eq!(run(Request::Unlink { path: "/d/f" }), Err(Errno::ENOENT));
        assert_eq!(run(Request::Rmdir { path: "/d" }), Ok(()));
        assert_eq!(run(Request::Rmdir { path: "/" }), Err(Errno::EBUSY));
        assert_eq!(
            run(Request::Write {
                id: 1,
                chunk: 0,
                offset: u32::MAX,
                chunk_size: 4096,
                size_of: None,
                cap: Default::default(),
            }),
            Err(Errno::EFBIG)
        );
        assert_eq!(
            run(Request::TruncateChunks {
                id: 1,
                size: 0,
                chunk_size: 0,
                cap: Default::default(),
            }),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn size_and_data() {
        let dir = tempfile::tempdir().unwrap();
        let o = server(dir.path());
        let mut d = [0u8; 16];
        let Answer::Created { attr, .. } =
            o.execute_with(&create("/f", false), b"", &mut d).unwrap()
        else {
            panic!()
        };
        o.execute_with(
            &Request::Write {
                id: attr.id,
                chunk: 0,
                offset: 2,
                chunk_size: attr.chunk_size,
                size_of: None,
                cap: Default::default(),
            },
            b"hey",
            &mut d,
        )
        .unwrap();
        o.execute_with(
            &Request::SetSize {
                path: "/f",
                size: 5,
                mode: SizeMode::Max,
                id: 0,
            },
            b"",
            &mut d,
        )
        .unwrap();
        o.execute_with(
            &Request::SetSize {
                path: "/f",
                size: 3,
                mode: SizeMode::Max,
                id: 0,
            },
            b"",
            &mut d,
        )
        .unwrap();
        let Answer::Attr(a) = o.execute_with(&Request::Stat("/f"), b"", &mut d).unwrap() else {
            panic!()
        };
        assert_eq!(a.size, 5);
        let Answer::Data(n) = o
            .execute_with(
                &Request::Read {
                    id: attr.id,
                    chunk: 0,
                    offset: 0,
                    len: 16,
                    chunk_size: attr.chunk_size,
                    cap: Default::default(),
                },
                b"",
                &mut d,
            )
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(&d[..n], b"\0\0hey");
        let trunc = Request::Create {
            path: "/f",
            mode: 0,
            uid: 0,
            gid: 0,
            excl: false,
            trunc: true,
            access: 0,
            holder: 0,
        };
        let Answer::Created {
            attr,
            existed,
            old_size,
            ..
        } = o.execute_with(&trunc, b"", &mut d).unwrap()
        else {
            panic!()
        };
        assert_eq!((attr.size, existed, old_size), (0, true, 5));
    }
}
