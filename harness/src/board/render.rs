//! The Markdown of one board: a row per (cell, arm) with the newest current receipt's
//! median, min–max, N, roofline limit and fraction, device and receipt; a cell without a
//! current receipt is one `stale` row with no number.

use std::collections::BTreeMap;
use std::fmt::Write;

use gates::receipt::Receipt;

use crate::bench::cells::Board;

fn device(r: &Receipt) -> String {
    match r.device.gpu() {
        Some(g) => g.name.clone(),
        None => format!("CPU ({} threads)", r.workload.threads.unwrap_or(0)),
    }
}

/// The Markdown body of `board` given the receipt of each cell that has a current one.
pub fn board_markdown(board: &Board, shown: &BTreeMap<String, &Receipt>, svg: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "#### {}\n", board.title);
    if !board.about.is_empty() {
        let _ = writeln!(s, "{}\n", board.about.trim());
    }
    s.push_str("| cell | arm | tok/s (median) | min – max | N | limit tok/s | of limit | device | receipt |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---|---|\n");
    for c in &board.cells {
        let Some(r) = shown.get(&c.id) else {
            let _ = writeln!(
                s,
                "| {} | {} | stale: no current receipt | | | | | | |",
                c.label,
                c.arms.join(", ")
            );
            continue;
        };
        for a in &r.arms {
            // Units other than tok/s (serve cells: per-stream tok/s, TTFT ms) are named.
            let unit = match a.unit.as_deref() {
                Some(u) if u != "tok/s" => format!(" {u}"),
                _ => String::new(),
            };
            let (med, range) = match a.stats {
                Some(st) => (
                    format!("{:.2}{unit}", st.median),
                    format!("{:.2} – {:.2}", st.min, st.max),
                ),
                None => ("—".into(), "—".into()),
            };
            let limit = r
                .roofline
                .as_ref()
                .map(|x| format!("{:.1}", x.limit_tokens_per_s))
                .unwrap_or_else(|| "—".into());
            let frac = a
                .roofline_fraction
                .map(|f| format!("{:.1}%", 100.0 * f))
                .unwrap_or_else(|| "—".into());
            let _ = writeln!(
                s,
                "| {} | {} {} | {med} | {range} | {} | {limit} | {frac} | {} | {} `{}` |",
                c.label,
                a.name,
                a.engine,
                a.samples.len(),
                device(r),
                r.time,
                &r.build.commit[..r.build.commit.len().min(10)]
            );
        }
    }
    let _ = writeln!(s, "\n![{}]({svg})", board.name);
    s
}
