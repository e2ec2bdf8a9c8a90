//! The causes of the pairing boards' losses (`boards/losses.toml`). Issue 12 asks that every
//! loss on the published board carry a one-line cause; this file is where they live, and
//! the board renders them under each pairing table. A loss is a ratio row of a current
//! receipt shown below 1.00x (ours / theirs for rates, theirs / ours for TTFT: the
//! orientation of [`render::ratios`]); a loss with no entry here is listed as such under
//! the table, `harness board` exits non-zero, and the committed-README test fails, so a
//! new loss cannot land without its cause.
//!
//! ```toml
//! [[loss]]
//! cells = ["h200-llama8b-q4_0-c4", "h200-qwen3-8b-q4_0-c4"]
//! metrics = ["decode"]
//! cause = "our 4-row step runs the tensor-core products, ..."
//! see = "research/notes/s21/README.md"
//! ```

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use gates::receipt::Receipt;
use serde::Deserialize;

use super::render;
use crate::bench::cells::Board;

/// The file under the boards folder (not a board: `cells::board_files` leaves it out).
pub const FILE: &str = "losses.toml";

/// One cause, for the listed metrics of the listed cells.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loss {
    pub cells: Vec<String>,
    /// Metric names of the ratio rows (`decode`, `TTFT`, `end-to-end`, `prefill`).
    pub metrics: Vec<String>,
    /// One line: why we lose there.
    pub cause: String,
    /// Where the evidence is (a notes file), optional.
    #[serde(default)]
    pub see: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    loss: Vec<Loss>,
}

/// The causes, keyed by (cell id, metric).
#[derive(Clone, Debug, Default)]
pub struct Causes(BTreeMap<(String, String), Loss>);

/// A ratio row below 1.00x as shown.
#[derive(Clone, Debug, PartialEq)]
pub struct LossRow {
    pub cell: String,
    pub label: String,
    pub metric: String,
    pub other: String,
    pub ratio: f64,
}

/// Whether `x` shows as a loss: below 1.00 at the two decimals the board prints.
pub fn is_loss(x: f64) -> bool {
    x < 0.995
}

impl Causes {
    /// Load `dir/losses.toml` (no file: no causes), checking that every cell it names is a
    /// cell of `boards`, that each entry names cells and metrics, and that no (cell, metric)
    /// has two causes.
    pub fn load(dir: &Path, boards: &[Board]) -> Result<Self> {
        let path = dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let f: File =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        Self::from_losses(f.loss, boards).with_context(|| format!("checking {}", path.display()))
    }

    fn from_losses(losses: Vec<Loss>, boards: &[Board]) -> Result<Self> {
        let known: std::collections::BTreeSet<&str> = boards
            .iter()
            .flat_map(|b| b.cells.iter().map(|c| c.id.as_str()))
            .collect();
        let mut m = BTreeMap::new();
        for l in losses {
            if l.cells.is_empty() || l.metrics.is_empty() || l.cause.trim().is_empty() {
                bail!("an entry needs cells, metrics and a cause: {l:?}");
            }
            if l.cause.contains('\n') {
                bail!("a cause is one line: {:?}", l.cause);
            }
            for c in &l.cells {
                if !known.contains(c.as_str()) {
                    bail!("cell {c} is on no board");
                }
                for metric in &l.metrics {
                    if m.insert((c.clone(), metric.clone()), l.clone()).is_some() {
                        bail!("cell {c}, metric {metric}: two causes");
                    }
                }
            }
        }
        Ok(Self(m))
    }

    pub fn get(&self, cell: &str, metric: &str) -> Option<&Loss> {
        self.0.get(&(cell.to_owned(), metric.to_owned()))
    }
}

/// The losses of `board`'s shown receipts (pairing receipts only), in board order.
pub fn losses(board: &Board, shown: &BTreeMap<String, &Receipt>) -> Vec<LossRow> {
    let mut out = Vec::new();
    for c in &board.cells {
        let Some(r) = shown.get(&c.id) else { continue };
        if r.kind != gates::receipt::Kind::Pair {
            continue;
        }
        for (metric, other, ratio) in render::ratios(r) {
            if is_loss(ratio) {
                out.push(LossRow {
                    cell: c.id.clone(),
                    label: c.label.clone(),
                    metric,
                    other,
                    ratio,
                });
            }
        }
    }
    out
}

/// The list under a pairing table: each loss with its cause, or "no cause recorded";
/// empty when the board shows no loss.
pub fn notes(rows: &[LossRow], causes: &Causes) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nLosses (ratio rows below 1.00x) and their causes (boards/losses.toml):\n\n",
    );
    for l in rows {
        let why = match causes.get(&l.cell, &l.metric) {
            Some(c) => match &c.see {
                Some(see) => format!("{} ({see})", c.cause.trim()),
                None => c.cause.trim().to_owned(),
            },
            None => "**no cause recorded**".to_owned(),
        };
        let _ = writeln!(
            s,
            "- {}: {} {:.2}x vs {}: {why}",
            l.label, l.metric, l.ratio, l.other
        );
    }
    s
}

/// The losses with no cause.
pub fn uncaused<'a>(rows: &'a [LossRow], causes: &Causes) -> Vec<&'a LossRow> {
    rows.iter()
        .filter(|l| causes.get(&l.cell, &l.metric).is_none())
        .collect()
}
