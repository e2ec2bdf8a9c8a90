//! The prompt pass's GEMM kernel: `gemm.cu`'s 64-row pass ([`GemmKernel::V1`]) or
//! `gemmt.cu`'s tiled GEMM over weights decoded to 16-bit floats ([`GemmKernel::Tiled`]),
//! and the tiled kernel's shape constants (they must match `gemmt.cu`'s `GT_*` defines).

use crate::quant::QuantFormat;

/// Tokens per tiled block (`BM` of `gemmt_<kind>[_glu]_m<BM>_p<P>`): the tile heights
/// there are entry points for, largest first.
pub const GEMMT_TILES_M: [usize; 2] = [128, 64];
/// Weight rows per tiled block (`GT_BN`).
pub const GEMMT_BN: usize = 128;
/// Values of k per pipeline stage (`GT_BK`): k must be a multiple of it.
pub const GEMMT_BK: usize = 32;
/// Pipeline stages (`GT_ST`).
pub const GEMMT_STAGES: usize = 3;
/// Shared-memory row stride in 16-bit values (`GT_LD`).
pub const GEMMT_LD: usize = 40;
/// Rows of gate, then of up, per tile of the gate + up kernel (`GT_GLU_G`; a block's
/// `GEMMT_BN` columns are that many rows of each).
pub const GEMMT_GLU_G: usize = 64;
/// Most products one plain launch multiplies (the kernel's segments: q, k and v).
pub const GEMMT_MAX_SEGS: usize = 3;

/// Dynamic shared memory of one tiled launch of `bm`-token tiles with x in `parts` parts.
pub const fn gemmt_shared_bytes(parts: usize, bm: usize, glu: bool) -> usize {
    let pipe = GEMMT_STAGES * (parts * bm + GEMMT_BN) * GEMMT_LD * 2;
    let epi = if glu { bm * (GEMMT_BN + 4) * 4 } else { 0 };
    if pipe > epi { pipe } else { epi }
}

/// The most any mma.sync tiled launch uses (two blocks per SM on the H200).
pub const GEMMT_MMA_MAX_SHARED_BYTES: usize = {
    let a = gemmt_shared_bytes(2, GEMMT_TILES_M[0], true);
    let b = gemmt_shared_bytes(2, GEMMT_TILES_M[0], false);
    if a > b { a } else { b }
};

/// Tokens per block of the warpgroup-MMA kernel (`GW_BM`: two warpgroups of 64).
pub const GEMMW_BM: usize = 128;
/// Weight rows per block of the warpgroup-MMA kernel (`gemmt_<kind>[_glu]_w<BN>`).
pub const GEMMW_BN: [usize; 2] = [128, 256];
/// Values of k per stage (`GW_BK`): k must be a multiple of it.
pub const GEMMW_BK: usize = 64;
/// Pipeline stages (`GW_ST`).
pub const GEMMW_STAGES: usize = 4;

/// Dynamic shared memory of one warpgroup-MMA launch of `bn`-row tiles: the stages of 128
/// x rows and `bn` weight rows of 128 bytes (or the gate + up epilogue's floats, when
/// larger), plus 1024 bytes to align the first stage for the 128-byte swizzle.
pub const fn gemmw_shared_bytes(bn: usize, glu: bool) -> usize {
    let pipe = GEMMW_STAGES * (GEMMW_BM + bn) * GEMMW_BK * 2;
    let epi = if glu { GEMMW_BM * (bn + 4) * 4 } else { 0 };
    (if pipe > epi { pipe } else { epi }) + 1024
}

/// The most any tiled launch uses (set as the functions' limit).
pub const GEMMT_MAX_SHARED_BYTES: usize = {
    let w = gemmw_shared_bytes(GEMMW_BN[1], true);
    if w > GEMMT_MMA_MAX_SHARED_BYTES {
        w
    } else {
        GEMMT_MMA_MAX_SHARED_BYTES
    }
};

/// Whether a launch over `n` tokens with x in `parts` parts runs on the warpgroup MMA
/// (`gemmt.cu` section 3): sm_90a (compute capability 9.0, the arch the engine compiles
/// Hopper for), x in one part, and more than 64 tokens (a block takes 128; shorter passes
/// keep the mma.sync kernel's 64-token tiles). The two kernels give the same bits
/// (kernel-check `gemmt` compares them).
pub fn gemmt_wgmma(cc: (i32, i32), parts: u32, n: usize) -> bool {
    cc == (9, 0) && parts == 1 && n > GEMMT_TILES_M[1]
}

/// Whether `name` is a warpgroup-MMA entry point (`gemmt_<kind>[_glu]_w<BN>`).
pub fn is_gemmw_entry(name: &str) -> bool {
    name.starts_with("gemmt_")
        && name
            .rsplit_once("_w")
            .is_some_and(|(_, bn)| !bn.is_empty() && bn.bytes().all(|b| b.is_ascii_digit()))
}

/// Weight rows per warpgroup-MMA block for `n` tokens and `rows` tile rows in all
/// (gate + up: twice the gate's rows): 256 when such a grid still has at least 96 blocks,
/// else 128. Session 12's draft (research/notes/wgmma/README.md, TFLOP/s n128 / n256): 512
/// tokens q+k+v (6144 rows) 293 / 344, o (4096) 364 / 244, gate+up (28672) 398 / 408, down
/// (4096, k 14336) 440 / 280; 2048 tokens gate+up 417 / 481, down 449 / 539.
pub fn gemmw_tile_n(n: usize, rows: usize) -> usize {
    let blocks = n.div_ceil(GEMMW_BM) * rows.div_ceil(GEMMW_BN[1]);
    if blocks >= 96 {
        GEMMW_BN[1]
    } else {
        GEMMW_BN[0]
    }
}

/// kernels/gemmt.cu section 4 (`gemmt_<f16|q4_0|q8_0|bf16>[_glu]_tm<TN>`, sm_90a): 128
/// weight rows x TN (one of these) tokens per block, warp-specialised (a TMA producer
/// warpgroup, two wgmma consumers), stages of 64 values.
pub const GEMMTM_TN: [usize; 2] = [128, 256];
pub const GEMMTM_WR: usize = 128;
pub const GEMMTM_BK: usize = 64;
pub const GEMMTM_THREADS: u32 = 384;
/// The kernels' tensor-map parameter (`GtmMaps`: x, three weight maps, three scale maps,
/// 128 bytes each).
pub const GEMMTM_MAPS_BYTES: usize = 7 * 128;

/// Bytes of one stage's weight tile in section 4 for weights of `kind` (the kernel's
/// `GtmCfg::WBYTES`): 128 rows of 64 values, F16 / BF16 128 bytes each, Q4_0 32 quant bytes
/// + 16 bytes of scales, Q8_0 64 + 16.
pub const fn gemmtm_weight_stage_bytes(kind: QuantFormat) -> usize {
    match kind {
        QuantFormat::Q4_0 => GEMMTM_WR * (32 + 16),
        QuantFormat::Q8_0 => GEMMTM_WR * (64 + 16),
        _ => GEMMTM_WR * 128,
    }
}

/// The weight kinds section 4 has entries for (`gemmt_<kind>[_glu]_tm<TN>`): F16 (in place or
/// any format decoded into the scratch), Q4_0 and Q8_0 decoded in the registers, BF16
/// converted to f16 in the registers.
pub const GEMMTM_KINDS: [QuantFormat; 4] = [
    QuantFormat::F16,
    QuantFormat::Q4_0,
    QuantFormat::Q8_0,
    QuantFormat::BF16,
];

/// Dynamic shared memory of a section 4 launch (the kernel's `GtmCfg::SMEM`): stages of TN
/// x rows plus the weight tile ([`gemmtm_weight_stage_bytes`]), as many as fit 192 KiB up
/// to 8, or the gate + up epilogue's [TN][132] floats if larger (the kernel reserves it
/// whether or not it is gate + up), + 1024 to align.
pub const fn gemmtm_shared_bytes(kind: QuantFormat, tn: usize) -> usize {
    let stage = tn * 128 + gemmtm_weight_stage_bytes(kind);
    let st = if 196608 / stage > 8 {
        8
    } else {
        196608 / stage
    };
    let epi = tn * (GEMMTM_WR + 4) * 4;
    (if st * stage > epi { st * stage } else { epi }) + 1024
}

/// The largest section 4 launch's dynamic shared memory (the opt-in set at load).
pub const GEMMTM_MAX_SHARED_BYTES: usize = {
    let mut m = 0;
    let mut i = 0;
    while i < 2 * GEMMTM_KINDS.len() {
        let b = gemmtm_shared_bytes(GEMMTM_KINDS[i >> 1], GEMMTM_TN[i & 1]);
        if b > m {
            m = b;
        }
        i += 1;
    }
    m
};

/// Whether a warpgroup-MMA launch (one [`gemmt_wgmma`] chose) takes section 4's TMA kernel
/// instead of section 3's: on sm_90a, x in one part, the weights read as F16 (in place or
/// decoded into the scratch: `kind` F16), Q4_0 / Q8_0 decoded in the loop or BF16 converted
/// to f16 in the loop (`kind` the format: the kinds section 3 decodes in its loop), k a
/// multiple of its 64-value stages (Q4_0 / Q8_0: of 256, so that the scale rows' stride,
/// k / 16 bytes, is a multiple of the TMA's 16 bytes; the quant rows', k / 2 or k bytes, then
/// are too), and every product's rows (`seg_rows`; gate and up: the gate's rows) a positive
/// multiple of 64 (a block's 64-row half then lies in one product). Its bits are section
/// 3's (kernel-check's `tm` lines).
pub fn gemmt_tm(
    cc: (i32, i32),
    parts: u32,
    kind: QuantFormat,
    k: usize,
    seg_rows: &[usize],
) -> bool {
    let k_ok = match kind {
        QuantFormat::F16 | QuantFormat::BF16 => k % GEMMTM_BK == 0,
        QuantFormat::Q4_0 | QuantFormat::Q8_0 => k % 256 == 0,
        _ => false,
    };
    cc == (9, 0)
        && parts == 1
        && k_ok
        && k > 0
        && !seg_rows.is_empty()
        && seg_rows.iter().all(|&r| r > 0 && r % 64 == 0)
}

/// Whether `name` is a section 4 entry (`..._tm<TN>`).
pub fn is_gemmtm_entry(name: &str) -> bool {
    name.starts_with("gemmt_")
        && name
            .rsplit_once("_tm")
            .is_some_and(|(_, tn)| !tn.is_empty() && tn.bytes().all(|b| b.is_ascii_digit()))
}

/// Tokens per section 4 block for `n` tokens and `rows` tile rows in all (gate + up: twice
/// the gate's rows): 256 when such a grid still has at least 96 blocks, else 128 (the rule
/// of [`gemmw_tile_n`] with the roles swapped; on the H200 it picked the faster tile on
/// every 8B product at 512 and 2048 tokens, research/notes/wgmma2/README.md), and only
/// when n has 256 tokens: the host launches section 4 only with TN <= n, so that x's TMA box
/// never exceeds x's rows (whether a box may be taller than its tensor is not settled here;
/// the rows of a partial last tile past n are read as zeros either way).
pub fn gemmtm_tile_n(n: usize, rows: usize) -> usize {
    let blocks = n.div_ceil(GEMMTM_TN[1]) * rows.div_ceil(GEMMTM_WR);
    if blocks >= 96 && n >= GEMMTM_TN[1] {
        GEMMTM_TN[1]
    } else {
        GEMMTM_TN[0]
    }
}

/// Token rows per tile for a launch over `n` tokens, `col_tiles` tiles of weight rows and x
/// in `parts` parts on a device of `sms` multiprocessors (2 blocks each). Passes of at most
/// 64 tokens: 64. Else, x in one part: 128; x in two parts: 128 when that grid fills the
/// device at least twice over (gate + up at 8B: 4 x 224 blocks on 132 SMs), else 64 (twice
/// the blocks, each half as tall). Session 11 window 1, 8B (research/notes/s11/w1): with x
/// in one part (Q4_0) 128-token tiles everywhere were faster than this rule's 64 for
/// q + k + v, o and down (p512 9990 vs 9774 tok/s, p2048 6985 vs 6862); with two parts
/// (BF16) slower (8367 vs 8567). Tile height changes no bits (gemmt.cu: one accumulator per
/// output, k16 steps in k order).
pub fn gemmt_tile_m(n: usize, col_tiles: usize, sms: usize, parts: u32) -> usize {
    let (tall, short) = (GEMMT_TILES_M[0], GEMMT_TILES_M[1]);
    if n <= short {
        return short;
    }
    if parts == 1 {
        return tall;
    }
    let blocks = n.div_ceil(tall) * col_tiles;
    if blocks >= 4 * sms.max(1) {
        tall
    } else {
        short
    }
}

/// Parts of x the tiled kernel multiplies by default for weights of `format`: 1, x rounded
/// to f16 (with its power-of-two scale), for every format the kernel reads. The weights are
/// f16 too: the quants decoded to f16, F16 as it is, BF16 converted to f16 in the tile loop
/// (exact in f16's normal range; a matrix with a value past f16's range must take 2 parts,
/// see [`crate::cuda::ops::DeviceWeight::fits_f16`]). The f16 rounding of x is of the order
/// of the weights' own f16 rounding (the `prefill` gate's tolerance for the tiled kernel,
/// measured on the 8 synthetic families). With 2 parts, x is near-f32: f16 hi + lo, or for
/// BF16 weights (read in place as bf16) bf16 hi + mid.
pub fn gemmt_x_parts(_format: QuantFormat) -> u32 {
    1
}

/// Whether the tiled kernel decodes `format`'s weights inside its tile loop when x is in
/// `parts` parts (loaded into registers one stage ahead, stored to shared memory as f16: no
/// scratch pass): Q4_0 and Q8_0 (planar: a block's quants and scale are aligned loads) and
/// BF16 (each value converted to f16, round to nearest), with x in one part
/// (`gemmt_<q4_0|q8_0|bf16>[_glu]_m<BM>_p1`). The values are the scratch decode's bits
/// (the value rounded once to f16).
pub fn gemmt_fused(format: QuantFormat, parts: u32) -> bool {
    parts == 1
        && matches!(
            format,
            QuantFormat::Q4_0 | QuantFormat::Q8_0 | QuantFormat::BF16
        )
}

/// Whether the tiled kernel reads `format`'s weights in place as 16-bit floats, with no
/// decode, when x is in `parts` parts: F16 always, BF16 with x in two bf16 parts (the bf16
/// MMA).
pub fn gemmt_in_place(format: QuantFormat, parts: u32) -> bool {
    format == QuantFormat::F16 || (format == QuantFormat::BF16 && parts == 2)
}

/// Which kernel multiplies a prompt pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmKernel {
    /// `gemm.cu`: passes of 64 rows, quants as exact f16 integers, per-chunk scales.
    V1,
    /// `gemmt.cu`: the weights decoded to f16 (bf16 for BF16) once per product and pass,
    /// then a dense tiled GEMM over passes of hundreds of rows.
    Tiled,
}

impl GemmKernel {
    /// `v1` or `tiled`.
    pub fn parse(s: &str) -> Option<GemmKernel> {
        match s {
            "v1" => Some(GemmKernel::V1),
            "tiled" => Some(GemmKernel::Tiled),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GemmKernel::V1 => "v1",
            GemmKernel::Tiled => "tiled",
        }
    }
}

impl std::fmt::Display for GemmKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The 16-bit float a format's weights are multiplied as by the tiled kernel with x in
/// `parts` parts, or `None` when it has none: F32 (f16 would round away its precision and
/// range; it keeps the row path) and formats without a chunk decoder. bf16 only for BF16
/// weights with x in two parts; f16 for every other case (BF16 with one part: converted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    F16,
    Bf16,
}

pub fn gemmt_decoded(format: QuantFormat, parts: u32) -> Option<Decoded> {
    match format {
        QuantFormat::BF16 if parts == 2 => Some(Decoded::Bf16),
        QuantFormat::BF16 => Some(Decoded::F16),
        QuantFormat::F32 => None,
        f if super::KERNEL_FORMATS.contains(&f) => Some(Decoded::F16),
        _ => None,
    }
}

/// Whether the tiled kernel multiplies `format` on a device of compute capability `cc`
/// (cp.async and `mma.sync` f16 / bf16: sm_80).
pub fn gemmt_supported(format: QuantFormat, cc: (i32, i32)) -> bool {
    cc.0 >= 8 && gemmt_decoded(format, 1).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_parse_and_name() {
        for k in [GemmKernel::V1, GemmKernel::Tiled] {
            assert_eq!(GemmKernel::parse(k.name()), Some(k));
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!(GemmKernel::parse("v2"), None);
    }

    #[test]
    fn decoded_kinds_and_support() {
        assert_eq!(gemmt_decoded(QuantFormat::BF16, 2), Some(Decoded::Bf16));
        assert_eq!(gemmt_decoded(QuantFormat::BF16, 1), Some(Decoded::F16));
        for parts in [1, 2] {
            assert_eq!(gemmt_decoded(QuantFormat::Q4_0, parts), Some(Decoded::F16));
            assert_eq!(gemmt_decoded(QuantFormat::Q4_K, parts), Some(Decoded::F16));
            assert_eq!(gemmt_decoded(QuantFormat::F16, parts), Some(Decoded::F16));
            assert_eq!(gemmt_decoded(QuantFormat::F32, parts), None);
        }
        assert!(gemmt_supported(QuantFormat::Q4_0, (9, 0)));
        assert!(!gemmt_supported(QuantFormat::Q4_0, (7, 5)));
        assert!(!gemmt_supported(QuantFormat::F32, (9, 0)));
    }

    #[test]
    fn shared_bytes_fit_the_h200_and_cover_the_epilogue() {
        // Two parts: 3 stages of (256 + 128) rows of 80 bytes.
        assert_eq!(gemmt_shared_bytes(2, 128, false), 3 * 384 * 80);
        assert_eq!(gemmt_shared_bytes(2, 64, false), 3 * 256 * 80);
        // One part, gate + up: the epilogue's 128 x 132 floats are larger than the pipe.
        assert_eq!(gemmt_shared_bytes(1, 128, true), 128 * 132 * 4);
        for bm in GEMMT_TILES_M {
            for parts in [1, 2] {
                for glu in [false, true] {
                    assert!(gemmt_shared_bytes(parts, bm, glu) <= GEMMT_MAX_SHARED_BYTES);
                }
            }
        }
        // Two mma.sync blocks per SM on the H200 (227 KiB); one warpgroup-MMA block.
        const { assert!(2 * GEMMT_MMA_MAX_SHARED_BYTES <= 227 * 1024) };
        const { assert!(GEMMT_MAX_SHARED_BYTES <= 227 * 1024) };
        assert_eq!(gemmw_shared_bytes(128, false), 4 * 256 * 128 + 1024);
        assert_eq!(gemmw_shared_bytes(256, true), 4 * 384 * 128 + 1024);
        assert_eq!(GEMMT_MAX_SHARED_BYTES, gemmw_shared_bytes(256, true));
    }

    #[test]
    fn tile_height_follows_the_grid() {
        // 8B, a 512-row pass on 132 SMs, x in two parts: gate + up (224 column tiles) keep
        // 128-token tiles; q + k + v (48), o and down (32) take 64.
        assert_eq!(gemmt_tile_m(512, 224, 132, 2), 128);
        assert_eq!(gemmt_tile_m(512, 48, 132, 2), 64);
        assert_eq!(gemmt_tile_m(512, 32, 132, 2), 64);
        // Longer passes fill the device with tall tiles.
        assert_eq!(gemmt_tile_m(2048, 48, 132, 2), 128);
        // x in one part: tall tiles.
        assert_eq!(gemmt_tile_m(512, 32, 132, 1), 128);
        assert_eq!(gemmt_tile_m(65, 1, 132, 1), 128);
        // Short passes: 64 whatever the parts.
        assert_eq!(gemmt_tile_m(64, 224, 132, 1), 64);
        assert_eq!(gemmt_tile_m(1, 1, 0, 2), 64);
        assert!(GEMMT_TILES_M.contains(&gemmt_tile_m(100, 7, 16, 2)));
    }

    #[test]
    fn warpgroup_mma_choice_and_tiles() {
        assert!(gemmt_wgmma((9, 0), 1, 65));
        assert!(!gemmt_wgmma((9, 0), 1, 64));
        assert!(!gemmt_wgmma((9, 0), 2, 512));
        assert!(!gemmt_wgmma((8, 9), 1, 512));
        assert!(!gemmt_wgmma((12, 0), 1, 512));
        // 8B at 512 tokens: q + k + v and gate + up take 256 rows, o and down 128.
        assert_eq!(gemmw_tile_n(512, 6144), 256);
        assert_eq!(gemmw_tile_n(512, 28672), 256);
        assert_eq!(gemmw_tile_n(512, 4096), 128);
        assert_eq!(gemmw_tile_n(2048, 4096), 256);
        assert_eq!(gemmw_tile_n(65, 200), 128);
        assert!(is_gemmw_entry("gemmt_q4_0_glu_w256"));
        assert!(is_gemmw_entry("gemmt_f16_w128"));
        assert!(!is_gemmw_entry("gemmt_q4_0_glu_m128_p1"));
        assert!(!is_gemmw_entry("gemmt_dq_q4_0"));
    }

    #[test]
    fn fused_decode_formats() {
        assert!(gemmt_fused(QuantFormat::Q4_0, 1));
        assert!(gemmt_fused(QuantFormat::Q8_0, 1));
        assert!(gemmt_fused(QuantFormat::BF16, 1));
        assert!(!gemmt_fused(QuantFormat::Q4_0, 2));
        assert!(!gemmt_fused(QuantFormat::BF16, 2));
        assert!(!gemmt_fused(QuantFormat::Q4_K, 1));
        assert!(!gemmt_fused(QuantFormat::F16, 1));
    }

    #[test]
    fn x_parts_and_in_place_formats() {
        for f in [
            QuantFormat::BF16,
            QuantFormat::Q4_0,
            QuantFormat::Q6_K,
            QuantFormat::F16,
        ] {
            assert_eq!(gemmt_x_parts(f), 1);
        }
        assert!(gemmt_in_place(QuantFormat::BF16, 2));
        assert!(!gemmt_in_place(QuantFormat::BF16, 1));
        assert!(gemmt_in_place(QuantFormat::F16, 1));
        assert!(gemmt_in_place(QuantFormat::F16, 2));
        assert!(!gemmt_in_place(QuantFormat::Q8_0, 1));
        assert!(!gemmt_in_place(QuantFormat::F32, 2));
    }

    #[test]
    fn tma_kernel_choice_tiles_and_shared_memory() {
        use QuantFormat::{BF16, F16, Q4_0, Q8_0};
        let qkv = [4096, 1024, 1024];
        assert!(gemmt_tm((9, 0), 1, F16, 4096, &qkv));
        assert!(gemmt_tm((9, 0), 1, Q4_0, 4096, &qkv));
        assert!(gemmt_tm((9, 0), 1, Q4_0, 14336, &[4096]));
        assert!(gemmt_tm((9, 0), 1, F16, 64, &[64]));
        // k: stages of 64; Q4_0 scale rows of 16-byte multiples.
        assert!(!gemmt_tm((9, 0), 1, F16, 96, &[64]));
        assert!(!gemmt_tm((9, 0), 1, Q4_0, 896, &[896]));
        assert!(gemmt_tm((9, 0), 1, F16, 896, &[896]));
        assert!(!gemmt_tm((9, 0), 1, Q4_0, 0, &[64]));
        // Rows: every product a positive multiple of 64.
        assert!(!gemmt_tm((9, 0), 1, F16, 4096, &[4096, 1000, 1024]));
        assert!(!gemmt_tm((9, 0), 1, F16, 4096, &[4096, 0]));
        assert!(!gemmt_tm((9, 0), 1, F16, 4096, &[]));
        assert!(!gemmt_tm((9, 0), 1, F16, 4096, &[32]));
        // Formats, parts, devices.
        for f in [QuantFormat::Q4_K, QuantFormat::Q6_K, QuantFormat::F32] {
            assert!(!gemmt_tm((9, 0), 1, f, 4096, &qkv), "{f}");
        }
        for f in GEMMTM_KINDS {
            assert!(gemmt_tm((9, 0), 1, f, 4096, &qkv), "{f}");
            assert!(!gemmt_tm((9, 0), 2, f, 4096, &qkv), "{f}");
        }
        assert_eq!(GEMMTM_KINDS, [F16, Q4_0, Q8_0, BF16]);
        assert!(!gemmt_tm((9, 0), 2, F16, 4096, &qkv));
        for cc in [(8, 0), (8, 9), (10, 0), (12, 0)] {
            assert!(!gemmt_tm(cc, 1, F16, 4096, &qkv));
        }
        // Tiles: the H200's faster tile on the 8B products (512 tokens: o and down 128).
        assert_eq!(gemmtm_tile_n(512, 6144), 256);
        assert_eq!(gemmtm_tile_n(512, 4096), 128);
        assert_eq!(gemmtm_tile_n(512, 2 * 14336), 256);
        assert_eq!(gemmtm_tile_n(2048, 4096), 256);
        assert_eq!(gemmtm_tile_n(65, 64), 128);
        // 256 only with 256 tokens (the box of x within x), whatever the grid.
        assert_eq!(gemmtm_tile_n(200, 2 * 14336), 128);
        assert_eq!(gemmtm_tile_n(256, 2 * 14336), 256);
        assert!(is_gemmtm_entry("gemmt_q4_0_glu_tm256"));
        assert!(is_gemmtm_entry("gemmt_f16_tm128"));
        assert!(!is_gemmtm_entry("gemmt_f16_w128"));
        assert!(!is_gemmw_entry("gemmt_f16_tm128"));
        assert!(!is_gemmtm_entry("gemmt_q4_0_glu_m128_p1"));
        // GtmCfg: f16 TN 256 4 x 48 KiB, TN 128 6 x 32 KiB; Q4_0 5 x 38 KiB, 8 x 22 KiB;
        // Q8_0 4 x 42 KiB, 7 x 26 KiB; BF16 as F16.
        assert_eq!(gemmtm_shared_bytes(F16, 256), 4 * 49152 + 1024);
        assert_eq!(gemmtm_shared_bytes(F16, 128), 6 * 32768 + 1024);
        assert_eq!(gemmtm_shared_bytes(Q4_0, 256), 5 * 38912 + 1024);
        assert_eq!(gemmtm_shared_bytes(Q4_0, 128), 8 * 22528 + 1024);
        assert_eq!(gemmtm_shared_bytes(Q8_0, 256), 4 * 43008 + 1024);
        assert_eq!(gemmtm_shared_bytes(Q8_0, 128), 7 * 26624 + 1024);
        for tn in GEMMTM_TN {
            assert_eq!(gemmtm_shared_bytes(BF16, tn), gemmtm_shared_bytes(F16, tn));
            for f in GEMMTM_KINDS {
                // Stages on 1024 bytes (the 128-byte swizzle of x's box), the gate + up
                // epilogue's floats within the reservation.
                assert_eq!((tn * 128 + gemmtm_weight_stage_bytes(f)) % 1024, 0, "{f}");
                assert!(gemmtm_shared_bytes(f, tn) >= tn * (GEMMTM_WR + 4) * 4 + 1024);
                assert!(gemmtm_shared_bytes(f, tn) <= GEMMTM_MAX_SHARED_BYTES);
            }
        }
        assert_eq!(GEMMTM_MAX_SHARED_BYTES, 4 * 49152 + 1024);
        const { assert!(GEMMTM_MAX_SHARED_BYTES + 128 <= 227 * 1024) };
    }

    #[test]
    fn tma_kernel_takes_every_loop_decoded_kind_at_llama_8b_shapes() {
        use QuantFormat::{BF16, F16, Q4_0, Q8_0};
        // Llama-3.1-8B: q + k + v (4096 + 1024 + 1024 = 6144 rows) and o at k = 4096, gate +
        // up (14336 rows each; the rule sees the gate's) at 4096, down (4096 rows) at 14336.
        let shapes: [(&str, usize, &[usize]); 4] = [
            ("q+k+v", 4096, &[4096, 1024, 1024]),
            ("o", 4096, &[4096]),
            ("gate+up", 4096, &[14336]),
            ("down", 14336, &[4096]),
        ];
        for f in [F16, Q4_0, Q8_0, BF16] {
            for (name, k, rows) in shapes {
                assert!(gemmt_tm((9, 0), 1, f, k, rows), "{f} {name}");
                // ASSAY_GEMMT_TM=0 is GemmtOpts::tm = Some(false), checked before this rule;
                // x in two parts (BF16 past f16's range) and other devices keep section 3.
                assert!(!gemmt_tm((9, 0), 2, f, k, rows), "{f} {name}");
                assert!(!gemmt_tm((10, 0), 1, f, k, rows), "{f} {name}");
                assert!(!gemmt_tm((8, 9), 1, f, k, rows), "{f} {name}");
            }
        }
        // k rules: Q8_0 as Q4_0 (256: scale rows of 16-byte multiples), BF16 as F16 (64).
        for k in [64, 192, 320, 896, 4160] {
            assert_eq!(gemmt_tm((9, 0), 1, BF16, k, &[64]), k % 64 == 0, "{k}");
            assert_eq!(gemmt_tm((9, 0), 1, Q8_0, k, &[64]), k % 256 == 0, "{k}");
            assert!(!gemmt_tm((9, 0), 1, Q8_0, k, &[64]), "{k}");
        }
        for k in [256, 768, 4096, 14336] {
            assert!(gemmt_tm((9, 0), 1, Q8_0, k, &[64]), "{k}");
            assert!(gemmt_tm((9, 0), 1, BF16, k, &[64]), "{k}");
        }
        assert!(!gemmt_tm((9, 0), 1, BF16, 96, &[64]));
        assert!(!gemmt_tm((9, 0), 1, Q8_0, 4096, &[4096, 1000, 1024]));
        assert!(!gemmt_tm((9, 0), 1, BF16, 4096, &[32]));
        // Rows of 37 or 200 (kernel-check's other shapes): section 3.
        assert!(!gemmt_tm((9, 0), 1, Q8_0, 768, &[200]));
        assert!(!gemmt_tm((9, 0), 1, BF16, 2304, &[37]));
        assert!(gemmt_tm((9, 0), 1, Q8_0, 768, &[192]));
        assert!(gemmt_tm((9, 0), 1, BF16, 768, &[192]));
    }
}
