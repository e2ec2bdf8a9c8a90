//! `assay inspect` (being built; see the issue that introduces it).

/// Arguments of `assay inspect`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`assay inspect` is not implemented yet")
}
