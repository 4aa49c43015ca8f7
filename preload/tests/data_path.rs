//! Data-path semantics with several real processes under the preload: one shared file written
//! in interleaved 47,008-byte records (ior-hard), and concurrent O_APPEND writers.

use madfs_cluster::{find_bin, LocalCluster, Options};
use std::process::{Child, Command};

fn cluster() -> LocalCluster {
    LocalCluster::start(Options {
        servers: 3,
        // records straddle chunk boundaries: the hard case
        args: vec!["--chunk-size".into(), "100000".into()],
        ..Default::default()
    })
    .expect("start servers")
}

fn python(cl: &LocalCluster, script: &str, args: &[String]) -> Child {
    Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_TIMEOUT_MS", "30000")
        .env("UCX_NET_DEVICES", "lo")
        .spawn()
        .expect("spawn python")
}

fn all_ok(children: Vec<Child>) {
    for mut c in children {
        let st = c.wait().unwrap();
        assert!(st.success(), "a process failed: {st}");
    }
}

const SHARED: &str = r#"
import os, sys
path, rank, ranks, records, phase = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
REC = 47008
def rec(r, i):
    head = f"rank {r} record {i} ".encode()
    return (head * (REC // len(head) + 1))[:REC]
if phase == "write":
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(records):
        os.pwrite(fd, rec(rank, i), (i * ranks + rank) * REC)
    os.close(fd)
else:
    other = (rank + 1) % ranks
    fd = os.open(path, os.O_RDONLY)
    assert os.fstat(fd).st_size == records * ranks * REC, os.fstat(fd).st_size
    for i in range(records):
        got = os.pread(fd, REC, (i * ranks + other) * REC)
        assert got == rec(other, i), f"rank {rank}: record {i} of rank {other} differs"
    os.close(fd)
"#;

#[test]
fn interleaved_records_in_one_shared_file() {
    let cl = cluster();
    let ranks = 4;
    let records = 200; // 4 × 200 × 47,008 B ≈ 37.6 MB
    let file = "/madfs/ior-hard".to_string();
    for phase in ["write", "read"] {
        let kids = (0..ranks)
            .map(|r| {
                python(
                    &cl,
                    SHARED,
                    &[
                        file.clone(),
                        r.to_string(),
                        ranks.to_string(),
                        records.to_string(),
                        phase.into(),
                    ],
                )
            })
            .collect();
        all_ok(kids);
    }
}

const APPEND: &str = r#"
import os, sys
path, rank, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
for i in range(n):
    line = f"{rank:02d}:{i:06d}:" + "x" * 20 + "\n"
    assert os.write(fd, line.encode()) == len(line)
os.close(fd)
"#;

#[test]
fn concurrent_appends_lose_nothing() {
    let cl = cluster();
    let (procs, n) = (4, 10_000);
    let file = "/madfs/appended".to_string();
    let kids = (0..procs)
        .map(|r| python(&cl, APPEND, &[file.clone(), r.to_string(), n.to_string()]))
        .collect();
    all_ok(kids);
    let out = Command::new("/bin/cat")
        .arg(&file)
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("UCX_NET_DEVICES", "lo")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).expect("no torn bytes");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), procs * n, "records");
    let mut seen = vec![vec![false; n]; procs];
    for l in &lines {
        assert_eq!(l.len(), 30, "torn record {l:?}");
        let r: usize = l[0..2].parse().unwrap();
        let i: usize = l[3..9].parse().unwrap();
        assert_eq!(&l[9..], ":xxxxxxxxxxxxxxxxxxxx", "torn record {l:?}");
        assert!(!seen[r][i], "record {r}:{i} twice");
        seen[r][i] = true;
        // each writer's records stay in its own order
    }
    assert!(seen.iter().all(|v| v.iter().all(|b| *b)));
    for r in 0..procs {
        let mine: Vec<usize> = lines
            .iter()
            .filter(|l| l[0..2].parse::<usize>().unwrap() == r)
            .map(|l| l[3..9].parse().unwrap())
            .collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "rank {r} out of order"
        );
    }
}
