//! Plots for the examples (plotters): a pipeline timeline — device
//! utilisation and feed-queue depth over time — and a scaling curve. SVG or
//! PNG by the file's extension; PNG text uses the bundled DejaVu Sans.
#![allow(dead_code)]

use std::path::Path;

use feedline_actors::TimelineSample;
use plotters::coord::Shift;
use plotters::prelude::*;

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

/// Device utilisation (busy %) per device, and feed-queue depth, over time.
pub fn timeline(path: &Path, samples: &[TimelineSample], title: &str) -> PlotResult {
    with_area(
        path,
        (1100, 720),
        |a| draw_timeline(a, samples, title),
        |a| draw_timeline(a, samples, title),
    )
}

fn draw_timeline<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    samples: &[TimelineSample],
    title: &str,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 24))?;
    let (top, bottom) = root.split_vertically(420);
    let t_end = samples.last().map(|s| s.t).unwrap_or(1.0).max(1e-3);
    let devices = samples.first().map(|s| s.device_busy.len()).unwrap_or(0);

    let mut chart = ChartBuilder::on(&top)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .caption(
            "device utilisation (busy % per sampling interval)",
            ("sans-serif", 18),
        )
        .build_cartesian_2d(0.0..t_end, 0.0..105.0)?;
    chart
        .configure_mesh()
        .x_desc("time since start (s)")
        .y_desc("busy %")
        .label_style(("sans-serif", 14))
        .draw()?;
    for d in 0..devices {
        let color = Palette99::pick(d).to_rgba();
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.t, 100.0 * s.device_busy[d])),
                color.stroke_width(2),
            ))?
            .label(format!("device {d}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    let stage =
        |name: &'static str, color: RGBColor, f: fn(&TimelineSample) -> f64| (name, color, f);
    for (name, color, f) in [
        stage(
            "readers busy % (per reader)",
            RGBColor(120, 120, 120),
            |s| 100.0 * s.readers_busy,
        ),
        stage("shuffle/collate busy %", BLACK, |s| 100.0 * s.shuffle_busy),
    ] {
        chart
            .draw_series(DashedLineSeries::new(
                samples.iter().map(|s| (s.t, f(s))),
                6,
                4,
                color.stroke_width(1),
            ))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(1))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;

    let cap = samples
        .iter()
        .map(|s| s.queue_capacity)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let max_depth = samples.iter().map(|s| s.queue_depth).max().unwrap_or(0) as f64;
    let mut q = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .caption(
            "feed queue depth (batches); 0 = devices starved, capacity = loader ahead",
            ("sans-serif", 18),
        )
        .build_cartesian_2d(0.0..t_end, 0.0..(cap.max(max_depth) * 1.1 + 0.5))?;
    q.configure_mesh()
        .x_desc("time since start (s)")
        .y_desc("batches queued")
        .label_style(("sans-serif", 14))
        .draw()?;
    q.draw_series(LineSeries::new(
        samples.iter().map(|s| (s.t, s.queue_depth as f64)),
        BLUE.stroke_width(2),
    ))?
    .label("queued batches")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLUE.stroke_width(3)));
    q.draw_series(DashedLineSeries::new(
        [(0.0, cap), (t_end, cap)],
        6,
        4,
        RED.stroke_width(1),
    ))?
    .label("capacity (per lane)")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED.stroke_width(1)));
    q.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
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
