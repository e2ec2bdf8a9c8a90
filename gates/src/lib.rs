//! Gates: each gate is a function that runs a check and returns a [`Verdict`].
//!
//! The gate battery itself (kernel-check, argmax parity, speculative self-consistency,
//! batch/graph/cache identity) arrives with the CUDA backend and harness issues.

pub mod decode_check;
pub mod kernel_check;

use serde::Serialize;

/// The outcome of one gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// Every check passed.
    Green,
    /// At least one check failed; each string says which and why.
    Red { failures: Vec<String> },
    /// The gate could not run here (e.g. no GPU); the string says why.
    Skipped { reason: String },
}
