//! GGUF v2/v3 reader: header, every metadata value type (arrays, nested too), tensor infos,
//! alignment and data offsets, validated into a tensor inventory.
//!
//! The parser works on a byte slice (a memory map in production, a `Vec` in tests and the
//! fuzz target) and never trusts a length or count from the file: every string, array and
//! tensor count is checked against the bytes that remain before anything is allocated, and
//! vectors grow with what was actually read, so a hostile header yields a named
//! [`GgufError`], never a panic or an allocation larger than a small multiple of the file.
//!
//! Layout (all little-endian): magic `GGUF`, version u32, tensor count u64, metadata count
//! u64, metadata (key string, type u32, value), tensor infos (name string, n_dims u32, dims
//! u64 x n_dims, GGML type u32, offset u64), padding to the alignment, tensor data. Strings
//! are a u64 byte length then UTF-8 bytes. Version 1 (u32 counts) is not read.

use std::collections::{BTreeMap, HashSet};

pub use super::gguf_meta::{MetaArray, MetaValue, type_id, type_name};
use crate::quant::{QuantFormat, ggml_type_name};

/// `GGUF` as it appears in the first four bytes of the file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the tensor data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Largest `general.alignment` accepted.
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// GGML's maximum tensor rank.
pub const MAX_DIMS: usize = 4;
/// Upper bound on array nesting depth (GGUF files in the wild use 1).
pub const MAX_ARRAY_DEPTH: usize = 4;
/// Vectors are pre-allocated for at most this many items; beyond it they grow as items are
/// actually read, so a count that merely fits the file cannot reserve memory up front.
const MAX_PREALLOC: usize = 4096;
/// Smallest encoded tensor info: name length (8), n_dims (4), one dim (8), type (4),
/// offset (8).
const MIN_TENSOR_INFO: usize = 32;
/// Smallest encoded metadata pair: key length (8), type (4), a one-byte value.
const MIN_KV: usize = 13;

/// Errors found while reading a GGUF file.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum GgufError {
    #[error("not a GGUF file: bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    #[error("big-endian GGUF file (version {0} byte-swapped); only little-endian is read")]
    BigEndian(u32),
    #[error("file truncated: needed {needed} bytes at offset {offset}, file is {len} bytes")]
    Truncated { offset: u64, needed: u64, len: u64 },
    #[error("absurd {what} {value} at offset {offset}: exceeds what the file can hold")]
    AbsurdCount {
        what: &'static str,
        value: u64,
        offset: u64,
    },
    #[error("metadata key or string at offset {offset} is not valid UTF-8")]
    NotUtf8 { offset: u64 },
    #[error("unknown metadata value type {type_id} for key {key:?}")]
    UnknownValueType { key: String, type_id: u32 },
    #[error("metadata key {key:?}: bool byte {value} is neither 0 nor 1")]
    BadBool { key: String, value: u8 },
    #[error("arrays nested deeper than {MAX_ARRAY_DEPTH} levels for key {key:?}")]
    ArrayTooDeep { key: String },
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    #[error("invalid general.alignment {0}: must be a power of two no larger than 2^20")]
    BadAlignment(u64),
    #[error("metadata key {key:?} has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("tensor {name:?}: unknown GGML type id {type_id}")]
    UnknownTensorType { name: String, type_id: u32 },
    #[error("tensor {name:?}: GGML type {type_name} is not supported by Assay")]
    UnsupportedTensorType {
        name: String,
        type_name: &'static str,
    },
    #[error("tensor {name:?}: {n_dims} dimensions (at most {MAX_DIMS})")]
    TooManyDims { name: String, n_dims: u32 },
    #[error("tensor {name:?}: bad shape {dims:?} ({why})")]
    BadShape {
        name: String,
        dims: Vec<u64>,
        why: &'static str,
    },
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned {
        name: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensor {name:?}: data [{start}, {end}) runs past the end of the file ({len} bytes)")]
    DataPastEnd {
        name: String,
        start: u64,
        end: u64,
        len: u64,
    },
    #[error("tensors {a:?} and {b:?} overlap in the data section")]
    Overlap { a: String, b: String },
}

impl GgufError {
    /// The variant's name, e.g. `"Truncated"`: stable, for tables of expected errors and
    /// receipts.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::BadMagic(_) => "BadMagic",
            Self::UnsupportedVersion(_) => "UnsupportedVersion",
            Self::BigEndian(_) => "BigEndian",
            Self::Truncated { .. } => "Truncated",
            Self::AbsurdCount { .. } => "AbsurdCount",
            Self::NotUtf8 { .. } => "NotUtf8",
            Self::UnknownValueType { .. } => "UnknownValueType",
            Self::BadBool { .. } => "BadBool",
            Self::ArrayTooDeep { .. } => "ArrayTooDeep",
            Self::DuplicateKey(_) => "DuplicateKey",
            Self::BadAlignment(_) => "BadAlignment",
            Self::WrongType { .. } => "WrongType",
            Self::UnknownTensorType { .. } => "UnknownTensorType",
            Self::UnsupportedTensorType { .. } => "UnsupportedTensorType",
            Self::TooManyDims { .. } => "TooManyDims",
            Self::BadShape { .. } => "BadShape",
            Self::DuplicateTensor(_) => "DuplicateTensor",
            Self::Misaligned { .. } => "Misaligned",
            Self::DataPastEnd { .. } => "DataPastEnd",
            Self::Overlap { .. } => "Overlap",
        }
    }
}

/// One tensor of the inventory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGUF order: `dims[0]` is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    /// Element format.
    pub format: QuantFormat,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Number of elements (product of `dims`).
    pub elems: u64,
    /// Number of bytes of data.
    pub bytes: u64,
}

/// A parsed and validated GGUF header.
#[derive(Clone, Debug)]
pub struct GgufHeader {
    /// File format version (2 or 3).
    pub version: u32,
    /// Metadata in key order.
    pub metadata: BTreeMap<String, MetaValue>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Alignment of the data section and of each tensor's offset.
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], GgufError> {
        let truncated = GgufError::Truncated {
            offset: self.pos as u64,
            needed: n as u64,
            len: self.buf.len() as u64,
        };
        let end = self.pos.checked_add(n).ok_or(truncated.clone())?;
        let s = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, GgufError> {
        let [b] = self.arr::<1>()?;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    /// A u64 count whose items need at least `min_each` bytes each in what remains.
    fn count(&mut self, what: &'static str, min_each: usize) -> Result<usize, GgufError> {
        let offset = self.pos as u64;
        let v = self.u64()?;
        let fits = (self.remaining() / min_each.max(1)) as u64;
        if v > fits {
            return Err(GgufError::AbsurdCount {
                what,
                value: v,
                offset,
            });
        }
        usize::try_from(v).map_err(|_| GgufError::AbsurdCount {
            what,
            value: v,
            offset,
        })
    }
    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.count("string length", 1)?;
        let offset = self.pos as u64;
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| GgufError::NotUtf8 { offset })
    }
}

/// Minimum encoded size of one value of a metadata type id (for count checks).
fn min_size(id: u32) -> usize {
    match id {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::STRING => 8,
        type_id::ARRAY => 12,
        _ => 8,
    }
}

/// Decode `n` fixed-size little-endian values; the bytes are taken (and so bounds-checked)
/// before the vector is allocated.
fn read_vec<const N: usize, T>(
    r: &mut Reader<'_>,
    n: usize,
    f: fn([u8; N]) -> T,
) -> Result<Vec<T>, GgufError> {
    let len = n.checked_mul(N).ok_or(GgufError::Truncated {
        offset: r.pos as u64,
        needed: u64::MAX,
        len: r.buf.len() as u64,
    })?;
    let raw = r.take(len)?;
    Ok(raw
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect())
}

fn read_bool(r: &mut Reader<'_>, key: &str) -> Result<bool, GgufError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::BadBool {
            key: key.to_owned(),
            value,
        }),
    }
}

fn read_array(r: &mut Reader<'_>, key: &str, depth: usize) -> Result<MetaArray, GgufError> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep {
            key: key.to_owned(),
        });
    }
    let elem_type = r.u32()?;
    if type_name(elem_type).is_none() {
        return Err(GgufError::UnknownValueType {
            key: key.to_owned(),
            type_id: elem_type,
        });
    }
    let n = r.count("array length", min_size(elem_type))?;
    Ok(match elem_type {
        type_id::U8 => MetaArray::U8(r.take(n)?.to_vec()),
        type_id::I8 => MetaArray::I8(read_vec(r, n, i8::from_le_bytes)?),
        type_id::U16 => MetaArray::U16(read_vec(r, n, u16::from_le_bytes)?),
        type_id::I16 => MetaArray::I16(read_vec(r, n, i16::from_le_bytes)?),
        type_id::U32 => MetaArray::U32(read_vec(r, n, u32::from_le_bytes)?),
        type_id::I32 => MetaArray::I32(read_vec(r, n, i32::from_le_bytes)?),
        type_id::F32 => MetaArray::F32(read_vec(r, n, f32::from_le_bytes)?),
        type_id::BOOL => {
            let mut v = Vec::with_capacity(n.min(MAX_PREALLOC));
            for _ in 0..n {
                v.push(read_bool(r, key)?);
            }
            MetaArray::Bool(v)
        }
        type_id::STRING => {
            let mut v = Vec::with_capacity(n.min(MAX_PREALLOC));
            for _ in 0..n {
                v.push(r.string()?);
            }
            MetaArray::String(v)
        }
        type_id::ARRAY => {
            let mut v = Vec::with_capacity(n.min(MAX_PREALLOC));
            for _ in 0..n {
                v.push(read_array(r, key, depth + 1)?);
            }
            MetaArray::Array(v)
        }
        type_id::U64 => MetaArray::U64(read_vec(r, n, u64::from_le_bytes)?),
        type_id::I64 => MetaArray::I64(read_vec(r, n, i64::from_le_bytes)?),
        _ => MetaArray::F64(read_vec(r, n, f64::from_le_bytes)?),
    })
}

fn read_value(r: &mut Reader<'_>, key: &str, id: u32) -> Result<MetaValue, GgufError> {
    Ok(match id {
        type_id::U8 => MetaValue::U8(r.u8()?),
        type_id::I8 => MetaValue::I8(i8::from_le_bytes(r.arr()?)),
        type_id::U16 => MetaValue::U16(u16::from_le_bytes(r.arr()?)),
        type_id::I16 => MetaValue::I16(i16::from_le_bytes(r.arr()?)),
        type_id::U32 => MetaValue::U32(r.u32()?),
        type_id::I32 => MetaValue::I32(i32::from_le_bytes(r.arr()?)),
        type_id::F32 => MetaValue::F32(f32::from_le_bytes(r.arr()?)),
        type_id::BOOL => MetaValue::Bool(read_bool(r, key)?),
        type_id::STRING => MetaValue::String(r.string()?),
        type_id::ARRAY => MetaValue::Array(read_array(r, key, 1)?),
        type_id::U64 => MetaValue::U64(r.u64()?),
        type_id::I64 => MetaValue::I64(i64::from_le_bytes(r.arr()?)),
        type_id::F64 => MetaValue::F64(f64::from_le_bytes(r.arr()?)),
        _ => {
            return Err(GgufError::UnknownValueType {
                key: key.to_owned(),
                type_id: id,
            });
        }
    })
}

/// Parse and validate a whole GGUF file held in `buf`.
///
/// Validation covers the header itself and the tensor inventory against the file length:
/// alignment, data in bounds, no overlaps, known and supported types, sane shapes.
pub fn parse(buf: &[u8]) -> Result<GgufHeader, GgufError> {
    let mut r = Reader { buf, pos: 0 };
    if buf.len() < GGUF_MAGIC.len() && GGUF_MAGIC.starts_with(buf) {
        return Err(GgufError::Truncated {
            offset: 0,
            needed: 4,
            len: buf.len() as u64,
        });
    }
    let mut magic = [0u8; 4];
    for (m, b) in magic.iter_mut().zip(buf) {
        *m = *b;
    }
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic(magic));
    }
    r.pos = GGUF_MAGIC.len();
    let version = r.u32()?;
    if version != 2 && version != 3 {
        let swapped = version.swap_bytes();
        return Err(if swapped == 2 || swapped == 3 {
            GgufError::BigEndian(swapped)
        } else {
            GgufError::UnsupportedVersion(version)
        });
    }
    let n_tensors = r.count("tensor count", MIN_TENSOR_INFO)?;
    let n_kv = r.count("metadata count", MIN_KV)?;

    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.string()?;
        let id = r.u32()?;
        let value = read_value(&mut r, &key, id)?;
        if metadata.contains_key(&key) {
            return Err(GgufError::DuplicateKey(key));
        }
        metadata.insert(key, value);
    }
    let alignment = alignment_of(&metadata)?;

    let mut tensors = Vec::with_capacity(n_tensors.min(MAX_PREALLOC));
    for _ in 0..n_tensors {
        tensors.push(read_tensor_info(&mut r)?);
    }

    let data_offset = (r.pos as u64).next_multiple_of(alignment);
    validate_inventory(&tensors, alignment, data_offset, buf.len() as u64)?;
    Ok(GgufHeader {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// `general.alignment` (a u32 by the spec; any non-negative integer type is accepted),
/// or [`DEFAULT_ALIGNMENT`].
fn alignment_of(metadata: &BTreeMap<String, MetaValue>) -> Result<u64, GgufError> {
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => v.as_u64().ok_or_else(|| GgufError::WrongType {
            key: "general.alignment".into(),
            expected: "u32",
            found: v.type_name(),
        })?,
    };
    if !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
        return Err(GgufError::BadAlignment(alignment));
    }
    Ok(alignment)
}

fn read_tensor_info(r: &mut Reader<'_>) -> Result<TensorInfo, GgufError> {
    let name = r.string()?;
    let n_dims = r.u32()?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooManyDims { name, n_dims });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(r.u64()?);
    }
    let type_id = r.u32()?;
    let offset = r.u64()?;
    let format = match QuantFormat::from_ggml_type(type_id) {
        Some(f) => f,
        None => {
            return Err(match ggml_type_name(type_id) {
                Some(type_name) => GgufError::UnsupportedTensorType { name, type_name },
                None => GgufError::UnknownTensorType { name, type_id },
            });
        }
    };
    let (elems, bytes) = tensor_size(&dims, format).map_err(|why| GgufError::BadShape {
        name: name.clone(),
        dims: dims.clone(),
        why,
    })?;
    Ok(TensorInfo {
        name,
        dims,
        format,
        offset,
        elems,
        bytes,
    })
}

/// (elements, bytes) of a tensor with `dims` (GGUF order) in `format`, or why the shape is
/// not valid. Shared with the writer so both sides agree on what a valid shape is.
pub fn tensor_size(dims: &[u64], format: QuantFormat) -> Result<(u64, u64), &'static str> {
    if dims.is_empty() {
        return Err("no dimensions");
    }
    if dims.len() > MAX_DIMS {
        return Err("too many dimensions");
    }
    if dims.contains(&0) {
        return Err("zero dimension");
    }
    let elems = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&e| e <= i64::MAX as u64)
        .ok_or("element count overflows")?;
    let (block_elems, block_bytes) = format.block_geometry();
    let row = dims.first().copied().unwrap_or(1);
    if row % block_elems as u64 != 0 {
        return Err("row length is not a multiple of the block size");
    }
    let bytes = (elems / block_elems as u64)
        .checked_mul(block_bytes as u64)
        .filter(|&b| b <= i64::MAX as u64)
        .ok_or("byte size overflows")?;
    Ok((elems, bytes))
}

fn validate_inventory(
    tensors: &[TensorInfo],
    alignment: u64,
    data_offset: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    let mut seen = HashSet::with_capacity(tensors.len());
    for t in tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(GgufError::DuplicateTensor(t.name.clone()));
        }
        if t.offset % alignment != 0 {
            return Err(GgufError::Misaligned {
                name: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.bytes));
        if end.is_none_or(|end| end > file_len) {
            return Err(GgufError::DataPastEnd {
                name: t.name.clone(),
                start: data_offset.saturating_add(t.offset),
                end: data_offset.saturating_add(t.offset).saturating_add(t.bytes),
                len: file_len,
            });
        }
    }
    // Every end is now known to fit in the file, so these sums cannot overflow.
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| (t.offset, t.bytes));
    for w in order.windows(2) {
        if let [a, b] = w
            && a.offset + a.bytes > b.offset
        {
            return Err(GgufError::Overlap {
                a: a.name.clone(),
                b: b.name.clone(),
            });
        }
    }
    Ok(())
}

impl GgufHeader {
    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }
    /// `general.architecture`, if present and a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(MetaValue::as_str)
    }
    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
    /// Total bytes of tensor data.
    pub fn tensor_data_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).sum()
    }
}
