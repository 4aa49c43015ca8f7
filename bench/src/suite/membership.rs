//! Membership changes while the madfs target runs (`--grow-to`, `--drain`; docs/operations.md,
//! "Growing a cluster"): on the local cluster `--compare` starts, servers join one at a time
//! (`madfs-ctl add`) and then one is drained, each waited for; before and after each change
//! every server's counters are read, so the report says what moved and what each server holds.
//! The ranks check every byte they read, and find's count, as always: a change that lost or
//! doubled anything fails the run.

use anyhow::{bail, Context, Result};
use madfs_cluster::LocalCluster;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// What to change, and when.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Servers to grow to, one join at a time (none: the cluster's size).
    pub grow_to: usize,
    /// The server to drain afterwards.
    pub drain: Option<u32>,
    /// Seconds after the madfs ranks start before the first change.
    pub after: f64,
}

/// One server's counters that a change reads.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Held {
    pub entries: u64,
    pub bytes: u64,
    pub moved_bytes: u64,
    pub moved_records: u64,
    pub moved_slots: u64,
}

/// One change, measured.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    /// `add 4`, `drain 1`.
    pub what: String,
    /// Seconds from the request to the last slot switched.
    pub secs: f64,
    /// Servers before the change, holding these.
    pub before: Vec<Held>,
    /// After it, once the old owners dropped what they copied.
    pub after: Vec<Held>,
    /// Chunk bytes and records moved (the sources' counters).
    pub moved_bytes: u64,
    pub moved_records: u64,
    pub moved_slots: u64,
}

impl Change {
    /// The chunk bytes moved against the least a change must move: for a join of the
    /// (N+1)-th server, 1/(N+1) of what the N held before; for a drain, what the drained
    /// server held.
    pub fn moved_vs_minimum(&self) -> f64 {
        let total: u64 = self.before.iter().map(|h| h.bytes).sum();
        let min = if let Some(s) = self.what.strip_prefix("drain ") {
            let s: usize = s.parse().unwrap_or(0);
            self.before.get(s).map_or(0, |h| h.bytes)
        } else {
            let members = self
                .before
                .iter()
                .filter(|h| h.entries + h.bytes > 0)
                .count();
            total / (members as u64 + 1)
        };
        self.moved_bytes as f64 / min.max(1) as f64
    }

    /// One line: what changed, how long it took, what moved, and the balance afterwards.
    pub fn summary(&self) -> String {
        let (de, db) = self.spread();
        format!(
            "{:10} {:6.1} s  {:5} slots {:9} records {:9.1} MiB moved ({:.2}× the minimum); \
             then entries ±{:.1} %, bytes ±{:.1} % of the mean",
            self.what,
            self.secs,
            self.moved_slots,
            self.moved_records,
            self.moved_bytes as f64 / (1 << 20) as f64,
            self.moved_vs_minimum(),
            de * 100.0,
            db * 100.0
        )
    }

    /// The largest deviation from the mean, over the servers holding anything afterwards (a
    /// drained one keeps a block of zeros per checksum record: left out), of entries and of
    /// bytes (fractions).
    pub fn spread(&self) -> (f64, f64) {
        let drained: Option<usize> = self
            .what
            .strip_prefix("drain ")
            .and_then(|s| s.parse().ok());
        let members: Vec<&Held> = self
            .after
            .iter()
            .enumerate()
            .filter(|(i, h)| h.entries + h.bytes > 0 && Some(*i) != drained)
            .map(|(_, h)| h)
            .collect();
        let dev = |f: &dyn Fn(&Held) -> u64| {
            let mean = members.iter().map(|h| f(h) as f64).sum::<f64>() / members.len() as f64;
            members
                .iter()
                .map(|h| (f(h) as f64 - mean).abs() / mean.max(1.0))
                .fold(0.0, f64::max)
        };
        (dev(&|h| h.entries), dev(&|h| h.bytes))
    }
}

/// Every server's counters (ids `0..n`).
fn held(cl: &LocalCluster, n: usize) -> Result<Vec<Held>> {
    held_by(cl, &(0..n).collect::<Vec<_>>())
}

/// The counters of servers `ids` (in that order).
pub(crate) fn held_by(cl: &LocalCluster, ids: &[usize]) -> Result<Vec<Held>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let login = madfs_control::Login::for_cluster(&cl.cluster_file())?;
    rt.block_on(async {
        let mut out = Vec::with_capacity(ids.len());
        for &i in ids {
            let c = madfs_control::connect(cl.entry(i).control, &login).await?;
            let s = c
                .stats(madfs_control::context(30))
                .await?
                .map_err(anyhow::Error::msg)?;
            out.push(Held {
                entries: s.held_entries,
                bytes: s.held_chunk_bytes,
                moved_bytes: s.moved_bytes,
                moved_records: s.moved_records,
                moved_slots: s.moved_slots,
            });
        }
        Ok(out)
    })
}

/// Runs `plan` on `cl` while the ranks run (`stop`: they ended, no change is begun any
/// more); the changes measured.
pub fn run(cl: &mut LocalCluster, plan: &Plan, stop: &AtomicBool) -> Result<Vec<Change>> {
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < plan.after {
        if stop.load(Relaxed) {
            return Ok(vec![]);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut steps: Vec<String> = (cl.server_count()..plan.grow_to)
        .map(|i| format!("add {i}"))
        .collect();
    steps.extend(plan.drain.map(|s| format!("drain {s}")));
    let mut changes = vec![];
    for what in steps {
        if stop.load(Relaxed) {
            eprintln!("madfs-bench: the run ended before `{what}`");
            break;
        }
        let joining = what.starts_with("add ");
        if joining {
            cl.start_joining().context("starting a server to join")?;
        }
        let n = cl.server_count();
        // (a server that joins holds nothing yet)
        let before = held(cl, n)?;
        let t = Instant::now();
        let mut args: Vec<&str> = what.split(' ').collect();
        args.extend(["--wait", "900"]);
        let (ok, out) = cl.ctl(&args);
        if !ok {
            bail!("madfs-ctl {what}: {out}");
        }
        let secs = t.elapsed().as_secs_f64();
        // the old owners drop what they copied 2 s after each switch
        std::thread::sleep(Duration::from_secs(3));
        let after = held(cl, n)?;
        let delta = |f: fn(&Held) -> u64| -> u64 {
            after.iter().map(f).sum::<u64>() - before.iter().map(f).sum::<u64>()
        };
        let c = Change {
            what: what.clone(),
            secs,
            moved_bytes: delta(|h| h.moved_bytes),
            moved_records: delta(|h| h.moved_records),
            moved_slots: delta(|h| h.moved_slots),
            before,
            after,
        };
        eprintln!("madfs-bench: {}", c.summary());
        changes.push(c);
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(entries: u64, bytes: u64) -> Held {
        Held {
            entries,
            bytes,
            ..Held::default()
        }
    }

    #[test]
    fn minimum_and_spread() {
        let c = Change {
            what: "add 3".into(),
            secs: 1.0,
            before: vec![h(30, 300), h(30, 300), h(30, 300)],
            after: vec![h(22, 225), h(23, 225), h(22, 225), h(23, 225)],
            moved_bytes: 225,
            moved_records: 23,
            moved_slots: 1024,
        };
        assert!((c.moved_vs_minimum() - 1.0).abs() < 1e-9);
        let (de, db) = c.spread();
        assert!(de < 0.03 && db == 0.0, "{de} {db}");
        let d = Change {
            what: "drain 1".into(),
            before: vec![h(1, 100), h(1, 50), h(1, 100)],
            moved_bytes: 50,
            ..c
        };
        assert!((d.moved_vs_minimum() - 1.0).abs() < 1e-9);
        let e = Change {
            after: vec![h(40, 400), h(0, 8), h(41, 400)],
            ..d
        };
        let (de, db) = e.spread();
        assert!(de < 0.02 && db == 0.0, "{de} {db}");
    }
}
