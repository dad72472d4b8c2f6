//! The `plots/` of a report: per store table a gather bar chart and a write-vs-gather scatter,
//! per free table a bar chart, each as PNG + SVG, drawn with plotters and an embedded font (no
//! system fonts needed). Reads the report model only.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

use crate::model::{Report, Status};
use crate::table::Stage;

const W: u32 = 1000;
const ROW_H: u32 = 34;

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

type DrawResult<T> = Result<T, String>;

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

/// Horizontal bars, one per label, with an optional vertical reference line.
fn draw_bars<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    labels: &[String],
    values: &[f64],
    x_desc: &str,
    line: Option<(f64, &str)>,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(e)?;
    let max = values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(line.map(|l| l.0).unwrap_or(0.0))
        .max(1e-9)
        * 1.1;
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(170)
        .build_cartesian_2d(0.0..max, -0.5..n as f64 - 0.5)
        .map_err(e)?;
    let labels_owned = labels.to_vec();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(x_desc)
        .y_labels(n)
        .y_label_formatter(&|y| {
            let k = y.round();
            if (*y - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < labels_owned.len() {
                labels_owned[n - 1 - k as usize].clone()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(e)?;
    chart
        .draw_series(
            values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, &v)| {
                    let y = (n - 1 - i) as f64;
                    let color =
                        if labels[i].starts_with("zrecord") || labels[i].starts_with("loaderx") {
                            BLUE.mix(0.8)
                        } else {
                            BLACK.mix(0.45)
                        };
                    Rectangle::new([(0.0, y - 0.35), (v, y + 0.35)], color.filled())
                }),
        )
        .map_err(e)?;
    if let Some((lv, name)) = line {
        chart
            .draw_series(LineSeries::new(
                vec![(lv, 0.0), (lv, n as f64)],
                RED.stroke_width(2),
            ))
            .map_err(e)?
            .label(name.to_string())
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

fn draw_scatter<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    pts: &[(String, f64, f64)],
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(e)?;
    let xm = pts
        .iter()
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .fold(1e-9f64, f64::max)
        * 1.15;
    let ym = pts
        .iter()
        .map(|p| p.2)
        .filter(|v| v.is_finite())
        .fold(1e-9f64, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xm, 0.0..ym)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("logical write MiB/s")
        .y_desc("logical gather MiB/s")
        .draw()
        .map_err(e)?;
    for (name, x, y) in pts.iter().filter(|p| p.1.is_finite() && p.2.is_finite()) {
        let color = if name.starts_with("zrecord") {
            BLUE
        } else {
            BLACK
        };
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((*x, *y))
                    + Circle::new((0, 0), 5, color.filled())
                    + Text::new(name.clone(), (7, -7), ("sans-serif", 13)),
            ))
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

fn bars_file(
    dir: &Path,
    stem: &str,
    title: &str,
    labels: &[String],
    values: &[f64],
    x_desc: &str,
    line: Option<(f64, &str)>,
) -> DrawResult<()> {
    let h = 90 + ROW_H * labels.len().max(1) as u32;
    let svg = dir.join(format!("{stem}.svg"));
    draw_bars(
        SVGBackend::new(&svg, (W, h)).into_drawing_area(),
        title,
        labels,
        values,
        x_desc,
        line,
    )?;
    let mut buf = vec![0u8; (W * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, h)).into_drawing_area();
        draw_bars(root, title, labels, values, x_desc, line)?;
    }
    image::save_buffer(
        dir.join(format!("{stem}.png")),
        &buf,
        W,
        h,
        image::ExtendedColorType::Rgb8,
    )
    .map_err(e)?;
    Ok(())
}

fn scatter_file(dir: &Path, stem: &str, title: &str, pts: &[(String, f64, f64)]) -> DrawResult<()> {
    let (w, h) = (W, 640);
    let svg = dir.join(format!("{stem}.svg"));
    draw_scatter(
        SVGBackend::new(&svg, (w, h)).into_drawing_area(),
        title,
        pts,
    )?;
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        draw_scatter(root, title, pts)?;
    }
    image::save_buffer(
        dir.join(format!("{stem}.png")),
        &buf,
        w,
        h,
        image::ExtendedColorType::Rgb8,
    )
    .map_err(e)
}

pub fn render_all(rep: &Report, dir: &Path) -> Result<(), String> {
    register_font();
    std::fs::create_dir_all(dir).map_err(|x| format!("create {}: {x}", dir.display()))?;
    for t in &rep.store_tables {
        let rows: Vec<_> = t
            .rows
            .iter()
            .filter(|r| r.status == Status::Ok && r.backend != "memcpy-limit")
            .collect();
        let labels: Vec<String> = rows.iter().map(|r| r.backend.clone()).collect();
        let values: Vec<f64> = rows.iter().map(|r| r.gather_mib_s).collect();
        let limit = t
            .rows
            .iter()
            .find(|r| r.backend == "memcpy-limit" && r.status == Status::Ok)
            .map(|r| (r.gather_mib_s, "memcpy-limit"));
        let syn = if t.synthetic { " (synthetic)" } else { "" };
        bars_file(
            dir,
            &format!("{}-gather", t.name),
            &format!("{}{syn}: logical gather", t.name),
            &labels,
            &values,
            "MiB/s",
            limit,
        )?;
        let pts: Vec<(String, f64, f64)> = rows
            .iter()
            .map(|r| (r.backend.clone(), r.write_mib_s, r.gather_mib_s))
            .collect();
        scatter_file(
            dir,
            &format!("{}-write-vs-gather", t.name),
            &format!("{}{syn}: write vs gather", t.name),
            &pts,
        )?;
    }
    for t in rep.free_tables() {
        let (label_col, value_col, desc) = match t.name.stage() {
            Stage::Sampler => ("row", "ns/index", "ns per index (lower is better)"),
            Stage::Store | Stage::Loader => ("loader", "samples/s", "samples/s"),
        };
        let mut labels = Vec::new();
        let mut values = Vec::new();
        for r in &t.rows {
            if let (Some(l), Some(v)) = (
                r.get(label_col).and_then(Value::as_str),
                r.get(value_col).and_then(Value::as_f64),
            ) {
                labels.push(l.to_string());
                values.push(v);
            }
        }
        bars_file(dir, t.name.name(), &t.title, &labels, &values, desc, None)?;
    }
    Ok(())
}
