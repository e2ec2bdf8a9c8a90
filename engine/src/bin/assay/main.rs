//! `assay`: the engine's command line. One module per subcommand.

mod common;
mod generate;
mod inspect;
mod keys;
mod serve;
mod spec_cli;
mod tokenize;

use clap::{Parser, Subcommand};

/// Assay: an LLM inference engine whose every number carries a receipt.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Describe a model file: architecture, hyper-parameters, tensors, quant census.
    Inspect(inspect::Args),
    /// Tokenize text (or decode ids) with a model's own tokenizer.
    Tokenize(tokenize::Args),
    /// Generate text from a prompt.
    Generate(generate::Args),
    /// Serve models over an OpenAI-compatible HTTP API.
    Serve(serve::Args),
    /// Manage API keys for `assay serve`.
    Keys(keys::Args),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::Tokenize(a) => tokenize::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Keys(a) => keys::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
