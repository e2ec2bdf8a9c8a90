//! The Markdown of one board: a row per (cell, arm) with the newest current receipt's
//! median, min–max, N, roofline limit and fraction, device and receipt; a cell without a
//! current receipt is one `stale` row with no number of today's (naming the newest green receipt
//! of other sources, its time, commit and ratios or medians, when there is one: a loss does
//! not vanish from the board when the engine changes), and a cell whose newest current
//! receipt is red one `red` row with its failures and the receipt, and no number. A pairing receipt (`kind = pair`)
//! also gets a ratio row per metric: ours over theirs for rates, theirs over ours for TTFT,
//! so above 1 means we are ahead; bold at 1.1x and above, losses shown as plainly.
//! A prefill receipt with a bf16 GEMM reference shows its target in the limit column and
//! each arm's fraction of it, and a list under the table gives each cell's measured rate
//! (or why it is absent); receipts without one render as before.

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

/// The failures of a red receipt, as one table cell (pipes escaped, no line breaks).
pub fn red_text(r: &Receipt) -> String {
    let failures = match &r.verdict {
        gates::Verdict::Red { failures } => failures.join("; "),
        _ => String::new(),
    };
    format!("red: {failures}")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// What a stale cell last measured (`r`, the newest receipt of other sources), in one table
/// cell: its time and commit, then its failures (red), the ratios of a pairing receipt or
/// each arm's median, with no bold (it is not a result of today's engine).
pub fn last_text(r: &Receipt) -> String {
    let what: Vec<String> = if matches!(r.verdict, gates::Verdict::Red { .. }) {
        vec![red_text(r)]
    } else if matches!(r.kind, gates::receipt::Kind::Pair) {
        ratios(r)
            .into_iter()
            .map(|(m, other, x)| format!("{m} {x:.2}x vs {other}"))
            .collect()
    } else {
        r.arms
            .iter()
            .filter_map(|a| {
                let unit = a.unit.as_deref().unwrap_or("tok/s");
                a.stats
                    .map(|st| format!("{} {:.2} {unit}", a.name, st.median))
            })
            .collect()
    };
    format!(
        "stale: no current receipt; last measured {} at `{}` (other sources): {}",
        r.time,
        &r.build.commit[..r.build.commit.len().min(10)],
        what.join(", ")
    )
    .replace('|', "\\|")
    .replace(['\n', '\r'], " ")
}

/// The Markdown body of `board` given the receipt of each cell that has a current one
/// (`shown`, green), of each cell whose newest current receipt is red (`red`), and of
/// what each cell last measured on any sources (`last`, named on a stale row); `notes` goes
/// under the table (the losses' causes of a pairing board: [`super::losses::notes`]).
pub fn board_markdown(
    board: &Board,
    shown: &BTreeMap<String, &Receipt>,
    red: &BTreeMap<String, &Receipt>,
    last: &BTreeMap<String, &Receipt>,
    svg: &str,
    notes: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "#### {}\n", board.title);
    if !board.about.is_empty() {
        let _ = writeln!(s, "{}\n", board.about.trim());
    }
    s.push_str("| cell | arm | tok/s (median) | min – max | N | limit tok/s | of limit | device | receipt |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---|---|\n");
    for c in &board.cells {
        let Some(r) = shown.get(&c.id) else {
            // A pairing cell names its competitors.
            let arms = if c.vs.is_empty() {
                c.arms.join(", ")
            } else {
                format!("assay vs {}", c.vs.join(", "))
            };
            // One row of text (no number) naming receipt `r`: a red one of today's sources,
            // or the last one of other sources on a stale cell.
            let text_row = |s: &mut String, text: String, r: &Receipt| {
                let _ = writeln!(
                    s,
                    "| {} | {arms} | {text} | | | | | {} | {} `{}` |",
                    c.label,
                    device(r),
                    r.time,
                    &r.build.commit[..r.build.commit.len().min(10)]
                );
            };
            if let Some(r) = red.get(&c.id) {
                text_row(&mut s, red_text(r), r);
                continue;
            }
            if let Some(r) = last.get(&c.id) {
                text_row(&mut s, last_text(r), r);
                continue;
            }
            let _ = writeln!(
                s,
                "| {} | {arms} | stale: no current receipt | | | | | | |",
                c.label
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
            let (limit, frac) = match (&r.roofline, r.target_tok_s) {
                (None, Some(t)) => target_cells(t, a.stats.map(|x| x.median)),
                _ => (
                    r.roofline
                        .as_ref()
                        .map(|x| format!("{:.1}", x.limit_tokens_per_s))
                        .unwrap_or_else(|| "—".into()),
                    a.roofline_fraction
                        .map(|f| format!("{:.1}%", 100.0 * f))
                        .unwrap_or_else(|| "—".into()),
                ),
            };
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
        if r.kind == gates::receipt::Kind::Pair {
            for (metric, other, x) in ratios(r) {
                let _ = writeln!(
                    s,
                    "| {} | {metric}: assay vs {other} | {} | | | | | | |",
                    c.label,
                    ratio_cell(x)
                );
            }
        }
    }
    s.push_str(&gemm_notes(board, shown));
    s.push_str(notes);
    let _ = writeln!(s, "\n![{}]({svg})", board.name);
    s
}

/// The limit and fraction cells of an arm against a prefill target `t`.
pub fn target_cells(t: f64, median: Option<f64>) -> (String, String) {
    (
        format!("{t:.1} target"),
        median
            .map(|m| format!("{:.1}% of target", 100.0 * m / t))
            .unwrap_or_else(|| "—".into()),
    )
}

/// Under the table, when a shown receipt has a GEMM reference: what the target is, and per
/// such cell the rate measured (or why not); empty otherwise.
pub fn gemm_notes(board: &Board, shown: &BTreeMap<String, &Receipt>) -> String {
    let mut lines = Vec::new();
    for c in &board.cells {
        let Some((r, g)) = shown
            .get(&c.id)
            .and_then(|r| r.gemm_ref.as_ref().map(|g| (r, g)))
        else {
            continue;
        };
        match (&g.absent, g.stats, r.target_tok_s) {
            (Some(why), _, _) => lines.push(format!("- {}: not measured ({why})", c.label)),
            (None, Some(st), Some(t)) => lines.push(format!(
                "- {}: {:.1} TFLOP/s ({:.1} – {:.1}, N={}; {}, {}), {:.3} B params: target {t:.1} tok/s",
                c.label,
                st.median,
                st.min,
                st.max,
                g.samples.len(),
                g.torch.as_deref().unwrap_or("torch"),
                g.device.as_deref().unwrap_or("?"),
                g.params as f64 / 1e9,
            )),
            _ => {}
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\nTarget (issue 8): half the bf16 GEMM rate measured in the same run, over 2 x params \
         FLOPs per token. The rate: torch bf16 products of the model's linear layers (q+k+v, o, \
         gate+up, down) at M = the prompt's tokens, CUDA-event timed, median of N reps:\n\n{}\n",
        lines.join("\n")
    )
}

/// The ratio rows of a pairing receipt: for each metric `m` with arms `assay m` and
/// `<other> m`, (metric, other engine, ratio) with the ratio oriented so that > 1 means
/// assay is ahead (rates: ours / theirs; `TTFT`: theirs / ours).
pub fn ratios(r: &Receipt) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    for a in &r.arms {
        let Some(metric) = a.name.strip_prefix("assay ") else {
            continue;
        };
        let Some(ours) = a.stats.map(|s| s.median) else {
            continue;
        };
        for b in &r.arms {
            let Some((other, m)) = b.name.split_once(' ') else {
                continue;
            };
            if other == "assay" || m != metric {
                continue;
            }
            let Some(theirs) = b.stats.map(|s| s.median) else {
                continue;
            };
            let ratio = if metric == "TTFT" {
                theirs / ours
            } else {
                ours / theirs
            };
            if ratio.is_finite() {
                out.push((metric.to_owned(), other.to_owned(), ratio));
            }
        }
    }
    out
}

/// A ratio as shown: `1.23x`, bold at 1.1x and above.
pub fn ratio_cell(x: f64) -> String {
    if x >= 1.1 {
        format!("**{x:.2}x**")
    } else {
        format!("{x:.2}x")
    }
}
