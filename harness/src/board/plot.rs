//! The SVG plot of one board (plotters, SVG backend, no font backend: text sizes are
//! estimated, so the bytes depend only on the receipts). One horizontal bar per (cell,
//! arm): the fraction of the roofline when every shown row has one, else tokens/s. Stale
//! cells keep their place with a `stale` label and no bar.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use gates::receipt::Receipt;
use plotters::prelude::*;

use crate::bench::cells::Board;

struct Bar {
    label: String,
    value: Option<f64>,
}

fn bars(board: &Board, shown: &BTreeMap<String, &Receipt>) -> (Vec<Bar>, bool) {
    let roofline = shown
        .values()
        .all(|r| r.arms.iter().all(|a| a.roofline_fraction.is_some()));
    let mut out = Vec::new();
    for c in &board.cells {
        match shown.get(&c.id) {
            None => out.push(Bar {
                label: format!("{} (stale)", c.label),
                value: None,
            }),
            Some(r) => {
                for a in &r.arms {
                    let v = if roofline {
                        a.roofline_fraction.map(|f| 100.0 * f)
                    } else {
                        a.stats.map(|s| s.median)
                    };
                    out.push(Bar {
                        label: format!("{} {}", c.label, a.name),
                        value: v,
                    });
                }
            }
        }
    }
    (out, roofline && !shown.is_empty())
}

/// The SVG text of `board`'s plot.
pub fn board_svg(board: &Board, shown: &BTreeMap<String, &Receipt>) -> Result<String> {
    let (bars, roofline) = bars(board, shown);
    let n = bars.len().max(1);
    let height = 80 + 28 * n as u32;
    let xmax = if roofline {
        100.0
    } else {
        bars.iter().filter_map(|b| b.value).fold(1.0f64, f64::max) * 1.1
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
        let x_desc = if roofline {
            "% of the memory roofline (same run)"
        } else {
            "tokens/s (median)"
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
                            "stale: no current receipt".to_owned(),
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
