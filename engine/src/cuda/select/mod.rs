//! Kernel choice: pure functions of (op, shape, format, device) returning an enum.
//!
//! Owns: the list of weight formats with CUDA kernels ([`KERNEL_FORMATS`]) and the
//! entry-point suffix of each, the compile target for a compute capability
//! ([`arch_for`]), and one `choose_*` function per op. Each choice is recorded in receipts
//! by its [`std::fmt::Display`] name. The matvec rows-per-warp choice is the first tuned
//! one (issue 7); further variants arrive as new enum variants chosen here, with unit tests.

mod attention;
mod gemmt;
mod matvec;
mod mmv;
mod rope_fuse;

pub use attention::*;
pub use gemmt::*;
pub use matvec::*;
pub use mmv::*;
pub use rope_fuse::*;

use super::CudaError;
use super::sources::consts::{
    ATT_MAX_GROUP, ATT_MAX_HD, ATT_SPLIT, ATT_WARPS, MV_BATCH_GLU_ROWS_PER_WARP,
    MV_BATCH_ROWS_PER_WARP, MV_BATCH_TOK, MV_LAUNCH_MAX_TOK, MV_PAIR_ROWS_PER_WARP, MV_TILE,
    MV_WARPS, MV_WR_BLOCKS_PER_SM, MV_WR_GLU_RD, MV_WR_HALF_GLU_RD, MV_WR_HALF_RD, MV_WR_RD,
    MV_WR_SEGS, MV_WRT_GLU_TRD, MV_WRT_TRD,
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

/// The `rope_kv` entry of a launch of `ntok` tokens: `rope_kv_pass` (one block per token,
/// the token's angles computed once for all its heads) from [`ROPE_KV_PASS_MIN_TOK`]
/// tokens, else `rope_kv` (a block row of one-item threads per token: more blocks for the
/// few tokens of a decode step or a verification). The same bits either way (kernel-check).
pub fn rope_kv_entry(ntok: usize) -> &'static str {
    if ntok >= ROPE_KV_PASS_MIN_TOK {
        "rope_kv_pass"
    } else {
        "rope_kv"
    }
}

/// The fewest tokens a `rope_kv` launch takes `rope_kv_pass` for ([`rope_kv_entry`]).
pub const ROPE_KV_PASS_MIN_TOK: usize = 32;

pub use super::sources::consts::{ROPE_PASS_MAX_HALF, ROPE_PASS_THREADS};

#[cfg(test)]
pub(crate) mod tests {

    #[test]
    fn rope_kv_takes_the_pass_kernel_for_prompt_passes() {
        assert_eq!(super::rope_kv_entry(1), "rope_kv");
        assert_eq!(super::rope_kv_entry(9), "rope_kv");
        assert_eq!(
            super::rope_kv_entry(super::ROPE_KV_PASS_MIN_TOK - 1),
            "rope_kv"
        );
        assert_eq!(
            super::rope_kv_entry(super::ROPE_KV_PASS_MIN_TOK),
            "rope_kv_pass"
        );
        assert_eq!(super::rope_kv_entry(512), "rope_kv_pass");
    }
    use super::*;

    pub(crate) const H200: DeviceFacts = DeviceFacts {
        compute_capability: (9, 0),
        sm_count: 132,
    };
    pub(crate) const RTX: DeviceFacts = DeviceFacts {
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
}
