//! Tests of the GGUF reader and writer: round trips of every value type, v2/v3, alignment,
//! truncation at every length, each hostile-header error, and the four real models.

use std::collections::BTreeMap;

use super::gguf::{self, GgufError, MetaArray, MetaValue, parse, type_id};
use super::gguf_write::{GgufWriteError, GgufWriter, TensorSpec, gguf_to_vec};
use crate::quant::QuantFormat;

/// Deterministic filler bytes.
fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Metadata holding every value type, arrays of every element type, nested and empty.
fn all_types_metadata() -> BTreeMap<String, MetaValue> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: MetaValue| {
        m.insert(k.to_owned(), v);
    };
    put("general.architecture", MetaValue::String("llama".into()));
    put("t.u8", MetaValue::U8(250));
    put("t.i8", MetaValue::I8(-100));
    put("t.u16", MetaValue::U16(65_000));
    put("t.i16", MetaValue::I16(-30_000));
    put("t.u32", MetaValue::U32(4_000_000_000));
    put("t.i32", MetaValue::I32(-2_000_000_000));
    put("t.f32", MetaValue::F32(-1.5e-7));
    put("t.bool.t", MetaValue::Bool(true));
    put("t.bool.f", MetaValue::Bool(false));
    put("t.string", MetaValue::String("héllo ✓ \u{0}".into()));
    put("t.string.empty", MetaValue::String(String::new()));
    put("t.u64", MetaValue::U64(u64::MAX));
    put("t.i64", MetaValue::I64(i64::MIN));
    put("t.f64", MetaValue::F64(std::f64::consts::PI));
    put("a.u8", MetaValue::Array(MetaArray::U8(vec![0, 1, 255])));
    put("a.i8", MetaValue::Array(MetaArray::I8(vec![-128, 127])));
    put("a.u16", MetaValue::Array(MetaArray::U16(vec![1, 65535])));
    put("a.i16", MetaValue::Array(MetaArray::I16(vec![-1, 2])));
    put("a.u32", MetaValue::Array(MetaArray::U32(vec![7; 5])));
    put("a.i32", MetaValue::Array(MetaArray::I32(vec![-7, 0, 7])));
    put(
        "a.f32",
        MetaValue::Array(MetaArray::F32(vec![0.25, -0.0, f32::INFINITY])),
    );
    put(
        "a.bool",
        MetaValue::Array(MetaArray::Bool(vec![true, false, true])),
    );
    put(
        "a.string",
        MetaValue::Array(MetaArray::String(vec!["a".into(), String::new()])),
    );
    put("a.u64", MetaValue::Array(MetaArray::U64(vec![u64::MAX, 0])));
    put(
        "a.i64",
        MetaValue::Array(MetaArray::I64(vec![i64::MIN, i64::MAX])),
    );
    put(
        "a.f64",
        MetaValue::Array(MetaArray::F64(vec![1e300, -1e-300])),
    );
    put("a.empty", MetaValue::Array(MetaArray::F32(vec![])));
    put("a.empty.nested", MetaValue::Array(MetaArray::Array(vec![])));
    let nested = MetaArray::Array(vec![
        MetaArray::U8(vec![1, 2]),
        MetaArray::String(vec!["x".into()]),
        MetaArray::Array(vec![MetaArray::I64(vec![-5]), MetaArray::Array(vec![])]),
    ]);
    assert_eq!(nested.depth(), 3);
    put("a.nested", MetaValue::Array(nested));
    m
}

fn small_tensors() -> Vec<(TensorSpec, Vec<u8>)> {
    let specs = [
        TensorSpec::new("tok.f32", &[8, 3], QuantFormat::F32),
        TensorSpec::new("w.f16", &[5], QuantFormat::F16),
        TensorSpec::new("w.q8_0", &[64, 2], QuantFormat::Q8_0),
        TensorSpec::new("w.q4_k", &[256, 1, 1, 2], QuantFormat::Q4_K),
        TensorSpec::new("w.bf16", &[3, 1, 1], QuantFormat::BF16),
    ];
    specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let n = s.byte_len().unwrap() as usize;
            (s, bytes(n, i as u8))
        })
        .collect()
}

fn build(meta: &BTreeMap<String, MetaValue>, tensors: &[(TensorSpec, Vec<u8>)]) -> Vec<u8> {
    let refs: Vec<(TensorSpec, &[u8])> = tensors
        .iter()
        .map(|(s, d)| (s.clone(), d.as_slice()))
        .collect();
    gguf_to_vec(meta, &refs).unwrap()
}

fn check_round_trip(meta: &BTreeMap<String, MetaValue>, tensors: &[(TensorSpec, Vec<u8>)]) {
    let file = build(meta, tensors);
    let h = parse(&file).unwrap();
    assert_eq!(h.version, 3);
    assert_eq!(&h.metadata, meta);
    assert_eq!(h.data_offset % h.alignment, 0);
    assert_eq!(h.tensors.len(), tensors.len());
    for (t, (spec, data)) in h.tensors.iter().zip(tensors) {
        assert_eq!(
            (&t.name, &t.dims, t.format),
            (&spec.name, &spec.dims, spec.format)
        );
        assert_eq!(t.offset % h.alignment, 0, "{}", t.name);
        assert_eq!(t.bytes as usize, data.len());
        assert_eq!(t.elems, spec.dims.iter().product::<u64>());
        let start = (h.data_offset + t.offset) as usize;
        assert_eq!(
            &file[start..start + data.len()],
            data.as_slice(),
            "{}",
            t.name
        );
    }
    assert_eq!(file.len() as u64 % h.alignment, 0, "file ends padded");
}

#[test]
fn round_trip_every_value_type() {
    check_round_trip(&all_types_metadata(), &small_tensors());
}

#[test]
fn round_trip_without_tensors_or_metadata() {
    check_round_trip(&BTreeMap::new(), &[]);
    check_round_trip(&all_types_metadata(), &[]);
    check_round_trip(&BTreeMap::new(), &small_tensors());
}

#[test]
fn round_trip_custom_alignments() {
    for a in [1u32, 2, 8, 64, 4096] {
        let mut meta = all_types_metadata();
        meta.insert("general.alignment".into(), MetaValue::U32(a));
        check_round_trip(&meta, &small_tensors());
        let h = parse(&build(&meta, &small_tensors())).unwrap();
        assert_eq!(h.alignment, u64::from(a));
        if a == 4096 {
            assert_eq!(h.data_offset, 4096);
            assert!(h.tensors.iter().skip(1).all(|t| t.offset >= 4096));
        }
    }
}

#[test]
fn default_alignment_is_32() {
    let h = parse(&build(&BTreeMap::new(), &small_tensors())).unwrap();
    assert_eq!(h.alignment, 32);
    // tok.f32: 96 bytes; w.f16: 10 -> 128; w.q8_0: 4 blocks of 34 = 136 -> 288;
    // w.q4_k: 2 super-blocks of 144 = 288 -> 576.
    let offsets: Vec<u64> = h.tensors.iter().map(|t| t.offset).collect();
    assert_eq!(offsets, [0, 96, 128, 288, 576]);
}

#[test]
fn version_2_reads_like_version_3() {
    let mut file = build(&all_types_metadata(), &small_tensors());
    file[4] = 2;
    let h = parse(&file).unwrap();
    assert_eq!(h.version, 2);
    assert_eq!(h.metadata, all_types_metadata());
}

#[test]
fn chunked_streaming_equals_whole_write() {
    let meta = all_types_metadata();
    let tensors = small_tensors();
    let whole = build(&meta, &tensors);
    let specs: Vec<TensorSpec> = tensors.iter().map(|(s, _)| s.clone()).collect();
    let mut w = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
    assert_eq!(w.next_tensor(), Some(("tok.f32", 96)));
    for (_, data) in &tensors {
        for chunk in data.chunks(7) {
            w.write_data(chunk).unwrap();
        }
    }
    assert_eq!(w.next_tensor(), None);
    assert_eq!(w.finish().unwrap(), whole);
}

#[test]
fn writer_refuses_what_the_reader_would_reject() {
    let meta = BTreeMap::new();
    let err = |specs: &[TensorSpec]| GgufWriter::new(Vec::new(), &meta, specs).err().unwrap();
    let f32s = |name: &str, dims: &[u64]| TensorSpec::new(name, dims, QuantFormat::F32);
    assert!(
        matches!(err(&[f32s("a", &[1]), f32s("a", &[2])]), GgufWriteError::DuplicateTensor(n) if n == "a")
    );
    for dims in [&[][..], &[0], &[1, 1, 1, 1, 1], &[u64::MAX, 2]] {
        assert!(
            matches!(err(&[f32s("a", dims)]), GgufWriteError::BadShape { .. }),
            "{dims:?}"
        );
    }
    let q8 = TensorSpec::new("q", &[31], QuantFormat::Q8_0);
    assert!(matches!(err(&[q8]), GgufWriteError::BadShape { .. }));

    for bad in [
        MetaValue::U32(0),
        MetaValue::U32(48),
        MetaValue::U64(32),
        MetaValue::U32(1 << 21),
    ] {
        let m = BTreeMap::from([("general.alignment".to_owned(), bad)]);
        let e = GgufWriter::new(Vec::new(), &m, &[]).err().unwrap();
        assert!(matches!(e, GgufWriteError::BadAlignment(_)));
    }
    let mut deep = MetaArray::U8(vec![1]);
    for _ in 0..gguf::MAX_ARRAY_DEPTH {
        deep = MetaArray::Array(vec![deep]);
    }
    let m = BTreeMap::from([("deep".to_owned(), MetaValue::Array(deep))]);
    let e = GgufWriter::new(Vec::new(), &m, &[]).err().unwrap();
    assert!(matches!(e, GgufWriteError::ArrayTooDeep(k) if k == "deep"));
}

#[test]
fn writer_checks_data_lengths() {
    let meta = BTreeMap::new();
    let specs = [TensorSpec::new("a", &[4], QuantFormat::F32)];
    let mut w = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
    assert!(matches!(
        w.write_tensor(&[0; 12]),
        Err(GgufWriteError::DataOverrun { .. })
    ));
    w.write_data(&[0; 8]).unwrap();
    assert!(matches!(
        w.write_data(&[0; 9]),
        Err(GgufWriteError::DataOverrun { .. })
    ));
    assert!(matches!(
        w.write_tensor(&[0; 8]),
        Err(GgufWriteError::DataOverrun { .. })
    ));
    let w2 = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
    let e = w2.finish().err().unwrap();
    assert!(matches!(
        e,
        GgufWriteError::Incomplete {
            written: 0,
            expected: 16,
            ..
        }
    ));
    w.write_data(&[0; 8]).unwrap();
    assert!(matches!(
        w.write_data(&[1]),
        Err(GgufWriteError::NoTensorLeft)
    ));
    assert!(w.finish().is_ok());
}

#[test]
fn every_truncation_is_a_named_error() {
    let file = build(&all_types_metadata(), &small_tensors());
    let h = parse(&file).unwrap();
    let specs: Vec<TensorSpec> = small_tensors().into_iter().map(|(s, _)| s).collect();
    let header_end = GgufWriter::new(Vec::new(), &all_types_metadata(), &specs)
        .unwrap()
        .header_len();
    assert!(header_end < h.data_offset);
    let data_end = h
        .tensors
        .iter()
        .map(|t| h.data_offset + t.offset + t.bytes)
        .max()
        .unwrap();
    for n in 0..file.len() {
        let r = parse(&file[..n]);
        if n as u64 >= data_end {
            assert!(r.is_ok(), "prefix {n}: {r:?}");
            continue;
        }
        let e = r.err().unwrap();
        let allowed: &[&str] = if (n as u64) < header_end {
            &["Truncated", "AbsurdCount"]
        } else {
            &["DataPastEnd"]
        };
        assert!(
            allowed.contains(&e.kind()),
            "prefix {n} of {}: {e}",
            file.len()
        );
    }
}

/// Little builder for hand-made (possibly invalid) GGUF bytes.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw::default();
        r.0.extend_from_slice(b"GGUF");
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64).raw(s)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Pad to 32 and append `n` data bytes.
    fn data(&mut self, n: usize) -> &mut Self {
        let len = self.0.len().next_multiple_of(32);
        self.0.resize(len + n, 0);
        self
    }
    fn err(&self) -> GgufError {
        parse(&self.0)
            .err()
            .unwrap_or_else(|| panic!("parsed: {:?}", self.0))
    }
}

fn kind(r: &Raw) -> &'static str {
    r.err().kind()
}

#[test]
fn magic_and_version_errors() {
    assert_eq!(
        parse(b"").err(),
        Some(GgufError::Truncated {
            offset: 0,
            needed: 4,
            len: 0
        })
    );
    assert_eq!(parse(b"GG").err().unwrap().kind(), "Truncated");
    assert_eq!(
        parse(b"GGML\x03\0\0\0").err(),
        Some(GgufError::BadMagic(*b"GGML"))
    );
    assert_eq!(
        parse(b"XY").err(),
        Some(GgufError::BadMagic([b'X', b'Y', 0, 0]))
    );
    assert_eq!(parse(b"GGUF").err().unwrap().kind(), "Truncated");
    assert_eq!(Raw::header(1, 0, 0).err(), GgufError::UnsupportedVersion(1));
    assert_eq!(Raw::header(4, 0, 0).err(), GgufError::UnsupportedVersion(4));
    assert_eq!(
        Raw::header(3u32.swap_bytes(), 0, 0).err(),
        GgufError::BigEndian(3)
    );
    assert!(parse(&Raw::header(3, 0, 0).0).is_ok());
}

#[test]
fn absurd_counts_are_refused_before_allocating() {
    assert_eq!(kind(&Raw::header(3, u64::MAX, 0)), "AbsurdCount");
    assert_eq!(kind(&Raw::header(3, 0, u64::MAX)), "AbsurdCount");
    assert_eq!(kind(&Raw::header(3, 1 << 40, 0)), "AbsurdCount");
    // A string length larger than the file.
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX);
    assert_eq!(kind(&r), "AbsurdCount");
    // Array lengths larger than the file, for every element type.
    for ty in 0..=12u32 {
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k")
            .u32(type_id::ARRAY)
            .u32(ty)
            .u64(u64::MAX / 2)
            .raw(&[0; 64]);
        assert_eq!(kind(&r), "AbsurdCount", "element type {ty}");
    }
    // A tensor name length larger than the file.
    let mut r = Raw::header(3, 1, 0);
    r.u64(1 << 62).raw(&[0; 40]);
    assert_eq!(kind(&r), "AbsurdCount");
}

#[test]
fn bad_value_types_bools_and_utf8() {
    for ty in [13u32, 99, u32::MAX] {
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(ty).u64(0);
        assert_eq!(
            r.err(),
            GgufError::UnknownValueType {
                key: "k".into(),
                type_id: ty
            }
        );
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(type_id::ARRAY).u32(ty).u64(0);
        assert_eq!(
            r.err(),
            GgufError::UnknownValueType {
                key: "k".into(),
                type_id: ty
            }
        );
    }
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(type_id::BOOL).raw(&[2]);
    assert_eq!(
        r.err(),
        GgufError::BadBool {
            key: "k".into(),
            value: 2
        }
    );
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k")
        .u32(type_id::ARRAY)
        .u32(type_id::BOOL)
        .u64(2)
        .raw(&[1, 7]);
    assert_eq!(kind(&r), "BadBool");

    let mut r = Raw::header(3, 0, 1);
    r.str(b"k\xff\xfe").u32(type_id::U8).raw(&[0]);
    assert_eq!(r.err(), GgufError::NotUtf8 { offset: 32 });
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(type_id::STRING).str(b"\xc3\x28");
    assert_eq!(kind(&r), "NotUtf8");
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k")
        .u32(type_id::ARRAY)
        .u32(type_id::STRING)
        .u64(1)
        .str(b"\x80");
    assert_eq!(kind(&r), "NotUtf8");
    let mut r = Raw::header(3, 1, 0);
    r.str(b"\xed\xa0\x80").u32(1).u64(1).u32(0).u64(0).data(4);
    assert_eq!(kind(&r), "NotUtf8");
}

#[test]
fn nesting_depth_and_duplicates() {
    // MAX_ARRAY_DEPTH levels parse; one more does not.
    for (levels, ok) in [
        (gguf::MAX_ARRAY_DEPTH, true),
        (gguf::MAX_ARRAY_DEPTH + 1, false),
    ] {
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(type_id::ARRAY);
        for _ in 1..levels {
            r.u32(type_id::ARRAY).u64(1);
        }
        r.u32(type_id::U8).u64(1).raw(&[9]);
        if ok {
            assert!(parse(&r.0).is_ok());
        } else {
            assert_eq!(r.err(), GgufError::ArrayTooDeep { key: "k".into() });
        }
    }
    let mut r = Raw::header(3, 0, 2);
    r.str(b"k")
        .u32(type_id::U8)
        .raw(&[1])
        .str(b"k")
        .u32(type_id::U16)
        .raw(&[1, 0]);
    assert_eq!(r.err(), GgufError::DuplicateKey("k".into()));
    let mut r = Raw::header(3, 2, 0);
    r.tensor("t", &[1], 0, 0).tensor("t", &[1], 0, 32).data(64);
    assert_eq!(r.err(), GgufError::DuplicateTensor("t".into()));
}

#[test]
fn alignment_errors() {
    for (value, ty, want) in [
        (0u64, type_id::U32, "BadAlignment"),
        (3, type_id::U32, "BadAlignment"),
        (1 << 21, type_id::U32, "BadAlignment"),
        (u64::MAX, type_id::U64, "BadAlignment"),
    ] {
        let mut r = Raw::header(3, 0, 1);
        r.str(b"general.alignment").u32(ty);
        if ty == type_id::U32 {
            r.u32(value as u32)
        } else {
            r.u64(value)
        };
        assert_eq!(kind(&r), want, "{value}");
    }
    let mut r = Raw::header(3, 0, 1);
    r.str(b"general.alignment").u32(type_id::STRING).str(b"32");
    assert_eq!(kind(&r), "WrongType");
    let mut r = Raw::header(3, 0, 1);
    r.str(b"general.alignment")
        .u32(type_id::I32)
        .u32(-32i32 as u32);
    assert_eq!(kind(&r), "WrongType");
}

#[test]
fn tensor_info_errors() {
    let one = |name: &str, dims: &[u64], ty: u32, offset: u64, data: usize| {
        let mut r = Raw::header(3, 1, 0);
        r.tensor(name, dims, ty, offset).data(data);
        r
    };
    let e = one("t", &[4], 99, 0, 16).err();
    assert_eq!(
        e,
        GgufError::UnknownTensorType {
            name: "t".into(),
            type_id: 99
        }
    );
    let e = one("t", &[4], 9, 0, 16).err();
    assert_eq!(
        e,
        GgufError::UnsupportedTensorType {
            name: "t".into(),
            type_name: "Q8_1"
        }
    );
    assert_eq!(kind(&one("t", &[4], 1 << 31, 0, 16)), "UnknownTensorType");
    let e = one("t", &[1, 1, 1, 1, 1], 0, 0, 16).err();
    assert_eq!(
        e,
        GgufError::TooManyDims {
            name: "t".into(),
            n_dims: 5
        }
    );
    let mut r = Raw::header(3, 1, 0);
    r.str(b"t").u32(u32::MAX).raw(&[0; 64]);
    assert_eq!(kind(&r), "TooManyDims");
    for (dims, ty, why) in [
        (&[][..], 0, "no dimensions"),
        (&[4, 0], 0, "zero dimension"),
        (&[1 << 32, 1 << 32], 0, "element count overflows"),
        (&[1 << 31, 1 << 31, 2], 0, "element count overflows"),
        (&[1 << 61, 2], 0, "byte size overflows"),
        (&[31], 8, "row length is not a multiple of the block size"),
        (
            &[128, 2],
            12,
            "row length is not a multiple of the block size",
        ),
    ] {
        match one("t", dims, ty, 0, 64).err() {
            GgufError::BadShape { why: w, .. } => assert_eq!(w, why, "{dims:?}"),
            e => panic!("{dims:?}: {e}"),
        }
    }
}

#[test]
fn inventory_errors() {
    let r = {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("t", &[4], 0, 4).data(64);
        r
    };
    assert_eq!(
        r.err(),
        GgufError::Misaligned {
            name: "t".into(),
            offset: 4,
            alignment: 32
        }
    );
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[16], 0, 0).data(63);
    assert_eq!(kind(&r), "DataPastEnd");
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[16], 0, u64::MAX - 31).data(64);
    assert_eq!(kind(&r), "DataPastEnd");
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[1 << 40], 0, 0).data(64);
    assert_eq!(kind(&r), "DataPastEnd");
    // Two tensors at the same offset, and one running into the next.
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[4], 0, 0).tensor("b", &[4], 0, 0).data(64);
    assert_eq!(
        r.err(),
        GgufError::Overlap {
            a: "a".into(),
            b: "b".into()
        }
    );
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[16], 0, 32)
        .tensor("b", &[16], 0, 0)
        .data(128);
    assert_eq!(
        r.err(),
        GgufError::Overlap {
            a: "b".into(),
            b: "a".into()
        }
    );
    // Touching is fine.
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 32).tensor("b", &[8], 0, 0).data(64);
    assert!(parse(&r.0).is_ok());
}

fn models_dir() -> std::path::PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => d.into(),
        None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/assay/models"),
    }
}

/// (file, architecture, tensors, metadata keys, data offset) as read by the `gguf` Python
/// package's `GGUFReader`.
const REAL: [(&str, &str, usize, usize, u64); 4] = [
    (
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "llama",
        272,
        33,
        1_785_664,
    ),
    (
        "Qwen2.5-Coder-0.5B-Instruct.gguf",
        "qwen2",
        291,
        26,
        5_947_776,
    ),
    (
        "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
        "qwen2",
        339,
        26,
        5_950_528,
    ),
    ("Gemma-3-270M.Q4_K_M.gguf", "gemma3", 236, 33, 6_525_120),
];

#[test]
fn real_models_parse_to_known_inventories() {
    for (file, arch, n_tensors, n_kv, data_offset) in REAL {
        let path = models_dir().join(file);
        if !path.exists() {
            eprintln!("skip: {} absent", path.display());
            continue;
        }
        let m = super::GgufModel::open(&path).unwrap();
        let h = m.header();
        assert_eq!(h.architecture(), Some(arch), "{file}");
        assert_eq!(
            (h.tensors.len(), h.metadata.len(), h.data_offset),
            (n_tensors, n_kv, data_offset)
        );
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(
            h.tensors
                .iter()
                .all(|t| h.data_offset + t.offset + t.bytes <= len)
        );
        assert!(
            h.get("tokenizer.ggml.tokens")
                .and_then(|v| v.as_array())
                .is_some_and(|a| a.len() > 1000)
        );
    }
}

#[test]
fn real_model_round_trips_through_the_writer() {
    let path = models_dir().join(REAL[0].0);
    if !path.exists() {
        eprintln!("skip: {} absent", path.display());
        return;
    }
    let m = super::GgufModel::open(&path).unwrap();
    let h = m.header();
    let specs: Vec<TensorSpec> = h
        .tensors
        .iter()
        .map(|t| TensorSpec::new(t.name.clone(), &t.dims, t.format))
        .collect();
    let mut w = GgufWriter::new(Vec::new(), &h.metadata, &specs).unwrap();
    for t in &h.tensors {
        for chunk in m.tensor_bytes(t).chunks(1 << 20) {
            w.write_data(chunk).unwrap();
        }
    }
    let out = w.finish().unwrap();
    let h2 = parse(&out).unwrap();
    assert_eq!(h2.metadata, h.metadata);
    for (a, b) in h.tensors.iter().zip(&h2.tensors) {
        assert_eq!(
            (&a.name, &a.dims, a.format, a.bytes),
            (&b.name, &b.dims, b.format, b.bytes)
        );
        let s = (h2.data_offset + b.offset) as usize;
        assert!(
            m.tensor_bytes(a) == &out[s..s + b.bytes as usize],
            "{}",
            a.name
        );
    }
}
