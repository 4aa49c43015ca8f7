//! Smoke test of `madfs-bench io500`: every phase, briefly, on a 2-server cluster through
//! `LD_PRELOAD=libmadfs.so` and on a local directory; the figures must be finite and positive
//! and every file the bench wrote must be gone afterwards.

use madfs_client::{Client, ClientConfig, FileSystem};
use madfs_cluster::{find_bin, LocalCluster, Options};
use std::process::Command;

const PHASES: &[&str] = &[
    "ior-easy-write",
    "mdtest-easy-write",
    "ior-hard-write",
    "mdtest-hard-write",
    "find",
    "ior-easy-read",
    "mdtest-easy-stat",
    "ior-hard-read",
    "mdtest-hard-stat",
    "mdtest-easy-delete",
    "mdtest-hard-read",
    "mdtest-hard-delete",
    "ior-rand-4k-write",
    "ior-rand-4k-read",
    "rpc",
];

fn bench(cl: &LocalCluster, extra: &[&str], preload: bool) -> serde_json::Value {
    let json = cl
        .root()
        .join(format!("out-{}.json", extra.join("_").replace('/', "")));
    let mut c = Command::new(find_bin("madfs-bench"));
    c.args(["io500", "--ranks", "2", "--stonewall", "0.5"])
        .args([
            "--easy-max",
            "32m",
            "--rand-size",
            "8m",
            "--rpc-iters",
            "500",
        ])
        .arg("--json")
        .arg(&json)
        .args(extra)
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_MOUNT", "/madfs")
        .env("MADFS_TIMEOUT_MS", "20000")
        .env("UCX_NET_DEVICES", "lo");
    if preload {
        c.env("LD_PRELOAD", find_bin("libmadfs.so"));
    }
    let out = c.output().expect("spawn madfs-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "madfs-bench {extra:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

fn check(v: &serde_json::Value, label: &str, with_rpc: bool) {
    let t = v["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"]["label"] == label)
        .unwrap_or_else(|| panic!("no {label} target in {v}"));
    let phases = t["phases"].as_array().unwrap();
    for name in PHASES {
        let p = phases.iter().find(|p| p["name"] == *name);
        if *name == "rpc" && !with_rpc {
            assert!(p.is_none(), "rpc phase on a local directory");
            continue;
        }
        let p = p.unwrap_or_else(|| panic!("{label}: phase {name} missing"));
        let x = p["value"].as_f64().unwrap();
        assert!(x.is_finite() && x > 0.0, "{label} {name}: {x}");
        assert!(p["ops"].as_u64().unwrap() > 0, "{label} {name}: no ops");
    }
    for k in ["bw", "md", "score"] {
        let x = t[k].as_f64().unwrap();
        assert!(x.is_finite() && x > 0.0, "{label} {k}: {x}");
    }
}

#[test]
fn every_phase_through_the_preload_and_locally() {
    let _ = std::fs::create_dir_all("/madfs");
    let cl = LocalCluster::start(Options {
        servers: 2,
        ..Default::default()
    })
    .expect("start servers");
    let cfg = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    let c = Client::new(&cfg).unwrap();
    c.mkdir("/smoke", 0o755).unwrap();

    // POSIX through libmadfs.so, find on the servers
    let v = bench(&cl, &["--dir", "/madfs/smoke"], true);
    check(&v, "madfs", true);
    assert_eq!(c.readdir("/smoke").unwrap(), vec![], "files left behind");

    // the client library directly, find by walking
    let v = bench(&cl, &["--lib", "--dir", "/smoke", "--find", "walk"], false);
    check(&v, "madfs", true);
    assert_eq!(c.readdir("/smoke").unwrap(), vec![], "files left behind");

    // a local directory, same code
    let local = cl.root().join("local");
    std::fs::create_dir(&local).unwrap();
    let v = bench(&cl, &["--dir", local.to_str().unwrap()], false);
    check(&v, "local", false);
    assert_eq!(
        std::fs::read_dir(&local).unwrap().count(),
        0,
        "files left behind"
    );
}
