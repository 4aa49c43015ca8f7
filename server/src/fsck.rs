//! fsck of a server's data: which file ids have chunk files here, which ids this server's
//! entries name, and which blocks are damaged (every block against its checksum). Online
//! through the control port ([`crate::control`]), offline on stopped servers' data
//! directories (`madfs-server fsck DATA_DIR…`); the cluster-wide verdict (orphans need every
//! server's report) is `madfs_control::Verdict`.

use madfs_control::{Damage, FsckReport, Verdict};
use madfs_proto::FsResult;
use madfs_store::chunks::FsChunks;
use madfs_store::MetadataStore;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Scans server `server`'s chunk files first, then its entries (a file made meanwhile has
/// its entry before its first chunk, so it is never taken for an orphan).
pub fn scan(
    server: u32,
    servers: u32,
    checksums: bool,
    meta: &dyn MetadataStore,
    chunks: &FsChunks,
) -> FsResult<FsckReport> {
    let held = chunks.ids()?;
    let mut damaged = Vec::new();
    for (id, _) in &held {
        for (offset, what) in chunks.check(*id)? {
            tracing::error!("fsck: file {id:016x}: chunk-file bytes at {offset}: {what}");
            damaged.push(Damage {
                id: *id,
                offset,
                what: what.into(),
            });
        }
    }
    let mut referenced = BTreeSet::new();
    meta.scan_subtree("/", &[], &mut |_, _, a| {
        if !a.is_dir() {
            referenced.insert(a.id);
        }
        true
    })?;
    for i in meta.intents()? {
        referenced.insert(i.attr.id);
    }
    // open-unlinked files, and files with several names (kept by id)
    for (id, _) in meta.orphans()? {
        referenced.insert(id);
    }
    Ok(FsckReport {
        server,
        servers,
        checksums,
        held,
        referenced: referenced.into_iter().collect(),
        damaged,
    })
}

/// Removes the chunk files of `ids` that no entry of this server names (the caller decided
/// they are orphans with every server's report); returns the bytes given back.
pub fn remove(meta: &dyn MetadataStore, chunks: &FsChunks, ids: &[u64]) -> FsResult<u64> {
    let want: BTreeSet<u64> = ids.iter().copied().collect();
    let mut named = BTreeSet::new();
    meta.scan_subtree("/", &[], &mut |_, _, a| {
        if want.contains(&a.id) {
            named.insert(a.id);
        }
        true
    })?;
    for i in meta.intents()? {
        named.insert(i.attr.id);
    }
    let mut freed = 0;
    for id in want.difference(&named) {
        tracing::info!("fsck: removing orphan chunk file of file {id:016x}");
        freed += chunks.remove(*id)?;
    }
    Ok(freed)
}

/// `madfs-server fsck [--repair] DATA_DIR…`: the data directories of stopped servers (all of
/// a cluster's to decide orphans). Prints the verdict; returns whether all was clean (or
/// repaired where it could be).
pub fn offline(dirs: &[PathBuf], repair: bool) -> anyhow::Result<bool> {
    let mut reports = Vec::new();
    let mut opened = Vec::new();
    for d in dirs {
        let r = crate::identity::read_data_dir(d)?;
        let meta = madfs_store::rocks::RocksMeta::open(&d.join("db")).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e:#} (is its server still running? fsck offline needs it stopped)",
                d.display()
            )
        })?;
        let checksums = r.cluster.checksums == madfs_identity::Checksums::Crc32c;
        let chunks = FsChunks::open(&d.join("data"), checksums)?;
        reports.push(scan(
            r.server,
            r.cluster.servers,
            checksums,
            &meta,
            &chunks,
        )?);
        opened.push((r.server, meta, chunks));
    }
    if reports.windows(2).any(|w| w[0].servers != w[1].servers) {
        anyhow::bail!("the data directories belong to clusters of different sizes");
    }
    let v = Verdict::of(&reports, &BTreeSet::new());
    println!("{v}");
    if repair && !v.orphans.is_empty() {
        let mut freed = 0;
        for (server, meta, chunks) in &opened {
            let ids: Vec<u64> = v
                .orphans
                .iter()
                .filter(|o| o.0 == *server)
                .map(|o| o.1)
                .collect();
            freed += remove(meta, chunks, &ids)?;
        }
        println!(
            "repaired: {} orphan chunk files removed, {freed} bytes given back",
            v.orphans.len()
        );
        return Ok(v.damaged.is_empty());
    }
    Ok(v.clean())
}
