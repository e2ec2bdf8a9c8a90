//! `harness`: the gate runner, benchmarks, pairings, boards and reports.
//!
//! Its subcommands arrive with the harness issue; for now it only identifies itself.

use clap::Parser;

/// Assay's measurement and gate harness.
#[derive(Parser)]
#[command(version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
