//! The identity of a madfs cluster: one record that every server keeps in its data directory
//! and every client reads from the cluster file, so that nothing is served by a server or
//! read by a client that belongs to another cluster, another size or another data format.
//!
//! ```text
//! cluster = { id = "5f0c…", format = 3, servers = 3, chunk_size = 752128, inline_max = 65536, auth = "key", owner = "1000:1000", replication = 1, checksums = "crc32c" }
//! ```
//! - `id`: random, made when the cluster's first server starts on an empty data directory;
//!   kept in every data directory (`identity.toml`) and in the cluster file's first line, and
//!   sent in each server's welcome: a client refuses a server of another cluster (a port
//!   reused by another cluster's server after a restart, an old cluster file).
//! - `format`: the on-disk format of a data directory ([`FORMAT_VERSION`]); a server refuses
//!   a data directory of another format (docs/operations.md, "Upgrades").
//! - `servers`: how many servers the cluster was made with; the initial slot layout
//!   (`madfs_placement::Layout::initial`) divides the slots among them, so servers and
//!   clients refuse to run with another count until membership changes exist (issue 53).
//! - `chunk_size`, `inline_max`: the default stripe of new files and the bytes of chunk 0
//!   kept in RocksDB; fixed for the life of the data.
//! - `auth`, `owner`, `replication`: the security and redundancy settings of the cluster.
//! - `checksums`: `crc32c` (a new cluster's default) or `none`: whether chunk files carry
//!   per-block checksums (a record absent in data made before them means `none`).
//!
//! The record is parsed with the `toml` crate: a line of the cluster file is a TOML inline
//! table, a data directory's `identity.toml` a TOML document.

pub mod cluster_file;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Format of a data directory (RocksDB keys and values, chunk files) written by this build.
pub const FORMAT_VERSION: u32 = 3;

/// A cluster's random 64-bit id; written as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterId(pub u64);

impl ClusterId {
    /// A fresh random id (getrandom(2)).
    pub fn random() -> std::io::Result<ClusterId> {
        madfs_auth::random().map(|b| ClusterId(u64::from_le_bytes(b)))
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for ClusterId {
    type Err = String;
    fn from_str(s: &str) -> Result<ClusterId, String> {
        if s.len() != 16 {
            return Err(format!("cluster id {s:?}: expected 16 hex digits"));
        }
        u64::from_str_radix(s, 16)
            .map(ClusterId)
            .map_err(|_| format!("cluster id {s:?}: expected 16 hex digits"))
    }
}

impl Serialize for ClusterId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClusterId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ClusterId, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How peers prove who they are (docs/security.md).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// No authentication: whoever reaches a port is served as whoever it says it is. Only
    /// with `--insecure`, and every server start says so.
    #[serde(alias = "none")]
    Insecure,
    /// A random key beside the cluster file (`<cluster>.key`, 0600): whoever proves it holds
    /// the key is served as the key's [`Owner`].
    Key,
    /// MUNGE credentials: each client process is served as the uid/gid munged vouches for.
    Munge,
}

impl fmt::Display for AuthMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthMode::Insecure => "insecure",
            AuthMode::Key => "key",
            AuthMode::Munge => "munge",
        })
    }
}

impl std::str::FromStr for AuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<AuthMode, String> {
        match s {
            "insecure" => Ok(AuthMode::Insecure),
            "key" => Ok(AuthMode::Key),
            "munge" => Ok(AuthMode::Munge),
            _ => Err(format!("auth mode {s:?}: expected key, munge or insecure")),
        }
    }
}

/// How chunk data is checked end to end (docs/architecture.md, "Checksums").
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Checksums {
    /// No checksums: what a data directory made before they existed has (no field).
    #[default]
    None,
    /// A crc32c per 4 KiB block of every chunk file, verified on every read.
    Crc32c,
}

impl fmt::Display for Checksums {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Checksums::None => "none",
            Checksums::Crc32c => "crc32c",
        })
    }
}

impl std::str::FromStr for Checksums {
    type Err = String;
    fn from_str(s: &str) -> Result<Checksums, String> {
        match s {
            "none" | "off" => Ok(Checksums::None),
            "crc32c" | "on" => Ok(Checksums::Crc32c),
            _ => Err(format!("checksums {s:?}: expected crc32c or none")),
        }
    }
}

/// The user a key-mode cluster serves (written `"uid:gid"`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

impl std::str::FromStr for Owner {
    type Err = String;
    fn from_str(s: &str) -> Result<Owner, String> {
        let bad = || format!("owner {s:?}: expected UID:GID");
        let (u, g) = s.split_once(':').ok_or_else(bad)?;
        Ok(Owner {
            uid: u.parse().map_err(|_| bad())?,
            gid: g.parse().map_err(|_| bad())?,
        })
    }
}

impl Serialize for Owner {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Owner {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Owner, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The identity record of a cluster (see the module documentation).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClusterIdentity {
    /// Random id of the cluster.
    pub id: ClusterId,
    /// Data-directory format ([`FORMAT_VERSION`] for clusters made by this build).
    pub format: u32,
    /// Number of servers (placement buckets).
    pub servers: u32,
    /// Default chunk (stripe) size of new files, bytes.
    pub chunk_size: u32,
    /// Bytes of each file's chunk 0 kept inline in RocksDB.
    pub inline_max: u32,
    /// Authentication mode.
    pub auth: AuthMode,
    /// Key mode: the user every connection that proves the key is served as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Copies of every entry and chunk.
    pub replication: u32,
    /// End-to-end checksums of chunk data (absent in records made before them: none).
    #[serde(default)]
    pub checksums: Checksums,
}

impl ClusterIdentity {
    /// A new cluster's identity with a fresh id, this build's format, no authentication
    /// (callers set [`Self::auth`] and [`Self::owner`]) and one copy of everything.
    pub fn new(servers: u32, chunk_size: u32, inline_max: u32) -> std::io::Result<Self> {
        Ok(ClusterIdentity {
            id: ClusterId::random()?,
            format: FORMAT_VERSION,
            servers,
            chunk_size,
            inline_max,
            auth: AuthMode::Insecure,
            owner: None,
            replication: 1,
            checksums: Checksums::Crc32c,
        })
    }

    /// The record as one line of a cluster file (a TOML inline table).
    pub fn to_line(&self) -> String {
        let owner = match self.owner {
            Some(o) => format!(", owner = \"{o}\""),
            None => String::new(),
        };
        format!(
            "cluster = {{ id = \"{}\", format = {}, servers = {}, chunk_size = {}, inline_max = {}, auth = \"{}\"{owner}, replication = {}, checksums = \"{}\" }}",
            self.id, self.format, self.servers, self.chunk_size, self.inline_max, self.auth,
            self.replication, self.checksums
        )
    }

    /// Parses a line written by [`Self::to_line`] (any TOML spelling of `cluster = {…}`).
    pub fn from_line(line: &str) -> Result<Self, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Line {
            cluster: ClusterIdentity,
        }
        toml::from_str::<Line>(line)
            .map(|l| l.cluster)
            .map_err(|e| format!("cluster identity {line:?}: {}", e.message()))
    }

    /// Is this an identity line of a cluster file?
    pub fn is_line(line: &str) -> bool {
        line.trim_start()
            .strip_prefix("cluster")
            .is_some_and(|r| r.trim_start().starts_with('='))
    }

    /// The first field in which `other` differs from `self`, as a phrase: `what (self vs
    /// other)`; `None` when they are the same record.
    pub fn difference(&self, other: &ClusterIdentity) -> Option<String> {
        let show = |o: Option<Owner>| o.map_or("none".to_string(), |o| o.to_string());
        let fields: [(&str, String, String); 9] = [
            ("cluster id", self.id.to_string(), other.id.to_string()),
            ("format", self.format.to_string(), other.format.to_string()),
            (
                "servers",
                self.servers.to_string(),
                other.servers.to_string(),
            ),
            (
                "chunk size",
                self.chunk_size.to_string(),
                other.chunk_size.to_string(),
            ),
            (
                "inline max",
                self.inline_max.to_string(),
                other.inline_max.to_string(),
            ),
            ("auth", self.auth.to_string(), other.auth.to_string()),
            ("owner", show(self.owner), show(other.owner)),
            (
                "replication",
                self.replication.to_string(),
                other.replication.to_string(),
            ),
            (
                "checksums",
                self.checksums.to_string(),
                other.checksums.to_string(),
            ),
        ];
        fields
            .into_iter()
            .find(|(_, a, b)| a != b)
            .map(|(what, a, b)| format!("{what} {a} vs {b}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClusterIdentity {
        ClusterIdentity {
            id: ClusterId(0x5f0c_0000_1234_abcd),
            format: FORMAT_VERSION,
            servers: 3,
            chunk_size: 752128,
            inline_max: 65536,
            auth: AuthMode::Insecure,
            owner: None,
            replication: 1,
            checksums: Checksums::Crc32c,
        }
    }

    #[test]
    fn line_round_trip() {
        let a = sample();
        let line = a.to_line();
        assert!(ClusterIdentity::is_line(&line));
        assert!(line.contains("id = \"5f0c00001234abcd\""), "{line}");
        assert_eq!(ClusterIdentity::from_line(&line).unwrap(), a);
        // any TOML spelling of the same table
        let spaced = "cluster={id='5f0c00001234abcd',format=3,servers=3,chunk_size=752128,inline_max=65536,auth='none',replication=1,checksums='crc32c'}";
        assert_eq!(ClusterIdentity::from_line(spaced).unwrap(), a);
        // a record made before checksums existed has none
        let old = spaced.replace(",checksums='crc32c'", "");
        let o = ClusterIdentity::from_line(&old).unwrap();
        assert_eq!(o.checksums, Checksums::None);
        assert_eq!(
            a.difference(&o).as_deref(),
            Some("checksums crc32c vs none")
        );
        let k = ClusterIdentity {
            auth: AuthMode::Key,
            owner: Some(Owner {
                uid: 1000,
                gid: 100,
            }),
            ..a
        };
        let line = k.to_line();
        assert!(
            line.contains("auth = \"key\", owner = \"1000:100\""),
            "{line}"
        );
        assert_eq!(ClusterIdentity::from_line(&line).unwrap(), k);
        assert_eq!(a.difference(&k).as_deref(), Some("auth insecure vs key"));
    }

    #[test]
    fn bad_lines_are_refused_with_a_reason() {
        let line = sample().to_line();
        for (bad, why) in [
            (
                line.replace("auth = \"insecure\"", "auth = \"magic\""),
                "magic",
            ),
            (line.replace("servers = 3, ", ""), "servers"),
            (line.replace(" }", ", colour = 1 }"), "colour"),
            (line.replace("5f0c00001234abcd", "xyz"), "16 hex digits"),
        ] {
            let e = ClusterIdentity::from_line(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(!ClusterIdentity::is_line("0 127.0.0.1:1 127.0.0.1:2"));
        assert!(!ClusterIdentity::is_line("# cluster = {}"));
    }

    #[test]
    fn difference_names_the_first_field() {
        let a = sample();
        assert_eq!(a.difference(&a), None);
        let b = ClusterIdentity {
            inline_max: 4096,
            ..a
        };
        assert_eq!(
            a.difference(&b).as_deref(),
            Some("inline max 65536 vs 4096")
        );
        let c = ClusterIdentity::new(3, 752128, 65536).unwrap();
        assert!(a.difference(&c).unwrap().starts_with("cluster id "));
        assert_ne!(c.id, ClusterIdentity::new(3, 1, 1).unwrap().id);
    }
}
