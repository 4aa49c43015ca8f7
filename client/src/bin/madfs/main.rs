//! `madfs`: a small command-line client (stat, ls, put, get, …) using the client library
//! directly (no preload). Cluster from `MADFS_CLUSTER`. `madfs cp` copies trees in and out
//! in parallel (cp.rs).

mod cp;
mod side;

use clap::{Parser, Subcommand};
use madfs_client::{Client, FileSystem, OpenFlags};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "madfs",
    about = "madfs command-line client (cluster from MADFS_CLUSTER)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Round trip of an empty request to every server.
    Ping,
    /// Attributes of a path.
    Stat { path: String },
    /// List a directory.
    Ls { path: String },
    /// Create a directory.
    Mkdir { path: String },
    /// Remove an empty directory.
    Rmdir { path: String },
    /// Remove a file.
    Rm { path: String },
    /// Rename FROM to TO (a file or a directory), done by FROM's server. With --stdin: one
    /// "FROM TO" pair per line, answered "ok" or "error ERRNO" per line as each is done
    /// (after a first line "ready": connected to every server).
    Mv {
        #[arg(num_args = 0..=2)]
        paths: Vec<String>,
        #[arg(long)]
        stdin: bool,
    },
    /// Give the file at FROM the new name TO (a hard link).
    Ln { from: String, to: String },
    /// Copy a local file (or `-` for stdin) into madfs.
    Put {
        local: String,
        path: String,
        /// fsync before closing.
        #[arg(long)]
        sync: bool,
    },
    /// Copy a madfs file to a local file (or `-` for stdout).
    Get { path: String, local: String },
    /// Copy trees into, out of or within madfs in parallel, like `cp -a` (stage in and out):
    /// modes, times and links kept, files already copied skipped. Exit status 1 when
    /// anything failed (each failure named on stderr).
    Cp(cp::Args),
    /// Check the cluster's chunk files (every block against its checksum) and find chunk
    /// files no entry references (orphans), online through the servers' control ports; with
    /// --data, offline on stopped servers' data directories (runs `madfs-server fsck`).
    /// Exit status 1 when damage or orphans were found (and not all repaired).
    Fsck {
        /// Remove orphan chunk files (damaged blocks are reported, never "repaired").
        #[arg(long)]
        repair: bool,
        /// Offline: these data directories (every server's, to decide orphans).
        #[arg(long, num_args = 1..)]
        data: Vec<String>,
    },
    /// Issue stat/create/unlink requests in a loop for SECONDS (load generator for tests).
    Hammer {
        /// Directory to work in (created).
        dir: String,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Ask for READS reads of BYTES each of file PATH without ever taking the replies, say
    /// `ready`, and sleep (a stalled client, for tests: they stop or kill it).
    Stall {
        path: String,
        #[arg(long, default_value_t = 16)]
        reads: u32,
        #[arg(long, default_value_t = 1 << 20)]
        bytes: u32,
        /// Over the TCP fallback transport.
        #[arg(long)]
        tcp: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    madfs_client::init_cli_logging();
    let cli = match cli.cmd {
        Cmd::Cp(args) => std::process::exit(cp::main(args)),
        cmd => Cli { cmd },
    };
    if let Cmd::Fsck { repair, data } = &cli.cmd {
        std::process::exit(fsck(*repair, data));
    }
    let tcp = matches!(cli.cmd, Cmd::Stall { tcp: true, .. });
    let client = if tcp {
        madfs_client::ClientConfig::from_env()
            .map_err(std::io::Error::other)
            .and_then(|cfg| Client::new_tcp(&cfg))
    } else {
        Client::from_env()
    };
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            eprintln!("madfs: {e}");
            std::process::exit(2);
        }
    };
    let r = run(&client, cli.cmd);
    // the servers drop what this process still held open at once (not after its lease)
    client.goodbye();
    if let Err(e) = r {
        eprintln!("madfs: {e}");
        std::process::exit(1);
    }
}

/// `madfs fsck`: online through the cluster file's control ports, or offline (`--data`)
/// through `madfs-server fsck` beside this program. Returns the exit status.
fn fsck(repair: bool, data: &[String]) -> i32 {
    if !data.is_empty() {
        let server = std::env::current_exe()
            .ok()
            .and_then(|p| Some(p.parent()?.join("madfs-server")))
            .filter(|p| p.exists())
            .unwrap_or_else(|| "madfs-server".into());
        let mut cmd = std::process::Command::new(server);
        cmd.arg("fsck").args(data);
        if repair {
            cmd.arg("--repair");
        }
        return match cmd.status() {
            Ok(s) => s.code().unwrap_or(2),
            Err(e) => {
                eprintln!("madfs: fsck: cannot run madfs-server: {e}");
                2
            }
        };
    }
    let Some(file) = std::env::var_os("MADFS_CLUSTER") else {
        eprintln!("madfs: fsck: set MADFS_CLUSTER to the cluster file (or give --data DIR…)");
        return 2;
    };
    match madfs_control::fsck::cluster_blocking(std::path::Path::new(&file), repair) {
        Ok((v, freed)) => {
            println!("{v}");
            if repair && !v.orphans.is_empty() {
                println!(
                    "repaired: {} orphan chunk files removed, {freed} bytes given back",
                    v.orphans.len()
                );
                i32::from(!v.damaged.is_empty())
            } else {
                i32::from(!v.clean())
            }
        }
        Err(e) => {
            eprintln!("madfs: fsck: {e:#}");
            2
        }
    }
}

fn run(c: &Client, cmd: Cmd) -> Result<(), Box<dyn std::error::Error>> {
    match cmd {
        Cmd::Ping => {
            for s in 0..c.servers() {
                let t = Instant::now();
                c.ping(s)?;
                println!("server {s}: {:?}", t.elapsed());
            }
        }
        Cmd::Stat { path } => println!("{:?}", c.stat(&path)?),
        Cmd::Ls { path } => {
            for e in c.readdir(&path)? {
                let kind = if e.kind == libc::S_IFDIR { "d" } else { "-" };
                println!("{kind} {:>20} {}", e.ino, e.name);
            }
        }
        Cmd::Mkdir { path } => c.mkdir(&path, 0o755)?,
        Cmd::Rmdir { path } => c.rmdir(&path)?,
        Cmd::Rm { path } => c.unlink(&path)?,
        Cmd::Mv {
            paths,
            stdin: false,
        } => match &paths[..] {
            [from, to] => c.rename(from, to, false)?,
            _ => return Err("madfs mv: FROM TO, or --stdin".into()),
        },
        Cmd::Mv { stdin: true, .. } => {
            // connected to every server first: "ready"
            c.connect_all()?;
            let mut out = std::io::stdout();
            writeln!(out, "ready")?;
            out.flush()?;
            for line in std::io::stdin().lines() {
                let line = line?;
                let Some((from, to)) = line.split_once(' ') else {
                    return Err(format!("madfs mv --stdin: not 'FROM TO': {line:?}").into());
                };
                match c.rename(from, to, false) {
                    Ok(()) => writeln!(out, "ok")?,
                    Err(e) => writeln!(out, "error {}", e.raw())?,
                }
                out.flush()?;
            }
        }
        Cmd::Ln { from, to } => drop(c.link(&from, &to)?),
        Cmd::Put { local, path, sync } => {
            let mut input: Box<dyn Read> = if local == "-" {
                Box::new(std::io::stdin())
            } else {
                Box::new(std::fs::File::open(&local)?)
            };
            let mut f = c.open(&path, OpenFlags::create_trunc())?;
            let mut buf = vec![0u8; 4 << 20];
            let mut off = 0u64;
            loop {
                let n = input.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                c.write(&mut f, off, &buf[..n])?;
                off += n as u64;
            }
            if sync {
                c.fsync(&mut f)?;
            }
            c.close(f)?;
        }
        Cmd::Get { path, local } => {
            let f = c.open(&path, OpenFlags::default())?;
            let mut out: Box<dyn Write> = if local == "-" {
                Box::new(std::io::stdout())
            } else {
                Box::new(std::fs::File::create(&local)?)
            };
            let mut buf = vec![0u8; 4 << 20];
            let mut off = 0u64;
            loop {
                let n = c.read(&f, off, &mut buf)?;
                if n == 0 {
                    break;
                }
                out.write_all(&buf[..n])?;
                off += n as u64;
            }
            c.close(f)?;
        }
        // answered in main, before a client is made
        Cmd::Fsck { .. } | Cmd::Cp(_) => {}
        Cmd::Stall {
            path, reads, bytes, ..
        } => {
            let f = c.open(&path, OpenFlags::default())?;
            let cs = f.attr.chunk_size.max(1);
            for i in 0..reads {
                // chunks 1.. (chunk 0 starts in RocksDB), spread over the servers
                let req = madfs_proto::Request::Read {
                    id: f.attr.id,
                    chunk: 1 + i as u64,
                    offset: 0,
                    len: bytes.min(cs),
                    chunk_size: cs,
                    cap: f.cap,
                };
                let server = madfs_placement::chunk_server(f.attr.id, 1 + i as u64, &c.layout());
                c.transport().send_request(server, &req, &[])?;
            }
            let mut out = std::io::stdout();
            writeln!(out, "ready")?;
            out.flush()?;
            std::thread::sleep(Duration::from_secs(3600));
        }
        Cmd::Hammer { dir, seconds } => {
            let _ = c.mkdir(&dir, 0o755);
            let end = Instant::now() + Duration::from_secs(seconds);
            let mut i = 0u64;
            while Instant::now() < end {
                let p = format!("{dir}/f{}", i % 64);
                let f = c.open(
                    &p,
                    OpenFlags {
                        create: true,
                        mode: 0o644,
                        ..Default::default()
                    },
                )?;
                c.close(f)?;
                c.stat(&p)?;
                if i % 2 == 1 {
                    c.unlink(&p)?;
                }
                i += 1;
                if i.is_multiple_of(1000) {
                    let mut out = std::io::stdout();
                    let _ = writeln!(out, "{i}").and_then(|_| out.flush());
                }
            }
        }
    }
    Ok(())
}
