//! Rename of files done by the source's server: one name and the data after every rename,
//! on one server and across servers; one winner among concurrent renames of one source; a
//! server killed in the middle of a move leaves exactly one name after its restart.

mod common;

use common::{client, cluster, data, get, put, sum};
use madfs_client::{Errno, FileSystem};
use madfs_placement::meta_server;
use std::time::{Duration, Instant};

#[test]
fn renames_keep_one_name_and_the_data_on_one_server_and_across() {
    let cl = cluster(3, &[], "none");
    let c = client(&cl, Duration::from_secs(15), "none");
    c.mkdir("/r", 0o755).unwrap();
    let sizes = [0usize, 100, 3901, 70_000, 800_000, 2_000_000];
    let (mut local, mut across) = (0, 0);
    for i in 0..36 {
        let (from, to) = (format!("/r/f{i}"), format!("/r/g{i}"));
        if meta_server(&from, 3) == meta_server(&to, 3) {
            local += 1;
        } else {
            across += 1;
        }
        let bytes = data(sizes[i % sizes.len()], i as u64);
        put(&c, &from, &bytes, 47008, false);
        let ino = c.stat(&from).unwrap().id;
        c.rename(&from, &to, false).unwrap();
        assert_eq!(c.stat(&from).unwrap_err(), Errno::ENOENT, "{from}");
        let a = c.stat(&to).unwrap();
        assert_eq!((a.id, a.size), (ino, bytes.len() as u64), "{to}");
        assert_eq!(sum(&get(&c, &to)), sum(&bytes), "{to}");
    }
    assert!(local > 0 && across > 0, "{local} local, {across} across");
    // over an existing file: its data is gone, the moved file's stays; noreplace refuses
    put(&c, "/r/a", &data(500_000, 1), 47008, false);
    put(&c, "/r/b", &data(900_000, 2), 47008, false);
    assert_eq!(c.rename("/r/a", "/r/b", true).unwrap_err(), Errno::EEXIST);
    c.rename("/r/a", "/r/b", false).unwrap();
    assert_eq!(sum(&get(&c, "/r/b")), sum(&data(500_000, 1)));
    assert_eq!(c.stat("/r/a").unwrap_err(), Errno::ENOENT);
    // over a directory; of a missing source; into a missing directory
    c.mkdir("/r/d", 0o755).unwrap();
    assert_eq!(c.rename("/r/b", "/r/d", false).unwrap_err(), Errno::EISDIR);
    assert_eq!(
        c.rename("/r/nothing", "/r/x", false).unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(
        c.rename("/r/b", "/r/none/x", false).unwrap_err(),
        Errno::ENOENT
    );
    let names = c.readdir("/r").unwrap().len();
    assert_eq!(names, 36 + 2, "g0..g35, b, d");
}

#[test]
fn of_concurrent_renames_of_one_source_exactly_one_wins() {
    let cl = cluster(3, &[], "none");
    let c = client(&cl, Duration::from_secs(15), "none");
    c.mkdir("/c", 0o755).unwrap();
    for round in 0..10 {
        let src = format!("/c/src{round}");
        put(&c, &src, &data(70_000, round), 70_000, false);
        let won: Vec<bool> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..6)
                .map(|t| {
                    let (cl, src) = (&cl, &src);
                    s.spawn(move || {
                        let c = client(cl, Duration::from_secs(15), "none");
                        match c.rename(src, &format!("/c/dst{round}.{t}"), false) {
                            Ok(()) => true,
                            Err(Errno::ENOENT) => false,
                            Err(e) => panic!("rename {src}: {e:?}"),
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "round {round}");
        let there: Vec<usize> = (0..6)
            .filter(|t| c.stat(&format!("/c/dst{round}.{t}")).is_ok())
            .collect();
        assert_eq!(there.len(), 1, "round {round}: {there:?}");
        assert!(won[there[0]], "the winner's name is the one left");
        assert_eq!(c.stat(&src).unwrap_err(), Errno::ENOENT);
    }
}

/// Pairs of names in `/k` whose metadata servers differ (a move across servers), the source
/// on server `src`.
fn cross_pairs(src: u32, n: usize) -> Vec<(String, String)> {
    (0..)
        .map(|i| (format!("/k/s{i}"), format!("/k/t{i}")))
        .filter(|(a, b)| meta_server(a, 3) == src && meta_server(b, 3) != src)
        .take(n)
        .collect()
}

#[test]
fn a_server_killed_mid_rename_leaves_exactly_one_name() {
    for point in ["rename-after-intent", "rename-after-attach"] {
        let mut cl = cluster(3, &[], "none");
        let c = client(&cl, Duration::from_secs(3), "none");
        c.mkdir("/k", 0o755).unwrap();
        let pairs = cross_pairs(0, 2);
        let bytes = data(200_000, 9);
        for (a, _) in &pairs {
            put(&c, a, &bytes, 47008, true);
        }
        // server 0 aborts in the middle of its next move
        cl.stop(0);
        cl.options_mut().env = vec![("MADFS_FAULT".into(), point.into())];
        cl.restart(0).unwrap();
        let (a, b) = &pairs[0];
        let c = client(&cl, Duration::from_secs(3), "none");
        assert!(c.rename(a, b, false).is_err(), "{point}: the server died");
        assert!(cl.log(0).contains("aborting"), "{point}: {}", cl.log(0));
        cl.options_mut().env.clear();
        cl.restart(0).unwrap();
        // the move finishes at start; at no moment is there no name
        let c = client(&cl, Duration::from_secs(10), "none");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (old, new) = (c.stat(a).is_ok(), c.stat(b).is_ok());
            assert!(old || new, "{point}: neither {a} nor {b}");
            if new && !old {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{point}: the move never finished: {}",
                cl.log(0)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(sum(&get(&c, b)), sum(&bytes), "{point}");
        assert!(cl.log(0).contains("pending"), "{point}: {}", cl.log(0));
        // the source name is free and the server serves renames again
        let (a2, b2) = &pairs[1];
        c.rename(a2, b2, false).unwrap();
        assert_eq!(sum(&get(&c, b2)), sum(&bytes));
        put(&c, a, b"again", 5, false);
        assert_eq!(get(&c, a), b"again");
    }
}
