//! Plots for the examples (plotters): a pipeline timeline — device
//! utilisation and feed-queue depth over time, pass boundaries marked, the
//! sampling interval stated, each legend in a panel of its own beside its
//! chart (never over the data) with each line drawn as in the chart — and a
//! scaling curve. SVG or PNG by the file's extension; PNG text uses the
//! bundled DejaVu Sans.
#![allow(dead_code)]

use std::path::Path;

use feedline_actors::TimelineSample;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

type PlotResult = Result<(), Box<dyn std::error::Error>>;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Draw `draw` on an SVG or PNG file of `size` pixels, chosen by extension.
fn with_area(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> PlotResult,
    draw_png: impl FnOnce(&DrawingArea<BitMapBackend, Shift>) -> PlotResult,
) -> PlotResult {
    register_font();
    match path.extension().and_then(|e| e.to_str()) {
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw_png(&root)?;
            root.present()?;
        }
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(&root)?;
            root.present()?;
        }
        _ => return Err(format!("{}: the plot must be .svg or .png", path.display()).into()),
    }
    Ok(())
}

/// What the timeline plot shows: the samples, how often they were taken,
/// and when each pass ended (seconds since start, as the samples' `t`).
pub struct Timeline<'a> {
    /// The samples, in time order.
    pub samples: &'a [TimelineSample],
    /// The sampling interval (each sample covers one).
    pub interval: std::time::Duration,
    /// When pass 1, 2, … was all batched (the sample at or after it).
    pub pass_ends: &'a [f64],
    /// The plot's title.
    pub title: &'a str,
}

/// Device utilisation (busy %) per device, and feed-queue depth, over time,
/// with pass boundaries; each chart's legend beside it, off the data.
pub fn timeline(path: &Path, plot: &Timeline<'_>) -> PlotResult {
    with_area(
        path,
        (1200, 720),
        |a| draw_timeline(a, plot),
        |a| draw_timeline(a, plot),
    )
}

/// Width of the legend panel right of each chart, pixels.
const LEGEND_WIDTH: u32 = 270;

/// One line of a legend: its label and how the line is drawn.
struct LegendEntry {
    label: String,
    color: RGBAColor,
    width: u32,
    dashed: bool,
}

impl LegendEntry {
    fn new(label: impl Into<String>, color: impl Color, width: u32, dashed: bool) -> Self {
        LegendEntry {
            label: label.into(),
            color: color.to_rgba(),
            width,
            dashed,
        }
    }

    /// The line's style (the same in the chart and in the legend).
    fn style(&self) -> ShapeStyle {
        self.color.stroke_width(self.width)
    }
}

/// A legend in its own panel: each entry's line as drawn in the chart
/// (dashed where the series is), then its label.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let (x, mut y) = (8i32, 56i32);
    for e in entries {
        if e.dashed {
            for k in 0..3 {
                let x0 = x + 10 * k;
                area.draw(&PathElement::new(vec![(x0, y), (x0 + 6, y)], e.style()))?;
            }
        } else {
            area.draw(&PathElement::new(vec![(x, y), (x + 26, y)], e.style()))?;
        }
        area.draw(&Text::new(
            e.label.clone(),
            (x + 34, y - 8),
            ("sans-serif", 14).into_font(),
        ))?;
        y += 24;
    }
    Ok(())
}

fn draw_timeline<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plot: &Timeline<'_>,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let samples = plot.samples;
    let ms = plot.interval.as_secs_f64() * 1e3;
    root.fill(&WHITE)?;
    let root = root.titled(plot.title, ("sans-serif", 24))?;
    let (top, bottom) = root.split_vertically(420);
    let width = top.dim_in_pixel().0;
    let (top, top_legend) = top.split_horizontally(width - LEGEND_WIDTH);
    let (bottom, bottom_legend) = bottom.split_horizontally(width - LEGEND_WIDTH);
    let t_end = samples.last().map(|s| s.t).unwrap_or(1.0).max(1e-3);
    let devices = samples.first().map(|s| s.device_busy.len()).unwrap_or(0);
    let x_desc = format!("time since start (s); one sample every {ms:.0} ms");

    let mut chart = ChartBuilder::on(&top)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .caption(
            format!("device utilisation (busy % in each {ms:.0} ms interval)"),
            ("sans-serif", 18),
        )
        .build_cartesian_2d(0.0..t_end, 0.0..112.0)?;
    chart
        .configure_mesh()
        .x_desc(x_desc.as_str())
        .y_desc("busy %")
        .label_style(("sans-serif", 14))
        .draw()?;
    let mut legend = Vec::new();
    for d in 0..devices {
        let e = LegendEntry::new(format!("device {d}"), Palette99::pick(d), 2, false);
        chart.draw_series(LineSeries::new(
            samples.iter().map(|s| (s.t, 100.0 * s.device_busy[d])),
            e.style(),
        ))?;
        legend.push(e);
    }
    let stage =
        |name: &'static str, color: RGBColor, f: fn(&TimelineSample) -> f64| (name, color, f);
    for (name, color, f) in [
        stage(
            "readers busy % (per reader)",
            RGBColor(120, 120, 120),
            |s| 100.0 * s.readers_busy,
        ),
        stage("shuffle busy %", BLACK, |s| 100.0 * s.shuffle_busy),
        stage(
            "batch maker busy % (per worker)",
            RGBColor(60, 60, 200),
            |s| 100.0 * s.maker_busy,
        ),
    ] {
        let e = LegendEntry::new(name, color, 1, true);
        chart.draw_series(DashedLineSeries::new(
            samples.iter().map(|s| (s.t, f(s))),
            6,
            4,
            e.style(),
        ))?;
        legend.push(e);
    }
    draw_pass_ends(&mut chart, plot.pass_ends, 112.0, &mut legend)?;
    draw_legend(&top_legend, &legend)?;

    let cap = samples
        .iter()
        .map(|s| s.queue_capacity)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let max_depth = samples.iter().map(|s| s.queue_depth).max().unwrap_or(0) as f64;
    let y_top = cap.max(max_depth) * 1.25 + 0.5;
    let mut q = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .caption(
            "feed queue depth (batches); 0 = devices starved, capacity = loader ahead",
            ("sans-serif", 18),
        )
        .build_cartesian_2d(0.0..t_end, 0.0..y_top)?;
    q.configure_mesh()
        .x_desc(x_desc.as_str())
        .y_desc("batches queued")
        .label_style(("sans-serif", 14))
        .draw()?;
    let queued = LegendEntry::new("queued batches (at each sample)", BLUE, 2, false);
    q.draw_series(LineSeries::new(
        samples.iter().map(|s| (s.t, s.queue_depth as f64)),
        queued.style(),
    ))?;
    let capacity = LegendEntry::new("capacity (per lane)", RED, 1, true);
    q.draw_series(DashedLineSeries::new(
        [(0.0, cap), (t_end, cap)],
        6,
        4,
        capacity.style(),
    ))?;
    let mut legend = vec![queued, capacity];
    draw_pass_ends(&mut q, plot.pass_ends, y_top, &mut legend)?;
    draw_legend(&bottom_legend, &legend)?;
    Ok(())
}

/// A dashed vertical line at each pass's end, numbered at the top, and
/// its legend entry.
fn draw_pass_ends<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    pass_ends: &[f64],
    y_top: f64,
    legend: &mut Vec<LegendEntry>,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    if pass_ends.is_empty() {
        return Ok(());
    }
    let entry = LegendEntry::new("end of a pass (all batched)", RGBColor(150, 90, 0), 1, true);
    for (k, &t) in pass_ends.iter().enumerate() {
        chart.draw_series(DashedLineSeries::new(
            [(t, 0.0), (t, y_top)],
            5,
            4,
            entry.style(),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("pass {} ends", k + 1),
            (t, y_top),
            ("sans-serif", 13)
                .into_font()
                .color(&entry.color)
                .pos(Pos::new(HPos::Right, VPos::Top)),
        )))?;
    }
    legend.push(entry);
    Ok(())
}

/// Records/s against reader count, per file set, with the linear ideal.
/// One line of the scaling plot: its name, (readers, records/s) points, and
/// whether to draw the linear reference from its first point.
pub type ScalingSeries = (String, Vec<(usize, f64)>, bool);

pub fn scaling(path: &Path, series: &[ScalingSeries], title: &str) -> PlotResult {
    with_area(
        path,
        (900, 600),
        |a| draw_scaling(a, series, title),
        |a| draw_scaling(a, series, title),
    )
}

fn draw_scaling<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    series: &[ScalingSeries],
    title: &str,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let max_r = series
        .iter()
        .flat_map(|(_, v, _)| v.iter().map(|p| p.0))
        .max()
        .unwrap_or(1) as f64;
    let max_y = series
        .iter()
        .flat_map(|(_, v, _)| {
            let base = v.first().map(|p| p.1 / p.0 as f64).unwrap_or(0.0);
            v.iter().map(move |p| p.1.max(base * p.0 as f64))
        })
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(root)
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .caption(title, ("sans-serif", 22))
        .build_cartesian_2d(0.0..max_r * 1.05, 0.0..max_y * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("readers")
        .y_desc("records / s")
        .y_label_formatter(&|y| format!("{:.1} M", y / 1e6))
        .label_style(("sans-serif", 14))
        .draw()?;
    for (i, (name, pts, linear)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|&(r, y)| (r as f64, y)),
                color.stroke_width(2),
            ))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
        chart.draw_series(
            pts.iter()
                .map(|&(r, y)| Circle::new((r as f64, y), 4, color.filled())),
        )?;
        if let Some(&(r0, y0)) = pts.first().filter(|_| *linear) {
            let per = y0 / r0 as f64;
            let c2 = color.mix(0.5);
            chart
                .draw_series(DashedLineSeries::new(
                    pts.iter().map(move |&(r, _)| (r as f64, per * r as f64)),
                    5,
                    5,
                    c2.stroke_width(1),
                ))?
                .label(format!("{name}: linear"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c2.stroke_width(1))
                });
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}
