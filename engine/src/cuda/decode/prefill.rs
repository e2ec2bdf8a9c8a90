//! The prompt pass on tensor cores (issue 8): [`CudaDecoder::prefill`] feeds PROMPT tokens
//! in passes of many rows, in activation buffers of their own (the body's buffers only: the
//! head runs on one row in the decoder's own; made on the first prompt pass and swapped with
//! the decoder's [`MAX_ROWS`]-row buffers while it runs, so a captured graph's addresses
//! stay valid), with the body's matrix products as GEMMs, by one of two
//! kernels ([`GemmKernel`], `ASSAY_GEMM=tiled|v1`, default [`DEFAULT_GEMM_KERNEL`]):
//! - **tiled** (`kernels/gemmt.cu`): passes of [`PREFILL_PASS_ROWS`] = 1024 rows
//!   (`ASSAY_PREFILL_PASS`); each product decodes its weights to f16 (BF16: bf16) into a
//!   scratch of the decoder's, then one dense tiled GEMM over all the pass's rows; every
//!   weight format but F32 ([`select::gemmt_supported`]);
//! - **v1** (`kernels/gemm.cu`): passes of [`PREFILL_ROWS`] = 64 rows, quants as exact f16
//!   integers with per-chunk scales (the rows of a pass as the MMA's N), for
//!   [`select::GEMM_FORMATS`].
//!
//! Every other op runs as in [`CudaDecoder::forward`] over the pass's rows (embedding, norms,
//! RoPE + KV store: one launch; attention in launches of up to `att_rows` rows, bounded by
//! the scratch budget [`PREFILL_ATT_SCRATCH_BYTES`]; the matvecs of formats without a GEMM in
//! slices of the batched matvec's launch limit). All of them are row-invariant, so the pass
//! size changes no bits.
//!
//! Which path feeds what: the prompt goes through [`CudaDecoder::prefill`]; the decode step,
//! re-fed GENERATED tokens (a preempted sequence's recompute, a speculative target's
//! accepted tokens), spec verification (`verify.rs`) and batched decode (`batch.rs`) go
//! through [`CudaDecoder::forward`] and the other row-path entry points, whose per-row bits
//! are those of the one-token kernels. A GEMM row's bits depend only on its own token and
//! position (kernel-check `gemm` / `gemmt` cases: alone vs among many), so a prompt fed in chunks of any
//! size gives the same KV and logits (the `chunking` gate with `ASSAY_PREFILL=gemm`); they
//! are not the row path's bits: the `prefill` gate bounds the difference (last-row argmax
//! identical, logits within a tolerance).
//!
//! The switch: [`PrefillMode`], from `ASSAY_PREFILL=gemm|rows` when a decoder is made
//! (default [`DEFAULT_PREFILL`]), or [`CudaDecoder::set_prefill`]. The GEMM launches of the
//! body's products are the submodule `gemm`'s.

mod gemm;

use super::{CudaDecoder, MAX_ROWS, fuse, matrix, w_ref};
use crate::arch;
use crate::cuda::ops::{AttnScratch, GemmOpts, GemmX, GemmtOpts, GemmtScratch, XParts};
use crate::cuda::select::GemmKernel;
use crate::cuda::sources::consts::{ATT_SPLIT, PREFILL_ROWS};
use crate::cuda::{CudaError, select, shape_err};
use cudarc::driver::CudaSlice;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Most bytes of split-KV attention scratch a prompt pass allocates per attention shape
/// (`rows * n_heads * ceil(capacity / ATT_SPLIT) * (head_dim + 2) * 4`): the pass's
/// attention runs in launches of as many rows as fit (at least [`MAX_ROWS`], at most the
/// pass's rows, [`CudaDecoder::prefill_pass_rows`]; `ASSAY_PREFILL_ATT_BYTES` sets another
/// budget). Llama-3.1-8B (32 heads of 128, 16.6 KB per row and 64 positions): 126 rows
/// (134 MB) at a capacity of 4096, 63 at 8192, fewer beyond, a whole pass of 1024 rows up to
/// 448 positions; the floor of 8 rows is what the decode scratch already holds (273 MB at
/// 131072 positions).
pub const PREFILL_ATT_SCRATCH_BYTES: usize = 128 << 20;

/// The prompt pass's GEMM kernel when `ASSAY_GEMM` is unset.
pub const DEFAULT_GEMM_KERNEL: GemmKernel = GemmKernel::Tiled;

/// Rows per prompt pass of the tiled kernel when `ASSAY_PREFILL_PASS` is unset (its tiles
/// are 128 tokens; `gemm.cu`'s passes stay [`PREFILL_ROWS`]). 1024 since engine21: session
/// 21's H200 A/B (synthetic Llama-3.1-8B, `harness bench --board prefill-h200`, assay arm)
/// measured Q8_0 p8192 21173 tok/s at 512 rows vs 25229 at 1024 (25514 at 2048), Q4_0 p2048
/// 27370 -> 32092 and p8192 21917 -> 25935 at 1024. The pass's row buffers grow with it
/// ([`CudaDecoder::prefill_buffer_bytes`]: the body's buffers x the pass's rows, plus the
/// staged x of `rows x k_max x 6` bytes; Llama-3.1-8B 0.31 GB at 1024 rows, where every
/// program buffer at 512 rows, the logits' included, held 0.43 GB; Gemma-3-12B 0.33 GB);
/// the attention scratch stays within [`PREFILL_ATT_SCRATCH_BYTES`] per shape.
pub const PREFILL_PASS_ROWS: usize = 1024;

/// Most rows `ASSAY_PREFILL_PASS` may ask for.
pub const PREFILL_PASS_MAX: usize = 4096;

/// The buffers of a prompt pass, swapped with the decoder's own while it runs.
struct PassBufs {
    /// The body's buffers at the pass's rows ([`fuse::body_buffers`]); `None` for the
    /// head's own (the final norm's output, the logits: the head runs on one row in
    /// `head_bufs`), so while the pass runs the decoder holds none of them (a body op
    /// that asked for one would fail, not write past a smaller buffer).
    bufs: Vec<Option<CudaSlice<f32>>>,
    tokens: CudaSlice<i32>,
    pos: CudaSlice<i32>,
    scratch: HashMap<(usize, usize), AttnScratch>,
    /// Rows per attention launch (what the scratch holds).
    att_rows: usize,
}

/// How prompt tokens are fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillMode {
    /// The row path: the batched matvec, the bits of feeding the tokens one by one.
    Rows,
    /// Tensor-core GEMMs for the formats that have them.
    Gemm,
}

/// The mode when `ASSAY_PREFILL` is unset: the GEMMs, since the H200 window of b1a5add
/// (kernel-check `gemm`, gates `prefill` and `chunking` in both modes, `argmax` / `graph` /
/// `batch` with the GEMM prompt pass all green; research/notes/prefill.md).
pub const DEFAULT_PREFILL: PrefillMode = PrefillMode::Gemm;

impl PrefillMode {
    /// `gemm` or `rows`.
    pub fn parse(s: &str) -> Option<PrefillMode> {
        match s {
            "gemm" => Some(PrefillMode::Gemm),
            "rows" => Some(PrefillMode::Rows),
            _ => None,
        }
    }

    /// The mode named by `ASSAY_PREFILL`, [`DEFAULT_PREFILL`] when unset.
    pub fn from_env() -> Result<PrefillMode, CudaError> {
        match std::env::var("ASSAY_PREFILL") {
            Err(_) => Ok(DEFAULT_PREFILL),
            Ok(v) => PrefillMode::parse(&v).ok_or_else(|| {
                shape_err(
                    "decoder",
                    format!("ASSAY_PREFILL={v:?}: expected gemm or rows"),
                )
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PrefillMode::Rows => "rows",
            PrefillMode::Gemm => "gemm",
        }
    }
}

/// A decoder's prompt-pass state.
pub(super) struct PrefillState {
    mode: PrefillMode,
    opts: GemmOpts,
    /// The tiled kernel's tile height (`ASSAY_GEMMT_TILE`), `None`: chosen per launch.
    tile_m: Option<usize>,
    /// The pass's attention on tensor cores where the head size has it
    /// (`ASSAY_PREFILL_ATTN`: `flash`, `flash2`, `flash3`, `flash4`, [`select::PrefillAttn`]; unset
    /// [`select::DEFAULT_PREFILL_ATTN`]) or the decode kernel (`split`: `None`).
    flash: Option<select::PrefillAttn>,
    /// Q4_0 / Q8_0 decoded inside the tiled GEMM's loop (`ASSAY_GEMMT_FUSED`, default 1)
    /// rather than into the scratch first (0; the same bits).
    fused: bool,
    /// The warpgroup-MMA GEMM on sm_90a (`ASSAY_GEMMT_WGMMA`: `0` off, `1` wherever the
    /// device allows, unset or `auto`: select::gemmt_wgmma); the same bits either way.
    wgmma: Option<bool>,
    /// Section 4's TMA kernel for the warpgroup-MMA launches it takes (`ASSAY_GEMMT_TM`: `0`
    /// off, `1` or unset or `auto`: wherever select::gemmt_tm allows); the same bits.
    tm: Option<bool>,
    kernel: GemmKernel,
    /// Rows per pass of the tiled kernel.
    tiled_rows: usize,
    /// The tiled kernel's decoded weights, made on first use; shared by the decoders of
    /// one upload ([`CudaDecoder::share`]: they queue on one stream, one at a time).
    decoded: Arc<Mutex<GemmtScratch>>,
    /// Set while [`CudaDecoder::prefill`] runs the body.
    active: bool,
    /// Staged activations, made on first use (rows of the widest matrix).
    x: Option<GemmX>,
    /// The pass's buffers, made on first use; while `swapped`, they hold the decoder's.
    pass: Option<PassBufs>,
    swapped: bool,
    /// flash4's partials (grown to the largest launch, kept; at most
    /// `select::ATT_PREFILL_SPLIT_SCRATCH_BYTES`).
    split: crate::cuda::ops::PrefillSplitScratch,
}

impl PrefillState {
    /// flash4's scratch (a borrow of this state alone, beside the decoder's buffers).
    pub(super) fn split_scratch(&mut self) -> &mut crate::cuda::ops::PrefillSplitScratch {
        &mut self.split
    }
}

/// `ASSAY_GEMM` (`v1` or `tiled`), [`DEFAULT_GEMM_KERNEL`] when unset.
fn kernel_from_env() -> Result<GemmKernel, CudaError> {
    match std::env::var("ASSAY_GEMM") {
        Err(_) => Ok(DEFAULT_GEMM_KERNEL),
        Ok(v) => GemmKernel::parse(&v)
            .ok_or_else(|| shape_err("decoder", format!("ASSAY_GEMM={v:?}: expected v1 or tiled"))),
    }
}

/// `ASSAY_PREFILL_ATTN`: `flash` (the tensor-core attention of the prompt pass, where the
/// head size has it), `flash2` / `flash3` / `flash4` (its packed variants, sm_90; elsewhere `flash`;
/// unset: [`select::DEFAULT_PREFILL_ATTN`]), or `split` (the decode kernel, row by row:
/// `None`).
fn flash_from_env() -> Result<Option<select::PrefillAttn>, CudaError> {
    match std::env::var("ASSAY_PREFILL_ATTN").as_deref() {
        Err(_) => Ok(Some(select::DEFAULT_PREFILL_ATTN)),
        Ok("split") => Ok(None),
        Ok(v) => select::PrefillAttn::parse(v).map(Some).ok_or_else(|| {
            shape_err(
                "decoder",
                format!(
                    "ASSAY_PREFILL_ATTN={v:?}: expected flash, flash2, flash3, flash4 or split"
                ),
            )
        }),
    }
}

/// `ASSAY_GEMMT_WGMMA`: `0` (the mma.sync kernel), `1` (the warpgroup MMA wherever the
/// device has it), unset or `auto` ([`select::gemmt_wgmma`]).
fn wgmma_from_env() -> Result<Option<bool>, CudaError> {
    match std::env::var("ASSAY_GEMMT_WGMMA").as_deref() {
        Err(_) | Ok("auto") => Ok(None),
        Ok("0") => Ok(Some(false)),
        Ok("1") => Ok(Some(true)),
        Ok(v) => Err(shape_err(
            "decoder",
            format!("ASSAY_GEMMT_WGMMA={v:?}: expected 0, 1 or auto"),
        )),
    }
}

/// `ASSAY_GEMMT_TM`: `0` (section 3's warpgroup-MMA kernel only), `1` or unset or `auto`
/// (section 4's TMA kernel wherever [`select::gemmt_tm`] allows).
fn tm_from_env() -> Result<Option<bool>, CudaError> {
    match std::env::var("ASSAY_GEMMT_TM").as_deref() {
        Err(_) | Ok("auto") => Ok(None),
        Ok("0") => Ok(Some(false)),
        Ok("1") => Ok(Some(true)),
        Ok(v) => Err(shape_err(
            "decoder",
            format!("ASSAY_GEMMT_TM={v:?}: expected 0, 1 or auto"),
        )),
    }
}

/// `ASSAY_PREFILL_PASS`: rows per tiled pass, a multiple of 64 up to [`PREFILL_PASS_MAX`].
fn pass_rows_from_env() -> Result<usize, CudaError> {
    match std::env::var("ASSAY_PREFILL_PASS") {
        Err(_) => Ok(PREFILL_PASS_ROWS),
        Ok(v) => parse_pass_rows(&v).ok_or_else(|| {
            shape_err(
                "decoder",
                format!(
                    "ASSAY_PREFILL_PASS={v:?}: expected a multiple of 64 in 64..={PREFILL_PASS_MAX}"
                ),
            )
        }),
    }
}

fn parse_pass_rows(v: &str) -> Option<usize> {
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|&r| (64..=PREFILL_PASS_MAX).contains(&r) && r % 64 == 0)
}

impl PrefillState {
    pub(super) fn from_env() -> Result<PrefillState, CudaError> {
        // The planted fault of the `prefill` gate's red run (harness CLI); `ASSAY_GEMM_LO`
        // sets the parts of x (`0`: one, rounded to 16 bits; `1`: two; unset: the kernel's
        // default, select::gemmt_x_parts for the tiled kernel), judged by the `prefill` gate.
        let lo = std::env::var("ASSAY_GEMM_LO").ok();
        let opts = GemmOpts {
            fault: std::env::var("ASSAY_PREFILL_PLANT_FAULT").is_ok_and(|v| v == "1"),
            x: XParts::parse(lo.as_deref()).ok_or_else(|| {
                shape_err(
                    "decoder",
                    format!("ASSAY_GEMM_LO={lo:?}: expected 0, 1 or auto"),
                )
            })?,
        };
        // `ASSAY_GEMMT_TILE` (64 or 128) fixes the tiled kernel's tile height (no bits
        // change; a speed knob), unset: select::gemmt_tile_m.
        let tile_m = match std::env::var("ASSAY_GEMMT_TILE") {
            Err(_) => None,
            Ok(v) => Some(
                v.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|m| select::GEMMT_TILES_M.contains(m))
                    .ok_or_else(|| {
                        shape_err(
                            "decoder",
                            format!(
                                "ASSAY_GEMMT_TILE={v:?}: expected one of {:?}",
                                select::GEMMT_TILES_M
                            ),
                        )
                    })?,
            ),
        };
        Ok(PrefillState {
            mode: PrefillMode::from_env()?,
            opts,
            tile_m,
            flash: flash_from_env()?,
            fused: std::env::var("ASSAY_GEMMT_FUSED").map_or(true, |v| v != "0"),
            wgmma: wgmma_from_env()?,
            tm: tm_from_env()?,
            kernel: kernel_from_env()?,
            tiled_rows: pass_rows_from_env()?,
            decoded: Arc::new(Mutex::new(GemmtScratch::new())),
            active: false,
            x: None,
            pass: None,
            swapped: false,
            split: crate::cuda::ops::PrefillSplitScratch::new(),
        })
    }
}

impl CudaDecoder {
    /// Choose how [`CudaDecoder::prefill`] feeds prompt tokens.
    pub fn set_prefill(&mut self, mode: PrefillMode) {
        self.prefill.mode = mode;
    }

    /// The prompt-pass mode.
    pub fn prefill_mode(&self) -> PrefillMode {
        self.prefill.mode
    }

    /// Choose the prompt pass's GEMM kernel (drops the pass buffers: their size depends on
    /// it).
    pub fn set_gemm_kernel(&mut self, kernel: GemmKernel) {
        if kernel != self.prefill.kernel && !self.prefill.swapped {
            self.prefill.kernel = kernel;
            self.prefill.pass = None;
            self.prefill.x = None;
        }
    }

    /// Share `from`'s prompt-pass settings and decoded-weight scratch (decoders of one
    /// upload of the weights, [`CudaDecoder::share`]).
    pub(super) fn share_prefill(&mut self, from: &CudaDecoder) {
        self.set_gemm_kernel(from.prefill.kernel);
        self.prefill.tiled_rows = from.prefill.tiled_rows;
        self.prefill.flash = from.prefill.flash;
        self.prefill.fused = from.prefill.fused;
        self.prefill.wgmma = from.prefill.wgmma;
        self.prefill.tile_m = from.prefill.tile_m;
        self.prefill.decoded = Arc::clone(&from.prefill.decoded);
    }

    /// The prompt pass's GEMM kernel.
    pub fn gemm_kernel(&self) -> GemmKernel {
        self.prefill.kernel
    }

    /// Rows per prompt pass in [`PrefillMode::Gemm`]: [`PREFILL_ROWS`] for `gemm.cu`, the
    /// tiled kernel's pass size ([`PREFILL_PASS_ROWS`] or `ASSAY_PREFILL_PASS`) otherwise.
    pub fn prefill_pass_rows(&self) -> usize {
        match self.prefill.kernel {
            GemmKernel::V1 => PREFILL_ROWS,
            GemmKernel::Tiled => self.prefill.tiled_rows,
        }
    }

    /// Whether the body's products of `format` run as GEMMs in the prompt pass here.
    fn gemm_format(&self, format: crate::quant::QuantFormat) -> bool {
        let cc = self.gpu.info().compute_capability;
        match self.prefill.kernel {
            GemmKernel::V1 => select::gemm_supported(format, cc),
            GemmKernel::Tiled => select::gemmt_supported(format, cc),
        }
    }

    /// Whether [`CudaDecoder::prefill`] in [`PrefillMode::Gemm`] runs any product on
    /// tensor cores here (a body matmul in a GEMM format, an sm_80+ device).
    pub fn prefill_uses_gemm(&self) -> bool {
        self.program.body.iter().any(|op| match op {
            arch::Op::MatMul { weight, .. } => matrix(&self.weights, *weight)
                .and_then(|i| w_ref(&self.mats, i))
                .is_ok_and(|m| self.gemm_format(m.format)),
            _ => false,
        })
    }

    /// Options of the GEMM path (the lo halves of x, the planted fault of the gate).
    pub fn set_prefill_opts(&mut self, opts: GemmOpts) {
        self.prefill.opts = opts;
    }

    /// The GEMM path's options.
    pub fn prefill_opts(&self) -> GemmOpts {
        self.prefill.opts
    }

    /// Parts of x the prompt pass multiplies for this model's first GEMM format (the tiled
    /// kernel: per format unless set; `gemm.cu`: 2 unless one is asked for); `None` when no
    /// body product runs as a GEMM.
    pub fn prefill_x_parts(&self) -> Option<u32> {
        let format = self.program.body.iter().find_map(|op| match op {
            arch::Op::MatMul { weight, .. } => matrix(&self.weights, *weight)
                .and_then(|i| w_ref(&self.mats, i))
                .ok()
                .map(|m| m.format)
                .filter(|&f| self.gemm_format(f)),
            _ => None,
        })?;
        Some(match self.prefill.kernel {
            GemmKernel::Tiled => self.gemmt_opts().parts_for(format),
            GemmKernel::V1 => 1 + u32::from(self.prefill.opts.lo()),
        })
    }

    /// The tiled kernel's tile height when fixed (`ASSAY_GEMMT_TILE`).
    pub fn prefill_tile_m(&self) -> Option<usize> {
        self.prefill.tile_m
    }

    /// Append PROMPT tokens and compute the logits of the last one: [`CudaDecoder::forward`]
    /// with the body's products on tensor cores when the mode is [`PrefillMode::Gemm`]
    /// and the device has them (sm_80+). Generated tokens must go through `forward`.
    ///
    /// The GEMM mode feeds passes of [`CudaDecoder::prefill_pass_rows`] rows (the tiled
    /// kernel: [`PREFILL_PASS_ROWS`] unless `ASSAY_PREFILL_PASS` says otherwise; `gemm.cu`:
    /// [`PREFILL_ROWS`]) through buffers of that many rows (made on the first call: the
    /// body's buffers x the pass's rows, plus the attention scratch of
    /// [`PREFILL_ATT_SCRATCH_BYTES`] at most per shape; kept for the next).
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<(), CudaError> {
        let cc = self.gpu.info().compute_capability;
        if self.prefill.mode == PrefillMode::Rows || cc.0 < 8 {
            return self.forward(tokens);
        }
        if self.prefill.pass.is_none() {
            self.prefill.pass = Some(self.pass_bufs()?);
        }
        self.swap_pass();
        self.prefill.active = true;
        let r = self.feed(tokens, self.prefill_pass_rows());
        self.prefill.active = false;
        self.swap_pass();
        r
    }

    /// Bytes of device memory the prompt pass's own buffers hold (0 before the first).
    pub fn prefill_buffer_bytes(&self) -> usize {
        self.prefill.pass.as_ref().map_or(0, |p| {
            let bufs: usize = p.bufs.iter().flatten().map(|b| b.len() * 4).sum();
            let att: usize = self
                .scratch
                .keys()
                .map(|&(h, d)| Self::att_row_bytes(h, d, self.capacity) * p.att_rows)
                .sum();
            let staging = self
                .prefill
                .x
                .as_ref()
                .map_or(0, |x| x.hi.len() * 6 + x.scale.len() * 4);
            let decoded = self.prefill.decoded.lock().map_or(0, |d| d.bytes());
            let split = self.prefill.split.bytes();
            bufs + att + 8 * self.prefill_pass_rows() + staging + decoded + split
        })
    }

    /// Scratch bytes of one attention row of `heads` heads of `dim` (see [`AttnScratch`]).
    fn att_row_bytes(heads: usize, dim: usize, capacity: usize) -> usize {
        let splits = capacity.div_ceil(ATT_SPLIT).max(1);
        heads * splits * (dim + 2) * 4 + heads * 4
    }

    /// Allocate the prompt pass's buffers.
    fn pass_bufs(&self) -> Result<PassBufs, CudaError> {
        let gpu = &*self.gpu;
        let rows = self.prefill_pass_rows();
        // The head's own buffers (its norm's output, the logits: at 1024 rows the logits
        // alone would be 525 MB for Llama-3.1-8B's vocabulary) are not the pass's.
        let body = fuse::body_buffers(&self.program);
        let bufs = self
            .program
            .buffers
            .iter()
            .zip(body)
            .map(|(b, used)| {
                if used {
                    gpu.zeros::<f32>(b.width * rows).map(Some)
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        let shapes: Vec<(usize, usize)> = self.scratch.keys().copied().collect();
        // `ASSAY_PREFILL_ATT_BYTES` lowers the budget (the gates' way to make a small
        // model's pass run its attention in launches of fewer rows).
        let budget = std::env::var("ASSAY_PREFILL_ATT_BYTES")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(PREFILL_ATT_SCRATCH_BYTES);
        let att_rows = shapes
            .iter()
            .map(|&(h, d)| {
                (budget / Self::att_row_bytes(h, d, self.capacity).max(1)).clamp(MAX_ROWS, rows)
            })
            .min()
            .unwrap_or(rows);
        let mut scratch = HashMap::new();
        for (h, d) in shapes {
            scratch.insert(
                (h, d),
                AttnScratch::new(gpu, att_rows, h, d, self.capacity)?,
            );
        }
        Ok(PassBufs {
            bufs,
            tokens: gpu.zeros(rows)?,
            pos: gpu.zeros(rows)?,
            scratch,
            att_rows,
        })
    }

    /// Exchange the decoder's row buffers with the prompt pass's.
    fn swap_pass(&mut self) {
        if let Some(p) = self.prefill.pass.as_mut() {
            std::mem::swap(&mut self.bufs, &mut p.bufs);
            std::mem::swap(&mut self.tokens, &mut p.tokens);
            std::mem::swap(&mut self.pos, &mut p.pos);
            std::mem::swap(&mut self.scratch, &mut p.scratch);
            self.prefill.swapped = !self.prefill.swapped;
        }
    }

    /// Most rows one attention launch takes with the buffers in place.
    pub(super) fn attention_rows(&self) -> usize {
        match (&self.prefill.pass, self.prefill.swapped) {
            (Some(p), true) => p.att_rows,
            _ => MAX_ROWS,
        }
    }

    /// Whether the body now runs the GEMM path.
    pub(super) fn gemm_active(&self) -> bool {
        self.prefill.active
    }

    /// The prompt pass's tensor-core attention variant for heads of `head_dim`, while the
    /// body runs the GEMM path and it is on (`ASSAY_PREFILL_ATTN`); a packed variant the
    /// device lacks falls back to `flash`; `None`: the decode kernel.
    pub(super) fn prefill_attention(&self, head_dim: usize) -> Option<select::PrefillAttn> {
        if !self.prefill.active {
            return None;
        }
        let v = self.prefill.flash?;
        let cc = self.gpu.info().compute_capability;
        if select::attention_prefill_entry_for(v, head_dim, cc).is_some() {
            Some(v)
        } else {
            select::attention_prefill_entry(head_dim, cc).map(|_| select::PrefillAttn::Flash)
        }
    }

    /// Whether Q4_0 / Q8_0 products decode inside the tiled GEMM (`ASSAY_GEMMT_FUSED`).
    pub fn prefill_fused_decode(&self) -> bool {
        self.prefill.fused
    }

    /// The warpgroup-MMA choice asked for (`ASSAY_GEMMT_WGMMA`): `None` is the default
    /// (select::gemmt_wgmma).
    pub fn prefill_wgmma(&self) -> Option<bool> {
        self.prefill.wgmma
    }

    /// Section 4's TMA kernel choice asked for (`ASSAY_GEMMT_TM`): `None` is the default
    /// (select::gemmt_tm).
    pub fn prefill_tm(&self) -> Option<bool> {
        self.prefill.tm
    }

    /// Whether prompt passes take the tensor-core attention (`ASSAY_PREFILL_ATTN`).
    pub fn prefill_flash(&self) -> bool {
        self.prefill.flash.is_some()
    }

    /// The prompt pass's tensor-core attention variant asked for (`ASSAY_PREFILL_ATTN`;
    /// `None`: the decode kernel).
    pub fn prefill_attn_variant(&self) -> Option<select::PrefillAttn> {
        self.prefill.flash
    }

    /// Choose the prompt pass's attention: tensor cores (where the head size has it) or
    /// the decode kernel.
    pub fn set_prefill_flash(&mut self, on: bool) {
        self.prefill.flash = on.then_some(select::DEFAULT_PREFILL_ATTN);
    }

    /// Choose the prompt pass's attention variant (`None`: the decode kernel).
    pub fn set_prefill_attn_variant(&mut self, v: Option<select::PrefillAttn>) {
        self.prefill.flash = v;
    }

    /// The tiled kernel's options: x in the parts asked for, else the format's default
    /// (one part) unless a BF16 matrix holds a value past f16's range (then two: BF16 is
    /// read as bf16, not converted to f16).
    fn gemmt_opts(&self) -> GemmtOpts {
        let wide = self
            .mats
            .iter()
            .any(|m| m.format == crate::quant::QuantFormat::BF16 && !m.fits_f16);
        GemmtOpts {
            parts: self.prefill.opts.x.count().or(wide.then_some(2)),
            tile_m: self.prefill.tile_m,
            fault: self.prefill.opts.fault,
            scratch_decode: !self.prefill.fused,
            wgmma: self.prefill.wgmma,
            wgmma_tile_n: None,
            tm: self.prefill.tm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_name() {
        for m in [PrefillMode::Rows, PrefillMode::Gemm] {
            assert_eq!(PrefillMode::parse(m.name()), Some(m));
        }
        assert_eq!(PrefillMode::parse("GEMM"), None);
        assert_eq!(PrefillMode::parse(""), None);
    }

    #[test]
    fn default_pass_is_1024_rows() {
        // Session 21's A/B (prefill-h200, H200): 1024 rows beat 512 by 16-19% at 2048 and
        // 8192 prompt tokens; the default must be a size `ASSAY_PREFILL_PASS` accepts.
        assert_eq!(PREFILL_PASS_ROWS, 1024);
        assert_eq!(
            parse_pass_rows(&PREFILL_PASS_ROWS.to_string()),
            Some(PREFILL_PASS_ROWS)
        );
        const { assert!(PREFILL_PASS_ROWS <= PREFILL_PASS_MAX && PREFILL_PASS_ROWS % 64 == 0) };
    }

    #[test]
    fn pass_rows_parse() {
        assert_eq!(parse_pass_rows("512"), Some(512));
        assert_eq!(parse_pass_rows("1024"), Some(1024));
        assert_eq!(parse_pass_rows(" 64 "), Some(64));
        assert_eq!(parse_pass_rows("4096"), Some(4096));
        assert_eq!(parse_pass_rows("100"), None);
        assert_eq!(parse_pass_rows("0"), None);
        assert_eq!(parse_pass_rows("8192"), None);
        assert_eq!(parse_pass_rows("x"), None);
    }
}
