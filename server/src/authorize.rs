//! Authorization (docs/security.md, "Permissions"): may the connection's user do what a
//! request asks, as the Linux kernel decides it (fs/namei.c `generic_permission`,
//! `may_lookup`, `may_create`, `may_delete`, `may_open`, `may_linkat`; fs/attr.c
//! `setattr_prepare`; fs/inode.c `inode_owner_or_capable`)? The table of requests
//! (`crate::table`) names, per request, which of these checks it needs ([`Perm`]); the
//! pipeline asks this module, and no handler decides a permission again.
//!
//! Root (uid 0 as proved, not squashed) passes every check, as `CAP_DAC_OVERRIDE` and
//! `CAP_FOWNER` do; servers acting for each other (role `Peer`) are not checked. Keys hold
//! full paths, so a path's ancestors live on other servers: their modes come from the
//! directory table every server keeps ([`crate::state::dirs`]).

use crate::server::Server;
use crate::state::dirs::DirPerm;
use crate::who::Who;
use madfs_placement::split_parent;
use madfs_proto::{
    Attr, Cap, Errno, FsResult, Request, SizeMode, TimeSpec, ACCESS_R, ACCESS_W, ACCESS_X, S_IFMT,
};

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;

/// What a request needs to be allowed (a row of `crate::table`).
#[derive(Debug, Clone, Copy)]
pub enum Perm<'r> {
    /// Nothing (or only what its sender role says).
    Nothing,
    /// Search on every ancestor of the path (a lookup: `stat`, `readlink`).
    Lookup(&'r str),
    /// An existing entry opened wanting `access` (`access(2)` too).
    Open { path: &'r str, access: u32 },
    /// `open(O_CREAT)`: [`Perm::Open`] of an existing file (`O_TRUNC` wants write), else
    /// [`Perm::Create`].
    CreateOrOpen {
        path: &'r str,
        access: u32,
        excl: bool,
        trunc: bool,
    },
    /// A new entry in the path's directory (`mkdir`, `symlink`).
    Create(&'r str),
    /// A special file (`mknod`): a device needs root, as `CAP_MKNOD`.
    Mknod(&'r str, u32),
    /// The entry's removal from its directory (`unlink`, `rmdir`).
    Delete(&'r str),
    /// `rename(from, to)`.
    Rename { from: &'r str, to: &'r str },
    /// `link(from, to)`.
    Link { from: &'r str, to: &'r str },
    /// Reading a directory (a listing, a find, the emptiness question).
    List(&'r str),
    /// Looking up every entry of a directory (statahead: what a stat of each needs).
    LookIn(&'r str),
    /// `chmod`.
    Chmod(&'r str, u32),
    /// `chown` (`link`: `lchown`).
    Chown {
        path: &'r str,
        uid: u32,
        gid: u32,
        link: bool,
    },
    /// `utimensat` (`link`: `AT_SYMLINK_NOFOLLOW`).
    Utimens {
        path: &'r str,
        atime: TimeSpec,
        mtime: TimeSpec,
        link: bool,
    },
    /// A size change: `truncate` (`Exact`), `ftruncate` (`ExactWith`), a writer's publication
    /// (`Max`, `MaxWith`); an empty path: the open-unlinked file `id` at its home.
    Size {
        path: &'r str,
        mode: SizeMode,
        id: u64,
    },
    /// An `O_APPEND` reservation (empty path as in [`Perm::Size`]).
    Append { path: &'r str, id: u64 },
    /// Clearing the set-id bits before a write: the open's write capability, or write.
    DropPrivs { path: &'r str, id: u64, cap: Cap },
    /// A request naming file `id` by its capability, wanting `need`; a size it publishes
    /// (`size_of`) must be that file's.
    Cap {
        id: u64,
        need: u32,
        cap: Cap,
        size_of: Option<&'r str>,
    },
    /// Open references added: every file named was granted to the user (capabilities; their
    /// expiry does not matter: they prove an open, not a right to the data). (What a `Hold`
    /// says it holds already is sorted by its handler: a process may hold files of other
    /// clusters too, whose capabilities are no grants here.)
    Holds(&'r [Cap]),
}

/// `generic_permission`: may `who` do `want` (`ACCESS_*` bits) to an object of `mode`,
/// `uid`, `gid`? Root may read and write anything, and execute what anyone may execute
/// (directories: always).
pub fn generic_permission(who: &Who, mode: u32, uid: u32, gid: u32, want: u32) -> bool {
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

fn dir_permission(who: &Who, p: &DirPerm, want: u32) -> bool {
    generic_permission(who, libc::S_IFDIR | p.mode, p.uid, p.gid, want)
}

/// `inode_owner_or_capable`: the owner, or root.
fn owner_or_capable(who: &Who, a: &Attr) -> FsResult<()> {
    if who.uid == 0 || who.uid == a.uid {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

/// `may_open`'s permission part: `access` on the object (a symbolic link answers for
/// itself: the client follows it, and the open of its target is checked there).
fn may_open(who: &Who, a: &Attr, access: u32) -> FsResult<()> {
    if a.is_link() || generic_permission(who, a.mode, a.uid, a.gid, access) {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// The sticky rule of `may_delete` (`check_sticky`): in a sticky directory only the entry's
/// owner, the directory's owner or root may remove or rename an entry.
fn check_sticky(who: &Who, parent: &DirPerm, entry: &Attr) -> FsResult<()> {
    if parent.mode & S_ISVTX != 0 && who.uid != 0 && who.uid != entry.uid && who.uid != parent.uid {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// Is `cap` a genuine grant of `need` on file `id` to `who`, still good?
pub fn cap_permits(s: &Server, who: &Who, cap: &Cap, id: u64, need: u32) -> bool {
    cap.id == id
        && cap.access & need == need
        && cap.uid == who.uid
        && crate::cap::valid(s.peers.key(), cap)
}

impl Server {
    /// `may_lookup` along the path: search permission on every ancestor of `path` (not
    /// `path` itself); a missing one is ENOENT, one `who` may not search EACCES.
    pub fn may_lookup(&self, who: &Who, path: &str) -> FsResult<()> {
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
            if !dir_permission(who, &p, ACCESS_X) {
                return Err(Errno::EACCES);
            }
            match path[end + 1..].find('/') {
                Some(i) => end += 1 + i,
                None => return Ok(()),
            }
        }
    }

    /// Write and search on `path`'s directory (after [`Server::may_lookup`]): what making or
    /// removing an entry needs. Returns the directory's permissions.
    fn may_write_parent(&self, who: &Who, path: &str) -> FsResult<DirPerm> {
        self.may_lookup(who, path)?;
        let (parent, _) = split_parent(path).ok_or(Errno::EBUSY)?;
        let p = self.dirs.get(parent).ok_or(Errno::ENOENT)?;
        if !dir_permission(who, &p, ACCESS_W | ACCESS_X) {
            return Err(Errno::EACCES);
        }
        Ok(p)
    }

    /// `may_create`: the name is looked up first (an existing one is EEXIST whatever the
    /// directory's mode, as the kernel's lookup answers before it asks for write), then
    /// write and search on the directory.
    fn may_create(&self, who: &Who, path: &str) -> FsResult<DirPerm> {
        self.may_lookup(who, path)?;
        if path == "/" || self.entry(path)?.is_some() {
            return Err(Errno::EEXIST);
        }
        self.may_write_parent(who, path)
    }

    /// `may_delete`: write and search on the directory, and the sticky rule.
    fn may_delete(&self, who: &Who, path: &str) -> FsResult<(DirPerm, Attr)> {
        let p = self.may_write_parent(who, path)?;
        let a = self.get(path)?;
        check_sticky(who, &p, &a)?;
        Ok((p, a))
    }

    /// Was `cap` granted to `who`'s user by this cluster (its expiry does not matter: it
    /// proves an open)?
    pub fn granted_to(&self, who: &Who, cap: &Cap) -> bool {
        cap.uid == who.uid && crate::cap::genuine(self.peers.key(), cap)
    }

    /// Is `cap` a genuine grant of write access to file `id` for `who` (the capability of
    /// an open for writing stands for the file's mode bits)?
    fn grants_write(&self, who: &Who, cap: &Cap, id: u64) -> bool {
        cap_permits(self, who, cap, id, ACCESS_W)
    }

    /// Checks `perm` (what `req` needs, from its row of the table) for `who`. May rewrite the
    /// request (a chmod by someone outside the file's group loses S_ISGID, as
    /// `setattr_prepare` does): the result is what to run instead.
    pub fn authorize<'r>(
        &self,
        who: &Who,
        perm: &Perm<'r>,
        req: &Request<'r>,
    ) -> FsResult<Option<Request<'r>>> {
        if let Perm::Cap {
            id,
            need,
            cap,
            size_of,
        } = *perm
        {
            return self.check_cap(who, id, need, &cap, size_of).map(|_| None);
        }
        if let Perm::Holds(add) = *perm {
            if add.iter().all(|c| self.granted_to(who, c)) {
                return Ok(None);
            }
            self.refused();
            return Err(Errno::EACCES);
        }
        if who.uid == 0 {
            return Ok(None);
        }
        if !self.dirs.ready() {
            return Err(Errno::EAGAIN); // still learning the directories: the client retries
        }
        let local = |p: &str| self.get(p);
        match *perm {
            Perm::Nothing | Perm::Cap { .. } | Perm::Holds(_) => {}
            Perm::Lookup(path) => self.may_lookup(who, path)?,
            Perm::Open { path, access } => {
                self.may_lookup(who, path)?;
                may_open(who, &local(path)?, access)?;
            }
            Perm::CreateOrOpen {
                path,
                access,
                excl,
                trunc,
            } => match local(path) {
                Ok(a) if !excl => {
                    self.may_lookup(who, path)?;
                    // may_open: O_TRUNC of a regular file needs write
                    let trunc = if trunc && a.is_file() { ACCESS_W } else { 0 };
                    may_open(who, &a, access | trunc)?;
                }
                Ok(_) => self.may_lookup(who, path)?,
                Err(Errno::ENOENT) => drop(self.may_write_parent(who, path)?),
                Err(e) => return Err(e),
            },
            Perm::Create(path) => drop(self.may_create(who, path)?),
            Perm::Mknod(path, mode) => {
                self.may_create(who, path)?;
                // vfs_mknod: a device node needs CAP_MKNOD (root); a FIFO or socket does not
                if matches!(mode & libc::S_IFMT, libc::S_IFCHR | libc::S_IFBLK) {
                    return Err(Errno::EPERM);
                }
            }
            Perm::Delete(path) => drop(self.may_delete(who, path)?),
            Perm::Rename { from, to } => {
                let (_, a) = self.may_delete(who, from)?;
                let q = self.may_write_parent(who, to)?;
                if q.mode & S_ISVTX != 0 && who.uid != q.uid {
                    // a target it replaces is removed from a sticky directory: its owner's
                    // (or the directory owner's) to remove
                    match self.stat_anywhere(to) {
                        Ok(t) => check_sticky(who, &q, &t)?,
                        Err(Errno::ENOENT) => {}
                        Err(e) => return Err(e),
                    }
                }
                // a directory that changes parent has its ".." rewritten: write on it too
                if a.is_dir() && split_parent(from).map(|x| x.0) != split_parent(to).map(|x| x.0) {
                    may_open(who, &a, ACCESS_W)?;
                }
            }
            Perm::Link { from, to } => {
                // the kernel's order: the source, the target's lookup (EEXIST), the
                // protected_hardlinks rule (`may_linkat`), then write on the target's directory
                self.may_lookup(who, from)?;
                let a = local(from)?;
                self.may_lookup(who, to)?;
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
                        || !generic_permission(who, a.mode, a.uid, a.gid, ACCESS_R | ACCESS_W))
                {
                    return Err(Errno::EPERM);
                }
                self.may_write_parent(who, to)?;
            }
            Perm::LookIn(dir) => {
                self.may_lookup(who, dir)?;
                let d = self.dirs.get(dir).ok_or(Errno::ENOENT)?;
                if !dir_permission(who, &d, madfs_proto::ACCESS_X) {
                    return Err(Errno::EACCES);
                }
            }
            Perm::List(dir) => {
                self.may_lookup(who, dir)?;
                let d = self.dirs.get(dir).ok_or(Errno::ENOENT)?;
                if !dir_permission(who, &d, ACCESS_R) {
                    return Err(Errno::EACCES);
                }
            }
            Perm::DropPrivs { path, id, cap } => {
                if !self.grants_write(who, &cap, id) {
                    let a = if path.is_empty() {
                        self.orphan(id)?.ok_or(Errno::ENOENT)?
                    } else {
                        self.may_lookup(who, path)?;
                        local(path)?
                    };
                    may_open(who, &a, ACCESS_W)?;
                }
            }
            // an open-unlinked file (its home server's orphan record): what its descriptor
            // was granted, or its owner's
            Perm::Size { path: "", mode, id } => {
                let a = self.orphan(id)?.ok_or(Errno::ENOENT)?;
                let granted = match mode {
                    SizeMode::ExactWith(cap) | SizeMode::MaxWith(cap) => {
                        self.grants_write(who, &cap, id)
                    }
                    _ => false,
                };
                if !granted && a.uid != who.uid {
                    may_open(who, &a, ACCESS_W)?;
                }
            }
            Perm::Size { path, mode, .. } => {
                self.may_lookup(who, path)?;
                match mode {
                    SizeMode::Max | SizeMode::Exact => may_open(who, &local(path)?, ACCESS_W)?,
                    SizeMode::ExactWith(cap) | SizeMode::MaxWith(cap) => {
                        let a = local(path)?;
                        if !self.grants_write(who, &cap, a.id) {
                            may_open(who, &a, ACCESS_W)?;
                        }
                    }
                }
            }
            Perm::Append { path: "", id } => {
                let a = self.orphan(id)?.ok_or(Errno::ENOENT)?;
                if a.uid != who.uid {
                    may_open(who, &a, ACCESS_W)?;
                }
            }
            Perm::Append { path, .. } => {
                self.may_lookup(who, path)?;
                may_open(who, &local(path)?, ACCESS_W)?;
            }
            Perm::Chmod(path, mode) => {
                self.may_lookup(who, path)?;
                let a = local(path)?;
                if a.is_link() {
                    return Ok(None); // answers ELOOP: the client follows it, checked there
                }
                owner_or_capable(who, &a)?;
                if !who.groups.contains(&a.gid) && mode & S_ISGID != 0 {
                    // setattr_prepare: setting S_ISGID needs membership of the file's group
                    if let Request::Chmod { path, .. } = *req {
                        return Ok(Some(Request::Chmod {
                            path,
                            mode: mode & !S_ISGID,
                        }));
                    }
                }
            }
            Perm::Chown {
                path,
                uid,
                gid,
                link,
            } => {
                self.may_lookup(who, path)?;
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
                    owner_or_capable(who, &a)?;
                }
                if gid != u32::MAX && gid != a.gid && !who.groups.contains(&gid) {
                    return Err(Errno::EPERM);
                }
            }
            Perm::Utimens {
                path,
                atime,
                mtime,
                link,
            } => {
                self.may_lookup(who, path)?;
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
                    may_open(who, &a, ACCESS_W)?;
                }
            }
        }
        Ok(None)
    }

    /// The capability of a request that names file `id`: a genuine grant of `need` to `who`
    /// (`EACCES` otherwise, counted as refused); a write capability that still carries
    /// [`madfs_proto::ACCESS_PRIVS`] is refused a write (`EPERM`: the set-id bits are
    /// cleared first, `DropPrivs`); a size published with it must be the same file's (root
    /// may set any file's size).
    fn check_cap(
        &self,
        who: &Who,
        id: u64,
        need: u32,
        cap: &Cap,
        size_of: Option<&str>,
    ) -> FsResult<()> {
        if who.role == madfs_proto::Role::Peer {
            return Ok(());
        }
        if !cap_permits(self, who, cap, id, need) {
            self.refused();
            return Err(Errno::EACCES);
        }
        if need & ACCESS_W != 0 && cap.access & madfs_proto::ACCESS_PRIVS != 0 {
            return Err(Errno::EPERM);
        }
        if let Some(path) = size_of.filter(|p| who.uid != 0 && !p.is_empty()) {
            crate::server::path_ok(path)?;
            match self.get(path) {
                Ok(a) if a.id == id => {}
                Ok(_) => return Err(Errno::EACCES),
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
                Some(p) if dir_permission(who, &p, ACCESS_R | ACCESS_X) => {}
                _ => return false,
            }
        }
        true
    }

    fn refused(&self) {
        self.stats
            .refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The mode and group a new entry made by `who` in a directory `parent` gets, as
/// `inode_init_owner`: a set-group-ID directory gives its group, and its S_ISGID to a new
/// directory; a new file keeps S_ISGID (group-executable) only if `who` is in that group or
/// root.
pub fn init_owner(who: &Who, parent: Option<&DirPerm>, mode: u32) -> (u32, u32) {
    match parent {
        Some(p) if p.mode & S_ISGID != 0 => {
            let mut mode = mode;
            if mode & S_IFMT == libc::S_IFDIR {
                mode |= S_ISGID;
            } else if mode & (S_ISGID | 0o010) == (S_ISGID | 0o010)
                && who.uid != 0
                && !who.groups.contains(&p.gid)
            {
                mode &= !S_ISGID;
            }
            (mode, p.gid)
        }
        _ => (mode, who.gid),
    }
}

/// A chown of anything but a directory clears its set-user-id bit, and its set-group-id bit
/// when it is group-executable (as Linux does, for root too): the mode to store.
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
        let allowed = generic_permission;
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
    fn set_gid_directories_give_their_group() {
        let nobody = who(65534, &[65534]);
        let sg = DirPerm {
            mode: 0o2777,
            uid: 0,
            gid: 4321,
            version: 1,
        };
        let plain = DirPerm { mode: 0o777, ..sg };
        let dir = libc::S_IFDIR | 0o755;
        let file = libc::S_IFREG | 0o2755;
        assert_eq!(init_owner(&nobody, Some(&sg), dir), (dir | S_ISGID, 4321));
        // not in the group: a group-executable file loses S_ISGID
        assert_eq!(
            init_owner(&nobody, Some(&sg), file),
            (file & !S_ISGID, 4321)
        );
        let member = who(65534, &[65534, 4321]);
        assert_eq!(init_owner(&member, Some(&sg), file), (file, 4321));
        assert_eq!(init_owner(&nobody, Some(&plain), dir), (dir, 65534));
        assert_eq!(init_owner(&nobody, None, dir), (dir, 65534));
    }
}
