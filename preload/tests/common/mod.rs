//! What the preload integration tests share: a 3-server cluster on loopback and programs run
//! under `LD_PRELOAD=libmadfs.so` against it. (Each test file uses a part of it.)
#![allow(dead_code)]

pub mod scripts;

use madfs_cluster::{find_bin, LocalCluster, Options};
use std::process::{Command, Output};

pub const MOUNT: &str = "/madfs";

/// Three servers; the mount point exists as a real directory, so `/madfs/..` resolves as on
/// any mount.
pub fn cluster() -> LocalCluster {
    let _ = std::fs::create_dir_all(MOUNT);
    LocalCluster::start(Options {
        servers: 3,
        ..Default::default()
    })
    .expect("start servers")
}

/// Runs `argv` with the preload library (call deadline `timeout_ms`; `$T` = the cluster's
/// scratch directory).
pub fn run(cl: &LocalCluster, argv: &[&str], timeout_ms: u32) -> Output {
    run_env(cl, argv, timeout_ms, &[])
}

/// [`run`] with extra environment variables.
pub fn run_env(cl: &LocalCluster, argv: &[&str], timeout_ms: u32, env: &[(&str, &str)]) -> Output {
    Command::new(argv[0])
        .args(&argv[1..])
        .env("LD_PRELOAD", find_bin("libmadfs.so"))
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_MOUNT", MOUNT)
        .env("MADFS_TIMEOUT_MS", timeout_ms.to_string())
        .env("UCX_NET_DEVICES", "lo")
        .env("T", cl.root())
        .envs(env.iter().copied())
        .output()
        .expect("spawn")
}

/// The stdout of a run that must succeed (its output in the panic message otherwise).
pub fn ok(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A bash script (`-euo pipefail`) under the preload; its stdout, asserting success.
pub fn bash(cl: &LocalCluster, script: &str, timeout_ms: u32) -> String {
    let argv = ["/bin/bash", "-euo", "pipefail", "-c", script];
    ok(run(cl, &argv, timeout_ms), script)
}

/// `madfs-syscall` with these steps under the preload; its stdout (steps may fail).
pub fn syscalls(cl: &LocalCluster, steps: &[&str], timeout_ms: u32) -> String {
    String::from_utf8_lossy(&syscalls_env(cl, steps, timeout_ms, &[]).stdout).into_owned()
}

/// `madfs-syscall` with these steps and extra environment under the preload; its output.
pub fn syscalls_env(
    cl: &LocalCluster,
    steps: &[&str],
    timeout_ms: u32,
    env: &[(&str, &str)],
) -> Output {
    let bin = find_bin("madfs-syscall");
    let mut argv = vec![bin.to_str().unwrap()];
    argv.extend_from_slice(steps);
    run_env(cl, &argv, timeout_ms, env)
}
