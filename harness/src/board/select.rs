//! Which receipt each cell shows: read every `research/*.jsonl` with polars (lazy, JSON
//! lines), keep green bench / pair rows measured on today's sources (kernel identity and
//! engine identity both equal), and take the newest per cell. The full rows are then
//! looked up in the serde-validated receipts, so what is rendered has passed the schema.
//! A cell whose newest current receipt is red (a pairing whose arms disagree) shows that
//! red receipt's failures instead of an older green one ([`split_red`]): a failure is never
//! hidden behind an earlier success, nor behind `stale`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use gates::identity::SourceIdentity;
use gates::receipt::{Receipt, jsonl_files, read_jsonl};
use polars::prelude::{
    DataType, LazyFileListReader, LazyFrame, LazyJsonLineReader, PlRefPath, UnionArgs, col, concat,
    lit,
};

/// The receipt files of `dir`, validated (a board never renders an invalid receipt).
pub fn load_all(dir: &Path) -> Result<Vec<Receipt>> {
    let mut all = Vec::new();
    for f in jsonl_files(dir)? {
        all.extend(read_jsonl(&f)?);
    }
    Ok(all)
}

/// The columns the selection needs, from one JSONL file.
fn scan(path: &Path) -> Result<LazyFrame> {
    let p = path.to_string_lossy().into_owned();
    let lf = LazyJsonLineReader::new(PlRefPath::new(p.as_str()))
        .with_infer_schema_length(None)
        .finish()
        .with_context(|| format!("scanning {}", path.display()))?;
    let field = |s: &str, f: &str| col(s).struct_().field_by_name(f).cast(DataType::String);
    Ok(lf.select([
        col("kind").cast(DataType::String),
        col("name").cast(DataType::String),
        col("time").cast(DataType::String),
        field("build", "kernel_identity").alias("kernel"),
        field("build", "engine_identity").alias("engine"),
        field("verdict", "status").alias("status"),
    ]))
}

/// For each cell name, the time of its newest current green bench/pair receipt.
pub fn newest_current(dir: &Path, today: &SourceIdentity) -> Result<BTreeMap<String, String>> {
    newest_current_with(dir, today, "green")
}

/// For each cell name, the time of its newest current bench/pair receipt whose verdict is
/// `status` (`green`, `red`).
pub fn newest_current_with(
    dir: &Path,
    today: &SourceIdentity,
    status: &str,
) -> Result<BTreeMap<String, String>> {
    newest_of(dir, Some(today), status)
}

/// For each cell name, the time of its newest green bench/pair receipt measured on any
/// sources: what a stale cell last measured ([`crate::board::render`] names it, marked stale,
/// so that a loss does not vanish from the board when the engine changes).
pub fn newest_any(dir: &Path) -> Result<BTreeMap<String, String>> {
    newest_of(dir, None, "green")
}

/// [`newest_any`] for red receipts: a stale cell whose last receipt of other sources was
/// red says so ([`split_red`] decides between the two as for current receipts).
pub fn newest_any_red(dir: &Path) -> Result<BTreeMap<String, String>> {
    newest_of(dir, None, "red")
}

fn newest_of(
    dir: &Path,
    today: Option<&SourceIdentity>,
    status: &str,
) -> Result<BTreeMap<String, String>> {
    let files = jsonl_files(dir)?;
    let mut frames = Vec::new();
    for f in &files {
        if std::fs::metadata(f).map(|m| m.len() > 0).unwrap_or(false) {
            frames.push(scan(f)?);
        }
    }
    let mut out = BTreeMap::new();
    if frames.is_empty() {
        return Ok(out);
    }
    let df = concat(frames, UnionArgs::default())
        .context("joining the receipt files")?
        .filter({
            let kind_status = (col("kind").eq(lit("bench")).or(col("kind").eq(lit("pair"))))
                .and(col("status").eq(lit(status)));
            match today {
                Some(t) => kind_status
                    .and(col("kernel").eq(lit(t.kernel.as_str())))
                    .and(col("engine").eq(lit(t.engine.as_str()))),
                None => kind_status,
            }
        })
        .group_by([col("name")])
        .agg([col("time").max().alias("time")])
        .collect()
        .context("selecting the newest current receipts")?;
    let names = df.column("name")?.str()?;
    let times = df.column("time")?.str()?;
    for (n, t) in names.iter().zip(times.iter()) {
        if let (Some(n), Some(t)) = (n, t) {
            out.insert(n.to_owned(), t.to_owned());
        }
    }
    Ok(out)
}

/// The receipt each cell shows: the last row (in file order) with the selected name and
/// time.
pub fn pick<'a>(
    all: &'a [Receipt],
    newest: &BTreeMap<String, String>,
) -> BTreeMap<String, &'a Receipt> {
    let mut out = BTreeMap::new();
    for r in all {
        if newest.get(&r.name) == Some(&r.time)
            && matches!(
                r.kind,
                gates::receipt::Kind::Bench | gates::receipt::Kind::Pair
            )
        {
            out.insert(r.name.clone(), r);
        }
    }
    out
}

/// Split the cells between their green receipt (`green`, from [`pick`] over the newest
/// current green times) and their red one (`red`, the same over the red times): a cell
/// whose red receipt is newer than its green one (or that has no green one) is red, and
/// its green receipt is not shown; an older red receipt is superseded by the green one.
pub fn split_red<'a>(
    mut green: BTreeMap<String, &'a Receipt>,
    red: BTreeMap<String, &'a Receipt>,
) -> (BTreeMap<String, &'a Receipt>, BTreeMap<String, &'a Receipt>) {
    let mut out = BTreeMap::new();
    for (name, r) in red {
        // RFC 3339 UTC times of one format compare as strings.
        if green.get(&name).is_none_or(|g| r.time > g.time) {
            green.remove(&name);
            out.insert(name, r);
        }
    }
    (green, out)
}
