//! `madfs cp` (stage in and out) against 2 real servers on loopback: trees copied in and back
//! out keep contents, modes, times and symbolic links; `--checksum`; resuming after a copy
//! cut short (files left half-written, a process killed); /usr/include there and back.

mod common;

use common::*;
use madfs_client::FileSystem;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `madfs cp ARGS` (the built binary) against `cl`; panics with its output unless it exits 0.
fn madfs_cp(cl: &madfs_cluster::LocalCluster, args: &[&str]) -> String {
    let out = madfs_cp_status(cl, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "madfs cp {args:?}: {text}");
    text
}

fn cp_command(cl: &madfs_cluster::LocalCluster, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_madfs"));
    cmd.arg("cp")
        .args(args)
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("UCX_NET_DEVICES", "lo")
        .env_remove("MADFS_MOUNT");
    // one process alone, whatever launched the tests
    for v in [
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_RANK",
        "PMI_SIZE",
        "PMIX_RANK",
        "PMIX_SIZE",
        "SLURM_PROCID",
        "SLURM_NTASKS",
    ] {
        cmd.env_remove(v);
    }
    cmd
}

fn madfs_cp_status(cl: &madfs_cluster::LocalCluster, args: &[&str]) -> Output {
    cp_command(cl, args).output().unwrap()
}

/// (copied, skipped) from the summary line.
fn summary(text: &str) -> (u64, u64) {
    let line = text
        .lines()
        .find(|l| l.contains(" copied, "))
        .unwrap_or_else(|| panic!("no summary in {text:?}"));
    let num = |before: &str| -> u64 {
        let head = &line[..line.find(before).unwrap()];
        let w = head.trim_end().rsplit(' ').next().unwrap();
        w.parse().unwrap_or_else(|_| panic!("{line}"))
    };
    let skipped_at = line.find(" skipped").unwrap();
    let skipped: u64 = line[..skipped_at]
        .trim_end()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (num(" files ("), skipped)
}

/// Sets a path's access and modification times (of a symbolic link itself).
fn touch(p: &Path, secs: i64) {
    let st = Command::new("touch")
        .arg("-h")
        .arg("-d")
        .arg(format!("@{secs}"))
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

fn write(p: &Path, bytes: &[u8], mode: u32, secs: i64) {
    std::fs::write(p, bytes).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    touch(p, secs);
}

/// Every entry under `root`: kind, mode, size (files), modification time to the second, and
/// a checksum of the contents or the link target.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let p = root.join(&rel);
        let m = std::fs::symlink_metadata(&p).unwrap();
        let t = m.file_type();
        let what = if t.is_symlink() {
            format!("l -> {}", std::fs::read_link(&p).unwrap().display())
        } else if t.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(rel.join(e.unwrap().file_name()));
            }
            format!("d {:o}", m.mode() & 0o7777)
        } else {
            format!(
                "f {:o} {} {:x}",
                m.mode() & 0o7777,
                m.size(),
                sum(&std::fs::read(&p).unwrap())
            )
        };
        out.insert(rel, format!("{what} mtime {}", m.mtime()));
    }
    out
}

fn assert_same_trees(a: &Path, b: &Path) {
    let (x, y) = (snapshot(a), snapshot(b));
    assert_eq!(x.len(), y.len(), "entries of {a:?} and {b:?}");
    for (k, v) in &x {
        assert_eq!(Some(v), y.get(k), "{k:?} in {a:?} and {b:?}");
    }
}

/// A tree of every kind of entry: nested and empty directories, empty files, a file of many
/// chunks (and several pieces), symbolic links (one dangling), odd names and modes.
fn make_tree(root: &Path) {
    let d = |rel: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    d("");
    d("a/b/c");
    d("empty dir");
    write(&d("a").join("small.txt"), b"hello\n", 0o644, 1_000_000_001);
    write(&d("a").join("secret"), b"key", 0o600, 1_000_000_002);
    write(&d("a").join("run.sh"), b"#!/bin/sh\n", 0o755, 1_000_000_003);
    write(&d("a").join("ro"), b"read only", 0o444, 1_000_000_004);
    write(&d("a/b").join("empty"), b"", 0o644, 1_000_000_005);
    write(
        &d("a/b").join("odd name ü (1).dat"),
        &data(1000, 9),
        0o640,
        1_000_000_006,
    );
    // 3.5 MiB: 56 chunks of 64 KiB, 4 pieces of 1 MiB
    write(
        &d("a/b/c").join("big.bin"),
        &data(7 << 19, 10),
        0o644,
        1_000_000_007,
    );
    write(
        &d("a/b/c").join("chunk+1"),
        &data(65537, 11),
        0o600,
        1_000_000_008,
    );
    std::os::unix::fs::symlink("../small.txt", root.join("a/b/link")).unwrap();
    std::os::unix::fs::symlink("nowhere/at all", root.join("a/dangling")).unwrap();
    touch(&root.join("a/b/link"), 1_000_000_009);
    touch(&root.join("a/dangling"), 1_000_000_010);
    // a read-only directory (its contents first)
    write(&d("locked").join("inside"), b"x", 0o644, 1_000_000_011);
    std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(root.join("a/b/c"), std::fs::Permissions::from_mode(0o700)).unwrap();
    for (rel, t) in [
        ("a/b/c", 1_000_000_100),
        ("a/b", 1_000_000_101),
        ("a", 1_000_000_102),
        ("empty dir", 1_000_000_103),
        ("locked", 1_000_000_104),
        ("", 1_000_000_105),
    ] {
        touch(&root.join(rel), t);
    }
}

fn entries(root: &Path) -> u64 {
    snapshot(root).len() as u64
}

#[test]
fn tree_in_and_out_with_checksum_and_resume() {
    let t0 = Instant::now();
    let cl = cluster(2, &["--chunk-size", "65536"], "none");
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    make_tree(&src);
    let (s, o) = (src.to_str().unwrap(), tmp.path().join("out"));
    let out = o.to_str().unwrap();
    // files and links (what the summary counts), directories
    let files = 11;

    // in, with pieces of 1 MiB and checksums; out, checksummed too
    let text = madfs_cp(&cl, &["--checksum", "--piece-mib", "1", s, "madfs:/tree"]);
    assert_eq!(summary(&text), (files - 2, 0), "{text}");
    assert!(text.contains("2 links"), "{text}");
    let c = client(&cl, Duration::from_secs(20), "none");
    let a = c.stat("/tree/a/b/c/big.bin").unwrap();
    assert_eq!(a.size, 7 << 19);
    assert_eq!(a.mtime, 1_000_000_007_000_000_000);
    assert_eq!(a.atime, 1_000_000_007_000_000_000, "access time kept");
    assert_eq!(c.stat("/tree/locked").unwrap().mode & 0o7777, 0o555);
    assert_eq!(c.readlink("/tree/a/dangling").unwrap(), "nowhere/at all");
    let text = madfs_cp(&cl, &["--checksum", "-j", "3", "madfs:/tree", out]);
    assert_eq!(summary(&text), (files - 2, 0), "{text}");
    assert_same_trees(&src, &o);

    // run again: everything skipped, in both directions
    let text = madfs_cp(&cl, &[s, "madfs:/tree"]);
    assert_eq!(summary(&text), (0, files), "{text}");
    let text = madfs_cp(&cl, &["--checksum", "madfs:/tree", out]);
    assert_eq!(summary(&text), (0, files), "{text}");

    // a copy cut short: one file missing, one half-written (shorter), one of the right size
    // but written now (its times never set), a link replaced by a file
    std::fs::remove_file(o.join("a/small.txt")).unwrap();
    let big = o.join("a/b/c/big.bin");
    let f = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
    f.set_len(1 << 20).unwrap();
    drop(f);
    std::fs::write(o.join("a/b/odd name ü (1).dat"), vec![0u8; 1000]).unwrap();
    std::fs::remove_file(o.join("a/b/link")).unwrap();
    std::fs::write(o.join("a/b/link"), b"not a link").unwrap();
    let text = madfs_cp(&cl, &["--piece-mib", "1", "madfs:/tree", out]);
    assert_eq!(summary(&text), (3, files - 4), "{text}");
    assert!(text.contains("1 links"), "{text}");
    assert_same_trees(&src, &o);

    // --checksum finds a changed file that the quick check passes
    std::fs::write(o.join("a/secret"), b"KEY").unwrap();
    touch(&o.join("a/secret"), 1_000_000_002);
    let text = madfs_cp(&cl, &["madfs:/tree", out]);
    assert_eq!(summary(&text), (0, files), "{text}");
    let text = madfs_cp(&cl, &["--checksum", "madfs:/tree", out]);
    assert_eq!(summary(&text), (1, files - 1), "{text}");
    assert_same_trees(&src, &o);

    // into a directory (DST/), madfs to madfs, and errors named with exit status 1
    let text = madfs_cp(
        &cl,
        &["madfs:/tree/a/secret", "madfs:/tree/a/b", "madfs:/two/"],
    );
    assert!(text.contains("failed"), "{text}");
    assert_eq!(c.stat("/two/secret").unwrap().size, 3);
    assert_eq!(c.stat("/two/b/c/big.bin").unwrap().size, 7 << 19);
    let bad = madfs_cp_status(&cl, &["madfs:/nope", s, "madfs:/three/"]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("madfs:/nope: stat: No such file or directory"),
        "{err}"
    );
    // the other source was copied all the same
    assert_eq!(c.stat("/three/src/a/ro").unwrap().size, 9);
    eprintln!("tree test: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn killed_copy_resumes() {
    let t0 = Instant::now();
    let cl = cluster(2, &[], "none");
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("many");
    let n = 3000u64;
    for d in 0..6 {
        let dir = src.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..n / 6 {
            std::fs::write(dir.join(format!("f{i}")), data(2000, d * 10_000 + i)).unwrap();
        }
    }
    let s = src.to_str().unwrap();
    let c = client(&cl, Duration::from_secs(20), "none");
    let mut child = cp_command(&cl, &["-j", "1", s, "madfs:/many"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // killed once some hundreds of files are there
    let until = Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    while Instant::now() < until {
        seen = (0..6)
            .map(|d| c.readdir(&format!("/many/d{d}")).map_or(0, |l| l.len()))
            .sum::<usize>();
        if seen >= 300 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(seen >= 300, "saw {seen} files");
    let text = madfs_cp(&cl, &[s, "madfs:/many"]);
    let (copied, skipped) = summary(&text);
    assert_eq!(copied + skipped, n, "{text}");
    if status.success() {
        eprintln!("(the copy finished before it was killed)");
        assert_eq!(skipped, n, "{text}");
    } else {
        // one file may have been half-written when killed: copied again
        assert!(skipped >= 290 && copied > 0, "{text}");
    }
    let o = tmp.path().join("back");
    madfs_cp(&cl, &["madfs:/many", o.to_str().unwrap()]);
    assert_same_trees(&src, &o);
    eprintln!(
        "killed after {seen} files, then {copied} copied and {skipped} skipped; {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn ranks_share_the_work() {
    let t0 = Instant::now();
    let cl = cluster(2, &["--chunk-size", "65536"], "none");
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    make_tree(&src);
    let s = src.to_str().unwrap();
    // three ranks as mpirun starts them, at once
    let ranks: Vec<_> = (0..3)
        .map(|r| {
            cp_command(&cl, &["--piece-mib", "1", s, "madfs:/ranked"])
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_SIZE", "3")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let ranks: Vec<Output> = ranks
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let mut copied = 0;
    for out in &ranks {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(" rank "), "{text}");
        copied += summary(&text).0;
    }
    assert_eq!(copied, 9, "each file copied by one rank");
    let c = client(&cl, Duration::from_secs(20), "none");
    let names: Vec<String> = c
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with(".madfs-cp")),
        "markers left: {names:?}"
    );
    let o = tmp.path().join("out");
    madfs_cp(&cl, &["madfs:/ranked", o.to_str().unwrap()]);
    assert_same_trees(&src, &o);
    eprintln!("ranks test: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn usr_include_round_trip() {
    let inc = Path::new("/usr/include");
    if !inc.is_dir() {
        eprintln!("skipped: no /usr/include here");
        return;
    }
    let t0 = Instant::now();
    let cl = cluster(2, &[], "none");
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("include");
    let text = madfs_cp(&cl, &["/usr/include", "madfs:/include"]);
    eprintln!("in:  {}", text.trim());
    let text = madfs_cp(&cl, &["--checksum", "madfs:/include", o.to_str().unwrap()]);
    eprintln!("out: {}", text.trim());
    let (copied, skipped) = summary(&text);
    assert_eq!(skipped, 0);
    assert!(copied > 1000, "{text}");
    assert_same_trees(inc, &o);
    assert_eq!(entries(inc), entries(&o));
    eprintln!("/usr/include test: {:.1} s", t0.elapsed().as_secs_f64());
}
