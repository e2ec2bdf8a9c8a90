//! `harness receipts check`: validate every `*.jsonl` file in `research/` against the
//! receipt schema (one line per file, the first broken line of each bad file).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gates::receipt::{jsonl_files, read_jsonl};

use crate::env::{EnvArgs, under};

#[derive(clap::Args, Debug)]
pub struct ReceiptsArgs {
    #[command(subcommand)]
    pub action: ReceiptsAction,
}

#[derive(clap::Subcommand, Debug)]
pub enum ReceiptsAction {
    /// Validate every research/*.jsonl file.
    Check {
        /// Receipts folder (relative to the root).
        #[arg(long, default_value = "research")]
        dir: PathBuf,
    },
}

/// Validate every file in `dir`; (files, rows, problems).
pub fn check_dir(dir: &Path) -> Result<(usize, usize, Vec<String>)> {
    let files = jsonl_files(dir).with_context(|| format!("listing {}", dir.display()))?;
    let mut rows = 0;
    let mut problems = Vec::new();
    for f in &files {
        match read_jsonl(f) {
            Ok(r) => rows += r.len(),
            Err(e) => problems.push(e.to_string()),
        }
    }
    Ok((files.len(), rows, problems))
}

pub fn run(env: &EnvArgs, args: &ReceiptsArgs) -> Result<bool> {
    let ReceiptsAction::Check { dir } = &args.action;
    let dir = under(&env.root()?, dir);
    let (files, rows, problems) = check_dir(&dir)?;
    for p in &problems {
        println!("INVALID {p}");
    }
    if problems.is_empty() {
        println!(
            "{rows} receipts in {files} file(s) under {}: all valid",
            dir.display()
        );
    }
    Ok(problems.is_empty())
}
