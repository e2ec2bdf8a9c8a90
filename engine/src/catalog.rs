//! The catalog of real test models (`tools/models.json`, shared with `tools/fetch-models`)
//! and the resolution of a model argument: a path, or a catalog name looked up in the
//! models folder.

use std::path::{Path, PathBuf};

use serde::Deserialize;

const CATALOG_JSON: &str = include_str!("../../tools/models.json");

/// One catalog entry.
#[derive(Clone, Debug, Deserialize)]
pub struct CatalogModel {
    /// Display name, e.g. `SmolLM2-135M-Instruct`.
    pub name: String,
    /// File name inside the models folder.
    pub file: String,
    /// `general.architecture` of the file.
    pub arch: String,
    /// Human description of the quant mix.
    pub quant: String,
    /// sha256 of the assembled file.
    pub sha256: String,
}

#[derive(Deserialize)]
struct Catalog {
    default: String,
    models: Vec<CatalogModel>,
}

/// Errors resolving a model argument.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("the built-in model catalog is malformed: {0}")]
    Malformed(String),
    #[error(
        "model {name:?} is not downloaded (looked for {path}); run `tools/fetch-models --only {name}`"
    )]
    NotFetched { name: String, path: PathBuf },
    #[error("no file {spec:?} and no catalog model of that name; known models: {known}")]
    Unknown { spec: String, known: String },
}

fn catalog() -> Result<Catalog, CatalogError> {
    serde_json::from_str(CATALOG_JSON).map_err(|e| CatalogError::Malformed(e.to_string()))
}

/// Every catalog model.
pub fn models() -> Result<Vec<CatalogModel>, CatalogError> {
    Ok(catalog()?.models)
}

/// The name of the default model (the smallest; used when no model is given).
pub fn default_name() -> Result<String, CatalogError> {
    Ok(catalog()?.default)
}

/// Resolve `spec` to a file: an existing path is taken as it is; otherwise `spec` is matched
/// (case-insensitively, or as a unique prefix) against catalog names and looked up in
/// `models_dir`.
pub fn resolve(spec: &str, models_dir: &Path) -> Result<PathBuf, CatalogError> {
    let as_path = Path::new(spec);
    if as_path.exists() {
        return Ok(as_path.to_owned());
    }
    let models = models()?;
    let lower = spec.to_ascii_lowercase();
    let exact = models.iter().find(|m| m.name.to_ascii_lowercase() == lower);
    let prefixed: Vec<&CatalogModel> = models
        .iter()
        .filter(|m| m.name.to_ascii_lowercase().starts_with(&lower))
        .collect();
    let hit = match (exact, prefixed.as_slice()) {
        (Some(m), _) => Some(m),
        (None, [m]) => Some(*m),
        _ => None,
    };
    match hit {
        Some(m) => {
            let path = models_dir.join(&m.file);
            if path.exists() {
                Ok(path)
            } else {
                Err(CatalogError::NotFetched {
                    name: m.name.clone(),
                    path,
                })
            }
        }
        None => Err(CatalogError::Unknown {
            spec: spec.to_owned(),
            known: models
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_parses_and_default_is_listed() {
        let models = models().unwrap();
        assert_eq!(models.len(), 4);
        let d = default_name().unwrap();
        assert!(models.iter().any(|m| m.name == d));
        for m in &models {
            assert_eq!(m.sha256.len(), 64, "{}", m.name);
        }
    }

    #[test]
    fn resolve_names_prefixes_and_errors() {
        let dir = std::env::temp_dir().join(format!("assay-catalog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Gemma-3-270M.Q4_K_M.gguf"), b"x").unwrap();
        assert_eq!(
            resolve("gemma", &dir).unwrap(),
            dir.join("Gemma-3-270M.Q4_K_M.gguf")
        );
        assert_eq!(
            resolve("GEMMA-3-270M", &dir).unwrap(),
            dir.join("Gemma-3-270M.Q4_K_M.gguf")
        );
        // "qwen" is ambiguous (two Qwen models); "nope" is unknown.
        assert!(matches!(
            resolve("qwen", &dir),
            Err(CatalogError::Unknown { .. })
        ));
        assert!(matches!(
            resolve("nope", &dir),
            Err(CatalogError::Unknown { .. })
        ));
        assert!(matches!(
            resolve("SmolLM2-135M-Instruct", &dir),
            Err(CatalogError::NotFetched { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
