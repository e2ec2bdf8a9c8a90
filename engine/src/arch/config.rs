//! Hyper-parameters read from GGUF metadata (`{arch}.*` keys) with the checks every family
//! shares: required keys present and of a numeric type, sizes non-zero and consistent.

use crate::model_file::{GgufHeader, MetaArray, MetaValue};

use super::ArchError;

/// The hyper-parameters the families use. Per-family extras are read by the family.
#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    pub arch: String,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Values per head of Q and K (`attention.key_length`, else `n_embd / n_heads`).
    pub head_dim: usize,
    /// Rotated values per head (`rope.dimension_count`, else `head_dim`).
    pub rot_dims: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
    /// 1 / `rope.scaling.factor` for linear scaling, else 1.
    pub rope_freq_scale: f32,
    pub n_ctx_train: usize,
}

/// Read helper bound to one header and architecture prefix.
pub struct Meta<'a> {
    pub header: &'a GgufHeader,
    pub arch: &'a str,
}

impl<'a> Meta<'a> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{}", self.arch, suffix)
    }

    /// `{arch}.{suffix}` as an unsigned integer, if present.
    pub fn opt_usize(&self, suffix: &str) -> Result<Option<usize>, ArchError> {
        let key = self.key(suffix);
        match self.header.get(&key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => usize::try_from(n)
                    .map(Some)
                    .map_err(|_| ArchError::BadMetadata {
                        key,
                        why: "value too large".into(),
                    }),
                None => Err(ArchError::BadMetadata {
                    key,
                    why: format!("expected an unsigned integer, found {}", v.type_name()),
                }),
            },
        }
    }

    /// `{arch}.{suffix}` as an unsigned integer; an error when absent.
    pub fn usize(&self, suffix: &str) -> Result<usize, ArchError> {
        self.opt_usize(suffix)?
            .ok_or_else(|| ArchError::MissingMetadata(self.key(suffix)))
    }

    /// `{arch}.{suffix}` as a float, if present.
    pub fn opt_f32(&self, suffix: &str) -> Result<Option<f32>, ArchError> {
        let key = self.key(suffix);
        match self.header.get(&key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x as f32)),
                _ => Err(ArchError::BadMetadata {
                    key,
                    why: format!("expected a finite number, found {}", v.type_name()),
                }),
            },
        }
    }

    /// `{arch}.{suffix}` as a string, if present.
    pub fn opt_str(&self, suffix: &str) -> Option<&'a str> {
        self.header
            .get(&self.key(suffix))
            .and_then(MetaValue::as_str)
    }

    /// `{arch}.{suffix}` as a per-layer list of booleans (a bool or integer array).
    pub fn opt_bool_array(&self, suffix: &str) -> Result<Option<Vec<bool>>, ArchError> {
        let key = self.key(suffix);
        let Some(v) = self.header.get(&key) else {
            return Ok(None);
        };
        let Some(a) = v.as_array() else {
            return Ok(None);
        };
        let bools = match a {
            MetaArray::Bool(b) => b.clone(),
            MetaArray::U8(x) => x.iter().map(|&e| e != 0).collect(),
            MetaArray::I8(x) => x.iter().map(|&e| e != 0).collect(),
            MetaArray::U16(x) => x.iter().map(|&e| e != 0).collect(),
            MetaArray::I16(x) => x.iter().map(|&e| e != 0).collect(),
            MetaArray::U32(x) => x.iter().map(|&e| e != 0).collect(),
            MetaArray::I32(x) => x.iter().map(|&e| e != 0).collect(),
            MetaArray::U64(x) => x.iter().map(|&e| e != 0).collect(),
            MetaArray::I64(x) => x.iter().map(|&e| e != 0).collect(),
            _ => {
                return Err(ArchError::BadMetadata {
                    key,
                    why: format!(
                        "expected an array of booleans, found {}",
                        a.elem_type_name()
                    ),
                });
            }
        };
        Ok(Some(bools))
    }

    /// A per-layer count that may be stored as one integer or as an array with one entry
    /// per layer; arrays must be uniform (mixed per-layer head counts are not supported).
    fn uniform_count(&self, suffix: &str) -> Result<Option<usize>, ArchError> {
        let key = self.key(suffix);
        match self.header.get(&key) {
            Some(MetaValue::Array(a)) => {
                let vals: Vec<u64> = match a {
                    MetaArray::U32(x) => x.iter().map(|&e| u64::from(e)).collect(),
                    MetaArray::I32(x) => x.iter().map(|&e| e.max(0) as u64).collect(),
                    MetaArray::U64(x) => x.clone(),
                    _ => Vec::new(),
                };
                match vals.first() {
                    Some(&first) if vals.iter().all(|&v| v == first) => Ok(Some(first as usize)),
                    _ => Err(ArchError::BadMetadata {
                        key,
                        why: "per-layer values differ or are not integers (not supported)".into(),
                    }),
                }
            }
            _ => self.opt_usize(suffix),
        }
    }
}

fn nonzero(key: &str, v: usize) -> Result<usize, ArchError> {
    if v == 0 {
        Err(ArchError::BadMetadata {
            key: key.to_owned(),
            why: "must be non-zero".into(),
        })
    } else {
        Ok(v)
    }
}

impl Hparams {
    /// Read the shared hyper-parameters of architecture `arch`.
    pub fn read(header: &GgufHeader, arch: &str) -> Result<Self, ArchError> {
        let m = Meta { header, arch };
        let n_layers = nonzero("block_count", m.usize("block_count")?)?;
        let n_embd = nonzero("embedding_length", m.usize("embedding_length")?)?;
        let n_ff = nonzero(
            "feed_forward_length",
            m.uniform_count("feed_forward_length")?
                .ok_or_else(|| ArchError::MissingMetadata(format!("{arch}.feed_forward_length")))?,
        )?;
        let n_heads = nonzero(
            "attention.head_count",
            m.uniform_count("attention.head_count")?.ok_or_else(|| {
                ArchError::MissingMetadata(format!("{arch}.attention.head_count"))
            })?,
        )?;
        let n_kv_heads = nonzero(
            "attention.head_count_kv",
            m.uniform_count("attention.head_count_kv")?
                .unwrap_or(n_heads),
        )?;
        if n_heads % n_kv_heads != 0 {
            return Err(ArchError::BadMetadata {
                key: format!("{arch}.attention.head_count_kv"),
                why: format!("{n_kv_heads} KV heads do not divide {n_heads} query heads"),
            });
        }
        let head_dim = match m.opt_usize("attention.key_length")? {
            Some(k) => k,
            None => {
                if n_embd % n_heads != 0 {
                    return Err(ArchError::BadMetadata {
                        key: format!("{arch}.attention.head_count"),
                        why: format!("{n_heads} heads do not divide embedding length {n_embd}"),
                    });
                }
                n_embd / n_heads
            }
        };
        let head_dim = nonzero("attention.key_length", head_dim)?;
        if let Some(vl) = m.opt_usize("attention.value_length")?
            && vl != head_dim
        {
            return Err(ArchError::BadMetadata {
                key: format!("{arch}.attention.value_length"),
                why: format!(
                    "value length {vl} differs from key length {head_dim} (not supported)"
                ),
            });
        }
        let rot_dims = m.opt_usize("rope.dimension_count")?.unwrap_or(head_dim);
        if rot_dims > head_dim || rot_dims % 2 != 0 {
            return Err(ArchError::BadMetadata {
                key: format!("{arch}.rope.dimension_count"),
                why: format!("{rot_dims} must be even and at most the head size {head_dim}"),
            });
        }
        let rms_eps = m
            .opt_f32("attention.layer_norm_rms_epsilon")?
            .unwrap_or(1e-5);
        let rope_base = m.opt_f32("rope.freq_base")?.unwrap_or(10000.0);
        let rope_freq_scale = match m.opt_str("rope.scaling.type") {
            None | Some("none") => 1.0,
            Some("linear") => {
                let f = m.opt_f32("rope.scaling.factor")?.unwrap_or(1.0);
                if f > 0.0 { 1.0 / f } else { 1.0 }
            }
            Some(other) => {
                return Err(ArchError::BadMetadata {
                    key: format!("{arch}.rope.scaling.type"),
                    why: format!(
                        "RoPE scaling {other:?} is not supported (supported: none, linear)"
                    ),
                });
            }
        };
        let n_ctx_train = m.opt_usize("context_length")?.unwrap_or(0);
        Ok(Self {
            arch: arch.to_owned(),
            n_layers,
            n_embd,
            n_ff,
            n_heads,
            n_kv_heads,
            head_dim,
            rot_dims,
            rms_eps,
            rope_base,
            rope_freq_scale,
            n_ctx_train,
        })
    }
}
