//! The fd table. Every madfs open file description is backed by a real kernel fd: a small
//! `memfd` named `madfs` that carries the description's shared state (path, file id, flags,
//! offset, written high-water mark) across `fork` and `exec`. So:
//! * the kernel hands out fd numbers, and `dup`, `fork`, `exec` and `posix_spawn` carry madfs
//!   fds like any other: after `exec` the new image finds them among its open fds;
//! * offsets are shared exactly as the kernel shares them (one description, many fds, many
//!   processes): once a description can be seen by another process, its state lives in the
//!   memfd's first page, mapped `MAP_SHARED` by every process that holds it;
//! * an fd we do not know is never ours: membership is one bit in a lock-free bitmap.
//!
//! Mapping a page costs ≈ 8 µs (ftruncate, mmap, first touch, munmap: more than the RPC of an
//! open), so a description starts with its state in process memory and moves it into the
//! memfd only when it could be shared: before a new process is cloned (`fork`, `vfork`,
//! `posix_spawn`: the parent's `clone` syscall) and before `execve` — [`share_all`]. (A
//! `vfork` child cannot do it for its parent: it may already have closed or renumbered the
//! fds, and its own changes to the fd table are not the parent's.) Users of the mutable state
//! hold a shared lock for one operation ([`Desc::hdr`]); the move takes it exclusively, so no
//! update is lost.

use madfs_hookabi::raw;
use madfs_proto::{Attr, Cap, Errno, FsResult};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

/// fds at or above this are never madfs fds (we refuse to create them there).
pub use madfs_hookabi::MAX_FD;
const MAGIC: u64 = u64::from_le_bytes(*b"MADFSFD4");
/// The longest madfs path a description keeps: a relative argument of up to PATH_MAX − 1
/// bytes below a deep working directory resolves to more, as the kernel allows
/// ([`madfs_placement::TREE_PATH_MAX`]).
const PATH_CAP: usize = madfs_placement::TREE_PATH_MAX + 1;
const MAP_BYTES: usize = PATH_CAP + 4096;
/// Name of the backing memfds (`/proc/self/fd/N` → `/memfd:madfs (deleted)`).
pub const MEMFD_NAME: &[u8] = b"madfs\0";

/// Kind of description.
pub const KIND_FILE: u32 = 1;
/// Directory description.
pub const KIND_DIR: u32 = 2;

/// Shared state of one open file description (lives in the memfd's first pages).
#[repr(C)]
pub struct Header {
    magic: AtomicU64,
    kind: u32,
    /// Access mode and status flags (`F_GETFL`/`F_SETFL`).
    pub flags: AtomicU32,
    /// File offset (or directory position).
    pub offset: AtomicU64,
    /// Highest byte written through this description.
    pub written: AtomicU64,
    /// `written` not yet published to the metadata server.
    pub dirty: AtomicU32,
    /// Written since the last fsync (close-sync decides on this).
    pub unsynced: AtomicU32,
    mode: u32,
    id: u64,
    chunk_size: u32,
    path_len: u32,
    /// The capability the open was granted (`Cap::to_bytes`): data requests carry it, in
    /// this process and in those that inherit the description.
    cap: [u8; madfs_proto::CAP_BYTES],
    /// Size known when opened (or last truncated).
    pub size: AtomicU64,
    /// The first `path_len` bytes are the path; the rest is never read (left uninitialised
    /// in a process-local header: zeroing the path room on every open cost more than the open's
    /// bookkeeping).
    path: [MaybeUninit<u8>; PATH_CAP],
}

/// The process-local header of the last description dropped, kept for the next open (a
/// 16 KiB allocation and free less per open+close).
static SPARE: AtomicPtr<MaybeUninit<Header>> = AtomicPtr::new(std::ptr::null_mut());

/// How long after `open` an `fstat` may be answered from the attributes `open` fetched.
pub const FRESH_FOR: std::time::Duration = std::time::Duration::from_millis(2);

/// The attributes an `open` fetched, and when: programs ask `fstat` right after `open` (stdio
/// sizing its buffer, `cat`, `cp`, Python's `open().read()` twice), and asking the server
/// again then cost a round trip per open for an answer that cannot have changed unless
/// something changed it meanwhile.
#[derive(Clone, Copy, Debug)]
pub struct Fresh {
    /// What the open's lookup returned.
    pub attr: Attr,
    /// [`madfs_client::mutations`] read before that lookup was sent.
    pub gen: u64,
    /// Good until then.
    pub until: std::time::Instant,
}

/// One open file description in this process.
pub struct Desc {
    /// Attributes from the open that made this description (process-local; `None` once
    /// inherited through exec).
    fresh: Option<Fresh>,
    /// Where the state is now: `own`, or the memfd's page once shared.
    hdr: AtomicPtr<Header>,
    /// The state in process memory (null for a description adopted after exec). Freed only
    /// with the Desc: immutable fields may be read from either copy at any time.
    own: *mut Header,
    /// The state lives in the memfd's mapped page.
    shared: AtomicBool,
    /// The kernel fds are placeholders (dups of [`TEMPLATE`]) until the state is shared.
    placeholder: bool,
    /// During [`share_all`]: the new memfd the fds of this description are moved onto.
    moving_to: AtomicI32,
    /// Held shared for one use of the mutable state, exclusively while it moves.
    moving: RwLock<()>,
    /// Process-local cache (directory listing).
    pub local: Mutex<Local>,
    /// Where this process found the file last (process-local): its path after a rename
    /// while open, or empty once its last name is gone ([`madfs_client::OpenFile::whereabouts`]).
    now_at: Mutex<Option<String>>,
}

/// A close made the batch of closes to tell the servers full ([`madfs_client::hold`]).
pub static RELEASES_DUE: AtomicBool = AtomicBool::new(false);

// SAFETY: both copies of the header live as long as the Desc; fields written after creation
// are atomics (moved under `moving`), the others are written once before the Desc is shared.
unsafe impl Send for Desc {}
// SAFETY: as above.
unsafe impl Sync for Desc {}

/// The mutable state of a description, for one operation (the state cannot move meanwhile).
pub struct HdrRef<'a> {
    _g: RwLockReadGuard<'a, ()>,
    h: &'a Header,
}

impl std::ops::Deref for HdrRef<'_> {
    type Target = Header;
    fn deref(&self) -> &Header {
        self.h
    }
}

/// Process-local state of a description.
#[derive(Default)]
pub struct Local {
    /// Directory listing state for getdents64.
    pub dir: DirState,
    /// The capability a write through this description got when it cleared the file's
    /// set-id bits (`DropPrivs`): later writes use it and do not ask again.
    pub privs_cap: Option<Cap>,
}

/// Where a directory fd's listing stands. The shared offset is the cookie (`d_off`): 0 before
/// `.`, 1 before `..`, c ≥ 2 before the first entry whose position (`max(hash >> 1, 2)`) is
/// ≥ c. `cursor` continues the listing while the offset still equals `at`; any other offset
/// (lseek, another process) starts a fresh cursor there.
#[derive(Default)]
pub struct DirState {
    /// Positions listed (`MADFS_IOC_DIR_RANGE`); None: all, with `.` and `..`.
    pub range: Option<(u64, u64)>,
    /// The cursor, the cookie it stands at, and entries fetched but not yet returned.
    pub cursor: Option<(
        madfs_client::DirCursor,
        i64,
        std::collections::VecDeque<madfs_client::DirEntry>,
    )>,
    /// Matches of `MADFS_IOC_FIND_LIST` (paths relative to the directory), served by
    /// getdents64 (cookie = index) until the fd is rewound.
    pub found: Option<Vec<String>>,
}

impl Drop for Desc {
    fn drop(&mut self) {
        let h = self.fixed();
        if h.kind == KIND_FILE
            && h.mode & libc::S_IFMT == libc::S_IFREG
            && madfs_client::hold::closed(h.id)
        {
            RELEASES_DUE.store(true, Release);
        }
        if self.shared.load(Acquire) {
            // SAFETY: we mapped exactly MAP_BYTES there.
            unsafe {
                raw!(
                    libc::SYS_munmap as isize,
                    self.hdr.load(Acquire) as isize,
                    MAP_BYTES as isize,
                )
            };
        }
        if !self.own.is_null() {
            let own = self.own.cast::<MaybeUninit<Header>>();
            if SPARE
                .compare_exchange(std::ptr::null_mut(), own, AcqRel, Relaxed)
                .is_err()
            {
                // SAFETY: allocated by Box in create, freed once here (or kept as the spare).
                drop(unsafe { Box::from_raw(own) });
            }
        }
    }
}

impl Desc {
    /// The fields written once (either copy: both hold them and live as long as self).
    fn fixed(&self) -> &Header {
        // SAFETY: see the struct; immutable fields only.
        unsafe { &*self.hdr.load(Acquire) }
    }
    fn h(&self) -> HdrRef<'_> {
        let g = self.moving.read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the state cannot move while we hold `moving`; both copies live as long as
        // self.
        let h = unsafe { &*self.hdr.load(Acquire) };
        HdrRef { _g: g, h }
    }
    /// The mutable state, for one operation (hold it briefly: it blocks `fork` and `exec`).
    pub fn hdr(&self) -> HdrRef<'_> {
        self.h()
    }
    /// Directory?
    pub fn is_dir(&self) -> bool {
        self.fixed().kind == KIND_DIR
    }
    /// madfs path.
    pub fn path(&self) -> &str {
        let h = self.fixed();
        let n = (h.path_len as usize).min(PATH_CAP);
        // SAFETY: the first path_len bytes of a header are written when it is made (create,
        // or the copy into a zero-filled memfd mapping, whose bytes are all initialised).
        let b = unsafe { std::slice::from_raw_parts(h.path.as_ptr().cast::<u8>(), n) };
        std::str::from_utf8(b).unwrap_or("/")
    }
    /// The attributes the open fetched, if no request of this process has changed anything
    /// since it looked them up and [`FRESH_FOR`] has not passed (the size merged with what
    /// this description wrote, as the server's answer would be).
    pub fn fresh_attr(&self) -> Option<Attr> {
        let f = self.fresh.as_ref()?;
        if madfs_client::mutations() != f.gen || std::time::Instant::now() >= f.until {
            return None;
        }
        let mut a = f.attr;
        if a.is_file() {
            a.size = a.size.max(self.attr().size);
        }
        Some(a)
    }

    /// Attributes as known to this description (size: max of known size and written).
    pub fn attr(&self) -> Attr {
        let f = self.fixed();
        let size = {
            let h = self.h();
            h.size.load(Acquire).max(h.written.load(Acquire))
        };
        Attr {
            id: f.id,
            mode: f.mode,
            nlink: 1,
            size,
            chunk_size: f.chunk_size,
            ..Default::default()
        }
    }
    /// The capability of the open.
    pub fn cap(&self) -> Cap {
        Cap::from_bytes(&self.fixed().cap).unwrap_or_default()
    }
    /// Open flags (access mode and status flags).
    pub fn flags(&self) -> i32 {
        self.h().flags.load(Relaxed) as i32
    }
    /// Process-local state.
    pub fn local(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Records a write that ended at `end`; `published`: the write already published its
    /// end as the file's size (small files, chunk 0).
    pub fn wrote(&self, end: u64, published: bool) {
        self.h().written.fetch_max(end, AcqRel);
        self.h().unsynced.store(1, Release);
        if !published {
            self.h().dirty.store(1, Release);
        }
    }

    /// Takes the "written since the last fsync" flag.
    pub fn take_unsynced(&self) -> bool {
        self.h().unsynced.swap(0, AcqRel) == 1
    }
    /// Takes the unpublished high-water mark, if any.
    pub fn take_dirty(&self) -> Option<u64> {
        if self.h().dirty.swap(0, AcqRel) == 1 {
            Some(self.h().written.load(Acquire))
        } else {
            None
        }
    }
    /// After a truncate to `size`: nothing beyond it was written through us any more.
    pub fn truncated(&self, size: u64) {
        let h = self.h();
        h.size.store(size, Release);
        h.written.fetch_min(size, AcqRel);
    }

    /// Creates a description and its backing memfd; returns the fd. The state stays in
    /// process memory until [`Desc::share`].
    pub fn create(
        kind: u32,
        flags: i32,
        path: &str,
        attr: &Attr,
        cap: &Cap,
        cloexec: bool,
        fresh: Option<Fresh>,
    ) -> FsResult<(i32, Arc<Desc>)> {
        if path.len() > PATH_CAP {
            return Err(Errno::ENAMETOOLONG);
        }
        let k = new_kernel_fd(cloexec)?;
        Ok((
            k.fd(),
            Desc::create_on(k, kind, flags, path, attr, cap, fresh)?,
        ))
    }

    /// [`Desc::create`] on a kernel fd made beforehand ([`new_kernel_fd`]); closes it if
    /// the description cannot be made.
    pub fn create_on(
        k: KernelFd,
        kind: u32,
        flags: i32,
        path: &str,
        attr: &Attr,
        cap: &Cap,
        fresh: Option<Fresh>,
    ) -> FsResult<Arc<Desc>> {
        if path.len() > PATH_CAP {
            return Err(Errno::ENAMETOOLONG); // drops k: closed
        }
        let (_, placeholder) = k.into_raw();
        let spare = SPARE.swap(std::ptr::null_mut(), AcqRel);
        let mut h: Box<MaybeUninit<Header>> = if spare.is_null() {
            Box::new_uninit()
        } else {
            // SAFETY: a Box a dropped description gave up (the swap makes it ours alone).
            unsafe { Box::from_raw(spare) }
        };
        let p = h.as_mut_ptr();
        // SAFETY: every field but the path tail is written before `assume_init`; the path
        // is `MaybeUninit` bytes, of which the first `path.len()` (≤ PATH_CAP) are written.
        let h = unsafe {
            (&raw mut (*p).magic).write(AtomicU64::new(MAGIC));
            (&raw mut (*p).kind).write(kind);
            (&raw mut (*p).flags).write(AtomicU32::new(flags as u32));
            (&raw mut (*p).offset).write(AtomicU64::new(0));
            (&raw mut (*p).written).write(AtomicU64::new(0));
            (&raw mut (*p).dirty).write(AtomicU32::new(0));
            (&raw mut (*p).unsynced).write(AtomicU32::new(0));
            (&raw mut (*p).mode).write(attr.mode);
            (&raw mut (*p).id).write(attr.id);
            (&raw mut (*p).chunk_size).write(attr.chunk_size);
            (&raw mut (*p).path_len).write(path.len() as u32);
            (&raw mut (*p).cap).write(cap.to_bytes());
            (&raw mut (*p).size).write(AtomicU64::new(attr.size));
            (&raw mut (*p).path)
                .cast::<u8>()
                .copy_from_nonoverlapping(path.as_ptr(), path.len());
            h.assume_init()
        };
        let own = Box::into_raw(h);
        Ok(Arc::new(Desc {
            fresh,
            hdr: AtomicPtr::new(own),
            own,
            shared: AtomicBool::new(false),
            placeholder,
            moving_to: AtomicI32::new(-1),
            moving: RwLock::new(()),
            local: Mutex::default(),
            now_at: Mutex::default(),
        }))
    }

    /// Moves the state into a memfd, mapped shared, so that `fork` children and `exec`ed
    /// images see the same state; `fd` is one of this description's fds. A placeholder fd is
    /// replaced by the memfd (`dup3`, keeping its close-on-exec flag) and the memfd is left in
    /// `moving_to` for the description's other fds ([`share_all`] closes it). Idempotent.
    fn share(&self, fd: i32) -> FsResult<()> {
        if self.shared.load(Acquire) {
            let m = self.moving_to.load(Acquire);
            if m >= 0 {
                move_fd(m, fd);
            }
            return Ok(());
        }
        let _w = self.moving.write().unwrap_or_else(|e| e.into_inner());
        if self.shared.load(Acquire) {
            return Ok(());
        }
        let memfd = if self.placeholder {
            let m = memfd(MEMFD_NAME, libc::MFD_CLOEXEC);
            if m < 0 {
                return Err(Errno::new(-m as i32));
            }
            m as i32
        } else {
            fd
        };
        let fail = |e: Errno| {
            if memfd != fd {
                // SAFETY: the memfd we just created.
                unsafe { raw!(libc::SYS_close as isize, memfd as isize) };
            }
            Err(e)
        };
        // SAFETY: resizing our own memfd.
        if unsafe {
            raw!(
                libc::SYS_ftruncate as isize,
                memfd as isize,
                MAP_BYTES as isize,
            )
        } != 0
        {
            return fail(Errno::ENOMEM);
        }
        let Some(to) = map(memfd) else {
            return fail(Errno::ENOMEM);
        };
        // SAFETY: `own` is the live process copy (nobody uses the state: we hold `moving`),
        // `to` a fresh zeroed mapping of MAP_BYTES ≥ size_of::<Header>(); the fields and the
        // first path_len bytes of the path are copied (the rest is never read).
        unsafe {
            let used = std::mem::offset_of!(Header, path) + (*self.own).path_len as usize;
            std::ptr::copy_nonoverlapping(self.own as *const u8, to.as_ptr() as *mut u8, used);
        }
        if memfd != fd {
            move_fd(memfd, fd);
            self.moving_to.store(memfd, Release);
        }
        self.hdr.store(to.as_ptr(), Release);
        self.shared.store(true, Release);
        Ok(())
    }

    /// Maps the description behind an inherited fd (after exec), if it is one of ours.
    pub fn adopt(fd: i32) -> Option<Arc<Desc>> {
        // a memfd whose description was never shared is empty: mapping it would fault
        if fstat(fd)?.st_size < MAP_BYTES as i64 {
            return None;
        }
        let hdr = map(fd)?;
        // SAFETY: mapping of MAP_BYTES.
        if unsafe { hdr.as_ref() }.magic.load(Acquire) != MAGIC {
            // SAFETY: the mapping we just made.
            unsafe {
                raw!(
                    libc::SYS_munmap as isize,
                    hdr.as_ptr() as isize,
                    MAP_BYTES as isize,
                )
            };
            return None;
        }
        Some(Arc::new(Desc {
            fresh: None,
            hdr: AtomicPtr::new(hdr.as_ptr()),
            own: std::ptr::null_mut(),
            shared: AtomicBool::new(true),
            placeholder: false,
            moving_to: AtomicI32::new(-1),
            moving: RwLock::new(()),
            local: Mutex::default(),
            now_at: Mutex::default(),
        }))
    }

    /// Where this process found the file last ([`Desc::now_at`]); `None`: at its path.
    pub fn whereabouts(&self) -> Option<String> {
        self.now_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The file was found at `at` (its path, another after a rename, or empty: no name).
    pub fn found_at(&self, at: &str) {
        let mut g = self.now_at.lock().unwrap_or_else(|e| e.into_inner());
        if at == self.path() {
            *g = None;
        } else if g.as_deref() != Some(at) {
            *g = Some(at.to_owned());
        }
    }
}

/// `fstat` of `fd` (raw syscall).
fn fstat(fd: i32) -> Option<libc::stat> {
    // SAFETY: fstat into a zeroed buffer of the right type.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = unsafe {
        raw!(
            libc::SYS_fstat as isize,
            fd as isize,
            &mut st as *mut _ as isize
        )
    };
    (r == 0).then_some(st)
}

/// A new memfd named `name` (NUL-terminated), or `-errno`.
fn memfd(name: &[u8], flags: u32) -> isize {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: a NUL-terminated name; creates a new fd of ours.
    unsafe {
        raw!(
            libc::SYS_memfd_create as isize,
            name.as_ptr() as isize,
            flags as isize,
        )
    }
}

/// The soft limit on open fds.
fn fd_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 reading our own limit into `lim`.
    let r = unsafe {
        raw!(
            libc::SYS_prlimit64 as isize,
            0isize,
            libc::RLIMIT_NOFILE as isize,
            0isize,
            &mut lim as *mut _ as isize,
        )
    };
    (r == 0).then_some(lim.rlim_cur)
}

fn map(fd: i32) -> Option<NonNull<Header>> {
    const _: () = assert!(std::mem::size_of::<Header>() <= MAP_BYTES);
    // SAFETY: shared mapping of a file we hold open (raw syscall, skipping the hook).
    let p = unsafe {
        // every variadic argument must be a full isize: a bare `0` would be passed as i32
        raw!(
            libc::SYS_mmap as isize,
            0isize,
            MAP_BYTES as isize,
            (libc::PROT_READ | libc::PROT_WRITE) as isize,
            libc::MAP_SHARED as isize,
            fd as isize,
            0isize,
        )
    };
    if (-4095..0).contains(&p) {
        return None;
    }
    NonNull::new(p as *mut Header)
}

static TABLE: Mutex<Vec<Option<Arc<Desc>>>> = Mutex::new(Vec::new());
/// Number of madfs fds in the table.
static OPEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn table() -> MutexGuard<'static, Vec<Option<Arc<Desc>>>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bitmap of madfs fds (bit `fd % 64` of word `fd / 64`), which the front's interception
/// engine reads for its fast pass-through ([`crate::shared`]).
pub fn bits() -> &'static [AtomicU64] {
    &crate::shared().fds
}

/// Is `fd` a madfs fd? Lock-free; the hook's first check for fd syscalls.
#[inline]
pub fn is_ours(fd: i64) -> bool {
    crate::shared().is_ours(fd)
}

/// The description of `fd`.
pub fn get(fd: i64) -> Option<Arc<Desc>> {
    if !is_ours(fd) {
        return None;
    }
    table().get(fd as usize).cloned().flatten()
}

/// Makes `fd` refer to `d` (replacing what it referred to, which is returned).
pub fn insert(fd: i32, d: Arc<Desc>) -> Option<Arc<Desc>> {
    let i = fd as usize;
    let mut t = table();
    if t.len() <= i {
        t.resize(i + 1, None);
    }
    let old = t[i].replace(d);
    if old.is_none() {
        OPEN.fetch_add(1, AcqRel);
    }
    bits()[i / 64].fetch_or(1 << (i % 64), Release);
    old
}

/// Forgets `fd`; returns its description.
pub fn remove(fd: i64) -> Option<Arc<Desc>> {
    if !is_ours(fd) {
        return None;
    }
    let i = fd as usize;
    let mut t = table();
    bits()[i / 64].fetch_and(!(1 << (i % 64)), Release);
    let d = t.get_mut(i).and_then(Option::take);
    if d.is_some() {
        OPEN.fetch_sub(1, AcqRel);
    }
    d
}

/// Are there any madfs fds in this process? (Lock-free fast path.)
pub fn is_empty() -> bool {
    OPEN.load(Acquire) == 0
}

/// Every description (once each) with its fds.
pub fn all() -> Vec<Arc<Desc>> {
    let t = table();
    let mut out: Vec<Arc<Desc>> = Vec::new();
    for d in t.iter().flatten() {
        if !out.iter().any(|o| Arc::ptr_eq(o, d)) {
            out.push(d.clone());
        }
    }
    out
}

/// Moves the state of every description of this process into its memfd (see the module
/// documentation): before `fork` and `exec`. Allocates nothing (it may run in a `vfork`
/// child); a description whose move fails stays private to this process.
pub fn share_all() {
    if is_empty() {
        return;
    }
    let t = table();
    for (fd, d) in t.iter().enumerate() {
        if let Some(d) = d {
            let _ = d.share(fd as i32);
        }
    }
    for d in t.iter().flatten() {
        let m = d.moving_to.swap(-1, AcqRel);
        if m >= 0 {
            // SAFETY: the memfd share() created; every fd of the description is a dup of it.
            unsafe { raw!(libc::SYS_close as isize, m as isize) };
        }
    }
}

/// Makes `fd` refer to `memfd`'s file, keeping `fd`'s close-on-exec flag.
fn move_fd(memfd: i32, fd: i32) {
    // SAFETY: fcntl/dup3 on fds of ours (the table lock is held: nobody renumbers them).
    unsafe {
        let fl = raw!(
            libc::SYS_fcntl as isize,
            fd as isize,
            libc::F_GETFD as isize
        );
        let cloexec = if fl > 0 && fl & libc::FD_CLOEXEC as isize != 0 {
            libc::O_CLOEXEC
        } else {
            0
        };
        raw!(
            libc::SYS_dup3 as isize,
            memfd as isize,
            fd as isize,
            cloexec as isize,
        );
    }
}

/// The placeholder file every unshared description's fds are dups of: opened once per
/// process (close-on-exec, moved to a high fd number so that it does not take a number the
/// program expects), -1 when not open. A `vfork` child leaves it alone (it shares this
/// variable with its parent, not its fd table).
static TEMPLATE: AtomicI32 = AtomicI32::new(-1);
/// Inode of the template (to recognise it).
static TEMPLATE_INO: AtomicU64 = AtomicU64::new(0);
/// Dups of the template so far (its inode is checked on every 64th).
static DUPS: AtomicU64 = AtomicU64::new(0);

/// The program closed or replaced fd `fd`: if it was the template, forget it.
pub fn fd_gone(fd: i64) {
    if fd >= 0 && TEMPLATE.load(Relaxed) as i64 == fd && !crate::conn::in_vfork_child() {
        TEMPLATE.store(-1, Relaxed);
    }
}

/// The program closed fds `first..=last`.
pub fn fds_gone(first: i64, last: i64) {
    let t = TEMPLATE.load(Relaxed) as i64;
    if t >= 0 && first <= t && t <= last {
        fd_gone(t);
    }
}

fn inode(fd: i32) -> Option<u64> {
    fstat(fd).map(|st| st.st_ino)
}

/// A kernel fd made for a new description ([`new_kernel_fd`]). Dropped, it is closed (no
/// description was made on it); [`KernelFd::into_raw`] hands it to a description.
#[derive(Debug)]
#[must_use = "dropped, the fd is closed at once"]
pub struct KernelFd {
    fd: i32,
    placeholder: bool,
}

impl KernelFd {
    /// Its number.
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Its number and whether it is a dup of the placeholder template (not a memfd of its
    /// own); the caller now owns the fd.
    fn into_raw(self) -> (i32, bool) {
        let v = (self.fd, self.placeholder);
        std::mem::forget(self);
        v
    }
}

impl Drop for KernelFd {
    fn drop(&mut self) {
        // SAFETY: our own fd, never handed to the program (into_raw forgets self).
        unsafe { raw!(libc::SYS_close as isize, self.fd as isize) };
    }
}

/// A new kernel fd for a new description (lowest free number, like the kernel's open).
/// A dup of the template (≈ 0.4 µs) where possible, else a memfd (≈ 3 µs with its close).
/// Never called in a `vfork` child (`open` refuses there first).
pub fn new_kernel_fd(cloexec: bool) -> FsResult<KernelFd> {
    new_kernel_fd_pair(cloexec).map(|(fd, placeholder)| KernelFd { fd, placeholder })
}

fn new_kernel_fd_pair(cloexec: bool) -> FsResult<(i32, bool)> {
    let fail = |fd: isize, e: Errno| {
        // SAFETY: our fd.
        unsafe { raw!(libc::SYS_close as isize, fd) };
        Err(e)
    };
    for _ in 0..2 {
        let t = template();
        if t < 0 {
            break;
        }
        let cmd = if cloexec {
            libc::F_DUPFD_CLOEXEC
        } else {
            libc::F_DUPFD
        };
        // SAFETY: fcntl dup of our template.
        let fd = unsafe { raw!(libc::SYS_fcntl as isize, t as isize, cmd as isize, 0isize) };
        if fd < 0 {
            TEMPLATE.store(-1, Relaxed); // closed behind our back: make a new one
            continue;
        }
        // The template sits at a high number, which programs rarely close or reuse. Its
        // close/dup2/dup3/close_range reach `fd_gone` only where the fast pass lets the
        // syscall through to the hook (a `close` of a host fd, the template among them,
        // never does), so it may go behind our back: closed, the dup above fails and a
        // new template is made; its number taken
        // by another file, a dup only reserves a number (placeholders are never read or
        // written) and the inode check catches it. Checking the inode (an `fstat`,
        // ≈ 0.33 µs) on every open was a tenth of a round trip: it is checked on the
        // first dup and then on every 64th.
        if DUPS.fetch_add(1, Relaxed).is_multiple_of(64)
            && inode(fd as i32) != Some(TEMPLATE_INO.load(Relaxed))
        {
            // the number is someone else's file now: not ours to keep open
            TEMPLATE.store(-1, Relaxed);
            let _ = fail(fd, Errno::EIO);
            continue;
        }
        if fd as usize >= MAX_FD {
            return fail(fd, Errno::EMFILE);
        }
        return Ok((fd as i32, true));
    }
    let fd = memfd(MEMFD_NAME, if cloexec { libc::MFD_CLOEXEC } else { 0 });
    if fd < 0 {
        return Err(Errno::new(-fd as i32));
    }
    if fd as usize >= MAX_FD {
        return fail(fd, Errno::EMFILE);
    }
    Ok((fd as i32, false))
}

/// Makes the placeholder template now if there is none (see [`new_kernel_fd`]).
pub fn prepare() {
    template();
}

/// The template fd, opened if needed (-1 if that fails).
fn template() -> i32 {
    let t = TEMPLATE.load(Relaxed);
    if t >= 0 {
        return t;
    }
    let m = memfd(
        b"madfs-placeholder\0",
        libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
    );
    if m < 0 {
        return -1;
    }
    // Sealed empty: I/O that bypasses the preload on a madfs fd (io_uring, libaio, a static
    // binary's own syscalls) must not land in the placeholder as if it were the file. Writes
    // fail with EPERM, reads find an empty file.
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: adds seals to our own new memfd.
    unsafe {
        raw!(
            libc::SYS_fcntl as isize,
            m,
            libc::F_ADD_SEALS as isize,
            seals as isize
        )
    };
    let high = (fd_limit().unwrap_or(0) / 2).clamp(3, 4096) as isize;
    // SAFETY: raw syscalls renumbering and closing our own fd.
    unsafe {
        let t = raw!(
            libc::SYS_fcntl as isize,
            m,
            libc::F_DUPFD_CLOEXEC as isize,
            high
        );
        raw!(libc::SYS_close as isize, m);
        if t < 0 {
            return -1;
        }
        let Some(ino) = inode(t as i32) else {
            raw!(libc::SYS_close as isize, t);
            return -1;
        };
        TEMPLATE_INO.store(ino, Relaxed);
        TEMPLATE.store(t as i32, Relaxed);
        t as i32
    }
}

/// After exec: finds inherited madfs fds (memfds named `madfs`) and registers them,
/// one description per memfd inode. This runs at the start of every process whose parent
/// image had madfs fds when it exec'd ([`crate::hooks::FDS_ENV`]), so it is cheap: one
/// `ppoll` over fds 0..1023 (open or not) where the fd limit allows (reading `/proc/self/fd`
/// costs ≈ 40 µs the first time in a process), then an `fstat` per open fd; only a deleted
/// regular file of our size is looked at closer (its link name, then its header's magic).
pub fn adopt_inherited() {
    // only an image that a process with madfs fds exec'd can have any (its exec hook said so)
    let Some(token) = std::env::var_os(crate::hooks::FDS_ENV) else {
        return;
    };
    madfs_client::hold::continue_image(&token.to_string_lossy());
    let mut seen: Vec<(u64, Arc<Desc>)> = Vec::new();
    let mut found = |fd: i32| {
        if let Some(d) = inherited(fd, &mut seen) {
            insert(fd, d);
        }
    };
    if let Some(limit) = fd_limit().filter(|l| *l <= POLL_SCAN_MAX) {
        let mut pfd = [libc::pollfd {
            fd: 0,
            events: 0,
            revents: 0,
        }; 1024];
        let mut base = 0;
        while (base as u64) < limit {
            for (i, p) in pfd.iter_mut().enumerate() {
                *p = libc::pollfd {
                    fd: base + i as i32,
                    events: 0,
                    revents: 0,
                };
            }
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: ppoll (aarch64 has no poll) with a zero timeout on our array.
            let n = unsafe {
                raw!(
                    libc::SYS_ppoll as isize,
                    pfd.as_mut_ptr() as isize,
                    pfd.len() as isize,
                    &zero as *const _ as isize,
                    0isize,
                    0isize,
                )
            };
            if n < 0 {
                return adopt_from_proc(&mut found);
            }
            for p in &pfd {
                if p.revents & libc::POLLNVAL == 0 {
                    found(p.fd);
                }
            }
            base += pfd.len() as i32;
        }
        return;
    }
    adopt_from_proc(&mut found)
}

/// Up to this fd limit, [`adopt_inherited`] polls every possible fd instead of listing
/// `/proc/self/fd`.
const POLL_SCAN_MAX: u64 = 4096;

/// Calls `found` for every open fd listed in `/proc/self/fd` (raw syscalls).
fn adopt_from_proc(found: &mut dyn FnMut(i32)) {
    // SAFETY: raw syscalls on our own buffers; the directory fd is closed below.
    let dir = unsafe {
        raw!(
            libc::SYS_openat as isize,
            libc::AT_FDCWD as isize,
            c"/proc/self/fd".as_ptr() as isize,
            (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as isize,
        )
    };
    if dir < 0 {
        return;
    }
    let mut buf = [0u64; 512];
    loop {
        // SAFETY: getdents64 into our buffer.
        let n = unsafe {
            raw!(
                libc::SYS_getdents64 as isize,
                dir,
                buf.as_mut_ptr() as isize,
                std::mem::size_of_val(&buf) as isize,
            )
        };
        if n <= 0 {
            break;
        }
        // SAFETY: the kernel wrote n bytes of linux_dirent64 records.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, n as usize) };
        let mut off = 0;
        while off + 19 < bytes.len() {
            let reclen = u16::from_ne_bytes([bytes[off + 16], bytes[off + 17]]) as usize;
            let name = &bytes[off + 19..(off + reclen).min(bytes.len())];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            off += reclen.max(1);
            let Some(fd) = std::str::from_utf8(name)
                .ok()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if fd as isize != dir {
                found(fd);
            }
        }
    }
    // SAFETY: closing the directory fd we opened.
    unsafe { raw!(libc::SYS_close as isize, dir) };
}

/// The description behind inherited `fd`, if it is one of our memfds.
fn inherited(fd: i32, seen: &mut Vec<(u64, Arc<Desc>)>) -> Option<Arc<Desc>> {
    if fd < 0 || fd as usize >= MAX_FD {
        return None;
    }
    let st = fstat(fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG
        || st.st_nlink != 0
        || st.st_size != MAP_BYTES as i64
    {
        return None;
    }
    let link = format!("/proc/self/fd/{fd}\0");
    let mut target = [0u8; 64];
    // SAFETY: readlinkat into our buffer, NUL-terminated path.
    let n = unsafe {
        raw!(
            libc::SYS_readlinkat as isize,
            libc::AT_FDCWD as isize,
            link.as_ptr() as isize,
            target.as_mut_ptr() as isize,
            target.len() as isize,
        )
    };
    if n <= 0 || !target[..n as usize].starts_with(b"/memfd:madfs") {
        return None;
    }
    if let Some((_, d)) = seen.iter().find(|(ino, _)| *ino == st.st_ino) {
        return Some(d.clone());
    }
    let d = Desc::adopt(fd)?;
    let h = d.fixed();
    if h.kind == KIND_FILE && h.mode & libc::S_IFMT == libc::S_IFREG {
        // held by this image from now on (its drop releases it)
        madfs_client::hold::inherited(h.id, Cap::from_bytes(&h.cap).unwrap_or_default());
    }
    seen.push((st.st_ino, d.clone()));
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_and_adopt_description() {
        let a = Attr {
            id: 5,
            chunk_size: 4096,
            size: 10,
            mode: libc::S_IFREG | 0o644,
            ..Default::default()
        };
        let (fd, d) = Desc::create(
            KIND_FILE,
            libc::O_RDWR,
            "/x/y",
            &a,
            &Cap::default(),
            true,
            None,
        )
        .unwrap();
        assert_eq!(d.path(), "/x/y");
        d.wrote(100, false);
        assert_eq!(d.attr().size, 100);
        // not shared yet: nothing in the memfd
        assert!(Desc::adopt(fd).is_none());
        d.hdr().offset.store(7, Release);
        d.share(fd).unwrap();
        d.share(fd).unwrap();
        assert_eq!(d.path(), "/x/y");
        assert_eq!(d.hdr().offset.load(Acquire), 7);
        assert_eq!(d.attr().size, 100);
        let again = Desc::adopt(fd).unwrap();
        assert_eq!(again.hdr().offset.load(Acquire), 7);
        // one description, two views of the same page
        again.hdr().offset.store(9, Release);
        assert_eq!(d.hdr().offset.load(Acquire), 9);
        assert_eq!(again.path(), "/x/y");
        assert_eq!(again.take_dirty(), Some(100));
        // SAFETY: closing our fd.
        unsafe { libc::close(fd) };
    }
}
