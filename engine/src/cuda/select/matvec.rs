//! Matrix-vector product kernels (one-token body, several tokens per pass, gate + up, k + v pairs).

use super::*;

/// Matrix-vector product kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatvecKernel {
    /// `MV_WARPS` warps per block, each owning `rows_per_warp` rows (1, 2 or 4); x staged
    /// in shared memory transposed by chunk (tiles of at most [`mv_tile_max`] chunks),
    /// weights in the device layout of `kernels/common/formats.cuh`, f32 activations and
    /// accumulation, up to [`MV_LAUNCH_MAX_TOK`] token vectors per launch, taken
    /// `tokens_per_pass` (1 or [`MV_BATCH_TOK`]) at a time: each chunk of W is loaded once
    /// per group and dotted with each of its tokens. A row's arithmetic depends neither on
    /// `rows_per_warp` nor on `tokens_per_pass`.
    MultiRow {
        format: QuantFormat,
        rows_per_warp: u32,
        tokens_per_pass: u32,
    },
    /// [`MatvecKernel::MultiRow`] over a gate and an up matrix of the same format and
    /// shape at once (`rows_per_warp` rows of each, 1 or 2), writing act(gate) * up.
    GluMultiRow {
        format: QuantFormat,
        rows_per_warp: u32,
        tokens_per_pass: u32,
    },
    /// Two matrices of one format and shape on the same x in one launch (one token per
    /// pass): the first blocks compute the first matrix, the rest the second, each block
    /// as in its own [`MatvecKernel::MultiRow`] launch (the same bits).
    Pair {
        format: QuantFormat,
        rows_per_warp: u32,
    },
    /// The streamed one-token kernel (`matvec_<fmt>_wr_r<R>_d<D>`, gate + up:
    /// `matvec_<fmt>_glu_wr_r<R>_d<D>`): [`MatvecKernel::MultiRow`]'s arithmetic per row (the
    /// same bits), with each warp's weights streamed into shared memory by cp.async through
    /// a ring of `depth` slots per thread, row groups of `rows_per_warp` rows (of both
    /// matrices for `glu`) dealt round-robin to the warps of a persistent grid
    /// ([`MatvecKernel::blocks`]), x staged once per block ([`MV_WR_XS`] floats per chunk).
    /// One token, k a multiple of [`MV_WR_K_STEP`], formats of [`MV_WR_FORMATS`]
    /// ([`choose_matvec`]).
    Wr {
        format: QuantFormat,
        glu: bool,
        rows_per_warp: u32,
        depth: u32,
    },
    /// The streamed one-token kernel over the rows of `segs` matrices of one format and k on
    /// the same x (`matvec_<fmt>_seg<S>_wr_r<R>_d<D>`: q, k and v of an attention block in
    /// one launch, each matrix with its own output and optional bias): the row groups of the
    /// grid are the concatenation of each matrix's groups of `rows_per_warp` rows (a group
    /// never holds rows of two matrices), each streamed and stored as in
    /// [`MatvecKernel::Wr`], so every row gets the bits of its matrix's own launch
    /// ([`choose_matvec_segs`]).
    WrSegs {
        format: QuantFormat,
        segs: u32,
        rows_per_warp: u32,
        depth: u32,
    },
    /// The multi-token streamed kernel (`matvec_<fmt>_wrt<NT>_r<R>_d<D>`, gate + up:
    /// `matvec_<fmt>_glu_wrt<NT>_r<R>_d<D>`, NT = `tokens`): [`MatvecKernel::Wr`]'s stream
    /// (each weight byte read once per launch) for up to `tokens` token vectors, each
    /// (token, row) with the one-token bits; x read from global memory (not staged), the
    /// shared memory the ring alone ([`mv_wrt_shared_bytes`]). Q4_0 on compute capability
    /// 9.0, only when asked (`ASSAY_MV_WRT=1`; [`choose_matvec_wrt`]). NOT yet run on a GPU.
    WrTok {
        format: QuantFormat,
        glu: bool,
        tokens: u32,
        rows_per_warp: u32,
        depth: u32,
    },
}

/// Most x chunks a matvec block stages per token group of `tokens_per_pass` tokens:
/// `MV_TILE / tokens_per_pass` rounded down to a multiple of 32 (a lane's chunks stay
/// l, l+32, ... across tiles), at least 32 (matvec.cu's `mv_tile_max`).
pub const fn mv_tile_max(tokens_per_pass: usize) -> usize {
    let t = MV_TILE / tokens_per_pass;
    if t >= 32 { t / 32 * 32 } else { 32 }
}

/// Floats per staged x chunk of the one-token matvec body (matvec.cu's `MV_XCS`: the
/// chunk's 32 values at stride 1 and one pad word, so that 32 lanes reading 32 chunks hit
/// 32 banks and every x read is a shared load at an immediate offset).
pub const MV_XCS: usize = 33;

/// Dynamic shared memory of a matvec launch taking `tokens_per_pass` tokens at a time,
/// for rows of `k` values. One token per pass: a tile of k/32 chunks (at most the
/// maximum), each chunk [`MV_XCS`] floats; several: each token's x tile transposed with
/// one pad column, always the maximum tile (matvec.cu's batched body stages x with the full
/// tile's stride, a compile-time constant, whatever k).
pub const fn mv_shared_bytes(tokens_per_pass: usize, k: usize) -> usize {
    let max = mv_tile_max(tokens_per_pass);
    if tokens_per_pass == 1 {
        let tile = if k / 32 < max { k / 32 } else { max };
        tile * MV_XCS * 4
    } else {
        tokens_per_pass * 32 * (max + 1) * 4
    }
}

/// Formats of the streamed one-token kernel ([`MatvecKernel::Wr`]): the planar layouts with
/// one f16 scale per block of 32 values, and BF16 (rows of 64-byte chunks, no scales; its
/// own rings, [`mv_wr_rd`]).
pub const MV_WR_FORMATS: [QuantFormat; 3] =
    [QuantFormat::Q4_0, QuantFormat::Q8_0, QuantFormat::BF16];

/// The formats of [`MV_WR_FORMATS`] that take the streamed kernel by default (`wr` = `None`).
/// Q8_0 only when forced (`ASSAY_MV_WR=1`): session 14 (research/notes/s14), 8B Q8_0 at 512
/// context, graphed: streamed 209.5 / 211.6 (without PDL) tok/s vs 269.5 / 270.0 not streamed.
/// BF16 only when forced: not yet timed on a GPU (session 19 built it; its bits are checked
/// by kernel-check against `matvec_bf16_r<R>`).
pub const MV_WR_DEFAULT_FORMATS: [QuantFormat; 1] = [QuantFormat::Q4_0];

/// Bytes per 32-value chunk of a format of [`MV_WR_FORMATS`] that the streamed kernel copies
/// into its quant ring (formats.cuh's `F::QBYTES`: the quants of a block; BF16's 32 values).
fn wr_quant_bytes(format: QuantFormat) -> Option<usize> {
    match format {
        QuantFormat::Q4_0 => Some(16),
        QuantFormat::Q8_0 => Some(32),
        QuantFormat::BF16 => Some(64),
        _ => None,
    }
}

/// Bytes per chunk of the streamed kernel's scale ring (formats.cuh's `F::WR_SCALE`: the
/// 4-byte word holding the block's f16 scale; BF16 has none).
fn wr_scale_bytes(format: QuantFormat) -> usize {
    match format {
        QuantFormat::BF16 => 0,
        _ => 4,
    }
}

/// (rows per warp, ring depth) of the streamed one-token entry points of `format`, deepest
/// ring first (gate + up for `glu`; the segmented entry points use the plain ones): BF16's
/// 64-byte chunks take [`MV_WR_HALF_RD`] / [`MV_WR_HALF_GLU_RD`], the planar formats
/// [`MV_WR_RD`] / [`MV_WR_GLU_RD`].
pub fn mv_wr_rd(format: QuantFormat, glu: bool) -> &'static [(u32, u32)] {
    match (format, glu) {
        (QuantFormat::BF16, false) => &MV_WR_HALF_RD,
        (QuantFormat::BF16, true) => &MV_WR_HALF_GLU_RD,
        (_, false) => &MV_WR_RD,
        (_, true) => &MV_WR_GLU_RD,
    }
}

/// Values of a row one step of the streamed kernel covers (32 lanes x 32 values): k must
/// be a multiple.
pub const MV_WR_K_STEP: usize = 1024;

/// Floats per staged x chunk of the streamed kernel (matvec.cu's `MV_WR_XS`: the chunk's 32
/// values and 4 pad words, so that every chunk is 16-byte aligned and 8 lanes reading 16
/// bytes of 8 consecutive chunks hit 8 different bank groups).
pub const MV_WR_XS: usize = 36;

/// Shared memory per block besides the dynamic: the system's reservation (1 KiB on sm_80 and
/// later) and the streamed kernel's static array (the norm's `MV_WARPS` doubles).
const MV_WR_BLOCK_EXTRA: usize = 1024 + 8 * MV_WARPS as usize;

/// Shared memory per SM of the devices the streamed kernel runs on: compute capability 9.0
/// (H100 / H200, 228 KiB; where it was measured); `None` elsewhere.
fn wr_shared_per_sm(cc: (i32, i32)) -> Option<usize> {
    (cc == (9, 0)).then_some(228 * 1024)
}

/// The most dynamic shared memory of a streamed launch on a device of compute capability
/// `cc` ([`MV_WR_BLOCKS_PER_SM`] blocks per SM; the limit set on the entry points when the
/// module loads), or `None` where the streamed kernel does not run.
pub fn mv_wr_max_shared_bytes(cc: (i32, i32)) -> Option<usize> {
    wr_shared_per_sm(cc).map(|s| s / MV_WR_BLOCKS_PER_SM - MV_WR_BLOCK_EXTRA)
}

/// Dynamic shared memory of a streamed launch for rows of `k` values in `format` (one of
/// [`MV_WR_FORMATS`]; matvec.cu's `matvec_wr_body`): x, k/32 chunks of [`MV_WR_XS`] floats;
/// then per warp a ring of `depth` slots of `units` rows (`rows_per_warp`, twice for gate +
/// up) x 32 lanes x (the chunk's quant bytes + the 4-byte word of its scale, none for BF16).
pub fn mv_wr_shared_bytes(
    format: QuantFormat,
    glu: bool,
    rows_per_warp: u32,
    depth: u32,
    k: usize,
) -> usize {
    k / 32 * MV_WR_XS * 4 + mv_wrt_shared_bytes(format, glu, rows_per_warp, depth)
}

/// Dynamic shared memory of a multi-token streamed launch ([`MatvecKernel::WrTok`]; matvec.cu's
/// `matvec_wr_body` with NT > 1): the ring alone (x is read from global memory; the ring of
/// [`mv_wr_shared_bytes`]), per warp
/// `depth` slots of `units` rows x 32 lanes x (the chunk's quant bytes + its scale's:
/// [`wr_scale_bytes`]).
pub fn mv_wrt_shared_bytes(
    format: QuantFormat,
    glu: bool,
    rows_per_warp: u32,
    depth: u32,
) -> usize {
    let units = rows_per_warp as usize * if glu { 2 } else { 1 };
    let chunk = wr_quant_bytes(format).unwrap_or(0) + wr_scale_bytes(format);
    MV_WARPS as usize * depth as usize * units * 32 * chunk
}

/// Formats of the multi-token streamed kernel ([`MatvecKernel::WrTok`]).
pub const MV_WRT_FORMATS: [QuantFormat; 1] = [QuantFormat::Q4_0];

/// Whether `name` is an entry point of the streamed kernel, one token or several (its shared
/// memory limit is set apart: [`mv_wr_max_shared_bytes`]).
pub fn is_matvec_wr_entry(name: &str) -> bool {
    name.starts_with("matvec_") && (name.contains("_wr_r") || name.contains("_wrt"))
}

/// Whether a kernel taking `tokens_per_pass` token vectors per pass runs the batched body
/// (the `_tb` entry points, `tok=` in the name, [`MV_BATCH_ROWS_PER_WARP`] /
/// [`MV_BATCH_GLU_ROWS_PER_WARP`] rows per warp) rather than the one-token body.
const fn batched_body(tokens_per_pass: u32) -> bool {
    tokens_per_pass > 1
}

impl MatvecKernel {
    /// The entry point of this choice. (The Q6_K output head, 4 rows per warp, is the
    /// plain `matvec_q6_k_r4`: with the one-token body's load rounds it holds 128
    /// registers, 2 blocks per SM, and the H200 decoded the 8B Q4_0 at 296.9 tok/s with it
    /// against 288.0 with the former 4-blocks-per-SM compile `_o4`, which spilled 204
    /// bytes per thread under that body; research/notes/decode-roofline.md, session 5.)
    pub fn entry(&self) -> String {
        let tb = |t: &u32| if batched_body(*t) { "_tb" } else { "" };
        match self {
            MatvecKernel::Wr {
                format,
                glu,
                rows_per_warp,
                depth,
            } => format!(
                "matvec_{}{}_wr_r{rows_per_warp}_d{depth}",
                format_suffix(*format),
                if *glu { "_glu" } else { "" }
            ),
            MatvecKernel::WrSegs {
                format,
                segs,
                rows_per_warp,
                depth,
            } => format!(
                "matvec_{}_seg{segs}_wr_r{rows_per_warp}_d{depth}",
                format_suffix(*format)
            ),
            MatvecKernel::WrTok {
                format,
                glu,
                tokens,
                rows_per_warp,
                depth,
            } => format!(
                "matvec_{}{}_wrt{tokens}_r{rows_per_warp}_d{depth}",
                format_suffix(*format),
                if *glu { "_glu" } else { "" }
            ),
            MatvecKernel::MultiRow {
                format,
                rows_per_warp,
                tokens_per_pass,
            } => format!(
                "matvec_{}{}_r{rows_per_warp}",
                format_suffix(*format),
                tb(tokens_per_pass)
            ),
            MatvecKernel::GluMultiRow {
                format,
                rows_per_warp,
                tokens_per_pass,
            } => format!(
                "matvec_{}_glu{}_r{rows_per_warp}",
                format_suffix(*format),
                tb(tokens_per_pass)
            ),
            MatvecKernel::Pair {
                format,
                rows_per_warp,
            } => format!("matvec_{}_pair_r{rows_per_warp}", format_suffix(*format)),
        }
    }

    /// Rows one block computes.
    pub fn rows_per_block(&self) -> usize {
        match self {
            MatvecKernel::MultiRow { rows_per_warp, .. }
            | MatvecKernel::GluMultiRow { rows_per_warp, .. }
            | MatvecKernel::Pair { rows_per_warp, .. }
            | MatvecKernel::Wr { rows_per_warp, .. }
            | MatvecKernel::WrSegs { rows_per_warp, .. }
            | MatvecKernel::WrTok { rows_per_warp, .. } => (*rows_per_warp * MV_WARPS) as usize,
        }
    }

    /// Blocks of a launch over `rows` rows on `dev`: one per [`MatvecKernel::rows_per_block`]
    /// rows, at most [`MV_WR_BLOCKS_PER_SM`] per SM for the persistent streamed kernel (its
    /// warps then walk the row groups round-robin; the grid changes no bit). For
    /// [`MatvecKernel::WrSegs`], `rows` is [`mv_seg_rows`] of the matrices' rows.
    pub fn blocks(&self, rows: usize, dev: &DeviceFacts) -> usize {
        let need = rows.div_ceil(self.rows_per_block());
        match self {
            MatvecKernel::Wr { .. } | MatvecKernel::WrSegs { .. } | MatvecKernel::WrTok { .. } => {
                need.min(dev.sm_count as usize * MV_WR_BLOCKS_PER_SM)
            }
            _ => need,
        }
    }

    /// Token vectors served per pass over the weights.
    pub fn tokens_per_pass(&self) -> usize {
        match self {
            MatvecKernel::MultiRow {
                tokens_per_pass, ..
            }
            | MatvecKernel::GluMultiRow {
                tokens_per_pass, ..
            } => *tokens_per_pass as usize,
            MatvecKernel::WrTok { tokens, .. } => *tokens as usize,
            MatvecKernel::Pair { .. } | MatvecKernel::Wr { .. } | MatvecKernel::WrSegs { .. } => 1,
        }
    }

    /// Dynamic shared memory of a launch of this kernel for rows of `k` values.
    pub fn shared_bytes(&self, k: usize) -> usize {
        match *self {
            MatvecKernel::Wr {
                format,
                glu,
                rows_per_warp,
                depth,
            } => mv_wr_shared_bytes(format, glu, rows_per_warp, depth, k),
            MatvecKernel::WrSegs {
                format,
                rows_per_warp,
                depth,
                ..
            } => mv_wr_shared_bytes(format, false, rows_per_warp, depth, k),
            MatvecKernel::WrTok {
                format,
                glu,
                rows_per_warp,
                depth,
                ..
            } => mv_wrt_shared_bytes(format, glu, rows_per_warp, depth),
            _ => mv_shared_bytes(self.tokens_per_pass(), k),
        }
    }
}

/// The most dynamic shared memory a matvec launch uses (set as the functions' limit).
pub const MV_MAX_SHARED_BYTES: usize = {
    let a = mv_shared_bytes(1, usize::MAX);
    let b = mv_shared_bytes(MV_BATCH_TOK, usize::MAX);
    if a > b { a } else { b }
};

impl std::fmt::Display for MatvecKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // One token per pass keeps the name receipts have carried since issue 7.
        let tok = |t: &u32| {
            if batched_body(*t) {
                format!(",tok={t}")
            } else {
                String::new()
            }
        };
        match self {
            MatvecKernel::MultiRow {
                format,
                rows_per_warp,
                tokens_per_pass,
            } => write!(
                f,
                "matvec_{}/multi-row(r={rows_per_warp},warps={MV_WARPS}{})",
                format_suffix(*format),
                tok(tokens_per_pass)
            ),
            MatvecKernel::GluMultiRow {
                format,
                rows_per_warp,
                tokens_per_pass,
            } => write!(
                f,
                "matvec_{}/glu-multi-row(r={rows_per_warp},warps={MV_WARPS}{})",
                format_suffix(*format),
                tok(tokens_per_pass)
            ),
            MatvecKernel::Pair {
                format,
                rows_per_warp,
            } => write!(
                f,
                "matvec_{}/pair-multi-row(r={rows_per_warp},warps={MV_WARPS})",
                format_suffix(*format)
            ),
            MatvecKernel::Wr {
                format,
                glu,
                rows_per_warp,
                depth,
            } => write!(
                f,
                "matvec_{}/{}wr(r={rows_per_warp},d={depth},warps={MV_WARPS})",
                format_suffix(*format),
                if *glu { "glu-" } else { "" }
            ),
            MatvecKernel::WrSegs {
                format,
                segs,
                rows_per_warp,
                depth,
            } => write!(
                f,
                "matvec_{}/seg{segs}-wr(r={rows_per_warp},d={depth},warps={MV_WARPS})",
                format_suffix(*format)
            ),
            MatvecKernel::WrTok {
                format,
                glu,
                tokens,
                rows_per_warp,
                depth,
            } => write!(
                f,
                "matvec_{}/{}wr(r={rows_per_warp},d={depth},warps={MV_WARPS},tok={tokens})",
                format_suffix(*format),
                if *glu { "glu-" } else { "" }
            ),
        }
    }
}

/// Rows per warp for a matrix of `rows` rows: the most (4, 2, 1) that still gives at
/// least 1.5 blocks per SM, so that small matrices keep every SM busy while large ones
/// share each staged x among more rows (x staging costs ~0.9/R of a Q4_0 row's bytes).
pub fn matvec_rows_per_warp(rows: usize, sm_count: u32) -> u32 {
    let want = (sm_count.max(1) as usize * 3).div_ceil(2);
    for r in [4u32, 2] {
        if rows.div_ceil(r as usize * MV_WARPS as usize) >= want {
            return r;
        }
    }
    1
}

/// The most rows per warp of the one-token matvec for `format`: 2 for the plain float
/// formats (F32, F16, BF16), whose loaded chunk is 32 floats, so that 4 rows' chunks do not
/// fit the registers (NVRTC 13.0.88, sm_90a: `matvec_bf16_r4` and `_glu_r2` at 64 registers
/// with 24-40 bytes of spills); 4 otherwise. Measured on the H200 (session 8, window 1,
/// `research/notes/s8/w1/`, synthetic Llama-3.1-8B BF16, 512-token prompt, graphed, arms
/// alternated): 123.3 tok/s with 4 rows, 153.6 with this cap.
pub fn one_token_rows_cap(format: QuantFormat) -> u32 {
    match format {
        QuantFormat::F32 | QuantFormat::F16 | QuantFormat::BF16 => 2,
        _ => 4,
    }
}

/// Tokens per weight pass for `ntok` token vectors: 1 for a lone token (the decode step,
/// the fewest registers), [`MV_BATCH_TOK`] otherwise (one pass over W per group).
pub fn matvec_tokens_per_pass(ntok: usize) -> u32 {
    if ntok <= 1 { 1 } else { MV_BATCH_TOK as u32 }
}

/// Choose the matvec kernel for a `rows x k` weight in `format` applied to `ntok` vectors
/// (the epilogues without gate + up: bias, residual, a folded RMSNorm, none of which
/// changes the choice). One token takes the streamed kernel where [`choose_matvec_wr`]
/// does (`wr`: its override, `ASSAY_MV_WR`). Several tokens take the batched entry points
/// (2 rows per warp: each staged x value read from shared memory serves two rows'
/// multiply-adds; gate/up: 1 row of each).
pub fn choose_matvec(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
    wr: Option<bool>,
) -> Result<MatvecKernel, CudaError> {
    choose_matvec_tok(format, rows, k, ntok, dev, wr, false, false)
}

/// [`choose_matvec`] (`glu`: [`choose_matvec_glu`]), with `wrt` (`ASSAY_MV_WRT=1`): 2 or
/// more token vectors take the multi-token streamed kernel (plain or gate + up) where
/// [`choose_matvec_wrt`] has one (off by default: never run on a GPU yet).
#[allow(clippy::too_many_arguments)]
pub fn choose_matvec_tok(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
    wr: Option<bool>,
    wrt: bool,
    glu: bool,
) -> Result<MatvecKernel, CudaError> {
    // Gate + up: each warp reads two matrices (the one-token rule for `2 * rows` rows, at
    // most half the cap).
    let (batch_rows_per_warp, one_token_rows, cap) = if glu {
        let cap = one_token_rows_cap(format) / 2;
        (MV_BATCH_GLU_ROWS_PER_WARP[0], 2 * rows, cap)
    } else {
        let cap = one_token_rows_cap(format);
        (MV_BATCH_ROWS_PER_WARP[0], rows, cap)
    };
    let (rows_per_warp, tokens_per_pass) =
        matvec_grouping(format, rows, k, ntok, batch_rows_per_warp, || {
            matvec_rows_per_warp(one_token_rows, dev.sm_count).min(cap)
        })?;
    if let Some(kernel) = choose_matvec_wrt(format, k, ntok, glu, dev, wrt) {
        return Ok(kernel);
    }
    let multi_row = if glu {
        MatvecKernel::GluMultiRow {
            format,
            rows_per_warp,
            tokens_per_pass,
        }
    } else {
        MatvecKernel::MultiRow {
            format,
            rows_per_warp,
            tokens_per_pass,
        }
    };
    Ok(choose_matvec_wr(format, rows, k, ntok, glu, dev, wr).unwrap_or(multi_row))
}

/// The multi-token streamed kernel ([`MatvecKernel::WrTok`]) for a product of a weight of
/// `k` columns in `format` (gate + up for `glu`) on `ntok` vectors, on a shape that
/// [`check_matvec`] accepted, or `None`. Only when `wrt` asks (`ASSAY_MV_WRT=1`), and where:
/// 2 or more tokens, at most the most of [`MV_WRT_TRD`] ([`MV_WRT_GLU_TRD`]), k a multiple
/// of [`MV_WR_K_STEP`], a format of [`MV_WRT_FORMATS`], a device that runs the streamed
/// kernel ([`mv_wr_max_shared_bytes`]: compute capability 9.0) and a ring that fits. It takes
/// the entry with the fewest tokens that holds `ntok` (fewer accumulators).
pub fn choose_matvec_wrt(
    format: QuantFormat,
    k: usize,
    ntok: usize,
    glu: bool,
    dev: &DeviceFacts,
    wrt: bool,
) -> Option<MatvecKernel> {
    let max = mv_wr_max_shared_bytes(dev.compute_capability)?;
    if !wrt || ntok < 2 || k % MV_WR_K_STEP != 0 || !MV_WRT_FORMATS.contains(&format) {
        return None;
    }
    let configs: &[(u32, u32, u32)] = if glu { &MV_WRT_GLU_TRD } else { &MV_WRT_TRD };
    configs
        .iter()
        .filter(|&&(tokens, _, _)| ntok <= tokens as usize)
        .map(|&(tokens, rows_per_warp, depth)| MatvecKernel::WrTok {
            format,
            glu,
            tokens,
            rows_per_warp,
            depth,
        })
        .find(|c| c.shared_bytes(k) <= max)
}

/// The streamed one-token kernel ([`MatvecKernel::Wr`]) for a product of a `rows x k`
/// weight in `format` (two of them for `glu`, gate + up) on `ntok` vectors, on a shape that
/// [`check_matvec`] accepted, or `None` for today's entry points. Its requirements: one
/// token, k a multiple of [`MV_WR_K_STEP`], a format of [`MV_WR_FORMATS`], a device that
/// runs it ([`mv_wr_max_shared_bytes`]) and a ring that fits: the first of the format's
/// [`mv_wr_rd`] whose shared memory leaves room for
/// [`MV_WR_BLOCKS_PER_SM`] blocks per SM. Where they hold, `wr` decides: `Some(false)`
/// never, `Some(true)` always, `None` (the default) for a format of
/// [`MV_WR_DEFAULT_FORMATS`] when the launch has at least 3/4 of a block per SM (`rows / (rows per warp x MV_WARPS)` blocks): measured on the H200 (132 SMs,
/// research/notes/matvec/), Llama-3.1-8B's gate + up (1792 blocks), down and q / o (128
/// blocks each) gain (30.9 -> 25.7, 20.9 -> 14.4, 7.1 -> 6.1 us) while k (32 blocks: most
/// SMs idle) loses (3.3 -> 5.1 us).
fn choose_matvec_wr(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    glu: bool,
    dev: &DeviceFacts,
    wr: Option<bool>,
) -> Option<MatvecKernel> {
    let max = mv_wr_max_shared_bytes(dev.compute_capability)?;
    if wr == Some(false) || ntok != 1 || k % MV_WR_K_STEP != 0 || !MV_WR_FORMATS.contains(&format) {
        return None;
    }
    let kernel = mv_wr_rd(format, glu)
        .iter()
        .map(|&(rows_per_warp, depth)| MatvecKernel::Wr {
            format,
            glu,
            rows_per_warp,
            depth,
        })
        .find(|c| c.shared_bytes(k) <= max)?;
    let blocks = rows.div_ceil(kernel.rows_per_block());
    let by_default =
        MV_WR_DEFAULT_FORMATS.contains(&format) && 4 * blocks >= 3 * dev.sm_count as usize;
    (wr == Some(true) || by_default).then_some(kernel)
}

/// The rows of the group space of a segmented streamed launch ([`MatvecKernel::WrSegs`]) over
/// matrices of `rows` rows each: each matrix's rows rounded up to a multiple of
/// `rows_per_warp` (a row group never holds rows of two matrices), added.
pub fn mv_seg_rows(rows_per_warp: u32, rows: &[usize]) -> usize {
    let r = rows_per_warp.max(1) as usize;
    rows.iter().map(|n| n.div_ceil(r) * r).sum()
}

/// Choose the segmented streamed kernel ([`MatvecKernel::WrSegs`]) for matrices of `rows`
/// rows each (q, k and v), all `k` values wide in `format`, on the same `ntok` vectors, or
/// `None` for their own launches (the same bits either way). Every matrix passes the
/// shape checks of [`choose_matvec`] first (errors). Requirements: [`MV_WR_SEGS`] matrices
/// of at least one row, one token, k a multiple of [`MV_WR_K_STEP`], a format of
/// [`MV_WR_FORMATS`], a device that runs the streamed kernel ([`mv_wr_max_shared_bytes`]:
/// compute capability 9.0), a ring of [`mv_wr_rd`] that fits beside x (the plain streamed
/// kernel's rule), and a group space that the kernel's 32-bit row indices hold. Where they
/// hold, `qkv` (`ASSAY_MV_QKV`) decides: `Some(false)` never, `Some(true)` always, `None`
/// (the default) for a format of [`MV_WR_DEFAULT_FORMATS`] unless `wr` (`ASSAY_MV_WR`) is
/// `Some(false)`, when the launch has at least 3/4 of a block per SM (the plain streamed
/// kernel's occupancy rule, on the segments' row groups together: Llama-3.1-8B's
/// 4096 + 1024 + 1024 rows make 192 blocks of 32 rows on the H200's 132 SMs).
pub fn choose_matvec_segs(
    format: QuantFormat,
    rows: &[usize],
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
    qkv: Option<bool>,
    wr: Option<bool>,
) -> Result<Option<MatvecKernel>, CudaError> {
    for &r in rows {
        check_matvec(format, r, k, ntok)?;
    }
    let Some(max) = mv_wr_max_shared_bytes(dev.compute_capability) else {
        return Ok(None);
    };
    if qkv == Some(false)
        || rows.len() != MV_WR_SEGS
        || ntok != 1
        || k % MV_WR_K_STEP != 0
        || !MV_WR_FORMATS.contains(&format)
    {
        return Ok(None);
    }
    let Some(kernel) = mv_wr_rd(format, false)
        .iter()
        .map(|&(rows_per_warp, depth)| MatvecKernel::WrSegs {
            format,
            segs: MV_WR_SEGS as u32,
            rows_per_warp,
            depth,
        })
        .find(|c| c.shared_bytes(k) <= max)
    else {
        return Ok(None);
    };
    let total = mv_seg_rows(kernel.rows_per_block() as u32 / MV_WARPS, rows);
    if total > i32::MAX as usize {
        return Ok(None);
    }
    let blocks = total.div_ceil(kernel.rows_per_block());
    let by_default = wr != Some(false)
        && MV_WR_DEFAULT_FORMATS.contains(&format)
        && 4 * blocks >= 3 * dev.sm_count as usize;
    Ok((qkv == Some(true) || by_default).then_some(kernel))
}

/// What [`choose_matvec`] and [`choose_matvec_glu`] share: the shape checks
/// ([`check_matvec`]), the tokens per pass for `ntok` vectors, and the rows per warp:
/// `batched` for the batched body, else `one_token()`. Returns (rows per warp, tokens per
/// pass).
fn matvec_grouping(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    batched: u32,
    one_token: impl FnOnce() -> u32,
) -> Result<(u32, u32), CudaError> {
    check_matvec(format, rows, k, ntok)?;
    let tokens_per_pass = matvec_tokens_per_pass(ntok);
    let rows_per_warp = if batched_body(tokens_per_pass) {
        batched
    } else {
        one_token()
    };
    Ok((rows_per_warp, tokens_per_pass))
}

/// The shape checks of a matvec launch.
fn check_matvec(format: QuantFormat, rows: usize, k: usize, ntok: usize) -> Result<(), CudaError> {
    let shape = |detail: String| Err(crate::cuda::shape_err("matvec", detail));
    if format_suffix_of(format).is_none() {
        return Err(CudaError::UnsupportedFormat {
            op: "matvec",
            format,
        });
    }
    let (block, _) = format.block_geometry();
    if k == 0 || k % 32 != 0 || k % block != 0 {
        return shape(format!(
            "k = {k} must be a positive multiple of 32 and of the {format} block ({block})"
        ));
    }
    if rows == 0 || rows > i32::MAX as usize {
        return shape(format!("rows = {rows} out of range"));
    }
    if ntok == 0 || ntok > MV_LAUNCH_MAX_TOK {
        return shape(format!(
            "{ntok} token vectors; one launch takes 1..={MV_LAUNCH_MAX_TOK}"
        ));
    }
    Ok(())
}

/// Choose the fused gate/up kernel for two `rows x k` weights in `format`: the streamed
/// kernel where [`choose_matvec_wr`] takes it (`wr`: its override), else the rows per warp
/// of [`choose_matvec`] for `2 * rows` rows (each warp reads two matrices), at most 2.
pub fn choose_matvec_glu(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
    wr: Option<bool>,
) -> Result<MatvecKernel, CudaError> {
    choose_matvec_tok(format, rows, k, ntok, dev, wr, false, true)
}

/// Choose the two-matrix kernel for two `rows x k` weights in `format` on one x, if there is
/// one: only for a lone token (the decode step) and where [`choose_matvec`]'s rule for
/// `2 * rows` rows picks a compiled rows-per-warp ([`MV_PAIR_ROWS_PER_WARP`]: small
/// matrices such as k and v, whose separate launches are too short to fill the GPU).
/// `None`: run the two matrices as two [`choose_matvec`] launches (the same bits).
pub fn choose_matvec_pair(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
) -> Result<Option<MatvecKernel>, CudaError> {
    check_matvec(format, rows, k, ntok)?;
    if ntok != 1 {
        return Ok(None);
    }
    let r = matvec_rows_per_warp(2 * rows, dev.sm_count);
    Ok(MV_PAIR_ROWS_PER_WARP
        .contains(&r)
        .then_some(MatvecKernel::Pair {
            format,
            rows_per_warp: r,
        }))
}

#[cfg(test)]
#[path = "matvec_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "matvec_bf16_tests.rs"]
mod bf16_tests;
