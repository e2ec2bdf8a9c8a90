//! The reference executor's view of a program's weights: each [`WeightSpec`] resolved to
//! its bytes in the model file, with row access (dequantized with the `quant` module) and
//! the row-parallel matrix product every projection uses.

use rayon::prelude::*;

use crate::arch::{Program, WeightSpec};
use crate::model_file::{GgufModel, TensorInfo};
use crate::quant;

use super::ReferenceError;
use super::math::dot;

/// One weight: its spec, tensor inventory entry and bytes per row, and optionally the
/// whole matrix already dequantized (the same values [`Weight::row`] produces, kept to
/// spare the dequantization on every decode step).
#[derive(Clone, Debug)]
pub struct Weight {
    pub spec: WeightSpec,
    pub info: TensorInfo,
    pub row_bytes: usize,
    pub cached: Option<Vec<f32>>,
}

/// Output rows handled by one parallel task of [`matmul`].
const ROW_BLOCK: usize = 16;

impl Weight {
    /// Resolve every weight of `program` against `model`, checking sizes.
    pub fn resolve_all(
        model: &GgufModel,
        program: &Program,
    ) -> Result<Vec<Weight>, ReferenceError> {
        program
            .weights
            .iter()
            .map(|spec| {
                let info = model
                    .header()
                    .tensor(&spec.name)
                    .ok_or_else(|| {
                        ReferenceError::Weight(format!("tensor {:?} is missing", spec.name))
                    })?
                    .clone();
                let row_bytes = spec.format.bytes_for(spec.cols)?;
                let bytes = model.tensor_bytes(&info);
                if bytes.len() != row_bytes * spec.rows || info.format != spec.format {
                    return Err(ReferenceError::Weight(format!(
                        "tensor {:?}: {} bytes of {}, expected {} rows x {} bytes of {}",
                        spec.name,
                        bytes.len(),
                        info.format,
                        spec.rows,
                        row_bytes,
                        spec.format
                    )));
                }
                Ok(Weight {
                    spec: spec.clone(),
                    info,
                    row_bytes,
                    cached: None,
                })
            })
            .collect()
    }

    /// Dequantize row `row` into `out` (`cols` values).
    pub fn row(
        &self,
        model: &GgufModel,
        row: usize,
        out: &mut [f32],
    ) -> Result<(), ReferenceError> {
        let bytes = model.tensor_bytes(&self.info);
        let start = row * self.row_bytes;
        let src = bytes.get(start..start + self.row_bytes).ok_or_else(|| {
            ReferenceError::Weight(format!("row {row} of {:?} out of range", self.spec.name))
        })?;
        quant::dequantize(self.spec.format, src, out)?;
        Ok(())
    }

    /// The whole weight as f32 (vectors: norms, biases, rope factors).
    pub fn to_f32(&self, model: &GgufModel) -> Result<Vec<f32>, ReferenceError> {
        let mut out = vec![0f32; self.spec.rows * self.spec.cols];
        quant::dequantize(self.spec.format, model.tensor_bytes(&self.info), &mut out)?;
        Ok(out)
    }
}

/// `out[t][n] = dot(W[n], x[t]) (+ bias[n])` for `t < x.len() / cols`.
///
/// Parallel over blocks of output rows only: each task dequantizes its rows once and dots
/// them against every token, so each output value is one [`dot`] of the same two vectors
/// whatever the thread count, block size or number of tokens.
pub fn matmul(
    model: &GgufModel,
    w: &Weight,
    x: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), ReferenceError> {
    let (n, k) = (w.spec.rows, w.spec.cols);
    let t = x.len() / k.max(1);
    if x.len() != t * k || out.len() != t * n {
        return Err(ReferenceError::Weight(format!(
            "matmul {:?}: {} inputs, {} outputs for {n}x{k}",
            w.spec.name,
            x.len(),
            out.len()
        )));
    }
    if t == 0 || n == 0 {
        return Ok(());
    }
    // Row-major by output row: [n][t].
    let mut by_row = vec![0f32; n * t];
    by_row
        .par_chunks_mut(ROW_BLOCK * t)
        .enumerate()
        .try_for_each(|(bi, chunk)| {
            let first = bi * ROW_BLOCK;
            let rows = chunk.len() / t.max(1);
            let mut scratch = Vec::new();
            let wrows: &[f32] = match &w.cached {
                Some(c) => c.get(first * k..(first + rows) * k).ok_or_else(|| {
                    ReferenceError::Weight(format!("cached {:?} too short", w.spec.name))
                })?,
                None => {
                    scratch.resize(rows * k, 0f32);
                    for r in 0..rows {
                        w.row(model, first + r, &mut scratch[r * k..(r + 1) * k])?;
                    }
                    &scratch
                }
            };
            for ti in 0..t {
                let xt = &x[ti * k..(ti + 1) * k];
                for r in 0..rows {
                    let mut y = dot(&wrows[r * k..(r + 1) * k], xt);
                    if let Some(b) = bias {
                        y += b[first + r];
                    }
                    chunk[r * t + ti] = y;
                }
            }
            Ok::<(), ReferenceError>(())
        })?;
    if t == 1 {
        out.copy_from_slice(&by_row);
    } else {
        for (r, col) in by_row.chunks_exact(t).enumerate() {
            for (ti, &v) in col.iter().enumerate() {
                out[ti * n + r] = v;
            }
        }
    }
    Ok(())
}
