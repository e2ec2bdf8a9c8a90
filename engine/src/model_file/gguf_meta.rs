//! GGUF metadata values: the thirteen value types (arrays, nested too), their type ids and
//! typed accessors. Shared by the reader (`gguf.rs`) and the writer (`gguf_write.rs`).

/// GGUF metadata value type ids, as stored in the file.
pub mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
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
    /// Nested arrays: each element is an array with its own element type.
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

/// The GGUF name of a value type id, if it is one.
pub fn type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        type_id::U8 => "u8",
        type_id::I8 => "i8",
        type_id::U16 => "u16",
        type_id::I16 => "i16",
        type_id::U32 => "u32",
        type_id::I32 => "i32",
        type_id::F32 => "f32",
        type_id::BOOL => "bool",
        type_id::STRING => "string",
        type_id::ARRAY => "array",
        type_id::U64 => "u64",
        type_id::I64 => "i64",
        type_id::F64 => "f64",
        _ => return None,
    })
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
    /// The GGUF type id of the element type.
    pub fn elem_type_id(&self) -> u32 {
        match self {
            Self::U8(_) => type_id::U8,
            Self::I8(_) => type_id::I8,
            Self::U16(_) => type_id::U16,
            Self::I16(_) => type_id::I16,
            Self::U32(_) => type_id::U32,
            Self::I32(_) => type_id::I32,
            Self::F32(_) => type_id::F32,
            Self::Bool(_) => type_id::BOOL,
            Self::String(_) => type_id::STRING,
            Self::Array(_) => type_id::ARRAY,
            Self::U64(_) => type_id::U64,
            Self::I64(_) => type_id::I64,
            Self::F64(_) => type_id::F64,
        }
    }
    /// The GGUF name of the element type.
    pub fn elem_type_name(&self) -> &'static str {
        type_name(self.elem_type_id()).unwrap_or("?")
    }
    /// Nesting depth: 1 for a flat array, 1 + the deepest element for an array of arrays.
    pub fn depth(&self) -> usize {
        match self {
            Self::Array(v) => 1 + v.iter().map(MetaArray::depth).max().unwrap_or(0),
            _ => 1,
        }
    }
    /// The strings, if this is a string array.
    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            Self::String(v) => Some(v),
            _ => None,
        }
    }
}

impl MetaValue {
    /// The GGUF type id of the value.
    pub fn type_id(&self) -> u32 {
        match self {
            Self::U8(_) => type_id::U8,
            Self::I8(_) => type_id::I8,
            Self::U16(_) => type_id::U16,
            Self::I16(_) => type_id::I16,
            Self::U32(_) => type_id::U32,
            Self::I32(_) => type_id::I32,
            Self::F32(_) => type_id::F32,
            Self::Bool(_) => type_id::BOOL,
            Self::String(_) => type_id::STRING,
            Self::Array(_) => type_id::ARRAY,
            Self::U64(_) => type_id::U64,
            Self::I64(_) => type_id::I64,
            Self::F64(_) => type_id::F64,
        }
    }
    /// The GGUF name of the value's type.
    pub fn type_name(&self) -> &'static str {
        type_name(self.type_id()).unwrap_or("?")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_and_names_agree() {
        let values = [
            MetaValue::U8(1),
            MetaValue::I8(-1),
            MetaValue::U16(1),
            MetaValue::I16(-1),
            MetaValue::U32(1),
            MetaValue::I32(-1),
            MetaValue::F32(0.5),
            MetaValue::Bool(true),
            MetaValue::String("x".into()),
            MetaValue::Array(MetaArray::U8(vec![])),
            MetaValue::U64(1),
            MetaValue::I64(-1),
            MetaValue::F64(0.5),
        ];
        for (i, v) in values.iter().enumerate() {
            assert_eq!(v.type_id(), i as u32);
            assert_eq!(Some(v.type_name()), type_name(i as u32));
        }
        assert_eq!(type_name(13), None);
    }

    #[test]
    fn accessors_convert_or_refuse() {
        assert_eq!(MetaValue::I32(-3).as_u64(), None);
        assert_eq!(MetaValue::I64(7).as_u64(), Some(7));
        assert_eq!(MetaValue::U16(9).as_f64(), Some(9.0));
        assert_eq!(MetaValue::String("a".into()).as_u64(), None);
        assert_eq!(MetaValue::Bool(true).as_bool(), Some(true));
        assert_eq!(MetaValue::U8(1).as_bool(), None);
    }

    #[test]
    fn depth_counts_nesting() {
        let flat = MetaArray::U8(vec![1]);
        let nested = MetaArray::Array(vec![MetaArray::Array(vec![flat.clone()]), flat.clone()]);
        assert_eq!(flat.depth(), 1);
        assert_eq!(nested.depth(), 3);
        assert_eq!(MetaArray::Array(vec![]).depth(), 1);
    }
}
