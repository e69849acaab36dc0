//! The reports' plots, drawn with plotters' SVG backend (axes with ticks and grid, a legend,
//! escaped text), and the training report: `report.md` with the per-step metrics and the
//! training plots (reward with a ±std band, KL, entropy, completion length).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
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
/// KL), else the data's range; padded so the curves do not touch the frame, with `headroom`
/// (a share of the span) above them for a legend.
fn y_range(values: impl Iterator<Item = f64>, headroom: f64) -> std::ops::Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return 0.0..1.0;
    }
    let lo = if lo >= 0.0 { 0.0 } else { lo };
    let span = (hi - lo).max(hi.abs() * 1e-3).max(1e-9);
    let lo = if lo == 0.0 { 0.0 } else { lo - 0.08 * span };
    lo..hi + (0.08 + headroom) * span
}

/// A tick label with as many decimals as the axis' span needs.
fn tick(v: f64, span: f64) -> String {
    match span {
        s if s >= 20.0 => format!("{v:.0}"),
        s if s >= 2.0 => format!("{v:.1}"),
        s if s >= 0.2 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// The series' legend, upper right: in the headroom both plots leave above their data.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
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
    let legend = curves.len() > 1 || curves.iter().any(|c| !c.band.is_empty());
    let y = y_range(ys, if legend { 0.3 } else { 0.0 });
    let span = y.end - y.start;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .x_labels(8)
        .y_labels(6)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| tick(*y, span))
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
    if legend {
        draw_legend(&mut chart)?;
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
    let top = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0_f64, f64::max);
    // Headroom above the bars for their value labels and, with several series, the legend.
    let headroom = if series.len() > 1 { 1.45 } else { 1.18 };
    let y_top = if top > 0.0 { top * headroom } else { 1.0 };
    // Slots on the x axis: a group's bars side by side, then one empty slot between groups.
    let k = i32::try_from(series.len().max(1)).unwrap_or(1);
    let n = i32::try_from(groups.len()).unwrap_or(i32::MAX / (k + 1));
    let slot = |g: usize, i: usize| (g as i32) * (k + 1) + i as i32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d((0..(n * (k + 1)).max(1)).into_segmented(), 0.0..y_top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(((n * (k + 1)).max(1)) as usize)
        .y_labels(6)
        .y_label_formatter(&|y| tick(*y, y_top))
        .x_label_formatter(&|v| match v {
            // Under the group's middle bar.
            SegmentValue::CenterOf(s) if s % (k + 1) == (k - 1) / 2 => groups
                .get((s / (k + 1)) as usize)
                .map_or_else(String::new, |(label, _)| label.clone()),
            _ => String::new(),
        })
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .draw()?;
    for (i, name) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let bars = groups.iter().enumerate().filter_map(|(g, (_, values))| {
            let v = values.get(i)?.max(0.0);
            let s = slot(g, i);
            Some(Rectangle::new(
                [
                    (SegmentValue::Exact(s), 0.0),
                    (SegmentValue::Exact(s + 1), v),
                ],
                colour.filled(),
            ))
        });
        chart
            .draw_series(bars)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
        let labels = groups.iter().enumerate().filter_map(|(g, (_, values))| {
            let v = *values.get(i)?;
            Some(Text::new(
                format!("{v:.2}"),
                (
                    SegmentValue::CenterOf(slot(g, i)),
                    v.max(0.0) + y_top * 0.01,
                ),
                ("sans-serif", 11)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            ))
        });
        chart.draw_series(labels)?;
    }
    if series.len() > 1 {
        draw_legend(&mut chart)?;
    }
    root.present()?;
    Ok(())
}

/// The training plots of metrics rows: `(file name, title, svg)` for reward (mean with a ±std
/// band), KL to the reference, entropy and completion length; a metric the run did not log
/// (KL when `grpo.beta` is 0) gets no plot.
pub(crate) fn training_plots(rows: &[Value]) -> Vec<(&'static str, &'static str, String)> {
    let logged = |key: &str| rows.iter().any(|r| r[key].as_f64().is_some());
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
    let plots = [
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
    ];
    let keys = ["reward", "kl", "entropy", "completions/mean_length"];
    plots
        .into_iter()
        .zip(keys)
        .filter(|(_, key)| logged(key))
        .map(|(plot, _)| plot)
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_lines_have_escaped_titles_axes_and_labels() {
        let groups: Vec<(String, Vec<f64>)> = ["de", "fr", "zh", "ja"]
            .iter()
            .enumerate()
            .map(|(i, l)| ((*l).to_owned(), vec![0.1 * i as f64, 0.25, 0.0]))
            .collect();
        let svg = bars_svg(
            "MGSM <accuracy> & more",
            &["base", "step 4", "trl"],
            &groups,
        );
        assert!(svg.contains("MGSM &lt;accuracy&gt; &amp; more"), "{svg}");
        for label in ["de", "zh", "0.30", "step 4"] {
            assert!(svg.contains(&format!("\n{label}\n")), "{label}: {svg}");
        }
        let rows: Vec<Value> = (1..=3)
            .map(|s| serde_json::json!({"step": s, "reward": 0.5, "reward_std": 0.1}))
            .collect();
        let plots = training_plots(&rows);
        let names: Vec<&str> = plots.iter().map(|p| p.0).collect();
        assert_eq!(names, ["reward.svg"], "only what the run logged");
        assert!(plots[0].2.contains("\nstep\n") && plots[0].2.contains("±1 std"));
    }
}
