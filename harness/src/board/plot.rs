//! The SVG plot of one board (plotters, SVG backend, no font backend: text sizes are
//! estimated, so the bytes depend only on the receipts). One horizontal bar per (cell,
//! arm): the fraction of the roofline when every shown row has one, else the fraction of
//! the prefill target when every shown receipt has one, else tokens/s. Stale cells keep
//! their place with a `stale` label and no bar; red cells (newest current receipt red) with
//! a `red` label and no bar.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use gates::receipt::Receipt;
use plotters::prelude::*;

use crate::bench::cells::Board;

struct Bar {
    label: String,
    value: Option<f64>,
    /// What an absent bar says.
    note: &'static str,
}

/// What the bars measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// % of the memory roofline.
    Roofline,
    /// % of the prefill target (half the bf16 GEMM rate).
    Target,
    /// tokens/s.
    Rate,
}

fn bars(
    board: &Board,
    shown: &BTreeMap<String, &Receipt>,
    red: &BTreeMap<String, &Receipt>,
) -> (Vec<Bar>, Axis) {
    let roofline = shown
        .values()
        .all(|r| r.arms.iter().all(|a| a.roofline_fraction.is_some()));
    let target = !roofline && !shown.is_empty() && shown.values().all(|r| r.target_tok_s.is_some());
    let mut out = Vec::new();
    for c in &board.cells {
        match shown.get(&c.id) {
            None if red.contains_key(&c.id) => out.push(Bar {
                label: format!("{} (red)", c.label),
                value: None,
                note: "red: see the table",
            }),
            None => out.push(Bar {
                label: format!("{} (stale)", c.label),
                value: None,
                note: "stale: no current receipt",
            }),
            Some(r) => {
                for a in &r.arms {
                    let v = if roofline {
                        a.roofline_fraction.map(|f| 100.0 * f)
                    } else if let (true, Some(t)) = (target, r.target_tok_s) {
                        a.stats.map(|s| 100.0 * s.median / t)
                    } else {
                        a.stats.map(|s| s.median)
                    };
                    out.push(Bar {
                        label: format!("{} {}", c.label, a.name),
                        value: v,
                        note: "stale: no current receipt",
                    });
                }
            }
        }
    }
    let axis = if roofline && !shown.is_empty() {
        Axis::Roofline
    } else if target {
        Axis::Target
    } else {
        Axis::Rate
    };
    (out, axis)
}

/// The SVG text of `board`'s plot.
pub fn board_svg(
    board: &Board,
    shown: &BTreeMap<String, &Receipt>,
    red: &BTreeMap<String, &Receipt>,
) -> Result<String> {
    let (bars, axis) = bars(board, shown, red);
    let n = bars.len().max(1);
    let height = 80 + 28 * n as u32;
    let top = bars.iter().filter_map(|b| b.value).fold(1.0f64, f64::max) * 1.1;
    let xmax = match axis {
        Axis::Roofline => 100.0,
        // A target can be passed: the axis reaches past 100% then.
        Axis::Target => top.max(110.0),
        Axis::Rate => top,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
        let x_desc = match axis {
            Axis::Roofline => "% of the memory roofline (same run)",
            Axis::Target => "% of the target (half the bf16 GEMM rate, same run)",
            Axis::Rate => "tokens/s (median)",
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(&board.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(330)
            .build_cartesian_2d(0f64..xmax, 0f64..n as f64)
            .map_err(|e| anyhow!("plot: {e}"))?;
        let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|y| {
                let i = (n as f64 - y - 0.5).round() as i64;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| labels.get(i))
                    .cloned()
                    .unwrap_or_default()
            })
            .x_desc(x_desc)
            .draw()
            .map_err(|e| anyhow!("plot: {e}"))?;
        for (i, b) in bars.iter().enumerate() {
            let y0 = (n - 1 - i) as f64 + 0.15;
            let y1 = y0 + 0.7;
            match b.value {
                Some(v) => {
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(0.0, y0), (v.min(xmax), y1)],
                            BLUE.mix(0.7).filled(),
                        )))
                        .map_err(|e| anyhow!("plot: {e}"))?;
                    chart
                        .draw_series(std::iter::once(Text::new(
                            format!("{v:.1}"),
                            (v.min(xmax) + xmax * 0.01, y1 - 0.1),
                            ("sans-serif", 12),
                        )))
                        .map_err(|e| anyhow!("plot: {e}"))?;
                }
                None => {
                    chart
                        .draw_series(std::iter::once(Text::new(
                            b.note.to_owned(),
                            (xmax * 0.01, y1 - 0.1),
                            ("sans-serif", 12).into_font().color(&RED),
                        )))
                        .map_err(|e| anyhow!("plot: {e}"))?;
                }
            }
        }
        root.present().map_err(|e| anyhow!("plot: {e}"))?;
    }
    Ok(svg)
}
