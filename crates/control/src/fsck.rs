//! `fsck`: what each server reports of its chunk files, and the cluster-wide verdict
//! (orphans are decided only with every server's report: an entry on one server may own a
//! chunk file on another). Used online (`madfs fsck`, `madfs-ctl fsck`: the control port) and
//! offline (`madfs-server fsck DATA_DIR…` on stopped servers' data directories).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// A damaged block of a chunk file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The file id.
    pub id: u64,
    /// Byte position of the 4 KiB block in the file's chunk file on that server.
    pub offset: u64,
    /// `missing` (written, not there: lost or cut), `corrupt` (does not match its
    /// checksum), `unrecorded` (data where no write was recorded).
    pub what: String,
}

/// One server's scan.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Server index.
    pub server: u32,
    /// Number of servers of its cluster.
    pub servers: u32,
    /// Whether the cluster keeps checksums (else damage cannot be seen).
    pub checksums: bool,
    /// File ids with a chunk file (or record file) here, with their bytes on disk.
    pub held: Vec<(u64, u64)>,
    /// File ids this server's entries (and pending renames) name.
    pub referenced: Vec<u64>,
    /// Damaged blocks found.
    pub damaged: Vec<Damage>,
}

/// The cluster's verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Servers reporting, of how many.
    pub servers: (usize, u32),
    /// Chunk files seen.
    pub chunk_files: usize,
    /// Entries naming a file id.
    pub entries: usize,
    /// Chunk files no entry references, per server: (server, id, bytes). Empty unless
    /// every server reported.
    pub orphans: Vec<(u32, u64, u64)>,
    /// Damaged blocks, with their server.
    pub damaged: Vec<(u32, Damage)>,
    /// Whether checksums were checked.
    pub checksums: bool,
}

impl Verdict {
    /// Merges every server's report. `also_referenced`: ids seen referenced by a second
    /// scan (online repair: a file renamed from one server to another between scans is not
    /// taken for an orphan).
    pub fn of(reports: &[FsckReport], also_referenced: &BTreeSet<u64>) -> Verdict {
        let servers = reports.first().map_or(0, |r| r.servers);
        let mut referenced: BTreeSet<u64> = also_referenced.clone();
        let mut entries = 0;
        for r in reports {
            entries += r.referenced.len();
            referenced.extend(r.referenced.iter().copied());
        }
        let mut seen: BTreeSet<u32> = BTreeSet::new();
        for r in reports {
            seen.insert(r.server);
        }
        let complete = servers > 0 && (0..servers).all(|s| seen.contains(&s));
        let mut v = Verdict {
            servers: (seen.len(), servers),
            checksums: reports.iter().all(|r| r.checksums),
            entries,
            ..Verdict::default()
        };
        for r in reports {
            v.chunk_files += r.held.len();
            if complete {
                for (id, bytes) in &r.held {
                    if !referenced.contains(id) {
                        v.orphans.push((r.server, *id, *bytes));
                    }
                }
            }
            for d in &r.damaged {
                v.damaged.push((r.server, d.clone()));
            }
        }
        v
    }

    /// Did every server report (orphans could be decided)?
    pub fn complete(&self) -> bool {
        self.servers.0 as u32 == self.servers.1
    }

    /// Anything wrong?
    pub fn clean(&self) -> bool {
        self.orphans.is_empty() && self.damaged.is_empty()
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} of {} servers, {} chunk files, {} entries with a file id, checksums {}",
            self.servers.0,
            self.servers.1,
            self.chunk_files,
            self.entries,
            if self.checksums {
                "checked"
            } else {
                "off (damage cannot be seen)"
            }
        )?;
        // runs of neighbouring blocks of one file and kind as one line
        let mut i = 0;
        while i < self.damaged.len() {
            let (s, d) = &self.damaged[i];
            let mut end = d.offset + 4096;
            let mut j = i + 1;
            while let Some((s2, d2)) = self.damaged.get(j) {
                if s2 != s || d2.id != d.id || d2.what != d.what || d2.offset != end {
                    break;
                }
                end += 4096;
                j += 1;
            }
            writeln!(
                f,
                "damaged: server {s} file {:016x} chunk-file bytes {}..{end} ({} blocks): {}",
                d.id,
                d.offset,
                j - i,
                d.what
            )?;
            i = j;
        }
        for (s, id, bytes) in &self.orphans {
            writeln!(
                f,
                "orphan: server {s} file {id:016x}: {bytes} bytes no entry references"
            )?;
        }
        if !self.complete() {
            writeln!(
                f,
                "orphans not decided: {} of {} servers reported",
                self.servers.0, self.servers.1
            )?;
        }
        let bytes: u64 = self.orphans.iter().map(|o| o.2).sum();
        write!(
            f,
            "{} damaged blocks, {} orphan chunk files ({bytes} bytes)",
            self.damaged.len(),
            self.orphans.len()
        )
    }
}

/// Online fsck of the cluster of `cluster_file` through every server's control port. With
/// `repair`, the orphans are scanned for a second time (a file renamed from one server to
/// another meanwhile is referenced in one of the scans) and those of both scans removed.
/// Returns the verdict and the bytes given back.
pub async fn cluster(
    cluster_file: &std::path::Path,
    repair: bool,
) -> anyhow::Result<(Verdict, u64)> {
    let file = madfs_identity::cluster_file::read_partial(cluster_file)?;
    let login = crate::Login::for_cluster(cluster_file)?;
    let scan = || async {
        let mut reports = Vec::new();
        for e in &file.servers {
            let c = crate::connect(e.control, &login).await?;
            let r = c
                .fsck(crate::context(3600))
                .await?
                .map_err(|m| anyhow::anyhow!("fsck on server {} ({}): {m}", e.id, e.control))?;
            reports.push(r);
        }
        anyhow::Ok(reports)
    };
    let first = scan().await?;
    let v = Verdict::of(&first, &BTreeSet::new());
    if !repair || v.orphans.is_empty() {
        return Ok((v, 0));
    }
    if !v.complete() {
        anyhow::bail!(
            "repair needs every server's report: {} of {}",
            v.servers.0,
            v.servers.1
        );
    }
    let again: BTreeSet<u64> = scan()
        .await?
        .into_iter()
        .flat_map(|r| r.referenced)
        .collect();
    let v = Verdict::of(&first, &again);
    let mut freed = 0;
    for e in &file.servers {
        let ids: Vec<u64> = v
            .orphans
            .iter()
            .filter(|o| o.0 == e.id)
            .map(|o| o.1)
            .collect();
        if ids.is_empty() {
            continue;
        }
        let c = crate::connect(e.control, &login).await?;
        freed += c
            .fsck_remove(crate::context(600), ids)
            .await?
            .map_err(|m| anyhow::anyhow!("fsck repair on server {} ({}): {m}", e.id, e.control))?;
    }
    Ok((v, freed))
}

/// [`cluster`] for a caller without a runtime (the `madfs` command).
pub fn cluster_blocking(
    cluster_file: &std::path::Path,
    repair: bool,
) -> anyhow::Result<(Verdict, u64)> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(cluster(cluster_file, repair))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(server: u32, held: &[u64], referenced: &[u64]) -> FsckReport {
        FsckReport {
            server,
            servers: 2,
            checksums: true,
            held: held.iter().map(|i| (*i, 4096)).collect(),
            referenced: referenced.to_vec(),
            damaged: vec![],
        }
    }

    #[test]
    fn orphans_need_every_server_and_any_reference() {
        // file 1's entry on server 0, chunks on both; 2's entry on server 1; 3 nobody's
        let a = report(0, &[1, 3], &[1]);
        let b = report(1, &[1, 2], &[2]);
        let v = Verdict::of(&[a.clone(), b], &BTreeSet::new());
        assert!(v.complete());
        assert_eq!(v.orphans, vec![(0, 3, 4096)]);
        let v = Verdict::of(std::slice::from_ref(&a), &BTreeSet::new());
        assert!(!v.complete() && v.orphans.is_empty());
        assert!(v.to_string().contains("orphans not decided"));
        let v = Verdict::of(&[a, report(1, &[], &[])], &BTreeSet::from([3]));
        assert!(v.orphans.is_empty(), "referenced in the second scan");
    }
}
