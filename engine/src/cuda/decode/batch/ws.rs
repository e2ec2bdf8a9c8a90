//! The batched step's device workspace ([`BatchWs`]): the [`BATCH_ROWS`]-row buffers
//! swapped in for the leading decoder's, the per-step uploads (tokens, positions,
//! capacities, KV pointer tables) and the attention scratch sized by
//! [`BATCH_ATT_SCRATCH_BYTES`].

use super::{BATCH_ATT_SCRATCH_BYTES, BATCH_ROWS, BatchGraphs, CudaDecoder, MAX_ROWS, model_err};
use crate::cuda::CudaError;
use crate::cuda::cudarc::driver::CudaSlice;
use crate::cuda::ops::{self, AttnScratch, KvRow};
use crate::cuda::sources::consts::ATT_SPLIT;
use std::collections::HashMap;

/// The batched step's device workspace.
pub(in crate::cuda::decode) struct BatchWs {
    /// The program's buffers for [`BATCH_ROWS`] rows; swapped with the leading decoder's
    /// (with `tokens` and `pos`) while a step runs.
    bufs: Vec<Option<CudaSlice<f32>>>,
    tokens: CudaSlice<i32>,
    pos: CudaSlice<i32>,
    pub(super) argmax: CudaSlice<i32>,
    /// Row `t`'s KV capacity.
    pub(super) caps: CudaSlice<i32>,
    /// Per layer `l`, the group's `[k0, v0, bt0, k1, v1, bt1, ...]` at `l * 3 * BATCH_ROWS`.
    pub(super) kvp: CudaSlice<u64>,
    /// Attention scratch per (heads, head size), for `att_rows` rows over `capacity`.
    pub(super) scratch: HashMap<(usize, usize), AttnScratch>,
    /// The capacity the scratch's split layout is for (at least every row's).
    pub(super) capacity: usize,
    /// Rows per attention launch.
    pub(super) att_rows: usize,
    pub(super) n_layers: usize,
    /// The largest position of the step's rows (set by [`upload_step`]).
    pub(super) max_pos: usize,
    /// Captured steps of the groups this workspace ran ([`BatchGraphs`]).
    pub(super) graphs: BatchGraphs,
    /// While a step is captured: the attention grids take every split of the capacity
    /// (a graph serves every position), not the splits the step's positions reach.
    pub(super) capturing: bool,
}

/// Scratch bytes of one attention row of `heads` heads of `dim` over `capacity` positions.
fn att_row_bytes(heads: usize, dim: usize, capacity: usize) -> usize {
    let splits = capacity.div_ceil(ATT_SPLIT).max(1);
    heads * splits * (dim + 2) * 4 + heads * 4
}

/// Rows per attention launch for attention shapes `shapes` within `budget` bytes of
/// scratch per shape: as many as fit, at least [`MAX_ROWS`], at most [`BATCH_ROWS`].
fn attention_rows_for(shapes: &[(usize, usize)], capacity: usize, budget: usize) -> usize {
    shapes
        .iter()
        .map(|&(h, d)| (budget / att_row_bytes(h, d, capacity).max(1)).clamp(MAX_ROWS, BATCH_ROWS))
        .min()
        .unwrap_or(BATCH_ROWS)
}

impl BatchWs {
    fn new(dec: &CudaDecoder, capacity: usize) -> Result<BatchWs, CudaError> {
        let gpu = &*dec.gpu;
        let bufs = dec
            .program
            .buffers
            .iter()
            .map(|b| gpu.zeros::<f32>(b.width * BATCH_ROWS).map(Some))
            .collect::<Result<Vec<_>, CudaError>>()?;
        let shapes: Vec<(usize, usize)> = dec.scratch.keys().copied().collect();
        let att_rows = attention_rows_for(&shapes, capacity, BATCH_ATT_SCRATCH_BYTES);
        let mut scratch = HashMap::new();
        for (h, d) in shapes {
            scratch.insert((h, d), AttnScratch::new(gpu, att_rows, h, d, capacity)?);
        }
        let n_layers = dec.kv.len();
        Ok(BatchWs {
            bufs,
            tokens: gpu.zeros(BATCH_ROWS)?,
            pos: gpu.zeros(BATCH_ROWS)?,
            argmax: gpu.zeros(BATCH_ROWS)?,
            caps: gpu.zeros(BATCH_ROWS)?,
            kvp: gpu.zeros((n_layers * 3 * BATCH_ROWS).max(1))?,
            scratch,
            capacity,
            att_rows,
            n_layers,
            max_pos: 0,
            graphs: BatchGraphs::default(),
            capturing: false,
        })
    }

    /// Device bytes the workspace holds.
    fn bytes(&self) -> usize {
        let bufs: usize = self.bufs.iter().flatten().map(|b| b.len() * 4).sum();
        let att: usize = self
            .scratch
            .keys()
            .map(|&(h, d)| att_row_bytes(h, d, self.capacity) * self.att_rows)
            .sum();
        bufs + att + self.kvp.len() * 8 + 16 * BATCH_ROWS
    }
}

impl CudaDecoder {
    /// Device bytes of the batched step's workspace this decoder holds (0 when none).
    pub fn batch_buffer_bytes(&self) -> usize {
        self.batch.as_ref().map_or(0, |w| w.bytes())
    }

    /// Exchange this decoder's row buffers with the batch workspace's.
    pub(super) fn swap_batch(&mut self, ws: &mut BatchWs) {
        std::mem::swap(&mut self.bufs, &mut ws.bufs);
        std::mem::swap(&mut self.tokens, &mut ws.tokens);
        std::mem::swap(&mut self.pos, &mut ws.pos);
    }
}

/// The workspace for a group: the first one a decoder of the group holds if it fits
/// (capacity, layers), else a new one (an unfit one is dropped).
pub(super) fn take_ws(group: &mut [&mut CudaDecoder]) -> Result<Box<BatchWs>, CudaError> {
    let need = group.iter().map(|d| d.capacity).max().unwrap_or(1);
    let found = group.iter_mut().find_map(|d| d.batch.take());
    let lead = group
        .first()
        .ok_or_else(|| model_err("empty batch group"))?;
    match found {
        Some(ws)
            if ws.capacity >= need
                && ws.n_layers == lead.kv.len()
                && ws.bufs.len() == lead.program.buffers.len() =>
        {
            Ok(ws)
        }
        other => {
            drop(other);
            Ok(Box::new(BatchWs::new(lead, need)?))
        }
    }
}

/// Write the group's token ids, positions, capacities and per-layer KV pointer tables to
/// the workspace (one copy each).
pub(super) fn upload_step(
    lead: &CudaDecoder,
    rest: &[&mut CudaDecoder],
    ws: &mut BatchWs,
    toks: &[u32],
) -> Result<(), CudaError> {
    let n = toks.len();
    let gpu = &*lead.gpu;
    let rows = || std::iter::once(lead).chain(rest.iter().map(|d| &**d));
    let ids: Vec<i32> = toks.iter().map(|&t| t as i32).collect();
    let pos = rows()
        .map(|d| i32::try_from(d.len).map_err(|_| model_err("position overflows i32")))
        .collect::<Result<Vec<i32>, CudaError>>()?;
    let mut ptrs = vec![0u64; ws.n_layers * 3 * BATCH_ROWS];
    let mut caps = Vec::new();
    for (l, lk) in lead.kv.iter().enumerate() {
        let table = rows()
            .map(|d| {
                let k =
                    d.kv.get(l)
                        .ok_or_else(|| model_err("batch rows have different layers"))?;
                if k.n_kv_heads != lk.n_kv_heads || k.head_dim != lk.head_dim {
                    return Err(model_err("batch rows have different KV shapes"));
                }
                Ok(KvRow::of(gpu, &k.k, &k.v, &d.bt, d.capacity))
            })
            .collect::<Result<Vec<KvRow>, CudaError>>()?;
        let (p, c) = ops::kv_row_table(&table, lk.n_kv_heads, lk.head_dim)?;
        let at = l * 3 * BATCH_ROWS;
        ptrs.get_mut(at..at + p.len())
            .ok_or_else(|| model_err("kv pointer table too small"))?
            .copy_from_slice(&p);
        caps = c;
    }
    ws.max_pos = rows().map(|d| d.len).max().unwrap_or(0);
    let stream = gpu.stream();
    stream.memcpy_htod(&ids, &mut ws.tokens.slice_mut(0..n))?;
    stream.memcpy_htod(&pos, &mut ws.pos.slice_mut(0..n))?;
    if !caps.is_empty() {
        stream.memcpy_htod(&caps, &mut ws.caps.slice_mut(0..n))?;
        stream.memcpy_htod(&ptrs, &mut ws.kvp)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_rows_follow_the_scratch_budget() {
        // Llama-3.1-8B: 32 heads of 128.
        let llama = [(32, 128)];
        // 200 positions (the bench cells): 4 splits, all 64 rows.
        assert_eq!(
            attention_rows_for(&llama, 200, BATCH_ATT_SCRATCH_BYTES),
            BATCH_ROWS
        );
        // 16384 positions: 256 splits x 32 heads x 130 floats = 4.26 MB a row: 63 rows.
        assert_eq!(
            attention_rows_for(&llama, 16384, BATCH_ATT_SCRATCH_BYTES),
            63
        );
        // 131072 positions: the floor of MAX_ROWS rows.
        assert_eq!(
            attention_rows_for(&llama, 131072, BATCH_ATT_SCRATCH_BYTES),
            MAX_ROWS
        );
        // The tightest shape decides; no attention: all rows.
        assert_eq!(
            attention_rows_for(&[(32, 128), (8, 64)], 16384, BATCH_ATT_SCRATCH_BYTES),
            63
        );
        assert_eq!(attention_rows_for(&[], 16384, 0), BATCH_ROWS);
        assert!(att_row_bytes(32, 128, 16384) * 63 <= BATCH_ATT_SCRATCH_BYTES);
        assert!(att_row_bytes(32, 128, 16384) * 64 > BATCH_ATT_SCRATCH_BYTES);
    }
}
