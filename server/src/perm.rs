//! Permissions, checked by the server with the identity a connection proved
//! (docs/security.md), as the kernel checks them: search on every ancestor, write and search
//! on the parent to make or remove an entry, the sticky bit, read/write on open and truncate,
//! the owner rules of chmod, chown and utimens.
//!
//! Keys hold full paths, so a path's ancestors live on other servers. Every server keeps
//! every directory's mode and owner in memory ([`DirTable`], ShardFS's idea: directories are
//! few and change rarely): an ancestor check is a few hash lookups, never a network round
//! trip. A change of a directory (mkdir, rmdir, chmod, chown, rename) is sent to every
//! other server (`DirSet`) before it is answered. A starting server learns the table from
//! its own data and every peer (`DirList`) before it checks anyone but root; an update
//! never overwrites a newer one (its version is the directory's ctime).

use crate::auth::Who;
use crate::ops::{Answer, Ops};
use madfs_placement::split_parent;
use madfs_proto::{
    Attr, Errno, FsResult, Request, SizeMode, TimeSpec, ACCESS_R, ACCESS_W, ACCESS_X, S_IFMT,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// What the table keeps of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirPerm {
    /// Permission bits (with the sticky bit).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// ctime at the directory's server: an update with an older one is stale.
    pub version: i64,
}

impl DirPerm {
    /// From a directory's attributes.
    pub fn of(a: &Attr) -> DirPerm {
        DirPerm {
            mode: a.mode & 0o7777,
            uid: a.uid,
            gid: a.gid,
            version: a.ctime,
        }
    }
}

/// Every directory of the cluster (see the module documentation). Removed directories stay
/// as tombstones (`None`) so that a late, older update cannot bring them back.
#[derive(Default)]
pub struct DirTable {
    map: RwLock<HashMap<String, (Option<DirPerm>, i64)>>,
    ready: AtomicBool,
}

impl DirTable {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, (Option<DirPerm>, i64)>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory at `path` (the root is always there: as learnt, else [`ROOT`] until
    /// the server sets its cluster's default).
    pub fn get(&self, path: &str) -> Option<DirPerm> {
        let m = self.read();
        match m.get(path) {
            Some((p, _)) => *p,
            None if path == "/" => Some(ROOT),
            None => None,
        }
    }

    /// Applies an update: `Some` (made or changed) or `None` (gone), unless the table holds
    /// a newer one.
    pub fn apply(&self, path: &str, perm: Option<DirPerm>, version: i64) {
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        match m.get(path) {
            Some((_, v)) if *v > version => {}
            _ => {
                m.insert(path.to_owned(), (perm, version));
            }
        }
    }

    /// Is `path` known to be a removed directory (a tombstone: its server said it is gone)?
    /// (Unknown is not removed: the table is kept best-effort.)
    pub fn removed(&self, path: &str) -> bool {
        path != "/" && matches!(self.read().get(path), Some((None, _)))
    }

    /// Has the table been learnt from every server (or given up waiting for the missing)?
    pub fn ready(&self) -> bool {
        self.ready.load(Relaxed)
    }

    /// Number of live directories (tests, logs).
    pub fn len(&self) -> usize {
        self.read().values().filter(|(p, _)| p.is_some()).count()
    }

    /// Is the table empty?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The root directory before the server set its cluster's default (`ops::root_attr`).
const ROOT: DirPerm = DirPerm {
    mode: 0o755,
    uid: 0,
    gid: 0,
    version: 0,
};

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;

/// May `who` do `want` (`ACCESS_*` bits) to an object of `mode`, `uid`, `gid`? Root may read
/// and write anything, and execute what anyone may execute (directories: always).
pub fn allowed(who: &Who, mode: u32, uid: u32, gid: u32, want: u32) -> bool {
    if who.uid == 0 {
        return want & ACCESS_X == 0 || mode & S_IFMT == libc::S_IFDIR || mode & 0o111 != 0;
    }
    let bits = if who.uid == uid {
        (mode >> 6) & 7
    } else if who.groups.contains(&gid) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    bits & want == want
}

/// Largest wait of a starting server for a peer's directories before it serves without them.
const LEARN_WAIT: Duration = Duration::from_secs(10);

impl Ops {
    /// Search permission on every ancestor of `path` (not `path` itself): a missing one is
    /// ENOENT, one `who` may not search EACCES.
    fn search(&self, who: &Who, path: &str) -> FsResult<()> {
        if path == "/" {
            return Ok(());
        }
        if !path.starts_with('/') {
            return Err(Errno::EINVAL); // as the request itself would answer
        }
        // every prefix of `path` that ends before one of its slashes: "/", "/a", "/a/b", …
        let mut end = 0;
        loop {
            let dir = if end == 0 { "/" } else { &path[..end] };
            let p = self.dirs.get(dir).ok_or(Errno::ENOENT)?;
            if !allowed(who, libc::S_IFDIR | p.mode, p.uid, p.gid, ACCESS_X) {
                return Err(Errno::EACCES);
            }
            match path[end + 1..].find('/') {
                Some(i) => end += 1 + i,
                None => return Ok(()),
            }
        }
    }

    /// The parent of `path`, checked for search (ancestors) and write + search (itself):
    /// what making or removing an entry needs. Returns the parent's permissions.
    fn parent_writable(&self, who: &Who, path: &str) -> FsResult<DirPerm> {
        self.search(who, path)?;
        let (parent, _) = split_parent(path).ok_or(Errno::EBUSY)?;
        let p = self.dirs.get(parent).ok_or(Errno::ENOENT)?;
        if !allowed(
            who,
            libc::S_IFDIR | p.mode,
            p.uid,
            p.gid,
            ACCESS_W | ACCESS_X,
        ) {
            return Err(Errno::EACCES);
        }
        Ok(p)
    }

    /// The sticky rule: in a sticky directory only the entry's owner, the directory's owner
    /// or root may remove or rename an entry.
    fn sticky_ok(who: &Who, parent: &DirPerm, entry: &Attr) -> FsResult<()> {
        if parent.mode & S_ISVTX != 0
            && who.uid != 0
            && who.uid != entry.uid
            && who.uid != parent.uid
        {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// The attributes of `path`, from whichever server holds it.
    pub(crate) fn stat_anywhere(&self, path: &str) -> FsResult<Attr> {
        let s = madfs_placement::meta_server(path, self.peers.servers());
        if s == self.here() {
            return self.get(path);
        }
        match self.peers.call(s, &Request::Stat(path), &[])? {
            madfs_proto::Reply::Attr(a) => Ok(a),
            _ => Err(Errno::EPROTO),
        }
    }

    fn owner_or_root(who: &Who, a: &Attr) -> FsResult<()> {
        if who.uid == 0 || who.uid == a.uid {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }

    fn need(who: &Who, a: &Attr, want: u32) -> FsResult<()> {
        if a.is_link() || allowed(who, a.mode, a.uid, a.gid, want) {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    /// Checks `req` for `who` before it runs. Root (not squashed) is checked by nothing: it
    /// may do everything the kernel lets root do, and existence is checked by the request
    /// itself. May rewrite the request (a chmod by someone outside the file's group loses
    /// S_ISGID): the result is what to run instead.
    /// Is `cap` a valid grant of write access to file `id` for `who` (the capability of an
    /// open for writing stands for the file's mode bits)?
    fn grants_write(&self, who: &Who, cap: &madfs_proto::Cap, id: u64) -> bool {
        cap.id == id
            && cap.access & ACCESS_W != 0
            && cap.uid == who.uid
            && crate::cap::valid(self.peers.key(), cap)
    }

    pub fn check<'r>(&self, who: &Who, req: &Request<'r>) -> FsResult<Option<Request<'r>>> {
        if who.uid == 0 {
            return Ok(None);
        }
        if !self.dirs.ready() {
            return Err(Errno::EAGAIN); // still learning the directories: the client retries
        }
        let local = |p: &str| self.get(p);
        match *req {
            Request::Stat(path) => self.search(who, path)?,
            Request::Open { path, access, .. } => {
                self.search(who, path)?;
                Self::need(who, &local(path)?, access)?;
            }
            Request::Create {
                path,
                access,
                excl,
                trunc,
                ..
            } => match local(path) {
                Ok(a) if !excl => {
                    self.search(who, path)?;
                    // as the kernel's may_open: O_TRUNC of a regular file needs write
                    let trunc = if trunc && a.is_file() { ACCESS_W } else { 0 };
                    Self::need(who, &a, access | trunc)?;
                }
                Ok(_) => self.search(who, path)?,
                Err(Errno::ENOENT) => drop(self.parent_writable(who, path)?),
                Err(e) => return Err(e),
            },
            Request::Mkdir { path, .. } | Request::Symlink { path, .. } => {
                self.parent_writable(who, path)?;
            }
            Request::Mknod { path, mode, .. } => {
                // as the kernel: a device node needs CAP_MKNOD (root); a FIFO or socket not
                if matches!(mode & libc::S_IFMT, libc::S_IFCHR | libc::S_IFBLK) {
                    return Err(Errno::EPERM);
                }
                self.parent_writable(who, path)?;
            }
            Request::Unlink { path } | Request::Rmdir { path } => {
                let p = self.parent_writable(who, path)?;
                Self::sticky_ok(who, &p, &local(path)?)?;
            }
            Request::Rename { from, to, .. } => {
                let p = self.parent_writable(who, from)?;
                let a = local(from)?;
                Self::sticky_ok(who, &p, &a)?;
                let q = self.parent_writable(who, to)?;
                if q.mode & S_ISVTX != 0 && who.uid != q.uid {
                    // a target it replaces is removed from a sticky directory: its owner's
                    // (or the directory owner's) to remove
                    match self.stat_anywhere(to) {
                        Ok(t) => Self::sticky_ok(who, &q, &t)?,
                        Err(Errno::ENOENT) => {}
                        Err(e) => return Err(e),
                    }
                }
                // a directory that changes parent has its ".." rewritten: write on it too
                if a.is_dir() && split_parent(from).map(|x| x.0) != split_parent(to).map(|x| x.0) {
                    Self::need(who, &a, ACCESS_W)?;
                }
            }
            // the open's write capability, else write permission on the file
            Request::DropPrivs { path, id, cap } if !self.grants_write(who, &cap, id) => {
                let a = if path.is_empty() {
                    self.orphan(id)?.ok_or(Errno::ENOENT)?
                } else {
                    self.search(who, path)?;
                    local(path)?
                };
                Self::need(who, &a, ACCESS_W)?;
            }
            Request::Link { from, to } => {
                // the kernel's order: the source, the target's lookup (EEXIST), the
                // protected_hardlinks rule, then write on the target's directory
                self.search(who, from)?;
                let a = local(from)?;
                self.search(who, to)?;
                match self.stat_anywhere(to) {
                    Ok(_) => return Err(Errno::EEXIST),
                    Err(Errno::ENOENT) => {}
                    Err(e) => return Err(e),
                }
                // Linux's protected_hardlinks (on by default): someone else's file only if it
                // is a regular file, not set-id, that `who` may read and write
                if who.uid != a.uid
                    && (!a.is_file()
                        || a.mode & S_ISUID != 0
                        || a.mode & (S_ISGID | 0o010) == (S_ISGID | 0o010)
                        || !allowed(who, a.mode, a.uid, a.gid, ACCESS_R | ACCESS_W))
                {
                    return Err(Errno::EPERM);
                }
                self.parent_writable(who, to)?;
            }
            Request::Readdir { dir, .. }
            | Request::HasChildren { dir }
            | Request::Find { dir, .. } => {
                self.search(who, dir)?;
                let d = self.dirs.get(dir).ok_or(Errno::ENOENT)?;
                if !allowed(who, libc::S_IFDIR | d.mode, d.uid, d.gid, ACCESS_R) {
                    return Err(Errno::EACCES);
                }
            }
            // an open-unlinked file (its home server's orphan record): what its descriptor
            // was granted, or its owner's
            Request::SetSize {
                path: "", mode, id, ..
            } => {
                let a = self.orphan(id)?.ok_or(Errno::ENOENT)?;
                let granted = match mode {
                    SizeMode::ExactWith(cap) | SizeMode::MaxWith(cap) => {
                        self.grants_write(who, &cap, id)
                    }
                    _ => false,
                };
                if !granted && a.uid != who.uid {
                    Self::need(who, &a, ACCESS_W)?;
                }
            }
            Request::Append { path: "", id, .. } => {
                let a = self.orphan(id)?.ok_or(Errno::ENOENT)?;
                if a.uid != who.uid {
                    Self::need(who, &a, ACCESS_W)?;
                }
            }
            Request::SetSize { path, mode, .. } => {
                self.search(who, path)?;
                match mode {
                    SizeMode::Max | SizeMode::Exact => Self::need(who, &local(path)?, ACCESS_W)?,
                    SizeMode::ExactWith(cap) | SizeMode::MaxWith(cap) => {
                        let a = local(path)?;
                        if !self.grants_write(who, &cap, a.id) {
                            Self::need(who, &a, ACCESS_W)?;
                        }
                    }
                }
            }
            Request::Append { path, .. } => {
                self.search(who, path)?;
                Self::need(who, &local(path)?, ACCESS_W)?;
            }
            Request::Chmod { path, mode } => {
                self.search(who, path)?;
                let a = local(path)?;
                if a.is_link() {
                    return Ok(None); // answers ELOOP: the client follows it, checked there
                }
                Self::owner_or_root(who, &a)?;
                if !who.groups.contains(&a.gid) && mode & S_ISGID != 0 {
                    // as the kernel: setting S_ISGID needs membership of the file's group
                    return Ok(Some(Request::Chmod {
                        path,
                        mode: mode & !S_ISGID,
                    }));
                }
            }
            Request::Chown {
                path,
                uid,
                gid,
                link,
            } => {
                self.search(who, path)?;
                let a = local(path)?;
                if a.is_link() && !link {
                    return Ok(None); // answers ELOOP: the client follows it
                }
                // only root gives a file away; the owner may pick one of its own groups
                if uid != u32::MAX && uid != a.uid {
                    return Err(Errno::EPERM);
                }
                // chown(f, -1, -1) changes nothing but ctime: anyone may (as the kernel)
                if uid != u32::MAX || gid != u32::MAX {
                    Self::owner_or_root(who, &a)?;
                }
                if gid != u32::MAX && gid != a.gid && !who.groups.contains(&gid) {
                    return Err(Errno::EPERM);
                }
            }
            Request::Utimens {
                path,
                atime,
                mtime,
                link,
            } => {
                self.search(who, path)?;
                let a = local(path)?;
                if a.is_link() && !link {
                    return Ok(None); // answers ELOOP: the client follows it
                }
                let now_only = matches!(atime, TimeSpec::Now | TimeSpec::Omit)
                    && matches!(mtime, TimeSpec::Now | TimeSpec::Omit);
                if who.uid != a.uid {
                    if !now_only {
                        return Err(Errno::EPERM);
                    }
                    Self::need(who, &a, ACCESS_W)?;
                }
            }
            _ => {}
        }
        Ok(None)
    }

    /// Could `who` find `rel` (a path below `dir`) by listing and searching its way down
    /// from `dir`: read and search on every directory between them?
    pub fn reachable(&self, who: &Who, dir: &str, rel: &str) -> bool {
        let mut path = if dir == "/" {
            String::new()
        } else {
            dir.to_owned()
        };
        let mut parts = rel.split('/').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                return true; // the entry itself
            }
            path.push('/');
            path.push_str(part);
            match self.dirs.get(&path) {
                Some(p)
                    if allowed(
                        who,
                        libc::S_IFDIR | p.mode,
                        p.uid,
                        p.gid,
                        ACCESS_R | ACCESS_X,
                    ) => {}
                _ => return false,
            }
        }
        true
    }

    /// A chown of anything but a directory clears its set-user-id bit, and its set-group-id bit when
    /// it is group-executable (as Linux does, for root too): the mode to store.
    pub fn chown_mode(a: &Attr, uid: u32, gid: u32) -> u32 {
        let changes = (uid != u32::MAX && uid != a.uid) || (gid != u32::MAX && gid != a.gid);
        // every type but a directory (the kernel's chown: FIFOs and devices too)
        if !changes || a.is_dir() {
            return a.mode;
        }
        let mut m = a.mode & !S_ISUID;
        if m & 0o010 != 0 {
            m &= !S_ISGID;
        }
        m
    }

    /// A directory of this server changed (`Some`: made or changed; `None`: gone): the
    /// table here and on every other server learns it before the request is answered.
    /// (Servers that cannot be reached learn it when they start: they read the tables of
    /// their peers before they check anyone.)
    pub fn dir_changed(&self, path: &str, a: Option<&Attr>) {
        let perm = a.map(DirPerm::of);
        let version = a.map_or_else(crate::ops::now_ns, |a| a.ctime);
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
        };
        for s in (0..self.peers.servers()).filter(|s| *s != self.here()) {
            if let Err(e) = self.peers.call(s, &req, &[]) {
                tracing::warn!(
                    "directory {path}: server {s} not told ({e}); it learns it when it starts"
                );
            }
        }
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
        let n = self.peers.servers();
        let mut missing: Vec<u32> = (0..n).collect();
        let mut warned = false;
        loop {
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
            if started.elapsed() > LEARN_WAIT && !warned {
                tracing::warn!(
                    "directories of server(s) {missing:?} not learnt in {LEARN_WAIT:?}: serving without them, still trying"
                );
                self.dirs.ready.store(true, Relaxed);
                warned = true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        tracing::debug!("directory table learnt: {} directories", self.dirs.len());
        self.dirs.ready.store(true, Relaxed);
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
        };
        let Answer::Found(paths, _, next) = self.execute(&req, &[], &mut [])? else {
            return Err(Errno::EPROTO);
        };
        let mut out = Vec::with_capacity(paths.len() + 1);
        // the root directory, once a change of it is stored here (its server)
        if after.is_empty() {
            if let Some(a) = crate::store::MetadataStore::root(&self.meta)? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use madfs_proto::Role;

    fn who(uid: u32, groups: &[u32]) -> Who {
        Who {
            uid,
            gid: groups[0],
            groups: groups.to_vec(),
            role: Role::Client,
            set: None,
        }
    }

    #[test]
    fn mode_bits_as_the_kernel_reads_them() {
        let f = libc::S_IFREG;
        let alice = who(1000, &[100, 20]);
        assert!(allowed(&alice, f | 0o600, 1000, 1, ACCESS_R | ACCESS_W));
        assert!(!allowed(&alice, f | 0o066, 1000, 100, ACCESS_R)); // owner bits only
        assert!(allowed(&alice, f | 0o040, 7, 20, ACCESS_R)); // a supplementary group
        assert!(!allowed(&alice, f | 0o404, 7, 20, ACCESS_R)); // group bits only
        assert!(allowed(&alice, f | 0o004, 7, 8, ACCESS_R));
        assert!(allowed(&alice, f, 7, 8, 0));
        let root = who(0, &[0]);
        assert!(allowed(&root, f, 7, 8, ACCESS_R | ACCESS_W));
        assert!(!allowed(&root, f | 0o666, 7, 8, ACCESS_X));
        assert!(allowed(&root, f | 0o100, 7, 8, ACCESS_X));
        assert!(allowed(&root, libc::S_IFDIR, 7, 8, ACCESS_X));
    }

    #[test]
    fn newer_updates_win_and_tombstones_stay() {
        let t = DirTable::default();
        let p = |mode, version| DirPerm {
            mode,
            uid: 1,
            gid: 1,
            version,
        };
        t.apply("/a", Some(p(0o755, 10)), 10);
        t.apply("/a", Some(p(0o700, 5)), 5); // stale
        assert_eq!(t.get("/a").unwrap().mode, 0o755);
        t.apply("/a", None, 20);
        t.apply("/a", Some(p(0o755, 10)), 10); // a late page of a table being learnt
        assert_eq!(t.get("/a"), None);
        t.apply("/a", Some(p(0o711, 30)), 30); // made again
        assert_eq!(t.get("/a").unwrap().mode, 0o711);
        assert_eq!(t.get("/").unwrap().mode, 0o755);
        t.apply("/", Some(p(0o1777, 0)), 0);
        assert_eq!(t.get("/").unwrap().mode, 0o1777);
    }
}
