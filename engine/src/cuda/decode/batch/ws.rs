//! The batched step's device workspace ([`BatchWs`]): one per upload of the weights (a
//! slot every decoder of the upload shares, [`BatchSlot`]), whose row buffers are swapped
//! in for the leading decoder's while a step runs, the per-step uploads (tokens, positions,
//! capacities, KV pointer tables), the attention scratch sized by
//! [`BATCH_ATT_SCRATCH_BYTES`], the mmv staging, and the captured steps.

use super::{BATCH_ATT_SCRATCH_BYTES, BATCH_ROWS, BatchGraphs, CudaDecoder, MAX_ROWS, model_err};
use crate::cuda::CudaError;
use crate::cuda::cudarc::driver::CudaSlice;
use crate::cuda::ops::{self, AttnScratch, GemmX, KvRow, MmvScratch};
use crate::cuda::sources::consts::ATT_SPLIT;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The workspace of one upload of the weights, shared by every decoder made from it by
/// [`CudaDecoder::share`] (made on the first batched step). Held locked for a whole group
/// step.
pub(in crate::cuda::decode) type BatchSlot = Arc<Mutex<Option<Box<BatchWs>>>>;

/// Lock a workspace slot. A step that panicked left the slot empty (the workspace is
/// taken out of it for the step), so a poisoned slot is still consistent.
pub(super) fn lock_slot(slot: &BatchSlot) -> MutexGuard<'_, Option<Box<BatchWs>>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Rows the workspace's buffers hold for a group of `n`: the next power of two, at least
/// [`MAX_ROWS`], at most [`BATCH_ROWS`] (a workspace only grows: a larger group makes a new
/// one, and the graphs of the old one go with it).
pub(super) fn ws_rows(n: usize) -> usize {
    n.max(1).next_power_of_two().clamp(MAX_ROWS, BATCH_ROWS)
}

/// The batched step's device workspace.
pub(in crate::cuda::decode) struct BatchWs {
    /// The program's buffers for `rows` rows; swapped with the leading decoder's (with
    /// `tokens`, `pos` and the mmv staging) while a step runs.
    bufs: Vec<Option<CudaSlice<f32>>>,
    /// Rows the buffers hold ([`ws_rows`]).
    pub(super) rows: usize,
    tokens: CudaSlice<i32>,
    pos: CudaSlice<i32>,
    /// The mmv staging and split scratch (`ASSAY_MMV`), swapped with the leading
    /// decoder's; made when a leading decoder runs its products on `mmv.cu`.
    mmv_x: Option<GemmX>,
    mmv_scratch: Option<MmvScratch>,
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
    fn new(dec: &CudaDecoder, capacity: usize, rows: usize) -> Result<BatchWs, CudaError> {
        let gpu = &*dec.gpu;
        let rows = rows.clamp(1, BATCH_ROWS);
        let bufs = dec
            .program
            .buffers
            .iter()
            .map(|b| gpu.zeros::<f32>(b.width * rows).map(Some))
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
            rows,
            tokens: gpu.zeros(BATCH_ROWS)?,
            pos: gpu.zeros(BATCH_ROWS)?,
            mmv_x: None,
            mmv_scratch: None,
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
        let mmv = self
            .mmv_x
            .as_ref()
            .map_or(0, |x| x.hi.len() * 6 + x.scale.len() * 4);
        bufs + att + mmv + self.kvp.len() * 8 + 16 * BATCH_ROWS
    }

    /// Buffer `i` of the program (while no step has it swapped out).
    pub(super) fn buf(&self, i: usize) -> Option<&CudaSlice<f32>> {
        self.bufs.get(i).and_then(Option::as_ref)
    }

    /// Make the mmv staging when `dec` runs its products on `mmv.cu` and the workspace has
    /// none yet (before any capture: an allocation cannot join a graph).
    fn ensure_mmv(&mut self, dec: &CudaDecoder) -> Result<(), CudaError> {
        if dec.mmv_on() && (self.mmv_x.is_none() || self.mmv_scratch.is_none()) {
            let k_max = dec.mats.iter().map(|m| m.cols).max().unwrap_or(1);
            self.mmv_x = Some(GemmX::new(&dec.gpu, k_max)?);
            self.mmv_scratch = Some(MmvScratch::new(&dec.gpu)?);
        }
        Ok(())
    }
}

impl CudaDecoder {
    /// Device bytes of the batched step's workspace of this decoder's weights (shared by
    /// every decoder of the upload; 0 when none).
    pub fn batch_buffer_bytes(&self) -> usize {
        lock_slot(&self.batch).as_ref().map_or(0, |w| w.bytes())
    }

    /// Exchange this decoder's row buffers (and mmv staging) with the batch workspace's.
    pub(super) fn swap_batch(&mut self, ws: &mut BatchWs) {
        std::mem::swap(&mut self.bufs, &mut ws.bufs);
        std::mem::swap(&mut self.tokens, &mut ws.tokens);
        std::mem::swap(&mut self.pos, &mut ws.pos);
        std::mem::swap(&mut self.mmv.x, &mut ws.mmv_x);
        std::mem::swap(&mut self.mmv.scratch, &mut ws.mmv_scratch);
    }
}

/// The workspace for a group, taken out of the weights' slot: the one there if it fits
/// (capacity, rows, layers, buffers), else a new one (an unfit one is dropped, with its
/// graphs; the new one keeps at least its capacity and rows, so a workspace only grows).
pub(super) fn take_ws(
    slot: &mut Option<Box<BatchWs>>,
    lead: &CudaDecoder,
    need: usize,
    n: usize,
) -> Result<Box<BatchWs>, CudaError> {
    let rows = ws_rows(n);
    let mut ws = match slot.take() {
        Some(ws)
            if ws.capacity >= need
                && ws.rows >= n
                && ws.n_layers == lead.kv.len()
                && ws.bufs.len() == lead.program.buffers.len() =>
        {
            ws
        }
        Some(old) if old.n_layers == lead.kv.len() => {
            let (capacity, rows) = (old.capacity.max(need), old.rows.max(rows));
            drop(old);
            Box::new(BatchWs::new(lead, capacity, rows)?)
        }
        other => {
            drop(other);
            Box::new(BatchWs::new(lead, need, rows)?)
        }
    };
    ws.ensure_mmv(lead)?;
    Ok(ws)
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

    #[test]
    fn workspace_rows_are_powers_of_two_up_to_the_batch() {
        // Every group fits the rows its workspace is made for.
        for n in 1..=BATCH_ROWS {
            let r = ws_rows(n);
            assert!(r >= n && (MAX_ROWS..=BATCH_ROWS).contains(&r), "{n}: {r}");
            assert!(r.is_power_of_two(), "{n}: {r}");
        }
        assert_eq!(ws_rows(0), MAX_ROWS);
        assert_eq!(ws_rows(1), MAX_ROWS);
        assert_eq!(ws_rows(MAX_ROWS + 1), 2 * MAX_ROWS);
        assert_eq!(ws_rows(BATCH_ROWS), BATCH_ROWS);
        assert_eq!(ws_rows(BATCH_ROWS + 1), BATCH_ROWS);
        // A workspace only grows: 5 rows after 33 keep the 64 rows.
        assert_eq!(ws_rows(33).max(ws_rows(5)), BATCH_ROWS);
    }
}
