//! Gate `quant-golden`: our dequantizers against the values an independent implementation
//! (the `gguf` Python package) computed for the same random blocks, committed under
//! `engine/tests/fixtures/quant/` (`<FMT>.bin` + `manifest.json`). Every format of
//! [`QuantFormat::ALL`] must have a fixture whose bytes match the manifest's sha256 and
//! whose every value we reproduce exactly (IEEE equality; only the sign of a zero may
//! differ).

use std::path::Path;

use engine::quant::{QuantError, QuantFormat};
use sha2::{Digest, Sha256};

use crate::Verdict;

/// A dequantizer with the signature of [`engine::quant::dequantize`] (tests plant faults
/// through it).
pub type DequantFn = fn(QuantFormat, &[u8], &mut [f32]) -> Result<(), QuantError>;

fn field(entry: &serde_json::Value, key: &str) -> Result<usize, String> {
    entry
        .get(key)
        .and_then(serde_json::Value::as_u64)
        .map(|v| v as usize)
        .ok_or_else(|| format!("manifest field {key:?} missing"))
}

/// Check one format; `Ok(values checked)` or why it failed.
fn check_format(
    dir: &Path,
    manifest: &serde_json::Value,
    format: QuantFormat,
    dequant: DequantFn,
) -> Result<usize, String> {
    let entry = manifest
        .get("formats")
        .and_then(|f| f.get(format.name()))
        .ok_or("no manifest entry")?;
    let (be, bb) = format.block_geometry();
    if field(entry, "ggml_type")? != format.ggml_type() as usize
        || field(entry, "block_elems")? != be
        || field(entry, "block_bytes")? != bb
    {
        return Err("type id or block geometry differs from the manifest".into());
    }
    let file = entry
        .get("file")
        .and_then(serde_json::Value::as_str)
        .ok_or("manifest field \"file\" missing")?;
    let bin = std::fs::read(dir.join(file)).map_err(|e| format!("{file}: {e}"))?;
    let sha = entry.get("sha256").and_then(serde_json::Value::as_str);
    if sha != Some(hex::encode(Sha256::digest(&bin)).as_str()) {
        return Err(format!("{file} does not match its manifest sha256"));
    }
    let nb = field(entry, "n_blocks")?;
    let (qo, ql) = (field(entry, "quant_offset")?, field(entry, "quant_bytes")?);
    let (vo, nv) = (field(entry, "values_offset")?, field(entry, "n_values")?);
    let quant = bin.get(qo..qo + ql).ok_or("quant bytes past the end")?;
    let golden = bin.get(vo..vo + 4 * nv).ok_or("values past the end")?;
    if ql != nb * bb || nv != nb * be {
        return Err("manifest sizes disagree with the block geometry".into());
    }
    let golden: Vec<f32> = golden
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if golden.iter().all(|&v| v == 0.0) {
        return Err("golden values are all zero (a fixture that cannot fail)".into());
    }
    let mut ours = vec![f32::NAN; nv];
    dequant(format, quant, &mut ours).map_err(|e| e.to_string())?;
    let bad: Vec<usize> = (0..nv).filter(|&i| ours[i] != golden[i]).collect();
    match bad.first() {
        None => Ok(nv),
        Some(&i) => Err(format!(
            "{} of {nv} values differ, first [{i}] (block {}): ours {:e} golden {:e}",
            bad.len(),
            i / be,
            ours[i],
            golden[i]
        )),
    }
}

/// Run the check over every format with fixtures in `dir`; the verdict and detail lines.
pub fn check_quant_golden(dir: &Path, dequant: DequantFn) -> (Verdict, Vec<String>) {
    let manifest = match std::fs::read_to_string(dir.join("manifest.json"))
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string()))
    {
        Ok(m) => m,
        Err(e) => {
            return (
                Verdict::from_failures(vec![format!("{}/manifest.json: {e}", dir.display())]),
                Vec::new(),
            );
        }
    };
    let mut failures = Vec::new();
    let mut values = 0usize;
    for format in QuantFormat::ALL {
        match check_format(dir, &manifest, format, dequant) {
            Ok(n) => values += n,
            Err(why) => failures.push(format!("{format}: {why}")),
        }
    }
    let summary = format!(
        "{} formats, {values} values exact vs gguf {}",
        QuantFormat::ALL.len() - failures.len(),
        manifest
            .get("gguf_version")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?")
    );
    (Verdict::from_failures(failures), vec![summary])
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::quant::dequantize;

    fn fixtures() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures/quant")
    }

    fn copy_fixtures() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(fixtures()).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), t.path().join(e.file_name())).unwrap();
        }
        t
    }

    #[test]
    fn committed_fixtures_are_green() {
        let (v, detail) = check_quant_golden(&fixtures(), dequantize);
        assert_eq!(v, Verdict::Green, "{detail:?}");
        assert!(detail[0].starts_with("15 formats"), "{detail:?}");
    }

    /// A dequantizer that is right except for one value of Q4_K.
    fn perturbed(f: QuantFormat, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        dequantize(f, data, out)?;
        if f == QuantFormat::Q4_K {
            out[77] = f32::from_bits(out[77].to_bits() ^ 1);
        }
        Ok(())
    }

    #[test]
    fn a_one_ulp_dequant_fault_is_red() {
        let (v, _) = check_quant_golden(&fixtures(), perturbed);
        let Verdict::Red { failures } = v else {
            panic!("not red: {v:?}")
        };
        assert_eq!(failures.len(), 1);
        assert!(failures[0].starts_with("Q4_K: 1 of"), "{failures:?}");
    }

    #[test]
    fn a_tampered_fixture_is_red() {
        let t = copy_fixtures();
        let p = t.path().join("Q8_0.bin");
        let mut bin = std::fs::read(&p).unwrap();
        bin[5] ^= 0x10;
        std::fs::write(&p, bin).unwrap();
        let (v, _) = check_quant_golden(t.path(), dequantize);
        assert!(v.is_red(), "{v:?}");
        // A missing fixture, and a missing manifest, are red too.
        std::fs::remove_file(t.path().join("Q2_K.bin")).unwrap();
        let (v, _) = check_quant_golden(t.path(), dequantize);
        let Verdict::Red { failures } = v else {
            panic!()
        };
        assert_eq!(failures.len(), 2, "{failures:?}");
        std::fs::remove_file(t.path().join("manifest.json")).unwrap();
        assert!(check_quant_golden(t.path(), dequantize).0.is_red());
    }
}
