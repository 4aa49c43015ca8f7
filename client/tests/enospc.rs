//! A full disk (issue 31): a server whose data directory is a small tmpfs. Writers get
//! ENOSPC, never EIO; everything acknowledged reads back; the server keeps serving reads and
//! metadata; when files are removed, writes succeed again.

mod common;

use common::*;
use madfs_client::{Client, ClientConfig, Errno, FileSystem, OpenFlags};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Unmounts the tmpfs when the test ends (after the cluster's servers stopped).
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Moves `dir` onto a fresh tmpfs of `mb` MiB mounted there; `None` where mounting is not
/// allowed (not root).
fn onto_tmpfs(dir: &Path, mb: u64) -> Option<Mount> {
    let saved = dir.with_extension("saved");
    std::fs::rename(dir, &saved).unwrap();
    std::fs::create_dir(dir).unwrap();
    let ok = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={mb}m,mode=0700"),
            "tmpfs",
        ])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        std::fs::remove_dir(dir).unwrap();
        std::fs::rename(&saved, dir).unwrap();
        return None;
    }
    let m = Mount(dir.to_owned());
    let cp = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", saved.display()))
        .arg(dir)
        .status()
        .unwrap();
    assert!(cp.success());
    Some(m)
}

/// Writes `bytes` to a new file and closes it with an fsync: Ok only when all of it is
/// acknowledged.
fn write_file(c: &Client, path: &str, bytes: &[u8]) -> Result<(), Errno> {
    let mut f = c.open(path, OpenFlags::create_trunc())?;
    let mut off = 0;
    for part in bytes.chunks(256 << 10) {
        c.write(&mut f, off, part)?;
        off += part.len() as u64;
    }
    c.fsync(&mut f)?;
    c.close(f)
}

#[test]
fn a_full_disk_gives_enospc_loses_nothing_and_recovers() {
    let mut cl = cluster(1, &["--reserve-mb", "4"], "none");
    cl.stop(0);
    let dir = cl.root().join("server0");
    let Some(_mount) = onto_tmpfs(&dir, 40) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    cl.restart(0).unwrap();
    let mut cfg = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    cfg.timeout = Duration::from_secs(10);
    let c = Client::new(&cfg).unwrap();

    // big files until the disk is full
    let mut kept = vec![];
    let mut err = None;
    for i in 0..100 {
        let path = format!("/big{i}");
        match write_file(&c, &path, &data(1 << 20, i)) {
            Ok(()) => kept.push((path, i)),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    eprintln!("{} MiB files acknowledged before {:?}", kept.len(), err);
    assert_eq!(err, Some(Errno::ENOSPC));
    assert!(kept.len() >= 20, "{}", kept.len());
    // small (inline) files run out too, with ENOSPC
    let mut small = 0;
    let small_err = loop {
        match write_file(&c, &format!("/small{small}"), &data(3901, small)) {
            Ok(()) => small += 1,
            Err(e) => break e,
        }
        assert!(small < 100_000);
    };
    eprintln!("{small} small files more before {small_err:?}");
    assert_eq!(small_err, Errno::ENOSPC);
    // the server serves: everything acknowledged reads back, metadata works
    for (p, i) in &kept {
        assert_eq!(get(&c, p), data(1 << 20, *i), "{p}");
    }
    for k in 0..small {
        assert_eq!(get(&c, &format!("/small{k}")), data(3901, k));
    }
    c.mkdir("/d", 0o755).unwrap();
    assert!(c.stat("/d").unwrap().is_dir());
    // metadata alone (the reserve's use): directories until that fills too
    let mut dirs = 0;
    let dir_err = loop {
        match c.mkdir(&format!("/d/{dirs:0200}"), 0o755) {
            Ok(()) => dirs += 1,
            Err(e) => break Some(e),
        }
        if dirs == 100_000 {
            break None;
        }
    };
    eprintln!("{dirs} directories made, then {dir_err:?}");
    // new entries stop at a quarter of the reserve: the rest is for removals
    assert_eq!(dir_err, Some(Errno::ENOSPC));
    let st = c.statfs().unwrap();
    eprintln!("statfs: {} of {} blocks free", st.bfree, st.blocks);
    // space freed: writes succeed again
    for (p, _) in kept.iter().step_by(2) {
        c.unlink(p).unwrap();
    }
    write_file(&c, "/again", &data(3 << 20, 99)).unwrap();
    assert_eq!(get(&c, "/again"), data(3 << 20, 99));
    for (p, i) in kept.iter().skip(1).step_by(2) {
        assert_eq!(get(&c, p), data(1 << 20, *i), "{p}");
    }
    // and nothing acknowledged was lost across a restart either
    cl.restart(0).unwrap();
    let c = Client::new(&cfg).unwrap();
    for (p, i) in kept.iter().skip(1).step_by(2) {
        assert_eq!(get(&c, p), data(1 << 20, *i), "{p}");
    }
    assert_eq!(get(&c, "/again"), data(3 << 20, 99));
    cl.stop(0);
    for l in cl
        .log(0)
        .lines()
        .filter(|l| l.contains("rocksdb") || l.contains("ERROR"))
    {
        eprintln!("server log: {l}");
    }
}
