//! GGUF v2/v3 reader: header, every metadata value type (arrays too), tensor infos,
//! alignment and data offsets, validated into a tensor inventory.
//!
//! The parser works on a byte slice (a memory map in production, a `Vec` in tests and the
//! fuzz target) and never trusts a length or count from the file: every string, array and
//! tensor count is checked against the bytes that remain before anything is allocated, so
//! a hostile header yields a named [`GgufError`], never a panic or a huge allocation.

use std::collections::BTreeMap;

use crate::quant::{QuantFormat, ggml_type_name};

/// `GGUF` in little-endian.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the tensor data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML's maximum tensor rank.
pub const MAX_DIMS: usize = 4;
/// Upper bound on array nesting depth (GGUF files in the wild use 1).
const MAX_ARRAY_DEPTH: usize = 4;

/// Errors found while reading a GGUF file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GgufError {
    #[error("not a GGUF file: bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    #[error("file truncated: needed {needed} bytes at offset {offset}, file is {len} bytes")]
    Truncated { offset: u64, needed: u64, len: u64 },
    #[error("absurd {what} {value} at offset {offset}: exceeds what the file can hold")]
    AbsurdCount { what: &'static str, value: u64, offset: u64 },
    #[error("metadata key or string at offset {offset} is not valid UTF-8")]
    NotUtf8 { offset: u64 },
    #[error("unknown metadata value type {type_id} for key {key:?}")]
    UnknownValueType { key: String, type_id: u32 },
    #[error("arrays nested deeper than {MAX_ARRAY_DEPTH} levels for key {key:?}")]
    ArrayTooDeep { key: String },
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    #[error("invalid general.alignment {0}: must be a non-zero power of two")]
    BadAlignment(u64),
    #[error("metadata key {key:?} has type {found}, expected {expected}")]
    WrongType { key: String, expected: &'static str, found: &'static str },
    #[error("tensor {name:?}: unknown GGML type id {type_id}")]
    UnknownTensorType { name: String, type_id: u32 },
    #[error("tensor {name:?}: GGML type {type_name} is not supported by Assay")]
    UnsupportedTensorType { name: String, type_name: &'static str },
    #[error("tensor {name:?}: {n_dims} dimensions (at most {MAX_DIMS})")]
    TooManyDims { name: String, n_dims: u32 },
    #[error("tensor {name:?}: bad shape {dims:?} ({why})")]
    BadShape { name: String, dims: Vec<u64>, why: &'static str },
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned { name: String, offset: u64, alignment: u64 },
    #[error("tensor {name:?}: data [{start}, {end}) runs past the end of the file ({len} bytes)")]
    DataPastEnd { name: String, start: u64, end: u64, len: u64 },
    #[error("tensors {a:?} and {b:?} overlap in the data section")]
    Overlap { a: String, b: String },
}

/// A metadata value of any GGUF type.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A homogeneous metadata array. Large arrays (vocabularies) are kept typed rather than
/// as a `Vec<MetaValue>` to keep memory proportional to the file.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    /// Nested arrays.
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl MetaArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Self::U8(v) => v.len(),
            Self::I8(v) => v.len(),
            Self::U16(v) => v.len(),
            Self::I16(v) => v.len(),
            Self::U32(v) => v.len(),
            Self::I32(v) => v.len(),
            Self::F32(v) => v.len(),
            Self::Bool(v) => v.len(),
            Self::String(v) => v.len(),
            Self::Array(v) => v.len(),
            Self::U64(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::F64(v) => v.len(),
        }
    }
    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The GGUF name of the element type.
    pub fn elem_type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "u8",
            Self::I8(_) => "i8",
            Self::U16(_) => "u16",
            Self::I16(_) => "i16",
            Self::U32(_) => "u32",
            Self::I32(_) => "i32",
            Self::F32(_) => "f32",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array(_) => "array",
            Self::U64(_) => "u64",
            Self::I64(_) => "i64",
            Self::F64(_) => "f64",
        }
    }
}

impl MetaValue {
    /// The GGUF name of the value's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "u8",
            Self::I8(_) => "i8",
            Self::U16(_) => "u16",
            Self::I16(_) => "i16",
            Self::U32(_) => "u32",
            Self::I32(_) => "i32",
            Self::F32(_) => "f32",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array(_) => "array",
            Self::U64(_) => "u64",
            Self::I64(_) => "i64",
            Self::F64(_) => "f64",
        }
    }
    /// Any integer type widened to u64 (negative values give `None`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    /// Any integer or float type as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    /// The string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
    /// The bool, if this is a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Bool(b) => Some(*b),
            _ => None,
        }
    }
    /// The array, if this is an array.
    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
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
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos as u64,
                needed: n as u64,
                len: self.buf.len() as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, GgufError> {
        Ok(self.arr::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    /// A count that must fit `min_each` bytes per item in what remains.
    fn count(&mut self, what: &'static str, min_each: usize) -> Result<usize, GgufError> {
        let offset = self.pos as u64;
        let v = self.u64()?;
        let fits = (self.remaining() / min_each.max(1)) as u64;
        if v > fits {
            return Err(GgufError::AbsurdCount { what, value: v, offset });
        }
        Ok(v as usize)
    }
    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.count("string length", 1)?;
        let offset = self.pos as u64;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::NotUtf8 { offset })
    }
}

/// Minimum encoded size of one value of a metadata type id (for count checks).
fn min_size(type_id: u32) -> usize {
    match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,  // string: u64 length
        9 => 12, // array: u32 type + u64 count
        _ => 8,
    }
}

macro_rules! read_vec {
    ($r:expr, $n:expr, $ty:ty) => {{
        let raw = $r.take($n * std::mem::size_of::<$ty>())?;
        raw.chunks_exact(std::mem::size_of::<$ty>())
            .map(|c| {
                let mut a = [0u8; std::mem::size_of::<$ty>()];
                a.copy_from_slice(c);
                <$ty>::from_le_bytes(a)
            })
            .collect::<Vec<$ty>>()
    }};
}

fn read_array(r: &mut Reader<'_>, key: &str, depth: usize) -> Result<MetaArray, GgufError> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep { key: key.to_owned() });
    }
    let elem_type = r.u32()?;
    if elem_type > 12 {
        return Err(GgufError::UnknownValueType { key: key.to_owned(), type_id: elem_type });
    }
    let n = r.count("array length", min_size(elem_type))?;
    Ok(match elem_type {
        0 => MetaArray::U8(r.take(n)?.to_vec()),
        1 => MetaArray::I8(read_vec!(r, n, i8)),
        2 => MetaArray::U16(read_vec!(r, n, u16)),
        3 => MetaArray::I16(read_vec!(r, n, i16)),
        4 => MetaArray::U32(read_vec!(r, n, u32)),
        5 => MetaArray::I32(read_vec!(r, n, i32)),
        6 => MetaArray::F32(read_vec!(r, n, f32)),
        7 => MetaArray::Bool(r.take(n)?.iter().map(|&b| b != 0).collect()),
        8 => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(r.string()?);
            }
            MetaArray::String(v)
        }
        9 => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(r, key, depth + 1)?);
            }
            MetaArray::Array(v)
        }
        10 => MetaArray::U64(read_vec!(r, n, u64)),
        11 => MetaArray::I64(read_vec!(r, n, i64)),
        _ => MetaArray::F64(read_vec!(r, n, f64)),
    })
}

fn read_value(r: &mut Reader<'_>, key: &str, type_id: u32) -> Result<MetaValue, GgufError> {
    Ok(match type_id {
        0 => MetaValue::U8(r.u8()?),
        1 => MetaValue::I8(i8::from_le_bytes(r.arr()?)),
        2 => MetaValue::U16(u16::from_le_bytes(r.arr()?)),
        3 => MetaValue::I16(i16::from_le_bytes(r.arr()?)),
        4 => MetaValue::U32(r.u32()?),
        5 => MetaValue::I32(i32::from_le_bytes(r.arr()?)),
        6 => MetaValue::F32(f32::from_le_bytes(r.arr()?)),
        7 => MetaValue::Bool(r.u8()? != 0),
        8 => MetaValue::String(r.string()?),
        9 => MetaValue::Array(read_array(r, key, 1)?),
        10 => MetaValue::U64(r.u64()?),
        11 => MetaValue::I64(i64::from_le_bytes(r.arr()?)),
        12 => MetaValue::F64(f64::from_le_bytes(r.arr()?)),
        _ => return Err(GgufError::UnknownValueType { key: key.to_owned(), type_id }),
    })
}

/// Parse and validate a whole GGUF file held in `buf`.
///
/// Validation covers the header itself and the tensor inventory against the file length:
/// alignment, data in bounds, no overlaps, known and supported types, sane shapes.
pub fn parse(buf: &[u8]) -> Result<GgufHeader, GgufError> {
    let mut r = Reader { buf, pos: 0 };
    let magic: [u8; 4] = r.arr().map_err(|_| {
        let mut m = [0u8; 4];
        m[..buf.len().min(4)].copy_from_slice(&buf[..buf.len().min(4)]);
        GgufError::BadMagic(m)
    })?;
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic(magic));
    }
    let version = r.u32()?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion(version));
    }
    // A tensor info is at least: name len (8) + n_dims (4) + dims (8) + type (4) + offset (8).
    let n_tensors_pos = r.pos as u64;
    let n_tensors = r.u64()?;
    let n_kv = r.count("metadata count", 8 + 4 + 1)?;
    let max_tensors = (r.remaining() / 32) as u64;
    if n_tensors > max_tensors {
        return Err(GgufError::AbsurdCount {
            what: "tensor count",
            value: n_tensors,
            offset: n_tensors_pos,
        });
    }

    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.string()?;
        let type_id = r.u32()?;
        let value = read_value(&mut r, &key, type_id)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(GgufError::DuplicateKey(key));
        }
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(MetaValue::U32(a)) => u64::from(*a),
        Some(v) => match v.as_u64() {
            Some(a) => a,
            None => {
                return Err(GgufError::WrongType {
                    key: "general.alignment".into(),
                    expected: "u32",
                    found: v.type_name(),
                });
            }
        },
    };
    if alignment == 0 || !alignment.is_power_of_two() || alignment > 1 << 20 {
        return Err(GgufError::BadAlignment(alignment));
    }

    let mut tensors = Vec::with_capacity(n_tensors as usize);
    for _ in 0..n_tensors {
        tensors.push(read_tensor_info(&mut r)?);
    }

    let data_offset = (r.pos as u64).next_multiple_of(alignment);
    validate_inventory(&tensors, alignment, data_offset, buf.len() as u64)?;
    Ok(GgufHeader { version, metadata, tensors, alignment, data_offset })
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
    let bad = |why| GgufError::BadShape { name: name.clone(), dims: dims.clone(), why };
    if dims.contains(&0) {
        return Err(bad("zero dimension"));
    }
    let elems = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(|| bad("element count overflows"))?;
    let (block_elems, block_bytes) = format.block_geometry();
    let row = dims.first().copied().unwrap_or(1);
    if row % block_elems as u64 != 0 {
        return Err(bad("row length is not a multiple of the block size"));
    }
    let bytes = (elems / block_elems as u64)
        .checked_mul(block_bytes as u64)
        .ok_or_else(|| bad("byte size overflows"))?;
    Ok(TensorInfo { name, dims, format, offset, elems, bytes })
}

fn validate_inventory(
    tensors: &[TensorInfo],
    alignment: u64,
    data_offset: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    let mut seen = std::collections::HashSet::with_capacity(tensors.len());
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
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.bytes));
        match (start, end) {
            (Some(_), Some(end)) if end <= file_len => {}
            _ => {
                return Err(GgufError::DataPastEnd {
                    name: t.name.clone(),
                    start: data_offset.saturating_add(t.offset),
                    end: data_offset.saturating_add(t.offset).saturating_add(t.bytes),
                    len: file_len,
                });
            }
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for w in order.windows(2) {
        if w[0].offset + w[0].bytes > w[1].offset {
            return Err(GgufError::Overlap { a: w[0].name.clone(), b: w[1].name.clone() });
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
}
