//! `harness promote --check`: every tuned default in `boards/defaults.toml` names the
//! receipt that justifies it; a default is current only while that receipt exists, is
//! green, and recorded the kernel identity and engine source identity of today's tree.
//! Stale defaults are listed with the command that refreshes each; exit non-zero if any.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use gates::Verdict;
use gates::identity::SourceIdentity;
use gates::receipt::read_jsonl;
use serde::Deserialize;

use crate::env::{EnvArgs, under};

#[derive(clap::Args, Debug)]
pub struct PromoteArgs {
    /// List stale defaults and exit non-zero if any (the only mode for now).
    #[arg(long)]
    pub check: bool,
    /// The defaults file (relative to the root).
    #[arg(long, default_value = "boards/defaults.toml")]
    pub defaults: PathBuf,
}

/// The receipt a default rests on.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReceiptRef {
    /// Receipt file, relative to the root (e.g. `research/bench.jsonl`).
    pub file: PathBuf,
    /// Receipt `name` (the bench cell or gate).
    pub name: String,
    /// Receipt `time`, which singles out one row.
    pub time: String,
}

/// One tuned default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TunedDefault {
    /// What is tuned, e.g. `matvec.q4_0.kernel`.
    pub name: String,
    /// The value shipped.
    pub value: String,
    pub receipt: ReceiptRef,
    /// The command that measures it again.
    pub refresh: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultsFile {
    #[serde(default, rename = "default")]
    pub defaults: Vec<TunedDefault>,
}

/// Why a default is stale, or `None` when current.
pub fn staleness(root: &Path, today: &SourceIdentity, d: &TunedDefault) -> Option<String> {
    let path = under(root, &d.receipt.file);
    let rows = match read_jsonl(&path) {
        Ok(r) => r,
        Err(e) => return Some(format!("receipt file unreadable: {e}")),
    };
    let Some(r) = rows
        .iter()
        .find(|r| r.name == d.receipt.name && r.time == d.receipt.time)
    else {
        return Some(format!(
            "no receipt {} at {} in {}",
            d.receipt.name,
            d.receipt.time,
            d.receipt.file.display()
        ));
    };
    if r.verdict != Verdict::Green {
        return Some(format!("its receipt is {}", r.verdict.label()));
    }
    if r.build.kernel_identity != today.kernel {
        return Some(format!(
            "kernels changed since its receipt (kernel identity {} -> {})",
            &r.build.kernel_identity[..12],
            &today.kernel[..12]
        ));
    }
    if r.build.engine_identity != today.engine {
        return Some(format!(
            "engine sources changed since its receipt (engine identity {} -> {})",
            &r.build.engine_identity[..12],
            &today.engine[..12]
        ));
    }
    None
}

/// Read the defaults file and check each; (default, why stale) for the stale ones, and the
/// number of defaults.
pub fn check(root: &Path, defaults: &Path) -> Result<(usize, Vec<(TunedDefault, String)>)> {
    let text = std::fs::read_to_string(defaults)
        .with_context(|| format!("reading {}", defaults.display()))?;
    let file: DefaultsFile =
        toml::from_str(&text).with_context(|| format!("parsing {}", defaults.display()))?;
    let today = SourceIdentity::of_tree(root).context("computing today's source identities")?;
    let stale = file
        .defaults
        .iter()
        .filter_map(|d| staleness(root, &today, d).map(|why| (d.clone(), why)))
        .collect();
    Ok((file.defaults.len(), stale))
}

pub fn run(env: &EnvArgs, args: &PromoteArgs) -> Result<bool> {
    if !args.check {
        bail!("only `harness promote --check` exists for now");
    }
    let root = env.root()?;
    let (n, stale) = check(&root, &under(&root, &args.defaults))?;
    for (d, why) in &stale {
        println!(
            "STALE {} = {}: {why}\n      refresh: {}",
            d.name, d.value, d.refresh
        );
    }
    if stale.is_empty() {
        println!("{n} tuned default(s), all current");
    } else {
        println!("{} of {n} tuned default(s) stale", stale.len());
    }
    Ok(stale.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gates::device::{CpuFacts, DeviceFacts};
    use gates::receipt::{Build, Kind, append};
    use gates::stamp::Stamp;

    fn stamp(ids: &SourceIdentity) -> Stamp {
        Stamp {
            time: "2026-11-29T10:00:00Z".into(),
            build: Build {
                commit: "unknown".into(),
                dirty: true,
                kernel_identity: ids.kernel.clone(),
                engine_identity: ids.engine.clone(),
                harness: "test".into(),
            },
            device: DeviceFacts {
                os: "linux".into(),
                cpu: CpuFacts {
                    model: "cpu".into(),
                    logical_cores: 1,
                },
                gpus: vec![],
            },
        }
    }

    /// A tree with a kernel, an engine source, a receipt and a default resting on it.
    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["kernels", "engine/src", "boards", "research"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(r.join("kernels/matvec.cu"), "__global__ void k() {}").unwrap();
        std::fs::write(r.join("engine/src/lib.rs"), "//! engine").unwrap();
        let ids = SourceIdentity::of_tree(r).unwrap();
        let mut rec = stamp(&ids).receipt(Kind::Gate, "matvec-tile", Verdict::Green);
        rec.arms = vec![gates::receipt::Arm {
            name: "assay".into(),
            engine: "assay-cuda".into(),
            version: "0".into(),
            flags: vec![],
            unit: None,
            samples: vec![],
            stats: None,
            roofline_fraction: None,
        }];
        append(&r.join("research/bench.jsonl"), &rec).unwrap();
        std::fs::write(
            r.join("boards/defaults.toml"),
            r#"
[[default]]
name = "matvec.q4_0.rows_per_warp"
value = "4"
refresh = "harness bench --only matvec-tile"
receipt = { file = "research/bench.jsonl", name = "matvec-tile", time = "2026-11-29T10:00:00Z" }
"#,
        )
        .unwrap();
        t
    }

    #[test]
    fn a_default_goes_stale_when_a_kernel_changes_after_its_receipt() {
        let t = tree();
        let r = t.path();
        let defaults = r.join("boards/defaults.toml");
        let (n, stale) = check(r, &defaults).unwrap();
        assert_eq!((n, stale.len()), (1, 0), "{stale:?}");
        std::fs::write(r.join("kernels/matvec.cu"), "__global__ void k() { }").unwrap();
        let (_, stale) = check(r, &defaults).unwrap();
        assert_eq!(stale.len(), 1);
        assert!(stale[0].1.contains("kernels changed"), "{}", stale[0].1);
        assert_eq!(stale[0].0.refresh, "harness bench --only matvec-tile");
    }

    #[test]
    fn engine_edits_and_missing_receipts_are_stale_too() {
        let t = tree();
        let r = t.path();
        let defaults = r.join("boards/defaults.toml");
        std::fs::write(r.join("engine/src/lib.rs"), "//! engine, edited").unwrap();
        let (_, stale) = check(r, &defaults).unwrap();
        assert!(
            stale[0].1.contains("engine sources changed"),
            "{}",
            stale[0].1
        );
        let text = std::fs::read_to_string(&defaults).unwrap();
        std::fs::write(&defaults, text.replace("10:00:00Z", "11:00:00Z")).unwrap();
        let (_, stale) = check(r, &defaults).unwrap();
        assert!(stale[0].1.contains("no receipt"), "{}", stale[0].1);
    }

    #[test]
    fn the_committed_defaults_file_parses() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text = std::fs::read_to_string(root.join("boards/defaults.toml")).unwrap();
        let _: DefaultsFile = toml::from_str(&text).unwrap();
    }
}
