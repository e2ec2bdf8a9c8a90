//! `assay generate` (being built; see the issue that introduces it).

/// Arguments of `assay generate`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`assay generate` is not implemented yet")
}
