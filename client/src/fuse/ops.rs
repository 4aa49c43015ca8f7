//! `fuser::Filesystem` on the client library: each kernel request becomes calls of the
//! calling thread's [`Client`] for the node's path.
//!
//! What the kernel may cache: attributes, names and absences as long as the client library
//! keeps them under a lease (`super::kernel`), what it does not keep for
//! [`Settings::attr_timeout`] and [`Settings::entry_timeout`] (0 by default), file pages
//! only while a file is open (an
//! `open` never keeps the previous open's pages: close-to-open, as the preload). No
//! writeback cache: a `write` returns once the servers hold the bytes, as through the
//! preload. Sizes: a handle's writes are published at `flush` (each `close`) and `fsync`;
//! until then this mount's attributes include them.

use super::kernel;
use super::nodes::{Nodes, ROOT};
use super::{Clients, Settings, Who};
use crate::{Attr, Client, DirEntry, FileSystem, Looked, OpenFile, OpenFlags};
use fuser::{
    FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use madfs_proto::{Errno, FsResult, TimeSpec, ACCESS_R, ACCESS_W};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An open file.
#[derive(Debug)]
struct Handle {
    file: RwLock<OpenFile>,
    /// Whose open it is (its capability names that user).
    who: Who,
    /// Opened `O_APPEND`: every write goes to the end of the file as the servers know it.
    append: bool,
}

/// The mounted file system.
pub(crate) struct MadFs {
    clients: Clients,
    nodes: Arc<Nodes>,
    settings: Settings,
    next_fh: AtomicU64,
    files: Mutex<HashMap<u64, Arc<Handle>>>,
    /// Open handles of each file (by madfs id): their unpublished sizes count in attributes.
    open_ids: Mutex<HashMap<u64, Vec<Arc<Handle>>>>,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>,
    /// Open files bypass the page cache (decided at `init`, [`Settings::page_cache`]).
    direct_io: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn fuse_errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw())
}

/// Answers a request that returns nothing.
fn empty(reply: ReplyEmpty, r: FsResult<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fuse_errno(e)),
    }
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn time_spec(t: Option<TimeOrNow>) -> TimeSpec {
    match t {
        None => TimeSpec::Omit,
        Some(TimeOrNow::Now) => TimeSpec::Now,
        Some(TimeOrNow::SpecificTime(t)) => TimeSpec::At(match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i64,
            Err(e) => -(e.duration().as_nanos() as i64),
        }),
    }
}

fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// Access asked for by open flags.
fn access_of(flags: i32) -> u32 {
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => ACCESS_W,
        libc::O_RDWR => ACCESS_R | ACCESS_W,
        _ => ACCESS_R,
    }
}

impl MadFs {
    pub(crate) fn new(clients: Clients, nodes: Arc<Nodes>, settings: Settings) -> MadFs {
        MadFs {
            clients,
            nodes,
            settings,
            next_fh: AtomicU64::new(1),
            files: Mutex::new(HashMap::new()),
            open_ids: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            direct_io: false,
        }
    }

    fn who(&self, req: &Request) -> Who {
        if self.settings.all_users {
            Who::User(req.uid(), req.gid())
        } else {
            Who::Owner
        }
    }

    fn client(&self, req: &Request) -> FsResult<Rc<Client>> {
        self.clients.get(self.who(req))
    }

    /// The kernel's view of `a`: its node id, and the size including what this mount's open
    /// handles wrote and did not publish yet.
    fn file_attr(&self, a: &Attr) -> FileAttr {
        let size = if a.is_file() {
            self.merged_size(a.id, a.size)
        } else {
            a.size
        };
        FileAttr {
            ino: INodeNo(self.nodes.node_of(a.id)),
            size,
            blocks: size.div_ceil(512),
            atime: time(a.atime),
            mtime: time(a.mtime),
            ctime: time(a.ctime),
            crtime: time(a.ctime),
            kind: kind(a.mode),
            perm: (a.mode & 0o7777) as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: a.chunk_size.clamp(4096, self.settings.max_io),
            flags: 0,
        }
    }

    /// `size`, or more where this mount's open handles of file `id` wrote further.
    fn merged_size(&self, id: u64, size: u64) -> u64 {
        let open = lock(&self.open_ids);
        let Some(hs) = open.get(&id) else {
            return size;
        };
        hs.iter().fold(size, |s, h| match h.file.try_read() {
            Ok(f) => s.max(f.written()),
            // being written now: that write's end is counted once it is done
            Err(_) => s,
        })
    }

    /// Publishes what this mount's open handles of file `id` wrote.
    fn publish_all(&self, id: u64) -> FsResult<()> {
        let handles = lock(&self.open_ids).get(&id).cloned().unwrap_or_default();
        for h in handles {
            let mut f = h.file.write().unwrap_or_else(|p| p.into_inner());
            if f.is_dirty() {
                let size = f.written();
                self.clients.get(h.who)?.publish_size(&mut f, size)?;
            }
        }
        Ok(())
    }

    /// Replies with the entry of `a`, found at `path` (one more lookup the kernel holds).
    fn entry(&self, path: &str, a: &Attr, reply: ReplyEntry) {
        let fa = self.file_attr(a);
        self.nodes.found(fa.ino.0, path, a.is_dir());
        reply.entry_with_ttls(
            &self.settings.attr_timeout,
            &self.settings.entry_timeout,
            &fa,
            Generation(0),
        );
    }

    /// `unlink` and `rmdir`: `op` removes the entry `name` of `parent`.
    fn remove(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
        op: impl FnOnce(&Client, &str) -> FsResult<()>,
    ) {
        let r = self.nodes.child(parent.0, name).and_then(|path| {
            op(&*self.client(req)?, &path)?;
            self.nodes.removed(&path);
            Ok(())
        });
        empty(reply, r);
    }

    /// Answers a request that makes (or finds) an entry: `(path, attributes)`.
    fn answer_entry(&self, r: FsResult<(String, Attr)>, reply: ReplyEntry) {
        match r {
            Ok((path, a)) => self.entry(&path, &a, reply),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn handle(&self, fh: FileHandle) -> FsResult<Arc<Handle>> {
        lock(&self.files).get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn new_handle(&self, f: OpenFile, who: Who, flags: i32) -> u64 {
        let id = f.attr.id;
        let h = Arc::new(Handle {
            file: RwLock::new(f),
            who,
            append: flags & libc::O_APPEND != 0,
        });
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.files).insert(fh, h.clone());
        lock(&self.open_ids).entry(id).or_default().push(h);
        fh
    }

    /// The attributes of `node`, and how long the kernel may keep them.
    fn stat(&self, req: &Request, node: u64) -> FsResult<(Attr, Duration)> {
        let path = self.nodes.path(node)?;
        match self.client(req)?.look_kept(&path)? {
            Looked {
                attr: Some(a),
                until,
                ..
            } => Ok((a, self.ttl(until))),
            _ => Err(Errno::ENOENT),
        }
    }

    /// `lookup`: the entry of `path`, or its absence, which the kernel keeps as long as
    /// the client library does (`kernel::ttl`).
    fn lookup_path(&self, req: &Request, path: &str, reply: ReplyEntry) {
        match self.client(req).and_then(|c| c.look_kept(path)) {
            Ok(Looked {
                attr: Some(a),
                until,
                ..
            }) => {
                let fa = self.file_attr(&a);
                self.nodes.found(fa.ino.0, path, a.is_dir());
                let ttl = self.ttl(until);
                reply.entry_with_ttls(&ttl, &ttl, &fa, Generation(0));
            }
            // an absence kept on its own (a page's is not called back by name)
            Ok(Looked {
                attr: None,
                until: Some(until),
                page: false,
            }) if kernel::keep_absence(path, until) => {
                let none = FileAttr {
                    ino: INodeNo(0),
                    ..self.file_attr(&Attr::default())
                };
                let ttl = kernel::ttl(Some(until));
                reply.entry_with_ttls(&ttl, &ttl, &none, Generation(0));
            }
            Ok(_) => reply.error(fuse_errno(Errno::ENOENT)),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    /// How long the kernel may keep an answer the library keeps until `until` (at least
    /// the mount's timeouts).
    fn ttl(&self, until: Option<std::time::Instant>) -> Duration {
        kernel::ttl(until).max(self.settings.attr_timeout.min(self.settings.entry_timeout))
    }

    fn setattr_inner(
        &self,
        req: &Request,
        node: u64,
        s: SetAttr,
        fh: Option<FileHandle>,
    ) -> FsResult<Attr> {
        let path = self.nodes.path(node)?;
        let c = self.client(req)?;
        if let Some(mode) = s.mode {
            c.chmod(&path, mode & 0o7777)?;
        }
        if s.uid.is_some() || s.gid.is_some() {
            c.chown_at(
                &path,
                s.uid.unwrap_or(u32::MAX),
                s.gid.unwrap_or(u32::MAX),
                true,
            )?;
        }
        let handle = fh.and_then(|fh| self.handle(fh).ok());
        if let Some(size) = s.size {
            match &handle {
                Some(h) => {
                    let c = self.clients.get(h.who)?;
                    let mut f = h.file.write().unwrap_or_else(|p| p.into_inner());
                    c.ftruncate(&mut f, size)?;
                }
                None => c.truncate(&path, size)?,
            }
        }
        if s.atime.is_some() || s.mtime.is_some() {
            // sizes not yet published first: publishing one later would make it the
            // file's modification time (`cp -a`, `tar` set times before they close)
            self.publish_all(self.nodes.node_of(node))?;
            c.utimens_at(&path, time_spec(s.atime), time_spec(s.mtime), true)?;
        }
        c.stat_normalized(&path)
    }
}

/// What a `setattr` changes.
struct SetAttr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
}

impl Filesystem for MadFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let want = fuser::InitFlags::FUSE_DO_READDIRPLUS
            | fuser::InitFlags::FUSE_READDIRPLUS_AUTO
            | fuser::InitFlags::FUSE_PARALLEL_DIROPS
            | fuser::InitFlags::FUSE_ATOMIC_O_TRUNC
            | fuser::InitFlags::FUSE_ASYNC_DIO
            | fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        let mmap = fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        self.direct_io = !self.settings.page_cache && config.capabilities().contains(mmap);
        let _ = config.add_capabilities(want & config.capabilities());
        if let Err(max) = config.set_max_write(self.settings.max_io) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(self.settings.max_io) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.nodes.child(parent.0, name) {
            Ok(path) => self.lookup_path(req, &path, reply),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.nodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = match fh.map(|fh| self.handle(fh)) {
            Some(Ok(h)) => self.clients.get(h.who).and_then(|c| {
                let mut f = h.file.write().unwrap_or_else(|p| p.into_inner());
                Ok((c.fstat(&mut f)?, self.settings.attr_timeout))
            }),
            _ => self.stat(req, ino.0),
        };
        match r {
            Ok((a, ttl)) => reply.attr(&ttl, &self.file_attr(&a)),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        match self.setattr_inner(req, ino.0, s, fh) {
            Ok(a) => reply.attr(&self.settings.attr_timeout, &self.file_attr(&a)),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self
            .nodes
            .path(ino.0)
            .and_then(|p| self.client(req)?.readlink(&p));
        match r {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = self.nodes.child(parent.0, name).and_then(|path| {
            let c = self.client(req)?;
            let a = if mode & libc::S_IFMT == libc::S_IFREG || mode & libc::S_IFMT == 0 {
                let flags = OpenFlags {
                    create: true,
                    excl: true,
                    trunc: false,
                    mode: mode & 0o7777,
                };
                let f = c.open_as(&path, flags, 0)?;
                let a = f.attr;
                c.close(f)?;
                a
            } else {
                c.mknod(&path, mode, rdev as u64)?
            };
            Ok((path, a))
        });
        self.answer_entry(r, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.nodes.child(parent.0, name).and_then(|path| {
            let c = self.client(req)?;
            c.mkdir(&path, mode & 0o7777)?;
            Ok((c.stat_normalized(&path)?, path))
        });
        self.answer_entry(r.map(|(a, p)| (p, a)), reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, name, reply, |c, p| c.unlink(p));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, name, reply, |c, p| c.rmdir(p));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.nodes.child(parent.0, link_name).and_then(|path| {
            let target = target.to_str().ok_or(Errno::EINVAL)?;
            let c = self.client(req)?;
            c.symlink(target, &path)?;
            Ok((c.stat_normalized(&path)?, path))
        });
        self.answer_entry(r.map(|(a, p)| (p, a)), reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            if flags.contains(fuser::RenameFlags::RENAME_EXCHANGE)
                || flags.contains(fuser::RenameFlags::RENAME_WHITEOUT)
            {
                return Err(Errno::EINVAL);
            }
            let from = self.nodes.child(parent.0, name)?;
            let to = self.nodes.child(newparent.0, newname)?;
            let noreplace = flags.contains(fuser::RenameFlags::RENAME_NOREPLACE);
            self.client(req)?.rename(&from, &to, noreplace)?;
            self.nodes.renamed(&from, &to);
            Ok(())
        })();
        empty(reply, r);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let from = self.nodes.path(ino.0)?;
            let to = self.nodes.child(newparent.0, newname)?;
            let a = Client::link(&*self.client(req)?, &from, &to)?;
            Ok((a, to))
        })();
        self.answer_entry(r.map(|(a, p)| (p, a)), reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        let flags = flags.0;
        let r = (|| {
            let path = self.nodes.path(ino.0)?;
            let who = self.who(req);
            let c = self.clients.get(who)?;
            let oflags = OpenFlags {
                trunc: flags & libc::O_TRUNC != 0,
                ..OpenFlags::default()
            };
            let f = c.open_as(&path, oflags, access_of(flags))?;
            Ok(self.new_handle(f, who, flags))
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags()),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            let path = self.nodes.child(parent.0, name)?;
            let who = self.who(req);
            let c = self.clients.get(who)?;
            let oflags = OpenFlags {
                create: true,
                excl: flags & libc::O_EXCL != 0,
                trunc: flags & libc::O_TRUNC != 0,
                mode: mode & 0o7777,
            };
            let f = c.open_as(&path, oflags, access_of(flags))?;
            let a = f.attr;
            Ok((path, a, self.new_handle(f, who, flags)))
        })();
        match r {
            Ok((path, a, fh)) => {
                let fa = self.file_attr(&a);
                self.nodes.found(fa.ino.0, &path, false);
                reply.created(
                    &self.settings.entry_timeout,
                    &fa,
                    Generation(0),
                    FileHandle(fh),
                    self.open_flags(),
                );
            }
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let mut reply = Some(reply);
        let r = (|| {
            let h = self.handle(fh)?;
            let c = self.clients.get(h.who)?;
            let f = h.file.read().unwrap_or_else(|p| p.into_inner());
            BUF.with(|b| {
                let mut b = b.borrow_mut();
                if b.len() < size as usize {
                    b.resize(size as usize, 0);
                }
                let buf = &mut b[..size as usize];
                let end = offset + size as u64;
                // what this mount wrote through other handles counts; through the page
                // cache, the kernel asks within the size it knows (its attributes may be
                // newer than the handle's) and takes a short answer for a smaller size: read
                // as far as it asks (zeros past the end, which it does not show)
                let known = self.merged_size(f.attr.id, f.size());
                let want = if self.direct_io {
                    known
                } else {
                    known.max(end)
                };
                let n = if want > f.size() {
                    let mut wider = f.clone();
                    wider.wrote(want);
                    c.read(&wider, offset, buf)?
                } else {
                    c.read(&f, offset, buf)?
                };
                if let Some(reply) = reply.take() {
                    reply.data(&buf[..n]);
                }
                Ok(())
            })
        })();
        if let (Err(e), Some(reply)) = (r, reply) {
            reply.error(fuse_errno(e));
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = (|| {
            let h = self.handle(fh)?;
            let c = self.clients.get(h.who)?;
            let mut f = h.file.write().unwrap_or_else(|p| p.into_inner());
            if h.append {
                c.append(&mut f, data).map(|_| data.len())
            } else {
                c.write(&mut f, offset, data)
            }
        })();
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    /// Each `close` of a descriptor: what it wrote is published (close-to-open), and made
    /// durable with the close-sync setting.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let h = self.handle(fh)?;
            let mut f = h.file.write().unwrap_or_else(|p| p.into_inner());
            if !f.is_dirty() {
                return Ok(());
            }
            let c = self.clients.get(h.who)?;
            if c.close_sync() {
                c.fsync(&mut f)
            } else {
                let size = f.written();
                c.publish_size(&mut f, size)
            }
        })();
        empty(reply, r);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let Some(h) = lock(&self.files).remove(&fh.0) else {
            return reply.error(fuse_errno(Errno::EBADF));
        };
        let id = {
            let f = h.file.read().unwrap_or_else(|p| p.into_inner());
            f.attr.id
        };
        {
            let mut open = lock(&self.open_ids);
            if let Some(v) = open.get_mut(&id) {
                v.retain(|x| !Arc::ptr_eq(x, &h));
                if v.is_empty() {
                    open.remove(&id);
                }
            }
        }
        let f = match Arc::try_unwrap(h) {
            Ok(h) => (
                h.who,
                h.file.into_inner().unwrap_or_else(|p| p.into_inner()),
            ),
            // a read or write of it still running (the kernel waits for none): a copy
            Err(h) => (
                h.who,
                h.file.read().unwrap_or_else(|p| p.into_inner()).clone(),
            ),
        };
        match self.clients.get(f.0).and_then(|c| c.close(f.1)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let h = self.handle(fh)?;
            let c = self.clients.get(h.who)?;
            let mut f = h.file.write().unwrap_or_else(|p| p.into_inner());
            c.fsync(&mut f)
        })();
        empty(reply, r);
    }

    /// A snapshot of the directory's entries, listed by `readdir` and `readdirplus` (a
    /// directory changed meanwhile is seen at the next `opendir`, as over NFS).
    fn opendir(&self, req: &Request, ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let path = self.nodes.path(ino.0)?;
            let entries = self.client(req)?.readdir(&path)?;
            let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
            lock(&self.dirs).insert(fh, Arc::new(entries));
            Ok(fh)
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(entries) = lock(&self.dirs).get(&fh.0).cloned() else {
            return reply.error(fuse_errno(Errno::EBADF));
        };
        // offsets: 1 after ".", 2 after "..", 3 + i after entries[i]
        let mut at = offset;
        while at < 2 + entries.len() as u64 {
            let full = match at {
                0 => reply.add(ino, 1, FileType::Directory, "."),
                1 => reply.add(INodeNo(self.parent_of(ino.0)), 2, FileType::Directory, ".."),
                _ => {
                    let e = &entries[(at - 2) as usize];
                    let node = INodeNo(self.nodes.node_of(e.ino));
                    reply.add(node, at + 1, kind(e.kind), &e.name)
                }
            };
            if full {
                break;
            }
            at += 1;
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(entries) = lock(&self.dirs).get(&fh.0).cloned() else {
            return reply.error(fuse_errno(Errno::EBADF));
        };
        let (dir, c) = match self
            .nodes
            .path(ino.0)
            .and_then(|p| Ok((p, self.client(req)?)))
        {
            Ok(x) => x,
            Err(e) => return reply.error(fuse_errno(e)),
        };
        if offset == 0 {
            // the attributes of every entry, in pages from every server at once
            if let Err(e) = c.look_ahead(&dir) {
                tracing::debug!("madfs-fuse: statahead of {dir}: {e}");
            }
        }
        let mut at = offset;
        while at < 2 + entries.len() as u64 {
            if at < 2 {
                // "." and "..": the kernel takes no lookup of them
                let path = if at == 0 {
                    dir.clone()
                } else {
                    parent_path(&dir)
                };
                let Ok(Looked {
                    attr: Some(a),
                    until,
                    ..
                }) = c.look_kept(&path)
                else {
                    at += 1;
                    continue;
                };
                let name = if at == 0 { "." } else { ".." };
                if reply.add(
                    INodeNo(self.nodes.node_of(a.id)),
                    at + 1,
                    name,
                    &self.ttl(until),
                    &self.file_attr(&a),
                    Generation(0),
                ) {
                    break;
                }
                at += 1;
                continue;
            }
            let e = &entries[(at - 2) as usize];
            let path = if dir == "/" {
                format!("/{}", e.name)
            } else {
                format!("{dir}/{}", e.name)
            };
            // gone since the snapshot: skipped
            if let Ok(Looked {
                attr: Some(a),
                until,
                ..
            }) = c.look_kept(&path)
            {
                let fa = self.file_attr(&a);
                let ttl = self.ttl(until);
                if reply.add(fa.ino, at + 1, &e.name, &ttl, &fa, Generation(0)) {
                    break;
                }
                self.nodes.found(fa.ino.0, &path, a.is_dir());
            }
            at += 1;
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.dirs).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.client(req).and_then(|c| c.sync_all(false)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.client(req).and_then(|c| c.statfs()) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.bfree,
                s.bavail,
                s.files,
                s.ffree,
                s.bsize as u32,
                s.namelen as u32,
                s.bsize as u32,
            ),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        let r = self
            .nodes
            .path(ino.0)
            .and_then(|p| self.client(req)?.access_normalized(&p, mask.bits() as u32));
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    /// Extends the file (mode 0 only: madfs keeps no preallocation).
    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            if mode != 0 {
                return Err(Errno::ENOTSUP);
            }
            let h = self.handle(fh)?;
            let c = self.clients.get(h.who)?;
            let mut f = h.file.write().unwrap_or_else(|p| p.into_inner());
            let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
            let size = c.fstat(&mut f)?.size.max(f.written());
            if end > size {
                c.ftruncate(&mut f, end)?;
            }
            Ok(())
        })();
        empty(reply, r);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // madfs keeps no extended attributes; the kernel stops asking
        reply.error(fuse_errno(Errno::ENOSYS));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(fuse_errno(Errno::ENOSYS));
    }
}

impl MadFs {
    /// How the kernel treats an open file: its page cache, or straight to the servers.
    fn open_flags(&self) -> FopenFlags {
        if self.direct_io {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        } else {
            FopenFlags::empty()
        }
    }

    /// The node of the directory holding `node` (the root where unknown).
    fn parent_of(&self, node: u64) -> u64 {
        self.nodes
            .path(node)
            .ok()
            .and_then(|p| self.nodes.node_at(&parent_path(&p)))
            .unwrap_or(ROOT)
    }
}

/// The parent directory of `path` ("/" for "/").
fn parent_path(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => path[..i].to_owned(),
    }
}
