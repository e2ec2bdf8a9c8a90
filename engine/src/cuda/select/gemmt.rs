//! The prompt pass's GEMM kernel: `gemm.cu`'s 64-row pass ([`GemmKernel::V1`]) or
//! `gemmt.cu`'s tiled GEMM over weights decoded to 16-bit floats ([`GemmKernel::Tiled`]),
//! and the tiled kernel's shape constants (they must match `gemmt.cu`'s `GT_*` defines).

use crate::quant::QuantFormat;

/// Tokens per tiled block (`GT_BM`).
pub const GEMMT_BM: usize = 128;
/// Weight rows per tiled block (`GT_BN`).
pub const GEMMT_BN: usize = 128;
/// Values of k per pipeline stage (`GT_BK`): k must be a multiple of it.
pub const GEMMT_BK: usize = 32;
/// Pipeline stages (`GT_ST`).
pub const GEMMT_STAGES: usize = 3;
/// Shared-memory row stride in 16-bit values (`GT_LD`).
pub const GEMMT_LD: usize = 40;
/// Rows of gate, then of up, per interleaved group of the decoded gate + up matrix
/// (`GT_GLU_G`; a block's `GEMMT_BN` columns are one group of each).
pub const GEMMT_GLU_G: usize = 64;

/// Dynamic shared memory of one tiled launch with x in `parts` parts.
pub const fn gemmt_shared_bytes(parts: usize, glu: bool) -> usize {
    let pipe = GEMMT_STAGES * (parts * GEMMT_BM + GEMMT_BN) * GEMMT_LD * 2;
    let epi = if glu {
        GEMMT_BM * (GEMMT_BN + 4) * 4
    } else {
        0
    };
    if pipe > epi { pipe } else { epi }
}

/// The most any tiled launch uses (set as the functions' limit).
pub const GEMMT_MAX_SHARED_BYTES: usize = {
    let a = gemmt_shared_bytes(2, true);
    let b = gemmt_shared_bytes(2, false);
    if a > b { a } else { b }
};

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

/// The 16-bit float a format's weights decode to for the tiled kernel, or `None` when it
/// has none: F32 (f16 would round away its precision and range; it keeps the row path) and
/// formats without a chunk decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    F16,
    Bf16,
}

pub fn gemmt_decoded(format: QuantFormat) -> Option<Decoded> {
    match format {
        QuantFormat::BF16 => Some(Decoded::Bf16),
        QuantFormat::F32 => None,
        f if super::KERNEL_FORMATS.contains(&f) => Some(Decoded::F16),
        _ => None,
    }
}

/// Whether the tiled kernel multiplies `format` on a device of compute capability `cc`
/// (cp.async and `mma.sync` f16 / bf16: sm_80).
pub fn gemmt_supported(format: QuantFormat, cc: (i32, i32)) -> bool {
    cc.0 >= 8 && gemmt_decoded(format).is_some()
}

/// Rows of the decoded matrix of a product with `rows` output rows: gate + up interleave
/// whole groups of [`GEMMT_GLU_G`] rows of each.
pub fn gemmt_decoded_rows(rows: usize, glu: bool) -> usize {
    if glu {
        rows.div_ceil(GEMMT_GLU_G) * 2 * GEMMT_GLU_G
    } else {
        rows
    }
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
        assert_eq!(gemmt_decoded(QuantFormat::BF16), Some(Decoded::Bf16));
        assert_eq!(gemmt_decoded(QuantFormat::Q4_0), Some(Decoded::F16));
        assert_eq!(gemmt_decoded(QuantFormat::Q4_K), Some(Decoded::F16));
        assert_eq!(gemmt_decoded(QuantFormat::F16), Some(Decoded::F16));
        assert_eq!(gemmt_decoded(QuantFormat::F32), None);
        assert!(gemmt_supported(QuantFormat::Q4_0, (9, 0)));
        assert!(!gemmt_supported(QuantFormat::Q4_0, (7, 5)));
        assert!(!gemmt_supported(QuantFormat::F32, (9, 0)));
    }

    #[test]
    fn shared_bytes_fit_the_h200_and_cover_the_epilogue() {
        // Two parts: 3 stages of (256 + 128) rows of 80 bytes.
        assert_eq!(gemmt_shared_bytes(2, false), 3 * 384 * 80);
        // One part, gate + up: the epilogue's 128 x 132 floats are larger than the pipe.
        assert_eq!(gemmt_shared_bytes(1, true), 128 * 132 * 4);
        const { assert!(GEMMT_MAX_SHARED_BYTES <= 227 * 1024) };
    }

    #[test]
    fn glu_rows_round_up_to_whole_groups() {
        assert_eq!(gemmt_decoded_rows(37, true), 128);
        assert_eq!(gemmt_decoded_rows(14336, true), 28672);
        assert_eq!(gemmt_decoded_rows(37, false), 37);
    }
}
