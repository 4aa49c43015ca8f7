//! `madfs-find`: server-side parallel find, with pfind's command line (so io500 can use it as
//! its find command).
//!
//! ```text
//! madfs-find DIR [-newer FILE] [-size N[c|k|M|G]] [-name GLOB] [-type f|d] [-count]
//! ```
//! Every server evaluates the filter over its own key range of DIR's subtree (one prefix scan)
//! in parallel; matches are printed one per line, then `MATCHED <matched>/<examined>`.
//! DIR and FILE may be given under the mount (`/madfs/...`, `MADFS_MOUNT`) or as madfs paths.
//! Bad arguments: a message on stderr and exit code 2.

use madfs_client::{Client, FileSystem, FindFilter};

struct Args {
    dir: String,
    newer: Option<String>,
    size: Option<(u64, u64)>,
    name: Option<String>,
    kind: Option<u32>,
    count: bool,
}

const USAGE: &str =
    "usage: madfs-find DIR [-newer FILE] [-size N[c|k|M|G]] [-name GLOB] [-type f|d] [-count]";

fn usage(msg: &str) -> ! {
    eprintln!("madfs-find: {msg}");
    eprintln!("{USAGE}");
    std::process::exit(2);
}

/// `--help` / `-h`: what the command line takes, on stdout.
fn help() -> ! {
    println!(
        "Server-side parallel find over a madfs tree, with pfind's command line (io500's find)."
    );
    println!();
    println!("{USAGE}");
    println!();
    println!("  DIR          the tree (under the mount, MADFS_MOUNT, or a madfs path)");
    println!("  -newer FILE  modified after FILE");
    println!("  -size N      of size N (c bytes, k KiB, M MiB, G GiB; default 512-byte blocks)");
    println!("  -name GLOB   whose name matches GLOB");
    println!("  -type f|d    files or directories");
    println!("  -count, -C   print only MATCHED <matched>/<examined>");
    println!();
    println!("Cluster: MADFS_CLUSTER. Prints the matches, then MATCHED <matched>/<examined>.");
    std::process::exit(0);
}

fn parse_size(s: &str) -> Option<(u64, u64)> {
    let (num, unit) = match s.chars().last()? {
        'c' => (&s[..s.len() - 1], 1),
        'w' => (&s[..s.len() - 1], 2),
        'b' => (&s[..s.len() - 1], 512),
        'k' => (&s[..s.len() - 1], 1 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        c if c.is_ascii_digit() => (s, 512),
        _ => return None,
    };
    num.parse().ok().map(|n| (n, unit))
}

fn glob_ok(g: &str) -> bool {
    // an unclosed bracket expression is the classic broken pattern
    let mut chars = g.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.next().is_none() => return false,
            '[' => {
                if chars.peek() == Some(&'!') || chars.peek() == Some(&'^') {
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    chars.next();
                }
                if !chars.by_ref().any(|c| c == ']') {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}

fn parse(argv: &[String]) -> Args {
    let mut a = Args {
        dir: String::new(),
        newer: None,
        size: None,
        name: None,
        kind: None,
        count: false,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .unwrap_or_else(|| usage(&format!("{what} needs a value")))
        };
        match arg.as_str() {
            "-newer" => a.newer = Some(value("-newer")),
            "-size" => {
                let v = value("-size");
                a.size = Some(parse_size(&v).unwrap_or_else(|| {
                    usage(&format!(
                        "invalid -size {v:?} (expected N, Nc, Nk, NM or NG)"
                    ))
                }));
            }
            "-name" => {
                let v = value("-name");
                if !glob_ok(&v) {
                    usage(&format!("invalid -name pattern {v:?}"));
                }
                a.name = Some(v);
            }
            "-type" => {
                a.kind = Some(match value("-type").as_str() {
                    "f" => libc::S_IFREG,
                    "d" => libc::S_IFDIR,
                    t => usage(&format!("unsupported -type {t:?} (f or d)")),
                })
            }
            "-count" | "-C" => a.count = true,
            "--help" | "-h" => help(),
            s if s.starts_with('-') => usage(&format!("unknown option {s}")),
            s if a.dir.is_empty() => a.dir = s.to_owned(),
            s => usage(&format!("unexpected argument {s:?}")),
        }
    }
    if a.dir.is_empty() {
        usage("missing DIR");
    }
    a
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    madfs_client::init_cli_logging();
    let args = parse(&argv);
    let mount = std::env::var("MADFS_MOUNT").unwrap_or_else(|_| "/madfs".into());
    let mount = mount.trim_end_matches('/').to_owned();
    let internal = |p: &str| -> Option<String> {
        if p == mount {
            Some("/".into())
        } else {
            p.strip_prefix(&format!("{mount}/"))
                .map(|r| format!("/{r}"))
        }
    };
    let (dir, prefix) = match internal(&args.dir) {
        Some(d) => (d, mount.clone()),
        None => (args.dir.clone(), String::new()),
    };
    let client = Client::from_env().unwrap_or_else(|e| {
        eprintln!("madfs-find: {e}");
        std::process::exit(2)
    });
    let newer_than = args.newer.as_ref().map(|f| {
        let t = match internal(f) {
            Some(p) => client.stat(&p).map(|a| a.mtime).map_err(|e| e.to_string()),
            None => std::fs::metadata(f)
                .and_then(|m| m.modified())
                .map(|t| {
                    t.duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as i64)
                        .unwrap_or(0)
                })
                .map_err(|e| e.to_string()),
        };
        t.unwrap_or_else(|e| {
            eprintln!("madfs-find: -newer {f}: {e}");
            std::process::exit(2)
        })
    });
    let filter = FindFilter {
        name: args.name.as_deref(),
        size: args.size,
        newer_than,
        kind: args.kind,
        pending: false,
    };
    let (mut paths, mut examined) = match client.find(&dir, &filter) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("madfs-find: {}: {e}", args.dir);
            std::process::exit(1);
        }
    };
    // like find, the start directory itself is a candidate
    if let Ok(a) = client.stat(&dir) {
        examined += 1;
        let name = dir.rsplit('/').next().unwrap_or("");
        if filter.matches(name, &a) {
            paths.insert(0, dir.clone());
        }
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    use std::io::Write;
    if !args.count {
        for p in &paths {
            let shown = if prefix.is_empty() {
                p.clone()
            } else if p == "/" {
                prefix.clone()
            } else {
                format!("{prefix}{p}")
            };
            let _ = writeln!(out, "{shown}");
        }
    }
    let _ = writeln!(out, "MATCHED {}/{}", paths.len(), examined);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_globs() {
        assert_eq!(parse_size("3901c"), Some((3901, 1)));
        assert_eq!(parse_size("4k"), Some((4, 1024)));
        assert_eq!(parse_size("7"), Some((7, 512)));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("12q"), None);
        assert!(glob_ok("*01*"));
        assert!(glob_ok("[ab]*"));
        assert!(!glob_ok("[ab"));
        assert!(!glob_ok("a\\"));
    }
}
