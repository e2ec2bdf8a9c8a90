//! The kernel sources, embedded at build time, and the kernel identity.
//!
//! Owns: [`SOURCES`] (every file under `kernels/`, sorted by path), the kernel families
//! (one `.cu` file each) with the `-D` shape constants each is compiled with, the textual
//! expansion of `#include "..."` lines naming embedded files (the shared `common/*.cuh` and
//! a family's own parts, `<family>/*.cuh`; NVRTC sees one self-contained source; no CUDA
//! header is used), and [`kernel_identity`]: sha256 over every source, which receipts
//! record and the cubin cache key builds on.

use super::CudaError;
use sha2::{Digest, Sha256};

/// One embedded file of `kernels/`: its path relative to `kernels/` and its text.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    pub path: &'static str,
    pub text: &'static str,
}

macro_rules! src {
    ($p:literal) => {
        KernelSource {
            path: $p,
            text: include_str!(concat!("../../../kernels/", $p)),
        }
    };
}

/// Every kernel source file, sorted by path (a test checks this list against `kernels/`).
pub const SOURCES: &[KernelSource] = &[
    src!("argmax.cu"),
    src!("attention.cu"),
    src!("attention/prefill.cuh"),
    src!("common/common.cuh"),
    src!("common/formats.cuh"),
    src!("common/mma.cuh"),
    src!("common/tc.cuh"),
    src!("elementwise.cu"),
    src!("embed.cu"),
    src!("gemm.cu"),
    src!("gemmt.cu"),
    src!("gemmt/tma.cuh"),
    src!("gemmt/wgmma.cuh"),
    src!("mask.cu"),
    src!("matvec.cu"),
    src!("matvec/rope_epi.cuh"),
    src!("matvec/streamed.cuh"),
    src!("mmv.cu"),
    src!("norm.cu"),
    src!("rope.cu"),
    src!("sample.cu"),
];

/// Compile-time constants shared by the kernels (as `-D` defines) and their launch
/// wrappers (as launch shapes). Changing one changes the cubin cache key.
pub mod consts {
    /// Warps per matvec block (each owns 1, 2 or 4 rows: `select::MatvecKernel`).
    pub const MV_WARPS: u32 = 8;
    /// Most 32-value chunks of x a matvec block holds in shared memory at once (longer
    /// rows are processed in tiles of this many chunks).
    pub const MV_TILE: usize = 640;
    /// Rows per warp of the matvec entry points (`matvec_<fmt>_r<R>`).
    pub const MV_ROWS_PER_WARP: [u32; 3] = [1, 2, 4];
    /// Rows per warp (of each matrix) of the fused gate/up entry points
    /// (`matvec_<fmt>_glu_r<R>`).
    pub const MV_GLU_ROWS_PER_WARP: [u32; 2] = [1, 2];
    /// Rows per warp (of each matrix) of the two-matrix entry points
    /// (`matvec_<fmt>_pair_r<R>`: k and v of an attention block in one launch).
    pub const MV_PAIR_ROWS_PER_WARP: [u32; 1] = [1];
    /// (rows per warp, ring depth) of the streamed one-token matvec entry points
    /// (`matvec_<fmt>_wr_r<R>_d<D>`, `select::MatvecKernel::Wr`), deepest ring first:
    /// `select` takes the first whose shared memory leaves room for
    /// [`MV_WR_BLOCKS_PER_SM`] blocks per SM (4 rows: q / o 4096 x 4096 take depth 3, down
    /// 4096 x 14336 depth 2 beside its 63 KB of staged x; H200, research/notes/matvec/).
    pub const MV_WR_RD: [(u32, u32); 2] = [(4, 3), (4, 2)];
    /// Matrices of the segmented streamed entry points (`matvec_<fmt>_seg<S>_wr_r<R>_d<D>`,
    /// `select::MatvecKernel::WrSegs`: q, k and v of an attention block in one launch), whose
    /// (R, D) are those of [`MV_WR_RD`].
    pub const MV_WR_SEGS: usize = 3;
    /// The same for the gate + up entry points (`matvec_<fmt>_glu_wr_r<R>_d<D>`: 1 row of
    /// each matrix per warp, depth 6 at k = 4096).
    pub const MV_WR_GLU_RD: [(u32, u32); 2] = [(1, 6), (1, 4)];
    /// (rows per warp, ring depth) of the BF16 streamed one-token entry points (plain and
    /// segmented; matvec.cu's `ASSAY_MATVEC_WR_HALF`), deepest ring first as
    /// [`MV_WR_RD`]: a 64-byte chunk per lane and unit (4x Q4_0's ring), so 2 rows at depth
    /// 2 beside k = 4096's staged x (q / o, q / k / v), 1 row at depth 3 beside
    /// k = 14336's (down: 63 KB of x; two blocks per SM).
    pub const MV_WR_HALF_RD: [(u32, u32); 2] = [(2, 2), (1, 3)];
    /// The same for the BF16 gate + up entry points: 1 row of each matrix per warp, depth 2
    /// (k = 4096; no ring fits beside k = 14336's x).
    pub const MV_WR_HALF_GLU_RD: [(u32, u32); 1] = [(1, 2)];
    /// (tokens, rows per warp, ring depth) of the multi-token streamed entry points
    /// (`matvec_q4_0_wrt<NT>_r<R>_d<D>`, `select::MatvecKernel::WrTok`; Q4_0 only):
    /// `select` takes the fewest tokens that hold the launch's token vectors.
    pub const MV_WRT_TRD: [(u32, u32, u32); 2] = [(4, 2, 4), (8, 2, 4)];
    /// The same for the gate + up entry points (`matvec_q4_0_glu_wrt<NT>_r<R>_d<D>`).
    pub const MV_WRT_GLU_TRD: [(u32, u32, u32); 2] = [(4, 1, 4), (8, 1, 4)];
    /// Blocks per SM of the streamed entry points (`MV_WR_MINB` in matvec.cu: compiled for
    /// it, at most 128 registers): a launch's grid is at most this many per SM, and its shared
    /// memory leaves room for them.
    pub const MV_WR_BLOCKS_PER_SM: usize = 2;
    /// Most token vectors one matvec launch takes on the row paths (decode, verification:
    /// their activation buffers hold this many rows).
    pub const MV_MAX_TOK: usize = 8;
    /// Most token vectors one launch of the batched entry points takes (they loop over
    /// groups of `MV_BATCH_TOK`; a block's later groups re-read its rows from L1/L2): the
    /// batched decode step's rows (`decode/batch.rs`) and a prompt pass's matvecs.
    pub const MV_LAUNCH_MAX_TOK: usize = PREFILL_ROWS;
    /// Token vectors the batched matvec entry points (`matvec_<fmt>_tb_r<R>`,
    /// `matvec_<fmt>_glu_tb_r<R>`) serve per pass over the weights.
    pub const MV_BATCH_TOK: usize = 8;
    /// Rows per warp of the batched matvec entry points (one variant: each staged x value
    /// serves two rows, and NVRTC time stays bounded).
    pub const MV_BATCH_ROWS_PER_WARP: [u32; 1] = [2];
    /// Rows per warp (of each matrix) of the batched gate/up entry points.
    pub const MV_BATCH_GLU_ROWS_PER_WARP: [u32; 1] = [1];
    /// Warps per tensor-core prompt-pass block (`gemm.cu`; each takes a contiguous share
    /// of every row's chunks, summed in warp order).
    /// (16: the plain products of an 8B model have 128 blocks or fewer, one per SM: 16 warps
    /// of at most 128 registers hide latency with twice the warps of 8 of 144 registers.)
    pub const GEMM_WARPS: u32 = 16;
    /// 16-row MMA tiles per warp of `gemm.cu`'s plain products (a block owns
    /// `16 * GEMM_MT` rows).
    pub const GEMM_MT: usize = 2;
    /// 16-row MMA tiles per warp (of each matrix) of `gemm.cu`'s gate + up products.
    pub const GEMM_MT_GLU: usize = 1;
    /// Row groups per `gemm.cu` block of the plain products (`rg`: the block's warps split
    /// into `rg` groups of rows, each splitting k among `GEMM_WARPS / rg` warps).
    pub const GEMM_RG: u32 = 1;
    /// Row groups per block of the gate + up products (one 16-row tile per warp: 2 groups
    /// make 32-row blocks whose two warps per k range share their x loads through L1).
    pub const GEMM_RG_GLU: u32 = 2;
    /// Chunks whose weights a `gemm.cu` warp loads before their MMAs (1: with 16 warps and
    /// 64 rows the 128-register cap leaves no room for a second chunk without spills).
    pub const GEMM_U: usize = 1;
    /// Prompt rows per pass of `CudaDecoder::prefill` (the body's activation buffers of a
    /// prompt pass hold this many rows; decode, verification and batched decode keep
    /// `MV_MAX_TOK`).
    pub const PREFILL_ROWS: usize = 64;
    /// Token rows per tensor-core pass (the MMA's N, as `GEMM_N / 8` n-tiles of 8): the
    /// prompt pass's rows.
    pub const GEMM_N: usize = PREFILL_ROWS;
    const _: () = assert!(GEMM_N % 8 == 0 && PREFILL_ROWS % MV_MAX_TOK == 0);
    /// Warps per `mmv.cu` block (the decode products on tensor cores): the block owns one
    /// 16-row tile, its warps split the block's chunk range (summed in warp order).
    pub const MMV_WARPS: u32 = 8;
    /// Chunks whose weights an `mmv.cu` lane loads before their MMAs (plain products with
    /// up to 4 n-tiles; 8 n-tiles take 2).
    pub const MMV_U: usize = 4;
    /// The same for the gate + up products (two matrices per chunk).
    pub const MMV_U_GLU: usize = 2;
    /// `mmv.cu` variants (`sources::MMV_TUNING`; 0 = off): blocks per SM of the launch
    /// bounds, pipelined weight rounds, the Q4_0 k map of `MmvQ4_0m`, the two-pass `_x1`
    /// staging, blocks per SM of a tile-looping grid (`ops::mmv`).
    pub const MMV_MINB: u32 = 0;
    pub const MMV_PIPE: u32 = 0;
    pub const MMV_Q4MAP: u32 = 0;
    pub const MMV_XSTAGE: u32 = 0;
    pub const MMV_PERSIST: u32 = 0;
    /// One-token k + v products in one launch (`mmv_<fmt>_pair_x1`; decode/mmv.rs).
    pub const MMV_PAIR: u32 = 0;
    /// A row's 4 chunk scales in one load (rounds of 4k chunks; mmv.cu `MmvLdq`).
    pub const MMV_SVEC: u32 = 0;
    /// Most token vectors per `mmv.cu` launch: the staging buffer's slots (`GemmX`, shared
    /// with the prompt pass).
    pub const MMV_N: usize = GEMM_N;
    /// n-tile counts of the `mmv.cu` entry points (`mmv_<fmt>[_glu]_nt<NT>`): a launch for
    /// n tokens takes the smallest NT with 8 NT >= n.
    pub const MMV_NT: [usize; 4] = [1, 2, 4, 8];
    const _: () = assert!(MMV_N == 8 * 8);
    const _: () = assert!(MV_LAUNCH_MAX_TOK >= MV_MAX_TOK);
    /// Threads per block of `rope_kv_pass` (rope.cu `ROPE_PASS_THREADS`).
    pub const ROPE_PASS_THREADS: u32 = 256;
    /// Most angle pairs per token `rope_kv_pass` holds in shared memory (rope.cu
    /// `ROPE_PASS_MAX_HALF`: n_rot <= 512).
    pub const ROPE_PASS_MAX_HALF: usize = 256;
    /// Threads per RMSNorm block.
    pub const NORM_THREADS: u32 = 256;
    // A norm folded into a matvec (matvec.cu) repeats norm.cu's reduction with the
    // matvec block's threads: the counts must agree for the same bits.
    const _: () = assert!(NORM_THREADS == MV_WARPS * 32);
    /// KV positions per attention split (absolute, fixed boundaries).
    pub const ATT_SPLIT: usize = 64;
    /// Positions per block of the paged KV cache (`KV_BLOCK` in kernels/common/common.cuh,
    /// fixed there: a test checks the two agree): one attention split.
    pub const KV_BLOCK: usize = 64;
    const _: () = assert!(KV_BLOCK == ATT_SPLIT);
    /// Positions per split of the prompt pass's split attention (flash4,
    /// `attn_prefill_pk1s_d<HD>`; `ATT_PREFILL_SPLIT` in attention.cu): a multiple of KV_BLOCK.
    pub const ATT_PREFILL_SPLIT: usize = 1024;
    const _: () = assert!(ATT_PREFILL_SPLIT % KV_BLOCK == 0);
    /// Most warps per attention split block (one block serves the query heads of one KV
    /// head: `select::attention_warps`).
    pub const ATT_WARPS: u32 = 8;
    /// Most query heads per KV head the attention kernel takes (2 per warp).
    pub const ATT_MAX_GROUP: usize = 2 * ATT_WARPS as usize;
    /// Largest head size the attention kernel takes.
    pub const ATT_MAX_HD: usize = 256;
    /// Threads of the one sampling block.
    pub const SAMPLE_THREADS: u32 = 1024;
    /// Most candidates the sampling kernel sorts (a multiple of `SAMPLE_THREADS`): the top
    /// `min(top_k, SAMPLE_CAP)` tokens; top-p / min-p survivors beyond them make the step
    /// fall back to the CPU chain (see `kernels/sample.cu`).
    pub const SAMPLE_CAP: usize = 4096;
}

/// The environment variable of the `mmv.cu` tuning arms ([`mmv_tuning_defines`]).
pub const MMV_DEFS_ENV: &str = "ASSAY_MMV_DEFS";

/// The `mmv.cu` tuning defines a window may A/B without a rebuild, and their largest value.
/// None of them changes the arithmetic of a row except `MMV_Q4MAP` (another k map of the
/// Q4_0 A fragments, the same for every n: its bits differ from the default map's, a token's
/// bits still do not depend on n): `MMV_U` / `MMV_U_GLU` (chunks loaded per round),
/// `MMV_MINB` (blocks per SM of the launch bounds, 0 = the default bounds), `MMV_PIPE` (the
/// next round's loads issued before this round's MMAs), `MMV_XSTAGE` (the `_x1` staging in
/// two passes over x, the same bits), `MMV_PERSIST` (blocks per SM: a block loops over
/// tiles, `ops::mmv` launches at most that many per SM), `MMV_PAIR` (one-token k + v in one
/// launch, `_pair_x1`: read by the decoder; the same bits), `MMV_SVEC` (4 scales of a row
/// in one 8-byte load; the same bits).
pub const MMV_TUNING: [(&str, u32); 9] = [
    ("MMV_U", 16),
    ("MMV_U_GLU", 8),
    ("MMV_MINB", 4),
    ("MMV_PIPE", 1),
    ("MMV_Q4MAP", 1),
    ("MMV_XSTAGE", 1),
    ("MMV_PERSIST", 8),
    ("MMV_PAIR", 1),
    ("MMV_SVEC", 1),
];

/// `ASSAY_MMV_DEFS` of this process, read once (the compiled mmv.cu and the launch shapes
/// of `ops::mmv` must agree: `MMV_PERSIST` is both).
pub fn mmv_env_defines() -> &'static Result<Vec<String>, String> {
    static DEFS: std::sync::OnceLock<Result<Vec<String>, String>> = std::sync::OnceLock::new();
    DEFS.get_or_init(|| mmv_tuning_defines(std::env::var(MMV_DEFS_ENV).ok().as_deref()))
}

/// The value mmv.cu is compiled with for define `name` in this process: the last of
/// [`Family::defines`] (the consts, then `ASSAY_MMV_DEFS`); 0 when absent.
pub fn mmv_define_value(name: &str) -> u32 {
    let pre = format!("-D{name}=");
    Family::Mmv
        .defines()
        .iter()
        .rev()
        .find_map(|o| o.strip_prefix(&pre).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// `ASSAY_MMV_DEFS` (`NAME=VALUE,...`, names of [`MMV_TUNING`], values 0..=its largest) as
/// `-D` options appended to mmv.cu's; unset or empty: none. Anything else is an error.
pub fn mmv_tuning_defines(v: Option<&str>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in v
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
    {
        let bad = || format!("{MMV_DEFS_ENV}: {item:?} is not NAME=VALUE of {MMV_TUNING:?}");
        let (name, val) = item.split_once('=').ok_or_else(bad)?;
        let val: u32 = val.trim().parse().map_err(|_| bad())?;
        let (_, max) = MMV_TUNING
            .iter()
            .find(|(n, _)| *n == name.trim())
            .ok_or_else(bad)?;
        let min = u32::from(name.trim() == "MMV_U" || name.trim() == "MMV_U_GLU");
        if val < min || val > *max {
            return Err(bad());
        }
        out.push(format!("-D{}={val}", name.trim()));
    }
    Ok(out)
}

/// A kernel family: one `.cu` file compiled into one module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Argmax,
    Attention,
    Elementwise,
    Embed,
    /// `gemm.cu`: the tensor-core prompt pass (x staging, the 64-row kernel).
    Gemm,
    /// `gemmt.cu`: the tiled prompt pass (weights decoded to 16-bit floats, dense GEMM).
    Gemmt,
    Mask,
    Matvec,
    /// `mmv.cu`: the decode products on tensor cores (`ASSAY_MMV=1`).
    Mmv,
    /// `matvec.cu` again, its batched entry points (`-DMV_PART=2`; Matvec holds the
    /// one-token ones, `-DMV_PART=1`): two compilations that run in parallel.
    MatvecBatch,
    Norm,
    Rope,
    Sample,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 13] = [
        Family::Argmax,
        Family::Attention,
        Family::Elementwise,
        Family::Embed,
        Family::Gemm,
        Family::Gemmt,
        Family::Mask,
        Family::Matvec,
        Family::MatvecBatch,
        Family::Mmv,
        Family::Norm,
        Family::Rope,
        Family::Sample,
    ];

    /// The family's source file under `kernels/`.
    pub fn file(self) -> &'static str {
        match self {
            Family::Argmax => "argmax.cu",
            Family::Attention => "attention.cu",
            Family::Elementwise => "elementwise.cu",
            Family::Embed => "embed.cu",
            Family::Gemm => "gemm.cu",
            Family::Gemmt => "gemmt.cu",
            Family::Mask => "mask.cu",
            Family::Matvec | Family::MatvecBatch => "matvec.cu",
            Family::Mmv => "mmv.cu",
            Family::Norm => "norm.cu",
            Family::Rope => "rope.cu",
            Family::Sample => "sample.cu",
        }
    }

    /// The `-D` defines this family is compiled with.
    pub fn defines(self) -> Vec<String> {
        use consts::*;
        match self {
            Family::Matvec | Family::MatvecBatch => {
                vec![
                    format!("-DMV_WARPS={MV_WARPS}"),
                    format!("-DMV_MAX_TOK={MV_MAX_TOK}"),
                    format!("-DMV_TILE={MV_TILE}"),
                    format!("-DMV_BATCH_TOK={MV_BATCH_TOK}"),
                    format!("-DMV_PART={}", if self == Family::Matvec { 1 } else { 2 }),
                ]
            }
            Family::Gemm => vec![
                format!("-DGEMM_WARPS={GEMM_WARPS}"),
                format!("-DGEMM_MT={GEMM_MT}"),
                format!("-DGEMM_MT_GLU={GEMM_MT_GLU}"),
                format!("-DGEMM_N={GEMM_N}"),
                format!("-DGEMM_U={GEMM_U}"),
            ],
            Family::Mmv => {
                let mut d = vec![
                    format!("-DMMV_WARPS={MMV_WARPS}"),
                    format!("-DMMV_N={MMV_N}"),
                    format!("-DMMV_U={MMV_U}"),
                    format!("-DMMV_U_GLU={MMV_U_GLU}"),
                    format!("-DMMV_MINB={MMV_MINB}"),
                    format!("-DMMV_PIPE={MMV_PIPE}"),
                    format!("-DMMV_Q4MAP={MMV_Q4MAP}"),
                    format!("-DMMV_XSTAGE={MMV_XSTAGE}"),
                    format!("-DMMV_PERSIST={MMV_PERSIST}"),
                    format!("-DMMV_PAIR={MMV_PAIR}"),
                    format!("-DMMV_SVEC={MMV_SVEC}"),
                ];
                // Tuning arms (`ASSAY_MMV_DEFS`): later defines override the ones above; a
                // bad value compiles mmv.cu with MMV_BAD_DEFS (an #error), never silently.
                match mmv_env_defines() {
                    Ok(extra) => d.extend(extra.iter().cloned()),
                    Err(_) => d.push("-DMMV_BAD_DEFS=1".into()),
                }
                d
            }
            Family::Norm => vec![format!("-DNORM_THREADS={NORM_THREADS}")],
            Family::Attention => vec![
                format!("-DATT_SPLIT={ATT_SPLIT}"),
                format!("-DATT_PREFILL_SPLIT={ATT_PREFILL_SPLIT}"),
                format!("-DATT_WARPS={ATT_WARPS}"),
                format!("-DATT_MAX_HD={ATT_MAX_HD}"),
            ],
            Family::Sample => vec![
                format!("-DSAMPLE_THREADS={SAMPLE_THREADS}"),
                format!("-DSAMPLE_CAP={SAMPLE_CAP}"),
            ],
            Family::Rope => vec![
                format!("-DROPE_PASS_THREADS={ROPE_PASS_THREADS}"),
                format!("-DROPE_PASS_MAX_HALF={ROPE_PASS_MAX_HALF}"),
            ],
            Family::Argmax | Family::Elementwise | Family::Embed | Family::Gemmt | Family::Mask => {
                Vec::new()
            }
        }
    }

    /// The entry points the wrappers load from this family's module.
    pub fn entry_points(self) -> Vec<String> {
        let per_format = |prefix: &str| {
            super::select::KERNEL_FORMATS
                .iter()
                .map(|f| format!("{prefix}_{}", super::select::format_suffix(*f)))
                .collect()
        };
        match self {
            Family::Argmax => vec!["argmax_rows".into()],
            Family::Attention => {
                vec![
                    "attn_partial".into(),
                    "attn_partial_d64".into(),
                    "attn_partial_d128".into(),
                    "attn_partial_d256".into(),
                    "attn_combine".into(),
                    "kv_store".into(),
                    "attn_rows".into(),
                    "attn_rows_d64".into(),
                    "attn_rows_d128".into(),
                    "attn_rows_d256".into(),
                    "attn_prefill_d64".into(),
                    "attn_prefill_d128".into(),
                    "attn_prefill_pk_d64".into(),
                    "attn_prefill_pk_d128".into(),
                    "attn_prefill_pk1_d64".into(),
                    "attn_prefill_pk1_d128".into(),
                    "attn_prefill_pk1s_d64".into(),
                    "attn_prefill_pk1s_d128".into(),
                    "attn_prefill_combine".into(),
                ]
            }
            Family::Elementwise => {
                vec![
                    "gated_act".into(),
                    "add".into(),
                    "scale_inplace".into(),
                    "softcap_inplace".into(),
                ]
            }
            Family::Embed => per_format("embed"),
            Family::Gemm => ["gemm_stage_x".to_string(), "gemm_stage_x_bf16".to_string()]
                .into_iter()
                .chain(super::select::GEMM_FORMATS.iter().flat_map(|f| {
                    let s = super::select::format_suffix(*f);
                    [format!("gemm_{s}"), format!("gemm_{s}_glu")]
                }))
                .collect(),
            Family::Gemmt => per_format("gemmt_dq")
                .into_iter()
                .chain(["f16", "bf16"].iter().flat_map(|s| {
                    super::select::GEMMT_TILES_M.iter().flat_map(move |m| {
                        [1, 2].iter().flat_map(move |p| {
                            [
                                format!("gemmt_{s}_m{m}_p{p}"),
                                format!("gemmt_{s}_glu_m{m}_p{p}"),
                            ]
                        })
                    })
                }))
                // Quants decoded in the tile loop (x in one part).
                .chain(["q4_0", "q8_0"].iter().flat_map(|s| {
                    super::select::GEMMT_TILES_M.iter().flat_map(move |m| {
                        [
                            format!("gemmt_{s}_m{m}_p1"),
                            format!("gemmt_{s}_glu_m{m}_p1"),
                        ]
                    })
                }))
                // The warpgroup-MMA kernel (x in one part).
                .chain(["f16", "q4_0", "q8_0", "bf16"].iter().flat_map(|s| {
                    super::select::GEMMW_BN.iter().flat_map(move |b| {
                        [format!("gemmt_{s}_w{b}"), format!("gemmt_{s}_glu_w{b}")]
                    })
                }))
                // Section 4: the TMA warp-specialised kernel (F16, Q4_0, Q8_0, BF16; x in one
                // part).
                .chain(super::select::GEMMTM_KINDS.iter().flat_map(|f| {
                    let s = super::select::format_suffix(*f);
                    super::select::GEMMTM_TN.iter().flat_map(move |t| {
                        [format!("gemmt_{s}_tm{t}"), format!("gemmt_{s}_glu_tm{t}")]
                    })
                }))
                .collect(),
            Family::Mask => vec!["mask_logits".into()],
            Family::Mmv => super::select::MMV_FORMATS
                .iter()
                .flat_map(|f| {
                    let s = super::select::format_suffix(*f);
                    consts::MMV_NT
                        .iter()
                        .flat_map(move |nt| {
                            [format!("mmv_{s}_nt{nt}"), format!("mmv_{s}_glu_nt{nt}")]
                        })
                        .chain([
                            format!("mmv_{s}_x1"),
                            format!("mmv_{s}_glu_x1"),
                            format!("mmv_{s}_pair_x1"),
                        ])
                })
                .collect(),
            Family::Matvec => per_format("matvec")
                .into_iter()
                .flat_map(|n: String| {
                    let plain = consts::MV_ROWS_PER_WARP.iter().map(|r| format!("{n}_r{r}"));
                    let glu = consts::MV_GLU_ROWS_PER_WARP
                        .iter()
                        .map(|r| format!("{n}_glu_r{r}"));
                    let pair = consts::MV_PAIR_ROWS_PER_WARP
                        .iter()
                        .map(|r| format!("{n}_pair_r{r}"));
                    plain.chain(glu).chain(pair).collect::<Vec<_>>()
                })
                // The streamed one-token kernel.
                .chain(super::select::MV_WR_FORMATS.iter().flat_map(|f| {
                    let s = super::select::format_suffix(*f);
                    let rd = super::select::mv_wr_rd(*f, false);
                    let plain = rd
                        .iter()
                        .map(move |(r, d)| format!("matvec_{s}_wr_r{r}_d{d}"));
                    let glu = super::select::mv_wr_rd(*f, true)
                        .iter()
                        .map(move |(r, d)| format!("matvec_{s}_glu_wr_r{r}_d{d}"));
                    let segs = rd.iter().map(move |(r, d)| {
                        format!("matvec_{s}_seg{}_wr_r{r}_d{d}", consts::MV_WR_SEGS)
                    });
                    // The segmented launch with rope_kv in its epilogue (ASSAY_ROPE_FUSE), for
                    // the formats of select::ROPE_FUSE_FORMATS (not BF16's list).
                    let rope_rd: &'static [(u32, u32)] =
                        if super::select::ROPE_FUSE_FORMATS.contains(f) {
                            &consts::MV_WR_RD
                        } else {
                            &[]
                        };
                    let rope = rope_rd.iter().map(move |(r, d)| {
                        format!("matvec_{s}_seg{}rope_wr_r{r}_d{d}", consts::MV_WR_SEGS)
                    });
                    plain.chain(glu).chain(segs).chain(rope)
                }))
                // The multi-token streamed kernel (Q4_0 only).
                .chain({
                    let s = super::select::format_suffix(crate::quant::QuantFormat::Q4_0);
                    let plain = consts::MV_WRT_TRD
                        .iter()
                        .map(move |(t, r, d)| format!("matvec_{s}_wrt{t}_r{r}_d{d}"));
                    let glu = consts::MV_WRT_GLU_TRD
                        .iter()
                        .map(move |(t, r, d)| format!("matvec_{s}_glu_wrt{t}_r{r}_d{d}"));
                    plain.chain(glu)
                })
                .collect(),
            Family::MatvecBatch => per_format("matvec")
                .into_iter()
                .flat_map(|n: String| {
                    let batch = consts::MV_BATCH_ROWS_PER_WARP
                        .iter()
                        .map(|r| format!("{n}_tb_r{r}"));
                    let batch_glu = consts::MV_BATCH_GLU_ROWS_PER_WARP
                        .iter()
                        .map(|r| format!("{n}_glu_tb_r{r}"))
                        .collect::<Vec<_>>();
                    batch.chain(batch_glu).collect::<Vec<_>>()
                })
                .collect(),
            Family::Norm => vec!["rmsnorm".into()],
            Family::Rope => vec![
                "rope".into(),
                "rope_kv".into(),
                "rope_kv_rows".into(),
                "rope_kv_pass".into(),
            ],
            Family::Sample => vec!["sample_row".into()],
        }
    }
}

/// The embedded source at `path`, if any.
pub fn source(path: &str) -> Option<&'static str> {
    SOURCES.iter().find(|s| s.path == path).map(|s| s.text)
}

/// The family's source with every `#include "..."` of an embedded file replaced by that
/// file's text (each file once; `#pragma once` lines dropped).
pub fn expand(family: Family) -> Result<String, CudaError> {
    let file = family.file();
    let text = source(file).ok_or_else(|| CudaError::MissingInclude {
        file: "(engine)".into(),
        include: file.into(),
    })?;
    let mut out = String::with_capacity(text.len() * 2);
    let mut seen = Vec::new();
    expand_into(file, text, &mut seen, &mut out)?;
    Ok(out)
}

fn expand_into(
    file: &str,
    text: &str,
    seen: &mut Vec<String>,
    out: &mut String,
) -> Result<(), CudaError> {
    for line in text.lines() {
        let t = line.trim();
        if t == "#pragma once" {
            continue;
        }
        if let Some(rest) = t.strip_prefix("#include") {
            let name = rest.trim().trim_matches('"');
            if rest.trim().starts_with('"') {
                if !seen.iter().any(|s| s == name) {
                    seen.push(name.to_string());
                    let inc = source(name).ok_or_else(|| CudaError::MissingInclude {
                        file: file.into(),
                        include: name.into(),
                    })?;
                    expand_into(name, inc, seen, out)?;
                }
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(())
}

/// The kernel identity: sha256 over every source (sorted by path) as
/// `path NUL length(u64 LE) text`, in lowercase hex.
pub fn kernel_identity() -> String {
    identity_of(SOURCES)
}

fn identity_of(sources: &[KernelSource]) -> String {
    let mut sorted: Vec<&KernelSource> = sources.iter().collect();
    sorted.sort_by_key(|s| s.path);
    let mut h = Sha256::new();
    for s in sorted {
        h.update(s.path.as_bytes());
        h.update([0u8]);
        h.update((s.text.len() as u64).to_le_bytes());
        h.update(s.text.as_bytes());
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
#[path = "sources_tests.rs"]
mod tests;
