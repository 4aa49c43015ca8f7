//! Directories: listings, server-side finds, the emptiness question, and what every server
//! keeps of every directory — the directory table (`crate::state::dirs`: kept current here,
//! learnt at start) and parent directory times (docs/consistency.md, "Directory times"):
//! adding or removing an entry marks its directory's mtime and ctime. The directory's entry
//! lives on the server its own path hashes to, the changed entry on another, so the change
//! travels as a `Touch` (server to server), sent by one thread per server that coalesces
//! them: each directory gets the latest time of the changes made to it, at most one `Touch`
//! per directory every `state::dir_times::EVERY`. A `Touch` (a merge operand) applies only
//! where the directory's ctime is older, so late or repeated ones do no harm, and an
//! explicit time set after them stays.

use super::Call;
use crate::server::{path_ok, Answer, Server};
use crate::state::dir_times::EVERY;
use crate::state::dirs::DirPerm;
use crate::who::Who;
use madfs_placement::{meta_server, split_parent};
use madfs_proto::{Attr, Errno, FsResult, Request};
use madfs_store::rocks::Change;
use madfs_store::{is_stub, MetadataStore};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Entries one `Find` request examines at most: a page ends there even when nothing matched,
/// so a search that matches nothing never scans a whole server in one request.
pub const FIND_SCAN_MAX: u64 = 64 * 1024;

/// Largest wait of a starting server for a peer's directories before it serves without them.
const LEARN_WAIT: Duration = Duration::from_secs(10);

impl Server {
    /// The entry `path` was added or removed at `time`: its directory's mtime and ctime move
    /// to `time` (not the root's, which is implicit).
    pub fn parent_changed(&self, path: &str, time: i64) {
        let Some((dir, _)) = split_parent(path) else {
            return;
        };
        if dir != "/" {
            self.dir_times.queue(dir, time);
        }
    }

    /// `Touch`: directory `dir` (this server's) changed at `time`.
    pub fn touch(&self, dir: &str, time: i64) {
        if let Ok(Some(a)) = self.meta.get(dir) {
            if a.is_dir() && (a.mtime < time || a.ctime < time) {
                if let Err(e) = self.meta.change(dir, Change::Touch { time }) {
                    tracing::warn!("times of directory {dir}: {e}");
                }
            }
        }
    }

    /// A directory of this server changed (`Some`: made or changed; `None`: gone): the
    /// table here and on every other server learns it before the request is answered. A
    /// server that did not take it is an error (EIO, after every other was told): it goes
    /// on checking the directory's old mode until it learns the new one (when it starts: it
    /// reads the tables of its peers before it checks anyone).
    pub fn dir_changed(&self, path: &str, a: Option<&Attr>) -> FsResult<()> {
        let perm = a.map(DirPerm::of);
        let version = a.map_or_else(crate::clock::now_ns, |a| a.ctime);
        self.dirs.apply(path, perm, version);
        if perm.is_some() {
            self.unsealed(path);
        }
        let p = perm.unwrap_or(DirPerm {
            mode: 0,
            uid: 0,
            gid: 0,
            version,
        });
        let req = Request::DirSet {
            path,
            mode: p.mode,
            uid: p.uid,
            gid: p.gid,
            version,
            gone: perm.is_none(),
            by: crate::invalidate::caller().map_or(0, |h| h.holder),
        };
        let mut missed = Ok(());
        for s in (0..self.peers.servers()).filter(|s| *s != self.here()) {
            if let Err(e) = self.peers.call(s, &req, &[]) {
                tracing::warn!(
                    "directory {path}: server {s} not told ({e}); it learns it when it starts"
                );
                missed = Err(Errno::EIO);
            }
        }
        missed
    }

    /// `DirSet` from a peer.
    pub fn dir_set(&self, path: &str, p: DirPerm, gone: bool) -> FsResult<Answer> {
        self.dirs.apply(path, (!gone).then_some(p), p.version);
        if !gone {
            self.unsealed(path); // a directory made again: a seal an rmdir left goes
        }
        Ok(Answer::Unit)
    }

    /// Learns the directory table: this server's own directories, then every peer's (see
    /// the module documentation). Runs on its own thread at start.
    pub fn learn_dirs(&self) {
        let started = Instant::now();
        let mut n = self.peers.servers();
        let mut missing: Vec<u32> = (0..n).collect();
        let mut warned = false;
        loop {
            // (a server that joins: the layout that has it, once applied, names it, and
            // servers that joined before it)
            let now = self.peers.servers();
            missing.extend(n..now);
            n = n.max(now);
            missing.retain(|&s| match self.learn_from(s) {
                Ok(()) => false,
                Err(e) => {
                    tracing::debug!("directories of server {s}: {e}");
                    true
                }
            });
            if missing.is_empty() {
                break;
            }
            // (a server that joins serves nothing before it is a member: it waits)
            if started.elapsed() > LEARN_WAIT && !warned && n > self.id {
                tracing::warn!(
                    "directories of server(s) {missing:?} not learnt in {LEARN_WAIT:?}: serving without them, still trying"
                );
                self.dirs.set_ready();
                warned = true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        tracing::debug!("directory table learnt: {} directories", self.dirs.len());
        self.dirs.set_ready();
    }

    fn learn_from(&self, s: u32) -> FsResult<()> {
        let mut after = Vec::new();
        loop {
            let (entries, next) = if s == self.here() {
                self.dir_page(&after)?
            } else {
                self.peers.dir_page(s, &after, self.id)?
            };
            for (path, mode, uid, gid, version) in entries {
                let p = DirPerm {
                    mode,
                    uid,
                    gid,
                    version,
                };
                self.dirs.apply(&path, Some(p), version);
            }
            match next {
                Some(k) => after = k,
                None => return Ok(()),
            }
        }
    }

    /// One page of this server's directories (`DirList`).
    #[allow(clippy::type_complexity)]
    pub fn dir_page(
        &self,
        after: &[u8],
    ) -> FsResult<(Vec<(String, u32, u32, u32, i64)>, Option<Vec<u8>>)> {
        let req = Request::Find {
            dir: "/",
            filter: madfs_proto::FindFilter {
                kind: Some(libc::S_IFDIR),
                ..Default::default()
            },
            after,
            max_bytes: 16 << 10,
            servers: 0,
        };
        let Answer::Found(paths, _, next) = self.find_here(&req, None)? else {
            return Err(Errno::EPROTO);
        };
        let mut out = Vec::with_capacity(paths.len() + 1);
        // the root directory, once a change of it is stored here (its server)
        if after.is_empty() {
            if let Some(a) = self.meta.root()? {
                out.push(("/".to_string(), a.mode & 0o7777, a.uid, a.gid, a.ctime));
            }
        }
        for rel in paths {
            let path = format!("/{rel}");
            if let Ok(a) = self.get(&path) {
                out.push((path, a.mode & 0o7777, a.uid, a.gid, a.ctime));
            }
        }
        Ok((out, next))
    }
}

impl Server {
    /// A server-side find (`Find`) on this server: every entry under `dir` held here that
    /// passes the filter, a page of them. For a client (`who`) whose user is not root, only
    /// what it could reach by listing its way down (read and search on every directory
    /// between) is listed or counted, and the cursor to go on from comes sealed for that user
    /// (`crate::cursor`): an entry of a directory it may not list is neither named, counted,
    /// nor told by where a page ends.
    pub(crate) fn find_here(&self, req: &Request<'_>, who: Option<&Who>) -> FsResult<Answer> {
        let Request::Find {
            dir,
            filter,
            after,
            max_bytes,
            servers,
        } = *req
        else {
            return Err(Errno::EINVAL);
        };
        path_ok(dir)?;
        asks_all(self, servers)?;
        // a client's cursors are sealed; a user but root sees what it may reach only
        let client = who.filter(|w| w.role != madfs_proto::Role::Peer);
        let user = client.filter(|w| w.uid != 0);
        let key = self.peers.key();
        let opened;
        let after = match client {
            Some(w) => {
                opened = crate::cursor::open(key, w.uid, after)?;
                &opened[..]
            }
            None => after,
        };
        let budget = (max_bytes as usize).min(self.max_list_bytes);
        let mut found = Vec::new();
        let mut bytes = 0usize;
        // examined (bounds the work of one page) and counted (what the user may know of)
        let (mut examined, mut counted) = (0u64, 0u64);
        let matcher = filter.matcher();
        // only a server's own directory rename sees what other finds do not
        let hidden = |parent: &str, name: &str| {
            (!filter.pending && self.moving.hides(parent, name))
                || ((self.replica.is_some() || self.strays.any()) && !self.in_set(parent, name))
        };
        // matches travel relative to `dir` (fewer bytes, so fewer pages)
        let base = if dir == "/" {
            "/".to_string()
        } else {
            format!("{dir}/")
        };
        let rel_of = |parent: &str, name: &str| {
            if parent == dir {
                name.to_string()
            } else {
                let sub = parent.strip_prefix(base.as_str()).unwrap_or(parent);
                format!("{sub}/{name}")
            }
        };
        // entries come grouped by their directory: its verdict is asked once
        let mut last: Option<(String, bool)> = None;
        let mut visible = |parent: &str| -> bool {
            let Some(w) = user else {
                return true;
            };
            if let Some((p, v)) = &last {
                if p == parent {
                    return *v;
                }
            }
            let v = parent == dir || self.reachable(w, dir, &rel_of(parent, "x"));
            last = Some((parent.to_owned(), v));
            v
        };
        let next = self.meta.scan_subtree(dir, after, &mut |parent, name, a| {
            examined += 1;
            if visible(parent) {
                counted += 1;
                if matcher.matches(name, a) && !hidden(parent, name) {
                    let rel = rel_of(parent, name);
                    bytes += rel.len() + 8;
                    found.push(rel);
                }
            }
            bytes < budget && examined < FIND_SCAN_MAX
        })?;
        let next = match (next, client) {
            (Some(k), Some(w)) => Some(crate::cursor::seal(key, w.uid, &k)?),
            (next, _) => next,
        };
        Ok(Answer::Found(found, counted, next))
    }
}

pub(crate) fn find(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    s.find_here(req, Some(c.who))
}

pub(crate) fn readdir(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Readdir {
        dir,
        start,
        max_bytes,
        servers,
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    path_ok(dir)?;
    asks_all(s, servers)?;
    let max = (max_bytes as usize).min(s.max_list_bytes);
    let (v, next) = slice(s, dir, start, max)?;
    Ok(Answer::Dirents(v, next))
}

/// Does a listing sent to `servers` server ids (0: not checked) ask every server of this
/// one's layout? `EREMCHG` when servers joined that the sender does not know (it learns the
/// layout and asks again), `EAGAIN` when this server has not applied their join yet.
fn asks_all(s: &Server, servers: u32) -> FsResult<()> {
    let n = s.peers.servers();
    match servers {
        0 => Ok(()),
        k if k < n => Err(Errno::EREMCHG),
        k if k > n => Err(Errno::EAGAIN),
        _ => Ok(()),
    }
}

/// This server's entries of `dir` from position `start`, about `max` bytes of them (the
/// store's estimate), as a listing shows them: not those moved away, and only the replica
/// set's asked for. The position to go on from.
fn slice(
    s: &Server,
    dir: &str,
    start: u64,
    max: usize,
) -> FsResult<(Vec<madfs_store::Entry>, Option<u64>)> {
    let (mut v, next) = s.meta.list(dir, start, max)?;
    if s.moving.active() {
        v.retain(|e| !s.moving.hides(dir, &e.name));
    }
    if s.replica.is_some() || s.strays.any() {
        // this server holds other replica sets' entries too (or a slot move's records):
        // the set asked for (its own)
        v.retain(|e| s.in_set(dir, &e.name));
    }
    Ok((v, next))
}

/// `LookDir` (statahead): this server's slice of `dir`, entries with their attributes
/// (packed, `madfs_proto::looks_push`), under a lease on the slice
/// (`crate::state::leases`). A file with several names is sent without its attributes
/// (they are kept by id, and other servers' names of it change them).
pub(crate) fn look_dir(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::LookDir {
        dir,
        start,
        max_bytes,
        servers,
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    path_ok(dir)?;
    asks_all(s, servers)?;
    // (root's requests skip the permission check, which finds the directory)
    if s.dirs.get(dir).is_none() {
        return Err(Errno::ENOENT);
    }
    // (granted before the scan: a change that comes after it calls the page back)
    let lease_ms = s.leases.grant_page(dir, c.lease_holder());
    let max = (max_bytes as usize).min(s.max_list_bytes);
    // (the store counts about 48 bytes an entry besides its name; a packed one takes 67)
    let (v, next) = slice(s, dir, start, max / 2)?;
    let mut page = Vec::with_capacity(v.len() * (madfs_proto::ATTR_BYTES + 24));
    for e in &v {
        let several = is_stub(&e.attr) || (!e.attr.is_dir() && e.attr.nlink > 1);
        madfs_proto::looks_push(&mut page, &e.name, (!several).then_some(&e.attr));
    }
    Ok(Answer::Looks(page, next, lease_ms))
}

pub(crate) fn has_children(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::HasChildren { dir } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(dir)?;
    s.has_children(dir).map(Answer::Bool)
}

pub(crate) fn dir_set(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::DirSet {
        path,
        mode,
        uid,
        gid,
        version,
        gone,
        ..
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    path_ok(path)?;
    let p = DirPerm {
        mode,
        uid,
        gid,
        version,
    };
    s.dir_set(path, p, gone)
}

pub(crate) fn dir_list(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::DirList {
        after,
        from,
        started,
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    // a server that joins learns once this one has applied its join (and tells it every
    // directory made from then on)
    if from >= s.peers.servers() {
        return Err(Errno::EAGAIN);
    }
    s.peers.restarted(from, started);
    let (v, next) = s.dir_page(after)?;
    Ok(Answer::Dirs(v, next))
}

pub(crate) fn touch(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Touch { dir, time } = *req else {
        return Err(Errno::EINVAL);
    };
    path_ok(dir)?;
    s.touch(dir, time);
    Ok(Answer::Unit)
}

/// Starts the thread that sends queued touches to the directories' servers.
pub fn start_times(
    ops: Arc<Server>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("madfs-dirtimes".into())
        .spawn(move || {
            let mut sent: HashMap<String, Instant> = HashMap::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let now = Instant::now();
                let due: Vec<(String, i64)> = {
                    let mut p = ops.dir_times.lock();
                    if p.is_empty() {
                        let (g, _) = ops
                            .dir_times
                            .wake
                            .wait_timeout(p, Duration::from_millis(200))
                            .unwrap_or_else(|e| e.into_inner());
                        p = g;
                    }
                    let ready: Vec<String> = p
                        .keys()
                        .filter(|d| sent.get(*d).is_none_or(|t| now - *t >= EVERY))
                        .cloned()
                        .collect();
                    ready
                        .into_iter()
                        .filter_map(|d| p.remove_entry(&d))
                        .collect()
                };
                if due.is_empty() {
                    // every queued directory was touched less than EVERY ago: sleep until the
                    // first of them is due (a 2 ms wait at most, not a poll)
                    let first = sent.values().map(|t| EVERY.saturating_sub(now - *t)).min();
                    std::thread::sleep(first.unwrap_or(EVERY).max(Duration::from_micros(100)));
                }
                sent.retain(|_, t| now - *t < EVERY);
                for (dir, time) in due {
                    let s = meta_server(&dir, &ops.peers.layout());
                    // (a replicated cluster: through the set's primary, which copies it)
                    if s == ops.here() && ops.replica.is_none() {
                        ops.touch(&dir, time);
                    } else if let Err(e) =
                        ops.peers.call(s, &Request::Touch { dir: &dir, time }, &[])
                    {
                        tracing::debug!("touch of directory {dir} on server {s}: {e}");
                    }
                    sent.insert(dir, Instant::now());
                }
            }
        })
        .map(drop)
}
