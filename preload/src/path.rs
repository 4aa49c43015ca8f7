//! Path decisions of the hook, on raw bytes: is a path ours, and which madfs path is it?
//! Pure functions, unit-tested alone (GekkoFS-style resolution status).

use madfs_proto::Errno;

pub use madfs_hookabi::{is_under_mount, DEFAULT_MOUNT};

/// What a path argument refers to.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Not ours: pass the syscall through.
    External,
    /// A madfs path (absolute inside madfs, normalised, `..` resolved lexically).
    Internal(String),
}

/// Resolves `rel` lexically against the madfs directory `base` (an internal absolute path).
/// `..` above the madfs root leaves madfs: then the path is `External`.
pub fn resolve_in(base: &str, rel: &[u8]) -> Result<Resolved, Errno> {
    if rel.len() > madfs_placement::PATH_MAX {
        return Err(Errno::ENAMETOOLONG); // one argument, as the kernel counts it
    }
    let rel = std::str::from_utf8(rel).map_err(|_| Errno::EINVAL)?;
    if madfs_placement::check_normalized(rel).is_ok() {
        // an absolute path already in normal form (most are): no splitting and joining
        return Ok(Resolved::Internal(rel.to_owned()));
    }
    let mut parts: Vec<&str> = if rel.starts_with('/') {
        Vec::new()
    } else {
        base.split('/').filter(|c| !c.is_empty()).collect()
    };
    for comp in rel.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Ok(Resolved::External);
                }
            }
            c => parts.push(c),
        }
    }
    let mut out = String::with_capacity(rel.len() + base.len() + 1);
    for p in &parts {
        out.push('/');
        out.push_str(p);
    }
    if out.is_empty() {
        out.push('/');
    }
    madfs_placement::normalize(&out).map(Resolved::Internal)
}

/// Resolves an absolute path under `mount` to its madfs path (`/madfs/a/../b` → `/b`).
pub fn internal(mount: &[u8], abs: &[u8]) -> Result<Resolved, Errno> {
    if !is_under_mount(abs, mount) {
        return Ok(Resolved::External);
    }
    if abs.len() > madfs_placement::PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    resolve_in("/", &abs[mount.len()..])
}

/// The user-visible absolute path of a madfs path (for `getcwd`).
pub fn external(mount: &[u8], internal: &str) -> Vec<u8> {
    let mut v = mount.to_vec();
    if internal != "/" {
        v.extend_from_slice(internal.as_bytes());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(s: &str) -> Resolved {
        Resolved::Internal(s.into())
    }

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

    #[test]
    fn absolute() {
        let m = DEFAULT_MOUNT;
        assert_eq!(internal(m, b"/madfs").unwrap(), int("/"));
        assert_eq!(internal(m, b"/madfs/a/b c").unwrap(), int("/a/b c"));
        assert_eq!(internal(m, b"/madfs//a/./b/").unwrap(), int("/a/b"));
        assert_eq!(internal(m, b"/madfs/a/../b").unwrap(), int("/b"));
        assert_eq!(internal(m, b"/madfs/..").unwrap(), Resolved::External);
        assert_eq!(internal(m, b"/etc/passwd").unwrap(), Resolved::External);
        assert_eq!(internal(m, b"/madfs/\xff").unwrap_err(), Errno::EINVAL);
        let long = [b"/madfs/".as_slice(), &[b'x'; 300]].concat();
        assert_eq!(internal(m, &long).unwrap_err(), Errno::ENAMETOOLONG);
    }

    #[test]
    fn relative() {
        assert_eq!(resolve_in("/d", b"f").unwrap(), int("/d/f"));
        assert_eq!(resolve_in("/d/e", b"../f").unwrap(), int("/d/f"));
        assert_eq!(resolve_in("/", b".").unwrap(), int("/"));
        assert_eq!(resolve_in("/d", b"../..").unwrap(), Resolved::External);
        // an argument within PATH_MAX below a deep directory resolves to more: allowed
        let deep = format!("/{}", vec!["d".repeat(255); 15].join("/"));
        let rel = vec!["e".repeat(255); 15].join("/");
        assert!(
            matches!(resolve_in(&deep, rel.as_bytes()), Ok(Resolved::Internal(p)) if p.len() > 7000)
        );
        let too_long = "f/".repeat(2048);
        assert_eq!(
            resolve_in(&deep, too_long.as_bytes()).unwrap_err(),
            Errno::ENAMETOOLONG
        );
        assert_eq!(external(DEFAULT_MOUNT, "/"), b"/madfs");
        assert_eq!(external(DEFAULT_MOUNT, "/a/b"), b"/madfs/a/b");
    }
}
