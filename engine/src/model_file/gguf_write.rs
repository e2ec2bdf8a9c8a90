//! GGUF v3 writer: metadata and tensor infos first, then tensor data streamed to any
//! [`Write`], each tensor padded to the alignment.
//!
//! The writer is given the whole inventory (names, shapes, formats) up front, so it can lay
//! out every offset and emit the header before any data; tensor data then arrives in file
//! order, whole ([`GgufWriter::write_tensor`]) or in chunks ([`GgufWriter::write_data`]),
//! and is passed straight to the sink. Nothing larger than the header is ever buffered, so
//! a multi-gigabyte synthetic checkpoint can be produced while holding one chunk.
//!
//! Everything the reader would reject (bad shapes, duplicate names, bad alignment, arrays
//! nested too deep) is refused here with a [`GgufWriteError`] instead of producing a file.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;

use super::gguf::{
    DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ALIGNMENT, MAX_ARRAY_DEPTH, MetaArray, MetaValue,
    tensor_size,
};
use crate::quant::QuantFormat;

/// The GGUF version this writer produces.
pub const GGUF_WRITE_VERSION: u32 = 3;

/// Errors from writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufWriteError {
    #[error("write failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("general.alignment must be a u32 power of two no larger than 2^20, got {0:?}")]
    BadAlignment(MetaValue),
    #[error("metadata key {0:?}: arrays nested deeper than {MAX_ARRAY_DEPTH} levels")]
    ArrayTooDeep(String),
    #[error("tensor {name:?}: bad shape {dims:?} ({why})")]
    BadShape {
        name: String,
        dims: Vec<u64>,
        why: &'static str,
    },
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("tensor {name:?}: {got} bytes given, {expected} remain to be written")]
    DataOverrun {
        name: String,
        expected: u64,
        got: u64,
    },
    #[error("tensor data given after the last tensor was complete")]
    NoTensorLeft,
    #[error("tensor {name:?}: {written} of {expected} bytes written before finish")]
    Incomplete {
        name: String,
        written: u64,
        expected: u64,
    },
}

/// Name, shape and format of one tensor to write. `dims` are in GGUF order (`dims[0]` is
/// the contiguous row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub format: QuantFormat,
}

impl TensorSpec {
    /// A spec from its parts.
    pub fn new(name: impl Into<String>, dims: &[u64], format: QuantFormat) -> Self {
        Self {
            name: name.into(),
            dims: dims.to_vec(),
            format,
        }
    }

    /// Bytes of data this tensor needs.
    pub fn byte_len(&self) -> Result<u64, GgufWriteError> {
        tensor_size(&self.dims, self.format)
            .map(|(_, b)| b)
            .map_err(|why| GgufWriteError::BadShape {
                name: self.name.clone(),
                dims: self.dims.clone(),
                why,
            })
    }
}

/// Where one tensor goes.
#[derive(Clone, Debug)]
struct Slot {
    name: String,
    /// Offset from the start of the data section.
    offset: u64,
    bytes: u64,
}

/// A GGUF file being written: header already emitted, tensor data expected in order.
pub struct GgufWriter<W: Write> {
    out: W,
    alignment: u64,
    header_len: u64,
    data_offset: u64,
    slots: Vec<Slot>,
    /// Index of the tensor receiving data.
    current: usize,
    /// Bytes of the current tensor written so far.
    written: u64,
}

fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

fn put_array(h: &mut Vec<u8>, a: &MetaArray) {
    h.extend_from_slice(&a.elem_type_id().to_le_bytes());
    h.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        MetaArray::U8(v) => h.extend_from_slice(v),
        MetaArray::I8(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        MetaArray::U16(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        MetaArray::I16(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        MetaArray::U32(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        MetaArray::I32(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        MetaArray::F32(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        MetaArray::Bool(v) => h.extend(v.iter().map(|&b| u8::from(b))),
        MetaArray::String(v) => v.iter().for_each(|s| put_str(h, s)),
        MetaArray::Array(v) => v.iter().for_each(|inner| put_array(h, inner)),
        MetaArray::U64(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        MetaArray::I64(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        MetaArray::F64(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
    }
}

fn put_value(h: &mut Vec<u8>, v: &MetaValue) {
    h.extend_from_slice(&v.type_id().to_le_bytes());
    match v {
        MetaValue::U8(x) => h.push(*x),
        MetaValue::I8(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => h.push(u8::from(*x)),
        MetaValue::String(s) => put_str(h, s),
        MetaValue::Array(a) => put_array(h, a),
        MetaValue::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
    }
}

fn alignment_of(metadata: &BTreeMap<String, MetaValue>) -> Result<u64, GgufWriteError> {
    match metadata.get("general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(MetaValue::U32(a)) if a.is_power_of_two() && u64::from(*a) <= MAX_ALIGNMENT => {
            Ok(u64::from(*a))
        }
        Some(v) => Err(GgufWriteError::BadAlignment(v.clone())),
    }
}

fn zeros(out: &mut impl Write, mut n: u64) -> std::io::Result<()> {
    const Z: [u8; 256] = [0; 256];
    while n > 0 {
        let k = n.min(Z.len() as u64) as usize;
        out.write_all(&Z[..k])?;
        n -= k as u64;
    }
    Ok(())
}

impl<W: Write> GgufWriter<W> {
    /// Validate the inventory, lay out the data section and write the header (metadata,
    /// tensor infos, padding) to `out`. The alignment is `general.alignment` (which must
    /// be a u32 power of two) or [`DEFAULT_ALIGNMENT`].
    pub fn new(
        mut out: W,
        metadata: &BTreeMap<String, MetaValue>,
        tensors: &[TensorSpec],
    ) -> Result<Self, GgufWriteError> {
        let alignment = alignment_of(metadata)?;
        let mut h = Vec::new();
        h.extend_from_slice(&GGUF_MAGIC);
        h.extend_from_slice(&GGUF_WRITE_VERSION.to_le_bytes());
        h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        h.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (k, v) in metadata {
            if let MetaValue::Array(a) = v
                && a.depth() > MAX_ARRAY_DEPTH
            {
                return Err(GgufWriteError::ArrayTooDeep(k.clone()));
            }
            put_str(&mut h, k);
            put_value(&mut h, v);
        }
        let mut seen = HashSet::with_capacity(tensors.len());
        let mut slots = Vec::with_capacity(tensors.len());
        let mut next = 0u64;
        for t in tensors {
            if !seen.insert(t.name.as_str()) {
                return Err(GgufWriteError::DuplicateTensor(t.name.clone()));
            }
            let bytes = t.byte_len()?;
            put_str(&mut h, &t.name);
            h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&t.format.ggml_type().to_le_bytes());
            h.extend_from_slice(&next.to_le_bytes());
            slots.push(Slot {
                name: t.name.clone(),
                offset: next,
                bytes,
            });
            next = next
                .checked_add(bytes)
                .map(|e| e.next_multiple_of(alignment))
                .ok_or_else(|| GgufWriteError::BadShape {
                    name: t.name.clone(),
                    dims: t.dims.clone(),
                    why: "data section size overflows",
                })?;
        }
        let data_offset = (h.len() as u64).next_multiple_of(alignment);
        out.write_all(&h)?;
        zeros(&mut out, data_offset - h.len() as u64)?;
        let header_len = h.len() as u64;
        let mut w = Self {
            out,
            alignment,
            header_len,
            data_offset,
            slots,
            current: 0,
            written: 0,
        };
        w.skip_empty()?;
        Ok(w)
    }

    /// Alignment of the data section and of every tensor.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Bytes of header (metadata and tensor infos) before the padding.
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Name and byte length of the tensor whose data is expected next, if any.
    pub fn next_tensor(&self) -> Option<(&str, u64)> {
        self.slots
            .get(self.current)
            .map(|s| (s.name.as_str(), s.bytes - self.written))
    }

    /// Move past tensors that are complete (zero-byte tensors cannot occur, as shapes
    /// have no zero dimension, but the loop keeps the invariant simple).
    fn skip_empty(&mut self) -> std::io::Result<()> {
        while let Some(s) = self.slots.get(self.current) {
            if self.written < s.bytes {
                break;
            }
            let end = s.offset + s.bytes;
            zeros(&mut self.out, end.next_multiple_of(self.alignment) - end)?;
            self.current += 1;
            self.written = 0;
        }
        Ok(())
    }

    /// Append `chunk` to the data of the current tensor; it must not run past that
    /// tensor's end. When a tensor is complete, its padding is written and the next one
    /// becomes current.
    pub fn write_data(&mut self, chunk: &[u8]) -> Result<(), GgufWriteError> {
        if chunk.is_empty() {
            return Ok(());
        }
        let Some(s) = self.slots.get(self.current) else {
            return Err(GgufWriteError::NoTensorLeft);
        };
        let left = s.bytes - self.written;
        if chunk.len() as u64 > left {
            return Err(GgufWriteError::DataOverrun {
                name: s.name.clone(),
                expected: left,
                got: chunk.len() as u64,
            });
        }
        self.out.write_all(chunk)?;
        self.written += chunk.len() as u64;
        self.skip_empty()?;
        Ok(())
    }

    /// Write the whole data of the next tensor; `bytes` must be exactly its size.
    pub fn write_tensor(&mut self, bytes: &[u8]) -> Result<(), GgufWriteError> {
        let Some(s) = self.slots.get(self.current) else {
            return Err(GgufWriteError::NoTensorLeft);
        };
        if self.written != 0 || bytes.len() as u64 != s.bytes {
            return Err(GgufWriteError::DataOverrun {
                name: s.name.clone(),
                expected: s.bytes - self.written,
                got: bytes.len() as u64,
            });
        }
        self.write_data(bytes)
    }

    /// Check every tensor received all its data, flush, and hand back the sink.
    pub fn finish(mut self) -> Result<W, GgufWriteError> {
        if let Some(s) = self.slots.get(self.current) {
            return Err(GgufWriteError::Incomplete {
                name: s.name.clone(),
                written: self.written,
                expected: s.bytes,
            });
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Write a whole GGUF file: `metadata` and `tensors` (spec, data) in order.
pub fn write_gguf<W: Write>(
    out: W,
    metadata: &BTreeMap<String, MetaValue>,
    tensors: &[(TensorSpec, &[u8])],
) -> Result<W, GgufWriteError> {
    let specs: Vec<TensorSpec> = tensors.iter().map(|(s, _)| s.clone()).collect();
    let mut w = GgufWriter::new(out, metadata, &specs)?;
    for (_, data) in tensors {
        w.write_tensor(data)?;
    }
    w.finish()
}

/// A whole GGUF file in memory (tests, fuzz seeds, small fixtures).
pub fn gguf_to_vec(
    metadata: &BTreeMap<String, MetaValue>,
    tensors: &[(TensorSpec, &[u8])],
) -> Result<Vec<u8>, GgufWriteError> {
    write_gguf(Vec::new(), metadata, tensors)
}
