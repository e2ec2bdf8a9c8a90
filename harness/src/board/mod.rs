//! `harness board`: regenerate the README's boards (between marker comments) and their SVG
//! plots in `boards/` from the receipts in `research/`. Each cell shows its newest receipt
//! measured on today's sources, or `stale` — never an old number. Regeneration is a pure
//! function of (receipts, board definitions, README, today's identities), so running it
//! twice changes no byte; `--check` exits non-zero when the committed files differ.
//!
//! Files: [`select`] (polars: which receipt each cell shows), [`render`] (tables),
//! [`plot`] (SVG), [`readme`] (marker regions), [`losses`] (the causes of pairing losses).

pub mod losses;
pub mod plot;
pub mod readme;
pub mod render;
pub mod select;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gates::identity::SourceIdentity;

use crate::bench::cells::load_boards;
use crate::env::{EnvArgs, under};

#[derive(clap::Args, Debug)]
pub struct BoardArgs {
    /// Write nothing; exit non-zero when the README or a plot would change.
    #[arg(long)]
    pub check: bool,
    /// The README to update (relative to the root).
    #[arg(long, default_value = "README.md")]
    pub readme: PathBuf,
}

/// Where a regeneration reads and writes.
#[derive(Clone, Debug)]
pub struct BoardPaths {
    pub readme: PathBuf,
    pub receipts: PathBuf,
    pub boards: PathBuf,
}

/// The files a regeneration produces.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    pub readme: String,
    /// (path, SVG text) per board the README shows.
    pub plots: Vec<(PathBuf, String)>,
    /// Boards whose markers the README lacks.
    pub missing_markers: Vec<String>,
    /// README regions that no board file defines (a board removed, or a misspelt name):
    /// their text would stay as it is, never regenerated again.
    pub orphan_regions: Vec<String>,
    /// (board, cells shown, cells stale); red cells (newest current receipt red) count as
    /// neither: see `red`.
    pub counts: Vec<(String, usize, usize)>,
    /// (board, cell id) of every cell shown red.
    pub red: Vec<(String, String)>,
    /// (board, loss) of every loss shown without a cause in boards/losses.toml.
    pub uncaused: Vec<(String, losses::LossRow)>,
}

/// Regenerate everything from the files at `paths`, judging currentness against `today`.
pub fn regenerate(paths: &BoardPaths, today: &SourceIdentity) -> Result<Generated> {
    // Pairing boards (cells with `vs`, boards/h200.toml) render the same way, with a ratio
    // row per metric (render::ratio_rows).
    let boards = load_boards(&paths.boards)?;
    let causes = losses::Causes::load(&paths.boards, &boards)?;
    let all = select::load_all(&paths.receipts)?;
    let newest = select::newest_current(&paths.receipts, today)?;
    let newest_red = select::newest_current_with(&paths.receipts, today, "red")?;
    let (shown, red) =
        select::split_red(select::pick(&all, &newest), select::pick(&all, &newest_red));
    // What each cell last measured on any sources, named on its stale row: the newest
    // green receipt, or the newest red one where that is newer (both kept in one map).
    let (last_green, last_red) = select::split_red(
        select::pick(&all, &select::newest_any(&paths.receipts)?),
        select::pick(&all, &select::newest_any_red(&paths.receipts)?),
    );
    let mut last = last_green;
    last.extend(last_red);
    let mut text = std::fs::read_to_string(&paths.readme)
        .with_context(|| format!("reading {}", paths.readme.display()))?;
    let mut plots = Vec::new();
    let mut missing = Vec::new();
    let mut counts = Vec::new();
    let mut red_cells = Vec::new();
    let mut uncaused = Vec::new();
    for b in &boards {
        // A receipt measured with other server flags than the cell names today is not the
        // cell's (its flags changed since): the cell is stale.
        let mine = of_board(b, &shown);
        let mine_red = of_board(b, &red);
        counts.push((
            b.name.clone(),
            mine.len(),
            b.cells.len() - mine.len() - mine_red.len(),
        ));
        red_cells.extend(mine_red.keys().map(|c| (b.name.clone(), c.clone())));
        let svg_name = format!("{}.svg", b.name);
        let svg_rel = format!("boards/{svg_name}");
        let mine_last = of_board(b, &last);
        let loss_rows = losses::losses(b, &mine);
        uncaused.extend(
            losses::uncaused(&loss_rows, &causes)
                .into_iter()
                .map(|l| (b.name.clone(), l.clone())),
        );
        let notes = losses::notes(&loss_rows, &causes);
        let body = render::board_markdown(b, &mine, &mine_red, &mine_last, &svg_rel, &notes);
        match readme::replace_region(&text, &b.name, &body)? {
            Some(t) => text = t,
            None => missing.push(b.name.clone()),
        }
        if !missing.contains(&b.name) {
            plots.push((
                paths.boards.join(svg_name),
                plot::board_svg(b, &mine, &mine_red)?,
            ));
        }
    }
    let orphan_regions = readme::region_names(&text)
        .into_iter()
        .filter(|n| !boards.iter().any(|b| &b.name == n))
        .collect();
    Ok(Generated {
        readme: text,
        plots,
        missing_markers: missing,
        orphan_regions,
        counts,
        red: red_cells,
        uncaused,
    })
}

/// The cells of `cells` that the board shows a result for (a green receipt, or a red one
/// newer than any green: see [`select::split_red`]) measured as each is defined today
/// ([`measured_as_defined`]), with the receipt's time: what `harness pair --plan` /
/// `--budget-s` leave out as done.
pub fn done_cells(
    research: &Path,
    today: &SourceIdentity,
    cells: &[&crate::bench::cells::Cell],
) -> Result<std::collections::BTreeMap<String, String>> {
    let all = select::load_all(research)?;
    let (green, red) = select::split_red(
        select::pick(&all, &select::newest_current(research, today)?),
        select::pick(&all, &select::newest_current_with(research, today, "red")?),
    );
    Ok(cells
        .iter()
        .filter_map(|c| {
            green
                .get(&c.id)
                .or_else(|| red.get(&c.id))
                .filter(|r| measured_as_defined(c, r))
                .map(|r| (c.id.clone(), r.time.clone()))
        })
        .collect())
}

/// The receipts of `board`'s cells in `m` that were measured as the cell is defined today
/// ([`measured_as_defined`]).
fn of_board<'a>(
    board: &crate::bench::cells::Board,
    m: &std::collections::BTreeMap<String, &'a gates::receipt::Receipt>,
) -> std::collections::BTreeMap<String, &'a gates::receipt::Receipt> {
    board
        .cells
        .iter()
        .filter_map(|c| {
            m.get(&c.id)
                .filter(|r| measured_as_defined(c, r))
                .map(|r| (c.id.clone(), *r))
        })
        .collect()
}

/// Whether receipt `r` ran our server with the flags `cell` names today: the flags of its
/// `assay serve` arms (engine `assay-serve-*`: pairing receipts, and the bench receipts of
/// serve cells) after the harness's own (`bin=...`, then `serve_load::serve_flags`'s
/// `--backend`, `--ctx`, `--prefix-cache-entries`, `--max-queue` and, since session 19,
/// `--max-batch-tokens` pairs: settings recorded, not part of a cell's definition) are
/// exactly the cell's `serve_flags` (for a speculative cell, its `--spec` flags then
/// `serve_flags`: they must end the list). Receipts with no such arm always pass.
///
/// And the competitor's: a llama-server arm counts only if it ran with exactly llama-server's
/// pairing settings of today ([`crate::bench::llama_server::PAIR_TUNING`]) after its base
/// flags, so that the board never shows llama-server below the settings we call its best.
pub fn measured_as_defined(cell: &crate::bench::cells::Cell, r: &gates::receipt::Receipt) -> bool {
    let tuning = crate::bench::llama_server::PAIR_TUNING;
    let theirs_ok = r
        .arms
        .iter()
        .filter(|a| a.engine == "llama-server")
        .all(|a| {
            crate::bench::llama_server::pair_tuning_of(&a.flags)
                .is_some_and(|t| t.iter().map(String::as_str).eq(tuning.iter().copied()))
        });
    theirs_ok
        && r.arms
            .iter()
            .filter(|a| a.engine.starts_with("assay-serve"))
            .all(|a| {
                let mut f: &[String] = &a.flags;
                if f.first().is_some_and(|x| x.starts_with("bin=")) {
                    f = &f[1..];
                }
                for key in [
                    "--backend",
                    "--ctx",
                    "--prefix-cache-entries",
                    "--max-queue",
                    "--max-batch-tokens",
                ] {
                    if f.first().map(String::as_str) == Some(key) && f.len() >= 2 {
                        f = &f[2..];
                    }
                }
                if cell.spec.is_some() {
                    f.ends_with(&cell.serve_flags)
                        && !f[..f.len() - cell.serve_flags.len()]
                            .iter()
                            .any(|x| x == "--batched-decode" || x == "--mmv")
                } else {
                    f == cell.serve_flags.as_slice()
                }
            })
}

fn differs(path: &Path, text: &str) -> bool {
    std::fs::read_to_string(path)
        .map(|t| t != text)
        .unwrap_or(true)
}

pub fn run(env: &EnvArgs, args: &BoardArgs) -> Result<bool> {
    let root = env.root()?;
    let paths = BoardPaths {
        readme: under(&root, &args.readme),
        receipts: root.join("research"),
        boards: root.join("boards"),
    };
    let today = SourceIdentity::of_tree(&root).context("computing today's source identities")?;
    let g = regenerate(&paths, &today)?;
    for (b, shown, stale) in &g.counts {
        let red: Vec<&str> = g
            .red
            .iter()
            .filter(|(rb, _)| rb == b)
            .map(|(_, c)| c.as_str())
            .collect();
        if red.is_empty() {
            println!("board {b}: {shown} cell(s) with a current receipt, {stale} stale");
        } else {
            println!(
                "board {b}: {shown} cell(s) with a current receipt, {} red ({}), {stale} stale",
                red.len(),
                red.join(", ")
            );
        }
    }
    for b in &g.missing_markers {
        let (begin, end) = readme::markers(b);
        println!(
            "note: {} has no region for board {b}; add `{begin}` and `{end}`",
            paths.readme.display()
        );
    }
    for b in &g.orphan_regions {
        println!(
            "error: {} has a region for board {b}, which no file under {} defines (remove the region, or restore the board)",
            paths.readme.display(),
            paths.boards.display()
        );
    }
    if !g.orphan_regions.is_empty() {
        return Ok(false);
    }
    for (b, l) in &g.uncaused {
        println!(
            "error: board {b}: {} {} {:.2}x vs {} is a loss with no cause in {}/{} (add a one-line cause)",
            l.cell,
            l.metric,
            l.ratio,
            l.other,
            paths.boards.display(),
            losses::FILE
        );
    }
    let mut changed = Vec::new();
    if differs(&paths.readme, &g.readme) {
        changed.push(paths.readme.clone());
    }
    for (p, svg) in &g.plots {
        if differs(p, svg) {
            changed.push(p.clone());
        }
    }
    if args.check {
        for p in &changed {
            println!("out of date: {} (run `harness board`)", p.display());
        }
        if changed.is_empty() {
            println!("boards up to date");
        }
        return Ok(changed.is_empty() && g.uncaused.is_empty());
    }
    std::fs::write(&paths.readme, &g.readme)
        .with_context(|| format!("writing {}", paths.readme.display()))?;
    for (p, svg) in &g.plots {
        std::fs::write(p, svg).with_context(|| format!("writing {}", p.display()))?;
    }
    println!("{} file(s) changed", changed.len());
    Ok(g.uncaused.is_empty())
}

#[cfg(test)]
#[path = "board_tests.rs"]
mod tests;
