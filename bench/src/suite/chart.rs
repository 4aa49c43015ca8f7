//! The PNG chart: bandwidth phases (GiB/s) and metadata phases (kIOPS), one bar per target,
//! log scale. Text is drawn with a system TrueType font (DejaVu Sans, Debian's
//! `fonts-dejavu-core`).

use super::{Params, TargetResult};
use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use std::path::Path;

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

const BW: &[(&str, &str)] = &[
    ("ior-easy-write", "easy-wr"),
    ("ior-easy-read", "easy-rd"),
    ("ior-hard-write", "hard-wr"),
    ("ior-hard-read", "hard-rd"),
    ("ior-rand-4k-write", "rnd4k-wr"),
    ("ior-rand-4k-read", "rnd4k-rd"),
];
const MD: &[(&str, &str)] = &[
    ("mdtest-easy-write", "easy-wr"),
    ("mdtest-easy-stat", "easy-st"),
    ("mdtest-easy-delete", "easy-del"),
    ("mdtest-hard-write", "hard-wr"),
    ("mdtest-hard-stat", "hard-st"),
    ("mdtest-hard-read", "hard-rd"),
    ("mdtest-hard-delete", "hard-del"),
    ("find", "find"),
];

fn register_font() -> Result<()> {
    let path = FONTS
        .iter()
        .find(|p| Path::new(p).exists())
        .context("no DejaVu Sans font (apt install fonts-dejavu-core)")?;
    let bytes: &'static [u8] = Box::leak(std::fs::read(path)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{path}: not a usable font"))
}

/// Draws `results` into a PNG file at `path`.
pub fn draw(p: &Params, results: &[TargetResult], path: &Path) -> Result<()> {
    register_font()?;
    let (w, h) = (1400u32, 620u32);
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let score = |r: &TargetResult| r.score.map_or("-".to_string(), |s| format!("{s:.2}"));
        let title = results
            .iter()
            .map(|r| format!("{} score {}", r.target.label, score(r)))
            .collect::<Vec<_>>()
            .join("   ");
        let root = root
            .titled(
                &format!(
                    "madfs-bench io500 — {} ranks, stonewall {} s — {title}",
                    p.ranks, p.stonewall
                ),
                ("sans-serif", 22),
            )
            .map_err(|e| anyhow!("{e}"))?;
        let panels = root.split_evenly((1, 2));
        for (area, names, unit) in [(&panels[0], BW, "GiB/s"), (&panels[1], MD, "kIOPS")] {
            panel(area, results, names, unit).map_err(|e| anyhow!("{e}"))?;
        }
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()?.write_image_data(&buf)?;
    Ok(())
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn panel(
    area: &Area<'_>,
    results: &[TargetResult],
    names: &[(&str, &str)],
    unit: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let value = |r: &TargetResult, n: &str| {
        r.phases
            .iter()
            .find(|x| x.name == n)
            .map(|x| x.value)
            .filter(|v| *v > 0.0 && v.is_finite())
    };
    let all: Vec<f64> = results
        .iter()
        .flat_map(|r| names.iter().filter_map(move |(n, _)| value(r, n)))
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).min(1.0) / 2.0;
    let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 4.0) * 2.0;
    let slots = results.len() as i32 + 1;
    let n = names.len() as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(unit, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0..n * slots, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels((n * slots + 1) as usize)
        .x_label_formatter(&|x| {
            if x % slots == 0 && *x / slots < n {
                names[(*x / slots) as usize].1.to_string()
            } else {
                String::new()
            }
        })
        .y_desc(unit)
        .label_style(("sans-serif", 13))
        .draw()?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    for (ti, r) in results.iter().enumerate() {
        let c = colors[ti % colors.len()];
        chart
            .draw_series(names.iter().enumerate().filter_map(|(i, (name, _))| {
                let v = value(r, name)?;
                let x = i as i32 * slots + ti as i32;
                Some(Rectangle::new([(x, lo), (x + 1, v)], c.filled()))
            }))?
            .label(r.target.label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 14))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;
    Ok(())
}
