//! Line and bar charts as standalone SVG strings, drawn with plotters' SVG backend: axes with
//! ticks and a light grid, a y axis from 0 wherever no value is negative (the honest baseline
//! for rewards, lengths and KL), tick decimals that follow the axis' span, a legend in headroom
//! above the data (never over the title or a curve), value labels on bars, and XML-escaped
//! text. The binary's reports and `cargo xtask results` draw every plot through here, so a run's
//! curves and a comparison with TRL look alike.
//!
//! # In detail
//!
//! `line_svg` (curves against the step, each with an optional shaded band) and `bars_svg` (groups
//! of labelled bars) as standalone SVG strings, with plotters' SVG backend: ticks and a light grid,
//! a y axis from 0 wherever no value is negative, tick decimals that follow the span, the legend in
//! headroom above the data, escaped text. The binary's training and evaluation reports and `cargo
//! xtask results` draw through it.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("plot {title:?}: {cause}")]
pub struct PlotError {
    /// The plot's title.
    pub title: String,
    /// What plotters reported.
    pub cause: String,
}

const WIDTH: u32 = 640;
const HEIGHT: u32 = 320;
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// One curve of a line plot, with an optional band `(x, low, high)` drawn behind it (a ±std
/// band, say).
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// The legend's name for it.
    pub name: String,
    /// `(x, y)` in drawing order.
    pub points: Vec<(f64, f64)>,
    /// `(x, low, high)`, shaded behind the curve; empty for none.
    pub band: Vec<(f64, f64, f64)>,
}

impl Curve {
    /// A curve without a band.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
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

/// A line plot of `curves` against the step, as a standalone SVG: the y axis from 0 when no
/// value is negative, a legend when there are several curves or a band.
pub fn line_svg(title: &str, y_desc: &str, curves: &[Curve]) -> Result<String, PlotError> {
    render(title, |svg| draw_lines(svg, title, y_desc, curves))
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
    let whole = xs.clone().all(|x| x.fract() == 0.0);
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
    // Steps are whole numbers: at most one tick per step, and none labelled between two (a
    // 3-step run's ticks read 1 2 3, not 1 2 2 2 3).
    let x_ticks = if whole {
        ((x1 - x0) as usize + 1).min(8)
    } else {
        8
    };
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
        .x_labels(x_ticks)
        .y_labels(6)
        .x_label_formatter(&|x| match whole {
            true if x.fract() != 0.0 => String::new(),
            _ => format!("{x:.0}"),
        })
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
pub fn bars_svg(
    title: &str,
    series: &[&str],
    groups: &[(String, Vec<f64>)],
) -> Result<String, PlotError> {
    render(title, |svg| draw_bars(svg, title, series, groups))
}

/// The SVG that `draw` writes, or the plot's error naming its title.
fn render(
    title: &str,
    draw: impl FnOnce(&mut String) -> Result<(), Box<dyn std::error::Error + '_>>,
) -> Result<String, PlotError> {
    let mut svg = String::new();
    draw(&mut svg).map_err(|e| PlotError {
        title: title.to_owned(),
        cause: e.to_string(),
    })?;
    Ok(svg)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_have_escaped_titles_value_labels_and_a_legend() {
        let groups: Vec<(String, Vec<f64>)> = ["de", "fr", "zh", "ja"]
            .iter()
            .enumerate()
            .map(|(i, l)| ((*l).to_owned(), vec![0.1 * i as f64, 0.25, 0.0]))
            .collect();
        let svg = bars_svg(
            "MGSM <accuracy> & more",
            &["base", "step 4", "trl"],
            &groups,
        )
        .unwrap();
        assert!(svg.contains("MGSM &lt;accuracy&gt; &amp; more"), "{svg}");
        for label in ["de", "zh", "0.30", "step 4"] {
            assert!(svg.contains(&format!("\n{label}\n")), "{label}: {svg}");
        }
    }

    #[test]
    fn lines_start_at_zero_when_nothing_is_negative_and_name_each_curve() {
        let ours = Curve::new("ours", vec![(1.0, 0.5), (2.0, 0.75)]);
        let trl = Curve::new("TRL", vec![(1.0, 0.25), (2.0, 0.5)]);
        let svg = line_svg("Reward", "reward", &[ours, trl]).unwrap();
        for label in ["\nstep\n", "\nreward\n", "\nours\n", "\nTRL\n", "\n0.00\n"] {
            assert!(svg.contains(label), "{label:?}: {svg}");
        }
        // A 4-step run's axis labels each step once, in order.
        let steps = Curve::new("ours", (1..=4).map(|s| (f64::from(s), 0.5)).collect());
        let svg = line_svg("Reward", "reward", &[steps]).unwrap();
        let labels: Vec<&str> = svg
            .lines()
            .filter(|l| matches!(*l, "1" | "2" | "3" | "4"))
            .collect();
        assert_eq!(labels, ["1", "2", "3", "4"], "{svg}");
        assert_eq!(y_range([-1.0, 1.0].into_iter(), 0.0).start, -1.16);
        assert_eq!(y_range([0.5, 1.0].into_iter(), 0.0).start, 0.0);
    }
}
