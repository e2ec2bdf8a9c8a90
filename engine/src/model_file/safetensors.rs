//! safetensors single-file format: header parsing and validation, dtypes, dequantization of
//! F32/F16/BF16/F8_E4M3 to f32, and a small writer.
//!
//! Layout: a u64 little-endian header length `N`, `N` bytes of JSON (an object mapping each
//! tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}`, plus an optional
//! `"__metadata__"` object of strings), then the data buffer; offsets are relative to the
//! buffer. Shapes are row-major with the last dimension contiguous (PyTorch order), the
//! reverse of GGUF's.
//!
//! Nothing in the header is trusted: the length is checked against the file before the JSON
//! is read, duplicate names are refused, and every tensor's span is checked for range,
//! dtype alignment, size (shape x dtype) and overlap, each failure a named
//! [`SafetensorsError`].

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// Largest header accepted (the reference implementation's limit).
pub const MAX_HEADER_LEN: u64 = 100 << 20;
/// The header key holding free-form string metadata.
pub const METADATA_KEY: &str = "__metadata__";
/// Largest tensor rank accepted.
pub const MAX_RANK: usize = 16;

/// Errors found while reading safetensors files.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SafetensorsError {
    #[error("file is {len} bytes, too short for the 8-byte header length")]
    TooShort { len: u64 },
    #[error("header length {declared} is absurd: file is {file_len} bytes, limit {MAX_HEADER_LEN}")]
    HeaderTooLarge { declared: u64, file_len: u64 },
    #[error("header is not a JSON object: {why}")]
    HeaderNotJson { why: String },
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("__metadata__ is not an object of strings: {why}")]
    BadMetadata { why: String },
    #[error("tensor {name:?}: malformed entry: {why}")]
    BadEntry { name: String, why: String },
    #[error("tensor {name:?}: unknown dtype {dtype:?}")]
    UnknownDtype { name: String, dtype: String },
    #[error(
        "tensor {name:?}: dtype {dtype} cannot be converted to f32 (F32, F16, BF16, F8_E4M3 can)"
    )]
    UnsupportedDtype { name: String, dtype: &'static str },
    #[error("tensor {name:?}: rank {rank} exceeds {MAX_RANK}")]
    TooManyDims { name: String, rank: usize },
    #[error("tensor {name:?}: shape {shape:?} overflows")]
    ShapeOverflow { name: String, shape: Vec<u64> },
    #[error("tensor {name:?}: data_offsets [{begin}, {end}) are reversed")]
    ReversedOffsets { name: String, begin: u64, end: u64 },
    #[error("tensor {name:?}: data [{begin}, {end}) runs past the data buffer ({len} bytes)")]
    DataPastEnd {
        name: String,
        begin: u64,
        end: u64,
        len: u64,
    },
    #[error("tensor {name:?}: offset {begin} is not a multiple of the element size {elem}")]
    Misaligned { name: String, begin: u64, elem: u64 },
    #[error("tensor {name:?}: shape x dtype is {expected} bytes, data_offsets span {span}")]
    SizeMismatch {
        name: String,
        expected: u64,
        span: u64,
    },
    #[error("tensors {a:?} and {b:?} overlap in the data buffer")]
    Overlap { a: String, b: String },
}

impl SafetensorsError {
    /// The variant's name, e.g. `"HeaderTooLarge"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::TooShort { .. } => "TooShort",
            Self::HeaderTooLarge { .. } => "HeaderTooLarge",
            Self::HeaderNotJson { .. } => "HeaderNotJson",
            Self::DuplicateTensor(_) => "DuplicateTensor",
            Self::BadMetadata { .. } => "BadMetadata",
            Self::BadEntry { .. } => "BadEntry",
            Self::UnknownDtype { .. } => "UnknownDtype",
            Self::UnsupportedDtype { .. } => "UnsupportedDtype",
            Self::TooManyDims { .. } => "TooManyDims",
            Self::ShapeOverflow { .. } => "ShapeOverflow",
            Self::ReversedOffsets { .. } => "ReversedOffsets",
            Self::DataPastEnd { .. } => "DataPastEnd",
            Self::Misaligned { .. } => "Misaligned",
            Self::SizeMismatch { .. } => "SizeMismatch",
            Self::Overlap { .. } => "Overlap",
        }
    }
}

/// The byte-sized safetensors dtypes. Sub-byte types (F4, F6_*) are unknown to Assay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum Dtype {
    BOOL,
    U8,
    I8,
    F8_E4M3,
    F8_E5M2,
    F8_E8M0,
    U16,
    I16,
    F16,
    BF16,
    U32,
    I32,
    F32,
    U64,
    I64,
    F64,
}

impl Dtype {
    const ALL: [Dtype; 16] = [
        Self::BOOL,
        Self::U8,
        Self::I8,
        Self::F8_E4M3,
        Self::F8_E5M2,
        Self::F8_E8M0,
        Self::U16,
        Self::I16,
        Self::F16,
        Self::BF16,
        Self::U32,
        Self::I32,
        Self::F32,
        Self::U64,
        Self::I64,
        Self::F64,
    ];

    /// The name used in safetensors headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::BOOL => "BOOL",
            Self::U8 => "U8",
            Self::I8 => "I8",
            Self::F8_E4M3 => "F8_E4M3",
            Self::F8_E5M2 => "F8_E5M2",
            Self::F8_E8M0 => "F8_E8M0",
            Self::U16 => "U16",
            Self::I16 => "I16",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::U32 => "U32",
            Self::I32 => "I32",
            Self::F32 => "F32",
            Self::U64 => "U64",
            Self::I64 => "I64",
            Self::F64 => "F64",
        }
    }

    /// The dtype named `s` in a header, if Assay knows it.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Self::BOOL | Self::U8 | Self::I8 | Self::F8_E4M3 | Self::F8_E5M2 | Self::F8_E8M0 => 1,
            Self::U16 | Self::I16 | Self::F16 | Self::BF16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 => 8,
        }
    }

    /// Whether [`dequantize`] converts this dtype.
    pub fn is_float_supported(self) -> bool {
        matches!(self, Self::F32 | Self::F16 | Self::BF16 | Self::F8_E4M3)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsTensor {
    pub name: String,
    pub dtype: Dtype,
    /// Row-major shape, last dimension contiguous. Empty for a scalar.
    pub shape: Vec<u64>,
    /// Byte range in the data buffer (relative to [`SafetensorsHeader::data_start`]).
    pub begin: u64,
    pub end: u64,
    /// Number of elements (product of `shape`; 1 for a scalar).
    pub elems: u64,
}

/// A parsed and validated safetensors header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsHeader {
    /// Tensors in data order.
    pub tensors: Vec<SafetensorsTensor>,
    /// The `__metadata__` strings.
    pub metadata: BTreeMap<String, String>,
    /// Absolute file offset of the data buffer (8 + header length).
    pub data_start: u64,
}

/// A JSON object's entries in file order, duplicates kept (serde_json's maps drop them).
struct Entries<V>(Vec<(String, V)>);

/// The top-level header object: `__metadata__` keeps its own duplicate keys visible,
/// tensor entries are read as JSON values and checked one by one.
struct HeaderEntries(Vec<(String, HeaderValue)>);

enum HeaderValue {
    Metadata(Result<Entries<serde_json::Value>, String>),
    Tensor(serde_json::Value),
}

impl<'de> Deserialize<'de> for HeaderEntries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HeaderVisitor;
        impl<'de> Visitor<'de> for HeaderVisitor {
            type Value = HeaderEntries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<HeaderEntries, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    let value = if k == METADATA_KEY {
                        // Any JSON is accepted here, so a wrong shape is reported as
                        // BadMetadata rather than as a JSON syntax error.
                        let raw: MetadataValue = m.next_value()?;
                        HeaderValue::Metadata(raw.0)
                    } else {
                        HeaderValue::Tensor(m.next_value()?)
                    };
                    v.push((k, value));
                }
                Ok(HeaderEntries(v))
            }
        }
        d.deserialize_map(HeaderVisitor)
    }
}

/// `__metadata__`: an object (entries kept in order with duplicates) or, for any other
/// JSON, the reason it is not one.
struct MetadataValue(Result<Entries<serde_json::Value>, String>);

impl<'de> Deserialize<'de> for MetadataValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MetaVisitor;
        impl<'de> Visitor<'de> for MetaVisitor {
            type Value = MetadataValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<MetadataValue, A::Error> {
                let mut v = Vec::new();
                while let Some(kv) = m.next_entry::<String, serde_json::Value>()? {
                    v.push(kv);
                }
                Ok(MetadataValue(Ok(Entries(v))))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<MetadataValue, A::Error> {
                while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(MetadataValue(Err("an array".into())))
            }
            fn visit_bool<E>(self, _: bool) -> Result<MetadataValue, E> {
                Ok(MetadataValue(Err("a bool".into())))
            }
            fn visit_i64<E>(self, _: i64) -> Result<MetadataValue, E> {
                Ok(MetadataValue(Err("a number".into())))
            }
            fn visit_u64<E>(self, _: u64) -> Result<MetadataValue, E> {
                Ok(MetadataValue(Err("a number".into())))
            }
            fn visit_f64<E>(self, _: f64) -> Result<MetadataValue, E> {
                Ok(MetadataValue(Err("a number".into())))
            }
            fn visit_str<E>(self, _: &str) -> Result<MetadataValue, E> {
                Ok(MetadataValue(Err("a string".into())))
            }
            fn visit_unit<E>(self) -> Result<MetadataValue, E> {
                Ok(MetadataValue(Err("null".into())))
            }
        }
        d.deserialize_any(MetaVisitor)
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// Parse and validate the header of a safetensors file held in `buf`.
pub fn parse_header(buf: &[u8]) -> Result<SafetensorsHeader, SafetensorsError> {
    let file_len = buf.len() as u64;
    let Some(len_bytes) = buf.first_chunk::<8>() else {
        return Err(SafetensorsError::TooShort { len: file_len });
    };
    let declared = u64::from_le_bytes(*len_bytes);
    if declared > MAX_HEADER_LEN || declared > file_len - 8 {
        return Err(SafetensorsError::HeaderTooLarge { declared, file_len });
    }
    let data_start = 8 + declared;
    let json = buf.get(8..data_start as usize).unwrap_or_default();
    let not_json = |why: String| SafetensorsError::HeaderNotJson { why };
    let entries: HeaderEntries =
        serde_json::from_slice(json).map_err(|e| not_json(e.to_string()))?;

    let data_len = file_len - data_start;
    let mut metadata = None;
    let mut seen = HashSet::new();
    let mut tensors = Vec::with_capacity(entries.0.len());
    for (name, value) in entries.0 {
        if !seen.insert(name.clone()) {
            return Err(SafetensorsError::DuplicateTensor(name));
        }
        match value {
            HeaderValue::Metadata(m) => metadata = Some(parse_metadata(m)?),
            HeaderValue::Tensor(value) => tensors.push(check_entry(name, value, data_len)?),
        }
    }
    tensors.sort_by_key(|t| (t.begin, t.end));
    // Empty tensors occupy no bytes and overlap nothing; among the others, each must start
    // at or after the furthest end seen so far.
    let mut furthest: Option<&SafetensorsTensor> = None;
    for t in tensors.iter().filter(|t| t.begin < t.end) {
        if let Some(f) = furthest {
            if f.end > t.begin {
                return Err(SafetensorsError::Overlap {
                    a: f.name.clone(),
                    b: t.name.clone(),
                });
            }
        }
        if furthest.is_none_or(|f| t.end > f.end) {
            furthest = Some(t);
        }
    }
    Ok(SafetensorsHeader {
        tensors,
        metadata: metadata.unwrap_or_default(),
        data_start,
    })
}

fn parse_metadata(
    value: Result<Entries<serde_json::Value>, String>,
) -> Result<BTreeMap<String, String>, SafetensorsError> {
    let bad = |why: String| SafetensorsError::BadMetadata { why };
    let entries = value.map_err(|what| bad(format!("it is {what}, not an object")))?;
    let mut out = BTreeMap::new();
    for (k, v) in entries.0 {
        let serde_json::Value::String(v) = v else {
            return Err(bad(format!("value of {k:?} is not a string")));
        };
        if out.insert(k.clone(), v).is_some() {
            return Err(bad(format!("duplicate key {k:?}")));
        }
    }
    Ok(out)
}

fn check_entry(
    name: String,
    value: serde_json::Value,
    data_len: u64,
) -> Result<SafetensorsTensor, SafetensorsError> {
    let raw: RawEntry = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => {
            return Err(SafetensorsError::BadEntry {
                name,
                why: e.to_string(),
            });
        }
    };
    let Some(dtype) = Dtype::from_name(&raw.dtype) else {
        return Err(SafetensorsError::UnknownDtype {
            name,
            dtype: raw.dtype,
        });
    };
    if raw.shape.len() > MAX_RANK {
        return Err(SafetensorsError::TooManyDims {
            name,
            rank: raw.shape.len(),
        });
    }
    let [begin, end] = raw.data_offsets;
    let elems = raw.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    let expected = elems.and_then(|e| e.checked_mul(dtype.size()));
    let (Some(elems), Some(expected)) = (elems, expected) else {
        return Err(SafetensorsError::ShapeOverflow {
            name,
            shape: raw.shape,
        });
    };
    if begin > end {
        return Err(SafetensorsError::ReversedOffsets { name, begin, end });
    }
    if end > data_len {
        return Err(SafetensorsError::DataPastEnd {
            name,
            begin,
            end,
            len: data_len,
        });
    }
    if begin < end && begin % dtype.size() != 0 {
        return Err(SafetensorsError::Misaligned {
            name,
            begin,
            elem: dtype.size(),
        });
    }
    if end - begin != expected {
        return Err(SafetensorsError::SizeMismatch {
            name,
            expected,
            span: end - begin,
        });
    }
    Ok(SafetensorsTensor {
        name,
        dtype,
        shape: raw.shape,
        begin,
        end,
        elems,
    })
}

/// Decode one F8_E4M3 (the "fn" variant: no infinities, S.1111.111 is NaN, max 448) byte.
pub fn f8_e4m3_to_f32(b: u8) -> f32 {
    let sign = u32::from(b >> 7) << 31;
    let exp = u32::from((b >> 3) & 0x0f);
    let man = u32::from(b & 0x07);
    let magnitude = if exp == 0x0f && man == 0x07 {
        f32::NAN.to_bits()
    } else if exp == 0 {
        // Subnormal: man x 2^-9, exact in f32.
        (man as f32 * (1.0 / 512.0)).to_bits()
    } else {
        // Re-bias the exponent from 7 to 127 and widen the mantissa from 3 to 23 bits.
        ((exp + 120) << 23) | (man << 20)
    };
    f32::from_bits(sign | magnitude)
}

/// Convert `data` (whole elements of `dtype`) to f32 into `out`.
///
/// `name` is only used in errors; `out.len()` must be `data.len() / dtype.size()`.
pub fn dequantize(
    name: &str,
    dtype: Dtype,
    data: &[u8],
    out: &mut [f32],
) -> Result<(), SafetensorsError> {
    let size = dtype.size();
    if data.len() as u64 != out.len() as u64 * size {
        return Err(SafetensorsError::SizeMismatch {
            name: name.to_owned(),
            expected: out.len() as u64 * size,
            span: data.len() as u64,
        });
    }
    match dtype {
        Dtype::F32 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        Dtype::F16 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
                *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        Dtype::BF16 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
        Dtype::F8_E4M3 => {
            for (o, &b) in out.iter_mut().zip(data) {
                *o = f8_e4m3_to_f32(b);
            }
        }
        other => {
            return Err(SafetensorsError::UnsupportedDtype {
                name: name.to_owned(),
                dtype: other.name(),
            });
        }
    }
    Ok(())
}

/// One tensor to write with [`safetensors_to_vec`]: name, dtype, row-major shape, bytes.
pub type TensorToWrite<'a> = (&'a str, Dtype, &'a [u64], &'a [u8]);

/// A whole safetensors file in memory: tensors laid out in the given order, the header
/// padded with spaces so the data buffer starts 8-aligned. Shapes and byte lengths are not
/// checked here (tests use this to build broken files too).
pub fn safetensors_to_vec(
    tensors: &[TensorToWrite<'_>],
    metadata: &BTreeMap<String, String>,
) -> Vec<u8> {
    // Sorted maps and structs with fields in sorted order, so the header's bytes do not
    // depend on whether some crate in the build turned on serde_json's `preserve_order`.
    #[derive(serde::Serialize)]
    #[serde(untagged)]
    enum Entry<'a> {
        Metadata(&'a BTreeMap<String, String>),
        Tensor {
            data_offsets: [u64; 2],
            dtype: &'static str,
            shape: &'a [u64],
        },
    }
    let mut header: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    if !metadata.is_empty() {
        header.insert(METADATA_KEY, Entry::Metadata(metadata));
    }
    let mut offset = 0u64;
    for (name, dtype, shape, bytes) in tensors {
        let end = offset + bytes.len() as u64;
        header.insert(
            name,
            Entry::Tensor {
                data_offsets: [offset, end],
                dtype: dtype.name(),
                shape,
            },
        );
        offset = end;
    }
    let mut json = serde_json::to_vec(&header).unwrap_or_default();
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + json.len() + offset as usize);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    for (_, _, _, bytes) in tensors {
        out.extend_from_slice(bytes);
    }
    out
}
