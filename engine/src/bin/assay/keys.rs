//! `assay keys new --file FILE`: make an API key, print it once, append its SHA-256 hash to
//! FILE (the file `assay serve --api-keys` reads). The key itself is stored nowhere.

use std::path::PathBuf;

use anyhow::Context;

/// Arguments of `assay keys`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(clap::Subcommand)]
pub enum KeysCommand {
    /// Make a new key: print it once and store its hash in FILE.
    New {
        /// The keys file (created when missing; the hash is appended).
        #[arg(long)]
        file: PathBuf,
        /// A label written after the hash.
        #[arg(long, default_value = "")]
        label: String,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        KeysCommand::New { file, label } => {
            let key = engine::server::auth::add_new_key(&file, &label)
                .with_context(|| format!("adding a key to {}", file.display()))?;
            println!("{key}");
            eprintln!(
                "assay keys: stored the key's SHA-256 in {}; the key is shown only this once",
                file.display()
            );
            Ok(())
        }
    }
}
