//! The seed corpus of the fuzz target (`crates/proto/fuzz/corpus/frame`): one valid frame of
//! every request kind and a few replies. `write_fuzz_seeds` is run by hand when the protocol
//! changes: `cargo test -p madfs-proto --test fuzz_seeds -- --ignored`.

use madfs_proto::frame::Encoder;
use madfs_proto::{Attr, FindFilter, Reply, Request, SizeMode, TimeSpec, Welcome};

fn requests() -> Vec<(&'static str, Request<'static>, &'static [u8])> {
    let attr = Attr {
        id: 7,
        mode: 0o100644,
        nlink: 1,
        size: 3901,
        chunk_size: 752128,
        ..Attr::default()
    };
    let filter = FindFilter {
        name: Some("*01*"),
        size: Some((3901, 1)),
        newer_than: Some(1),
        kind: Some(0o100000),
        pending: false,
    };
    let create = Request::Create {
        path: "/a/f",
        mode: 0o644,
        uid: 1,
        gid: 1,
        excl: true,
        trunc: false,
        access: 0,
        holder: 9,
    };
    let symlink = Request::Symlink {
        path: "/l",
        target: "/a",
        uid: 0,
        gid: 0,
    };
    let mkdir = Request::Mkdir {
        path: "/d",
        mode: 0o755,
        uid: 0,
        gid: 0,
    };
    let readdir = Request::Readdir {
        dir: "/",
        start: 5,
        max_bytes: 4096,
        servers: 0,
    };
    let set_size = Request::SetSize {
        path: "/a/f",
        size: 10,
        mode: SizeMode::Exact,
        id: 0,
    };
    let utimens = Request::Utimens {
        path: "/a/f",
        atime: TimeSpec::Now,
        mtime: TimeSpec::At(5),
        link: false,
    };
    let chown = Request::Chown {
        path: "/a/f",
        uid: 3,
        gid: u32::MAX,
        link: true,
    };
    let attach = Request::Attach {
        path: "/x",
        attr,
        replace: true,
        durable: true,
        from: Some("/a/f"),
        src: 1,
    };
    let rename = Request::Rename {
        from: "/a/f",
        to: "/b",
        noreplace: false,
    };
    let detach = Request::Detach { path: "/x", id: 7 };
    let read = Request::Read {
        id: 7,
        chunk: 1,
        offset: 0,
        len: 4096,
        chunk_size: 752128,
        cap: Default::default(),
    };
    let write = Request::Write {
        id: 7,
        chunk: 0,
        offset: 3,
        chunk_size: 752128,
        size_of: Some("/a/f"),
        cap: Default::default(),
    };
    let truncate = Request::TruncateChunks {
        id: 7,
        size: 0,
        chunk_size: 4096,
        cap: Default::default(),
    };
    let fsync = Request::Fsync {
        id: 7,
        size_of: Some("/a/f"),
        size: 3901,
        cap: Default::default(),
    };
    let find = Request::Find {
        dir: "/",
        filter,
        after: b"E/a",
        max_bytes: 65536,
        servers: 0,
    };
    let write_data = Request::WriteData {
        id: 7,
        chunk: 2,
        offset: 0,
        len: 65536,
        chunk_size: 752128,
        size_of: None,
        cap: Default::default(),
    };
    vec![
        ("ping", Request::Ping, b""),
        ("stat", Request::Stat("/a/b"), b""),
        ("create", create, b""),
        ("symlink", symlink, b""),
        ("mkdir", mkdir, b""),
        ("unlink", Request::Unlink { path: "/a/f" }, b""),
        ("rmdir", Request::Rmdir { path: "/d" }, b""),
        ("has_children", Request::HasChildren { dir: "/d" }, b""),
        ("readdir", readdir, b""),
        ("set_size", set_size, b""),
        (
            "hold",
            Request::Hold {
                client: 9,
                add: vec![madfs_proto::Cap {
                    id: 3,
                    ..Default::default()
                }],
                release: vec![4],
                held: vec![madfs_proto::Cap {
                    id: 3,
                    ..Default::default()
                }],
                gone: false,
            },
            b"",
        ),
        ("where", Request::Where { id: 3, client: 9 }, b""),
        (
            "append",
            Request::Append {
                path: "/a/f",
                len: 9,
                id: 3,
            },
            b"",
        ),
        (
            "chmod",
            Request::Chmod {
                path: "/a/f",
                mode: 0o600,
            },
            b"",
        ),
        ("utimens", utimens, b""),
        ("chown", chown, b""),
        ("attach", attach, b"chunk zero"),
        ("rename", rename, b""),
        ("detach", detach, b""),
        ("read", read, b""),
        ("write", write, b"some bytes"),
        ("truncate_chunks", truncate, b""),
        ("fsync", fsync, b""),
        ("statfs", Request::Statfs, b""),
        ("bye", Request::Bye, b""),
        ("find", find, b""),
        ("locate", Request::Locate, b""),
        ("write_data", write_data, b""),
        (
            "mknod",
            Request::Mknod {
                path: "/a/fifo",
                mode: libc::S_IFIFO | 0o644,
                rdev: 0,
                uid: 0,
                gid: 0,
            },
            b"",
        ),
        ("sync", Request::Sync { data: true }, b""),
        (
            "seal",
            Request::Seal {
                dir: "/d",
                sealed: true,
            },
            b"",
        ),
        (
            "touch",
            Request::Touch {
                dir: "/d",
                time: 1_700_000_000_000_000_000,
            },
            b"",
        ),
        ("settle", Request::Settle { path: "/x", id: 7 }, b""),
        (
            "move_state",
            Request::MoveState {
                from: "/a/f",
                id: 7,
            },
            b"",
        ),
    ]
}

fn replies() -> Vec<(&'static str, Reply<'static>)> {
    vec![
        ("unit", Reply::Unit),
        ("attr", Reply::Attr(Attr::default())),
        ("bool", Reply::Bool(true)),
        ("offset", Reply::Offset(42)),
        (
            "found",
            Reply::Found {
                scanned: 3,
                paths: vec!["a", "b/c"],
                next: Some(b"E/b"),
            },
        ),
    ]
}

/// Every seed decodes back to what was encoded (the corpus starts from valid frames).
#[test]
fn seeds_round_trip() {
    let mut enc = Encoder::default();
    for (name, req, bulk) in requests() {
        let (p, h) = enc.request(&req);
        let frame = [&p[..], h, bulk].concat();
        let (back, b) = madfs_proto::frame::decode_request(&frame).unwrap();
        assert_eq!((back, b), (req, bulk), "{name}");
    }
}

#[test]
#[ignore = "writes the fuzz corpus; run by hand"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/frame");
    std::fs::create_dir_all(&dir).unwrap();
    let mut enc = Encoder::default();
    for (name, req, bulk) in requests() {
        let (p, h) = enc.request(&req);
        std::fs::write(dir.join(format!("req-{name}")), [&p[..], h, bulk].concat()).unwrap();
    }
    for (name, rep) in replies() {
        let (p, h) = enc.reply(&rep);
        std::fs::write(dir.join(format!("rep-{name}")), [&p[..], h].concat()).unwrap();
    }
    let w = Welcome {
        protocol: madfs_proto::PROTOCOL_VERSION,
        cluster: 0x5f0c_0000_1234_abcd,
        servers: 3,
        conn: 1,
        server: 2,
        max_frame: 1 << 20,
        chunk_size: 752128,
        nonce: [0x5a; 32],
        lease_ms: 30_000,
        replication: 2,
        ticket: 0x1234_5678_9abc_def0,
    };
    std::fs::write(dir.join("welcome"), flexbuffers::to_vec(w).unwrap()).unwrap();
    let nonce = [0xa5u8; 32];
    for (name, proof) in [
        ("key", madfs_proto::Proof::Key(&[1u8; 32])),
        ("munge", madfs_proto::Proof::Munge("MUNGE:AwQFAAB...:")),
        ("insecure", madfs_proto::Proof::Insecure),
    ] {
        let h = madfs_proto::Hello {
            conn: 7,
            role: madfs_proto::Role::Client,
            nonce: &nonce,
            proof,
            uid: 1000,
            gid: 1000,
            groups: vec![1000, 27],
            set: None,
            ticket: 0x1234_5678_9abc_def0,
            holder: 0,
            listens: false,
        };
        std::fs::write(
            dir.join(format!("hello-{name}")),
            flexbuffers::to_vec(&h).unwrap(),
        )
        .unwrap();
    }
    for (name, a) in [
        (
            "admitted",
            madfs_proto::Admission::Admitted {
                secret: 0x1234_5678_9abc_def0,
                uid: 1000,
                gid: 1000,
                proof: vec![2; 32],
            },
        ),
        (
            "refused",
            madfs_proto::Admission::Refused {
                reason: "wrong cluster key".into(),
            },
        ),
    ] {
        std::fs::write(
            dir.join(format!("admit-{name}")),
            flexbuffers::to_vec(&a).unwrap(),
        )
        .unwrap();
    }
}

/// Every input that ever crashed or hung a decoder (`crates/proto/fuzz/crashes`) is now
/// rejected or decoded, quickly and without a panic (no `catch_unwind` here: the vendored
/// reader itself must not panic).
#[test]
fn past_crashers_are_rejected_without_a_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/crashes");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with('.') {
            continue;
        }
        let b = std::fs::read(&p).unwrap();
        let t = std::time::Instant::now();
        let _ = madfs_proto::frame::decode_request(&b);
        let _ = madfs_proto::frame::decode_reply(&b);
        let _ = flexbuffers::from_slice::<Welcome>(&b);
        let _ = flexbuffers::from_slice::<Request<'_>>(b.get(8..).unwrap_or_default());
        assert!(
            t.elapsed().as_secs() < 1,
            "{}: {:?}",
            p.display(),
            t.elapsed()
        );
        n += 1;
    }
    assert!(n >= 2, "{n} crashers");
}

/// A buffer of deeply nested vectors (the fuzzer's stack overflow) is an error, not a crash:
/// built on a thread with a large stack, decoded on a test thread's small one.
#[test]
fn deep_nesting_is_an_error() {
    fn nest(v: &mut flexbuffers::VectorBuilder<'_>, depth: usize) {
        if depth == 0 {
            v.push(1u8);
            return;
        }
        let mut inner = v.start_vector();
        nest(&mut inner, depth - 1);
        inner.end_vector();
    }
    let buf = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
            // a map with an unknown field: its value is skipped, visiting every level
            let mut b = flexbuffers::Builder::default();
            let mut m = b.start_map();
            let mut v = m.start_vector("zz");
            nest(&mut v, 20_000);
            v.end_vector();
            m.end_map();
            b.view().to_vec()
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(flexbuffers::from_slice::<Welcome>(&buf).is_err());
    let mut frame = (buf.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&madfs_proto::frame::MAGIC.to_le_bytes());
    frame.extend_from_slice(&buf);
    assert!(madfs_proto::frame::decode_request(&frame).is_err());
}

/// `Once` holds a request: one nested many times over is an error, not a crash (the
/// servers unwrap one level only), and one level decodes.
#[test]
fn nested_once_is_an_error() {
    let frame = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
            let mut req = Request::Ping;
            for seq in 0..20_000 {
                req = Request::Once {
                    client: 1,
                    seq,
                    at: 0,
                    req: Box::new(req),
                };
            }
            let mut e = Encoder::default();
            let (p, h) = e.request(&req);
            let mut f = p.to_vec();
            f.extend_from_slice(h);
            // (dropped here: a 20,000-deep box drops recursively too)
            drop(req);
            f
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(madfs_proto::frame::decode_request(&frame).is_err());
    let one = Request::Once {
        client: 1,
        seq: 2,
        at: 3,
        req: Box::new(Request::Unlink { path: "/a" }),
    };
    let mut e = Encoder::default();
    let (p, h) = e.request(&one);
    let f = [&p[..], h].concat();
    assert_eq!(madfs_proto::frame::decode_request(&f).unwrap().0, one);
}
