//! What every `assay` subcommand shares: finding the models folder and resolving a model
//! argument (a path or a catalog name).

use std::path::PathBuf;

/// The models folder: the flag or `ASSAY_MODELS_DIR`, else `~/.cache/assay/models`.
pub fn models_dir(flag: Option<PathBuf>) -> PathBuf {
    flag.unwrap_or_else(|| {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| ".".into());
        home.join(".cache").join("assay").join("models")
    })
}

/// Resolve an optional model argument (path or catalog name; `None` = the default model).
pub fn resolve_model(
    spec: Option<&str>,
    models_dir_flag: Option<PathBuf>,
) -> anyhow::Result<PathBuf> {
    let dir = models_dir(models_dir_flag);
    let spec = match spec {
        Some(s) => s.to_owned(),
        None => engine::catalog::default_name()?,
    };
    Ok(engine::catalog::resolve(&spec, &dir)?)
}
