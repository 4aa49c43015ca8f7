//! Open files through the preload (issue 32): an unlinked file's bytes stay on the servers
//! while a process holds it open, and go when the last descriptor is closed, or when the
//! holder dies and its lease runs out (`--open-lease-ms`).

mod common;

use common::{bash, MOUNT};
use madfs_cluster::{find_bin, LocalCluster, Options};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn cluster(lease_ms: u32) -> LocalCluster {
    let _ = std::fs::create_dir_all(MOUNT);
    LocalCluster::start(Options {
        servers: 3,
        args: vec!["--open-lease-ms".into(), lease_ms.to_string()],
        ..Default::default()
    })
    .expect("start servers")
}

/// The chunk files of file `id` on the servers (chunk 0 past the inline part on its home
/// server, the other chunks where they are placed).
fn chunk_files(cl: &LocalCluster, id: u64) -> Vec<PathBuf> {
    (0..3)
        .map(|i| {
            cl.root()
                .join(format!("server{i}/data"))
                .join(madfs_placement::chunk_file(id))
        })
        .filter(|p| p.exists())
        .collect()
}

/// Waits until no chunk file of `id` is left (at most `secs`); the seconds it took.
fn gone_within(cl: &LocalCluster, id: u64, secs: u64) -> Option<f64> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if chunk_files(cl, id).is_empty() {
            return Some(t.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// A holder process under the preload: opens `path` on fd 3 and sleeps.
fn holder(cl: &LocalCluster, path: &str) -> std::process::Child {
    let script = format!("exec 3<'{path}'; echo held; exec sleep 1000");
    let mut c = Command::new("/bin/bash")
        .args(["-c", &script])
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_MOUNT", MOUNT)
        .env("UCX_NET_DEVICES", "lo")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n");
    c
}

#[test]
fn unlinked_bytes_stay_while_open_and_go_with_the_last_close_or_the_lease() {
    let cl = cluster(4000);
    let dir = format!("{MOUNT}/opens");
    // 3 MB: chunk files on several servers
    let id: u64 = bash(
        &cl,
        &format!(
            "mkdir -p {dir} && cd {dir} && head -c 3000000 /dev/zero > f && cp f g && stat -c %i f"
        ),
        20_000,
    )
    .trim()
    .parse()
    .unwrap();
    assert!(
        chunk_files(&cl, id).len() >= 2,
        "{:?}",
        chunk_files(&cl, id)
    );

    // open in one process, unlinked by another: the bytes stay while it is open, and go
    // right after it closes (the sweep runs every second)
    let mut h = holder(&cl, &format!("{dir}/f"));
    bash(&cl, &format!("rm {dir}/f"), 20_000);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(chunk_files(&cl, id).len() >= 2, "dropped while open");
    h.kill().unwrap(); // SIGKILL: no close, no goodbye
    h.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !chunk_files(&cl, id).is_empty(),
        "dropped before the holder's lease ran out"
    );
    let took = gone_within(&cl, id, 15).expect("a dead holder's file is dropped after its lease");
    eprintln!("dead holder: bytes dropped {took:.1} s after the kill check (lease 4 s)");

    // a holder that closes: dropped at once
    let id: u64 = bash(&cl, &format!("stat -c %i {dir}/g"), 20_000)
        .trim()
        .parse()
        .unwrap();
    let out = bash(
        &cl,
        &format!(
            "exec 3<{dir}/g; rm {dir}/g; sleep 1.5; n=$(cat <&3 | wc -c); \
             ls {}/server*/data/*/$(printf %016x {id}) 2>/dev/null | wc -l; echo $n; exec 3<&-",
            cl.root().display()
        ),
        20_000,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].trim().parse::<u32>().unwrap() >= 2, "{out}");
    assert_eq!(lines[1].trim(), "3000000", "{out}");
    let took = gone_within(&cl, id, 5).expect("dropped after the last close");
    eprintln!("closed: bytes dropped {took:.1} s after the holder exited");
}

#[test]
fn a_hard_linked_file_keeps_its_bytes_until_its_last_name_and_descriptor_go() {
    let cl = cluster(4000);
    let dir = format!("{MOUNT}/links");
    let id: u64 = bash(
        &cl,
        &format!(
            "mkdir -p {dir}/x {dir}/y && cd {dir} && head -c 3000000 /dev/urandom > f && \
             ln f x/g && ln x/g y/h && stat -c %i f"
        ),
        20_000,
    )
    .trim()
    .parse()
    .unwrap();
    let before = chunk_files(&cl, id);
    assert!(before.len() >= 2, "{before:?}");
    let sum = |name: &str| bash(&cl, &format!("md5sum < {dir}/{name}"), 20_000);
    let want = sum("f");
    // every name but the last: the bytes stay, readable through what is left
    bash(&cl, &format!("rm {dir}/f {dir}/x/g"), 20_000);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(chunk_files(&cl, id), before, "dropped with a name left");
    assert_eq!(sum("y/h"), want);
    assert_eq!(
        bash(&cl, &format!("stat -c %h {dir}/y/h"), 20_000).trim(),
        "1"
    );
    // the last name goes while a process holds it open: kept until it closes
    let out = bash(
        &cl,
        &format!(
            "exec 3<{dir}/y/h; rm {dir}/y/h; sleep 1.5; \
             ls {}/server*/data/*/$(printf %016x {id}) 2>/dev/null | wc -l; md5sum <&3; exec 3<&-",
            cl.root().display()
        ),
        20_000,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].trim().parse::<u32>().unwrap() >= 2, "{out}");
    assert_eq!(format!("{}\n", lines[1]), want, "{out}");
    let took = gone_within(&cl, id, 5).expect("dropped after the last name and close");
    eprintln!("hard-linked file: bytes dropped {took:.1} s after the last close");
}
