//! KV cache (CPU): one [`SeqKv`] per sequence, holding for every attention layer of a
//! program the K and V rows of each position, `[pos][kv_head][head_dim]`.
//!
//! Values are stored as f32. With [`KvDtype::F16`] each value is rounded to the nearest
//! f16 when written (the values a GPU f16 cache and llama.cpp's default cache hold), so
//! the CPU reference and an f16 device cache attend over the same numbers; reads cost no
//! conversion. Sliding-window layers keep every position (the window is applied when
//! attending), which keeps positions and rollback trivial; a ring buffer is the GPU's
//! business.
//!
//! A forward pass writes rows at positions `len()..len()+n` of every layer and then
//! [`SeqKv::commit`]s them; [`SeqKv::truncate`] rolls a sequence back (speculative
//! decoding, prefix reuse).

pub mod blocks;

use crate::arch::KvLayerSpec;

/// Precision of the stored K/V values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum KvDtype {
    /// Full f32.
    F32,
    /// Rounded to f16 on write (default: matches the GPU cache and llama.cpp).
    #[default]
    F16,
}

/// Errors from cache accesses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvError {
    #[error("KV layer {0} does not exist")]
    NoLayer(usize),
    #[error("position {pos} is past the reserved length {reserved}")]
    PastReserved { pos: usize, reserved: usize },
    #[error("row of {got} values, the layer stores {expected}")]
    RowWidth { got: usize, expected: usize },
    #[error("cannot commit {n} positions: only {reserved} reserved after {len}")]
    Commit {
        n: usize,
        len: usize,
        reserved: usize,
    },
}

#[derive(Clone, Debug)]
struct LayerKv {
    /// Values per position: `n_kv_heads * head_dim`.
    row: usize,
    head_dim: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

/// The KV cache of one sequence.
#[derive(Clone, Debug)]
pub struct SeqKv {
    dtype: KvDtype,
    len: usize,
    reserved: usize,
    layers: Vec<LayerKv>,
}

fn round(dtype: KvDtype, x: f32) -> f32 {
    match dtype {
        KvDtype::F32 => x,
        KvDtype::F16 => half::f16::from_f32(x).to_f32(),
    }
}

impl SeqKv {
    /// An empty cache for a program's attention layers.
    pub fn new(layers: &[KvLayerSpec], dtype: KvDtype) -> Self {
        let layers = layers
            .iter()
            .map(|l| LayerKv {
                row: l.n_kv_heads * l.head_dim,
                head_dim: l.head_dim,
                k: Vec::new(),
                v: Vec::new(),
            })
            .collect();
        Self {
            dtype,
            len: 0,
            reserved: 0,
            layers,
        }
    }

    /// Committed positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is committed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of attention layers the cache holds.
    pub fn layer_count(&self) -> usize {
        self.layers.len()
    }

    /// Storage precision.
    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// Bytes held (as stored, f32).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| (l.k.capacity() + l.v.capacity()) * 4)
            .sum()
    }

    /// Make room for positions up to `len() + n` (exclusive).
    pub fn reserve(&mut self, n: usize) {
        self.reserved = self.len + n;
        for l in &mut self.layers {
            l.k.resize(self.reserved * l.row, 0.0);
            l.v.resize(self.reserved * l.row, 0.0);
        }
    }

    /// Store the K and V rows of `layer` at `pos` (`len() <= pos < reserved`).
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) -> Result<(), KvError> {
        let dtype = self.dtype;
        let reserved = self.reserved;
        let l = self.layers.get_mut(layer).ok_or(KvError::NoLayer(layer))?;
        if k.len() != l.row || v.len() != l.row {
            return Err(KvError::RowWidth {
                got: k.len().max(v.len()),
                expected: l.row,
            });
        }
        if pos >= reserved {
            return Err(KvError::PastReserved { pos, reserved });
        }
        let at = pos * l.row;
        for (d, s) in l.k[at..at + l.row].iter_mut().zip(k) {
            *d = round(dtype, *s);
        }
        for (d, s) in l.v[at..at + l.row].iter_mut().zip(v) {
            *d = round(dtype, *s);
        }
        Ok(())
    }

    /// Mark `n` more positions (written since the last commit) as committed.
    pub fn commit(&mut self, n: usize) -> Result<(), KvError> {
        if self.len + n > self.reserved {
            return Err(KvError::Commit {
                n,
                len: self.len,
                reserved: self.reserved,
            });
        }
        self.len += n;
        Ok(())
    }

    /// Bytes one position takes over all `layers` (K and V, stored as f32).
    pub fn bytes_per_token(layers: &[KvLayerSpec]) -> usize {
        layers
            .iter()
            .map(|l| 2 * l.n_kv_heads * l.head_dim * 4)
            .sum()
    }

    /// A new cache holding a copy of the committed positions `0..len` (clamped to
    /// `len()`), with no spare capacity.
    pub fn prefix_copy(&self, len: usize) -> SeqKv {
        let len = len.min(self.len);
        let layers = self
            .layers
            .iter()
            .map(|l| LayerKv {
                row: l.row,
                head_dim: l.head_dim,
                k: l.k.get(..len * l.row).unwrap_or(&[]).to_vec(),
                v: l.v.get(..len * l.row).unwrap_or(&[]).to_vec(),
            })
            .collect();
        SeqKv {
            dtype: self.dtype,
            len,
            reserved: len,
            layers,
        }
    }

    /// Drop every position from `len` on (no-op when `len >= len()`).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
        }
    }

    /// The K values of `kv_head` at `pos` in `layer` (reserved positions included).
    pub fn k(&self, layer: usize, pos: usize, kv_head: usize) -> Option<&[f32]> {
        let l = self.layers.get(layer)?;
        let at = pos * l.row + kv_head * l.head_dim;
        l.k.get(at..at + l.head_dim)
    }

    /// The V values of `kv_head` at `pos` in `layer` (reserved positions included).
    pub fn v(&self, layer: usize, pos: usize, kv_head: usize) -> Option<&[f32]> {
        let l = self.layers.get(layer)?;
        let at = pos * l.row + kv_head * l.head_dim;
        l.v.get(at..at + l.head_dim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Vec<KvLayerSpec> {
        vec![KvLayerSpec {
            n_kv_heads: 2,
            head_dim: 4,
            window: None,
        }]
    }

    #[test]
    fn write_commit_read_truncate() {
        let mut kv = SeqKv::new(&spec(), KvDtype::F32);
        kv.reserve(2);
        let k: Vec<f32> = (0..8).map(|i| i as f32 + 0.1).collect();
        let v: Vec<f32> = (0..8).map(|i| -(i as f32)).collect();
        kv.write(0, 1, &k, &v).unwrap();
        assert!(kv.write(0, 2, &k, &v).is_err());
        assert!(kv.write(1, 0, &k, &v).is_err());
        assert!(kv.write(0, 0, &k[..4], &v).is_err());
        kv.commit(2).unwrap();
        assert_eq!(kv.len(), 2);
        assert_eq!(kv.k(0, 1, 1).unwrap(), &k[4..]);
        assert_eq!(kv.v(0, 1, 0).unwrap(), &v[..4]);
        assert!(kv.commit(1).is_err());
        kv.truncate(1);
        assert_eq!(kv.len(), 1);
        let c = kv.prefix_copy(5);
        assert_eq!(c.len(), 1);
        assert_eq!(c.k(0, 0, 0), kv.k(0, 0, 0));
        assert_eq!(c.k(0, 1, 0), None, "the copy holds only the prefix");
        assert_eq!(SeqKv::bytes_per_token(&spec()), 2 * 8 * 4);
    }

    #[test]
    fn f16_rounds_on_write() {
        let mut kv = SeqKv::new(&spec(), KvDtype::F16);
        kv.reserve(1);
        let k = [1.0001f32, 2.3456, 1e-8, 70000.0, 0.0, -2.5, 0.1, 0.2];
        kv.write(0, 0, &k, &k).unwrap();
        let got = kv.k(0, 0, 0).unwrap();
        assert_eq!(got[0], 1.0);
        assert_eq!(got[1], half::f16::from_f32(2.3456).to_f32());
        assert_eq!(got[3], f32::INFINITY);
        assert_eq!(kv.k(0, 0, 1).unwrap()[1], -2.5);
    }
}
