//! The reports' plots (standalone SVG line and bar charts) and the training report: `report.md`
//! with the per-step metrics and plots of reward and loss.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

pub(crate) fn series(rows: &[Value], key: &str) -> Vec<(f64, f64)> {
    rows.iter()
        .filter_map(|r| Some((r["step"].as_f64()?, r[key].as_f64()?)))
        .collect()
}

/// A line plot of `points` as a standalone SVG.
pub(crate) fn svg(title: &str, points: &[(f64, f64)]) -> String {
    let (w, h, pad) = (480.0, 240.0, 36.0);
    let (x0, x1) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let sx = |x: f64| pad + (x - x0) / (x1 - x0).max(1e-12) * (w - 2.0 * pad);
    let sy = |y: f64| h - pad - (y - y0) / (y1 - y0).max(1e-12) * (h - 2.0 * pad);
    let path: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{pad}\" y=\"16\">{title}</text>\n\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#888\"/>\n\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"#888\"/>\n\
         <text x=\"2\" y=\"{pad}\">{y1:.3}</text><text x=\"2\" y=\"{b}\">{y0:.3}</text>\n\
         <text x=\"{pad}\" y=\"{lb}\">step {x0}</text><text x=\"{rl}\" y=\"{lb}\">step {x1}</text>\n\
         <polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>\n</svg>\n",
        path.join(" "),
        b = h - pad,
        r = w - pad,
        lb = h - 8.0,
        rl = w - pad - 40.0,
    )
}

/// A bar chart as a standalone SVG: one group per label, one bar per series in each group
/// (values ≥ 0), with a legend.
pub(crate) fn bars_svg(title: &str, series: &[&str], groups: &[(String, Vec<f64>)]) -> String {
    const COLOURS: [&str; 4] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
    let (h, pad, bar) = (240.0, 36.0, 22.0);
    let group_w = bar * series.len() as f64 + 18.0;
    let w = (2.0 * pad + group_w * groups.len() as f64).max(320.0);
    let top = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0_f64, f64::max)
        .max(1e-12);
    let base = h - pad;
    let mut body = String::new();
    for (g, (label, values)) in groups.iter().enumerate() {
        let x0 = pad + 9.0 + g as f64 * group_w;
        for (i, v) in values.iter().enumerate() {
            let bh = v.max(0.0) / top * (h - 2.0 * pad - 14.0);
            let _ = writeln!(
                body,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{bar}\" height=\"{bh:.1}\" fill=\"{}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\">{v:.2}</text>",
                x0 + i as f64 * bar,
                base - bh,
                COLOURS[i % COLOURS.len()],
                x0 + i as f64 * bar,
                base - bh - 3.0,
            );
        }
        let _ = writeln!(
            body,
            "<text x=\"{x0:.1}\" y=\"{:.1}\">{label}</text>",
            h - 20.0
        );
    }
    for (i, name) in series.iter().enumerate() {
        let x = w - pad - 90.0;
        let y = 14.0 + 14.0 * i as f64;
        let _ = writeln!(
            body,
            "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{y}\">{name}</text>",
            y - 9.0,
            COLOURS[i % COLOURS.len()],
            x + 14.0
        );
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{pad}\" y=\"16\">{title}</text>\n\
         <line x1=\"{pad}\" y1=\"{base}\" x2=\"{r}\" y2=\"{base}\" stroke=\"#888\"/>\n{body}</svg>\n",
        r = w - pad,
    )
}

/// Writes `report.md`, `reward.svg` and `loss.svg` into `out` for the metrics rows of this run.
pub(crate) fn write_report(out: &Path, name: &str, rows: &[Value]) -> anyhow::Result<()> {
    let mut md = format!("# Training report: {name}\n\n");
    if rows.is_empty() {
        md.push_str("No step ran in this invocation.\n");
    } else {
        for (key, file) in [("reward", "reward.svg"), ("loss", "loss.svg")] {
            std::fs::write(out.join(file), svg(key, &series(rows, key)))?;
            let _ = writeln!(md, "![{key}]({file})\n");
        }
        let cols = [
            "reward",
            "reward_std",
            "frac_reward_zero_std",
            "loss",
            "grad_norm",
            "learning_rate",
            "clip_ratio/region_mean",
            "completions/mean_length",
            "tokens_per_second",
        ];
        let _ = writeln!(md, "| step | {} |", cols.join(" | "));
        let _ = writeln!(md, "|---|{}", "---|".repeat(cols.len()));
        for r in rows {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| r[*c].as_f64().map_or("-".to_owned(), |v| format!("{v:.4}")))
                .collect();
            let _ = writeln!(md, "| {} | {} |", r["step"], cells.join(" | "));
        }
    }
    std::fs::write(hr_files::RunDir::new(out).report(), md)?;
    Ok(())
}
