//! The results: a side-by-side table with ratios, JSON, and a PNG chart.

use super::{chart, Params, TargetResult, PHASES};
use anyhow::{Context, Result};
use std::path::Path;

fn fmt(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
        None => "-".into(),
    }
}

/// Prints the table (and writes JSON and the chart when asked).
pub fn print(
    p: &Params,
    results: &[TargetResult],
    json: Option<&Path>,
    png: Option<&Path>,
) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "madfs-bench io500: {} ranks on {} cores, stonewall {} s; ior-easy {} KiB transfers \
         (≤ {} MiB/rank), ior-hard {} B records, mdtest-hard {} B files, ior-rand-4k {} MiB/rank",
        p.ranks,
        cores,
        p.stonewall,
        p.easy_xfer >> 10,
        p.easy_max >> 20,
        p.hard_record,
        p.mdhard_bytes,
        p.rand_size >> 20
    );
    for r in results {
        println!(
            "  {}: {} in {} (find: {})",
            r.target.label, r.target.access, r.target.dir, r.target.find
        );
    }
    let mut head = format!("{:22}", "phase");
    for r in results {
        head += &format!("{:>14}", r.target.label);
    }
    if results.len() == 2 {
        head += &format!("{:>10}", "ratio");
    }
    head += "  unit";
    println!("{head}");
    fn value<'a>(r: &'a TargetResult, name: &str) -> Option<&'a super::PhaseResult> {
        r.phases.iter().find(|x| x.name == name)
    }
    for (name, unit) in PHASES {
        if !results.iter().any(|r| value(r, name).is_some()) {
            continue;
        }
        let mut line = format!("{name:22}");
        for r in results {
            line += &format!("{:>14}", fmt(value(r, name).map(|x| x.value)));
        }
        if let [a, b] = results {
            line += &match (value(a, name), value(b, name)) {
                (Some(x), Some(y)) if y.value > 0.0 => format!("{:>9.2}×", x.value / y.value),
                _ => format!("{:>10}", "-"),
            };
        }
        line += &format!("  {}", unit.label());
        println!("{line}");
    }
    for (what, f, unit) in [
        (
            "[BW]",
            (|r: &TargetResult| r.bw) as fn(&TargetResult) -> Option<f64>,
            "GiB/s",
        ),
        ("[MD]", |r: &TargetResult| r.md, "kIOPS"),
        ("[SCORE]", |r: &TargetResult| r.score, ""),
    ] {
        if results.iter().all(|r| f(r).is_none()) {
            continue;
        }
        let mut line = format!("{what:22}");
        for r in results {
            line += &format!("{:>14}", fmt(f(r)));
        }
        if let [a, b] = results {
            line += &match (f(a), f(b)) {
                (Some(x), Some(y)) if y > 0.0 => format!("{:>9.2}×", x / y),
                _ => format!("{:>10}", "-"),
            };
        }
        line += &format!("  {unit}");
        println!("{line}");
    }
    if let Some(path) = json {
        let doc = serde_json::json!({ "params": p, "cores": cores, "targets": results });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("json: {}", path.display());
    }
    if let Some(path) = png {
        match chart::draw(p, results, path) {
            Ok(()) => println!("chart: {}", path.display()),
            Err(e) => eprintln!("madfs-bench: no chart: {e:#}"),
        }
    }
    Ok(())
}
