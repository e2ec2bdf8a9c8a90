//! Golden tests: our dequantizers against an independent implementation.
//!
//! `engine/tests/fixtures/quant/<FMT>.bin` holds random GGML blocks of each of the 15 formats
//! followed by the values `gguf.quants.dequantize` (the `gguf` PyPI package, version in
//! `manifest.json`) computed for them; `tools/golden/quant_golden.py` makes them. For every
//! format this checks:
//!
//! * the manifest agrees with [`QuantFormat`] (GGML type id, block geometry) and the fixture's
//!   sha256 matches the manifest;
//! * [`dequantize`] reproduces every golden value **exactly** (IEEE equality, so only the
//!   sign of a zero may differ). No tolerance is needed: the reference does the same f32
//!   operations in the same order (GGML's definition), and f32 multiply/add are correctly
//!   rounded on both sides;
//! * [`dot`] of the blocks with seeded random activations equals `Σ golden_i · x_i`
//!   (computed in f64) within the worst-case f32 summation bound
//!   `(n + 4) · (2^-24 · Σ|golden_i · x_i| + 2^-149)` with `n` the elements per block (plus the
//!   block count for the whole row), per block and for the whole row.

use super::roundtrip_tests::{Rng, check_dot};
use super::{QuantFormat, dequantize};
use sha2::{Digest, Sha256};

const MANIFEST: &str = include_str!("../../tests/fixtures/quant/manifest.json");

fn field(entry: &serde_json::Value, key: &str) -> usize {
    entry[key]
        .as_u64()
        .unwrap_or_else(|| panic!("manifest field {key} missing")) as usize
}

/// Run every golden check of one format on its fixture bytes.
fn check(format: QuantFormat, bin: &[u8]) {
    let manifest: serde_json::Value = serde_json::from_str(MANIFEST).unwrap();
    let entry = &manifest["formats"][format.name()];
    assert!(entry.is_object(), "{format}: no manifest entry");
    let (be, bb) = format.block_geometry();
    assert_eq!(
        field(entry, "ggml_type"),
        format.ggml_type() as usize,
        "{format}: type id"
    );
    assert_eq!(field(entry, "block_elems"), be, "{format}: block elems");
    assert_eq!(field(entry, "block_bytes"), bb, "{format}: block bytes");
    assert_eq!(
        entry["sha256"].as_str().unwrap(),
        hex::encode(Sha256::digest(bin)),
        "{format}: fixture does not match its manifest sha256"
    );
    let nb = field(entry, "n_blocks");
    let (qo, ql) = (field(entry, "quant_offset"), field(entry, "quant_bytes"));
    let (vo, nv) = (field(entry, "values_offset"), field(entry, "n_values"));
    assert_eq!(ql, nb * bb);
    assert_eq!(nv, nb * be);
    assert_eq!(bin.len(), vo + 4 * nv);
    let quant = &bin[qo..qo + ql];
    let golden: Vec<f32> = bin[vo..vo + 4 * nv]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert!(
        golden.iter().all(|v| v.is_finite()),
        "{format}: golden values must be finite"
    );
    assert!(
        golden.iter().any(|&v| v != 0.0),
        "{format}: golden values are all zero"
    );

    let mut ours = vec![f32::NAN; nv];
    dequantize(format, quant, &mut ours).unwrap();
    let mismatches: Vec<String> = ours
        .iter()
        .zip(&golden)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("[{i}] (block {}) ours {a:e} golden {b:e}", i / be))
        .collect();
    assert!(
        mismatches.is_empty(),
        "{format}: {} of {nv} values differ from gguf, first: {:?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(8)]
    );

    let mut rng = Rng::new(0xD07 + format.ggml_type() as u64);
    let x: Vec<f32> = (0..nv).map(|_| rng.normal() as f32).collect();
    check_dot(format, "golden", quant, &golden, &x);
}

#[test]
fn manifest_names_the_generator_and_every_format() {
    let m: serde_json::Value = serde_json::from_str(MANIFEST).unwrap();
    assert_eq!(m["generator"], "tools/golden/quant_golden.py");
    assert!(m["gguf_version"].as_str().is_some_and(|v| !v.is_empty()));
    let formats = m["formats"].as_object().unwrap();
    assert_eq!(formats.len(), QuantFormat::ALL.len());
    for f in QuantFormat::ALL {
        assert!(
            formats.contains_key(f.name()),
            "{f} missing from the manifest"
        );
    }
}

macro_rules! golden_tests {
    ($($name:ident => $fmt:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(
                    QuantFormat::$fmt,
                    include_bytes!(concat!("../../tests/fixtures/quant/", stringify!($fmt), ".bin")),
                );
            }
        )*
    };
}

golden_tests! {
    golden_f32 => F32,
    golden_f16 => F16,
    golden_bf16 => BF16,
    golden_q4_0 => Q4_0,
    golden_q4_1 => Q4_1,
    golden_q5_0 => Q5_0,
    golden_q5_1 => Q5_1,
    golden_q8_0 => Q8_0,
    golden_q2_k => Q2_K,
    golden_q3_k => Q3_K,
    golden_q4_k => Q4_K,
    golden_q5_k => Q5_K,
    golden_q6_k => Q6_K,
    golden_iq4_nl => IQ4_NL,
    golden_iq4_xs => IQ4_XS,
}
