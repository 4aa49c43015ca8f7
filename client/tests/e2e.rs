//! End to end through the client library against 3 real servers on loopback.

mod common;

use common::*;
use madfs_client::{Errno, FileSystem, OpenFlags, TimeSpec};
use std::collections::HashSet;
use std::time::Duration;

const CS: usize = 65536;

#[test]
fn files_dirs_data_and_errnos() {
    let cl = cluster(3, &["--chunk-size", "65536"], "none");
    let c = client(&cl, Duration::from_secs(20), "none");

    // 1,000 files in one directory
    c.mkdir("/flat", 0o755).unwrap();
    for i in 0..1000 {
        let f = c
            .open(
                &format!("/flat/file.{i}"),
                OpenFlags {
                    create: true,
                    excl: true,
                    mode: 0o644,
                    ..Default::default()
                },
            )
            .unwrap();
        c.close(f).unwrap();
    }
    let list = c.readdir("/flat").unwrap();
    assert_eq!(list.len(), 1000);
    let names: HashSet<&str> = list.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names.len(), 1000, "every name exactly once");
    for i in 0..1000 {
        assert!(names.contains(format!("file.{i}").as_str()));
    }
    assert!(
        list.windows(2).all(|w| w[0].hash <= w[1].hash),
        "hash order"
    );

    // 100 files in nested directories
    c.mkdir("/nest", 0o755).unwrap();
    c.mkdir("/nest/a", 0o755).unwrap();
    for d in 0..10 {
        c.mkdir(&format!("/nest/a/d{d}"), 0o700).unwrap();
        for f in 0..10 {
            put(
                &c,
                &format!("/nest/a/d{d}/f{f}"),
                &data(100 + f, (d * 10 + f) as u64),
                1 << 20,
                false,
            );
        }
    }
    for d in 0..10 {
        assert_eq!(c.readdir(&format!("/nest/a/d{d}")).unwrap().len(), 10);
        for f in 0..10 {
            assert_eq!(
                get(&c, &format!("/nest/a/d{d}/f{f}")),
                data(100 + f, (d * 10 + f) as u64)
            );
        }
    }
    let st = c.stat("/nest/a/d3").unwrap();
    assert!(st.is_dir());
    assert_eq!(st.mode & 0o777, 0o700);

    // data of awkward sizes, written in awkward pieces, read back with checksums
    c.mkdir("/data", 0o755).unwrap();
    let sizes = [0, 1, 3901, CS - 1, CS, CS + 1, 3 * CS];
    for (i, &n) in sizes.iter().enumerate() {
        let bytes = data(n, 1000 + i as u64);
        for piece in [47008, 1 << 20] {
            let p = format!("/data/s{n}-{piece}");
            put(&c, &p, &bytes, piece, false);
            let a = c.stat(&p).unwrap();
            assert_eq!(a.size, n as u64, "{p}");
            assert!(a.is_file());
            let back = get(&c, &p);
            assert_eq!(sum(&back), sum(&bytes), "{p}");
        }
    }
    // reads across chunk boundaries at odd offsets
    let big = data(3 * CS, 1006);
    let f = c
        .open(&format!("/data/s{}-47008", 3 * CS), OpenFlags::default())
        .unwrap();
    for (off, len) in [
        (CS - 7, 20),
        (2 * CS - 1, CS + 2),
        (3 * CS - 5, 100),
        (0, 3 * CS + 10),
    ] {
        let mut buf = vec![0u8; len];
        let n = c.read(&f, off as u64, &mut buf).unwrap();
        let want = &big[off..(off + len).min(big.len())];
        assert_eq!(&buf[..n], want, "read at {off}+{len}");
    }
    let mut buf = [0u8; 8];
    assert_eq!(
        c.read(&f, 10 * CS as u64, &mut buf).unwrap(),
        0,
        "read past EOF"
    );
    c.close(f).unwrap();

    // a sparse file: holes read as zeros
    let mut f = c.open("/data/sparse", OpenFlags::create_trunc()).unwrap();
    c.write(&mut f, (2 * CS + 100) as u64, b"tail").unwrap();
    c.close(f).unwrap();
    let back = get(&c, "/data/sparse");
    assert_eq!(back.len(), 2 * CS + 104);
    assert!(back[..2 * CS + 100].iter().all(|b| *b == 0));
    assert_eq!(&back[2 * CS + 100..], b"tail");

    // truncate shrink and grow, O_TRUNC
    c.truncate("/data/sparse", 10).unwrap();
    assert_eq!(c.stat("/data/sparse").unwrap().size, 10);
    c.truncate("/data/sparse", 3 * CS as u64).unwrap();
    let back = get(&c, "/data/sparse");
    assert!(
        back.iter().all(|b| *b == 0),
        "grown file reads zeros, old tail is gone"
    );
    let f = c
        .open(
            &format!("/data/s{}-47008", 3 * CS),
            OpenFlags {
                trunc: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(f.size(), 0);
    c.close(f).unwrap();
    assert_eq!(c.stat(&format!("/data/s{}-47008", 3 * CS)).unwrap().size, 0);

    // chmod / utimens / statfs
    c.chmod("/data/s1-47008", 0o600).unwrap();
    assert_eq!(c.stat("/data/s1-47008").unwrap().mode & 0o7777, 0o600);
    c.utimens(
        "/data/s1-47008",
        TimeSpec::At(1_000_000_000),
        TimeSpec::At(2_000_000_000),
    )
    .unwrap();
    let a = c.stat("/data/s1-47008").unwrap();
    assert_eq!((a.atime, a.mtime), (1_000_000_000, 2_000_000_000));
    let s = c.statfs().unwrap();
    assert!(s.blocks > 0 && s.bsize > 0);

    // errnos
    let excl = OpenFlags {
        create: true,
        excl: true,
        mode: 0o644,
        ..Default::default()
    };
    assert_eq!(c.stat("/nope").unwrap_err(), Errno::ENOENT);
    assert_eq!(
        c.open("/nope", OpenFlags::default()).unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(c.unlink("/nope").unwrap_err(), Errno::ENOENT);
    assert_eq!(c.rmdir("/nope").unwrap_err(), Errno::ENOENT);
    assert_eq!(c.open("/nodir/f", excl).unwrap_err(), Errno::ENOENT);
    assert_eq!(c.mkdir("/nodir/d", 0o755).unwrap_err(), Errno::ENOENT);
    assert_eq!(c.mkdir("/flat", 0o755).unwrap_err(), Errno::EEXIST);
    assert_eq!(c.open("/flat/file.1", excl).unwrap_err(), Errno::EEXIST);
    assert_eq!(c.open("/flat/file.1/x", excl).unwrap_err(), Errno::ENOTDIR);
    assert_eq!(
        c.mkdir("/flat/file.1/x", 0o755).unwrap_err(),
        Errno::ENOTDIR
    );
    assert_eq!(c.stat("/flat/file.1/x").unwrap_err(), Errno::ENOTDIR);
    assert_eq!(c.rmdir("/flat/file.1").unwrap_err(), Errno::ENOTDIR);
    assert_eq!(c.readdir("/flat/file.1").unwrap_err(), Errno::ENOTDIR);
    assert_eq!(
        c.open("/flat", OpenFlags::default()).unwrap_err(),
        Errno::EISDIR
    );
    assert_eq!(c.open("/flat", excl).unwrap_err(), Errno::EEXIST);
    assert_eq!(
        c.open(
            "/flat",
            OpenFlags {
                create: true,
                mode: 0o644,
                ..Default::default()
            }
        )
        .unwrap_err(),
        Errno::EISDIR
    );
    assert_eq!(c.unlink("/flat").unwrap_err(), Errno::EISDIR);
    assert_eq!(c.rmdir("/flat").unwrap_err(), Errno::ENOTEMPTY);
    assert_eq!(c.rmdir("/nest/a").unwrap_err(), Errno::ENOTEMPTY);
    assert_eq!(c.stat("/a/../etc").unwrap_err(), Errno::EINVAL);
    assert_eq!(c.stat("relative").unwrap_err(), Errno::EINVAL);
    assert_eq!(c.mkdir("/bad\0name", 0o755).unwrap_err(), Errno::EINVAL);
    assert_eq!(
        c.stat(&format!("/{}", "n".repeat(300))).unwrap_err(),
        Errno::ENAMETOOLONG
    );
    assert_eq!(c.truncate("/nope", 0).unwrap_err(), Errno::ENOENT);
    assert_eq!(c.truncate("/flat", 0).unwrap_err(), Errno::EISDIR);

    // ENOTEMPTY must hold whichever server holds the only child
    c.mkdir("/one", 0o755).unwrap();
    for i in 0..12 {
        let p = format!("/one/only{i}");
        put(&c, &p, b"x", 1, false);
        assert_eq!(
            c.rmdir("/one").unwrap_err(),
            Errno::ENOTEMPTY,
            "child {p} on server {}",
            c.meta_of(&p)
        );
        c.unlink(&p).unwrap();
    }
    c.rmdir("/one").unwrap();

    // unlink everything, then directories are empty and removable
    for i in 0..1000 {
        c.unlink(&format!("/flat/file.{i}")).unwrap();
    }
    assert!(c.readdir("/flat").unwrap().is_empty());
    c.rmdir("/flat").unwrap();
    assert_eq!(c.stat("/flat").unwrap_err(), Errno::ENOENT);
    // a re-created file never sees old bytes
    put(&c, "/data/again", &data(3 * CS, 7), 1 << 20, false);
    c.unlink("/data/again").unwrap();
    let mut f = c.open("/data/again", OpenFlags::create_trunc()).unwrap();
    c.write(&mut f, (3 * CS - 1) as u64, b"z").unwrap();
    c.close(f).unwrap();
    let back = get(&c, "/data/again");
    assert!(back[..3 * CS - 1].iter().all(|b| *b == 0));
}

#[test]
fn fsynced_data_survives_sigkill_and_restart() {
    let mut cl = cluster(3, &["--chunk-size", "65536"], "none");
    let c = client(&cl, Duration::from_secs(20), "none");
    c.mkdir("/dur", 0o755).unwrap();
    let sizes = [1usize, 3901, CS + 1, 5 * CS + 17];
    for (i, &n) in sizes.iter().enumerate() {
        put(
            &c,
            &format!("/dur/f{i}"),
            &data(n, 50 + i as u64),
            47008,
            true,
        );
    }
    // kill every server with SIGKILL (no clean shutdown), restart on the same data
    for s in 0..3 {
        cl.kill(s);
    }
    // a dead server is an EIO after the call deadline, never a hang
    c.transport().set_timeout(Duration::from_secs(2));
    let t0 = std::time::Instant::now();
    assert_eq!(c.stat("/dur/f0").unwrap_err(), Errno::EIO);
    assert_eq!(
        c.stat("/dur/f0").unwrap_err(),
        Errno::EIO,
        "reconnecting to a dead server"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t0.elapsed()
    );
    for s in 0..3 {
        cl.restart(s).unwrap();
    }
    let fresh = client(&cl, Duration::from_secs(20), "none");
    for (i, &n) in sizes.iter().enumerate() {
        let p = format!("/dur/f{i}");
        assert_eq!(fresh.stat(&p).unwrap().size, n as u64);
        assert_eq!(sum(&get(&fresh, &p)), sum(&data(n, 50 + i as u64)), "{p}");
    }
    assert_eq!(fresh.readdir("/dur").unwrap().len(), sizes.len());
    // the old client reconnects after the failure of its old connections
    let mut ok = false;
    for _ in 0..5 {
        if c.stat("/dur/f1").is_ok() {
            ok = true;
            break;
        }
    }
    assert!(ok, "old client never reconnected");
    // ids handed out after the restart do not collide with old ones
    put(&fresh, "/dur/new", b"new", 3, true);
    let ids: HashSet<u64> = (0..sizes.len())
        .map(|i| fresh.stat(&format!("/dur/f{i}")).unwrap().id)
        .collect();
    assert!(!ids.contains(&fresh.stat("/dur/new").unwrap().id));
}

/// Files written without fsync (close does not sync by default), a file renamed across
/// servers, then `sync(2)` for the cluster: all there after a SIGKILL of every server right
/// after it. (A SIGKILL keeps the kernel's page cache, so this shows the request path, not
/// the power cut that sync guards against; docs/consistency.md, "Durability".)
#[test]
fn data_written_before_a_sync_survives_a_sigkill_of_every_server() {
    let mut cl = cluster(3, &["--chunk-size", "65536"], "none");
    let c = client(&cl, Duration::from_secs(20), "none");
    c.mkdir("/s", 0o755).unwrap();
    let sizes = [0usize, 3901, CS + 1, 3 * CS + 5];
    for (i, &n) in sizes.iter().enumerate() {
        put(
            &c,
            &format!("/s/f{i}"),
            &data(n, 90 + i as u64),
            47008,
            false,
        );
    }
    c.rename("/s/f1", "/s/moved-elsewhere", false).unwrap();
    c.sync_all(true).unwrap();
    for s in 0..3 {
        cl.kill(s);
    }
    for s in 0..3 {
        cl.restart(s).unwrap();
    }
    let fresh = client(&cl, Duration::from_secs(20), "none");
    for (i, &n) in sizes.iter().enumerate() {
        let p = if i == 1 {
            "/s/moved-elsewhere".to_string()
        } else {
            format!("/s/f{i}")
        };
        assert_eq!(fresh.stat(&p).unwrap().size, n as u64, "{p}");
        assert_eq!(sum(&get(&fresh, &p)), sum(&data(n, 90 + i as u64)), "{p}");
    }
    assert_eq!(fresh.stat("/s/f1").unwrap_err(), Errno::ENOENT);
    assert_eq!(fresh.readdir("/s").unwrap().len(), sizes.len());
}

/// A create racing an rmdir of its parent: either the create lands first (rmdir says
/// ENOTEMPTY) or the rmdir does (the create says ENOENT): never an entry left below a removed
/// directory (the servers' own find scans every key, so it would show one).
#[test]
fn creates_racing_rmdir_of_their_parent_leave_no_orphans() {
    let cl = cluster(3, &[], "none");
    let c = client(&cl, Duration::from_secs(20), "none");
    c.mkdir("/race", 0o755).unwrap();
    let cfg = madfs_client::ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    let (mut removed, mut refused) = (0, 0);
    for round in 0..40 {
        let d = format!("/race/d{round}");
        c.mkdir(&d, 0o755).unwrap();
        let made = std::thread::scope(|s| {
            let creator = s.spawn(|| {
                let c2 = madfs_client::Client::new(&cfg).unwrap();
                let mut made = 0;
                for i in 0..30 {
                    match c2.open(&format!("{d}/f{i}"), OpenFlags::create_trunc()) {
                        Ok(f) => {
                            c2.close(f).unwrap();
                            made += 1;
                        }
                        Err(Errno::ENOENT) => break,
                        Err(e) => panic!("create in {d}: {e:?}"),
                    }
                }
                made
            });
            // rmdir until it is gone, emptying it whenever it is not
            loop {
                match c.rmdir(&d) {
                    Ok(()) => {
                        removed += 1;
                        break;
                    }
                    Err(Errno::ENOTEMPTY) => {
                        refused += 1;
                        for e in c.readdir(&d).unwrap() {
                            let _ = c.unlink(&format!("{d}/{}", e.name));
                        }
                    }
                    Err(e) => panic!("rmdir {d}: {e:?}"),
                }
            }
            creator.join().unwrap()
        });
        let (left, _) = c.find("/race", &Default::default()).unwrap();
        let orphans: Vec<&String> = left
            .iter()
            .filter(|p| p.starts_with(&format!("d{round}/")))
            .collect();
        assert!(
            orphans.is_empty(),
            "round {round}: {made} made, orphans {orphans:?}"
        );
        assert_eq!(c.stat(&d).unwrap_err(), Errno::ENOENT);
    }
    assert_eq!(removed, 40);
    eprintln!("{refused} rmdirs refused (ENOTEMPTY) while creates raced them");
}

#[test]
fn one_gib_file_round_trip() {
    let cl = cluster(3, &[], "none");
    let c = client(&cl, Duration::from_secs(30), "none");
    const GIB: usize = 1 << 30;
    const PIECE: usize = 8 << 20;
    let piece = |i: usize| data(PIECE, 9000 + i as u64);
    let mut f = c.open("/big", OpenFlags::create_trunc()).unwrap();
    let mut want = xxhash_rust::xxh3::Xxh3::new();
    for i in 0..GIB / PIECE {
        let p = piece(i);
        want.update(&p);
        assert_eq!(c.write(&mut f, (i * PIECE) as u64, &p).unwrap(), PIECE);
    }
    c.close(f).unwrap();
    assert_eq!(c.stat("/big").unwrap().size, GIB as u64);
    let f = c.open("/big", OpenFlags::default()).unwrap();
    let mut got = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; PIECE];
    for i in 0..GIB / PIECE {
        assert_eq!(c.read(&f, (i * PIECE) as u64, &mut buf).unwrap(), PIECE);
        got.update(&buf);
    }
    assert_eq!(got.digest(), want.digest(), "1 GiB checksum");
    c.unlink("/big").unwrap();
}

#[test]
fn sigkill_mid_stream_keeps_every_fsynced_record() {
    const REC: usize = 47008;
    let mut cl = cluster(3, &["--chunk-size", "65536"], "none");
    let setup = client(&cl, Duration::from_secs(20), "none");
    setup.mkdir("/crash", 0o755).unwrap();
    let victim = setup.meta_of("/crash/f") as usize;
    let cluster_file = cl.cluster_file();
    let (tx, rx) = std::sync::mpsc::channel::<Result<usize, Errno>>();
    let writer = std::thread::spawn(move || {
        let mut cfg = madfs_client::ClientConfig::from_cluster_file(&cluster_file).unwrap();
        cfg.timeout = Duration::from_secs(3);
        let c = madfs_client::Client::new(&cfg).unwrap();
        let mut f = c.open("/crash/f", OpenFlags::create_trunc()).unwrap();
        for i in 0..3000 {
            let r = c
                .write(&mut f, (i * REC) as u64, &data(REC, i as u64))
                .and_then(|_| c.fsync(&mut f));
            match r {
                Ok(()) => tx.send(Ok(i + 1)).unwrap(),
                Err(e) => {
                    tx.send(Err(e)).unwrap();
                    return;
                }
            }
        }
    });
    // let it acknowledge some records, then kill the file's metadata server mid-stream
    let mut acked = 0;
    while acked < 30 {
        acked = rx.recv().unwrap().expect("no failure before the kill");
    }
    cl.kill(victim);
    let mut failure = None;
    for r in rx.iter() {
        match r {
            Ok(n) => acked = n,
            Err(e) => failure = Some(e),
        }
    }
    writer.join().unwrap();
    assert_eq!(
        failure,
        Some(Errno::EIO),
        "the writer must see the failure, not a false success"
    );
    cl.restart(victim).unwrap();
    let c = client(&cl, Duration::from_secs(20), "none");
    let size = c.stat("/crash/f").unwrap().size as usize;
    assert!(
        size >= acked * REC,
        "size {size} < {acked} acknowledged records"
    );
    let f = c.open("/crash/f", OpenFlags::default()).unwrap();
    let mut buf = vec![0u8; REC];
    for i in 0..acked {
        assert_eq!(c.read(&f, (i * REC) as u64, &mut buf).unwrap(), REC);
        assert!(
            buf == data(REC, i as u64),
            "acknowledged record {i} of {acked} lost or torn"
        );
    }
    eprintln!("{acked} records acknowledged before the failure; all intact after restart");
}

#[test]
fn rename_moves_entry_and_chunk0_between_servers() {
    let cl = cluster(3, &[], "none");
    let c = client(&cl, Duration::from_secs(20), "none");
    c.mkdir("/r", 0o755).unwrap();
    // larger than the inline part of chunk 0 (64 KiB) and than one chunk
    let bytes = data(900_000, 77);
    put(&c, "/r/a", &bytes, 1 << 20, false);
    let mut name = "/r/a".to_string();
    for i in 0..8 {
        let next = format!("/r/b{i}");
        c.rename(&name, &next, false).unwrap();
        assert_eq!(c.stat(&name).unwrap_err(), Errno::ENOENT);
        assert_eq!(
            sum(&get(&c, &next)),
            sum(&bytes),
            "after rename to {next} (server {})",
            c.meta_of(&next)
        );
        name = next;
    }
    // replacing an existing file; RENAME_NOREPLACE refuses
    put(&c, "/r/other", b"other", 5, false);
    assert_eq!(
        c.rename(&name, "/r/other", true).unwrap_err(),
        Errno::EEXIST
    );
    c.rename(&name, "/r/other", false).unwrap();
    assert_eq!(sum(&get(&c, "/r/other")), sum(&bytes));
    assert_eq!(c.readdir("/r").unwrap().len(), 1);
    // a directory: every entry moves, data intact (chunk 0 carried across servers)
    c.rename("/r", "/q", false).unwrap();
    assert_eq!(c.stat("/r").unwrap_err(), Errno::ENOENT);
    assert_eq!(c.readdir("/q").unwrap().len(), 1);
    assert_eq!(sum(&get(&c, "/q/other")), sum(&bytes));
}

#[test]
fn mpirun_launch_script_starts_and_stops_servers() {
    setup();
    if std::process::Command::new("mpirun")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("mpirun not installed; skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster_file = dir.path().join("cluster");
    let bin_dir = madfs_cluster::find_bin("madfs-server")
        .parent()
        .unwrap()
        .to_owned();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mpi-cluster.sh");
    let run = |args: &[&str]| {
        std::process::Command::new("bash")
            .arg(script)
            .args(args)
            .env("MADFS_BIN_DIR", &bin_dir)
            // mpirun as root (CI) and 3 ranks on fewer cores: opt-in, through Open MPI's own
            // variables
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .output()
            .unwrap()
    };
    let data = dir.path().join("data");
    let out = run(&[
        "start",
        "-n",
        "3",
        "--local",
        "--cluster",
        cluster_file.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("export MADFS_CLUSTER="));
    let mut cfg = madfs_client::ClientConfig::from_cluster_file(&cluster_file).unwrap();
    cfg.timeout = Duration::from_secs(10);
    let c = madfs_client::Client::new(&cfg).unwrap();
    assert_eq!(c.servers(), 3);
    for s in 0..3 {
        c.ping(s).unwrap();
    }
    put(&c, "/via-mpirun", b"hello", 5, true);
    assert_eq!(get(&c, "/via-mpirun"), b"hello");
    for i in 0..3 {
        assert!(
            data.join(format!("server{i}")).join("db").exists(),
            "rank {i} data dir"
        );
    }
    let out = run(&["stop", "--cluster", cluster_file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.transport().set_timeout(Duration::from_secs(1));
    assert!(c.ping(0).is_err(), "servers stopped");
}

/// Large reads of chunk files are sent from a mapping of the file (no copy); a file shrunk
/// meanwhile must neither fail such a read nor crash anything: every read returns bytes that
/// are the file's or zeros (the truncated part), and the servers keep serving.
#[test]
fn large_reads_race_shrinking_truncates() {
    const MIB: usize = 1 << 20;
    let cl = cluster(3, &["--chunk-size", "1048576"], "none");
    let c = client(&cl, Duration::from_secs(20), "none");
    let bytes = data(8 * MIB, 77);
    put(&c, "/race", &bytes, 2 * MIB, false);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let c = client(&cl, Duration::from_secs(20), "none");
            for i in 0..60 {
                // mid-chunk: chunk 2's file shrinks, chunks 3.. go
                c.truncate("/race", (2 * MIB + MIB / 2) as u64).unwrap();
                let mut f = c.open("/race", OpenFlags::default()).unwrap();
                let off = 2 * MIB + MIB / 2;
                c.write(&mut f, off as u64, &bytes[off..off + (i % 3 + 1) * MIB])
                    .unwrap();
                c.close(f).unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut reads = 0;
        let mut buf = vec![0u8; 4 * MIB];
        while !stop.load(std::sync::atomic::Ordering::Acquire) || reads < 20 {
            let f = c.open("/race", OpenFlags::default()).unwrap();
            let n = c.read(&f, 2 * MIB as u64, &mut buf).unwrap();
            c.close(f).unwrap();
            for (k, b) in buf[..n].iter().enumerate() {
                let want = bytes[2 * MIB + k];
                assert!(*b == want || *b == 0, "read {reads}: byte {k} is {b}");
            }
            reads += 1;
        }
    });
    let f = c.open("/race", OpenFlags::default()).unwrap();
    assert!(f.size() >= (2 * MIB + MIB / 2) as u64);
    c.close(f).unwrap();
}

/// `read` requests the servers have answered, all together.
fn reads_served(cl: &madfs_cluster::LocalCluster, n: usize) -> u64 {
    served(cl, n, "read")
}

/// Requests named `name` answered by the first `n` servers so far.
fn served(cl: &madfs_cluster::LocalCluster, n: usize, name: &str) -> u64 {
    (0..n)
        .map(|i| stats(cl, i).requests.get(name).copied().unwrap_or(0))
        .sum()
}

/// Descriptors of this process open on files under `dir`.
fn fds_under(dir: &std::path::Path) -> Vec<i32> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            target
                .starts_with(&dir)
                .then(|| e.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// A client on the servers' host reads chunks ≥ 1 from their chunk files (no `Read` request),
/// byte-exact with holes, sparse ends, truncation, re-creation, and descriptors the program
/// closes or replaces; with local reads off every chunk is asked for.
#[test]
fn local_reads_see_what_the_servers_would_send() {
    const N: usize = 3;
    let cl = cluster(N, &["--chunk-size", "65536"], "none");
    let remote = {
        let mut cfg = madfs_client::ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
        cfg.local_reads = false;
        madfs_client::Client::new(&cfg).unwrap()
    };
    let c = client(&cl, Duration::from_secs(20), "none");
    // 20 chunks with a hole of 3 chunks in the middle and a sparse end
    let mut want = data(20 * CS, 5);
    want[6 * CS + 100..9 * CS + 7].fill(0);
    let mut f = remote.open("/lr", OpenFlags::create_trunc()).unwrap();
    remote.write(&mut f, 0, &want[..6 * CS + 100]).unwrap();
    remote
        .write(&mut f, (9 * CS + 7) as u64, &want[9 * CS + 7..19 * CS])
        .unwrap();
    remote.close(f).unwrap();
    remote.truncate("/lr", (20 * CS) as u64).unwrap();
    want[19 * CS..].fill(0);

    let before = reads_served(&cl, N);
    assert_eq!(get(&c, "/lr"), want, "local reads");
    let local_reqs = reads_served(&cl, N) - before;
    assert!(local_reqs <= 1, "{local_reqs} read requests (chunk 0 only)");
    let before = reads_served(&cl, N);
    assert_eq!(get(&remote, "/lr"), want, "server reads");
    assert!(reads_served(&cl, N) - before >= 20);

    // an unaligned read across chunk ends
    let f = c.open("/lr", OpenFlags::default()).unwrap();
    let mut buf = vec![0xaau8; 3 * CS + 11];
    assert_eq!(c.read(&f, (CS + 5) as u64, &mut buf).unwrap(), buf.len());
    assert_eq!(buf, want[CS + 5..4 * CS + 16]);
    c.close(f).unwrap();

    // the program closes our descriptors or puts other files on their numbers
    let ours = fds_under(cl.root());
    assert!(!ours.is_empty(), "no cached chunk-file descriptor");
    assert!(ours.iter().all(|fd| *fd >= 10), "{ours:?}");
    let null = std::fs::File::open("/dev/null").unwrap();
    for (k, fd) in ours.iter().enumerate() {
        if k % 2 == 0 {
            // SAFETY: replacing a descriptor the test found open on a chunk file.
            unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), *fd) };
        } else {
            // SAFETY: closing a descriptor the test found open on a chunk file.
            unsafe { libc::close(*fd) };
        }
    }
    assert_eq!(get(&c, "/lr"), want, "after the descriptors were taken");

    // shrink and grow through the other client: the cut part reads as zeros
    remote.truncate("/lr", (4 * CS + 3) as u64).unwrap();
    remote.truncate("/lr", (12 * CS) as u64).unwrap();
    let mut cut = want[..12 * CS].to_vec();
    cut[4 * CS + 3..].fill(0);
    assert_eq!(get(&c, "/lr"), cut, "after shrink and grow");

    // removed and made again under the same name: never the old bytes
    remote.unlink("/lr").unwrap();
    let new = data(8 * CS, 6);
    put(&remote, "/lr", &new, 5 * CS, false);
    assert_eq!(get(&c, "/lr"), new, "re-created file");
    drop(null);
}

/// A lookup of a missing name in a directory the client has seen costs one request (not a
/// second one to tell ENOENT from ENOTDIR), and a directory that another client of the
/// process removed is never trusted afterwards (the preload has one client per thread).
#[test]
fn missing_names_cost_one_request_and_removed_dirs_are_forgotten() {
    const N: usize = 3;
    let cl = cluster(N, &[], "none");
    let a = client(&cl, Duration::from_secs(20), "none");
    let b = client(&cl, Duration::from_secs(20), "none");
    a.mkdir("/kd", 0o755).unwrap();
    a.mkdir("/kd/sub", 0o755).unwrap();
    assert_eq!(a.stat("/kd/first").unwrap_err(), Errno::ENOENT);
    // (lookups: `stat`, or `look` and the pages of statahead, `look_dir`, with the cache)
    let lookups = || -> u64 {
        ["stat", "look", "look_dir"]
            .iter()
            .map(|k| served(&cl, N, k))
            .sum()
    };
    let before = lookups();
    for i in 0..20 {
        assert_eq!(a.stat(&format!("/kd/m{i}")).unwrap_err(), Errno::ENOENT);
    }
    let asked = lookups() - before;
    assert!(asked <= 20, "at most one request per missing name: {asked}");
    assert_eq!(a.stat("/nodir/x").unwrap_err(), Errno::ENOENT);
    assert_eq!(a.stat("/nodir/y/z").unwrap_err(), Errno::ENOENT);

    // a learns /kd/sub (a miss in it, a create in it), then b replaces it by a file
    assert_eq!(a.stat("/kd/sub/x").unwrap_err(), Errno::ENOENT);
    let f = a.open("/kd/sub/f", OpenFlags::create_trunc()).unwrap();
    a.close(f).unwrap();
    a.unlink("/kd/sub/f").unwrap();
    b.rmdir("/kd/sub").unwrap();
    let f = b.open("/kd/sub", OpenFlags::create_trunc()).unwrap();
    b.close(f).unwrap();
    assert_eq!(a.stat("/kd/sub/x").unwrap_err(), Errno::ENOTDIR);
    let err = a.open("/kd/sub/y", OpenFlags::create_trunc()).unwrap_err();
    assert_eq!(err, Errno::ENOTDIR, "no create under a file");
    assert_eq!(a.mkdir("/kd/sub/d", 0o755).unwrap_err(), Errno::ENOTDIR);

    // the same after a directory rename by b: the old name is gone for a as well
    a.mkdir("/kd/old", 0o755).unwrap();
    assert_eq!(a.stat("/kd/old/x").unwrap_err(), Errno::ENOENT);
    b.rename("/kd/old", "/kd/new", false).unwrap();
    let f = b.open("/kd/old", OpenFlags::create_trunc()).unwrap();
    b.close(f).unwrap();
    assert_eq!(a.stat("/kd/old/x").unwrap_err(), Errno::ENOTDIR);
    assert_eq!(a.stat("/kd/new/x").unwrap_err(), Errno::ENOENT);
}

/// An fsync of a file that grew carries the size publication to the metadata server: no
/// `SetSize` request of its own, and another client sees the size at once.
#[test]
fn fsync_publishes_the_size_in_the_same_request() {
    const N: usize = 3;
    let cl = cluster(N, &[], "none");
    let a = client(&cl, Duration::from_secs(20), "none");
    let b = client(&cl, Duration::from_secs(20), "none");
    a.mkdir("/fp", 0o755).unwrap();
    let (set_size, fsyncs) = (served(&cl, N, "set_size"), served(&cl, N, "fsync"));
    let mut f = a.open("/fp/f", OpenFlags::create_trunc()).unwrap();
    let bytes = data(3 << 20, 11);
    // past chunk 0, whose writes publish the size themselves
    let mut end = 0;
    for (i, part) in bytes.chunks(1 << 20).enumerate() {
        a.write(&mut f, end, part).unwrap();
        end += part.len() as u64;
        a.fsync(&mut f).unwrap();
        assert_eq!(b.stat("/fp/f").unwrap().size, end, "after fsync {i}");
    }
    a.close(f).unwrap();
    assert_eq!(served(&cl, N, "set_size"), set_size, "no SetSize requests");
    assert!(served(&cl, N, "fsync") >= fsyncs + 3);
    assert_eq!(sum(&get(&b, "/fp/f")), sum(&bytes));
    // the file unlinked (and its name taken by a directory) while open: the publication goes
    // to the file itself, never to what has the name now (docs/consistency.md, "Open files")
    let mut f = a.open("/fp/g", OpenFlags::create_trunc()).unwrap();
    a.write(&mut f, 4 << 20, b"late").unwrap();
    b.unlink("/fp/g").unwrap();
    b.mkdir("/fp/g", 0o755).unwrap();
    a.fsync(&mut f).unwrap();
    let st = a.fstat(&mut f).unwrap();
    assert_eq!((st.nlink, st.size), (0, (4 << 20) + 4));
    assert!(b.stat("/fp/g").unwrap().is_dir());
    let mut late = [0u8; 4];
    assert_eq!(a.read(&f, 4 << 20, &mut late).unwrap(), 4);
    assert_eq!(&late, b"late");
    a.close(f).unwrap();
}
