//! The part of a receipt that is the same for every row of one run: time, build identity
//! and device facts, captured once and stamped on each row.

use std::path::Path;

use crate::Verdict;
use crate::clock::now_utc;
use crate::device::{DeviceFacts, probe};
use crate::identity::{IdentityError, SourceIdentity, git_state};
use crate::receipt::{Build, Kind, Receipt, SCHEMA_VERSION, Workload};

/// Time, build and device of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamp {
    pub time: String,
    pub build: Build,
    pub device: DeviceFacts,
}

/// The git state to record when the tree is not a checkout (a copy on the GPU machine):
/// the binary passes what the staging step recorded.
#[derive(Clone, Debug, Default)]
pub struct GitOverride {
    pub commit: Option<String>,
    pub dirty: Option<bool>,
}

impl Stamp {
    /// Capture the identities of the tree at `root`, its git state and this machine.
    pub fn capture(root: &Path, harness: &str, git: &GitOverride) -> Result<Stamp, IdentityError> {
        let ids = SourceIdentity::of_tree(root)?;
        let (commit, dirty) = match (&git.commit, git_state(root)) {
            (Some(c), _) => (c.clone(), git.dirty.unwrap_or(true)),
            (None, Some((c, d))) => (c, git.dirty.unwrap_or(d)),
            (None, None) => ("unknown".to_owned(), true),
        };
        Ok(Stamp {
            time: now_utc(),
            build: Build {
                commit,
                dirty,
                kernel_identity: ids.kernel,
                engine_identity: ids.engine,
                harness: harness.to_owned(),
            },
            device: probe(),
        })
    }

    /// A receipt row of `kind` named `name` with this stamp, no model, no arms, and the
    /// given verdict; callers fill in the rest.
    pub fn receipt(&self, kind: Kind, name: &str, verdict: Verdict) -> Receipt {
        Receipt {
            schema: SCHEMA_VERSION,
            kind,
            name: name.to_owned(),
            time: self.time.clone(),
            build: self.build.clone(),
            device: self.device.clone(),
            model: None,
            workload: Workload::default(),
            arms: Vec::new(),
            roofline: None,
            gemm_ref: None,
            target_tok_s: None,
            verdict,
            detail: Vec::new(),
            wall_s: 0.0,
        }
    }

    /// Whether a receipt was measured on the sources this stamp was taken from.
    pub fn is_current(&self, r: &Receipt) -> bool {
        r.build.kernel_identity == self.build.kernel_identity
            && r.build.engine_identity == self.build.engine_identity
    }
}
