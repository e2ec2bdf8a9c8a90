//! Tests of the safetensors reader: dtype conversion (all 256 F8_E4M3 codes against the bit
//! formula), header validation errors, truncation at every length, single and sharded
//! checkpoints with config.json, and format detection by [`super::ModelFile::open`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::safetensors::{
    Dtype, SafetensorsError, dequantize, f8_e4m3_to_f32, parse_header, safetensors_to_vec,
};
use super::{FileKind, ModelFile, ModelFileError, SafetensorsModel, detect};

/// A fresh, empty folder under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("assay-st-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// F8_E4M3 ("fn") from its definition: sign, 4-bit exponent with bias 7, 3-bit mantissa,
/// subnormals at exponent 0, only S.1111.111 is NaN. Computed in f64.
fn e4m3_reference(b: u8) -> f64 {
    let s = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((b >> 3) & 0xf);
    let m = f64::from(b & 7);
    if e == 15 && m == 7.0 {
        f64::NAN
    } else if e == 0 {
        s * (m / 8.0) * 2f64.powi(-6)
    } else {
        s * (1.0 + m / 8.0) * 2f64.powi(e - 7)
    }
}

#[test]
fn f8_e4m3_all_256_codes_match_the_formula() {
    for b in 0..=255u8 {
        let got = f8_e4m3_to_f32(b);
        let want = e4m3_reference(b);
        if want.is_nan() {
            assert!(got.is_nan(), "{b:#04x}");
            assert_eq!(got.is_sign_negative(), b & 0x80 != 0, "{b:#04x}");
        } else {
            assert_eq!(f64::from(got), want, "{b:#04x}");
            assert_eq!(got.is_sign_negative(), b & 0x80 != 0, "sign of {b:#04x}");
        }
    }
    assert_eq!(f8_e4m3_to_f32(0x7e), 448.0);
    assert_eq!(f8_e4m3_to_f32(0x38), 1.0);
    assert_eq!(f8_e4m3_to_f32(0x01), 2f32.powi(-9));
    assert_eq!(f8_e4m3_to_f32(0x08), 2f32.powi(-6));
    assert_eq!(f8_e4m3_to_f32(0xfe), -448.0);
    assert!(f8_e4m3_to_f32(0xff).is_nan() && f8_e4m3_to_f32(0x7f).is_nan());
    assert!(
        !f8_e4m3_to_f32(0x77).is_nan(),
        "0x77 is 240, not NaN (no infinities)"
    );
    // Exactly two NaN codes.
    assert_eq!(
        (0..=255u8).filter(|&b| f8_e4m3_to_f32(b).is_nan()).count(),
        2
    );
}

#[test]
fn float_dtypes_convert_exactly() {
    let mut out = [0f32; 4];
    let f32s: Vec<u8> = [1.5f32, -0.0, 3.0e38, f32::MIN_POSITIVE]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    dequantize("x", Dtype::F32, &f32s, &mut out).unwrap();
    assert_eq!(out, [1.5, -0.0, 3.0e38, f32::MIN_POSITIVE]);
    // F16 bit patterns: 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal).
    let f16s: Vec<u8> = [0x3c00u16, 0xc000, 0x7bff, 0x0001]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    dequantize("x", Dtype::F16, &f16s, &mut out).unwrap();
    assert_eq!(out, [1.0, -2.0, 65504.0, 2f32.powi(-24)]);
    // BF16 is the top half of an f32.
    let bf16s: Vec<u8> = [0x3f80u16, 0xc040, 0x7f7f, 0x0001]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    dequantize("x", Dtype::BF16, &bf16s, &mut out).unwrap();
    assert_eq!(out[..2], [1.0, -3.0]);
    assert_eq!(out[2].to_bits(), 0x7f7f_0000);
    assert_eq!(out[3].to_bits(), 0x0001_0000);
    let mut one = [0f32; 1];
    let e = dequantize("i", Dtype::I64, &[0; 8], &mut one).unwrap_err();
    assert_eq!(
        e,
        SafetensorsError::UnsupportedDtype {
            name: "i".into(),
            dtype: "I64"
        }
    );
    assert_eq!(
        dequantize("x", Dtype::F32, &[0; 3], &mut one)
            .unwrap_err()
            .kind(),
        "SizeMismatch"
    );
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn sample_file() -> Vec<u8> {
    let a = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = [0x3c00u16, 0xc000]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>();
    let c = [0x38u8, 0xb8, 0x7e];
    let meta = BTreeMap::from([("format".to_owned(), "pt".to_owned())]);
    safetensors_to_vec(
        &[
            ("a", Dtype::F32, &[2, 3], &a),
            ("b", Dtype::F16, &[2], &b),
            ("s", Dtype::BF16, &[], &[0x80, 0x3f]),
            ("empty", Dtype::F32, &[0, 4], &[]),
            ("c", Dtype::F8_E4M3, &[3], &c),
        ],
        &meta,
    )
}

#[test]
fn parses_a_written_file() {
    let file = sample_file();
    let h = parse_header(&file).unwrap();
    assert_eq!(h.data_start % 8, 0);
    assert_eq!(h.metadata.get("format").map(String::as_str), Some("pt"));
    let names: Vec<&str> = h.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "s", "empty", "c"]);
    let a = &h.tensors[0];
    assert_eq!(
        (a.dtype, a.shape.as_slice(), a.begin, a.end, a.elems),
        (Dtype::F32, &[2, 3][..], 0, 24, 6)
    );
    assert_eq!(h.tensors[2].elems, 1, "scalar");
    assert_eq!(h.tensors[3].elems, 0, "empty");
    assert_eq!((h.tensors[4].begin, h.tensors[4].end), (30, 33));
}

/// A file whose header is the given JSON text, followed by `data` bytes.
fn raw(json: &str, data: usize) -> Vec<u8> {
    let mut v = (json.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(json.as_bytes());
    v.resize(v.len() + data, 0);
    v
}

fn kind_of(file: &[u8]) -> &'static str {
    parse_header(file).err().map(|e| e.kind()).unwrap_or("Ok")
}

#[test]
fn header_errors() {
    for n in 0..8 {
        assert_eq!(
            parse_header(&vec![0; n]).unwrap_err(),
            SafetensorsError::TooShort { len: n as u64 }
        );
    }
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert_eq!(kind_of(&huge), "HeaderTooLarge");
    let mut past = 100u64.to_le_bytes().to_vec();
    past.extend_from_slice(b"{}");
    assert_eq!(kind_of(&past), "HeaderTooLarge");
    let big = vec![0u8; 8 + (100 << 20) + 2];
    let mut big = big;
    big[..8].copy_from_slice(&((100u64 << 20) + 1).to_le_bytes());
    assert_eq!(kind_of(&big), "HeaderTooLarge");
    for bad in [
        "",
        "not json",
        "[]",
        "{\"a\": ",
        "{\"a\": 1} x",
        "\"s\"",
        "{1: 2}",
    ] {
        assert_eq!(kind_of(&raw(bad, 0)), "HeaderNotJson", "{bad:?}");
    }
    let mut non_utf8 = raw("{\"\u{e9}\": 1}", 0);
    non_utf8[10] = 0xff;
    assert_eq!(kind_of(&non_utf8), "HeaderNotJson");
    assert_eq!(kind_of(&raw("{}", 0)), "Ok");
    assert_eq!(
        kind_of(&raw("{}   ", 3)),
        "Ok",
        "trailing spaces and unused bytes"
    );
}

#[test]
fn entry_errors() {
    let e = r#""dtype":"F32","shape":[2],"data_offsets":[0,8]"#;
    let cases: &[(&str, usize, &str)] = &[
        (r#"{"a":{E},"a":{E}}"#, 16, "DuplicateTensor"),
        (r#"{"__metadata__":{"k":1},"a":{E}}"#, 8, "BadMetadata"),
        (r#"{"__metadata__":[],"a":{E}}"#, 8, "BadMetadata"),
        (r#"{"__metadata__":{"k":"v","k":"w"}}"#, 0, "BadMetadata"),
        (
            r#"{"__metadata__":{},"__metadata__":{}}"#,
            0,
            "DuplicateTensor",
        ),
        (r#"{"a":1}"#, 8, "BadEntry"),
        (r#"{"a":{"shape":[2],"data_offsets":[0,8]}}"#, 8, "BadEntry"),
        (r#"{"a":{E,"extra":1}}"#, 8, "BadEntry"),
        (
            r#"{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#,
            8,
            "BadEntry",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}"#,
            8,
            "BadEntry",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}}"#,
            8,
            "BadEntry",
        ),
        (
            r#"{"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}}"#,
            8,
            "BadEntry",
        ),
        (
            r#"{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}"#,
            8,
            "UnknownDtype",
        ),
        (
            r#"{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}"#,
            8,
            "UnknownDtype",
        ),
        (
            r#"{"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}"#,
            8,
            "UnknownDtype",
        ),
        (
            r#"{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}"#,
            8,
            "TooManyDims",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#,
            8,
            "ShapeOverflow",
        ),
        (
            r#"{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}}"#,
            8,
            "ShapeOverflow",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#,
            8,
            "ReversedOffsets",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            7,
            "DataPastEnd",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]}}"#,
            8,
            "DataPastEnd",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[2,10]}}"#,
            16,
            "Misaligned",
        ),
        (
            r#"{"a":{"dtype":"BF16","shape":[2],"data_offsets":[1,5]}}"#,
            16,
            "Misaligned",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            16,
            "SizeMismatch",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[],"data_offsets":[0,8]}}"#,
            16,
            "SizeMismatch",
        ),
        (
            r#"{"a":{E},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
            16,
            "Overlap",
        ),
        (r#"{"a":{E},"b":{E}}"#, 16, "Overlap"),
        (
            r#"{"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},"z":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},"c":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}}"#,
            16,
            "Overlap",
        ),
        (
            r#"{"a":{E},"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}"#,
            8,
            "Ok",
        ),
        (
            r#"{"a":{E},"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}}"#,
            16,
            "Ok",
        ),
    ];
    for (json, data, want) in cases {
        let json = json.replace('E', e);
        assert_eq!(kind_of(&raw(&json, *data)), *want, "{json}");
    }
}

#[test]
fn every_truncation_is_a_named_error() {
    let file = sample_file();
    let h = parse_header(&file).unwrap();
    let data_end = h.data_start + h.tensors.iter().map(|t| t.end).max().unwrap();
    for n in 0..file.len() {
        let got = kind_of(&file[..n]);
        let want = match n as u64 {
            0..8 => "TooShort",
            n if n < h.data_start => "HeaderTooLarge",
            n if n < data_end => "DataPastEnd",
            _ => "Ok",
        };
        assert_eq!(got, want, "prefix {n} of {}", file.len());
    }
}

fn shard(names: &[&str]) -> Vec<u8> {
    let data: Vec<Vec<u8>> = names
        .iter()
        .map(|n| f32_bytes(&[n.len() as f32, 1.0]))
        .collect();
    let t: Vec<(&str, Dtype, &[u64], &[u8])> = names
        .iter()
        .zip(&data)
        .map(|(n, d)| (*n, Dtype::F32, &[2u64][..], d.as_slice()))
        .collect();
    safetensors_to_vec(&t, &BTreeMap::new())
}

fn index_json(map: &[(&str, &str)]) -> Vec<u8> {
    let m: serde_json::Map<String, serde_json::Value> = map
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).into()))
        .collect();
    serde_json::json!({"metadata": {"total_size": 0}, "weight_map": m})
        .to_string()
        .into_bytes()
}

#[test]
fn single_file_with_config() {
    let d = TempDir::new("single");
    let p = d.write("weights.safetensors", &sample_file());
    d.write(
        "config.json",
        br#"{"hidden_size": 8, "architectures": ["LlamaForCausalLM"]}"#,
    );
    let m = SafetensorsModel::open(&p).unwrap();
    assert_eq!(m.len(), 5);
    assert_eq!(m.config().and_then(|c| c["hidden_size"].as_u64()), Some(8));
    assert_eq!(m.dequantize("a").unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(m.dequantize("b").unwrap(), [1.0, -2.0]);
    assert_eq!(m.dequantize("c").unwrap(), [1.0, -1.0, 448.0]);
    assert_eq!(m.dequantize("s").unwrap(), [1.0]);
    assert_eq!(m.dequantize("empty").unwrap(), Vec::<f32>::new());
    assert_eq!(m.tensor_bytes("b").unwrap(), &[0x00, 0x3c, 0x00, 0xc0]);
    assert_eq!(m.dequantize("nope").unwrap_err().kind(), "NoSuchTensor");
    // The folder opens the only .safetensors in it.
    assert_eq!(SafetensorsModel::open(&d.0).unwrap().len(), 5);
    // A broken config.json is a named error.
    d.write("config.json", b"{not json");
    assert_eq!(
        SafetensorsModel::open(&p).err().unwrap().kind(),
        "BadConfig"
    );
}

#[test]
fn unsupported_dtype_is_named_at_conversion() {
    let d = TempDir::new("dtype");
    let f = safetensors_to_vec(
        &[("ids", Dtype::I64, &[1], &[1, 0, 0, 0, 0, 0, 0, 0])],
        &BTreeMap::new(),
    );
    let m = SafetensorsModel::open(&d.write("model.safetensors", &f)).unwrap();
    assert_eq!(m.tensor_bytes("ids").unwrap().len(), 8);
    match m.dequantize("ids").unwrap_err() {
        ModelFileError::Safetensors { source, .. } => {
            assert_eq!(
                source,
                SafetensorsError::UnsupportedDtype {
                    name: "ids".into(),
                    dtype: "I64"
                }
            );
        }
        e => panic!("{e}"),
    }
}

#[test]
fn sharded_checkpoint() {
    let d = TempDir::new("sharded");
    d.write("model-00001-of-00002.safetensors", &shard(&["x", "yy"]));
    d.write("model-00002-of-00002.safetensors", &shard(&["zzz"]));
    let idx = index_json(&[
        ("x", "model-00001-of-00002.safetensors"),
        ("yy", "model-00001-of-00002.safetensors"),
        ("zzz", "model-00002-of-00002.safetensors"),
    ]);
    let ip = d.write("model.safetensors.index.json", &idx);
    d.write("config.json", br#"{"model_type": "qwen2"}"#);
    for m in [
        SafetensorsModel::open(&d.0).unwrap(),
        SafetensorsModel::open(&ip).unwrap(),
    ] {
        assert_eq!(m.shards().len(), 2);
        let names: Vec<&str> = m.tensors().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["x", "yy", "zzz"]);
        assert_eq!(m.dequantize("zzz").unwrap(), [3.0, 1.0]);
        assert_eq!(m.dequantize("yy").unwrap(), [2.0, 1.0]);
        assert_eq!(
            m.config().and_then(|c| c["model_type"].as_str()),
            Some("qwen2")
        );
    }
    match ModelFile::open(&d.0).unwrap() {
        ModelFile::Safetensors(m) => assert_eq!(m.len(), 3),
        ModelFile::Gguf(_) => panic!("folder opened as GGUF"),
    }
}

fn index_error(files: &[(&str, Vec<u8>)], index: &[u8]) -> &'static str {
    let d = TempDir::new("badindex");
    for (n, b) in files {
        d.write(n, b);
    }
    let ip = d.write("model.safetensors.index.json", index);
    SafetensorsModel::open(&ip)
        .err()
        .map(|e| e.kind())
        .unwrap_or("Ok")
}

#[test]
fn sharded_checkpoint_errors() {
    let s1 = || ("s1.safetensors", shard(&["a", "b"]));
    assert_eq!(
        index_error(
            &[s1()],
            &index_json(&[("a", "s1.safetensors"), ("b", "s1.safetensors")])
        ),
        "Ok"
    );
    assert_eq!(index_error(&[s1()], b"{not json"), "BadIndex");
    assert_eq!(index_error(&[s1()], b"{\"metadata\": {}}"), "BadIndex");
    assert_eq!(
        index_error(&[s1()], br#"{"weight_map": {"a": 3}}"#),
        "BadIndex"
    );
    for evil in [
        "../s1.safetensors",
        "/etc/passwd",
        "sub/s1.safetensors",
        "..",
        "",
    ] {
        assert_eq!(
            index_error(&[s1()], &index_json(&[("a", evil)])),
            "BadIndex",
            "{evil}"
        );
    }
    let missing = index_json(&[
        ("a", "s1.safetensors"),
        ("b", "s1.safetensors"),
        ("c", "s1.safetensors"),
    ]);
    assert_eq!(index_error(&[s1()], &missing), "MissingTensor");
    assert_eq!(
        index_error(&[s1()], &index_json(&[("a", "s1.safetensors")])),
        "UnlistedTensor"
    );
    let absent = index_json(&[
        ("a", "s1.safetensors"),
        ("b", "s1.safetensors"),
        ("c", "s2.safetensors"),
    ]);
    assert_eq!(index_error(&[s1()], &absent), "Io");
    let broken = index_json(&[
        ("a", "s1.safetensors"),
        ("b", "s1.safetensors"),
        ("c", "s2.safetensors"),
    ]);
    assert_eq!(
        index_error(&[s1(), ("s2.safetensors", b"garbage!".to_vec())], &broken),
        "HeaderTooLarge"
    );
}

#[test]
fn folder_without_a_single_checkpoint() {
    let d = TempDir::new("noweights");
    assert_eq!(
        SafetensorsModel::open(&d.0).err().unwrap().kind(),
        "NoWeights"
    );
    d.write("a.safetensors", &shard(&["a"]));
    d.write("b.safetensors", &shard(&["b"]));
    assert!(matches!(
        SafetensorsModel::open(&d.0),
        Err(ModelFileError::NoWeights { found: 2, .. })
    ));
}

fn gguf_bytes() -> Vec<u8> {
    let meta = BTreeMap::from([(
        "general.architecture".to_owned(),
        super::MetaValue::String("llama".into()),
    )]);
    let data = f32_bytes(&[1.0, -1.0]);
    let spec = super::TensorSpec::new("t", &[2], crate::quant::QuantFormat::F32);
    super::gguf_write::gguf_to_vec(&meta, &[(spec, &data)]).unwrap()
}

#[test]
fn detection_by_extension_and_magic() {
    let d = TempDir::new("detect");
    let cases: [(&str, Vec<u8>, Result<FileKind, &str>); 7] = [
        ("m.gguf", gguf_bytes(), Ok(FileKind::Gguf)),
        ("m.bin", gguf_bytes(), Ok(FileKind::Gguf)),
        ("w.safetensors", sample_file(), Ok(FileKind::Safetensors)),
        ("noext", sample_file(), Ok(FileKind::Safetensors)),
        (
            "random.bin",
            b"\x00\x01hello world".to_vec(),
            Err("Unrecognized"),
        ),
        ("tiny", b"GG".to_vec(), Err("Unrecognized")),
        ("empty", Vec::new(), Err("Unrecognized")),
    ];
    for (name, bytes, want) in cases {
        let p = d.write(name, &bytes);
        assert_eq!(detect(&p).map_err(|e| e.kind()), want, "{name}");
    }
    assert_eq!(detect(&d.0.join("absent")).unwrap_err().kind(), "Io");
    let g = ModelFile::open(&d.0.join("m.bin")).unwrap();
    assert_eq!(g.kind(), FileKind::Gguf);
    assert_eq!(g.tensor_names(), ["t"]);
    assert_eq!(g.dequantize("t").unwrap(), [1.0, -1.0]);
    let s = ModelFile::open(&d.0.join("noext")).unwrap();
    assert_eq!(s.kind(), FileKind::Safetensors);
    assert_eq!(s.dequantize("c").unwrap(), [1.0, -1.0, 448.0]);
    // A .gguf name sends even a broken file to the GGUF reader, for its specific error.
    let p = d.write("short.gguf", b"GG");
    assert_eq!(ModelFile::open(&p).err().unwrap().kind(), "Truncated");
}

/// `testdata/reference.safetensors` is written by Hugging Face's `safetensors` package and
/// its expected values by numpy / `ml_dtypes` (see `testdata/gen_reference_safetensors.py`):
/// the reader and every converter against implementations that are not ours.
#[test]
fn reads_a_file_written_by_the_reference_implementation() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model_file/testdata");
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("reference.expected.json")).unwrap())
            .unwrap();
    let m = SafetensorsModel::open(&dir.join("reference.safetensors")).unwrap();
    let meta = &m.shards()[0].header().metadata;
    assert_eq!(
        meta.get("producer").map(String::as_str),
        Some("gen_reference_safetensors.py")
    );
    let want = expected["tensors"].as_object().unwrap();
    assert_eq!(m.len(), want.len());
    for (name, e) in want {
        let t = m.tensor(name).unwrap();
        assert_eq!(t.dtype.name(), e["dtype"].as_str().unwrap(), "{name}");
        let shape: Vec<u64> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape, shape, "{name}");
        let Some(bits) = e.get("f32_bits").and_then(|b| b.as_array()) else {
            assert_eq!(m.dequantize(name).unwrap_err().kind(), "UnsupportedDtype");
            continue;
        };
        let got = m.dequantize(name).unwrap();
        assert_eq!(got.len(), bits.len(), "{name}");
        for (i, (g, b)) in got.iter().zip(bits).enumerate() {
            let w = f32::from_bits(b.as_u64().unwrap() as u32);
            if w.is_nan() {
                assert!(
                    g.is_nan() && g.is_sign_negative() == w.is_sign_negative(),
                    "{name}[{i}]"
                );
            } else {
                assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: {g} vs {w}");
            }
        }
    }
}
