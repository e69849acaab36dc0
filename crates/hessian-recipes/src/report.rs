//! The reports' plots, drawn with plotters' SVG backend (axes with ticks and grid, a legend,
//! escaped text), and the training report: `report.md` with the per-step metrics and the
//! training plots (reward with a ±std band, KL, entropy, completion length).

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::ranged1d::BindKeyPoints as _;
use plotters::prelude::*;
use serde_json::Value;

const WIDTH: u32 = 640;
const HEIGHT: u32 = 320;
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// `(step, value)` of `key` in metrics rows that have it.
pub(crate) fn series(rows: &[Value], key: &str) -> Vec<(f64, f64)> {
    rows.iter()
        .filter_map(|r| Some((r["step"].as_f64()?, r[key].as_f64()?)))
        .collect()
}

/// One curve of a line plot, with an optional band `(x, low, high)` drawn behind it.
pub(crate) struct Curve {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) band: Vec<(f64, f64, f64)>,
}

impl Curve {
    /// The curve of `key` in metrics rows, named `name`.
    pub(crate) fn of(rows: &[Value], key: &str, name: &str) -> Self {
        Self {
            name: name.to_owned(),
            points: series(rows, key),
            band: Vec::new(),
        }
    }
}

/// The y range: from 0 when no value is negative (the honest baseline for rewards, lengths,
/// KL), else the data's range; padded so the curves do not touch the frame.
fn y_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return 0.0..1.0;
    }
    let lo = if lo >= 0.0 { 0.0 } else { lo };
    let span = (hi - lo).max(hi.abs() * 1e-3).max(1e-9);
    let lo = if lo == 0.0 { 0.0 } else { lo - 0.08 * span };
    lo..hi + 0.08 * span
}

/// A line plot of `curves` against the step, as a standalone SVG.
pub(crate) fn line_svg(title: &str, y_desc: &str, curves: &[Curve]) -> String {
    let mut svg = String::new();
    let drawn = draw_lines(&mut svg, title, y_desc, curves);
    if let Err(e) = drawn {
        tracing::warn!("plot {title}: {e}");
    }
    svg
}

fn draw_lines(
    svg: &mut String,
    title: &str,
    y_desc: &str,
    curves: &[Curve],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let xs = curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (x0, x1) = if x0 > x1 {
        (0.0, 1.0)
    } else if x0 == x1 {
        (x0 - 1.0, x1 + 1.0)
    } else {
        (x0, x1)
    };
    let ys = curves.iter().flat_map(|c| {
        c.points
            .iter()
            .map(|p| p.1)
            .chain(c.band.iter().flat_map(|b| [b.1, b.2]))
    });
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y_range(ys))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .x_labels(8)
        .y_labels(6)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.3}"))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .draw()?;
    for (i, curve) in curves.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        if !curve.band.is_empty() {
            let outline: Vec<(f64, f64)> = curve
                .band
                .iter()
                .map(|b| (b.0, b.2))
                .chain(curve.band.iter().rev().map(|b| (b.0, b.1)))
                .collect();
            chart.draw_series(std::iter::once(Polygon::new(outline, colour.mix(0.18))))?;
        }
        chart
            .draw_series(LineSeries::new(
                curve.points.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(curve.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2)));
    }
    if curves.len() > 1 || curves.iter().any(|c| !c.band.is_empty()) {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// A bar chart as a standalone SVG: one group per label, one bar per series in each group
/// (values ≥ 0, labelled), on a y axis from 0, with a legend when there are several series.
pub(crate) fn bars_svg(title: &str, series: &[&str], groups: &[(String, Vec<f64>)]) -> String {
    let mut svg = String::new();
    if let Err(e) = draw_bars(&mut svg, title, series, groups) {
        tracing::warn!("plot {title}: {e}");
    }
    svg
}

fn draw_bars(
    svg: &mut String,
    title: &str,
    series: &[&str],
    groups: &[(String, Vec<f64>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let width = WIDTH.max(120 + 36 * (series.len() * groups.len()) as u32);
    let root = SVGBackend::with_string(svg, (width, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = groups.len().max(1) as f64;
    let top = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0_f64, f64::max);
    let y_top = if top > 0.0 { top * 1.18 } else { 1.0 };
    let centres: Vec<f64> = (0..groups.len()).map(|g| g as f64 + 0.5).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d((0.0..n).with_key_points(centres), 0.0..y_top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_labels(6)
        .y_label_formatter(&|y| format!("{y:.2}"))
        .x_label_formatter(&|x| {
            let g = (x - 0.5).round();
            groups
                .get(g as usize)
                .filter(|_| g >= 0.0)
                .map_or_else(String::new, |(label, _)| label.clone())
        })
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .draw()?;
    let k = series.len().max(1) as f64;
    let bar = 0.8 / k;
    for (i, name) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let bars = groups.iter().enumerate().filter_map(|(g, (_, values))| {
            let v = values.get(i)?.max(0.0);
            let x = g as f64 + 0.1 + i as f64 * bar;
            Some(Rectangle::new([(x, 0.0), (x + bar * 0.92, v)], colour.filled()))
        });
        chart
            .draw_series(bars)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
        let labels = groups.iter().enumerate().filter_map(|(g, (_, values))| {
            let v = *values.get(i)?;
            let x = g as f64 + 0.1 + i as f64 * bar;
            Some(Text::new(
                format!("{v:.2}"),
                (x, v.max(0.0) + y_top * 0.02),
                ("sans-serif", 11),
            ))
        });
        chart.draw_series(labels)?;
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// The training plots of metrics rows: `(file name, title, svg)` for reward (mean with a ±std
/// band), KL to the reference, entropy and completion length.
pub(crate) fn training_plots(rows: &[Value]) -> Vec<(&'static str, &'static str, String)> {
    let mut reward = Curve::of(rows, "reward", "mean reward");
    reward.band = rows
        .iter()
        .filter_map(|r| {
            let (step, mean, std) = (
                r["step"].as_f64()?,
                r["reward"].as_f64()?,
                r["reward_std"].as_f64()?,
            );
            Some((step, mean - std, mean + std))
        })
        .collect();
    reward.name = "mean reward (band: ±1 std)".to_owned();
    vec![
        (
            "reward.svg",
            "reward",
            line_svg("Reward per step", "reward", &[reward]),
        ),
        (
            "kl.svg",
            "KL",
            line_svg(
                "KL to the reference policy",
                "kl",
                &[Curve::of(rows, "kl", "kl")],
            ),
        ),
        (
            "entropy.svg",
            "entropy",
            line_svg(
                "Policy entropy",
                "nats per token",
                &[Curve::of(rows, "entropy", "entropy")],
            ),
        ),
        (
            "completion_length.svg",
            "completion length",
            line_svg(
                "Completion length",
                "policy tokens",
                &[
                    Curve::of(rows, "completions/mean_length", "mean"),
                    Curve::of(
                        rows,
                        "completions/mean_terminated_length",
                        "mean of those ending on a stop token",
                    ),
                ],
            ),
        ),
    ]
}

/// Writes `report.md` and the training plots into `out` for the metrics rows of this run.
pub(crate) fn write_report(out: &Path, name: &str, rows: &[Value]) -> anyhow::Result<()> {
    let mut md = format!("# Training report: {name}\n\n");
    if rows.is_empty() {
        md.push_str("No step ran in this invocation.\n");
    } else {
        for (file, title, svg) in training_plots(rows) {
            std::fs::write(out.join(file), svg)?;
            let _ = writeln!(md, "![{title}]({file})\n");
        }
        let cols = [
            "reward",
            "reward_std",
            "frac_reward_zero_std",
            "loss",
            "kl",
            "entropy",
            "grad_norm",
            "learning_rate",
            "clip_ratio/region_mean",
            "completions/mean_length",
            "completions/clipped_ratio",
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
