//! Model files: GGUF and safetensors readers over a memory map, with validation.
//!
//! Owns the on-disk formats and the validated tensor inventory; nothing here knows about
//! architectures. Every error a file can cause is a named [`ModelFileError`] variant (with
//! the format's own error inside), and [`ModelFile::open`] picks the format of a path.

pub mod gguf;
mod gguf_meta;
pub mod gguf_write;
mod mmap;
pub mod safetensors;
mod safetensors_model;

#[cfg(test)]
mod gguf_tests;
#[cfg(test)]
mod safetensors_tests;

use std::io::Read;
use std::path::{Path, PathBuf};

pub use gguf::{GgufError, GgufHeader, MetaArray, MetaValue, TensorInfo};
pub use gguf_write::{GgufWriteError, GgufWriter, TensorSpec};
pub use mmap::FileBytes;
pub use safetensors::{Dtype, SafetensorsError, SafetensorsHeader, SafetensorsTensor};
pub use safetensors_model::{SafetensorsFile, SafetensorsModel};

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
    #[error("{path}: {source}")]
    Safetensors {
        path: PathBuf,
        source: SafetensorsError,
    },
    #[error("{path}: bad safetensors index: {why}")]
    BadIndex { path: PathBuf, why: String },
    #[error("{path}: tensor {name:?} is listed in the index but absent from this shard")]
    MissingTensor { path: PathBuf, name: String },
    #[error("{path}: tensor {name:?} is in this shard but the index does not list it here")]
    UnlistedTensor { path: PathBuf, name: String },
    #[error("{path}: bad config.json: {why}")]
    BadConfig { path: PathBuf, why: String },
    #[error(
        "{path}: no single safetensors checkpoint in this folder ({found} .safetensors files, no index)"
    )]
    NoWeights { path: PathBuf, found: usize },
    #[error("{path}: unrecognized model file (neither GGUF nor safetensors)")]
    Unrecognized { path: PathBuf },
    #[error("no tensor named {0:?}")]
    NoSuchTensor(String),
    #[error(transparent)]
    Quant(#[from] QuantError),
}

impl ModelFileError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }

    /// The most specific variant name: the format error's own (e.g. `"Truncated"`,
    /// `"HeaderTooLarge"`) for format errors, else this enum's (e.g. `"BadIndex"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Io { .. } => "Io",
            Self::Gguf { source, .. } => source.kind(),
            Self::Safetensors { source, .. } => source.kind(),
            Self::BadIndex { .. } => "BadIndex",
            Self::MissingTensor { .. } => "MissingTensor",
            Self::UnlistedTensor { .. } => "UnlistedTensor",
            Self::BadConfig { .. } => "BadConfig",
            Self::NoWeights { .. } => "NoWeights",
            Self::Unrecognized { .. } => "Unrecognized",
            Self::NoSuchTensor(_) => "NoSuchTensor",
            Self::Quant(_) => "Quant",
        }
    }
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
        let bytes = FileBytes::map(path).map_err(|e| ModelFileError::io(path, e))?;
        Self::from_bytes(path.to_owned(), bytes)
    }

    /// Validate GGUF `bytes`; `path` is only used in messages.
    pub fn from_bytes(path: PathBuf, bytes: FileBytes) -> Result<Self, ModelFileError> {
        match gguf::parse(bytes.as_slice()) {
            Ok(header) => Ok(Self {
                path,
                bytes,
                header,
            }),
            Err(source) => Err(ModelFileError::Gguf { path, source }),
        }
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
        let start = self.header.data_offset.saturating_add(t.offset) as usize;
        let end = start.saturating_add(t.bytes as usize);
        self.bytes.as_slice().get(start..end).unwrap_or_default()
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

/// Either model file format, chosen by [`ModelFile::open`].
pub enum ModelFile {
    Gguf(GgufModel),
    Safetensors(SafetensorsModel),
}

/// Which reader a path goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Gguf,
    Safetensors,
}

/// Decide the format of `path`: a folder, a `.safetensors` file or an `*index.json` is
/// safetensors; a `.gguf` file or one starting with the GGUF magic is GGUF; a file whose
/// bytes look like a safetensors header (a length, then `{`) is safetensors; anything else
/// is [`ModelFileError::Unrecognized`].
pub fn detect(path: &Path) -> Result<FileKind, ModelFileError> {
    let meta = std::fs::metadata(path).map_err(|e| ModelFileError::io(path, e))?;
    if meta.is_dir() {
        return Ok(FileKind::Safetensors);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if name.ends_with(".safetensors") || name.ends_with("index.json") {
        return Ok(FileKind::Safetensors);
    }
    if name.ends_with(".gguf") {
        return Ok(FileKind::Gguf);
    }
    let mut head = Vec::with_capacity(9);
    std::fs::File::open(path)
        .and_then(|f| f.take(9).read_to_end(&mut head))
        .map_err(|e| ModelFileError::io(path, e))?;
    if head.starts_with(&gguf::GGUF_MAGIC) {
        Ok(FileKind::Gguf)
    } else if head.get(8) == Some(&b'{') {
        Ok(FileKind::Safetensors)
    } else {
        Err(ModelFileError::Unrecognized {
            path: path.to_owned(),
        })
    }
}

impl ModelFile {
    /// Open a GGUF file or a safetensors checkpoint (see [`detect`]).
    pub fn open(path: &Path) -> Result<Self, ModelFileError> {
        Ok(match detect(path)? {
            FileKind::Gguf => Self::Gguf(GgufModel::open(path)?),
            FileKind::Safetensors => Self::Safetensors(SafetensorsModel::open(path)?),
        })
    }

    /// The format.
    pub fn kind(&self) -> FileKind {
        match self {
            Self::Gguf(_) => FileKind::Gguf,
            Self::Safetensors(_) => FileKind::Safetensors,
        }
    }

    /// Tensor names: file order for GGUF, name order for safetensors.
    pub fn tensor_names(&self) -> Vec<&str> {
        match self {
            Self::Gguf(m) => m.header().tensors.iter().map(|t| t.name.as_str()).collect(),
            Self::Safetensors(m) => m.tensors().map(|t| t.name.as_str()).collect(),
        }
    }

    /// A tensor as f32 values (in the file's own element order).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, ModelFileError> {
        match self {
            Self::Gguf(m) => m.dequantize(name),
            Self::Safetensors(m) => m.dequantize(name),
        }
    }
}
