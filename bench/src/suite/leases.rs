//! What the client cache did during one phase (madfs targets): the ranks' own counters
//! ([`own`]: hits, misses, entries called back), and what the servers saw (rank 0): the
//! lookups that reached them (`look`; `look_dir`, statahead pages) — every other stat was
//! answered by a rank's cache — and the changes that waited for callbacks, with their
//! waits' p50 and p99 (the servers' `revoke_waits`, per power of two of microseconds).

use std::path::Path;

/// The client cache counters (hits, misses, entries called back) of this process when it
/// runs under libmadfs.so and `dir` is a madfs directory (`MADFS_IOC_CACHE_COUNTS`), else
/// `None`.
pub fn own(dir: &str) -> Option<[u64; 3]> {
    use madfs_proto::ioctl::{CacheCounts, MADFS_IOC_CACHE_COUNTS};
    let path = std::ffi::CString::new(dir).ok()?;
    // SAFETY: open(2) of a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    if fd < 0 {
        return None;
    }
    let mut c = CacheCounts::default();
    // SAFETY: the ioctl fills in a CacheCounts (anything but madfs answers ENOTTY).
    let r = unsafe { libc::ioctl(fd, MADFS_IOC_CACHE_COUNTS as _, &mut c as *mut CacheCounts) };
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(fd) };
    (r == 0).then_some([c.hits, c.misses, c.revoked])
}

/// What the ranks' caches did in a phase (each rank's counters after less before, summed).
pub fn own_note(per_rank: &[Option<[u64; 3]>]) -> Option<String> {
    let mut sum = [0u64; 3];
    for c in per_rank {
        let c = (*c)?;
        for (s, v) in sum.iter_mut().zip(c) {
            *s += v;
        }
    }
    Some(format!(
        "cache hits {}, misses {}, called back {}",
        sum[0], sum[1], sum[2]
    ))
}

/// Counters of every server of a cluster at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    looks: u64,
    pages: u64,
    /// Changes that waited, by log2 of the microseconds waited (summed over servers).
    waits: Vec<u64>,
}

/// The counters of every server of the cluster of `cluster_file` (`None`: one did not
/// answer; the phase's note then says nothing of the cache).
pub fn snapshot(cluster_file: &Path) -> Option<Snapshot> {
    let (_, servers) = madfs_rpc::cluster_file::read(cluster_file).ok()?;
    let login = madfs_control::Login::for_cluster(cluster_file).ok()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let mut s = Snapshot::default();
        for e in servers {
            let c = madfs_control::connect(e.control, &login).await.ok()?;
            let st = c.stats(madfs_control::context(5)).await.ok()?.ok()?;
            s.looks += st.requests.get("look").copied().unwrap_or(0);
            s.pages += st.requests.get("look_dir").copied().unwrap_or(0);
            if s.waits.len() < st.revoke_waits.len() {
                s.waits.resize(st.revoke_waits.len(), 0);
            }
            for (w, n) in s.waits.iter_mut().zip(&st.revoke_waits) {
                *w += n;
            }
        }
        Some(s)
    })
}

/// What happened between `before` and `after` in a phase of `ops` operations: lookups
/// that went to the servers, statahead pages fetched, changes that waited for callbacks
/// and how long (at most 2^k µs, for the bucket that holds the p50 and the p99).
pub fn note(before: &Snapshot, after: &Snapshot, ops: u64) -> String {
    let looks = after.looks.saturating_sub(before.looks);
    let pages = after.pages.saturating_sub(before.pages);
    let waits: Vec<u64> = after
        .waits
        .iter()
        .enumerate()
        .map(|(k, n)| n.saturating_sub(before.waits.get(k).copied().unwrap_or(0)))
        .collect();
    let waited: u64 = waits.iter().sum();
    let mut s =
        format!("lookups sent {looks} of {ops} ops, pages {pages}, changes waited {waited}");
    if waited > 0 {
        let at = |q: f64| {
            let want = ((waited as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (k, n) in waits.iter().enumerate() {
                seen += n;
                if seen >= want {
                    return 1u64 << k;
                }
            }
            1u64 << waits.len()
        };
        s.push_str(&format!(" (p50 ≤ {} µs, p99 ≤ {} µs)", at(0.5), at(0.99)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranks_cache_counts_are_summed_when_every_rank_has_them() {
        assert_eq!(
            own_note(&[Some([5, 1, 0]), Some([7, 2, 3])]).as_deref(),
            Some("cache hits 12, misses 3, called back 3")
        );
        assert_eq!(own_note(&[Some([5, 1, 0]), None]), None);
        // (a local directory answers ENOTTY)
        assert_eq!(own("/tmp"), None);
    }

    #[test]
    fn a_phase_note_counts_what_the_servers_saw() {
        let before = Snapshot {
            looks: 10,
            pages: 1,
            waits: vec![0, 5, 0],
        };
        let mut waits = vec![0; 12];
        waits[1] = 5;
        waits[4] = 98;
        waits[10] = 2;
        let after = Snapshot {
            looks: 30,
            pages: 3,
            waits,
        };
        assert_eq!(
            note(&before, &after, 1000),
            "lookups sent 20 of 1000 ops, pages 2, changes waited 100 (p50 ≤ 16 µs, p99 ≤ 1024 µs)"
        );
        assert_eq!(
            note(&before, &before, 7),
            "lookups sent 0 of 7 ops, pages 0, changes waited 0"
        );
    }
}
