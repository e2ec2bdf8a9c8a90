//! Architectures, written once as programs.
//!
//! Owns: the [`Program`] representation (typed ops over named weights and buffers, see
//! [`program`]), the shared building blocks the families are written against
//! ([`blocks`]), hyper-parameter reading ([`config`]), one file per family, and the
//! registry that maps `general.architecture` to a family.
//!
//! Adding a family = one file here + one line in [`FAMILIES`] + one fixture test.

pub mod blocks;
pub mod config;
pub mod gemma3;
pub mod llama;
pub mod program;
pub mod qwen2;
pub mod qwen3;
pub mod synthetic;
mod validate;

pub use program::{
    Activation, AttentionSpec, BufId, BufSpec, KvLayerSpec, ModelShape, Op, Program, RopeSpec,
    RopeStyle, WeightId, WeightSpec,
};
pub use validate::validate;

use crate::model_file::GgufHeader;

/// Errors from building a program out of a model file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArchError {
    #[error("the model file has no general.architecture")]
    NoArchitecture,
    #[error("unsupported architecture {found:?} (supported: {})", supported.join(", "))]
    Unsupported {
        found: String,
        supported: Vec<&'static str>,
    },
    #[error("missing metadata key {0}")]
    MissingMetadata(String),
    #[error("metadata {key}: {why}")]
    BadMetadata { key: String, why: String },
    #[error("missing tensor {0:?}")]
    MissingTensor(String),
    #[error("tensor {name:?} has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("inconsistent program: {0}")]
    Internal(String),
}

/// A family's program builder.
pub type BuildFn = fn(&GgufHeader) -> Result<Program, ArchError>;

/// The registry: `general.architecture` value -> builder.
pub const FAMILIES: &[(&str, BuildFn)] = &[
    ("llama", llama::build),
    ("qwen2", qwen2::build),
    ("qwen3", qwen3::build),
    ("gemma3", gemma3::build),
];

/// Names of the supported architectures, in registry order.
pub fn supported() -> Vec<&'static str> {
    FAMILIES.iter().map(|(n, _)| *n).collect()
}

/// Build the program for a model file, choosing the family by `general.architecture`.
pub fn build_program(header: &GgufHeader) -> Result<Program, ArchError> {
    let arch = header.architecture().ok_or(ArchError::NoArchitecture)?;
    let build = FAMILIES
        .iter()
        .find(|(n, _)| *n == arch)
        .map(|(_, f)| *f)
        .ok_or_else(|| ArchError::Unsupported {
            found: arch.to_owned(),
            supported: supported(),
        })?;
    build(header)
}
