//! Gate `model-files`: the catalog's models open as the catalog says they should — the
//! file's sha256 equals the catalog's, the inventory validates, the architecture is the
//! catalog's, the quant census matches the catalog's description of the mix, and the
//! smallest tensor of every format dequantizes to finite values.

use std::collections::BTreeSet;
use std::path::Path;

use engine::catalog::CatalogModel;
use engine::model_file::GgufModel;
use engine::quant::QuantFormat;

use crate::Verdict;
use crate::model_facts::{census, model_facts};
use crate::receipt::ModelFacts;

/// Formats a catalog quant description names (`required`) and the formats a file so
/// described may also hold (`allowed`, a superset): norms stay in float formats, and a
/// `Q4_K_M`-style mix falls back to other block formats for rows whose length is not a
/// multiple of 256 and uses Q6_K for some tensors.
pub fn expected_formats(desc: &str) -> (BTreeSet<QuantFormat>, BTreeSet<QuantFormat>) {
    use QuantFormat::*;
    let mut required = BTreeSet::new();
    let mut allowed: BTreeSet<QuantFormat> = [F32, F16, BF16].into();
    for token in desc.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if let Some(f) = QuantFormat::from_name(token) {
            required.insert(f);
            allowed.insert(f);
        } else if let Some(base) = token
            .strip_suffix("_M")
            .or_else(|| token.strip_suffix("_S"))
            .or_else(|| token.strip_suffix("_L"))
            .and_then(QuantFormat::from_name)
        {
            required.insert(base);
            allowed.insert(base);
            allowed.extend([Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q5_K, Q6_K]);
        }
    }
    (required, allowed)
}

/// Check the file at `path` against its catalog entry. The verdict, detail lines, and the
/// model's facts when it opened.
pub fn check_model(
    path: &Path,
    expect: &CatalogModel,
) -> (Verdict, Vec<String>, Option<ModelFacts>) {
    let mut failures = Vec::new();
    let model = match GgufModel::open(path) {
        Ok(m) => m,
        Err(e) => {
            let why = format!("{}: does not open: {e}", expect.name);
            return (Verdict::from_failures(vec![why]), Vec::new(), None);
        }
    };
    let facts = match model_facts(&expect.name, path, &model) {
        Ok(f) => f,
        Err(e) => {
            let why = format!("{}: reading {}: {e}", expect.name, path.display());
            return (Verdict::from_failures(vec![why]), Vec::new(), None);
        }
    };
    if facts.sha256 != expect.sha256 {
        failures.push(format!(
            "{}: sha256 {} != catalog {}",
            expect.name, facts.sha256, expect.sha256
        ));
    }
    if facts.arch != expect.arch {
        failures.push(format!(
            "{}: architecture {} != catalog {}",
            expect.name, facts.arch, expect.arch
        ));
    }
    let (required, allowed) = expected_formats(&expect.quant);
    let present: BTreeSet<QuantFormat> = model.header().tensors.iter().map(|t| t.format).collect();
    for f in required.difference(&present) {
        failures.push(format!(
            "{}: catalog says {:?} but no tensor is {f}",
            expect.name, expect.quant
        ));
    }
    for f in present.difference(&allowed) {
        failures.push(format!(
            "{}: tensors in {f}, not in the catalog's {:?}",
            expect.name, expect.quant
        ));
    }
    // The smallest tensor of each format decodes to finite values.
    for f in &present {
        let smallest = model
            .header()
            .tensors
            .iter()
            .filter(|t| t.format == *f)
            .min_by_key(|t| (t.bytes, t.name.clone()));
        if let Some(t) = smallest {
            match model.dequantize(&t.name) {
                Ok(v) if v.iter().all(|x| x.is_finite()) => {}
                Ok(_) => {
                    failures.push(format!("{}: {} has non-finite values", expect.name, t.name))
                }
                Err(e) => failures.push(format!("{}: {}: {e}", expect.name, t.name)),
            }
        }
    }
    let census_line = census(&model)
        .iter()
        .map(|(f, c)| format!("{f}x{}", c.tensors))
        .collect::<Vec<_>>()
        .join(" ");
    let detail = vec![format!(
        "{}: {} tensors, {:.1} MB, {} [{census_line}]",
        expect.name,
        model.header().tensors.len(),
        facts.bytes as f64 / 1e6,
        facts.arch
    )];
    (Verdict::from_failures(failures), detail, Some(facts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model_file::MetaValue;
    use engine::model_file::gguf_write::{TensorSpec, gguf_to_vec};
    use std::collections::BTreeMap;

    fn tiny(arch: &str, second: QuantFormat) -> Vec<u8> {
        let mut meta = BTreeMap::new();
        meta.insert(
            "general.architecture".to_owned(),
            MetaValue::String(arch.to_owned()),
        );
        let norm: Vec<u8> = (0..32)
            .flat_map(|i| (1.0f32 + i as f32).to_le_bytes())
            .collect();
        let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        let q = engine::quant::quantize_to_vec(second, &x).unwrap();
        gguf_to_vec(
            &meta,
            &[
                (TensorSpec::new("n.weight", &[32], QuantFormat::F32), &norm),
                (TensorSpec::new("w.weight", &[32, 2], second), &q),
            ],
        )
        .unwrap()
    }

    fn entry(sha256: &str, arch: &str, quant: &str) -> CatalogModel {
        serde_json::from_value(serde_json::json!({
            "name": "tiny", "file": "tiny.gguf", "arch": arch, "quant": quant, "sha256": sha256
        }))
        .unwrap()
    }

    fn write(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("tiny.gguf");
        std::fs::write(&p, bytes).unwrap();
        (t, p)
    }

    #[test]
    fn descriptions_parse() {
        use QuantFormat::*;
        let (r, a) = expected_formats("Q4_1 (+Q8_0 embd)");
        assert_eq!(r, [Q4_1, Q8_0].into());
        assert!(a.contains(&F32) && !a.contains(&Q4_K));
        let (r, a) = expected_formats("Q4_K_M");
        assert_eq!(r, [Q4_K].into());
        assert!(a.contains(&Q6_K) && a.contains(&Q5_0) && !a.contains(&Q2_K));
        let (r, _) = expected_formats("Q5_0/Q8_0/Q4_K/Q6_K mix");
        assert_eq!(r, [Q5_0, Q8_0, Q4_K, Q6_K].into());
    }

    #[test]
    fn a_matching_file_is_green_and_each_fault_is_red() {
        let bytes = tiny("llama", QuantFormat::Q8_0);
        let sha = crate::model_facts::file_sha256(&write(&bytes).1).unwrap();
        let (_t, p) = write(&bytes);
        let (v, detail, facts) = check_model(&p, &entry(&sha, "llama", "Q8_0"));
        assert_eq!(v, Verdict::Green, "{detail:?}");
        let facts = facts.unwrap();
        assert_eq!(facts.census["Q8_0"].tensors, 1);
        assert_eq!(facts.census["F32"].bytes, 128);

        let red = |e: CatalogModel| check_model(&p, &e).0;
        assert!(red(entry(&"0".repeat(64), "llama", "Q8_0")).is_red(), "sha");
        assert!(red(entry(&sha, "qwen2", "Q8_0")).is_red(), "arch");
        assert!(red(entry(&sha, "llama", "Q4_0")).is_red(), "census");
        assert!(
            red(entry(&sha, "llama", "Q8_0 + Q6_K")).is_red(),
            "missing format"
        );

        // A truncated file does not open.
        let (_t2, cut) = write(&bytes[..bytes.len() - 8]);
        assert!(check_model(&cut, &entry(&sha, "llama", "Q8_0")).0.is_red());
    }

    #[test]
    fn the_default_model_matches_the_catalog() {
        let dir = match std::env::var_os("ASSAY_MODELS_DIR") {
            Some(d) => std::path::PathBuf::from(d),
            None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap())
                .join(".cache/assay/models"),
        };
        let name = engine::catalog::default_name().unwrap();
        let m = engine::catalog::models()
            .unwrap()
            .into_iter()
            .find(|m| m.name == name)
            .unwrap();
        let path = dir.join(&m.file);
        if !path.exists() {
            eprintln!("skipped: {} not fetched ({})", m.name, path.display());
            return;
        }
        let (v, detail, _) = check_model(&path, &m);
        assert_eq!(v, Verdict::Green, "{detail:?}");
    }
}
