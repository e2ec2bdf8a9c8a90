//! `assay tokenize` (being built; see the issue that introduces it).

/// Arguments of `assay tokenize`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`assay tokenize` is not implemented yet")
}
