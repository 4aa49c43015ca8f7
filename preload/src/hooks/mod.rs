//! One handler per syscall. Each returns `None` to pass the syscall through to the kernel or
//! `Some(ret)` with the syscall's return value (`-errno` on failure). Handlers only run for
//! syscall numbers the entry layer routes here, under the re-entrancy guard.
//!
//! This file holds the set-up when the core starts ([`init`]) and the routing of syscall
//! numbers to handlers ([`dispatch`]). The handlers live in one file per area:
//! - `open`: `openat`, `close`, `close_range`, `dup`, `dup2`/`dup3`, `fcntl`;
//! - `data`: `read`/`write` and their positioned and vectored forms, `mmap`, `lseek`,
//!   `truncate`/`ftruncate`, `fsync`, `fallocate`;
//! - `attributes`: the stat family, `faccessat`, `utimensat`, `fchmodat`, `fchownat`,
//!   `statfs`;
//! - `links`: `readlinkat`, `symlinkat`, `linkat`;
//! - `directories`: `mkdirat`, `unlinkat`, `renameat`, `getdents64`, the madfs directory
//!   ioctls, `chdir`/`fchdir`, `getcwd`;
//! - `exec`: `execve`/`execveat`, and what runs before the process image goes away.
//!
//! They build on helper files, which the area files import (area files do not import
//! each other):
//! - `common`: return values, raw syscalls, the caller's strings and buffers, the umask;
//! - `cwd`: the working directory (the process's, a `vfork` child's);
//! - `paths`: whether a path argument names a madfs file (`Target`);
//! - `follow`: symbolic links followed on the mount;
//! - `desc`: the open file behind a madfs fd's description.

mod attributes;
mod common;
mod cwd;
mod data;
mod desc;
mod directories;
mod exec;
mod follow;
mod links;
mod open;
mod paths;

pub use paths::{mount, surely_external};

pub(crate) use common::{neg, raw_at, raw_res, zero, UMASK};
pub(crate) use exec::{flush_all, release_all};
pub(crate) use follow::with_links;
pub(crate) use paths::{target, Target};

use attributes::{
    sys_access, sys_chmod, sys_chown, sys_fstat, sys_stat_at, sys_statfs, sys_statx, sys_utimensat,
};
use common::Ret;
use cwd::{before_process_clone, set_cwd};
use data::{
    sys_fallocate, sys_fsync, sys_ftruncate, sys_lseek, sys_mmap, sys_read, sys_readv,
    sys_truncate, sys_write, sys_writev,
};
use directories::{
    sys_chdir, sys_getcwd, sys_getdents64, sys_ioctl, sys_mkdirat, sys_renameat, sys_unlinkat,
};
use exec::sys_execve;
use links::{sys_linkat, sys_readlinkat, sys_symlinkat};
use open::{sys_close, sys_close_range, sys_dup, sys_dup3, sys_fcntl, sys_openat};
use paths::{fd_target, ours};

use crate::abi;
use crate::fdtable;
use madfs_hookabi::raw;
use madfs_proto::Errno;
use std::sync::atomic::Ordering::*;

/// Environment variable that carries a madfs working directory across `exec`.
pub use madfs_hookabi::CWD_ENV;
/// Environment variable that tells a new image it may have inherited madfs fds (set by
/// [`exec::sys_execve`] whenever the process has any); without it the image does not look (and
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

fn refuse_path(dirfd: i64, path: isize, e: Errno) -> Ret {
    let _ = ours!(target(dirfd, path));
    Some(neg(e))
}

fn refuse_fd(fd: i64, e: Errno) -> Ret {
    fdtable::is_ours(fd).then(|| neg(e))
}

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
