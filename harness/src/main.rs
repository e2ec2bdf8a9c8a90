//! `harness`: the gate runner, benchmarks, boards, reports, promotion and synthetic
//! checkpoints. This file is only the clap dispatcher: one module per subcommand.

mod bench;
mod board;
mod env;
mod gate;
mod pair;
mod progress;
mod promote;
mod receipts;
mod report;
mod requant;
mod synth;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Assay's measurement and gate harness.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    env: env::EnvArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gate battery on the hardware present; one receipt row per gate.
    Gate(gate::GateArgs),
    /// Write a synthetic checkpoint with a real model's exact shapes.
    Synth(synth::SynthArgs),
    /// Re-quantize a GGUF checkpoint's matrices to one format (e.g. a Q4_0 draft model).
    Requant(requant::RequantArgs),
    /// Write a tokenizer donor for `synth` without tensors (the donor's metadata only).
    SynthDonor(synth::donor::SynthDonorArgs),
    /// Run the bench cells of boards/*.toml; one receipt row per cell.
    Bench(bench::BenchArgs),
    /// Pair our server with a competitor's on the same model, interleaved (A B A B).
    Pair(pair::PairArgs),
    /// Regenerate the README boards and plots from research/*.jsonl.
    Board(board::BoardArgs),
    /// Write a hardware validation report (Markdown).
    Report(report::ReportArgs),
    /// Check that every tuned default in boards/defaults.toml has a current receipt.
    Promote(promote::PromoteArgs),
    /// Validate receipts.
    Receipts(receipts::ReceiptsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Gate(a) => gate::run(&cli.env, &a),
        Command::Synth(a) => synth::run(&cli.env, &a),
        Command::Requant(a) => requant::run(&cli.env, &a),
        Command::SynthDonor(a) => synth::donor::run(&cli.env, &a),
        Command::Bench(a) => bench::run(&cli.env, &a),
        Command::Pair(a) => pair::run(&cli.env, &a),
        Command::Board(a) => board::run(&cli.env, &a),
        Command::Report(a) => report::run(&cli.env, &a),
        Command::Promote(a) => promote::run(&cli.env, &a),
        Command::Receipts(a) => receipts::run(&cli.env, &a),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
