//! The `plots/` of a report: per store table a gather bar chart and a write-vs-gather scatter,
//! per free table (sampler, loaders) a bar chart, each as PNG + SVG ([`PlotSet::All`]); a run
//! writes only its headline plots, as PNG ([`PlotSet::Headline`]), and `harness render` draws
//! the rest from `results.json` on demand. Bar charts print each value,
//! draw +/- SD whiskers from the repeats, switch to a log axis when values span more than 30x,
//! colour loaderx/zrecord rows apart and draw the limit row (memcpy, or a loader table's plain
//! view.gather loop) as a named line, drawn with plotters and an embedded font (no
//! system fonts needed). Reads the report model only.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{HarnessError, Result};
use crate::model::{Report, Status};
use crate::table::{BARE_ROW, LIMIT_ROW, Stage};

const W: u32 = 1000;

/// The headline plots, in the order a run takes them: at most [`HEADLINE_MAX`] of these that the
/// report has (the loader tables', then the image and token-line gathers).
pub const HEADLINE: [&str; 4] = [
    "loader-dense-vision",
    "loader-ragged-tokens",
    "dense-vision-gather",
    "ragged-tokens-gather",
];

pub const HEADLINE_MAX: usize = 3;

/// Which plots to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotSet {
    /// The first [`HEADLINE_MAX`] of [`HEADLINE`] the report has, PNG only: what a run writes.
    Headline,
    /// Every plot, PNG and SVG: `harness render`, or a run with `--all-plots`.
    All,
}

/// The file stems of every plot of `rep`, in drawing order.
pub fn stems(rep: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for t in &rep.store_tables {
        out.push(format!("{}-gather", t.name));
        out.push(format!("{}-write-vs-gather", t.name));
    }
    out.extend(rep.free.iter().map(|t| t.name.name().to_string()));
    out
}

/// The stems of `rep` that `set` draws.
pub fn selected(rep: &Report, set: PlotSet) -> Vec<String> {
    let all = stems(rep);
    match set {
        PlotSet::All => all,
        PlotSet::Headline => HEADLINE
            .iter()
            .filter(|h| all.iter().any(|s| s == *h))
            .take(HEADLINE_MAX)
            .map(|h| h.to_string())
            .collect(),
    }
}
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

/// What a drawing call reported: its message (plotters' error type differs per backend); [`save`]
/// adds the plot file it belongs to.
type DrawResult<T> = std::result::Result<T, String>;

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

/// One bar chart: per bar its label, value and sample SD (0 or NaN: no whisker), and an optional
/// named limit line.
pub struct Bars<'a> {
    pub title: &'a str,
    pub bars: &'a [(String, f64, f64)],
    pub x_desc: &'a str,
    pub line: Option<(f64, &'a str)>,
}

/// Whether a chart of these values needs a log axis: they span more than 30x.
pub fn wants_log(values: &[f64]) -> bool {
    let pos = values.iter().copied().filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = pos.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    hi > 0.0 && hi / lo > 30.0
}

/// A value as a bar label: 3 significant digits, k/M suffixes.
fn short(v: f64) -> String {
    let (x, suffix) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$}{suffix}")
}

/// Horizontal bars, one per label, each with its value printed and its +/- SD whisker; a log
/// axis when the values span more than 30x; loaderx/zrecord bars blue, the others grey; the
/// limit row as a red vertical line named in the legend.
fn draw_bars<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Bars<'_>) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(e)?;
    let mut all: Vec<f64> = c.bars.iter().map(|b| b.1).collect();
    all.extend(c.line.map(|l| l.0));
    let log = wants_log(&all);
    let finite = |v: &f64| v.is_finite() && (!log || *v > 0.0);
    let hi = all.iter().copied().filter(finite).fold(1e-9f64, f64::max);
    let lo = all
        .iter()
        .copied()
        .filter(finite)
        .fold(f64::INFINITY, f64::min);
    // Log charts are drawn in log10 units, labelled back as values.
    let t = |v: f64| if log { v.max(1e-300).log10() } else { v };
    let (x0, x1) = if log {
        ((lo / 2.0).log10().floor(), (hi * 4.0).log10())
    } else {
        (0.0, hi * 1.18)
    };
    let n = c.bars.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(c.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(260)
        .build_cartesian_2d(x0..x1, -0.5..n as f64 - 0.5)
        .map_err(e)?;
    let desc = if log {
        format!("{} (log scale)", c.x_desc)
    } else {
        c.x_desc.to_string()
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(desc)
        .x_label_formatter(&|x| {
            if log {
                short(10f64.powf(*x))
            } else {
                short(*x)
            }
        })
        .y_labels(n)
        .y_label_formatter(&|y| {
            let k = y.round();
            if (*y - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < c.bars.len() {
                c.bars[n - 1 - k as usize].0.clone()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(e)?;
    let bars: Vec<(usize, f64)> = (c.bars.iter().map(|b| b.1).enumerate())
        .filter(|(_, v)| finite(v))
        .collect();
    chart
        .draw_series(bars.iter().map(|&(i, v)| {
            let y = (n - 1 - i) as f64;
            let label = &c.bars[i].0;
            let color = if label.starts_with("zrecord") || label.starts_with("loaderx") {
                BLUE.mix(0.8)
            } else {
                BLACK.mix(0.45)
            };
            Rectangle::new([(x0, y - 0.35), (t(v), y + 0.35)], color.filled())
        }))
        .map_err(e)?;
    for &(i, v) in &bars {
        let y = (n - 1 - i) as f64;
        let sd = c.bars[i].2;
        let mut end = t(v);
        if sd.is_finite() && sd > 0.0 {
            let (a, b) = (
                t((v - sd).max(if log { v / 100.0 } else { 0.0 })),
                t(v + sd),
            );
            end = end.max(b);
            let tick = |x: f64| vec![(x, y - 0.15), (x, y + 0.15)];
            let whisker = [vec![(a, y), (b, y)], tick(a), tick(b)];
            chart
                .draw_series(whisker.map(|p| PathElement::new(p, BLACK.stroke_width(2))))
                .map_err(e)?;
        }
        chart
            .draw_series(std::iter::once(Text::new(
                short(v),
                (end + (x1 - x0) * 0.01, y + 0.2),
                ("sans-serif", 13),
            )))
            .map_err(e)?;
    }
    if let Some((lv, name)) = c.line.filter(|l| finite(&l.0)) {
        chart
            .draw_series(LineSeries::new(
                vec![(t(lv), -0.5), (t(lv), n as f64 - 0.5)],
                RED.stroke_width(2),
            ))
            .map_err(e)?
            .label(format!("{name}: {}", short(lv)))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
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
    let top = |v: fn(&(String, f64, f64)) -> f64| {
        let finite = pts.iter().map(v).filter(|v| v.is_finite());
        finite.fold(1e-9f64, f64::max) * 1.15
    };
    let (xm, ym) = (top(|p| p.1), top(|p| p.2));
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

/// One plot: a bar chart, or a scatter of (name, write, gather) points under a title.
enum Chart<'a> {
    Bars(Bars<'a>),
    Scatter(&'a str, &'a [(String, f64, f64)]),
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Chart<'_>) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    match c {
        Chart::Bars(b) => draw_bars(root, b),
        Chart::Scatter(title, pts) => draw_scatter(root, title, pts),
    }
}

/// Writes `c` to `dir/stem.png`, and `dir/stem.svg` when `svg`.
fn save(dir: &Path, stem: &str, svg: bool, c: Chart<'_>) -> Result<()> {
    let path = dir.join(stem);
    let plot = |message| HarnessError::Plot {
        path: path.clone(),
        message,
    };
    let h = match &c {
        Chart::Bars(b) => 90 + ROW_H * b.bars.len().max(1) as u32,
        Chart::Scatter(..) => 640,
    };
    if svg {
        let svg = dir.join(format!("{stem}.svg"));
        draw(SVGBackend::new(&svg, (W, h)).into_drawing_area(), &c).map_err(&plot)?;
    }
    let mut buf = vec![0u8; (W * h * 3) as usize];
    draw(
        BitMapBackend::with_buffer(&mut buf, (W, h)).into_drawing_area(),
        &c,
    )
    .map_err(&plot)?;
    let png = dir.join(format!("{stem}.png"));
    image::save_buffer(png, &buf, W, h, image::ExtendedColorType::Rgb8).map_err(|x| plot(e(x)))
}

/// Draws the plots of `rep` that `set` selects into `dir`.
pub fn render(rep: &Report, dir: &Path, set: PlotSet) -> Result<()> {
    let wanted = selected(rep, set);
    if wanted.is_empty() {
        return Ok(());
    }
    let want = |stem: &str| wanted.iter().any(|w| w == stem);
    let svg = set == PlotSet::All;
    register_font();
    std::fs::create_dir_all(dir).map_err(HarnessError::io("create", dir))?;
    for t in &rep.store_tables {
        let rows: Vec<_> = t
            .rows
            .iter()
            .filter(|r| r.status == Status::Ok && r.backend != LIMIT_ROW)
            .collect();
        let bars: Vec<_> = (rows.iter())
            .map(|r| (r.backend.clone(), r.gather_mib_s, r.sd))
            .collect();
        let limit = t
            .rows
            .iter()
            .find(|r| r.backend == LIMIT_ROW && r.status == Status::Ok)
            .map(|r| (r.gather_mib_s, LIMIT_ROW));
        let syn = if t.synthetic { " (synthetic)" } else { "" };
        let (gather, scatter) = (
            format!("{}-gather", t.name),
            format!("{}-write-vs-gather", t.name),
        );
        if want(&gather) {
            save(
                dir,
                &gather,
                svg,
                Chart::Bars(Bars {
                    title: &format!("{}{syn}: logical gather", t.name),
                    bars: &bars,
                    x_desc: "MiB/s (+/- SD over repeats)",
                    line: limit,
                }),
            )?;
        }
        if want(&scatter) {
            let pts: Vec<(String, f64, f64)> = rows
                .iter()
                .map(|r| (r.backend.clone(), r.write_mib_s, r.gather_mib_s))
                .collect();
            let title = format!("{}{syn}: write vs gather", t.name);
            save(dir, &scatter, svg, Chart::Scatter(&title, &pts))?;
        }
    }
    for t in rep.free.iter().filter(|t| want(t.name.name())) {
        let (value_col, desc) = match t.name.stage() {
            Stage::Sampler => ("ns/index", "ns per index (lower is better)"),
            Stage::Packing => ("M tokens/s", "M real tokens/s (higher is better)"),
            Stage::Scale => (
                "gathers/s",
                "random gathers of 256 records/s (higher is better)",
            ),
            Stage::Fleet => ("MiB/s", "MiB/s delivered (higher is better)"),
            Stage::Convert => ("rows/s", "rows/s converted (higher is better)"),
            Stage::Store | Stage::Loader => ("samples/s", "samples/s (+/- SD over repeats)"),
        };
        let label_col = if value_col == "samples/s" {
            "loader"
        } else {
            "row"
        };
        let sd_col = format!("{value_col} sd");
        let mut bars = Vec::new();
        let mut limit = None;
        for r in &t.rows {
            let (Some(l), Some(v)) = (r[label_col].as_str(), r[value_col].as_f64()) else {
                continue;
            };
            // A loader table's memcpy limit is drawn as the named line (older results without
            // one: the view.gather loop, which those drew as their line).
            match r["arm"].as_str() {
                Some(LIMIT_ROW) => {
                    limit = Some((v, "memcpy limit (records in memory, no loader)"));
                    continue;
                }
                Some(BARE_ROW) if !t.rows.iter().any(|r| r["arm"].as_str() == Some(LIMIT_ROW)) => {
                    limit = Some((v, "view.gather loop (Rust, no loader)"));
                    continue;
                }
                _ => {}
            }
            bars.push((l.to_string(), v, r[&sd_col].as_f64().unwrap_or(0.0)));
        }
        let syn = if t.synthetic { " (synthetic)" } else { "" };
        save(
            dir,
            t.name.name(),
            svg,
            Chart::Bars(Bars {
                title: &format!("{}{syn}: {}", t.name, desc),
                bars: &bars,
                x_desc: desc,
                line: limit,
            }),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axis_beyond_30x_and_short_labels() {
        assert!(!wants_log(&[100.0, 2999.0]));
        assert!(wants_log(&[100.0, 3001.0]));
        assert!(!wants_log(&[f64::NAN, 5.0, 0.0]));
        assert_eq!(short(1234.0), "1.23k");
        assert_eq!(short(9_502_191.0), "9.50M");
        assert_eq!(short(42.0), "42.0");
    }

    /// A run draws at most three headline plots, PNG only, in [`HEADLINE`]'s order; `All`
    /// draws every plot of the report as PNG and SVG.
    #[test]
    fn a_run_draws_its_headline_plots_and_render_all_of_them() {
        let mut rep = Report::new(true, 1, vec![]);
        for t in [
            crate::table::Table::DenseVision,
            crate::table::Table::RaggedTokens,
        ] {
            rep.store_tables
                .push(crate::report::aggregate(t, true, Vec::new()));
        }
        assert_eq!(
            selected(&rep, PlotSet::Headline),
            ["dense-vision-gather", "ragged-tokens-gather"]
        );
        assert_eq!(selected(&rep, PlotSet::All).len(), 4);
        let dir = tempfile::tempdir().expect("tempdir");
        render(&rep, dir.path(), PlotSet::Headline).expect("render");
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("plots")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["dense-vision-gather.png", "ragged-tokens-gather.png"]
        );
        render(&rep, dir.path(), PlotSet::All).expect("render");
        assert_eq!(std::fs::read_dir(dir.path()).expect("plots").count(), 8);
        for t in ["loader-ragged-tokens", "loader-dense-vision"] {
            rep.free.push(crate::model::FreeTable {
                name: crate::table::Table::from_name(t).expect("a loader table"),
                title: "t".into(),
                synthetic: false,
                columns: vec![],
                rows: vec![],
            });
        }
        assert_eq!(
            selected(&rep, PlotSet::Headline),
            [
                "loader-dense-vision",
                "loader-ragged-tokens",
                "dense-vision-gather"
            ]
        );
    }

    /// Every free table gets a plot, a loader table's limit row as the named line.
    #[test]
    fn loader_table_plot_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rep = Report::new(true, 1, vec![]);
        rep.free = vec![crate::model::FreeTable {
            name: crate::table::Table::LoaderRaggedTokens,
            title: "t".into(),
            synthetic: false,
            columns: vec![],
            rows: vec![
                serde_json::json!({"loader": "view.gather loop", "arm": "bare-gather", "samples/s": 9.5e6, "samples/s sd": 0.0}),
                serde_json::json!({"loader": "loaderx Python", "arm": "python-loaderx-w4", "samples/s": 3.8e6, "samples/s sd": 1e5}),
                serde_json::json!({"loader": "torch DataLoader", "arm": "torch-dataloader-w4", "samples/s": 6.0e4, "samples/s sd": 2e3}),
                serde_json::json!({"loader": "webdataset", "arm": "webdataset", "samples/s": null}),
            ],
        }];
        render(&rep, dir.path(), PlotSet::All).expect("render");
        for ext in ["png", "svg"] {
            let p = dir.path().join(format!("loader-ragged-tokens.{ext}"));
            assert!(
                std::fs::metadata(&p)
                    .map(|m| m.len() > 1000)
                    .unwrap_or(false),
                "{}",
                p.display()
            );
        }
        let svg =
            std::fs::read_to_string(dir.path().join("loader-ragged-tokens.svg")).expect("svg");
        assert!(svg.contains("log scale"), "values span > 30x");
        assert!(
            svg.contains("view.gather loop (Rust, no loader): 9.50M"),
            "limit line named"
        );
        assert!(
            svg.contains("3.80M") && svg.contains("60.0k"),
            "values printed"
        );
        // With a memcpy-limit row, that row is the line and the view.gather loop is a bar.
        rep.free[0].rows.insert(0, serde_json::json!({"loader": "memcpy limit", "arm": "memcpy-limit", "samples/s": 1.2e7, "samples/s sd": 0.0}));
        render(&rep, dir.path(), PlotSet::All).expect("render");
        let svg =
            std::fs::read_to_string(dir.path().join("loader-ragged-tokens.svg")).expect("svg");
        assert!(
            svg.contains("memcpy limit (records in memory, no loader): 12.0M"),
            "the memcpy limit is the named line"
        );
        assert!(
            !svg.contains("view.gather loop (Rust, no loader): 9.50M") && svg.contains("9.50M"),
            "the view.gather loop is a bar"
        );
    }
}
