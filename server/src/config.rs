//! `madfs-server --config FILE`: the server's settings in a TOML file, one key per
//! command-line flag (its long name, with `-` or `_`), turned into arguments placed before
//! the command line's own, which win. An unknown key, a flag given a value of the wrong kind
//! or a file that does not parse is refused with a message naming the file and the key.
//!
//! ```toml
//! data-dir = "/local/madfs/{id}"
//! cluster_file = "/shared/job42/cluster"
//! listen = "10.0.0.7:0"
//! replication = 2
//! root-squash = true
//! ```

use anyhow::{bail, Context};
use std::ffi::OsString;
use std::path::Path;

/// A flag the program takes: its long name, and whether it takes a value (else it is a
/// switch: `true` gives it, `false` leaves it out).
pub struct Flag {
    pub long: String,
    pub takes_value: bool,
}

/// `argv` with the settings of its `--config FILE` (if any) put before its own arguments.
pub fn expand(argv: Vec<OsString>, flags: &[Flag]) -> anyhow::Result<Vec<OsString>> {
    let mut file = None;
    for (i, a) in argv.iter().enumerate().skip(1) {
        let s = a.to_string_lossy();
        if let Some(f) = s.strip_prefix("--config=") {
            file = Some(f.to_owned());
        } else if s == "--config" {
            match argv.get(i + 1) {
                Some(f) => file = Some(f.to_string_lossy().into_owned()),
                None => bail!("--config needs a file"),
            }
        }
    }
    let Some(file) = file else {
        return Ok(argv);
    };
    let from_file = args_of(Path::new(&file), flags)?;
    let mut out = Vec::with_capacity(argv.len() + from_file.len());
    out.push(argv[0].clone());
    out.extend(from_file);
    out.extend(argv.into_iter().skip(1));
    Ok(out)
}

/// The arguments the TOML file at `path` stands for.
fn args_of(path: &Path, flags: &[Flag]) -> anyhow::Result<Vec<OsString>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("config {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| anyhow::anyhow!("config {}: {e}", path.display()))?;
    let mut out = vec![];
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let Some(flag) = flags.iter().find(|f| f.long == long && long != "config") else {
            bail!(
                "config {}: unknown key `{key}` (the keys are the long flags of --help)",
                path.display()
            );
        };
        let values = match value {
            toml::Value::Array(items) => items.iter().collect(),
            v => vec![v],
        };
        for v in values {
            let text = match (v, flag.takes_value) {
                (toml::Value::Boolean(true), false) => {
                    out.push(OsString::from(format!("--{long}")));
                    continue;
                }
                (toml::Value::Boolean(false), false) => continue,
                (_, false) => bail!(
                    "config {}: `{key}` is a switch: true or false",
                    path.display()
                ),
                (toml::Value::String(s), true) => s.clone(),
                (toml::Value::Integer(n), true) => n.to_string(),
                (toml::Value::Float(x), true) => x.to_string(),
                (toml::Value::Boolean(b), true) => b.to_string(),
                (_, true) => bail!(
                    "config {}: `{key}` takes a string or a number",
                    path.display()
                ),
            };
            out.push(OsString::from(format!("--{long}={text}")));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> Vec<Flag> {
        [
            ("data-dir", true),
            ("replication", true),
            ("root-squash", false),
        ]
        .into_iter()
        .map(|(l, v)| Flag {
            long: l.into(),
            takes_value: v,
        })
        .collect()
    }

    fn run(toml: &str, argv: &[&str]) -> anyhow::Result<Vec<String>> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("server.toml");
        std::fs::write(&f, toml).unwrap();
        let mut args: Vec<OsString> = argv.iter().map(OsString::from).collect();
        args.push("--config".into());
        args.push(f.clone().into());
        let out = expand(args, &flags())?;
        Ok(out
            .into_iter()
            .map(|a| a.to_string_lossy().replace(&*f.to_string_lossy(), "F"))
            .collect())
    }

    #[test]
    fn keys_become_flags_before_the_command_line() {
        let got = run(
            "data_dir = \"/d/{id}\"\nreplication = 2\nroot-squash = true\n",
            &["madfs-server", "--replication=3"],
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "madfs-server",
                "--data-dir=/d/{id}",
                "--replication=2",
                "--root-squash",
                "--replication=3",
                "--config",
                "F"
            ]
        );
        let off = run("root_squash = false\n", &["madfs-server"]).unwrap();
        assert_eq!(off, ["madfs-server", "--config", "F"]);
        // no --config: the arguments as they are
        let plain: Vec<OsString> = vec!["madfs-server".into(), "--replication=2".into()];
        assert_eq!(expand(plain.clone(), &flags()).unwrap(), plain);
    }

    #[test]
    fn bad_files_are_refused_with_the_key() {
        let e = |t: &str| run(t, &["madfs-server"]).unwrap_err().to_string();
        assert!(e("replicaton = 2\n").contains("unknown key `replicaton`"));
        assert!(e("config = \"x\"\n").contains("unknown key `config`"));
        assert!(e("root_squash = 1\n").contains("`root_squash` is a switch"));
        assert!(e("data_dir = { a = 1 }\n").contains("takes a string or a number"));
        assert!(e("data_dir = \n").contains("server.toml"));
        assert!(expand(vec!["madfs-server".into(), "--config".into()], &flags()).is_err());
    }
}
