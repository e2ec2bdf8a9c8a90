//! Kernel choice: pure functions of (op, shape, format, device) returning an enum.
//!
//! Owns: the list of weight formats with CUDA kernels ([`KERNEL_FORMATS`]) and the
//! entry-point suffix of each, the compile target for a compute capability
//! ([`arch_for`]), and one `choose_*` function per op. Each choice is recorded in receipts
//! by its [`std::fmt::Display`] name. The matvec rows-per-warp choice is the first tuned
//! one (issue 7); further variants arrive as new enum variants chosen here, with unit tests.

use super::CudaError;
use super::sources::consts::{
    ATT_MAX_GROUP, ATT_MAX_HD, ATT_SPLIT, ATT_WARPS, MV_BATCH_GLU_ROWS_PER_WARP,
    MV_BATCH_ROWS_PER_WARP, MV_BATCH_TOK, MV_LAUNCH_MAX_TOK, MV_PAIR_ROWS_PER_WARP, MV_TILE,
    MV_WARPS,
};
use super::sources::consts::{MMV_N, MMV_NT, MMV_WARPS};
use crate::quant::QuantFormat;

/// Weight formats that have matvec and embedding kernels.
pub const KERNEL_FORMATS: [QuantFormat; 11] = [
    QuantFormat::F32,
    QuantFormat::F16,
    QuantFormat::BF16,
    QuantFormat::Q4_0,
    QuantFormat::Q4_1,
    QuantFormat::Q5_0,
    QuantFormat::Q5_1,
    QuantFormat::Q8_0,
    QuantFormat::Q4_K,
    QuantFormat::Q5_K,
    QuantFormat::Q6_K,
];

/// Weight formats with a tensor-core prompt pass (`kernels/gemm.cu`: `gemm_<suffix>`,
/// `gemm_<suffix>_glu`); the others keep the batched matvec in the prompt pass.
pub const GEMM_FORMATS: [QuantFormat; 5] = [
    QuantFormat::Q4_0,
    QuantFormat::Q8_0,
    QuantFormat::Q6_K,
    QuantFormat::F16,
    QuantFormat::BF16,
];

/// Whether `format` has a tensor-core prompt pass on a device of compute capability `cc`
/// (`mma.sync.m16n8k16` with f16 inputs needs sm_80).
pub fn gemm_supported(format: QuantFormat, cc: (i32, i32)) -> bool {
    cc.0 >= 8 && GEMM_FORMATS.contains(&format)
}

/// Entry-point suffix of a format (`matvec_<suffix>`, `embed_<suffix>`), or `None` when the
/// format has no kernel.
pub fn format_suffix_of(format: QuantFormat) -> Option<&'static str> {
    Some(match format {
        QuantFormat::F32 => "f32",
        QuantFormat::F16 => "f16",
        QuantFormat::BF16 => "bf16",
        QuantFormat::Q4_0 => "q4_0",
        QuantFormat::Q4_1 => "q4_1",
        QuantFormat::Q5_0 => "q5_0",
        QuantFormat::Q5_1 => "q5_1",
        QuantFormat::Q8_0 => "q8_0",
        QuantFormat::Q4_K => "q4_k",
        QuantFormat::Q5_K => "q5_k",
        QuantFormat::Q6_K => "q6_k",
        QuantFormat::Q2_K | QuantFormat::Q3_K | QuantFormat::IQ4_NL | QuantFormat::IQ4_XS => {
            return None;
        }
    })
}

/// Suffix of a format listed in [`KERNEL_FORMATS`] ("?" for any other).
pub fn format_suffix(format: QuantFormat) -> &'static str {
    format_suffix_of(format).unwrap_or("?")
}

/// What kernel choice needs to know about a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    pub compute_capability: (i32, i32),
    pub sm_count: u32,
}

/// NVRTC target for a compute capability: `sm_90a` on Hopper (wgmma and the other
/// arch-specific features), the device's own `sm_XY` elsewhere.
pub fn arch_for(cc: (i32, i32)) -> String {
    match cc {
        (9, 0) => "sm_90a".to_string(),
        (major, minor) => format!("sm_{major}{minor}"),
    }
}

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

impl MatvecKernel {
    /// The entry point of this choice. (The Q6_K output head, 4 rows per warp, is the
    /// plain `matvec_q6_k_r4`: with the one-token body's load rounds it holds 128
    /// registers, 2 blocks per SM, and the H200 decoded the 8B Q4_0 at 296.9 tok/s with it
    /// against 288.0 with the former 4-blocks-per-SM compile `_o4`, which spilled 204
    /// bytes per thread under that body; research/notes/decode-roofline.md, session 5.)
    pub fn entry(&self) -> String {
        let tb = |t: &u32| if *t > 1 { "_tb" } else { "" };
        match self {
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
            | MatvecKernel::Pair { rows_per_warp, .. } => (*rows_per_warp * MV_WARPS) as usize,
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
            MatvecKernel::Pair { .. } => 1,
        }
    }

    /// Dynamic shared memory of a launch of this kernel for rows of `k` values.
    pub fn shared_bytes(&self, k: usize) -> usize {
        mv_shared_bytes(self.tokens_per_pass(), k)
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
            if *t > 1 {
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

/// Choose the matvec kernel for a `rows x k` weight in `format` applied to `ntok` vectors.
/// Several tokens take the batched entry points (2 rows per warp: each staged x value
/// read from shared memory serves two rows' multiply-adds; gate/up: 1 row of each).
pub fn choose_matvec(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
) -> Result<MatvecKernel, CudaError> {
    check_matvec(format, rows, k, ntok)?;
    let tokens_per_pass = matvec_tokens_per_pass(ntok);
    Ok(MatvecKernel::MultiRow {
        format,
        rows_per_warp: if tokens_per_pass > 1 {
            MV_BATCH_ROWS_PER_WARP[0]
        } else {
            matvec_rows_per_warp(rows, dev.sm_count).min(one_token_rows_cap(format))
        },
        tokens_per_pass,
    })
}

/// The shape checks of a matvec launch.
fn check_matvec(format: QuantFormat, rows: usize, k: usize, ntok: usize) -> Result<(), CudaError> {
    if format_suffix_of(format).is_none() {
        return Err(CudaError::UnsupportedFormat {
            op: "matvec",
            format,
        });
    }
    let (block, _) = format.block_geometry();
    if k == 0 || k % 32 != 0 || k % block != 0 {
        return Err(super::shape_err(
            "matvec",
            format!(
                "k = {k} must be a positive multiple of 32 and of the {format} block ({block})"
            ),
        ));
    }
    if rows == 0 || rows > i32::MAX as usize {
        return Err(super::shape_err(
            "matvec",
            format!("rows = {rows} out of range"),
        ));
    }
    if ntok == 0 || ntok > MV_LAUNCH_MAX_TOK {
        return Err(super::shape_err(
            "matvec",
            format!("{ntok} token vectors; one launch takes 1..={MV_LAUNCH_MAX_TOK}"),
        ));
    }
    Ok(())
}

/// Choose the fused gate/up kernel for two `rows x k` weights in `format`: the rows per
/// warp of [`choose_matvec`] for `2 * rows` rows (each warp reads two matrices), at most 2.
pub fn choose_matvec_glu(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
) -> Result<MatvecKernel, CudaError> {
    check_matvec(format, rows, k, ntok)?;
    let tokens_per_pass = matvec_tokens_per_pass(ntok);
    Ok(MatvecKernel::GluMultiRow {
        format,
        rows_per_warp: if tokens_per_pass > 1 {
            MV_BATCH_GLU_ROWS_PER_WARP[0]
        } else {
            matvec_rows_per_warp(2 * rows, dev.sm_count).min(one_token_rows_cap(format) / 2)
        },
        tokens_per_pass,
    })
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

/// Embedding lookup kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedKernel {
    /// One block per token, threads over 32-value chunks.
    ChunkPerThread { format: QuantFormat },
}

impl std::fmt::Display for EmbedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmbedKernel::ChunkPerThread { format } => {
                write!(f, "embed_{}/chunk-per-thread", format_suffix(*format))
            }
        }
    }
}

/// Choose the embedding kernel for rows of `k` values in `format`.
pub fn choose_embed(format: QuantFormat, k: usize) -> Result<EmbedKernel, CudaError> {
    if format_suffix_of(format).is_none() {
        return Err(CudaError::UnsupportedFormat {
            op: "embed",
            format,
        });
    }
    let (block, _) = format.block_geometry();
    if k == 0 || k % 32 != 0 || k % block != 0 {
        return Err(super::shape_err(
            "embed",
            format!("row length {k} is not a block multiple"),
        ));
    }
    Ok(EmbedKernel::ChunkPerThread { format })
}

/// Decode attention kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKernel {
    /// Split the KV range into fixed absolute splits of `split` positions, one block per
    /// (head, split, token), then combine the splits in order.
    SplitKv { split: usize, max_splits: usize },
}

impl std::fmt::Display for AttentionKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttentionKernel::SplitKv { split, max_splits } => {
                write!(
                    f,
                    "attention/split-kv(split={split},max_splits={max_splits})"
                )
            }
        }
    }
}

/// Choose the attention kernel for `n_heads` query heads over `n_kv_heads` KV heads of size
/// `head_dim`, with a KV cache of `capacity` positions.
/// Warps of an attention split block for `group` query heads per KV head: one block stages
/// the KV head's rows once for all of them; 4 warps up to 4 heads, else 8 (2 heads per warp
/// beyond 8). A function of the model's shape alone, so a head's arithmetic never depends on
/// the launch.
pub fn attention_warps(group: usize) -> u32 {
    if group <= 4 { 4 } else { ATT_WARPS }
}

/// The attention split kernel for a head size: the head-size-specialised entry points of
/// `attention.cu` for 64, 128 and 256 dims, the general one otherwise.
pub fn attention_entry(head_dim: usize) -> &'static str {
    match head_dim {
        64 => "attn_partial_d64",
        128 => "attn_partial_d128",
        256 => "attn_partial_d256",
        _ => "attn_partial",
    }
}

/// The entry point of the batched attention over per-row caches (`attn_rows*`), by head
/// size: the kernel of [`attention_entry`] with each row's cache pointers from a table.
pub fn attention_rows_entry(head_dim: usize) -> &'static str {
    match head_dim {
        64 => "attn_rows_d64",
        128 => "attn_rows_d128",
        256 => "attn_rows_d256",
        _ => "attn_rows",
    }
}

pub fn choose_attention(
    head_dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
    capacity: usize,
    _dev: &DeviceFacts,
) -> Result<AttentionKernel, CudaError> {
    if head_dim == 0 || head_dim > ATT_MAX_HD || head_dim % 8 != 0 {
        return Err(super::shape_err(
            "attention",
            format!("head size {head_dim} is not a multiple of 8 in 8..={ATT_MAX_HD}"),
        ));
    }
    if n_kv_heads == 0 || n_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(super::shape_err(
            "attention",
            format!("{n_heads} query heads do not share {n_kv_heads} KV heads evenly"),
        ));
    }
    if (n_heads / n_kv_heads) * head_dim > ATT_WARPS as usize * ATT_MAX_HD {
        return Err(super::shape_err(
            "attention",
            format!(
                "{} query heads per KV head of {head_dim} dims: the attention block stages at most {} query values",
                n_heads / n_kv_heads,
                ATT_WARPS as usize * ATT_MAX_HD
            ),
        ));
    }
    if n_heads / n_kv_heads > ATT_MAX_GROUP {
        return Err(super::shape_err(
            "attention",
            format!(
                "{} query heads per KV head; the attention kernel takes at most {ATT_MAX_GROUP}",
                n_heads / n_kv_heads
            ),
        ));
    }
    if capacity == 0 || capacity > i32::MAX as usize / 2 {
        return Err(super::shape_err(
            "attention",
            format!("KV capacity {capacity} out of range"),
        ));
    }
    Ok(AttentionKernel::SplitKv {
        split: ATT_SPLIT,
        max_splits: capacity.div_ceil(ATT_SPLIT),
    })
}

/// Weight formats with tensor-core decode products (`kernels/mmv.cu`: `mmv_<suffix>_nt<NT>`,
/// `mmv_<suffix>_glu_nt<NT>`), routed there by `ASSAY_MMV=1`; the others keep the matvec.
pub const MMV_FORMATS: [QuantFormat; 2] = [QuantFormat::Q4_0, QuantFormat::Q8_0];

/// Whether `format` has tensor-core decode products on a device of compute capability `cc`.
pub fn mmv_supported(format: QuantFormat, cc: (i32, i32)) -> bool {
    cc.0 >= 8 && MMV_FORMATS.contains(&format)
}

/// Blocks an `mmv.cu` launch aims at (about two per SM of an H200): a product with fewer
/// 16-row tiles splits each tile's chunks across blocks ([`mmv_splits`]).
pub const MMV_TARGET_BLOCKS: usize = 256;
/// Most blocks one tile's chunks are split across.
pub const MMV_MAX_SPLITS: usize = 8;
/// Most rows x splits of a split product: the partial-sum scratch holds
/// `MMV_SPLIT_ROWS * 2 * MMV_N` floats (`ops::MmvScratch`).
pub const MMV_SPLIT_ROWS: usize = 16 * MMV_TARGET_BLOCKS;

/// Blocks each 16-row tile's chunks are split across: `MMV_TARGET_BLOCKS / tiles` (at
/// least 1, at most [`MMV_MAX_SPLITS`], and never more than the chunks / 8 so that each
/// split keeps a chunk per warp). A function of the shape only, never of the token count:
/// the k split, hence every token's bits, is the same for n = 1 and n = 64.
pub fn mmv_splits(rows: usize, k: usize) -> u32 {
    let tiles = rows.div_ceil(16).max(1);
    let by_blocks = (MMV_TARGET_BLOCKS / tiles).clamp(1, MMV_MAX_SPLITS);
    let by_chunks = (k / 32 / MMV_WARPS as usize).max(1);
    by_blocks.min(by_chunks) as u32
}

/// Longest row the one-token entry points (`mmv_<fmt>[_glu]_x1`) stage in shared memory
/// (f16 hi + lo: 4 bytes a value, within the matvec's dynamic shared-memory limit);
/// longer rows take `gemm_stage_x` + `_nt1`.
pub const MMV_X1_MAX_K: usize = MV_MAX_SHARED_BYTES / 4;

/// A tensor-core decode product (`kernels/mmv.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmvKernel {
    pub format: QuantFormat,
    /// Gate + up with the activation (`_glu`), else plain (+ bias, + residual).
    pub glu: bool,
    /// n-tiles of 8 tokens the entry point holds (1, 2, 4 or 8: the smallest >= n / 8).
    pub n_tiles: u32,
    /// Blocks per 16-row tile ([`mmv_splits`]).
    pub splits: u32,
    /// One token with x staged by the kernel itself (`_x1`: one launch, no `gemm_stage_x`;
    /// the same bits as the staged `_nt1`).
    pub x1: bool,
}

impl MmvKernel {
    /// The entry point.
    pub fn entry(&self) -> String {
        let glu = if self.glu { "_glu" } else { "" };
        if self.x1 {
            format!("mmv_{}{glu}_x1", format_suffix(self.format))
        } else {
            format!("mmv_{}{glu}_nt{}", format_suffix(self.format), self.n_tiles)
        }
    }
}

/// Receipts' name: the product's kind and split, not its n-tiles (they follow n).
impl std::fmt::Display for MmvKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "mmv_{}{} splits={} warps={MMV_WARPS}{}",
            format_suffix(self.format),
            if self.glu { "_glu" } else { "" },
            self.splits,
            if self.x1 { " x1" } else { "" }
        )
    }
}

/// The decode product for `n` tokens of a `rows` x `k` matrix in `format`.
pub fn choose_mmv(
    format: QuantFormat,
    glu: bool,
    rows: usize,
    k: usize,
    n: usize,
    cc: (i32, i32),
) -> Result<MmvKernel, CudaError> {
    if !mmv_supported(format, cc) {
        return Err(CudaError::UnsupportedFormat { op: "mmv", format });
    }
    if rows == 0 || k == 0 || k % 32 != 0 {
        return Err(super::shape_err(
            "mmv",
            format!("{rows} x {k}: rows > 0 and k a positive multiple of 32"),
        ));
    }
    let n_tiles = MMV_NT
        .iter()
        .copied()
        .find(|nt| 8 * nt >= n && n > 0)
        .ok_or_else(|| {
            super::shape_err("mmv", format!("{n} tokens; a launch takes 1..={MMV_N}"))
        })?;
    Ok(MmvKernel {
        format,
        glu,
        n_tiles: n_tiles as u32,
        splits: mmv_splits(rows, k),
        x1: false,
    })
}

/// The one-token product that stages x itself, if the row fits ([`MMV_X1_MAX_K`]); the
/// same split as [`choose_mmv`] for one token.
pub fn choose_mmv_x1(
    format: QuantFormat,
    glu: bool,
    rows: usize,
    k: usize,
    cc: (i32, i32),
) -> Result<MmvKernel, CudaError> {
    let c = choose_mmv(format, glu, rows, k, 1, cc)?;
    if k > MMV_X1_MAX_K {
        return Err(super::shape_err(
            "mmv_x1",
            format!("k = {k}: the one-token staging holds up to {MMV_X1_MAX_K} values"),
        ));
    }
    Ok(MmvKernel { x1: true, ..c })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_formats_take_at_most_two_rows_per_warp_for_one_token() {
        let dev = H200;
        for f in [QuantFormat::F32, QuantFormat::F16, QuantFormat::BF16] {
            let MatvecKernel::MultiRow { rows_per_warp, .. } =
                choose_matvec(f, 128_256, 4096, 1, &dev).unwrap()
            else {
                panic!("multi-row")
            };
            assert_eq!(rows_per_warp, 2, "{f}");
            let MatvecKernel::GluMultiRow { rows_per_warp, .. } =
                choose_matvec_glu(f, 14_336, 4096, 1, &dev).unwrap()
            else {
                panic!("glu")
            };
            assert_eq!(rows_per_warp, 1, "{f}");
        }
        let MatvecKernel::MultiRow { rows_per_warp, .. } =
            choose_matvec(QuantFormat::Q4_0, 128_256, 4096, 1, &dev).unwrap()
        else {
            panic!("multi-row")
        };
        assert_eq!(rows_per_warp, 4);
    }
    use crate::cuda::sources::consts::MV_MAX_TOK;

    const H200: DeviceFacts = DeviceFacts {
        compute_capability: (9, 0),
        sm_count: 132,
    };
    const RTX: DeviceFacts = DeviceFacts {
        compute_capability: (8, 6),
        sm_count: 82,
    };

    #[test]
    fn arch_is_sm_90a_on_hopper_and_own_elsewhere() {
        assert_eq!(arch_for((9, 0)), "sm_90a");
        assert_eq!(arch_for((8, 6)), "sm_86");
        assert_eq!(arch_for((12, 0)), "sm_120");
    }

    #[test]
    fn every_kernel_format_has_a_distinct_suffix() {
        let mut seen: Vec<&str> = KERNEL_FORMATS.iter().map(|f| format_suffix(*f)).collect();
        assert!(!seen.contains(&"?"));
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), KERNEL_FORMATS.len());
        for f in QuantFormat::ALL {
            assert_eq!(
                format_suffix_of(f).is_some(),
                KERNEL_FORMATS.contains(&f),
                "{f}"
            );
        }
    }

    #[test]
    fn matvec_choice() {
        for dev in [H200, RTX] {
            let c = choose_matvec(QuantFormat::Q4_K, 896, 4864, 1, &dev).unwrap();
            assert_eq!(
                c,
                MatvecKernel::MultiRow {
                    format: QuantFormat::Q4_K,
                    rows_per_warp: 1,
                    tokens_per_pass: 1
                }
            );
            assert_eq!(c.to_string(), "matvec_q4_k/multi-row(r=1,warps=8)");
            assert_eq!(c.entry(), "matvec_q4_k_r1");
        }
        // Llama-3.1-8B on the H200 (132 SMs): k/v 1024 rows -> 1, q/o/down 4096 -> 2,
        // gate/up 14336 and the head -> 4; the same rows on a smaller GPU share more.
        let r = |rows, dev: &DeviceFacts| match choose_matvec(QuantFormat::Q4_0, rows, 4096, 1, dev)
            .unwrap()
        {
            MatvecKernel::MultiRow { rows_per_warp, .. } => rows_per_warp,
            MatvecKernel::GluMultiRow { .. } | MatvecKernel::Pair { .. } => 0,
        };
        assert_eq!(r(1024, &H200), 1);
        assert_eq!(r(4096, &H200), 2);
        assert_eq!(r(14336, &H200), 4);
        assert_eq!(r(128256, &H200), 4);
        assert_eq!(r(4096, &RTX), 4);
        assert_eq!(r(2048, &RTX), 2);
        assert_eq!(r(1, &RTX), 1);
        let c = choose_matvec(QuantFormat::Q4_0, 4096, 4096, 1, &H200).unwrap();
        assert_eq!(c.rows_per_block(), 16);
        assert_eq!(c.entry(), "matvec_q4_0_r2");
        // Shared memory: one tile of k/32 chunks of 33 floats, capped at MV_TILE chunks.
        assert_eq!(c.shared_bytes(4096), 128 * 33 * 4);
        assert_eq!(c.shared_bytes(1 << 20), MV_MAX_SHARED_BYTES);
        // Gate/up pairs: at most 2 rows of each matrix per warp; 14336-row gate/up on the
        // H200 -> 2, a small MLP -> 1; the same shape checks as a single matvec.
        let g = choose_matvec_glu(QuantFormat::Q4_K, 14336, 4096, 1, &H200).unwrap();
        assert_eq!(
            g,
            MatvecKernel::GluMultiRow {
                format: QuantFormat::Q4_K,
                rows_per_warp: 2,
                tokens_per_pass: 1
            }
        );
        assert_eq!(g.entry(), "matvec_q4_k_glu_r2");
        assert_eq!(g.to_string(), "matvec_q4_k/glu-multi-row(r=2,warps=8)");
        assert_eq!(g.rows_per_block(), 16);
        let g = choose_matvec_glu(QuantFormat::Q8_0, 1024, 512, 1, &H200).unwrap();
        assert_eq!(g.entry(), "matvec_q8_0_glu_r1");
        assert!(choose_matvec_glu(QuantFormat::Q4_K, 64, 896, 1, &H200).is_err());
        assert!(
            choose_matvec_glu(QuantFormat::Q8_0, 64, 512, MV_LAUNCH_MAX_TOK + 1, &H200).is_err()
        );
        // K-quant rows must be whole super-blocks; 32-blocks must be whole too.
        assert!(matches!(
            choose_matvec(QuantFormat::Q4_K, 8, 896, 1, &H200),
            Err(CudaError::Shape { .. })
        ));
        assert!(choose_matvec(QuantFormat::Q8_0, 8, 896, 8, &H200).is_ok());
        assert!(choose_matvec(QuantFormat::Q8_0, 8, 896, MV_LAUNCH_MAX_TOK + 1, &H200).is_err());
        // Up to MV_LAUNCH_MAX_TOK rows in one launch of the batched entry points.
        let c = choose_matvec(QuantFormat::Q8_0, 8, 896, MV_LAUNCH_MAX_TOK, &H200).unwrap();
        assert_eq!(c.tokens_per_pass(), MV_BATCH_TOK);
        assert!(choose_matvec(QuantFormat::Q8_0, 8, 896, 0, &H200).is_err());
        assert!(choose_matvec(QuantFormat::F32, 8, 40, 1, &H200).is_err());
        assert!(matches!(
            choose_matvec(QuantFormat::Q3_K, 8, 256, 1, &H200),
            Err(CudaError::UnsupportedFormat { .. })
        ));
    }

    #[test]
    fn batched_matvec_choice() {
        // One token: the one-token-per-pass kernels; 2..=MV_MAX_TOK: the batched ones.
        assert_eq!(matvec_tokens_per_pass(1), 1);
        for n in 2..=MV_MAX_TOK {
            assert_eq!(matvec_tokens_per_pass(n), MV_BATCH_TOK as u32);
        }
        let c = choose_matvec(QuantFormat::Q4_0, 4096, 4096, 8, &H200).unwrap();
        assert_eq!(
            c,
            MatvecKernel::MultiRow {
                format: QuantFormat::Q4_0,
                rows_per_warp: 2,
                tokens_per_pass: 8
            }
        );
        assert_eq!(c.entry(), "matvec_q4_0_tb_r2");
        assert_eq!(c.to_string(), "matvec_q4_0/multi-row(r=2,warps=8,tok=8)");
        assert_eq!(c.tokens_per_pass(), 8);
        // 2 rows per warp when batched, whatever the rows (k/v rows would take 1 alone).
        let c = choose_matvec(QuantFormat::Q4_0, 1024, 4096, 3, &H200).unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_tb_r2");
        let c = choose_matvec(QuantFormat::Q6_K, 128256, 4096, 5, &H200).unwrap();
        assert_eq!(c.entry(), "matvec_q6_k_tb_r2");
        let g = choose_matvec_glu(QuantFormat::Q8_0, 1024, 512, 3, &H200).unwrap();
        assert_eq!(g.entry(), "matvec_q8_0_glu_tb_r1");
        let g = choose_matvec_glu(QuantFormat::Q4_0, 14336, 4096, 8, &H200).unwrap();
        assert_eq!(g.entry(), "matvec_q4_0_glu_tb_r1");
        assert_eq!(
            g.to_string(),
            "matvec_q4_0/glu-multi-row(r=1,warps=8,tok=8)"
        );
        // Every chosen entry point exists in the family's list.
        use super::super::sources::Family;
        let listed = [Family::Matvec, Family::MatvecBatch]
            .map(|f| f.entry_points())
            .concat();
        for f in KERNEL_FORMATS {
            let unit = f.block_geometry().0.max(32);
            for rows in [1, 67, 1024, 4096, 14336, 128256] {
                for n in (1..=MV_MAX_TOK).chain([MV_LAUNCH_MAX_TOK]) {
                    for dev in [H200, RTX] {
                        let a = choose_matvec(f, rows, unit * 4, n, &dev).unwrap();
                        let b = choose_matvec_glu(f, rows, unit * 4, n, &dev).unwrap();
                        assert!(listed.contains(&a.entry()), "{}", a.entry());
                        assert!(listed.contains(&b.entry()), "{}", b.entry());
                        assert!(a.shared_bytes(unit * 4) <= MV_MAX_SHARED_BYTES);
                    }
                }
            }
        }
        // Tiles: a multiple of 32 chunks (or the whole row), 8 tokens -> 64 chunks each.
        assert_eq!(mv_tile_max(1), 640);
        assert_eq!(mv_tile_max(8), 64);
        assert_eq!(mv_tile_max(64), 32);
        assert_eq!(mv_shared_bytes(8, 4096), 8 * 32 * 65 * 4);
        // Batched: the full tile's stride whatever k (a compile-time stride in matvec.cu).
        assert_eq!(mv_shared_bytes(8, 1024), 8 * 32 * 65 * 4);
        assert_eq!(mv_shared_bytes(8, 32), 8 * 32 * 65 * 4);
        // One token: k/32 chunks of 33 floats, at most 640 chunks.
        assert_eq!(mv_shared_bytes(1, 1024), 32 * 33 * 4);
        assert_eq!(mv_shared_bytes(1, 14336), 448 * 33 * 4);
        assert_eq!(mv_shared_bytes(1, 1 << 20), 640 * 33 * 4);
        assert_eq!(MV_MAX_SHARED_BYTES, 640 * 33 * 4);
        // The kernel's chunk stride is this one.
        let mv = super::super::sources::SOURCES
            .iter()
            .find(|s| s.path == "matvec.cu")
            .unwrap();
        assert!(mv.text.contains(&format!("#define MV_XCS {MV_XCS}\n")));
    }

    #[test]
    fn embed_choice() {
        assert_eq!(
            choose_embed(QuantFormat::Q6_K, 2048).unwrap().to_string(),
            "embed_q6_k/chunk-per-thread"
        );
        assert!(choose_embed(QuantFormat::Q6_K, 896).is_err());
        assert!(choose_embed(QuantFormat::IQ4_XS, 256).is_err());
    }

    #[test]
    fn attention_choice() {
        let c = choose_attention(64, 9, 3, 8192, &H200).unwrap();
        assert_eq!(
            c,
            AttentionKernel::SplitKv {
                split: ATT_SPLIT,
                max_splits: 8192 / ATT_SPLIT
            }
        );
        let c = choose_attention(256, 4, 1, 300, &RTX).unwrap();
        assert_eq!(
            c,
            AttentionKernel::SplitKv {
                split: ATT_SPLIT,
                max_splits: 300usize.div_ceil(ATT_SPLIT)
            }
        );
        assert!(choose_attention(512, 8, 8, 100, &H200).is_err());
        assert!(choose_attention(64, 9, 2, 100, &H200).is_err());
        assert!(choose_attention(64, 8, 2, 0, &H200).is_err());
        // 16-byte staging of K/V rows: head sizes are multiples of 8
        assert!(choose_attention(60, 8, 8, 100, &H200).is_err());
        assert!(choose_attention(80, 8, 8, 100, &H200).is_ok());
        // at most 2 heads per warp of the widest block
        assert!(choose_attention(64, ATT_MAX_GROUP, 1, 100, &H200).is_ok());
        // the block's staged q: G * head_dim <= ATT_WARPS * ATT_MAX_HD values
        assert!(choose_attention(128, ATT_MAX_GROUP, 1, 100, &H200).is_ok());
        assert!(choose_attention(256, ATT_MAX_GROUP, 1, 100, &H200).is_err());
        assert!(choose_attention(256, 8, 1, 100, &H200).is_ok());
        assert!(choose_attention(64, 2 * ATT_MAX_GROUP, 1, 100, &H200).is_err());
    }

    #[test]
    fn pair_only_for_small_matrices_and_one_token() {
        let f = QuantFormat::Q4_0;
        // k and v of Llama-3.1-8B: 1024 rows each -> 256 blocks of one row per warp
        let c = choose_matvec_pair(f, 1024, 4096, 1, &H200)
            .unwrap()
            .unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_pair_r1");
        assert_eq!(c.rows_per_block(), MV_WARPS as usize);
        assert_eq!(c.tokens_per_pass(), 1);
        // several tokens, or matrices big enough for 2+ rows per warp: separate launches
        assert_eq!(choose_matvec_pair(f, 1024, 4096, 2, &H200).unwrap(), None);
        assert_eq!(choose_matvec_pair(f, 14336, 4096, 1, &H200).unwrap(), None);
        assert!(choose_matvec_pair(f, 1024, 4095, 1, &H200).is_err());
    }

    #[test]
    fn attention_entry_by_head_size() {
        assert_eq!(attention_entry(128), "attn_partial_d128");
        assert_eq!(attention_entry(64), "attn_partial_d64");
        assert_eq!(attention_entry(256), "attn_partial_d256");
        assert_eq!(attention_entry(80), "attn_partial");
        for hd in [64, 80, 128, 256] {
            assert_eq!(
                attention_rows_entry(hd).strip_prefix("attn_rows"),
                attention_entry(hd).strip_prefix("attn_partial")
            );
        }
    }

    #[test]
    fn attention_warps_by_group() {
        assert_eq!(attention_warps(1), 4);
        assert_eq!(attention_warps(4), 4);
        assert_eq!(attention_warps(7), 8);
        assert_eq!(attention_warps(ATT_MAX_GROUP), ATT_WARPS);
        // every head of the largest group has a warp slot (2 per warp)
        assert!(ATT_MAX_GROUP <= 2 * ATT_WARPS as usize);
        // attention.cu stages the group's q with ATT_QPT = ATT_MAX_HD / 32 values per
        // thread: every accepted shape fits the block it gets
        for g in 1..=2 * ATT_MAX_GROUP {
            for hd in (8..=ATT_MAX_HD).step_by(8) {
                if choose_attention(hd, g, 1, 100, &H200).is_ok() {
                    let threads = attention_warps(g) as usize * 32;
                    assert!(g * hd <= threads * (ATT_MAX_HD / 32), "g={g} hd={hd}");
                }
            }
        }
    }

    #[test]
    fn the_q6_k_head_is_the_plain_r4_entry_point() {
        let h200 = DeviceFacts {
            compute_capability: (9, 0),
            sm_count: 132,
        };
        let c = choose_matvec(QuantFormat::Q6_K, 128_256, 4096, 1, &h200).unwrap();
        assert_eq!(c.entry(), "matvec_q6_k_r4");
        assert_eq!(c.to_string(), "matvec_q6_k/multi-row(r=4,warps=8)");
        // Every one-token entry point is one of the family's plain names.
        use super::super::sources::Family;
        let listed = Family::Matvec.entry_points();
        assert!(listed.iter().all(|e| !e.contains("_o")), "{listed:?}");
        assert!(listed.contains(&c.entry()));
    }

    #[test]
    fn mmv_choice_follows_n_tiles_and_shape() {
        let cc = (9, 0);
        let k = choose_mmv(QuantFormat::Q4_0, false, 4096, 4096, 1, cc).unwrap();
        assert_eq!((k.n_tiles, k.splits), (1, 1));
        assert_eq!(k.entry(), "mmv_q4_0_nt1");
        for (n, nt) in [
            (1, 1),
            (8, 1),
            (9, 2),
            (16, 2),
            (17, 4),
            (32, 4),
            (33, 8),
            (64, 8),
        ] {
            let c = choose_mmv(QuantFormat::Q8_0, true, 14336, 4096, n, cc).unwrap();
            assert_eq!(c.n_tiles, nt, "n = {n}");
            assert_eq!(c.entry(), format!("mmv_q8_0_glu_nt{nt}"));
            assert_eq!(c.splits, 1);
        }
        // k / v of an 8B model: 64 tiles, split in 4 whatever n.
        for n in [1, 7, 64] {
            let c = choose_mmv(QuantFormat::Q4_0, false, 1024, 4096, n, cc).unwrap();
            assert_eq!(c.splits, 4);
            assert_eq!(c.to_string(), "mmv_q4_0 splits=4 warps=8");
        }
        assert!(choose_mmv(QuantFormat::Q4_0, false, 1024, 4096, 0, cc).is_err());
        assert!(choose_mmv(QuantFormat::Q4_0, false, 1024, 4096, 65, cc).is_err());
        assert!(choose_mmv(QuantFormat::Q6_K, false, 1024, 4096, 1, cc).is_err());
        assert!(choose_mmv(QuantFormat::Q4_0, false, 1024, 4096, 1, (7, 5)).is_err());
        assert!(choose_mmv(QuantFormat::Q4_0, false, 1024, 4100, 1, cc).is_err());
        // One token staged in the kernel: same split, `_x1` entry point, rows that fit.
        let x = choose_mmv_x1(QuantFormat::Q4_0, true, 14336, 4096, cc).unwrap();
        assert_eq!((x.entry().as_str(), x.splits), ("mmv_q4_0_glu_x1", 1));
        let x = choose_mmv_x1(QuantFormat::Q8_0, false, 1024, 4096, cc).unwrap();
        assert_eq!((x.entry().as_str(), x.splits), ("mmv_q8_0_x1", 4));
        assert_eq!(x.to_string(), "mmv_q8_0 splits=4 warps=8 x1");
        assert!(choose_mmv_x1(QuantFormat::Q4_0, false, 4096, 14336, cc).is_ok());
        const { assert!(MMV_X1_MAX_K >= 14336) };
        assert!(choose_mmv_x1(QuantFormat::Q4_0, false, 4096, MMV_X1_MAX_K + 32, cc).is_err());
    }

    #[test]
    fn mmv_splits_depend_on_shape_only_and_fit_the_scratch() {
        assert_eq!(mmv_splits(4096, 4096), 1);
        assert_eq!(mmv_splits(4096, 14336), 1);
        assert_eq!(mmv_splits(14336, 4096), 1);
        assert_eq!(mmv_splits(1024, 4096), 4);
        assert_eq!(mmv_splits(512, 4096), 8);
        assert_eq!(mmv_splits(16, 4096), 8);
        // Few chunks: each split keeps at least one chunk per warp.
        assert_eq!(mmv_splits(16, 256), 1);
        assert_eq!(mmv_splits(16, 512), 2);
        for rows in [16, 100, 512, 1000, 1024, 2048, 4096, 5000, 14336] {
            for k in [32, 256, 4096, 14336] {
                let s = mmv_splits(rows, k) as usize;
                assert!((1..=MMV_MAX_SPLITS).contains(&s));
                if s > 1 {
                    assert!(rows.div_ceil(16) * 16 * s <= MMV_SPLIT_ROWS, "{rows} x {k}");
                }
            }
        }
    }
}
