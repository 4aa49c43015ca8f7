//! Servers survive what clients throw at them: malformed frames, `..` paths, oversized
//! frames, and clients killed in the middle of requests (TCP and shared memory).

mod common;

use common::*;
use madfs_client::{Errno, FileSystem, OpenFlags};
use madfs_proto::frame::{self, Encoder, MAGIC, PREFIX};
use madfs_proto::{tag, Request};
use std::io::{BufRead, BufReader};
use std::mem::MaybeUninit;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn alive(pid: Option<u32>) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid.is_some_and(|p| unsafe { libc::kill(p as i32, 0) } == 0)
}

/// Sends raw frame pieces and returns the reply's errno (Ok(()) for success).
fn raw(
    c: &madfs_client::Client,
    server: u32,
    kind: u64,
    pieces: &[&[u8]],
) -> Result<Result<(), Errno>, Errno> {
    let t = c.transport();
    t.ensure(server)?;
    let mut out = vec![MaybeUninit::<u8>::uninit(); 4096];
    let n = t.wait(&[server], t.exchange(server, kind, pieces, &mut out))?;
    let bytes: Vec<u8> = out[..n]
        .iter()
        .map(|b| unsafe { b.assume_init() })
        .collect();
    Ok(frame::decode_reply(&bytes).map(|_| ()))
}

#[test]
fn malformed_frames_do_not_hurt_the_server() {
    let cl = cluster(2, &[], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    put(&c, "/keep", b"precious", 8, true);
    let s = c.meta_of("/keep");

    let mut enc = Encoder::default();
    let mut huge = u32::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(&MAGIC.to_le_bytes());
    let mut bad_magic = 4u32.to_le_bytes().to_vec();
    bad_magic.extend_from_slice(b"nope");
    let mut garbage_hdr = 6u32.to_le_bytes().to_vec();
    garbage_hdr.extend_from_slice(&MAGIC.to_le_bytes());
    let frames: Vec<Vec<u8>> = vec![
        vec![1],                                                          // truncated prefix
        vec![0xff; 300],                                                  // garbage
        huge,      // header length beyond the frame
        bad_magic, // not our magic
        [garbage_hdr, vec![0xa5, 0x13, 0x00, 0xff, 0x07, 0x02]].concat(), // not flexbuffers
    ];
    for f in &frames {
        assert_eq!(
            raw(&c, s, tag::REQUEST, &[f]).unwrap(),
            Err(Errno::EPROTO),
            "{f:?}"
        );
        assert_eq!(
            raw(&c, s, tag::FSYNC, &[f]).unwrap(),
            Err(Errno::EINVAL),
            "fsync tag {f:?}"
        );
    }
    // every truncation of a valid frame
    let (p, h) = enc.request(&Request::Stat("/keep"));
    let whole = [&p[..], h].concat();
    for n in 0..whole.len() {
        let r = raw(&c, s, tag::REQUEST, &[&whole[..n]]).unwrap();
        assert!(r.is_err(), "truncated to {n} bytes");
    }
    // (data requests carry a genuine capability: what is checked here is what the server
    // does with hostile arguments; capabilities themselves: tests/security.rs)
    put(&c, "/hostile-target", b"x", 1, false);
    let hf = c
        .open_as("/hostile-target", OpenFlags::default(), 6)
        .unwrap();
    let (hid, hcap) = (hf.attr.id, hf.cap);
    // well-formed requests with hostile contents
    let hostile = [
        Request::Stat("/a/../../etc/passwd"),
        Request::Create {
            path: "/../escape",
            mode: 0o644,
            uid: 0,
            gid: 0,
            excl: false,
            trunc: true,
            access: 0,
            holder: 0,
        },
        Request::Mkdir {
            path: "relative/x",
            mode: 0o755,
            uid: 0,
            gid: 0,
        },
        Request::Unlink { path: "/x/./y" },
        Request::Readdir {
            dir: "//",
            start: 0,
            max_bytes: u32::MAX,
            servers: 0,
        },
        Request::TruncateChunks {
            id: hid,
            size: 0,
            chunk_size: 0,
            cap: hcap,
        },
        // a chunk size of 0 or past the largest, or a piece leaving its chunk
        Request::Read {
            id: hid,
            chunk: 1,
            offset: 0,
            len: 16,
            chunk_size: 0,
            cap: hcap,
        },
        Request::Read {
            id: hid,
            chunk: 1,
            offset: 0,
            len: 16,
            chunk_size: u32::MAX,
            cap: hcap,
        },
        Request::Read {
            id: hid,
            chunk: 1,
            offset: 5000,
            len: 16,
            chunk_size: 4096,
            cap: hcap,
        },
    ];
    // (each to the server that holds what it names: any other refuses it before looking)
    let at = |r: &Request<'_>| match r {
        Request::Read { id, chunk, .. }
        | Request::Write { id, chunk, .. }
        | Request::WriteData { id, chunk, .. } => {
            madfs_placement::chunk_server(*id, *chunk, &madfs_placement::Layout::initial(2))
        }
        _ => s,
    };
    for r in &hostile {
        let (p, h) = enc.request(r);
        assert_eq!(
            raw(&c, at(r), tag::REQUEST, &[&p, h]).unwrap(),
            Err(Errno::EINVAL),
            "{r:?}"
        );
    }
    let w = Request::Write {
        id: hid,
        chunk: u64::MAX,
        offset: u32::MAX,
        chunk_size: 4096,
        size_of: None,
        cap: hcap,
    };
    let (p, h) = enc.request(&w);
    assert_eq!(
        raw(&c, at(&w), tag::REQUEST, &[&p, h, b"data"]).unwrap(),
        Err(Errno::EFBIG)
    );
    let w = Request::Write {
        id: hid,
        chunk: 0,
        offset: 0,
        chunk_size: 4096,
        size_of: Some("/../etc/passwd"),
        cap: hcap,
    };
    let (p, h) = enc.request(&w);
    assert_eq!(
        raw(&c, at(&w), tag::REQUEST, &[&p, h, b"data"]).unwrap(),
        Err(Errno::EINVAL)
    );
    // a WriteData whose data never comes: dropped after the half-sent deadline (2 s), answered
    // ETIMEDOUT
    let wd = Request::WriteData {
        id: hid,
        chunk: 3,
        offset: 0,
        chunk_size: 4096,
        len: 1 << 20,
        size_of: None,
        cap: hcap,
    };
    let (p, h) = enc.request(&wd);
    assert_eq!(
        raw(&c, at(&wd), tag::REQUEST, &[&p, h]).unwrap(),
        Err(Errno::ETIMEDOUT)
    );
    // a large read is answered with its raw data (frame::RAW_READ_MIN)
    let mut buf = vec![0u8; 1 << 20];
    let req = Request::Read {
        id: hid,
        chunk: 5,
        offset: 0,
        chunk_size: 4096,
        len: u32::MAX,
        cap: hcap,
    };
    let t = c.transport();
    let rs = at(&req);
    assert!(
        t.wait(&[rs], t.call_read(rs, &req, &mut buf)).is_ok(),
        "huge read length is clamped"
    );
    assert!(!cl.root().parent().unwrap().join("escape").exists());

    // a frame larger than the server's buffers: no answer (the call times out), no harm
    c.transport().set_timeout(Duration::from_secs(2));
    let max = c.transport().welcome(s).unwrap().max_frame as usize;
    let w = Request::Write {
        id: hid,
        chunk: 1,
        offset: 0,
        chunk_size: 4096,
        size_of: None,
        cap: hcap,
    };
    let (p, h) = enc.request(&w);
    let big = vec![7u8; max + (1 << 20)];
    let t0 = Instant::now();
    assert_eq!(
        raw(&c, at(&w), tag::REQUEST, &[&p, h, &big]),
        Err(Errno::EIO)
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
    c.transport().set_timeout(Duration::from_secs(10));

    // the server is alive and still answers correctly
    for i in 0..2 {
        assert!(alive(cl.pid(i)));
        c.ping(i as u32).unwrap();
    }
    assert_eq!(get(&c, "/keep"), b"precious");
    let _ = PREFIX;
}

/// Starts `madfs hammer` processes, lets them run, kills them with SIGKILL mid-stream, and
/// checks the servers go on serving another client.
fn kill_clients_mid_requests(err_mode: &str) {
    let cl = cluster(2, &[], err_mode);
    let c = client(&cl, Duration::from_secs(10), err_mode);
    let bin = env!("CARGO_BIN_EXE_madfs");
    for round in 0..3 {
        let mut kids = vec![];
        for k in 0..3 {
            let mut child = Command::new(bin)
                .args(["hammer", &format!("/h{round}-{k}"), "--seconds", "60"])
                .env("MADFS_CLUSTER", cl.cluster_file())
                .env("MADFS_UCX_ERR_MODE", err_mode)
                .env("UCX_NET_DEVICES", "lo")
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            // wait until it has done real work
            let mut line = String::new();
            let mut out = BufReader::new(child.stdout.take().unwrap());
            out.read_line(&mut line).unwrap();
            assert!(line.trim().parse::<u64>().is_ok(), "hammer said {line:?}");
            // keep its stdout open: it must die of our SIGKILL, in the middle of requests
            kids.push((child, out));
        }
        std::thread::sleep(Duration::from_millis(100));
        for (mut k, _out) in kids {
            assert!(
                k.try_wait().unwrap().is_none(),
                "hammer stopped before the kill"
            );
            k.kill().unwrap();
            let st = k.wait().unwrap();
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(st.signal(), Some(libc::SIGKILL));
        }
        // the servers still serve: creates, stats, data, listings
        let dir = format!("/after{round}");
        if let Err(e) = c.mkdir(&dir, 0o755) {
            panic!(
                "mkdir {dir} after killing clients: {e:?}\nserver 0:\n{}\nserver 1:\n{}",
                cl.log(0),
                cl.log(1)
            );
        }
        for i in 0..200 {
            let p = format!("{dir}/f{i}");
            let f = c
                .open(
                    &p,
                    OpenFlags {
                        create: true,
                        excl: true,
                        mode: 0o644,
                        ..Default::default()
                    },
                )
                .unwrap();
            c.close(f).unwrap();
            c.stat(&p).unwrap();
        }
        put(
            &c,
            &format!("{dir}/data"),
            &data(300_000, round),
            65536,
            true,
        );
        assert_eq!(get(&c, &format!("{dir}/data")), data(300_000, round));
        assert_eq!(c.readdir(&dir).unwrap().len(), 201);
    }
    for i in 0..2 {
        assert!(alive(cl.pid(i)), "server {i} died:\n{}", cl.log(i));
    }
}

#[test]
fn killed_clients_on_tcp() {
    kill_clients_mid_requests("peer");
}

#[test]
fn killed_clients_on_shared_memory() {
    kill_clients_mid_requests("none");
}

#[test]
fn clients_say_goodbye_so_servers_forget_them() {
    let cl = cluster(2, &[], "none");
    for _ in 0..5 {
        let c = client(&cl, Duration::from_secs(10), "none");
        c.ping(0).unwrap();
        c.ping(1).unwrap();
    }
    for i in 0..2 {
        let s = stats(&cl, i);
        assert!(s.connections >= 5, "server {i}: {s:?}");
        assert_eq!(
            s.live_connections, 0,
            "server {i} still holds connections: {s:?}"
        );
    }
}

/// Every input of the fuzz target's seed corpus and every input that ever crashed a decoder
/// (`crates/proto/fuzz`), sent as a request and as an fsync to a live server, is answered;
/// then 32 concurrent well-behaved requests are all answered and nothing was lost.
#[test]
fn fuzz_inputs_do_not_hurt_a_live_server() {
    let cl = cluster(2, &[], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    put(&c, "/keep", b"precious", 8, true);
    let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/proto/fuzz");
    let mut inputs: Vec<(String, Vec<u8>)> = vec![];
    for sub in ["crashes", "corpus/frame"] {
        for e in std::fs::read_dir(fuzz.join(sub)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            // a goodbye is never answered; a data header waits for its data (its own test)
            if name.starts_with('.') || name == "req-bye" || name == "req-write_data" {
                continue;
            }
            inputs.push((name, std::fs::read(&p).unwrap()));
        }
    }
    assert!(inputs.len() >= 25, "{} inputs", inputs.len());
    for s in 0..2 {
        for kind in [tag::REQUEST, tag::FSYNC] {
            for (name, bytes) in &inputs {
                let r = raw(&c, s, kind, &[bytes]);
                assert!(r.is_ok(), "server {s}, {name}: no answer ({r:?})");
            }
        }
    }
    let served: Vec<bool> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..32)
            .map(|t| {
                let cl = &cl;
                sc.spawn(move || {
                    let c = client(cl, Duration::from_secs(10), "none");
                    let p = format!("/ok{t}");
                    put(&c, &p, &data(5000, t), 5000, false);
                    get(&c, &p) == data(5000, t) && get(&c, "/keep") == b"precious"
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(served.iter().all(|ok| *ok));
    for i in 0..2 {
        assert!(alive(cl.pid(i)), "server {i} died");
    }
}

/// Messages of tag kinds no server receives (and longer than the drain's buffer) are taken off
/// UCX's queue and counted, not kept: the counter reaches what was sent, and requests go on.
#[test]
fn messages_of_unknown_tag_kinds_are_drained() {
    let cl = cluster(1, &[], "none");
    let c = client(&cl, Duration::from_secs(10), "none");
    put(&c, "/keep", b"precious", 8, true);
    let big = vec![7u8; 100_000];
    let mut sent = 0u64;
    for i in 0..3000u64 {
        let kind = [0u64, 3, 4, 7, 8, 9, 10, 12, 13, 14, 15][(i % 11) as usize] << 60;
        let bytes: &[u8] = if i % 100 == 0 {
            &big
        } else {
            b"not a madfs request"
        };
        c.transport().send_only(0, kind, bytes).unwrap();
        sent += 1;
    }
    let drained = || stats(&cl, 0).drained;
    let deadline = Instant::now() + Duration::from_secs(20);
    while drained() < sent {
        assert!(Instant::now() < deadline, "{} of {sent} drained", drained());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(drained(), sent);
    assert_eq!(get(&c, "/keep"), b"precious");
    // acknowledgements of callbacks (kind 11) that are none: taken, counted as bad
    let bad = || stats(&cl, 0).bad_frames;
    let before = bad();
    for i in 0..100u64 {
        let bytes: &[u8] = if i % 10 == 0 {
            &big
        } else {
            b"not a madfs request"
        };
        c.transport().send_only(0, 11 << 60, bytes).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while bad() < before + 100 {
        assert!(Instant::now() < deadline, "{} of 100 taken", bad() - before);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(&c, "/keep"), b"precious");
    // hellos (kind 6) for connections that are not waiting for one: dropped, counted
    for _ in 0..100 {
        c.transport()
            .send_only(0, madfs_proto::tag::HELLO, b"not a hello")
            .unwrap();
    }
    let forged = || stats(&cl, 0).forged;
    while forged() < 100 {
        assert!(
            Instant::now() < deadline + Duration::from_secs(10),
            "{} of 100 hellos dropped",
            forged()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(&c, "/keep"), b"precious");
    assert!(alive(cl.pid(0)));
}
