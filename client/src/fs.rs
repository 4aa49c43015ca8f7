//! The file-system trait shared by every front end.

use madfs_proto::{Attr, Errno, FsResult, StatFs, TimeSpec};

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenFlags {
    /// Create if missing (`O_CREAT`).
    pub create: bool,
    /// With `create`: fail if it exists (`O_EXCL`).
    pub excl: bool,
    /// Truncate to 0 (`O_TRUNC`).
    pub trunc: bool,
    /// Permission bits for a new file.
    pub mode: u32,
}

impl OpenFlags {
    /// `O_CREAT | O_TRUNC` with mode 0644 (what `creat` does).
    pub fn create_trunc() -> Self {
        OpenFlags {
            create: true,
            excl: false,
            trunc: true,
            mode: 0o644,
        }
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Directory position (name hash).
    pub hash: u64,
    /// Inode number.
    pub ino: u64,
    /// `mode & S_IFMT`.
    pub kind: u32,
    /// Name.
    pub name: String,
}

/// The madfs file-system API. Every method defaults to `ENOSYS`, so a test double implements
/// only what it needs.
#[allow(unused_variables)]
pub trait FileSystem {
    /// An open file.
    type File;

    /// Attributes of `path`.
    fn stat(&self, path: &str) -> FsResult<Attr> {
        Err(Errno::ENOSYS)
    }
    /// Opens (or creates) a regular file.
    fn open(&self, path: &str, flags: OpenFlags) -> FsResult<Self::File> {
        Err(Errno::ENOSYS)
    }
    /// Reads at `offset`; returns bytes read (0 at end of file). Holes read as zeros.
    fn read(&self, file: &Self::File, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        Err(Errno::ENOSYS)
    }
    /// Writes at `offset`; returns bytes written.
    fn write(&self, file: &mut Self::File, offset: u64, data: &[u8]) -> FsResult<usize> {
        Err(Errno::ENOSYS)
    }
    /// `O_APPEND` write: reserves `data.len()` bytes at the end of the file atomically on the
    /// metadata server and writes there. Returns the offset written at.
    fn append(&self, file: &mut Self::File, data: &[u8]) -> FsResult<u64> {
        Err(Errno::ENOSYS)
    }
    /// Publishes the size and makes the file's data durable.
    fn fsync(&self, file: &mut Self::File) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Publishes the size (close-to-open consistency) and forgets the file; with the
    /// close-sync setting (default) a file written through this handle is also made durable.
    fn close(&self, file: Self::File) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Sets the size of `path`.
    fn truncate(&self, path: &str, size: u64) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Removes a file.
    fn unlink(&self, path: &str) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Creates a directory.
    fn mkdir(&self, path: &str, mode: u32) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Removes an empty directory.
    fn rmdir(&self, path: &str) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Every entry of a directory, in hash order.
    fn readdir(&self, path: &str) -> FsResult<Vec<DirEntry>> {
        Err(Errno::ENOSYS)
    }
    /// Changes permission bits.
    fn chmod(&self, path: &str, mode: u32) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Changes owner and/or group (`u32::MAX` leaves one unchanged).
    fn chown(&self, path: &str, uid: u32, gid: u32) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Renames a file (`noreplace`: fail with EEXIST if `to` exists).
    fn rename(&self, from: &str, to: &str, noreplace: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Changes times.
    fn utimens(&self, path: &str, atime: TimeSpec, mtime: TimeSpec) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// File-system totals.
    fn statfs(&self) -> FsResult<StatFs> {
        Err(Errno::ENOSYS)
    }
    /// Creates a symbolic link at `path` pointing to `target` (stored as given).
    fn symlink(&self, target: &str, path: &str) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// Gives the file at `from` the new name `to` (a hard link).
    fn link(&self, from: &str, to: &str) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }
    /// The target of the symbolic link at `path` (EINVAL if it is not a link).
    fn readlink(&self, path: &str) -> FsResult<String> {
        Err(Errno::ENOSYS)
    }
}
