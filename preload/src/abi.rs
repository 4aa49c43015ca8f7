//! Everything architecture-specific in the preload: how attributes are laid out for `stat`,
//! `statx`, `statfs` and `getdents64` (through the `libc` crate's per-architecture structs:
//! `struct stat` is 144 bytes on x86_64, 128 on aarch64), and the legacy path syscalls that
//! only x86_64 has (`open`, `stat`, `mkdir`, …), which [`legacy`] rewrites into the `*at`
//! forms that both architectures share, so the handlers only know those. Syscall numbers come
//! from `libc::SYS_*` of the target. (The interception engines themselves live in
//! `madfs-intercept`.)

use madfs_proto::{Attr, StatFs, S_IFDIR, S_IFMT};

/// Device number reported for madfs files.
pub const DEV: u64 = 0x6d61;
/// `f_type` reported by statfs ("madf").
pub const FS_MAGIC: i64 = 0x6d61_6466;

fn split(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

fn blksize(a: &Attr) -> i64 {
    if a.chunk_size == 0 {
        4096
    } else {
        a.chunk_size as i64
    }
}

/// Fills a `struct stat`.
///
/// # Safety
/// `buf` must point to writable memory of `size_of::<libc::stat>()` bytes.
pub unsafe fn fill_stat(buf: *mut libc::stat, a: &Attr) {
    // SAFETY: caller guarantees buf is valid; an all-zero stat is a valid value.
    let st = unsafe {
        buf.write_bytes(0, 1);
        &mut *buf
    };
    st.st_dev = DEV;
    st.st_ino = a.id;
    st.st_rdev = madfs_proto::decode_dev(a.rdev);
    st.st_nlink = a.nlink as _;
    st.st_mode = a.mode;
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_size = a.size as i64;
    st.st_blksize = blksize(a) as _;
    st.st_blocks = a.size.div_ceil(512) as i64;
    (st.st_atime, st.st_atime_nsec) = split(a.atime);
    (st.st_mtime, st.st_mtime_nsec) = split(a.mtime);
    (st.st_ctime, st.st_ctime_nsec) = split(a.ctime);
}

/// Fills a `struct statx` (basic stats).
///
/// # Safety
/// `buf` must point to writable memory of `size_of::<libc::statx>()` bytes.
pub unsafe fn fill_statx(buf: *mut libc::statx, a: &Attr) {
    // SAFETY: caller guarantees buf is valid; all-zero is a valid statx.
    let st = unsafe {
        buf.write_bytes(0, 1);
        &mut *buf
    };
    let ts = |ns: i64| {
        let (s, n) = split(ns);
        // SAFETY: all-zero is a valid statx_timestamp (its padding included).
        let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        t.tv_sec = s;
        t.tv_nsec = n as u32;
        t
    };
    st.stx_mask = libc::STATX_BASIC_STATS;
    st.stx_blksize = blksize(a) as u32;
    st.stx_nlink = a.nlink;
    st.stx_uid = a.uid;
    st.stx_gid = a.gid;
    st.stx_mode = a.mode as u16;
    st.stx_ino = a.id;
    st.stx_size = a.size;
    st.stx_blocks = a.size.div_ceil(512);
    st.stx_atime = ts(a.atime);
    st.stx_mtime = ts(a.mtime);
    st.stx_ctime = ts(a.ctime);
    let rdev = madfs_proto::decode_dev(a.rdev);
    st.stx_rdev_major = libc::major(rdev);
    st.stx_rdev_minor = libc::minor(rdev);
    st.stx_dev_major = (DEV >> 8) as u32;
    st.stx_dev_minor = (DEV & 0xff) as u32;
}

/// Fills a `struct statfs`.
///
/// # Safety
/// `buf` must point to writable memory of `size_of::<libc::statfs>()` bytes.
pub unsafe fn fill_statfs(buf: *mut libc::statfs, s: &StatFs) {
    // SAFETY: caller guarantees buf is valid; all-zero is a valid statfs.
    let st = unsafe {
        buf.write_bytes(0, 1);
        &mut *buf
    };
    st.f_type = FS_MAGIC as _;
    st.f_bsize = s.bsize as _;
    st.f_frsize = s.bsize as _;
    st.f_blocks = s.blocks;
    st.f_bfree = s.bfree;
    st.f_bavail = s.bavail;
    st.f_files = s.files;
    st.f_ffree = s.ffree;
    st.f_namelen = s.namelen as _;
}

/// `d_type` of a mode.
pub fn dtype(kind: u32) -> u8 {
    match kind & S_IFMT {
        S_IFDIR => libc::DT_DIR,
        libc::S_IFLNK => libc::DT_LNK,
        libc::S_IFIFO => libc::DT_FIFO,
        libc::S_IFSOCK => libc::DT_SOCK,
        libc::S_IFCHR => libc::DT_CHR,
        libc::S_IFBLK => libc::DT_BLK,
        _ => libc::DT_REG,
    }
}

/// Writes one `linux_dirent64` record at `out`; returns its length, or None if it does not
/// fit in `room` bytes.
pub fn put_dirent(out: &mut [u8], ino: u64, off: i64, dtype: u8, name: &str) -> Option<usize> {
    let reclen = (19 + name.len() + 1).next_multiple_of(8);
    if reclen > out.len() {
        return None;
    }
    out[..8].copy_from_slice(&ino.to_ne_bytes());
    out[8..16].copy_from_slice(&off.to_ne_bytes());
    out[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
    out[18] = dtype;
    out[19..19 + name.len()].copy_from_slice(name.as_bytes());
    out[19 + name.len()..reclen].fill(0);
    Some(reclen)
}

/// Pseudo syscall number [`legacy`] gives `dup2`, which differs from `dup3` when both fds
/// are equal (no number of a real syscall is negative).
pub const DUP2: i64 = -2;
/// Pseudo syscall number for `utime`/`utimes`/`futimesat` (args: dirfd, path): refused with
/// ENOSYS on madfs paths; glibc itself uses `utimensat`.
pub const LEGACY_TIME: i64 = -3;

/// Whether `nr` is a legacy path syscall of this architecture (see [`legacy`]), and whether
/// its only file argument is a path in its first argument.
pub use madfs_hookabi::{is_legacy, is_legacy_path};

/// Rewrites a legacy path syscall into the `*at` syscall with the same meaning (or into
/// [`DUP2`]/[`LEGACY_TIME`]); `None` for anything else.
#[cfg(target_arch = "x86_64")]
pub fn legacy(nr: i64, a: [isize; 6]) -> Option<(i64, [isize; 6])> {
    let cwd = libc::AT_FDCWD as isize;
    let [a0, a1, a2, a3, ..] = a;
    let nofollow = libc::AT_SYMLINK_NOFOLLOW as isize;
    let at = |nr: i64, b: [isize; 5]| Some((nr, [b[0], b[1], b[2], b[3], b[4], 0]));
    match nr {
        libc::SYS_open => at(libc::SYS_openat, [cwd, a0, a1, a2, 0]),
        libc::SYS_creat => {
            let flags = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as isize;
            at(libc::SYS_openat, [cwd, a0, flags, a1, 0])
        }
        libc::SYS_stat => at(libc::SYS_newfstatat, [cwd, a0, a1, 0, 0]),
        libc::SYS_lstat => at(libc::SYS_newfstatat, [cwd, a0, a1, nofollow, 0]),
        libc::SYS_access => at(libc::SYS_faccessat, [cwd, a0, a1, 0, 0]),
        libc::SYS_mkdir => at(libc::SYS_mkdirat, [cwd, a0, a1, 0, 0]),
        libc::SYS_rmdir => at(
            libc::SYS_unlinkat,
            [cwd, a0, libc::AT_REMOVEDIR as isize, 0, 0],
        ),
        libc::SYS_unlink => at(libc::SYS_unlinkat, [cwd, a0, 0, 0, 0]),
        libc::SYS_rename => at(libc::SYS_renameat, [cwd, a0, cwd, a1, 0]),
        libc::SYS_dup2 => at(DUP2, [a0, a1, 0, 0, 0]),
        libc::SYS_chmod => at(libc::SYS_fchmodat, [cwd, a0, a1, 0, 0]),
        libc::SYS_chown => at(libc::SYS_fchownat, [cwd, a0, a1, a2, 0]),
        libc::SYS_lchown => at(libc::SYS_fchownat, [cwd, a0, a1, a2, nofollow]),
        libc::SYS_readlink => at(libc::SYS_readlinkat, [cwd, a0, a1, a2, 0]),
        libc::SYS_symlink => at(libc::SYS_symlinkat, [a0, cwd, a1, 0, 0]),
        libc::SYS_link => at(libc::SYS_linkat, [cwd, a0, cwd, a1, 0]),
        libc::SYS_mknod => at(libc::SYS_mknodat, [cwd, a0, a1, a2, 0]),
        libc::SYS_utime | libc::SYS_utimes => at(LEGACY_TIME, [cwd, a0, 0, 0, 0]),
        libc::SYS_futimesat => at(LEGACY_TIME, [a0, a1, a2, a3, 0]),
        // a new process: as `clone` without CLONE_THREAD
        libc::SYS_fork => at(libc::SYS_clone, [libc::SIGCHLD as isize, 0, 0, 0, 0]),
        libc::SYS_vfork => {
            let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
            at(libc::SYS_clone, [flags as isize, 0, 0, 0, 0])
        }
        _ => None,
    }
}

/// aarch64 has only the `*at` forms.
#[cfg(not(target_arch = "x86_64"))]
pub fn legacy(_nr: i64, _a: [isize; 6]) -> Option<(i64, [isize; 6])> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirent_layout() {
        let mut b = [0xffu8; 64];
        let n = put_dirent(&mut b, 7, 3, libc::DT_REG, "abc").unwrap();
        assert_eq!(n, 24);
        assert_eq!(u64::from_ne_bytes(b[..8].try_into().unwrap()), 7);
        assert_eq!(u16::from_ne_bytes(b[16..18].try_into().unwrap()), 24);
        assert_eq!(&b[19..23], b"abc\0");
        assert!(put_dirent(&mut b[..20], 7, 3, libc::DT_REG, "abc").is_none());
    }

    #[test]
    fn stat_fill() {
        let a = Attr {
            id: 9,
            mode: libc::S_IFREG | 0o640,
            nlink: 1,
            size: 1025,
            chunk_size: 4096,
            mtime: 1_500_000_000,
            ..Default::default()
        };
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: valid out buffer.
        let st = unsafe {
            fill_stat(st.as_mut_ptr(), &a);
            st.assume_init()
        };
        assert_eq!(
            (
                st.st_ino,
                st.st_size,
                st.st_blocks,
                st.st_mtime,
                st.st_mtime_nsec
            ),
            (9, 1025, 3, 1, 500_000_000)
        );
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn x86_64_layouts_and_legacy_calls() {
        assert_eq!(std::mem::size_of::<libc::stat>(), 144);
        assert!(is_legacy(libc::SYS_open) && is_legacy(libc::SYS_dup2));
        assert!(!is_legacy(libc::SYS_openat));
        let p = 0x1000;
        assert_eq!(
            legacy(libc::SYS_open, [p, 2, 0o644, 9, 9, 9]),
            Some((
                libc::SYS_openat,
                [libc::AT_FDCWD as isize, p, 2, 0o644, 0, 0]
            ))
        );
        let lstat = legacy(libc::SYS_lstat, [p, 0x2000, 0, 0, 0, 0]).unwrap();
        assert_eq!(lstat.0, libc::SYS_newfstatat);
        assert_eq!(lstat.1[3], libc::AT_SYMLINK_NOFOLLOW as isize);
        assert_eq!(
            legacy(libc::SYS_rmdir, [p; 6]).unwrap().1[2],
            libc::AT_REMOVEDIR as isize
        );
        assert_eq!(legacy(libc::SYS_dup2, [3, 4, 0, 0, 0, 0]).unwrap().0, DUP2);
        assert_eq!(legacy(libc::SYS_openat, [0; 6]), None);
    }

    #[test]
    #[cfg(target_arch = "aarch64")]
    fn aarch64_layouts_and_no_legacy_calls() {
        assert_eq!(std::mem::size_of::<libc::stat>(), 128);
        assert!(!is_legacy(libc::SYS_openat));
        assert_eq!(legacy(libc::SYS_openat, [0; 6]), None);
    }

    #[test]
    fn shared_layouts() {
        assert_eq!(std::mem::size_of::<libc::statx>(), 256);
        assert_eq!(std::mem::size_of::<libc::statfs>(), 120);
    }
}
