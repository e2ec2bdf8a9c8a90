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
            eprintln!("error: {}", error_text(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes joined by ": ", as `{:#}` would, but a cause whose text the
/// message before it already ends with is left out: the engine's errors carry their source
/// in their own text (`thiserror` `{0}`), so `{:#}` printed it twice.
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !last.is_empty() && last.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_text;

    /// An error that prints its source in its own text, as the engine's do.
    #[derive(Debug)]
    struct Outer(Inner);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "not a GGUF file: {}", self.0)
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bad magic [00, 01]")
        }
    }
    impl std::error::Error for Inner {}

    #[test]
    fn a_cause_repeated_in_its_parent_is_printed_once() {
        let e = anyhow::Error::new(Outer(Inner)).context("reading /m/x.gguf");
        assert_eq!(
            format!("{e:#}"),
            "reading /m/x.gguf: not a GGUF file: bad magic [00, 01]: bad magic [00, 01]"
        );
        assert_eq!(
            error_text(&e),
            "reading /m/x.gguf: not a GGUF file: bad magic [00, 01]"
        );
    }

    #[test]
    fn distinct_causes_are_all_kept() {
        let e = anyhow::anyhow!("disk full")
            .context("writing out.gguf")
            .context("requant");
        assert_eq!(error_text(&e), "requant: writing out.gguf: disk full");
    }
}
