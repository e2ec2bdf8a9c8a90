//! Options every subcommand shares (repository root, models folder, git state override)
//! and what is derived from them: the root found from the working directory, the models
//! folder, the receipt stamp.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use gates::stamp::{GitOverride, Stamp};

/// Shared options.
#[derive(clap::Args, Debug, Clone)]
pub struct EnvArgs {
    /// Repository root (default: the nearest folder above the working directory holding
    /// `kernels/` and `engine/`).
    #[arg(long, global = true, env = "ASSAY_ROOT")]
    pub root: Option<PathBuf>,
    /// Folder of the real test models.
    #[arg(long, global = true, env = "ASSAY_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Commit to record when the tree is not a git checkout (GPU machine staging).
    #[arg(long, global = true, env = "ASSAY_GIT_COMMIT")]
    pub git_commit: Option<String>,
    /// Dirty flag to record with --git-commit.
    #[arg(long, global = true, env = "ASSAY_GIT_DIRTY")]
    pub git_dirty: Option<bool>,
}

/// The harness version and build profile recorded in receipts.
pub fn harness_version() -> String {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    format!("{} {profile}", env!("CARGO_PKG_VERSION"))
}

fn is_root(p: &Path) -> bool {
    p.join("kernels").is_dir() && p.join("engine").is_dir() && p.join("Cargo.toml").is_file()
}

impl EnvArgs {
    /// The repository root.
    pub fn root(&self) -> Result<PathBuf> {
        if let Some(r) = &self.root {
            if !is_root(r) {
                bail!("{} is not an Assay repository root", r.display());
            }
            return Ok(r.clone());
        }
        let cwd = std::env::current_dir().context("reading the working directory")?;
        cwd.ancestors()
            .find(|p| is_root(p))
            .map(Path::to_owned)
            .with_context(|| {
                format!(
                    "no Assay repository root above {} (pass --root)",
                    cwd.display()
                )
            })
    }

    /// The models folder: --models-dir / ASSAY_MODELS_DIR, else ~/.cache/assay/models.
    pub fn models_dir(&self) -> Result<PathBuf> {
        if let Some(d) = &self.models_dir {
            return Ok(d.clone());
        }
        let home = std::env::var_os("HOME").context("HOME is not set (pass --models-dir)")?;
        Ok(PathBuf::from(home).join(".cache/assay/models"))
    }

    /// Time, build identity and device of this run.
    pub fn stamp(&self, root: &Path) -> Result<Stamp> {
        let git = GitOverride {
            commit: self.git_commit.clone(),
            dirty: self.git_dirty,
        };
        Stamp::capture(root, &harness_version(), &git)
            .with_context(|| format!("computing the source identities of {}", root.display()))
    }
}

/// `p` if absolute, else `root/p`.
pub fn under(root: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        root.join(p)
    }
}
