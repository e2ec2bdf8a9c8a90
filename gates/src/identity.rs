//! Source identities recorded in every receipt, computed from a source tree on disk (so
//! that a test can point them at a copy of the tree and change one byte):
//!
//! * **kernel identity** — sha256 over every `kernels/**/*.cu` / `*.cuh` file, sorted by
//!   path relative to `kernels/`, each hashed as `path \0 len(u64 LE) bytes`. This is the
//!   same scheme as `engine::cuda::kernel_identity` over the embedded sources (a test here
//!   checks the two agree on this repository), so a receipt written by the GPU path and one
//!   written here agree.
//! * **engine identity** — the same hash over every file under `engine/src/` and `kernels/`
//!   (paths relative to the root): what the measured binary was built from.
//! * git commit and dirty flag.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Errors computing an identity.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} has no kernel sources (is it the repository root?)")]
    NoKernels(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IdentityError + '_ {
    move |source| IdentityError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Every regular file under `dir` (recursively) accepted by `keep`, as (path relative to
/// `base` with `/` separators, absolute path). Hidden entries are skipped.
fn files_under(
    base: &Path,
    dir: &Path,
    keep: &dyn Fn(&str) -> bool,
    out: &mut Vec<(String, PathBuf)>,
) -> Result<(), IdentityError> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let ty = entry.file_type().map_err(io(&path))?;
        if ty.is_dir() {
            files_under(base, &path, keep, out)?;
        } else if ty.is_file() && keep(&name) {
            let rel = path
                .strip_prefix(base)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((rel, path));
        }
    }
    Ok(())
}

fn hash_files(mut files: Vec<(String, PathBuf)>) -> Result<String, IdentityError> {
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (rel, path) in &files {
        let bytes = std::fs::read(path).map_err(io(path))?;
        h.update(rel.as_bytes());
        h.update([0u8]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(hex::encode(h.finalize()))
}

fn is_kernel_source(name: &str) -> bool {
    name.ends_with(".cu") || name.ends_with(".cuh")
}

/// The kernel identity of the tree at `root`.
pub fn kernel_identity(root: &Path) -> Result<String, IdentityError> {
    let dir = root.join("kernels");
    let mut files = Vec::new();
    files_under(&dir, &dir, &is_kernel_source, &mut files)?;
    if files.is_empty() {
        return Err(IdentityError::NoKernels(root.to_owned()));
    }
    hash_files(files)
}

/// The engine source identity of the tree at `root` (`engine/src/**` and `kernels/**`).
pub fn engine_identity(root: &Path) -> Result<String, IdentityError> {
    let mut files = Vec::new();
    for sub in ["engine/src", "kernels"] {
        files_under(root, &root.join(sub), &|_| true, &mut files)?;
    }
    hash_files(files)
}

/// Both identities of the tree at `root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceIdentity {
    pub kernel: String,
    pub engine: String,
}

impl SourceIdentity {
    /// Compute both identities of the tree at `root`.
    pub fn of_tree(root: &Path) -> Result<Self, IdentityError> {
        Ok(Self {
            kernel: kernel_identity(root)?,
            engine: engine_identity(root)?,
        })
    }
}

/// The git state of a tree: `None` when `root` is not a git checkout (or git is absent),
/// e.g. a copy of the working tree on the GPU machine.
pub fn git_state(root: &Path) -> Option<(String, bool)> {
    let run = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let commit = run(&["rev-parse", "HEAD"])?.trim().to_owned();
    let dirty = !run(&["status", "--porcelain"])?.trim().is_empty();
    Some((commit, dirty))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("kernels/common")).unwrap();
        std::fs::create_dir_all(r.join("engine/src/quant")).unwrap();
        std::fs::write(r.join("kernels/a.cu"), "kernel a").unwrap();
        std::fs::write(r.join("kernels/common/c.cuh"), "common").unwrap();
        std::fs::write(r.join("kernels/README.md"), "not a kernel").unwrap();
        std::fs::write(r.join("engine/src/lib.rs"), "pub mod quant;").unwrap();
        std::fs::write(r.join("engine/src/quant/mod.rs"), "").unwrap();
        t
    }

    #[test]
    fn identities_follow_every_source_byte() {
        let t = tree();
        let r = t.path();
        let before = SourceIdentity::of_tree(r).unwrap();
        assert_eq!(before.kernel.len(), 64);
        assert_ne!(before.kernel, before.engine);
        // A README next to the kernels is not a kernel source.
        std::fs::write(r.join("kernels/README.md"), "changed").unwrap();
        let readme = SourceIdentity::of_tree(r).unwrap();
        assert_eq!(readme.kernel, before.kernel);
        // An engine edit moves the engine identity only.
        std::fs::write(r.join("engine/src/quant/mod.rs"), "//").unwrap();
        let engine_edit = SourceIdentity::of_tree(r).unwrap();
        assert_eq!(engine_edit.kernel, before.kernel);
        assert_ne!(engine_edit.engine, readme.engine);
        // A kernel edit moves both.
        std::fs::write(r.join("kernels/common/c.cuh"), "common!").unwrap();
        let kernel_edit = SourceIdentity::of_tree(r).unwrap();
        assert_ne!(kernel_edit.kernel, engine_edit.kernel);
        assert_ne!(kernel_edit.engine, engine_edit.engine);
    }

    #[test]
    fn kernel_identity_matches_the_scheme_by_hand() {
        let t = tree();
        let mut h = Sha256::new();
        for (p, text) in [("a.cu", "kernel a"), ("common/c.cuh", "common")] {
            h.update(p.as_bytes());
            h.update([0u8]);
            h.update((text.len() as u64).to_le_bytes());
            h.update(text.as_bytes());
        }
        assert_eq!(
            kernel_identity(t.path()).unwrap(),
            hex::encode(h.finalize())
        );
    }

    #[test]
    fn the_repository_identity_equals_the_engines_embedded_one() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert_eq!(
            kernel_identity(&root).unwrap(),
            engine::cuda::kernel_identity()
        );
    }

    #[test]
    fn a_tree_without_kernels_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("kernels")).unwrap();
        assert!(matches!(
            kernel_identity(t.path()),
            Err(IdentityError::NoKernels(_))
        ));
        assert!(kernel_identity(&t.path().join("nope")).is_err());
    }
}
