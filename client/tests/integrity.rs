//! End-to-end data integrity (issue 31): a chunk file lost, cut or with a flipped byte reads
//! as EIO — through the servers and through local reads — never as zeros or the flipped
//! byte; holes stay zeros; a server killed in the middle of unaligned writes leaves no false
//! error; `fsck` (online and offline) reports the damage and removes orphan chunk files.

mod common;

use common::*;
use madfs_client::{Client, ClientConfig, Errno, FileSystem, OpenFlags};
use madfs_cluster::LocalCluster;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A client with local reads on or off.
fn client_with(cl: &LocalCluster, local_reads: bool) -> Client {
    let mut cfg = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    cfg.timeout = Duration::from_secs(10);
    cfg.local_reads = local_reads;
    Client::new(&cfg).unwrap()
}

/// The chunk files of file `id` on every server: (server, path).
fn chunk_files(cl: &LocalCluster, n: usize, id: u64) -> Vec<(usize, PathBuf)> {
    (0..n)
        .map(|i| {
            (
                i,
                cl.root()
                    .join(format!("server{i}/data"))
                    .join(madfs_placement::chunk_file(id)),
            )
        })
        .filter(|(_, p)| p.exists())
        .collect()
}

fn read_result(c: &Client, path: &str) -> Result<Vec<u8>, Errno> {
    let f = c.open(path, OpenFlags::default())?;
    let mut out = vec![0u8; f.size() as usize];
    let mut at = 0;
    let len = out.len();
    while at < len {
        let n = c.read(&f, at as u64, &mut out[at..(at + (1 << 20)).min(len)])?;
        if n == 0 {
            break;
        }
        at += n;
    }
    c.close(f)?;
    Ok(out)
}

/// Flips one bit of the first non-zero byte of `path` at or after `from`; returns its offset.
fn flip(path: &Path, from: usize) -> usize {
    let mut b = std::fs::read(path).unwrap();
    let at = from + b[from..].iter().position(|x| *x != 0).unwrap();
    b[at] ^= 0x10;
    std::fs::write(path, &b).unwrap();
    at
}

fn fsck_online(cl: &LocalCluster, repair: bool) -> (madfs_control::Verdict, u64) {
    madfs_control::fsck::cluster_blocking(&cl.cluster_file(), repair).unwrap()
}

#[test]
fn lost_cut_and_flipped_chunks_are_eio_and_fsck_finds_them() {
    let mut cl = cluster(2, &[], "none");
    let c = client_with(&cl, true);
    let remote = client_with(&cl, false);
    // 3 MB in unaligned pieces (ior-hard's 47,008 bytes): chunks on both servers
    let flipped = data(3_000_000, 1);
    let lost = data(2_000_000, 2);
    let cut = data(2_000_000, 3);
    put(&c, "/flipped", &flipped, 47008, true);
    put(&c, "/lost", &lost, 47008, true);
    put(&c, "/cut", &cut, 47008, true);
    // a sparse file: holes read as zeros, no error
    {
        let mut f = c.open("/sparse", OpenFlags::create_trunc()).unwrap();
        c.write(&mut f, 0, b"head").unwrap();
        c.write(&mut f, 2_500_000, b"tail").unwrap();
        c.close(f).unwrap();
    }
    for cc in [&c, &remote] {
        assert_eq!(read_result(cc, "/flipped").unwrap(), flipped);
        let s = read_result(cc, "/sparse").unwrap();
        assert_eq!(s.len(), 2_500_004);
        assert_eq!(&s[..4], b"head");
        assert!(s[4..2_500_000].iter().all(|b| *b == 0));
    }
    let ids: std::collections::HashMap<&str, u64> = ["/flipped", "/lost", "/cut"]
        .into_iter()
        .map(|p| (p, c.stat(p).unwrap().id))
        .collect();
    let id = |p: &str| ids[p];
    // one byte flipped in a chunk file (past the inline part of chunk 0)
    let files = chunk_files(&cl, 2, id("/flipped"));
    assert!(!files.is_empty());
    let (srv, path) = &files[files.len() - 1];
    let at = flip(path, 1 << 20);
    eprintln!("flipped byte {at} of {}", path.display());
    // the whole file: EIO, through local reads and through the server
    assert_eq!(read_result(&c, "/flipped"), Err(Errno::EIO));
    assert_eq!(read_result(&remote, "/flipped"), Err(Errno::EIO));
    // a chunk file deleted: EIO, never zeros
    let lost_files = chunk_files(&cl, 2, id("/lost"));
    let (lsrv, lpath) = &lost_files[0];
    std::fs::remove_file(lpath).unwrap();
    // (servers keep descriptors open: a restart is what a real loss looks like)
    cl.restart(*lsrv).unwrap();
    let c = client_with(&cl, true);
    let remote = client_with(&cl, false);
    assert_eq!(read_result(&c, "/lost"), Err(Errno::EIO));
    assert_eq!(read_result(&remote, "/lost"), Err(Errno::EIO));
    // a chunk file cut short
    let cut_files = chunk_files(&cl, 2, id("/cut"));
    let (_, cpath) = &cut_files[0];
    let len = std::fs::metadata(cpath).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(cpath)
        .unwrap()
        .set_len(len - 10_000)
        .unwrap();
    assert_eq!(read_result(&c, "/cut"), Err(Errno::EIO));
    assert_eq!(read_result(&remote, "/cut"), Err(Errno::EIO));
    // the server logged file id and chunk
    let logs = cl.log(0) + &cl.log(1);
    assert!(
        logs.contains(&format!("file {:016x}", id("/flipped"))) && logs.contains("EIO"),
        "{logs}"
    );
    // the untouched files still read, and writes go on
    assert_eq!(read_result(&c, "/sparse").unwrap().len(), 2_500_004);
    put(&c, "/after", &data(100_000, 4), 4096, false);
    assert_eq!(get(&c, "/after"), data(100_000, 4));

    // fsck, online: all three damaged files, no orphan yet
    let (v, _) = fsck_online(&cl, false);
    eprintln!("{v}");
    let damaged_ids: std::collections::BTreeSet<u64> =
        v.damaged.iter().map(|(_, d)| d.id).collect();
    assert_eq!(
        damaged_ids,
        [id("/flipped"), id("/lost"), id("/cut")]
            .into_iter()
            .collect()
    );
    assert!(v
        .damaged
        .iter()
        .any(|(s, d)| *s == *srv as u32 && d.id == id("/flipped") && d.what == "corrupt"));
    assert!(v
        .damaged
        .iter()
        .any(|(s, d)| *s == *lsrv as u32 && d.id == id("/lost") && d.what == "missing"));
    assert!(v.orphans.is_empty(), "{v}");
    // an orphan: a chunk file (and records) no entry names
    let orphan = 0x00ff_0000_0000_1234u64;
    let opath = cl
        .root()
        .join("server1/data")
        .join(madfs_placement::chunk_file(orphan));
    std::fs::create_dir_all(opath.parent().unwrap()).unwrap();
    std::fs::write(&opath, vec![7u8; 100_000]).unwrap();
    let (v, _) = fsck_online(&cl, false);
    assert_eq!(
        v.orphans.iter().map(|o| (o.0, o.1)).collect::<Vec<_>>(),
        vec![(1, orphan)]
    );
    let (v, freed) = fsck_online(&cl, true);
    assert_eq!(v.orphans.len(), 1);
    assert!(freed >= 100_000, "{freed}");
    assert!(!opath.exists());
    // damage is reported, never "repaired": the damaged files are still there
    assert!(c.stat("/flipped").is_ok() && chunk_files(&cl, 2, id("/flipped")).len() == files.len());
    let (v, _) = fsck_online(&cl, false);
    assert!(v.orphans.is_empty() && v.damaged.len() >= 3);

    // fsck offline on the stopped servers' data directories: the same damage, exit 1
    cl.stop(0);
    cl.stop(1);
    let out = std::process::Command::new(madfs_cluster::find_bin("madfs-server"))
        .arg("fsck")
        .arg(cl.root().join("server0"))
        .arg(cl.root().join("server1"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("corrupt") && text.contains("missing"),
        "{text}"
    );
    assert!(text.contains(&format!("{:016x}", id("/cut"))), "{text}");
    assert!(text.contains("0 orphan chunk files"), "{text}");
}

#[test]
fn without_checksums_nothing_is_verified() {
    let cl = cluster(1, &["--checksums", "none"], "none");
    let c = client_with(&cl, false);
    let d = data(1_000_000, 5);
    put(&c, "/f", &d, 65536, true);
    let files = chunk_files(&cl, 1, c.stat("/f").unwrap().id);
    let at = flip(&files[0].1, 200_000);
    let got = read_result(&c, "/f").unwrap();
    assert_ne!(got, d, "the flipped byte is served: checksums are off");
    assert_eq!(got[at], d[at] ^ 0x10);
    assert!(!files[0].1.with_extension("crc").exists());
    let (v, _) = fsck_online(&cl, false);
    assert!(!v.checksums && v.damaged.is_empty());
}

#[test]
fn servers_killed_during_unaligned_writes_leave_no_false_eio() {
    let mut cl = cluster(2, &[], "none");
    let c = client_with(&cl, false);
    let record = 47008usize;
    let rounds = 6;
    let start = Instant::now();
    for round in 0..rounds {
        // a writer process-alike: a thread writing records until its server dies under it
        let cf = cl.cluster_file();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let w = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut cfg = ClientConfig::from_cluster_file(cf).unwrap();
                cfg.timeout = Duration::from_secs(3);
                let c = Client::new(&cfg).unwrap();
                let path = format!("/w{round}");
                let mut f = c.open(&path, OpenFlags::create_trunc()).unwrap();
                let mut k = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && k < 400 {
                    // overwrite earlier records too: blocks with history
                    let at = (k % 97) * record as u64 * 3 + (k % 3) * 1000;
                    if c.write(&mut f, at, &data(record, k)).is_err() {
                        break;
                    }
                    k += 1;
                }
                let _ = c.close(f);
                k
            })
        };
        std::thread::sleep(Duration::from_millis(150 + 97 * round as u64 % 300));
        let victim = round % 2;
        cl.kill(victim);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let k = w.join().unwrap();
        cl.restart(victim).unwrap();
        eprintln!("round {round}: server {victim} killed after {k} writes");
    }
    // every file reads without an error, through a fresh client, and fsck finds nothing
    let c2 = client_with(&cl, false);
    for round in 0..rounds {
        let path = format!("/w{round}");
        if c2.stat(&path).is_ok() {
            read_result(&c2, &path).unwrap_or_else(|e| panic!("{path}: {e:?}"));
        }
    }
    let (v, _) = fsck_online(&cl, false);
    assert!(v.damaged.is_empty(), "{v}");
    drop(c);
    eprintln!("{} rounds in {:?}", rounds, start.elapsed());
}
