//! One handler per syscall. Each returns `None` to pass the syscall through to the kernel or
//! `Some(ret)` with the syscall's return value (`-errno` on failure). Handlers only run for
//! syscall numbers the entry layer routes here, under the re-entrancy guard.

use crate::abi;
use crate::conn;
use crate::fdtable::{self, Desc, KIND_DIR, KIND_FILE};
use crate::path::{external, internal, is_under_mount, resolve_in, Resolved};
use madfs_client::{Client, FileSystem, OpenFile, OpenFlags};
use madfs_hookabi::raw;
use madfs_proto::{Attr, Errno, FsResult, TimeSpec};
use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use std::sync::{Arc, Mutex};

type Ret = Option<isize>;

static CWD: Mutex<Option<String>> = Mutex::new(None);
static CWD_IN: AtomicBool = AtomicBool::new(false);
/// `cwd_host` of [`crate::shared`] is true while relative paths from the working directory
/// are surely host paths: the process is in a host directory and no `vfork` child ever chose
/// one of its own (such a child runs on its parent's memory: from then on the hook judges
/// relative paths, in every thread). The front's interception engine reads it for its fast
/// pass-through.
fn cwd_host() -> &'static AtomicBool {
    &crate::shared().cwd_host
}
/// A `vfork` child chose its own working directory (sticky; see [`cwd_host`]).
static CHILD_CHOSE_CWD: AtomicBool = AtomicBool::new(false);
pub(crate) static UMASK: AtomicU32 = AtomicU32::new(0o022);
/// Environment variable that carries a madfs working directory across `exec`.
pub use madfs_hookabi::CWD_ENV;
/// Environment variable that tells a new image it may have inherited madfs fds (set by
/// [`sys_execve`] whenever the process has any); without it the image does not look (and
/// the front does not load the core before the first madfs path).
pub use madfs_hookabi::FDS_ENV;

/// Set-up when the core starts (before its hook is first called).
pub fn init() {
    if std::ptr::eq(crate::shared(), &crate::LOCAL) {
        // no front (unit tests): the mount from the environment, as the front reads it
        crate::shared().set_mount(madfs_hookabi::mount_from_env());
    }
    // SAFETY: umask only swaps a process attribute; restored at once.
    let old = unsafe { libc::umask(0o022) };
    unsafe { libc::umask(old) };
    UMASK.store(old, Relaxed);
    if let Ok(cwd) = std::env::var(CWD_ENV) {
        if let Ok(p) = madfs_placement::normalize(&cwd) {
            set_cwd(Some(p));
        }
    }
}

pub fn mount() -> &'static [u8] {
    crate::shared().mount()
}

fn set_cwd(p: Option<String>) {
    let mut c = CWD.lock().unwrap_or_else(|e| e.into_inner());
    CWD_IN.store(p.is_some(), Release);
    // SeqCst: a vfork child's `set_child_cwd` in between leaves `false` either way
    cwd_host().store(p.is_none(), SeqCst);
    if CHILD_CHOSE_CWD.load(SeqCst) {
        cwd_host().store(false, SeqCst);
    }
    *c = p;
}

thread_local! {
    /// The working directory a `vfork`/`posix_spawn` child chose for itself (`Some(None)`: a
    /// host directory) before it execs, boxed (null: none). The child runs on its parent
    /// thread's memory, so the process-wide one must stay the parent's; the parent frees this
    /// when it resumes. A raw pointer in a `Cell`: no destructor, so touching it never
    /// registers one, which allocates (the clone hook runs inside `fork`, which holds
    /// malloc's locks: a first touch there deadlocked).
    static CHILD_CWD: Cell<*mut Option<String>> = const { Cell::new(std::ptr::null_mut()) };
}

/// Sets the `vfork` child's own working directory.
fn set_child_cwd(dir: Option<String>) {
    CHILD_CHOSE_CWD.store(true, SeqCst);
    cwd_host().store(false, SeqCst);
    let old = CHILD_CWD.with(|c| c.replace(Box::into_raw(Box::new(dir))));
    if !old.is_null() {
        // SAFETY: made by Box::into_raw above and owned by this slot.
        drop(unsafe { Box::from_raw(old) });
    }
}

/// Before a new process (not a thread) is cloned from this thread. Allocates and frees
/// nothing: it runs inside `fork`, with malloc's locks held.
fn before_process_clone(flags: u64) {
    // an earlier vfork child's directory must not become the next child's (left behind,
    // not freed)
    CHILD_CWD.with(|c| c.set(std::ptr::null_mut()));
    conn::before_process_clone(flags);
    // the child must share the state of the fds it inherits
    fdtable::share_all();
}

/// The working directory a `vfork` child set for itself, if we are that child.
fn child_cwd() -> Option<Option<String>> {
    let p = CHILD_CWD.with(Cell::get);
    if p.is_null() {
        return None;
    }
    if conn::in_vfork_child() {
        // SAFETY: a live box owned by the slot.
        Some(unsafe { (*p).clone() })
    } else {
        // the parent, resumed after its child's exec or exit
        CHILD_CWD.with(|c| c.set(std::ptr::null_mut()));
        // SAFETY: as above; no longer reachable from the slot.
        drop(unsafe { Box::from_raw(p) });
        None
    }
}

fn cwd() -> Option<String> {
    if let Some(c) = child_cwd() {
        return c;
    }
    CWD.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Is the working directory on the mount?
fn cwd_in() -> bool {
    if let Some(c) = child_cwd() {
        return c.is_some();
    }
    CWD_IN.load(Acquire)
}

pub(crate) fn neg(e: Errno) -> isize {
    e.as_neg() as isize
}

pub(crate) fn ret<T>(r: FsResult<T>, ok: impl FnOnce(T) -> isize) -> Ret {
    Some(match r {
        Ok(v) => ok(v),
        Err(e) => neg(e),
    })
}

pub(crate) fn zero<T>(r: FsResult<T>) -> Ret {
    ret(r, |_| 0)
}

/// # Safety
/// `p` must be null or point to a NUL-terminated string.
unsafe fn cstr<'a>(p: isize) -> Option<&'a [u8]> {
    if p == 0 {
        None
    } else {
        // SAFETY: per the contract.
        Some(unsafe { CStr::from_ptr(p as *const libc::c_char) }.to_bytes())
    }
}

/// What a (dirfd, path) pair refers to.
pub(crate) enum Target {
    External,
    Ours(String),
    Fail(Errno),
}

fn from(r: Result<Resolved, Errno>) -> Target {
    match r {
        Ok(Resolved::Internal(p)) => Target::Ours(p),
        Ok(Resolved::External) => Target::External,
        Err(e) => Target::Fail(e),
    }
}

/// Resolves a path argument. The check for absolute paths outside the mount touches only the
/// caller's bytes: no allocation, no lock.
pub(crate) fn target(dirfd: i64, path: isize) -> Target {
    // SAFETY: syscall path arguments are C strings (or null, which the kernel rejects).
    let Some(bytes) = (unsafe { cstr(path) }) else {
        return Target::External;
    };
    if bytes.first() == Some(&b'/') {
        if !is_under_mount(bytes, mount()) {
            return proc_fd(bytes).unwrap_or(Target::External);
        }
        return from(internal(mount(), bytes));
    }
    let base = if dirfd == libc::AT_FDCWD as i64 {
        if !cwd_in() {
            return Target::External;
        }
        match cwd() {
            Some(c) => c,
            None => return Target::External,
        }
    } else {
        if !fdtable::is_ours(dirfd) {
            return Target::External;
        }
        match fdtable::get(dirfd) {
            Some(d) if d.is_dir() => d.path().to_owned(),
            Some(_) => return Target::Fail(Errno::ENOTDIR),
            None => return Target::Fail(Errno::EBADF),
        }
    };
    if bytes.is_empty() {
        return Target::Fail(Errno::ENOENT);
    }
    from(resolve_in(&base, bytes))
}

/// Whether `(dirfd, path)` certainly names no madfs file, without allocating: an absolute
/// path outside the mount (and not under `/proc/self/fd/`), or a relative (or empty:
/// `AT_EMPTY_PATH`) path from a host directory or a host working directory. Where this says
/// `true`, [`target`] says `External`: the hook's early exit ([`crate::entry::hook`]).
pub fn surely_external(dirfd: i64, path: isize) -> bool {
    // SAFETY: syscall path arguments are C strings (or null).
    let Some(bytes) = (unsafe { cstr(path) }) else {
        return false;
    };
    match bytes.first() {
        Some(b'/') => !is_under_mount(bytes, mount()) && !bytes.starts_with(PROC_FD),
        _ if dirfd == libc::AT_FDCWD as i64 => !cwd_in(),
        _ => !fdtable::is_ours(dirfd),
    }
}

const PROC_FD: &[u8] = b"/proc/self/fd/";

/// `/proc/self/fd/N` where N is a madfs fd names that file (the kernel would follow the link
/// to the placeholder behind it). glibc's `fchmodat(AT_SYMLINK_NOFOLLOW)` opens the file with
/// `O_PATH` and changes it through this name: GNU tar's directories stayed at mode 0700.
fn proc_fd(bytes: &[u8]) -> Option<Target> {
    let n = bytes.strip_prefix(PROC_FD)?;
    if n.is_empty() || n.len() > 9 || !n.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let fd = n.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0'));
    match fd_target(fd) {
        Target::External => None,
        t => Some(t),
    }
}

/// The madfs file behind `fd` (External: not a madfs fd).
fn fd_target(fd: i64) -> Target {
    if !fdtable::is_ours(fd) {
        return Target::External;
    }
    match fdtable::get(fd) {
        Some(d) => Target::Ours(d.path().to_owned()),
        None => Target::Fail(Errno::EBADF),
    }
}

macro_rules! ours {
    ($t:expr) => {
        match $t {
            Target::External => return None,
            Target::Fail(e) => return Some(neg(e)),
            Target::Ours(p) => p,
        }
    };
}

/// `(dirfd, "")` with `AT_EMPTY_PATH`: the fd itself.
fn empty_path(path: isize, flags: i64) -> bool {
    // SAFETY: C string argument.
    flags & libc::AT_EMPTY_PATH as i64 != 0 && unsafe { cstr(path) }.is_some_and(|b| b.is_empty())
}

/// The open file of description `d`, where this process found it last (see `Desc::found_at`
/// for what comes back from an operation).
fn file(c: &Client, d: &Desc) -> OpenFile {
    match d.whereabouts() {
        Some(at) => c.handle_at(d.path(), &at, d.attr(), d.cap()),
        None => c.handle(d.path().to_owned(), d.attr(), d.cap()),
    }
}

fn acc(d: &Desc) -> i32 {
    d.flags() & libc::O_ACCMODE
}

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

// ---------------------------------------------------------------- symbolic links
//
// A link is an entry whose data (inline chunk 0) is its target. Lookups are by full path with
// no walk, so links are followed where they show: a link as the last component answers the
// lookup itself (stat, open, or the server's ELOOP for chmod/truncate/utimens/chown), and a
// link among the ancestors makes the lookup fail with ENOENT/ENOTDIR, after which (only then)
// the ancestors are examined. Targets outside the mount go to the kernel.

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

fn readlink_ours(p: &str) -> FsResult<String> {
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

/// A raw syscall's 0-or-`-errno` return as a result.
pub(crate) fn raw_unit(r: isize) -> FsResult<()> {
    raw_res(r).map(|_| ())
}

/// A raw syscall's return as a result.
pub(crate) fn raw_res(r: isize) -> FsResult<isize> {
    if r < 0 {
        Err(Errno::new(-r as i32))
    } else {
        Ok(r)
    }
}

const AT_FDCWD: isize = libc::AT_FDCWD as isize;

/// A `*at` syscall on a host path, relative to the working directory:
/// `nr(AT_FDCWD, h, a[0], a[1], a[2])`.
///
/// # Safety
/// `a` holds what syscall `nr` expects after its path (the caller's own buffers and values).
pub(crate) unsafe fn raw_at(nr: i64, h: &CStr, a: [isize; 3]) -> isize {
    // SAFETY: per the contract; `h` is NUL-terminated.
    unsafe { raw!(nr as isize, AT_FDCWD, h.as_ptr() as isize, a[0], a[1], a[2]) }
}

fn stat_fd(d: &Desc) -> FsResult<Attr> {
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

// ---------------------------------------------------------------- open, close, dup, fcntl

fn open_path(p: String, flags: i32, mode: u32) -> FsResult<i32> {
    let nofollow = flags & libc::O_NOFOLLOW != 0;
    with_links(
        &p,
        !nofollow,
        |p| open_once(p, flags, mode),
        |h| {
            // SAFETY: openat on a host path; mode is read only with O_CREAT/O_TMPFILE.
            let r = unsafe { raw_at(libc::SYS_openat, h, [flags as isize, mode as isize, 0]) };
            raw_res(r).map(|fd| fd as i32)
        },
    )
}

/// The open reference a successful lookup took (`madfs_client::hold`), given back unless
/// the open ends with a description that will.
struct Held(Option<u64>);

impl Held {
    fn of(a: &Attr) -> Held {
        Held(a.is_file().then_some(a.id))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(id) = self.0.take() {
            madfs_client::hold::closed(id);
        }
    }
}

/// `open` of madfs path `p`; ELOOP when `p` is a symbolic link.
fn open_once(p: &str, flags: i32, mode: u32) -> FsResult<i32> {
    if conn::in_vfork_child() {
        // A `vfork`/`posix_spawn` child shares our memory but not our fd table: a
        // description it made would go into the parent's table under a number the parent
        // does not have (and a first connection made here would keep its fds in the child
        // only). Such a child cannot open madfs files (refused before any side effect such
        // as O_CREAT/O_TRUNC); its parent opens them and passes the fd.
        return Err(Errno::ENOTSUP);
    }
    let access = flags & libc::O_ACCMODE;
    let create = flags & libc::O_CREAT != 0;
    let excl = flags & libc::O_EXCL != 0;
    // as the kernel: O_TRUNC truncates (and needs write permission) with O_RDONLY too
    let trunc = flags & libc::O_TRUNC != 0 && flags & libc::O_PATH == 0;
    let mode = mode & !UMASK.load(Relaxed) & 0o7777;
    // what the server checks against the file's mode bits
    let want = if flags & libc::O_PATH != 0 {
        0
    } else {
        match access {
            libc::O_WRONLY => madfs_proto::ACCESS_W,
            libc::O_RDWR => madfs_proto::ACCESS_R | madfs_proto::ACCESS_W,
            _ if trunc => madfs_proto::ACCESS_R | madfs_proto::ACCESS_W,
            _ => madfs_proto::ACCESS_R,
        }
    };
    let keep = !(libc::O_CREAT
        | libc::O_EXCL
        | libc::O_TRUNC
        | libc::O_CLOEXEC
        | libc::O_NOCTTY
        | libc::O_DIRECTORY
        | libc::O_NOFOLLOW);
    let status = flags & keep;
    // changes made by this process from here on make the open's attributes stale for fstat
    let gen = madfs_client::mutations();
    let cloexec = flags & libc::O_CLOEXEC != 0;
    // the kernel fd of a plain open is made while its lookup is on the wire (dropped, as
    // on every error below, it is closed)
    let mut early: Option<fdtable::KernelFd> = None;
    let mut held = Held(None);
    let looked_up = conn::with(|c| {
        if create {
            if flags & libc::O_DIRECTORY != 0 {
                return Err(Errno::EINVAL);
            }
            let f = c.open_as(
                p,
                OpenFlags {
                    create,
                    excl,
                    trunc,
                    mode,
                },
                want,
            )?;
            held = Held::of(&f.attr);
            if f.attr.is_link() {
                return Err(Errno::ELOOP);
            }
            return Ok((KIND_FILE, f.attr, f.cap));
        }
        let (a, k) = c.open_normalized_overlapped(p, want, || fdtable::new_kernel_fd(cloexec));
        if let Ok((a, _)) = &a {
            held = Held::of(a);
        }
        // no fd (EMFILE) fails the open before anything else, as in the kernel, and so
        // before O_TRUNC changes the file
        early = Some(k?);
        let (a, cap) = a?;
        if a.is_link() {
            if flags & libc::O_PATH != 0 && flags & libc::O_NOFOLLOW != 0 {
                if flags & libc::O_DIRECTORY != 0 {
                    // (coreutils' `ln -n` asks so whether its destination is a directory)
                    return Err(Errno::ENOTDIR);
                }
                // the link itself, for fstat and *at(fd, "", AT_EMPTY_PATH) (glibc's
                // fchmodat(AT_SYMLINK_NOFOLLOW) opens it so to answer EOPNOTSUPP)
                return Ok((KIND_FILE, a, cap));
            }
            return Err(Errno::ELOOP);
        }
        if a.is_dir() {
            if access != libc::O_RDONLY {
                return Err(Errno::EISDIR);
            }
            return Ok((KIND_DIR, a, cap));
        }
        if flags & libc::O_DIRECTORY != 0 {
            return Err(Errno::ENOTDIR);
        }
        if a.is_special() {
            return Ok((KIND_FILE, a, cap));
        }
        if trunc && a.size > 0 {
            c.truncate(p, 0)?;
            return Ok((KIND_FILE, Attr { size: 0, ..a }, cap));
        }
        Ok((KIND_FILE, a, cap))
    });
    let (kind, attr, cap) = looked_up?;
    if attr.is_special() {
        // node-local: a host object behind it (`crate::special`), not a madfs descriptor
        drop(early);
        return crate::special::open(&attr, flags);
    }
    // fstat may use the answer of a lookup, or of a create whose request was the one change
    // any client of the process made meanwhile (a truncate makes several: no)
    let now = madfs_client::mutations();
    let fresh = match (create, trunc) {
        (false, false) => Some(gen),
        (true, false) => (now == gen + 1).then_some(now),
        _ => None,
    }
    .map(|gen| fdtable::Fresh {
        attr,
        gen,
        until: std::time::Instant::now() + fdtable::FRESH_FOR,
    });
    let k = match early {
        Some(k) => k,
        None => fdtable::new_kernel_fd(cloexec)?,
    };
    let fd = k.fd();
    let d = Desc::create_on(k, kind, status, p, &attr, &cap, fresh)?;
    held.0 = None; // the description's drop gives it back
    fdtable::insert(fd, d);
    Ok(fd)
}

fn sys_openat(dirfd: i64, path: isize, flags: i64, mode: i64) -> Ret {
    let p = ours!(target(dirfd, path));
    ret(open_path(p, flags as i32, mode as u32), |fd| fd as isize)
}

/// Forgets `fd` in this process and publishes the size of its description if dirty; with
/// the close-sync setting, a description written to is made durable first.
fn forget(fd: i64) -> FsResult<()> {
    let Some(d) = fdtable::remove(fd) else {
        return Ok(());
    };
    let r = if !d.is_dir() && d.take_unsynced() && conn::with(|c| Ok(c.close_sync()))? {
        sync_desc(&d)
    } else {
        publish(&d)
    };
    drop(d);
    if fdtable::RELEASES_DUE.swap(false, Relaxed) {
        // a batch of closes for the files' home servers
        let _ = conn::with(|c| {
            c.flush_releases_quietly();
            Ok(())
        });
    }
    r
}

/// fsync of the file behind `d`; its unpublished size travels in the fsync request to the
/// metadata server (one round trip instead of a `SetSize` first).
fn sync_desc(d: &Desc) -> FsResult<()> {
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

fn sys_close(fd: i64) -> Ret {
    fdtable::fd_gone(fd);
    if !fdtable::is_ours(fd) || conn::in_vfork_child() {
        return None;
    }
    let r = forget(fd);
    // SAFETY: closing the kernel fd that backed the madfs fd.
    let k = unsafe { raw!(libc::SYS_close as isize, fd as isize) };
    Some(if r.is_err() && k == 0 {
        neg(Errno::EIO)
    } else {
        k
    })
}

fn sys_close_range(first: i64, last: i64, flags: i64) -> Ret {
    if flags & libc::CLOSE_RANGE_CLOEXEC as i64 == 0 && !conn::in_vfork_child() {
        fdtable::fds_gone(first, last);
        let last = last.min(fdtable::MAX_FD as i64 - 1);
        let mut fd = first.max(0);
        while fd <= last {
            if fdtable::is_ours(fd) {
                let _ = forget(fd);
            }
            fd += 1;
        }
    }
    None
}

fn adopt_dup(new: isize, d: Arc<Desc>) -> isize {
    if new >= 0 {
        if new as usize >= fdtable::MAX_FD {
            // SAFETY: closing the fd we just got.
            unsafe { raw!(libc::SYS_close as isize, new) };
            return neg(Errno::EMFILE);
        }
        fdtable::insert(new as i32, d);
    }
    new
}

fn sys_dup(fd: i64) -> Ret {
    if !fdtable::is_ours(fd) || conn::in_vfork_child() {
        return None;
    }
    let d = fdtable::get(fd)?;
    // SAFETY: dup of a valid fd.
    let new = unsafe { raw!(libc::SYS_dup as isize, fd as isize) };
    Some(adopt_dup(new, d))
}

fn sys_dup3(old: i64, new: i64, flags: i64, is_dup2: bool) -> Ret {
    if old != new {
        fdtable::fd_gone(new);
    }
    let old_ours = fdtable::is_ours(old);
    let new_ours = fdtable::is_ours(new);
    if (!old_ours && !new_ours) || conn::in_vfork_child() {
        return None;
    }
    if old == new {
        return if is_dup2 {
            None
        } else {
            Some(neg(Errno::EINVAL))
        };
    }
    if new_ours {
        let _ = forget(new);
    }
    if !old_ours {
        return None;
    }
    let d = fdtable::get(old)?;
    // SAFETY: dup3 on fds the caller named.
    let r = unsafe {
        raw!(
            libc::SYS_dup3 as isize,
            old as isize,
            new as isize,
            flags as isize,
        )
    };
    Some(adopt_dup(r, d))
}

fn sys_fcntl(fd: i64, cmd: i64, arg: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    match cmd as i32 {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            if conn::in_vfork_child() {
                return None;
            }
            // SAFETY: fcntl dup on a valid fd.
            let r = unsafe {
                raw!(
                    libc::SYS_fcntl as isize,
                    fd as isize,
                    cmd as isize,
                    arg as isize,
                )
            };
            Some(adopt_dup(r, d))
        }
        libc::F_GETFD | libc::F_SETFD => None,
        libc::F_GETFL => Some(d.flags() as isize),
        libc::F_SETFL => {
            let settable = libc::O_APPEND
                | libc::O_NONBLOCK
                | libc::O_DIRECT
                | libc::O_NOATIME
                | libc::O_ASYNC;
            let new = (d.flags() & !settable) | (arg as i32 & settable);
            d.hdr().flags.store(new as u32, Release);
            Some(0)
        }
        // record locks cannot be honoured across madfs clients: say so
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => Some(neg(Errno::ENOLCK)),
        _ => Some(neg(Errno::EINVAL)),
    }
}

// ---------------------------------------------------------------- data

/// # Safety
/// `buf` must be valid for `len` bytes (the kernel's EFAULT check is the caller's promise).
unsafe fn slice_mut<'a>(buf: isize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) }
}

/// # Safety
/// As [`slice_mut`].
unsafe fn slice<'a>(buf: isize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
}

fn file_desc(fd: i64) -> Result<Arc<Desc>, Errno> {
    let d = fdtable::get(fd).ok_or(Errno::EBADF)?;
    if d.is_dir() {
        return Err(Errno::EISDIR);
    }
    Ok(d)
}

fn do_read(d: &Desc, off: Option<u64>, buf: &mut [u8]) -> FsResult<usize> {
    if acc(d) == libc::O_WRONLY {
        return Err(Errno::EBADF);
    }
    let _serial = d.local();
    let pos = off.unwrap_or_else(|| d.hdr().offset.load(Acquire));
    let n = conn::with(|c| c.read(&file(c, d), pos, buf))?;
    if off.is_none() {
        d.hdr().offset.store(pos + n as u64, Release);
    }
    Ok(n)
}

fn do_write(d: &Desc, off: Option<u64>, data: &[u8]) -> FsResult<usize> {
    if acc(d) == libc::O_RDONLY {
        return Err(Errno::EBADF);
    }
    let mut local = d.local();
    conn::with(|c| {
        let mut f = file(c, d);
        if let Some(cap) = local.privs_cap {
            f.cap = cap;
        }
        let r = write_file(c, d, &mut f, off, data);
        if f.cap != d.cap() {
            local.privs_cap = Some(f.cap);
        }
        d.found_at(f.whereabouts());
        r
    })
}

fn write_file(
    c: &Client,
    d: &Desc,
    f: &mut OpenFile,
    off: Option<u64>,
    data: &[u8],
) -> FsResult<usize> {
    let (pos, n) = match off {
        Some(o) => (o, c.write(f, o, data)?),
        // O_APPEND: the metadata server reserves the range atomically among appenders
        None if d.flags() & libc::O_APPEND != 0 && !data.is_empty() => {
            (c.append(f, data)?, data.len())
        }
        None => {
            let o = d.hdr().offset.load(Acquire);
            (o, c.write(f, o, data)?)
        }
    };
    d.wrote(pos + n as u64, !f.is_dirty());
    if off.is_none() {
        d.hdr().offset.store(pos + n as u64, Release);
    }
    Ok(n)
}

fn sys_read(fd: i64, buf: isize, len: i64, off: Option<i64>) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    if off.is_some_and(|o| o < 0) {
        return Some(neg(Errno::EINVAL));
    }
    // SAFETY: the caller's buffer of `len` bytes.
    let buf = unsafe { slice_mut(buf, len as usize) };
    ret(
        file_desc(fd).and_then(|d| do_read(&d, off.map(|o| o as u64), buf)),
        |n| n as isize,
    )
}

/// `mmap` of a madfs fd. A private mapping (`MAP_PRIVATE`, any protection) gets a private
/// copy of the file's bytes: anonymous memory filled by a read of the range (the rest of
/// its last page, and any page past the end of the file, reads as zeros), then given the
/// asked protection. A private mapping's writes never reach the file, and whether it sees
/// later writes to the file is unspecified, so the copy is what POSIX allows; it costs a
/// read of the whole range at `mmap` time. Shared mappings need the servers' pages in this
/// address space and are refused with ENODEV.
fn sys_mmap(a: [isize; 6]) -> Ret {
    let (len, prot, flags, fd, off) = (a[1] as usize, a[2], a[3] as i32, a[4] as i32 as i64, a[5]);
    if flags & libc::MAP_ANONYMOUS != 0 || !fdtable::is_ours(fd) {
        return None;
    }
    const MAP_TYPE: i32 = 0x0f;
    if flags & MAP_TYPE != libc::MAP_PRIVATE {
        return Some(neg(Errno::ENODEV));
    }
    // SAFETY: getauxval has no preconditions.
    let page = (unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize).max(4096);
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(page) {
        return Some(neg(Errno::EINVAL));
    }
    let d = match fdtable::get(fd) {
        Some(d) if d.is_dir() => return Some(neg(Errno::ENODEV)),
        Some(d) if acc(&d) == libc::O_WRONLY => return Some(neg(Errno::EACCES)),
        Some(d) => d,
        None => return Some(neg(Errno::EBADF)),
    };
    // the caller's placement flags (MAP_FIXED, MAP_FIXED_NOREPLACE, MAP_NORESERVE, …) on
    // anonymous memory; MAP_DENYWRITE and MAP_EXECUTABLE are ignored by the kernel anyway
    let anon = (flags & !(MAP_TYPE | libc::MAP_DENYWRITE | libc::MAP_EXECUTABLE))
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as isize;
    // SAFETY: an anonymous mapping where and as the caller asked (its address and flags are
    // the caller's promise, as for the kernel's mmap).
    let m = unsafe { raw!(libc::SYS_mmap as isize, a[0], len, rw, anon as isize, -1, 0) };
    if (-4095..0).contains(&m) {
        return Some(m);
    }
    // SAFETY: the `len` bytes just mapped readable and writable.
    let buf = unsafe { slice_mut(m, len) };
    let mut done = 0;
    while done < len {
        match do_read(&d, Some(off as u64 + done as u64), &mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) => {
                // SAFETY: our own mapping, not yet handed out.
                unsafe { raw!(libc::SYS_munmap as isize, m, len) };
                return Some(neg(e));
            }
        }
    }
    if prot != rw {
        // SAFETY: our own mapping; the protection is the caller's.
        let r = unsafe { raw!(libc::SYS_mprotect as isize, m, len, prot) };
        if r < 0 {
            // SAFETY: as above.
            unsafe { raw!(libc::SYS_munmap as isize, m, len) };
            return Some(r);
        }
    }
    Some(m)
}

fn sys_write(fd: i64, buf: isize, len: i64, off: Option<i64>) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    if off.is_some_and(|o| o < 0) {
        return Some(neg(Errno::EINVAL));
    }
    // SAFETY: the caller's buffer of `len` bytes.
    let data = unsafe { slice(buf, len as usize) };
    ret(
        file_desc(fd).and_then(|d| do_write(&d, off.map(|o| o as u64), data)),
        |n| n as isize,
    )
}

/// # Safety
/// `iov` must point to `cnt` iovecs.
unsafe fn iovecs<'a>(iov: isize, cnt: i64) -> Result<&'a [libc::iovec], Errno> {
    if !(0..=1024).contains(&cnt) {
        return Err(Errno::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(iov as *const libc::iovec, cnt as usize) })
}

fn sys_readv(fd: i64, iov: isize, cnt: i64, off: Option<i64>) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let run = || -> FsResult<usize> {
        if off.is_some_and(|o| o < 0) {
            return Err(Errno::EINVAL);
        }
        let d = file_desc(fd)?;
        // SAFETY: the caller's iovec array.
        let v = unsafe { iovecs(iov, cnt) }?;
        let mut total = 0usize;
        for e in v {
            // SAFETY: each iovec names a caller buffer.
            let buf = unsafe { slice_mut(e.iov_base as isize, e.iov_len) };
            let n = do_read(&d, off.map(|o| o as u64 + total as u64), buf)?;
            total += n;
            if n < e.iov_len {
                break;
            }
        }
        Ok(total)
    };
    ret(run(), |n| n as isize)
}

fn sys_writev(fd: i64, iov: isize, cnt: i64, off: Option<i64>) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let run = || -> FsResult<usize> {
        if off.is_some_and(|o| o < 0) {
            return Err(Errno::EINVAL);
        }
        let d = file_desc(fd)?;
        // SAFETY: the caller's iovec array.
        let v = unsafe { iovecs(iov, cnt) }?;
        let mut all = Vec::with_capacity(v.iter().map(|e| e.iov_len).sum());
        for e in v {
            // SAFETY: each iovec names a caller buffer.
            all.extend_from_slice(unsafe { slice(e.iov_base as isize, e.iov_len) });
        }
        do_write(&d, off.map(|o| o as u64), &all)
    };
    ret(run(), |n| n as isize)
}

fn sys_lseek(fd: i64, off: i64, whence: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    let cur = d.hdr().offset.load(Acquire) as i64;
    let r = (|| -> FsResult<i64> {
        let new = match whence as i32 {
            libc::SEEK_SET => off,
            libc::SEEK_CUR => cur.checked_add(off).ok_or(Errno::EOVERFLOW)?,
            libc::SEEK_END | libc::SEEK_DATA | libc::SEEK_HOLE if d.is_dir() => {
                return Err(Errno::EINVAL)
            }
            libc::SEEK_END => (stat_fd(&d)?.size as i64)
                .checked_add(off)
                .ok_or(Errno::EOVERFLOW)?,
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let size = stat_fd(&d)?.size as i64;
                if off < 0 || off >= size {
                    return Err(Errno::ENXIO);
                }
                if whence as i32 == libc::SEEK_DATA {
                    off
                } else {
                    size
                }
            }
            _ => return Err(Errno::EINVAL),
        };
        if new < 0 {
            return Err(Errno::EINVAL);
        }
        Ok(new)
    })();
    if let Ok(new) = r {
        if d.is_dir() && new == 0 {
            // rewind: a fresh listing (and the end of a find's matches); the range stays
            let mut l = d.local();
            l.dir.cursor = None;
            l.dir.found = None;
        }
        d.hdr().offset.store(new as u64, Release);
    }
    ret(r, |n| n as isize)
}

fn sys_ftruncate(fd: i64, len: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let r = (|| {
        let d = file_desc(fd).map_err(|_| Errno::EINVAL)?;
        if len < 0 || acc(&d) == libc::O_RDONLY {
            return Err(Errno::EINVAL);
        }
        // the open's capability stands for the write permission (checked at open); the
        // file wherever it is now
        conn::with(|c| {
            let mut f = file(c, &d);
            let r = c.ftruncate(&mut f, len as u64);
            d.found_at(f.whereabouts());
            r
        })?;
        for other in fdtable::all() {
            if !other.is_dir() && other.attr().id == d.attr().id {
                other.truncated(len as u64);
            }
        }
        Ok(())
    })();
    zero(r)
}

fn truncate_path(p: &str, len: u64, cap: Option<madfs_proto::Cap>) -> FsResult<()> {
    conn::with(|c| c.truncate_with(p, len, cap))?;
    for d in fdtable::all() {
        if !d.is_dir() && d.path() == p {
            d.truncated(len);
        }
    }
    Ok(())
}

fn sys_truncate(path: isize, len: i64) -> Ret {
    let p = ours!(target(libc::AT_FDCWD as i64, path));
    if len < 0 {
        return Some(neg(Errno::EINVAL));
    }
    zero(with_links(
        &p,
        true,
        |p| truncate_path(p, len as u64, None),
        // SAFETY: truncate of a host path.
        |h| {
            raw_unit(unsafe {
                raw!(
                    libc::SYS_truncate as isize,
                    h.as_ptr() as isize,
                    len as isize,
                )
            })
        },
    ))
}

fn sys_fsync(fd: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    if d.is_dir() {
        return crate::sync::dir_fsync();
    }
    d.take_unsynced();
    zero(sync_desc(&d))
}

fn sys_fallocate(fd: i64, mode: i64, off: i64, len: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let r = (|| {
        let d = file_desc(fd)?;
        if mode != 0 {
            return Err(Errno::ENOTSUP);
        }
        if off < 0 || len <= 0 {
            return Err(Errno::EINVAL);
        }
        if acc(&d) == libc::O_RDONLY {
            return Err(Errno::EBADF);
        }
        let end = (off as u64).checked_add(len as u64).ok_or(Errno::EFBIG)?;
        if end > d.attr().size {
            d.wrote(end, false);
        }
        Ok(())
    })();
    zero(r)
}

// ---------------------------------------------------------------- metadata

/// What the stat family answers: attributes, or the kernel's answer for a host path (a link
/// leading out of the mount).
enum StatAns {
    Attr(Attr),
    Kernel(isize),
}

/// Attributes for the stat family: `(dirfd, "")` with `AT_EMPTY_PATH` is the fd itself; links
/// followed unless `AT_SYMLINK_NOFOLLOW`, `outside` stats a host path. `None`: not ours.
fn attr_at(
    dirfd: i64,
    path: isize,
    flags: i64,
    outside: impl FnOnce(&CStr) -> isize,
) -> Option<FsResult<StatAns>> {
    if empty_path(path, flags) {
        if !fdtable::is_ours(dirfd) {
            return None;
        }
        return Some(
            fdtable::get(dirfd)
                .ok_or(Errno::EBADF)
                .and_then(|d| stat_fd(&d))
                .map(StatAns::Attr),
        );
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW as i64 == 0;
    match target(dirfd, path) {
        Target::External => None,
        Target::Fail(e) => Some(Err(e)),
        Target::Ours(p) => Some(match stat_links(&p, follow) {
            Ok(Ok(a)) => Ok(StatAns::Attr(a)),
            Ok(Err(h)) => Ok(StatAns::Kernel(outside(&h))),
            Err(e) => Err(e),
        }),
    }
}

fn stat_answer(r: FsResult<StatAns>, fill: impl FnOnce(&Attr)) -> Ret {
    Some(match r {
        Ok(StatAns::Attr(a)) => {
            fill(&a);
            0
        }
        Ok(StatAns::Kernel(k)) => k,
        Err(e) => neg(e),
    })
}

fn sys_stat_at(dirfd: i64, path: isize, buf: isize, flags: i64) -> Ret {
    let flags_k = (flags & !(libc::AT_EMPTY_PATH as i64)) as isize;
    let r = attr_at(dirfd, path, flags, |h| {
        // SAFETY: newfstatat of a host path into the caller's buffer.
        unsafe { raw_at(libc::SYS_newfstatat, h, [buf, flags_k, 0]) }
    })?;
    // SAFETY: the caller's stat buffer.
    stat_answer(r, |a| unsafe { abi::fill_stat(buf as *mut libc::stat, a) })
}

fn sys_fstat(fd: i64, buf: isize) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let a = fdtable::get(fd)
        .ok_or(Errno::EBADF)
        .and_then(|d| stat_fd(&d));
    // SAFETY: the caller's stat buffer.
    zero(a.map(|a| unsafe { abi::fill_stat(buf as *mut libc::stat, &a) }))
}

fn sys_statx(dirfd: i64, path: isize, flags: i64, mask: isize, buf: isize) -> Ret {
    let flags_k = (flags & !(libc::AT_EMPTY_PATH as i64)) as isize;
    let r = attr_at(dirfd, path, flags, |h| {
        // SAFETY: statx of a host path into the caller's buffer.
        unsafe { raw_at(libc::SYS_statx, h, [flags_k, mask, buf]) }
    })?;
    // SAFETY: the caller's statx buffer.
    stat_answer(r, |a| unsafe {
        abi::fill_statx(buf as *mut libc::statx, a)
    })
}

fn sys_access(dirfd: i64, path: isize, mode: i64, flags: i64) -> Ret {
    if empty_path(path, flags) {
        return if fdtable::is_ours(dirfd) {
            Some(0)
        } else {
            None
        };
    }
    let p = ours!(target(dirfd, path));
    let mask =
        (mode as u32) & (madfs_proto::ACCESS_R | madfs_proto::ACCESS_W | madfs_proto::ACCESS_X);
    zero(
        stat_links_with(&p, flags & libc::AT_SYMLINK_NOFOLLOW as i64 == 0, |p, a| {
            // the server answers with the same check as for the operation itself
            if a.is_link() || mask == 0 {
                Ok(0)
            } else {
                conn::with(|c| c.access_normalized(p, mask)).map(|_| 0)
            }
        })
        .and_then(|r| match r {
            Ok(v) => v,
            // SAFETY: faccessat of a host path.
            Err(h) => raw_res(unsafe { raw_at(libc::SYS_faccessat, &h, [mode as isize, 0, 0]) }),
        }),
    )
}

fn sys_mkdirat(dirfd: i64, path: isize, mode: i64) -> Ret {
    let p = ours!(target(dirfd, path));
    let m = mode as u32 & !UMASK.load(Relaxed) & 0o7777;
    zero(with_links(
        &p,
        false,
        |p| conn::with(|c| c.mkdir(p, m)),
        // SAFETY: mkdirat of a host path.
        |h| raw_unit(unsafe { raw_at(libc::SYS_mkdirat, h, [mode as isize, 0, 0]) }),
    ))
}

fn sys_unlinkat(dirfd: i64, path: isize, flags: i64) -> Ret {
    let p = ours!(target(dirfd, path));
    if flags & libc::AT_REMOVEDIR as i64 != 0 && cwd().as_deref() == Some(p.as_str()) {
        return Some(neg(Errno::EBUSY));
    }
    let rm = flags & libc::AT_REMOVEDIR as i64 != 0;
    if rm {
        // as the kernel: a last component "." is EINVAL, ".." ENOTEMPTY (the normal form
        // resolved both away)
        // SAFETY: the caller's C string (target() read it already).
        let raw = unsafe { cstr(path) }.unwrap_or_default();
        let last = raw
            .rsplit(|b| *b == b'/')
            .find(|c| !c.is_empty())
            .unwrap_or_default();
        match last {
            b"." => return Some(neg(Errno::EINVAL)),
            b".." => return Some(neg(Errno::ENOTEMPTY)),
            _ => {}
        }
    }
    zero(with_links(
        &p,
        false,
        |p| conn::with(|c| if rm { c.rmdir(p) } else { c.unlink(p) }),
        // SAFETY: unlinkat of a host path.
        |h| raw_unit(unsafe { raw_at(libc::SYS_unlinkat, h, [flags as isize, 0, 0]) }),
    ))
}

fn sys_renameat(olddir: i64, old: isize, newdir: i64, new: isize, flags: i64) -> Ret {
    if old == 0 || new == 0 {
        return None; // the kernel's EFAULT (not EXDEV for the other path)
    }
    let (a, b) = (target(olddir, old), target(newdir, new));
    let (a, b) = match (a, b) {
        (Target::External, Target::External) => return None,
        (Target::Fail(e), _) | (_, Target::Fail(e)) => return Some(neg(e)),
        (Target::Ours(a), Target::Ours(b)) => (a, b),
        _ => return Some(neg(Errno::EXDEV)),
    };
    if flags & !(libc::RENAME_NOREPLACE as i64) != 0 {
        return Some(neg(Errno::EINVAL));
    }
    let noreplace = flags & libc::RENAME_NOREPLACE as i64 != 0;
    zero(match conn::with(|c| c.rename(&a, &b, noreplace)) {
        // a symbolic link among the ancestors (the servers see full paths): follow it
        Err(Errno::ENOTDIR) => {
            let (a2, b2) = (ancestors_followed(&a), ancestors_followed(&b));
            match (a2, b2) {
                (Err(e), _) | (_, Err(e)) => Err(e),
                (Ok(None), Ok(None)) => Err(Errno::ENOTDIR),
                (Ok(x), Ok(y)) => {
                    let (x, y) = (x.unwrap_or(a), y.unwrap_or(b));
                    conn::with(|c| c.rename(&x, &y, noreplace))
                }
            }
        }
        r => r,
    })
}

/// `p` with the symbolic links among its ancestors followed (`None`: there are none; EXDEV
/// when one leads out of madfs, ELOOP after too many).
fn ancestors_followed(p: &str) -> FsResult<Option<String>> {
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

fn times(ts: isize) -> (TimeSpec, TimeSpec) {
    if ts == 0 {
        return (TimeSpec::Now, TimeSpec::Now);
    }
    // SAFETY: utimensat's times argument is two timespecs.
    let t = unsafe { std::slice::from_raw_parts(ts as *const libc::timespec, 2) };
    let one = |t: &libc::timespec| match t.tv_nsec {
        libc::UTIME_NOW => TimeSpec::Now,
        libc::UTIME_OMIT => TimeSpec::Omit,
        n => TimeSpec::At(t.tv_sec * 1_000_000_000 + n),
    };
    (one(&t[0]), one(&t[1]))
}

fn fd_or_path(dirfd: i64, path: isize, flags: i64) -> Target {
    if path == 0 || empty_path(path, flags) {
        return fd_target(dirfd);
    }
    target(dirfd, path)
}

fn sys_utimensat(dirfd: i64, path: isize, ts: isize, flags: i64) -> Ret {
    let p = ours!(fd_or_path(dirfd, path, flags));
    let (a, m) = times(ts);
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW as i64 == 0;
    // sizes this process has not published yet first: publishing one later would make it
    // the file's modification time (`cp -a` sets the times before it closes)
    for d in fdtable::all() {
        if !d.is_dir() && d.path() == p {
            if let Err(e) = publish(&d) {
                return Some(neg(e));
            }
        }
    }
    zero(with_links(
        &p,
        follow,
        |p| conn::with(|c| c.utimens_at(p, a, m, !follow)),
        // SAFETY: utimensat of a host path with the caller's times.
        |h| raw_unit(unsafe { raw_at(libc::SYS_utimensat, h, [ts, 0, 0]) }),
    ))
}

/// `fchmodat2` (and `fchmodat`, `fchmod` with no flags): with `AT_SYMLINK_NOFOLLOW`, a
/// symbolic link itself cannot change its mode (EOPNOTSUPP, as Linux answers).
fn sys_chmod(dirfd: i64, path: isize, mode: i64, flags: i64) -> Ret {
    let p = ours!(fd_or_path(dirfd, path, flags));
    let nofollow = libc::AT_SYMLINK_NOFOLLOW as i64;
    if flags & !(nofollow | libc::AT_EMPTY_PATH as i64) != 0 {
        return Some(neg(Errno::EINVAL));
    }
    let follow = flags & nofollow == 0;
    zero(with_links(
        &p,
        follow,
        |p| match conn::with(|c| c.chmod(p, mode as u32)) {
            Err(Errno::ELOOP) if !follow => Err(Errno::ENOTSUP),
            r => r,
        },
        // SAFETY: fchmodat(2) of a host path (the link itself not followed, if so asked).
        |h| {
            raw_unit(unsafe {
                if follow {
                    raw_at(libc::SYS_fchmodat, h, [mode as isize, 0, 0])
                } else {
                    raw_at(
                        madfs_hookabi::SYS_FCHMODAT2,
                        h,
                        [mode as isize, nofollow as isize, 0],
                    )
                }
            })
        },
    ))
}

fn sys_chown(dirfd: i64, path: isize, uid: i64, gid: i64, flags: i64) -> Ret {
    let p = ours!(fd_or_path(dirfd, path, flags));
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW as i64 == 0;
    zero(with_links(
        &p,
        follow,
        |p| conn::with(|c| c.chown_at(p, uid as u32, gid as u32, !follow)),
        // SAFETY: fchownat of a host path.
        |h| raw_unit(unsafe { raw_at(libc::SYS_fchownat, h, [uid as isize, gid as isize, 0]) }),
    ))
}

fn sys_statfs(t: Target, buf: isize) -> Ret {
    let _ = ours!(t);
    let s = conn::with(|c| c.statfs());
    // SAFETY: the caller's statfs buffer.
    zero(s.map(|s| unsafe { abi::fill_statfs(buf as *mut libc::statfs, &s) }))
}

fn sys_readlinkat(dirfd: i64, path: isize, buf: isize, size: i64) -> Ret {
    let p = ours!(target(dirfd, path));
    if size <= 0 {
        return Some(neg(Errno::EINVAL));
    }
    let r = stat_links_with(&p, false, |q, a| (q.to_string(), a)).and_then(|r| match r {
        Ok((q, a)) if a.is_link() => {
            let t = readlink_ours(&q)?;
            let n = t.len().min(size as usize);
            // SAFETY: the caller's buffer of `size` bytes.
            unsafe { slice_mut(buf, n) }.copy_from_slice(&t.as_bytes()[..n]);
            Ok(n as isize)
        }
        Ok(_) => Err(Errno::EINVAL),
        // SAFETY: readlinkat of a host path into the caller's buffer.
        Err(h) => raw_res(unsafe { raw_at(libc::SYS_readlinkat, &h, [buf, size as isize, 0]) }),
    });
    ret(r, |n| n)
}

fn sys_symlinkat(target_ptr: isize, dirfd: i64, path: isize) -> Ret {
    let p = ours!(target(dirfd, path));
    // SAFETY: the link target is a C string.
    let Some(t) = (unsafe { cstr(target_ptr) }) else {
        return Some(neg(Errno::EFAULT));
    };
    let Ok(t) = std::str::from_utf8(t) else {
        return Some(neg(Errno::EINVAL));
    };
    zero(with_links(
        &p,
        false,
        |p| conn::with(|c| c.symlink(t, p)),
        // SAFETY: symlinkat at a host path.
        |h| {
            raw_unit(unsafe {
                raw!(
                    libc::SYS_symlinkat as isize,
                    target_ptr,
                    AT_FDCWD,
                    h.as_ptr() as isize,
                )
            })
        },
    ))
}

fn refuse_path(dirfd: i64, path: isize, e: Errno) -> Ret {
    let _ = ours!(target(dirfd, path));
    Some(neg(e))
}

fn sys_linkat(olddir: i64, old: isize, newdir: i64, new: isize, flags: i64) -> Ret {
    if old == 0 || new == 0 {
        return None; // the kernel's EFAULT (not EXDEV for the other path)
    }
    let (a, b) = match (target(olddir, old), target(newdir, new)) {
        (Target::External, Target::External) => return None,
        (Target::Ours(a), Target::Ours(b)) => (a, b),
        (Target::Fail(e), _) | (_, Target::Fail(e)) => return Some(neg(e)),
        _ => return Some(neg(Errno::EXDEV)),
    };
    if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) as i64 != 0 {
        return Some(neg(Errno::EINVAL));
    }
    zero(link_ours(
        &a,
        &b,
        flags & libc::AT_SYMLINK_FOLLOW as i64 != 0,
    ))
}

/// `link(a, b)` of two madfs paths: links among `a`'s ancestors (and the last one with
/// `follow`) and among `b`'s ancestors are followed; one leading out of madfs is EXDEV.
fn link_ours(a: &str, b: &str, follow: bool) -> FsResult<()> {
    let src = match stat_links_with(a, follow, |p, _| p.to_owned())? {
        Ok(p) => p,
        Err(_) => return Err(Errno::EXDEV), // the source leads out of madfs
    };
    match conn::with(|c| c.link(&src, b)) {
        Err(Errno::ENOTDIR) => match ancestors_followed(b)? {
            Some(b2) => conn::with(|c| c.link(&src, &b2)).map(drop),
            None => Err(Errno::ENOTDIR),
        },
        r => r.map(drop),
    }
}

fn refuse_fd(fd: i64, e: Errno) -> Ret {
    fdtable::is_ours(fd).then(|| neg(e))
}

// ---------------------------------------------------------------- directories

/// Cookie of an entry's directory position: positions 0 and 1 share cookie 2 with position 2
/// (cookies 0 and 1 stand before `.` and `..`).
fn dir_cookie_pos(hash: u64) -> i64 {
    madfs_client::dir_pos(hash).max(2) as i64
}

fn sys_getdents64(fd: i64, buf: isize, len: i64) -> Ret {
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    if !d.is_dir() {
        return Some(neg(Errno::ENOTDIR));
    }
    // SAFETY: the caller's buffer of `len` bytes.
    let out = unsafe { slice_mut(buf, len.max(0) as usize) };
    let mut local = d.local();
    let st = &mut local.dir;
    let mut cookie = d.hdr().offset.load(Acquire) as i64;
    let mut used = 0usize;
    let put = |out: &mut [u8], used: &mut usize, ino: u64, off: i64, t: u8, name: &str| {
        match abi::put_dirent(&mut out[*used..], ino, off, t, name) {
            Some(n) => {
                *used += n;
                Ok(true)
            }
            None if *used == 0 => Err(Errno::EINVAL),
            None => Ok(false),
        }
    };
    let r = (|| -> FsResult<()> {
        if let Some(found) = &st.found {
            while let Some(p) = found.get(cookie as usize) {
                if !put(out, &mut used, 0, cookie + 1, libc::DT_UNKNOWN, p)? {
                    break;
                }
                cookie += 1;
            }
            return Ok(());
        }
        let (from, to) = st.range.unwrap_or((0, madfs_client::DIR_POS_END));
        if st.range.is_none() {
            if cookie == 0 {
                if !put(out, &mut used, d.attr().id, 1, libc::DT_DIR, ".")? {
                    return Ok(());
                }
                cookie = 1;
            }
            if cookie == 1 {
                if !put(out, &mut used, 1, 2, libc::DT_DIR, "..")? {
                    return Ok(());
                }
                cookie = 2;
            }
        }
        let (mut cur, mut ahead) = match st.cursor.take() {
            Some((c, at, ahead)) if at == cookie => (c, ahead),
            _ => {
                let start = if cookie <= 2 {
                    from
                } else {
                    (cookie as u64).max(from)
                };
                let c = conn::with(|c| c.dir_cursor(d.path(), start, to))?;
                (c, Default::default())
            }
        };
        loop {
            if ahead.len() < 2 {
                if let Some(e) = conn::with(|c| c.dir_next(&mut cur))? {
                    ahead.push_back(e);
                    continue;
                }
            }
            let Some(e) = ahead.front() else { break };
            // an entry's d_off resumes after it, unless the next shares its position
            let pos = dir_cookie_pos(e.hash);
            let off = match ahead.get(1) {
                Some(n) if dir_cookie_pos(n.hash) == pos => pos,
                _ => pos.saturating_add(1),
            };
            if !put(out, &mut used, e.ino, off, abi::dtype(e.kind), &e.name)? {
                break;
            }
            ahead.pop_front();
            cookie = off;
        }
        st.cursor = Some((cur, cookie, ahead));
        Ok(())
    })();
    match r {
        Ok(()) => {
            d.hdr().offset.store(cookie as u64, Release);
            Some(used as isize)
        }
        Err(e) => Some(neg(e)),
    }
}

/// The madfs ioctls on a directory fd (`madfs_proto::ioctl`); anything else: ENOTTY.
fn sys_ioctl(fd: i64, req: i64, arg: isize) -> Ret {
    use madfs_proto::ioctl::*;
    if !fdtable::is_ours(fd) {
        return None;
    }
    let d = fdtable::get(fd)?;
    let req = req as u64 & 0xffff_ffff;
    if !d.is_dir()
        || ![
            MADFS_IOC_DIR_RANGE,
            MADFS_IOC_FIND_LIST,
            MADFS_IOC_FIND_COUNT,
        ]
        .contains(&req)
    {
        return Some(neg(Errno::ENOTTY));
    }
    if arg == 0 {
        return Some(neg(Errno::EFAULT));
    }
    if req == MADFS_IOC_DIR_RANGE {
        // SAFETY: the caller passes a struct madfs_dir_range.
        let r = unsafe { std::ptr::read_unaligned(arg as *const DirRange) };
        let to = if r.to == 0 {
            madfs_client::DIR_POS_END
        } else {
            r.to.min(madfs_client::DIR_POS_END)
        };
        let mut l = d.local();
        l.dir = fdtable::DirState {
            range: Some((r.from.min(to), to)),
            ..Default::default()
        };
        d.hdr().offset.store(0, Release);
        return Some(0);
    }
    // SAFETY: the caller passes a struct madfs_find.
    let mut f = unsafe { std::ptr::read_unaligned(arg as *const FindArgs) };
    let name = if f.name.is_null() {
        None
    } else {
        // SAFETY: a NUL-terminated pattern.
        match unsafe { CStr::from_ptr(f.name) }.to_str() {
            Ok(s) => Some(s.to_owned()),
            Err(_) => return Some(neg(Errno::EINVAL)),
        }
    };
    if f.kind != 0 && f.kind != libc::S_IFREG && f.kind != libc::S_IFDIR {
        return Some(neg(Errno::EINVAL));
    }
    let filter = madfs_proto::FindFilter {
        name: name.as_deref(),
        size: (f.size_unit != 0).then_some((f.size, f.size_unit)),
        newer_than: (f.newer_than_ns != i64::MIN).then_some(f.newer_than_ns),
        kind: (f.kind != 0).then_some(f.kind),
        pending: false,
    };
    let dir = d.path().to_string();
    let r = conn::with(|c| c.find(&dir, &filter));
    let (paths, scanned) = match r {
        Ok(x) => x,
        Err(e) => return Some(neg(e)),
    };
    f.matched = paths.len() as u64;
    f.scanned = scanned;
    // SAFETY: as above; the struct is the caller's, writable (an _IOWR request).
    unsafe { std::ptr::write_unaligned(arg as *mut FindArgs, f) };
    if req == MADFS_IOC_FIND_LIST {
        let strip = if dir == "/" { 1 } else { dir.len() + 1 };
        let rel = paths
            .into_iter()
            .map(|p| p[strip.min(p.len())..].to_string())
            .collect();
        let mut l = d.local();
        l.dir = fdtable::DirState {
            found: Some(rel),
            ..Default::default()
        };
        d.hdr().offset.store(0, Release);
    }
    Some(0)
}

fn sys_chdir(t: Target, raw_call: impl FnOnce() -> isize) -> Ret {
    match t {
        Target::Ours(p) => {
            if conn::in_vfork_child() {
                // no servers here (a child made by vfork or posix_spawn before its exec,
                // e.g. Python's subprocess with cwd=): taken as named, for the exec to pass
                // on; the new program finds out if it is not a directory
                set_child_cwd(Some(p));
                return Some(0);
            }
            match stat_links_with(&p, true, |q, a| (q.to_string(), a)) {
                Ok(Ok((q, a))) if a.is_dir() => {
                    set_cwd(Some(q));
                    Some(0)
                }
                Ok(Ok(_)) => Some(neg(Errno::ENOTDIR)),
                Ok(Err(h)) => {
                    // SAFETY: chdir to a host path.
                    let r = unsafe { raw!(libc::SYS_chdir as isize, h.as_ptr() as isize) };
                    if r == 0 {
                        set_cwd(None);
                    }
                    Some(r)
                }
                Err(e) => Some(neg(e)),
            }
        }
        Target::Fail(e) => Some(neg(e)),
        Target::External if cwd_in() => {
            let r = raw_call();
            if r == 0 {
                if conn::in_vfork_child() {
                    set_child_cwd(None);
                } else {
                    set_cwd(None);
                }
            }
            Some(r)
        }
        Target::External => None,
    }
}

fn sys_getcwd(buf: isize, size: i64) -> Ret {
    if !cwd_in() {
        return None;
    }
    let c = cwd()?;
    let mut bytes = external(mount(), &c);
    bytes.push(0);
    if (size as usize) < bytes.len() {
        return Some(neg(Errno::ERANGE));
    }
    // SAFETY: the caller's buffer of `size` bytes.
    unsafe { slice_mut(buf, bytes.len()) }.copy_from_slice(&bytes);
    Some(bytes.len() as isize)
}

// ---------------------------------------------------------------- process life

/// Publishes every dirty description before the process image goes away.
pub(crate) fn flush_all() {
    for d in fdtable::all() {
        let _ = publish(&d);
    }
}

/// The process is exiting: the files it holds open are released at once (rather than when
/// its lease runs out), so that one unlinked meanwhile is dropped now.
pub(crate) fn release_all() {
    if !madfs_client::hold::ever() || conn::in_vfork_child() {
        return;
    }
    let _ = conn::with(|c| {
        c.goodbye();
        Ok(())
    });
}

/// `execve`: carries a madfs working directory into the new image (`MADFS_CWD`), removing a
/// stale one. Leaves the call alone when neither applies.
fn sys_execve(path: isize, argv: isize, envp: isize, extra: Option<(i64, i64)>) -> Ret {
    let (dirfd, at_flags) = extra.unwrap_or((libc::AT_FDCWD as i64, 0));
    // a program stored on the mount: the kernel cannot open it, we run a copy
    let exe = if empty_path(path, at_flags) && fdtable::is_ours(dirfd) {
        match fdtable::get(dirfd) {
            Some(d) => Some(d.path().to_owned()),
            None => return Some(neg(Errno::EBADF)),
        }
    } else {
        match target(dirfd, path) {
            Target::External => None,
            Target::Fail(e) => return Some(neg(e)),
            Target::Ours(p) => Some(p),
        }
    };
    // a vfork/posix_spawn child shares our memory: it changes nothing shared and talks to no
    // server (what it allocates here stays behind in the parent's heap, a few hundred bytes)
    let vfork = conn::in_vfork_child();
    if !vfork {
        // the new image finds the state of inherited fds in their memfds
        fdtable::share_all();
    }
    let is = |s: &[u8], key: &str| {
        let key = key.as_bytes();
        s.len() > key.len() && s.starts_with(key) && s[key.len()] == b'='
    };
    let (mut has_cwd, mut has_fds) = (false, false);
    let mut n = 0usize;
    if envp != 0 {
        // SAFETY: envp is a NULL-terminated array of C strings.
        unsafe {
            let mut p = envp as *const *const libc::c_char;
            while !(*p).is_null() {
                let s = CStr::from_ptr(*p).to_bytes();
                has_cwd |= is(s, CWD_ENV);
                has_fds |= is(s, FDS_ENV);
                n += 1;
                p = p.add(1);
            }
        }
    }
    let cwd_in = cwd_in();
    // a vfork child's madfs fds are its parent's (posix_spawn's dup2s happen in the kernel
    // only): any fd of the process may be one the new image inherits
    let fds = !fdtable::is_empty();
    if exe.is_none() && !cwd_in && !has_cwd && fds == has_fds {
        return None;
    }
    if !vfork {
        flush_all();
    }
    let mut owned: Vec<std::ffi::CString> = Vec::new();
    let mut ptrs: Vec<*const libc::c_char> = Vec::with_capacity(n + 3);
    if envp != 0 {
        // SAFETY: as above.
        unsafe {
            let mut p = envp as *const *const libc::c_char;
            while !(*p).is_null() {
                let s = CStr::from_ptr(*p).to_bytes();
                if !is(s, CWD_ENV) && !is(s, FDS_ENV) {
                    ptrs.push(*p);
                }
                p = p.add(1);
            }
        }
    }
    if cwd_in {
        if let Some(c) = cwd() {
            if let Ok(s) = std::ffi::CString::new(format!("{CWD_ENV}={c}")) {
                owned.push(s);
            }
        }
    }
    if fds {
        // the new image goes on as this process's client (its open references are ours);
        // a vfork child's image is a client of its own (the parent keeps its fds too)
        let token = if vfork {
            "1".to_string()
        } else {
            madfs_client::hold::exec_token()
        };
        if let Ok(s) = std::ffi::CString::new(format!("{FDS_ENV}={token}")) {
            owned.push(s);
        }
    }
    ptrs.extend(owned.iter().map(|s| s.as_ptr()));
    ptrs.push(std::ptr::null());
    let env = if envp == 0 { 0 } else { ptrs.as_ptr() as isize };
    if let Some(exe) = exe {
        if vfork {
            // no client may be made or used here: a shell, a normal process, runs it for us
            return Some(exec_through_shell(&exe, argv, env));
        }
        // SAFETY: a C string (the target resolved it).
        let given = unsafe { cstr(path) }.unwrap_or_default();
        // SAFETY: the caller's argv; `env` is NULL-terminated and outlives the call.
        return Some(unsafe { exec_file(&exe, given, argv, env, 0) });
    }
    // SAFETY: execve with the caller's path/argv and our NULL-terminated envp.
    let r = crate::entry::exec_outside_hook(|| unsafe {
        match extra {
            None => raw!(
                libc::SYS_execve as isize,
                path,
                argv,
                ptrs.as_ptr() as isize,
            ),
            Some((dirfd, flags)) => raw!(
                libc::SYS_execveat as isize,
                dirfd as isize,
                path,
                argv,
                ptrs.as_ptr() as isize,
                flags as isize,
            ),
        }
    });
    Some(r)
}

/// The caller's NULL-terminated argv from `skip` on.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of C strings.
unsafe fn args_from(argv: isize, skip: usize) -> Vec<*const libc::c_char> {
    let mut v = vec![];
    if argv != 0 {
        let mut p = argv as *const *const libc::c_char;
        // SAFETY: per the contract.
        unsafe {
            while !(*p).is_null() {
                v.push(*p);
                p = p.add(1);
            }
        }
    }
    v.drain(..skip.min(v.len()));
    v
}

/// Runs the program `exe` (a madfs path; `given` is the path as the caller named it) with
/// `argv` and `envp`, as `execve` would: a script (`#!interpreter [arg]`) runs its
/// interpreter with the script's path, anything else runs from a copy in a memfd
/// (`execveat(memfd, "", AT_EMPTY_PATH)`), which the kernel reads in full before the copy
/// is dropped at exec. Returns only on failure (`-errno`). The copy means `/proc/self/exe`
/// names the memfd, not the madfs path.
///
/// # Safety
/// `argv` and `envp` are null or NULL-terminated arrays of C strings.
unsafe fn exec_file(exe: &str, given: &[u8], argv: isize, envp: isize, depth: u32) -> isize {
    if depth > 4 {
        return neg(Errno::ELOOP);
    }
    let (exe, attr) = match stat_links_with(exe, true, |p, a| (p.to_owned(), a)) {
        Ok(Ok(found)) => found,
        Ok(Err(host)) => {
            // a link out of the mount: the kernel runs that file
            // SAFETY: per the contract.
            return unsafe { raw!(libc::SYS_execve as isize, host.as_ptr(), argv, envp) };
        }
        Err(e) => return neg(e),
    };
    if !attr.is_file() || attr.mode & 0o111 == 0 {
        return neg(Errno::EACCES);
    }
    let mut head = [0u8; 256];
    let n = match conn::with(|c| {
        let (a, cap) = c.open_read(&exe)?;
        c.read(&c.handle(exe.clone(), a, cap), 0, &mut head)
    }) {
        Ok(n) => n,
        Err(e) => return neg(e),
    };
    if head[..n].starts_with(b"#!") {
        // SAFETY: per the contract.
        return unsafe { exec_script(&head[2..n], given, argv, envp, depth) };
    }
    // SAFETY: per the contract.
    unsafe { exec_copy(&exe, &attr, argv, envp) }
}

/// The `#!` line of a script: runs `interpreter [arg] given argv[1..]`.
///
/// # Safety
/// As [`exec_file`].
unsafe fn exec_script(line: &[u8], given: &[u8], argv: isize, envp: isize, depth: u32) -> isize {
    let Some(end) = line.iter().position(|&c| c == b'\n') else {
        return neg(Errno::ENOEXEC);
    };
    let blank = |c: &u8| *c == b' ' || *c == b'\t';
    let line = &line[..end];
    let start = line.iter().position(|c| !blank(c)).unwrap_or(line.len());
    let line = &line[start..];
    let split = line.iter().position(blank).unwrap_or(line.len());
    let (interp, rest) = line.split_at(split);
    let rest = rest.trim_ascii();
    if interp.is_empty() {
        return neg(Errno::ENOEXEC);
    }
    let (Ok(interp_c), Ok(arg_c), Ok(given_c)) = (
        std::ffi::CString::new(interp),
        std::ffi::CString::new(rest),
        std::ffi::CString::new(given),
    ) else {
        return neg(Errno::ENOEXEC);
    };
    let mut args = vec![interp_c.as_ptr()];
    if !rest.is_empty() {
        args.push(arg_c.as_ptr());
    }
    args.push(given_c.as_ptr());
    // SAFETY: per the contract.
    args.extend(unsafe { args_from(argv, 1) });
    args.push(std::ptr::null());
    let new_argv = args.as_ptr() as isize;
    match target(libc::AT_FDCWD as i64, interp_c.as_ptr() as isize) {
        // SAFETY: per the contract; `args` and the strings outlive the call.
        Target::Ours(p) => unsafe { exec_file(&p, interp, new_argv, envp, depth + 1) },
        Target::Fail(e) => neg(e),
        // SAFETY: as above.
        Target::External => unsafe {
            raw!(libc::SYS_execve as isize, interp_c.as_ptr(), new_argv, envp)
        },
    }
}

/// Copies the program into a memfd and runs it from there.
///
/// # Safety
/// As [`exec_file`].
unsafe fn exec_copy(exe: &str, attr: &Attr, argv: isize, envp: isize) -> isize {
    const MFD_EXEC: isize = 0x10;
    let name = c"madfs-exec";
    let flags = libc::MFD_CLOEXEC as isize;
    // SAFETY: memfd_create with a C string name; MFD_EXEC (Linux ≥ 6.3) where vm.memfd_noexec
    // makes memfds non-executable by default, plain on older kernels.
    let mut fd = unsafe {
        raw!(
            libc::SYS_memfd_create as isize,
            name.as_ptr(),
            flags | MFD_EXEC
        )
    };
    if fd == -(libc::EINVAL as isize) {
        // SAFETY: as above.
        fd = unsafe { raw!(libc::SYS_memfd_create as isize, name.as_ptr(), flags) };
    }
    if fd < 0 {
        return fd;
    }
    let r = fill_copy(fd, exe, attr).and_then(|()| {
        // SAFETY: per the contract; our memfd with an empty path.
        raw_res(unsafe {
            raw!(
                libc::SYS_execveat as isize,
                fd,
                c"".as_ptr(),
                argv,
                envp,
                libc::AT_EMPTY_PATH
            )
        })
    });
    // SAFETY: our own fd (still here: exec failed).
    unsafe { raw!(libc::SYS_close as isize, fd) };
    match r {
        Ok(_) => neg(Errno::EIO),
        Err(e) => neg(e),
    }
}

/// Reads the whole file `exe` into the memfd `fd` (sized, mapped, filled, unmapped).
fn fill_copy(fd: isize, exe: &str, attr: &Attr) -> FsResult<()> {
    let len = attr.size as usize;
    // SAFETY: our own memfd.
    raw_unit(unsafe { raw!(libc::SYS_ftruncate as isize, fd, len) })?;
    if len == 0 {
        return Ok(());
    }
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as isize;
    // SAFETY: a new shared mapping of our memfd, `len` bytes long.
    let m = raw_res(unsafe { raw!(libc::SYS_mmap as isize, 0, len, rw, libc::MAP_SHARED, fd, 0) })?;
    // SAFETY: the `len` bytes just mapped.
    let buf = unsafe { slice_mut(m, len) };
    let read = conn::with(|c| {
        let (a, cap) = c.open_read(exe)?;
        let f = c.handle(
            exe.to_owned(),
            Attr {
                size: attr.size,
                ..a
            },
            cap,
        );
        let mut done = 0;
        while done < len {
            match c.read(&f, done as u64, &mut buf[done..])? {
                0 => break,
                n => done += n,
            }
        }
        Ok(())
    });
    // SAFETY: our own mapping.
    unsafe { raw!(libc::SYS_munmap as isize, m, len) };
    read
}

/// In a `vfork`/`posix_spawn` child, which may not talk to the servers: `/bin/sh -c 'exec
/// "$0" "$@"' exe argv[1..]`, so a normal process (under the preload, which `envp` carries)
/// runs the program. Returns only on failure.
fn exec_through_shell(exe: &str, argv: isize, envp: isize) -> isize {
    let Ok(exe_c) = std::ffi::CString::new(external(mount(), exe)) else {
        return neg(Errno::ENOENT);
    };
    let mut args = vec![
        c"/bin/sh".as_ptr(),
        c"-c".as_ptr(),
        c"exec \"$0\" \"$@\"".as_ptr(),
    ];
    args.push(exe_c.as_ptr());
    // SAFETY: the caller's argv (a NULL-terminated array of C strings).
    args.extend(unsafe { args_from(argv, 1) });
    args.push(std::ptr::null());
    crate::entry::exec_outside_hook(|| {
        // SAFETY: NULL-terminated argv of C strings that outlive the call; the caller's envp.
        unsafe {
            raw!(
                libc::SYS_execve as isize,
                c"/bin/sh".as_ptr(),
                args.as_ptr(),
                envp
            )
        }
    })
}

// ---------------------------------------------------------------- dispatch

/// An `int` argument (fd, flags, mode) as the kernel reads it: the low 32 bits, sign-extended.
fn fd(a: isize) -> i64 {
    a as i32 as i64
}

/// Routes one syscall. `None`: not ours, let the kernel do it.
pub fn dispatch(nr: i64, a: [isize; 6]) -> Ret {
    let [a0, a1, a2, a3, a4, _] = a;
    // integer arguments as the kernel reads them (64-bit values) ...
    let (i1, i2, i3) = (a1 as i64, a2 as i64, a3 as i64);
    // ... and fd/int arguments (the upper 32 bits of an `int` register are not defined)
    let (f0, f1, f2, f3, f4) = (fd(a0), fd(a1), fd(a2), fd(a3), fd(a4));
    let cwd_fd = libc::AT_FDCWD as i64;
    match nr {
        libc::SYS_openat => sys_openat(f0, a1, f2, f3),
        libc::SYS_close => sys_close(f0),
        libc::SYS_close_range => sys_close_range(f0, f1 as u32 as i64, i2),
        libc::SYS_read => sys_read(f0, a1, i2, None),
        libc::SYS_write => sys_write(f0, a1, i2, None),
        libc::SYS_pread64 => sys_read(f0, a1, i2, Some(i3)),
        libc::SYS_pwrite64 => sys_write(f0, a1, i2, Some(i3)),
        libc::SYS_readv => sys_readv(f0, a1, f2, None),
        libc::SYS_writev => sys_writev(f0, a1, f2, None),
        libc::SYS_preadv => sys_readv(f0, a1, f2, Some(i3)),
        libc::SYS_pwritev => sys_writev(f0, a1, f2, Some(i3)),
        libc::SYS_preadv2 => sys_readv(f0, a1, f2, (i3 != -1).then_some(i3)),
        libc::SYS_pwritev2 => sys_writev(f0, a1, f2, (i3 != -1).then_some(i3)),
        libc::SYS_lseek => sys_lseek(f0, i1, f2),
        libc::SYS_newfstatat => sys_stat_at(f0, a1, a2, f3),
        libc::SYS_fstat => sys_fstat(f0, a1),
        libc::SYS_statx => sys_statx(f0, a1, f2, a3, a4),
        libc::SYS_faccessat => sys_access(f0, a1, i2, 0),
        libc::SYS_faccessat2 => sys_access(f0, a1, i2, f3),
        libc::SYS_mkdirat => sys_mkdirat(f0, a1, f2),
        libc::SYS_unlinkat => sys_unlinkat(f0, a1, f2),
        libc::SYS_renameat => sys_renameat(f0, a1, f2, a3, 0),
        libc::SYS_renameat2 => sys_renameat(f0, a1, f2, a3, f4),
        libc::SYS_truncate => sys_truncate(a0, i1),
        libc::SYS_ftruncate => sys_ftruncate(f0, i1),
        libc::SYS_fsync | libc::SYS_fdatasync => sys_fsync(f0),
        libc::SYS_sync_file_range => sys_fsync(f0),
        libc::SYS_fallocate => sys_fallocate(f0, f1, i2, i3),
        libc::SYS_fadvise64 | libc::SYS_readahead => fdtable::is_ours(f0).then_some(0),
        libc::SYS_getdents64 => sys_getdents64(f0, a1, f2),
        libc::SYS_dup => sys_dup(f0),
        libc::SYS_dup3 => sys_dup3(f0, f1, f2, false),
        libc::SYS_fcntl => sys_fcntl(f0, f1, i2),
        libc::SYS_chdir => sys_chdir(target(cwd_fd, a0), || unsafe {
            raw!(libc::SYS_chdir as isize, a0)
        }),
        libc::SYS_fchdir => sys_chdir(fd_target(f0), || unsafe {
            raw!(libc::SYS_fchdir as isize, a0)
        }),
        libc::SYS_getcwd => sys_getcwd(a0, i1),
        libc::SYS_utimensat => sys_utimensat(f0, a1, a2, f3),
        libc::SYS_fchmodat => sys_chmod(f0, a1, f2, 0),
        madfs_hookabi::SYS_FCHMODAT2 => sys_chmod(f0, a1, f2, f3),
        libc::SYS_fchmod => fdtable::is_ours(f0)
            .then(|| sys_chmod(f0, 0, f1, 0))
            .flatten(),
        libc::SYS_fchownat => sys_chown(f0, a1, f2, f3, f4),
        libc::SYS_fchown => fdtable::is_ours(f0)
            .then(|| sys_chown(f0, 0, f1, f2, 0))
            .flatten(),
        libc::SYS_statfs => sys_statfs(target(cwd_fd, a0), a1),
        libc::SYS_fstatfs => {
            let t = if fdtable::is_ours(f0) {
                Target::Ours(String::new())
            } else {
                Target::External
            };
            sys_statfs(t, a1)
        }
        libc::SYS_readlinkat => sys_readlinkat(f0, a1, a2, i3),
        libc::SYS_symlinkat => sys_symlinkat(a0, f1, a2),
        libc::SYS_linkat => sys_linkat(f0, a1, f2, a3, f4),
        libc::SYS_mknodat => crate::special::sys_mknodat(f0, a1, f2, i3),
        libc::SYS_bind => crate::special::sys_bind(f0, a1, i2),
        libc::SYS_connect => crate::special::sys_connect(f0, a1, i2),
        libc::SYS_sync => crate::sync::sys_sync(),
        libc::SYS_syncfs => crate::sync::sys_syncfs(f0),
        n if crate::entry::xattr_path(n) => refuse_path(cwd_fd, a0, Errno::ENOTSUP),
        libc::SYS_fgetxattr
        | libc::SYS_fsetxattr
        | libc::SYS_flistxattr
        | libc::SYS_fremovexattr => refuse_fd(f0, Errno::ENOTSUP),
        libc::SYS_copy_file_range => {
            (fdtable::is_ours(f0) || fdtable::is_ours(f2)).then(|| neg(Errno::EXDEV))
        }
        libc::SYS_sendfile => {
            (fdtable::is_ours(f0) || fdtable::is_ours(f1)).then(|| neg(Errno::EINVAL))
        }
        libc::SYS_splice => {
            (fdtable::is_ours(f0) || fdtable::is_ours(f2)).then(|| neg(Errno::EINVAL))
        }
        libc::SYS_tee => (fdtable::is_ours(f0) || fdtable::is_ours(f1)).then(|| neg(Errno::EINVAL)),
        libc::SYS_mmap => sys_mmap(a),
        libc::SYS_ioctl => sys_ioctl(f0, i1, a2),
        libc::SYS_flock => refuse_fd(f0, Errno::ENOLCK),
        libc::SYS_umask => {
            // SAFETY: umask cannot fail.
            let old = unsafe { raw!(libc::SYS_umask as isize, a0) };
            UMASK.store(f0 as u32 & 0o777, Relaxed);
            Some(old)
        }
        libc::SYS_exit_group => {
            flush_all();
            release_all();
            None
        }
        // a new process (not a thread): it must share the state of the fds it inherits
        libc::SYS_clone => {
            if a0 as u64 & libc::CLONE_THREAD as u64 == 0 {
                before_process_clone(a0 as u64);
            }
            None
        }
        libc::SYS_clone3 => {
            let flags = if a0 != 0 {
                // SAFETY: clone3's first argument points to struct clone_args, flags first.
                unsafe { *(a0 as *const u64) }
            } else {
                0
            };
            if flags & libc::CLONE_THREAD as u64 == 0 {
                before_process_clone(flags);
            }
            None
        }
        libc::SYS_execve => sys_execve(a0, a1, a2, None),
        libc::SYS_execveat => sys_execve(a1, a2, a3, Some((f0, f4))),
        abi::DUP2 => sys_dup3(f0, f1, 0, true),
        abi::LEGACY_TIME => refuse_path(f0, a1, Errno::ENOSYS),
        _ => abi::legacy(nr, a).and_then(|(nr, a)| dispatch(nr, a)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn ext(dirfd: i64, p: &str) -> (bool, bool) {
        let c = CString::new(p).unwrap();
        let quick = surely_external(dirfd, c.as_ptr() as isize);
        let full = matches!(target(dirfd, c.as_ptr() as isize), Target::External);
        (quick, full)
    }

    /// The hook's early exit never lets a madfs path through, and takes the common host paths.
    #[test]
    fn surely_external_agrees_with_target() {
        let cwd = libc::AT_FDCWD as i64;
        for p in [
            "/etc/passwd",
            "/",
            "/madfs",
            "/madfs/",
            "/madfs/a/b",
            "/madfsx",
            "/madf",
            "/m",
            "/madfs/../etc",
            "/tmp/../madfs/x",
            "//madfs/a",
            "/proc/self/fd/3",
            "/proc/self/fd/",
            "/proc/self/fdx",
            "/proc/1/fd/3",
            "rel/x",
            "",
            ".",
            "..",
        ] {
            for dirfd in [cwd, 0, 7, 70_000, -5] {
                let (quick, full) = ext(dirfd, p);
                assert!(
                    !quick || full,
                    "{p:?} from {dirfd}: early exit for a madfs target"
                );
            }
        }
        for p in [
            "/etc/passwd",
            "/",
            "/madfsx",
            "/madf",
            "/tmp/../madfs/x",
            "rel",
            "",
        ] {
            assert_eq!(ext(cwd, p), (true, true), "{p:?}");
        }
        for p in [
            "/madfs",
            "/madfs/",
            "/madfs/a",
            "/madfs/../etc",
            "/proc/self/fd/3",
        ] {
            assert!(!ext(cwd, p).0, "{p:?}");
        }
        assert!(!surely_external(cwd, 0));
    }
}
