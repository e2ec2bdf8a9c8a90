//! Where the one-token decode step does `rope_kv`'s work (RoPE of q and k, k and v into the
//! KV cache) in the epilogue of the q / k / v segmented streamed launch
//! (`matvec_<fmt>_seg3rope_wr_r<R>_d<D>`, kernels/matvec/rope_epi.cuh) instead of a
//! `rope_kv` launch of its own (issue 7; `ASSAY_ROPE_FUSE=1`, opt-in: on by default in
//! engine19, off again since engine21 after session 20's A/B measured it 2.4% slower on 8B
//! Q4_0 decode).
//!
//! Owns [`choose_rope_fuse`]: a pure function of the switch, the segmented launch chosen
//! for q, k and v ([`super::choose_matvec_segs`]) and the attention's shape.

use super::{MatvecKernel, format_suffix, format_suffix_of};
use crate::quant::QuantFormat;

/// The attention's shape as the fused epilogue sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeFuseShape {
    /// Tokens in the launch.
    pub ntok: usize,
    /// Query heads.
    pub n_heads: usize,
    /// KV heads.
    pub n_kv_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// Rotated dims per head (the RoPE table's).
    pub n_rot: usize,
    /// NeoX pairs (i, i + n_rot / 2) rather than adjacent ones (2i, 2i + 1).
    pub neox: bool,
    /// Rows of the q, k and v matrices.
    pub rows: [usize; 3],
}

/// How `rope_kv`'s work is done on a one-token step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeFuse {
    /// In the epilogue of this segmented streamed launch ([`MatvecKernel::WrSegs`]) of q,
    /// k and v: its `seg3rope` entry point.
    QkvEpilogue(MatvecKernel),
}

impl RopeFuse {
    /// The entry point launched.
    pub fn entry(&self) -> String {
        match *self {
            RopeFuse::QkvEpilogue(MatvecKernel::WrSegs {
                format,
                segs,
                rows_per_warp,
                depth,
            }) => format!(
                "matvec_{}_seg{segs}rope_wr_r{rows_per_warp}_d{depth}",
                format_suffix(format)
            ),
            RopeFuse::QkvEpilogue(k) => format!("{}+rope", k.entry()),
        }
    }
    /// The segmented launch it extends.
    pub fn kernel(&self) -> MatvecKernel {
        match *self {
            RopeFuse::QkvEpilogue(k) => k,
        }
    }
}

impl std::fmt::Display for RopeFuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RopeFuse::QkvEpilogue(k) => write!(f, "{k}+rope_kv"),
        }
    }
}

/// The formats whose segmented launch has a `seg3rope` twin (kernels/matvec.cu's
/// `ASSAY_MATVEC_WR` list: Q4_0, Q8_0; BF16's `ASSAY_MATVEC_WR_HALF` list has none).
pub const ROPE_FUSE_FORMATS: [QuantFormat; 2] = [QuantFormat::Q4_0, QuantFormat::Q8_0];

/// Whether (and how) a step's `rope_kv` runs fused: `enabled` (`ASSAY_ROPE_FUSE=1`, default off), one
/// token, q, k and v in one segmented streamed launch `qkv` (three matrices, an even number
/// of rows per warp, so that a warp's row group holds whole adjacent pairs), the normal
/// (adjacent-pair) rotation, an even head size with `2 <= n_rot <= head_dim` even, and the
/// matrices' rows exactly `n_heads x head_dim`, `n_kv_heads x head_dim` twice. `None`:
/// the separate `rope_kv` launch (NeoX models, prompt passes, verification and batched
/// steps, formats or devices without the segmented launch).
pub fn choose_rope_fuse(
    enabled: bool,
    qkv: Option<MatvecKernel>,
    s: RopeFuseShape,
) -> Option<RopeFuse> {
    let Some(
        k @ MatvecKernel::WrSegs {
            format,
            segs: 3,
            rows_per_warp,
            ..
        },
    ) = qkv
    else {
        return None;
    };
    let hd = s.head_dim;
    let ok = enabled
        && s.ntok == 1
        && !s.neox
        && ROPE_FUSE_FORMATS.contains(&format)
        && format_suffix_of(format).is_some()
        && rows_per_warp % 2 == 0
        && hd % 2 == 0
        && s.n_rot % 2 == 0
        && s.n_rot >= 2
        && s.n_rot <= hd
        && s.n_heads > 0
        && s.n_kv_heads > 0
        && s.rows == [s.n_heads * hd, s.n_kv_heads * hd, s.n_kv_heads * hd];
    ok.then_some(RopeFuse::QkvEpilogue(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QuantFormat;

    fn segs(format: QuantFormat, rows_per_warp: u32) -> Option<MatvecKernel> {
        Some(MatvecKernel::WrSegs {
            format,
            segs: 3,
            rows_per_warp,
            depth: 3,
        })
    }

    fn llama8b() -> RopeFuseShape {
        RopeFuseShape {
            ntok: 1,
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
            n_rot: 128,
            neox: false,
            rows: [4096, 1024, 1024],
        }
    }

    #[test]
    fn fuses_llamas_one_token_step_only_when_asked() {
        let k = segs(QuantFormat::Q4_0, 4);
        let c = choose_rope_fuse(true, k, llama8b()).unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_seg3rope_wr_r4_d3");
        assert_eq!(c.kernel(), k.unwrap());
        assert_eq!(
            c.to_string(),
            "matvec_q4_0/seg3-wr(r=4,d=3,warps=8)+rope_kv"
        );
        assert_eq!(
            choose_rope_fuse(true, segs(QuantFormat::Q8_0, 4), llama8b())
                .unwrap()
                .entry(),
            "matvec_q8_0_seg3rope_wr_r4_d3"
        );
        // Off by default.
        assert_eq!(choose_rope_fuse(false, k, llama8b()), None);
        // Head size 64, partial rotation.
        let hd64 = RopeFuseShape {
            head_dim: 64,
            n_rot: 32,
            rows: [2048, 512, 512],
            ..llama8b()
        };
        assert!(choose_rope_fuse(true, k, hd64).is_some());
    }

    #[test]
    fn every_segmented_configuration_has_whole_pairs_per_group() {
        // So the fused path applies wherever the segmented launch runs (and the
        // seg3rope entry points exist for exactly the seg3 configurations).
        for (r, _) in crate::cuda::sources::consts::MV_WR_RD {
            assert_eq!(r % 2, 0);
        }
    }

    #[test]
    fn falls_back_where_the_epilogue_cannot_do_it() {
        let k = segs(QuantFormat::Q4_0, 4);
        let base = llama8b();
        // No segmented launch (another format, a prompt pass, mmv, a device without it).
        assert_eq!(choose_rope_fuse(true, None, base), None);
        let plain = Some(MatvecKernel::Wr {
            format: QuantFormat::Q4_0,
            glu: false,
            rows_per_warp: 4,
            depth: 3,
        });
        assert_eq!(choose_rope_fuse(true, plain, base), None);
        // Several tokens.
        assert_eq!(
            choose_rope_fuse(true, k, RopeFuseShape { ntok: 2, ..base }),
            None
        );
        // NeoX pairs straddle row groups.
        assert_eq!(
            choose_rope_fuse(true, k, RopeFuseShape { neox: true, ..base }),
            None
        );
        // A format without seg3rope entry points (BF16's streamed list, session 19).
        assert_eq!(
            choose_rope_fuse(true, segs(QuantFormat::BF16, 2), base),
            None
        );
        // An odd number of rows per warp would split a pair.
        assert_eq!(
            choose_rope_fuse(true, segs(QuantFormat::Q4_0, 1), base),
            None
        );
        // Odd head size, odd / zero / too many rotated dims.
        let odd = RopeFuseShape {
            head_dim: 127,
            n_rot: 126,
            rows: [32 * 127, 8 * 127, 8 * 127],
            ..base
        };
        assert_eq!(choose_rope_fuse(true, k, odd), None);
        for n_rot in [0, 63, 130] {
            assert_eq!(
                choose_rope_fuse(true, k, RopeFuseShape { n_rot, ..base }),
                None
            );
        }
        // Rows that are not heads x head size.
        let rows = RopeFuseShape {
            rows: [4096, 1024, 1028],
            ..base
        };
        assert_eq!(choose_rope_fuse(true, k, rows), None);
        let no_kv = RopeFuseShape {
            n_kv_heads: 0,
            rows: [4096, 0, 0],
            ..base
        };
        assert_eq!(choose_rope_fuse(true, k, no_kv), None);
    }
}
