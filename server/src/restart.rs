//! A server that must start afresh in a new process image: its UCX worker's receive queue
//! stalled (`madfs_rpc::probe`), which no call can undo. The process executes itself again
//! with the addresses it had (so that the cluster file stays true even for ports first picked
//! by the system), as a restart after a crash but without the wait for an operator: clients
//! whose calls were lost time out and reconnect, peers learn the new start from its
//! `DirList`, and every half-done change is finished from its intent record.

use std::ffi::OsString;
use std::net::SocketAddr;

/// What [`crate::run`] returns when the server must restart: the addresses it had.
#[derive(Debug)]
pub struct Restart {
    pub listen: SocketAddr,
    pub control: SocketAddr,
    pub tcp: SocketAddr,
}

impl std::fmt::Display for Restart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server must restart (its UCX worker stalled)")
    }
}

impl std::error::Error for Restart {}

/// The environment variable counting a server's restarts of itself (shown in its log).
pub const RESTARTS: &str = "MADFS_SERVER_RESTARTS";

/// The arguments of the new image: `args` (without the program name) with the address
/// options replaced by the addresses in use.
pub fn arguments(args: &[OsString], r: &Restart) -> Vec<OsString> {
    const ADDRESSES: [&str; 3] = ["--listen", "--control", "--tcp"];
    let mut out = vec![];
    let mut skip_value = false;
    for a in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        let s = a.to_string_lossy();
        if ADDRESSES.contains(&s.as_ref()) {
            skip_value = true;
            continue;
        }
        if ADDRESSES.iter().any(|o| s.starts_with(&format!("{o}="))) {
            continue;
        }
        out.push(a.clone());
    }
    for (o, v) in ADDRESSES.iter().zip([r.listen, r.control, r.tcp]) {
        out.push(format!("{o}={v}").into());
    }
    out
}

/// Executes this server again with `r`'s addresses; returns only if that failed.
pub fn exec(r: &Restart) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let args: Vec<OsString> = std::env::args_os().collect();
    let Some((arg0, rest)) = args.split_first() else {
        return std::io::Error::other("no program name to restart with");
    };
    let n: u64 = std::env::var(RESTARTS)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // every descriptor but stdio is closed by the exec (the listening sockets among them,
    // whose ports the new image binds again)
    // SAFETY: close_range only sets flags on this process's descriptors.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    std::process::Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(arguments(rest, r))
        .env(RESTARTS, (n + 1).to_string())
        // a test fault is not inherited (it would stall the new image too)
        .env_remove("MADFS_FAULT")
        .exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_replaced_in_either_form() {
        let r = Restart {
            listen: "127.0.0.1:4000".parse().unwrap(),
            control: "127.0.0.1:4001".parse().unwrap(),
            tcp: "127.0.0.1:4002".parse().unwrap(),
        };
        let args: Vec<OsString> = [
            "--id",
            "3",
            "--listen",
            "127.0.0.1:0",
            "--control=127.0.0.1:0",
            "--data-dir",
            "/d",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let got: Vec<String> = arguments(&args, &r)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            got,
            [
                "--id",
                "3",
                "--data-dir",
                "/d",
                "--listen=127.0.0.1:4000",
                "--control=127.0.0.1:4001",
                "--tcp=127.0.0.1:4002"
            ]
        );
    }
}
