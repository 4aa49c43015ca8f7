//! Files a server writes beside its stores (its identity record, the chunk directory's token,
//! its address), written so that nothing planted at their paths is followed: made new
//! (`O_EXCL`, `O_NOFOLLOW`) with an explicit mode under a temporary name, then renamed into
//! place (a reader sees the old or the new file whole; a link at the final name is replaced,
//! never written through).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Replaces the file at `path` with `bytes` (mode `mode`, durably when `sync`).
pub fn replace(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp{}", std::process::id()));
    // (a leftover of a crash, or anything planted there: the name itself goes, not its target)
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Makes directory `dir` and its missing parents with mode `mode`.
pub fn make_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let at = d.path().join("address");
        std::os::unix::fs::symlink(&victim, &at).unwrap();
        // at the temporary name too
        std::os::unix::fs::symlink(
            &victim,
            d.path().join(format!(".address.tmp{}", std::process::id())),
        )
        .unwrap();
        replace(&at, b"new", 0o640, false).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&at).unwrap(), b"new");
        let m = std::fs::symlink_metadata(&at).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert!(m.is_file() && m.permissions().mode() & 0o777 == 0o640);
    }
}
