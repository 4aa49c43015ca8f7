//! Path arguments: whether a `(dirfd, path)` pair names a madfs file ([`Target`], [`target`],
//! and [`surely_external`], the allocation-free test of the hook's early exit), including
//! `/proc/self/fd/N` and `AT_EMPTY_PATH`; the `ours!` macro that hands a path that is not
//! ours back to the kernel; the mount prefix. Symbolic links are followed later (`follow`).

use super::common::cstr;
use super::cwd::{cwd, cwd_in};
use crate::fdtable;
use crate::path::{internal, is_under_mount, resolve_in, Resolved};
use madfs_proto::Errno;

pub fn mount() -> &'static [u8] {
    crate::shared().mount()
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
pub(super) fn fd_target(fd: i64) -> Target {
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
pub(super) use ours;

/// `(dirfd, "")` with `AT_EMPTY_PATH`: the fd itself.
pub(super) fn empty_path(path: isize, flags: i64) -> bool {
    // SAFETY: C string argument.
    flags & libc::AT_EMPTY_PATH as i64 != 0 && unsafe { cstr(path) }.is_some_and(|b| b.is_empty())
}

pub(super) fn fd_or_path(dirfd: i64, path: isize, flags: i64) -> Target {
    if path == 0 || empty_path(path, flags) {
        return fd_target(dirfd);
    }
    target(dirfd, path)
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
