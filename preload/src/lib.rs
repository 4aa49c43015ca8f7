//! `libmadfs.so`: the LD_PRELOAD front door (syscall interception lands with the preload
//! issue). Today it holds the first piece of the hook's fast path: deciding, on the raw bytes
//! of a path and without allocating, whether a path belongs to the mount.

/// Mount prefix used when `MADFS_MOUNT` is not set.
pub const DEFAULT_MOUNT: &[u8] = b"/madfs";

/// Is `path` (raw bytes, no NUL) the mount point or inside it? `mount` has no trailing `/`.
/// No allocation, no locks: safe to call first thing in a syscall hook.
pub fn is_under_mount(path: &[u8], mount: &[u8]) -> bool {
    path.starts_with(mount) && (path.len() == mount.len() || path[mount.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_check() {
        assert!(is_under_mount(b"/madfs", DEFAULT_MOUNT));
        assert!(is_under_mount(b"/madfs/", DEFAULT_MOUNT));
        assert!(is_under_mount(b"/madfs/a/b", DEFAULT_MOUNT));
        assert!(!is_under_mount(b"/madfsx", DEFAULT_MOUNT));
        assert!(!is_under_mount(b"/mad", DEFAULT_MOUNT));
        assert!(!is_under_mount(b"/etc/madfs", DEFAULT_MOUNT));
        assert!(!is_under_mount(b"madfs/a", DEFAULT_MOUNT));
    }
}
