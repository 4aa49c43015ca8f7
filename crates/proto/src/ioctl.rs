//! The `ioctl`s that libmadfs.so answers on a (directory) fd of madfs (C declarations in
//! `preload/include/madfs.h`). Encoded like Linux's `_IOW`/`_IOWR` with type `'m'`.

/// `_IOC(dir, 'm', nr, size)`.
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((b'm' as u64) << 8) | nr
}
const WRITE: u64 = 1;
const READ: u64 = 2;

/// Restricts the listing of this directory fd to positions `[from, to)` (name hash >> 1;
/// `to` = 0 means the end, 2^63). Several fds, each with its own range, list one directory in
/// parallel; a ranged fd lists no `.` and `..`. Rewinds the fd.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DirRange {
    /// First position.
    pub from: u64,
    /// One past the last position (0: the end).
    pub to: u64,
}

/// `ioctl(dirfd, MADFS_IOC_DIR_RANGE, &DirRange)`.
pub const MADFS_IOC_DIR_RANGE: u64 = ioc(WRITE, 1, std::mem::size_of::<DirRange>());

/// A find filter (all conditions must hold), as `madfs-find` takes it; evaluated by every
/// server over the directory's subtree. `matched` and `scanned` are filled in.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FindArgs {
    /// fnmatch(3) pattern on the entry name (NUL-terminated), or null for any.
    pub name: *const libc::c_char,
    /// find's `-size N`: N, in units of `size_unit` bytes (rounded up).
    pub size: u64,
    /// Unit of `size` in bytes; 0: no size condition.
    pub size_unit: u64,
    /// Modification time strictly after this (ns since the epoch); `i64::MIN`: any.
    pub newer_than_ns: i64,
    /// `S_IFREG` or `S_IFDIR`; 0: any.
    pub kind: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// Out: entries that matched.
    pub matched: u64,
    /// Out: entries examined.
    pub scanned: u64,
}

/// `ioctl(dirfd, MADFS_IOC_FIND_LIST, &FindArgs)`: runs the find; the following `getdents64`
/// calls on the fd return the matches (paths relative to the directory) instead of the listing,
/// until the fd is rewound.
pub const MADFS_IOC_FIND_LIST: u64 = ioc(READ | WRITE, 2, std::mem::size_of::<FindArgs>());
/// `ioctl(dirfd, MADFS_IOC_FIND_COUNT, &FindArgs)`: runs the find and fills in the counts only.
pub const MADFS_IOC_FIND_COUNT: u64 = ioc(READ | WRITE, 3, std::mem::size_of::<FindArgs>());

/// What the client cache of this process did so far (`docs/consistency.md`, "The client
/// cache"): lookups answered from it, lookups sent, entries the servers called back, and
/// what it keeps now.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounts {
    pub hits: u64,
    pub misses: u64,
    pub revoked: u64,
    pub entries: u64,
    pub bytes: u64,
}

/// `ioctl(fd, MADFS_IOC_CACHE_COUNTS, &CacheCounts)` on any madfs fd: fills in this
/// process's cache counters.
pub const MADFS_IOC_CACHE_COUNTS: u64 = ioc(READ, 4, std::mem::size_of::<CacheCounts>());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_the_c_header() {
        // _IOW('m', 1, 16), _IOWR('m', 2, 56), _IOWR('m', 3, 56) as C computes them
        assert_eq!(std::mem::size_of::<FindArgs>(), 56);
        assert_eq!(MADFS_IOC_DIR_RANGE, 0x4010_6d01);
        assert_eq!(MADFS_IOC_FIND_LIST, 0xc038_6d02);
        assert_eq!(MADFS_IOC_FIND_COUNT, 0xc038_6d03);
        // _IOR('m', 4, 40)
        assert_eq!(MADFS_IOC_CACHE_COUNTS, 0x8028_6d04);
    }
}
