//! Membership changes of an unreplicated cluster (docs/architecture.md, "Membership
//! changes"): a server drained while a client writes and reads; every byte and every entry
//! stays, the drained server ends up owning and holding nothing, and clients follow the new
//! layout without noticing.

mod common;

use common::procs::{bin_dir, show};
use common::*;
use madfs_client::{Client, FileSystem, OpenFlags};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of file `i` of the tree: empty, inline, a few chunks, many chunks.
fn size_of(i: usize) -> usize {
    match i % 4 {
        0 => 0,
        1 => 100 + i,
        2 => 3 * 65536 + i,
        _ => 20 * 65536 + 7,
    }
}

fn tree(c: &Client, dirs: usize, files: usize) {
    for d in 0..dirs {
        c.mkdir(&format!("/d{d}"), 0o755).unwrap();
        for f in 0..files {
            let i = d * files + f;
            put(
                c,
                &format!("/d{d}/f{f}"),
                &data(size_of(i), i as u64),
                65536,
                false,
            );
        }
    }
}

fn check_tree(c: &Client, dirs: usize, files: usize, who: &str) {
    for d in 0..dirs {
        let names = c.readdir(&format!("/d{d}")).unwrap();
        assert_eq!(names.len(), files, "{who}: entries of /d{d}");
        for f in 0..files {
            let i = d * files + f;
            let got = get(c, &format!("/d{d}/f{f}"));
            assert!(
                got == data(size_of(i), i as u64),
                "{who}: /d{d}/f{f}: {} bytes, {} expected",
                got.len(),
                size_of(i)
            );
        }
    }
}

#[test]
fn a_server_drained_while_a_client_works_hands_everything_over() {
    let cl = cluster(
        3,
        &["--chunk-size", "65536", "--move-batch-slots", "128"],
        "none",
    );
    let t0 = Instant::now();
    let c = client(&cl, Duration::from_secs(20), "none");
    let (dirs, files) = (4, 60);
    tree(&c, dirs, files);
    eprintln!("tree made in {:?}", t0.elapsed());
    c.mkdir("/w", 0o755).unwrap();
    // a file kept open through the move, read afterwards with the layout of before (its
    // chunks on this host are read from the chunk files: they must not be the old owner's)
    let held_path = "/d1/f3";
    let held = c.open(held_path, OpenFlags::default()).unwrap();
    let i = files + 3;

    // a client that goes on creating, writing and reading back through the move
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (stop, file) = (stop.clone(), cl.cluster_file());
        std::thread::spawn(move || {
            let mut cfg = madfs_client::ClientConfig::from_cluster_file(file).unwrap();
            cfg.timeout = Duration::from_secs(20);
            let c = Client::new(&cfg).unwrap();
            let mut made = 0usize;
            while !stop.load(Relaxed) || made < 20 {
                let p = format!("/w/f{made}");
                let bytes = data(size_of(made), 1_000_000 + made as u64);
                let t = Instant::now();
                let mut f = c.open(&p, OpenFlags::create_trunc()).unwrap();
                let t1 = t.elapsed();
                if !bytes.is_empty() {
                    c.write(&mut f, 0, &bytes).unwrap();
                }
                let t2 = t.elapsed();
                c.close(f).unwrap();
                let t3 = t.elapsed();
                let back = get(&c, &p);
                if t.elapsed() > Duration::from_secs(1) {
                    eprintln!(
                        "slow: {p} open {t1:?} write {t2:?} close {t3:?} all {:?}",
                        t.elapsed()
                    );
                }
                assert!(back == bytes, "/w/f{made} read back wrong");
                if made > 0 {
                    let k = (made * 7919) % made;
                    let again = get(&c, &format!("/w/f{k}"));
                    assert!(
                        again == data(size_of(k), 1_000_000 + k as u64),
                        "/w/f{k} read again wrong"
                    );
                }
                made += 1;
            }
            made
        })
    };
    std::thread::sleep(Duration::from_millis(300));

    let t = Instant::now();
    let out = std::process::Command::new(bin_dir().join("madfs-ctl"))
        .args(["drain", "2", "--wait", "120", "--cluster"])
        .arg(cl.cluster_file())
        .output()
        .unwrap();
    assert!(out.status.success(), "drain: {}", show(&out));
    let took = t.elapsed();
    stop.store(true, Relaxed);
    let made = worker.join().expect("the working client");
    eprintln!("drained in {took:?}; the working client made {made} files meanwhile");

    // (after the old owners dropped what they copied)
    std::thread::sleep(Duration::from_secs(3));
    let mut back = vec![0u8; size_of(i)];
    assert_eq!(c.read(&held, 0, &mut back).unwrap(), back.len());
    assert!(
        back == data(size_of(i), i as u64),
        "{held_path} read through a handle of before"
    );
    c.close(held).unwrap();

    // every server knows the layout: server 2 owns nothing, the others half each
    for i in 0..3 {
        let m = map_of(&cl, i).expect("a map");
        assert_eq!(m.moving, 0, "server {i}");
        assert_eq!(m.shares[2], 0, "server {i}: {:?}", m.shares);
        assert_eq!(m.shares[0] + m.shares[1], 4096);
        assert!(m.shares[0].abs_diff(m.shares[1]) <= 1, "{:?}", m.shares);
    }
    // the client of before (its layout is the initial one) and a new one see everything
    eprintln!("checking at {:?}", t0.elapsed());
    check_tree(&c, dirs, files, "the first client");
    eprintln!("checked at {:?}", t0.elapsed());
    let fresh = client(&cl, Duration::from_secs(20), "none");
    check_tree(&fresh, dirs, files, "a new client");
    assert_eq!(fresh.readdir("/w").unwrap().len(), made);
    for k in 0..made {
        assert!(get(&fresh, &format!("/w/f{k}")) == data(size_of(k), 1_000_000 + k as u64));
    }
    // a while after its last switch the drained server holds no entry and no chunk byte
    std::thread::sleep(Duration::from_secs(4));
    let held = stats(&cl, 2);
    eprintln!("server 2 after the drain: {held:?}");
    let data_dir = cl.root().join("server2").join("data");
    let bytes = du(&data_dir);
    assert_eq!(
        bytes,
        0,
        "chunk bytes left on the drained server: {}",
        left(&data_dir)
    );
    // and the namespace still works: everything removed, the directories too
    for d in 0..dirs {
        for f in 0..files {
            fresh.unlink(&format!("/d{d}/f{f}")).unwrap();
        }
        fresh.rmdir(&format!("/d{d}")).unwrap();
    }
    for k in 0..made {
        fresh.unlink(&format!("/w/f{k}")).unwrap();
    }
    fresh.rmdir("/w").unwrap();
    assert!(fresh.readdir("/").unwrap().is_empty());
}

/// Bytes of disk the chunk files under the chunk directory `dir` take (allocated blocks):
/// its subdirectories' files, record files left out (a record file keeps its first block,
/// of zeros: every block a hole).
fn du(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for sub in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(sub.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if e.path().extension().is_none() {
                total += e.metadata().unwrap().blocks() * 512;
            }
        }
    }
    total
}

/// The chunk files under the chunk directory `dir` that take disk blocks, with their sizes.
fn left(dir: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut out = String::new();
    for sub in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(sub.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let m = e.metadata().unwrap();
            if m.blocks() > 0 && e.path().extension().is_none() {
                out += &format!(
                    "{} size {} blocks {}\n",
                    e.path().display(),
                    m.len(),
                    m.blocks()
                );
            }
        }
    }
    out
}
