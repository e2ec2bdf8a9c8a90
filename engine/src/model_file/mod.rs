//! Model files: GGUF and safetensors readers over a memory map, with validation.
//!
//! Owns the on-disk formats and the validated tensor inventory; nothing here knows about
//! architectures. Every error a file can cause is a named [`ModelFileError`] variant.

pub mod gguf;
mod gguf_meta;
pub mod gguf_write;
mod mmap;

#[cfg(test)]
mod gguf_tests;

use std::path::{Path, PathBuf};

pub use gguf::{GgufError, GgufHeader, MetaArray, MetaValue, TensorInfo};
pub use gguf_write::{GgufWriteError, GgufWriter, TensorSpec};
pub use mmap::FileBytes;

use crate::quant::{self, QuantError};

/// Errors from opening or reading a model file.
#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Gguf { path: PathBuf, source: GgufError },
    #[error("no tensor named {0:?}")]
    NoSuchTensor(String),
    #[error(transparent)]
    Quant(#[from] QuantError),
}

/// An open GGUF file: its bytes and validated header.
pub struct GgufModel {
    path: PathBuf,
    bytes: FileBytes,
    header: GgufHeader,
}

impl GgufModel {
    /// Memory-map and validate the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<Self, ModelFileError> {
        let bytes = FileBytes::map(path).map_err(|source| ModelFileError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_bytes(path.to_owned(), bytes)
    }

    /// Validate GGUF `bytes`; `path` is only used in messages.
    pub fn from_bytes(path: PathBuf, bytes: FileBytes) -> Result<Self, ModelFileError> {
        let header = gguf::parse(bytes.as_slice()).map_err(|source| ModelFileError::Gguf {
            path: path.clone(),
            source,
        })?;
        Ok(Self {
            path,
            bytes,
            header,
        })
    }

    /// Path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated header: metadata and tensor inventory.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The raw (still quantized) bytes of a tensor. Bounds were validated at open.
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        let start = (self.header.data_offset + t.offset) as usize;
        let end = start + t.bytes as usize;
        self.bytes.as_slice().get(start..end).unwrap_or(&[])
    }

    /// A tensor dequantized to f32 (all elements, GGUF order).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, ModelFileError> {
        let t = self
            .header
            .tensor(name)
            .ok_or_else(|| ModelFileError::NoSuchTensor(name.to_owned()))?;
        let mut out = vec![0f32; t.elems as usize];
        quant::dequantize(t.format, self.tensor_bytes(t), &mut out)?;
        Ok(out)
    }
}
