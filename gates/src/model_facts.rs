//! The model facts a receipt records: file sha256 and size, architecture, and the quant
//! census (tensor count and bytes per format).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use engine::model_file::GgufModel;
use sha2::{Digest, Sha256};

use crate::receipt::{CensusEntry, ModelFacts};

/// sha256 of a whole file, streamed.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Tensor count and bytes per format of an open model.
pub fn census(model: &GgufModel) -> BTreeMap<String, CensusEntry> {
    let mut c: BTreeMap<String, CensusEntry> = BTreeMap::new();
    for t in &model.header().tensors {
        let e = c.entry(t.format.name().to_owned()).or_insert(CensusEntry {
            tensors: 0,
            bytes: 0,
        });
        e.tensors += 1;
        e.bytes += t.bytes;
    }
    c
}

/// Facts of the model at `path`, opened as `model`, recorded under `name`.
pub fn model_facts(name: &str, path: &Path, model: &GgufModel) -> std::io::Result<ModelFacts> {
    Ok(ModelFacts {
        name: name.to_owned(),
        file: path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        sha256: file_sha256(path)?,
        bytes: std::fs::metadata(path)?.len(),
        arch: model
            .header()
            .architecture()
            .unwrap_or("unknown")
            .to_owned(),
        census: census(model),
    })
}
