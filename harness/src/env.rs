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

    /// [`Self::stamp`] for a run that measures this binary (bench, report): the kernels
    /// embedded in the binary must be the tree's, or every receipt row would carry the
    /// identity of sources that did not run (a binary staged from another checkout).
    pub fn measurement_stamp(&self, root: &Path) -> Result<Stamp> {
        let stamp = self.stamp(root)?;
        check_binary_kernels(
            &stamp.build.kernel_identity,
            &engine::cuda::kernel_identity(),
        )?;
        Ok(stamp)
    }
}

/// Refuse when the tree's kernel identity is not the one compiled into this binary.
pub fn check_binary_kernels(tree: &str, binary: &str) -> Result<()> {
    if tree != binary {
        bail!(
            "this harness binary embeds kernels {} but the tree it runs in holds kernels {}: \
             its receipts would name sources that did not run; rebuild the binary from this \
             tree or run it in the checkout it was built from",
            &binary[..binary.len().min(12)],
            &tree[..tree.len().min(12)]
        );
    }
    Ok(())
}

/// `p` if absolute, else `root/p`.
pub fn under(root: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        root.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_with_other_kernels_than_the_tree_is_refused() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let e = check_binary_kernels(&a, &b).unwrap_err().to_string();
        assert!(
            e.contains("bbbbbbbbbbbb") && e.contains("aaaaaaaaaaaa"),
            "{e}"
        );
        assert!(check_binary_kernels(&a, &a).is_ok());
    }

    #[test]
    fn this_binary_matches_this_repository() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let tree = gates::identity::SourceIdentity::of_tree(&root).unwrap();
        assert!(check_binary_kernels(&tree.kernel, &engine::cuda::kernel_identity()).is_ok());
    }
}
