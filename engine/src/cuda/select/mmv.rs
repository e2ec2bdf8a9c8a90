//! Tensor-core decode products (`kernels/mmv.cu`).

use super::*;

/// Weight formats with tensor-core decode products (`kernels/mmv.cu`: `mmv_<suffix>_nt<NT>`,
/// `mmv_<suffix>_glu_nt<NT>`, `_x1`, `_glu_x1`, `_pair_x1`), routed there by `ASSAY_MMV=1`;
/// the others keep the matvec. Q4_0 / Q8_0 / Q4_K multiply x staged as f16 hi + lo
/// (`gemm_stage_x`; Q4_K adds a second product, x's sum per 32-value sub-block, for its
/// mins), BF16 x staged as three bf16 parts (`gemm_stage_x_bf16`: the staging
/// `ops::XStaging::of` names; its entry points take one more x pointer).
pub const MMV_FORMATS: [QuantFormat; 4] = [
    QuantFormat::Q4_0,
    QuantFormat::Q8_0,
    QuantFormat::BF16,
    QuantFormat::Q4_K,
];

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

/// Longest row the one-token entry points (`mmv_<fmt>[_glu]_x1`) of Q4_0 / Q8_0 / Q4_K stage in
/// shared memory (f16 hi + lo: 4 bytes a value, within the matvec's dynamic shared-memory
/// limit); longer rows take `gemm_stage_x` + `_nt1`. BF16: [`MMV_X1_BF16_MAX_K`].
pub const MMV_X1_MAX_K: usize = MV_MAX_SHARED_BYTES / 4;

/// Longest row the BF16 one-token entry points stage in shared memory (three bf16 parts: 6
/// bytes a value): Llama-3.1-8B's and Mistral-7B's 14336 (the down product). The limit
/// the mmv functions are given ([`MMV_MAX_SHARED_BYTES`]) stays under the 99 KiB a block
/// of an sm_86 / sm_89 card may opt into, with the 9 KiB of static shared memory of the
/// largest entry point (`mmv_*_glu_nt8`'s reduction). Longer rows take
/// `gemm_stage_x_bf16` + `_nt1` (the same bits).
pub const MMV_X1_BF16_MAX_K: usize = 14336;

/// The dynamic shared memory limit set on every `mmv.cu` function when the module loads:
/// the largest `_x1` staging of either kind.
pub const MMV_MAX_SHARED_BYTES: usize = {
    let b = 6 * MMV_X1_BF16_MAX_K;
    if b > MV_MAX_SHARED_BYTES {
        b
    } else {
        MV_MAX_SHARED_BYTES
    }
};

/// Longest row the one-token entry points of `format` stage in shared memory.
pub fn mmv_x1_max_k(format: QuantFormat) -> usize {
    if format == QuantFormat::BF16 {
        MMV_X1_BF16_MAX_K
    } else {
        MMV_X1_MAX_K
    }
}

/// Dynamic shared memory of a one-token launch (`_x1`, `_glu_x1`, `_pair_x1`) of `format`
/// with rows of `k` values: the staged x, f16 hi + lo (4 bytes a value) or for BF16 three
/// bf16 parts (6 bytes a value).
pub fn mmv_x1_shared_bytes(format: QuantFormat, k: usize) -> usize {
    if format == QuantFormat::BF16 {
        6 * k
    } else {
        4 * k
    }
}

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
    /// Two products of one shape on one x in one launch (`_pair_x1`: k + v; one token, x
    /// staged once; the bits of two `_x1`).
    pub pair: bool,
}

impl MmvKernel {
    /// The entry point.
    pub fn entry(&self) -> String {
        let glu = if self.glu { "_glu" } else { "" };
        if self.pair {
            format!("mmv_{}_pair_x1", format_suffix(self.format))
        } else if self.x1 {
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
            if self.glu {
                "_glu"
            } else if self.pair {
                "_pair"
            } else {
                ""
            },
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
    // A chunk is 32 values; Q4_K's super-blocks hold 256.
    let block = format.block_geometry().0.max(32);
    if rows == 0 || k == 0 || k % block != 0 {
        return Err(crate::cuda::shape_err(
            "mmv",
            format!("{rows} x {k}: rows > 0 and k a positive multiple of {block} ({format})"),
        ));
    }
    let n_tiles = MMV_NT
        .iter()
        .copied()
        .find(|nt| 8 * nt >= n && n > 0)
        .ok_or_else(|| {
            crate::cuda::shape_err("mmv", format!("{n} tokens; a launch takes 1..={MMV_N}"))
        })?;
    Ok(MmvKernel {
        format,
        glu,
        n_tiles: n_tiles as u32,
        splits: mmv_splits(rows, k),
        x1: false,
        pair: false,
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
    let max_k = mmv_x1_max_k(format);
    if k > max_k {
        return Err(crate::cuda::shape_err(
            "mmv_x1",
            format!("k = {k}: the one-token staging of {format} holds up to {max_k} values"),
        ));
    }
    Ok(MmvKernel { x1: true, ..c })
}

/// Two one-token products of one `rows` x `k` shape on one x (k + v), in one launch: the
/// split of [`choose_mmv_x1`] (the bits of two `_x1` launches).
pub fn choose_mmv_pair_x1(
    format: QuantFormat,
    rows: usize,
    k: usize,
    cc: (i32, i32),
) -> Result<MmvKernel, CudaError> {
    let c = choose_mmv_x1(format, false, rows, k, cc)?;
    Ok(MmvKernel { pair: true, ..c })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(choose_mmv(QuantFormat::F16, false, 1024, 4096, 1, cc).is_err());
        assert!(choose_mmv(QuantFormat::Q4_0, false, 1024, 4096, 1, (7, 5)).is_err());
        assert!(choose_mmv(QuantFormat::Q4_0, false, 1024, 4100, 1, cc).is_err());
        // One token staged in the kernel: same split, `_x1` entry point, rows that fit.
        let x = choose_mmv_x1(QuantFormat::Q4_0, true, 14336, 4096, cc).unwrap();
        assert_eq!((x.entry().as_str(), x.splits), ("mmv_q4_0_glu_x1", 1));
        let x = choose_mmv_x1(QuantFormat::Q8_0, false, 1024, 4096, cc).unwrap();
        assert_eq!((x.entry().as_str(), x.splits), ("mmv_q8_0_x1", 4));
        assert_eq!(x.to_string(), "mmv_q8_0 splits=4 warps=8 x1");
        let p = choose_mmv_pair_x1(QuantFormat::Q4_0, 1024, 4096, cc).unwrap();
        assert_eq!((p.entry().as_str(), p.splits), ("mmv_q4_0_pair_x1", 4));
        assert_eq!(p.to_string(), "mmv_q4_0_pair splits=4 warps=8 x1");
        assert!(choose_mmv_x1(QuantFormat::Q4_0, false, 4096, 14336, cc).is_ok());
        const { assert!(MMV_X1_MAX_K >= 14336) };
        assert!(choose_mmv_x1(QuantFormat::Q4_0, false, 4096, MMV_X1_MAX_K + 32, cc).is_err());
    }

    #[test]
    fn bf16_has_every_entry_point_with_the_quant_formats_split() {
        let cc = (9, 0);
        let f = QuantFormat::BF16;
        assert!(mmv_supported(f, cc));
        assert!(mmv_supported(f, (8, 0)));
        assert!(!mmv_supported(f, (7, 5)));
        for (n, nt) in [(1, 1), (4, 1), (9, 2), (16, 2), (17, 4), (33, 8), (64, 8)] {
            let c = choose_mmv(f, false, 4096, 4096, n, cc).unwrap();
            assert_eq!(c.entry(), format!("mmv_bf16_nt{nt}"), "n = {n}");
            let g = choose_mmv(f, true, 14336, 4096, n, cc).unwrap();
            assert_eq!(g.entry(), format!("mmv_bf16_glu_nt{nt}"), "n = {n}");
        }
        // The split is the shape's, whatever the format and n (the invariance argument).
        for (rows, k) in [(1024, 4096), (4096, 14336), (37, 2304), (64, 768)] {
            let q = choose_mmv(QuantFormat::Q8_0, false, rows, k, 1, cc).unwrap();
            for n in [1, 8, 9, 64] {
                assert_eq!(
                    choose_mmv(f, false, rows, k, n, cc).unwrap().splits,
                    q.splits
                );
            }
        }
        let c = choose_mmv(f, false, 1024, 4096, 3, cc).unwrap();
        assert_eq!(c.to_string(), "mmv_bf16 splits=4 warps=8");
        assert!(choose_mmv(f, false, 1024, 4096, 65, cc).is_err());
        assert!(choose_mmv(f, false, 1024, 4100, 1, cc).is_err());
        // One token: `_x1`, `_glu_x1`, `_pair_x1`; the down product of an 8B model (k =
        // 14336) fits the bf16 staging, a longer row does not (it takes the staged `_nt1`).
        let x = choose_mmv_x1(f, false, 4096, 14336, cc).unwrap();
        assert_eq!((x.entry().as_str(), x.splits), ("mmv_bf16_x1", 1));
        let x = choose_mmv_x1(f, true, 14336, 4096, cc).unwrap();
        assert_eq!(x.entry(), "mmv_bf16_glu_x1");
        let p = choose_mmv_pair_x1(f, 1024, 4096, cc).unwrap();
        assert_eq!((p.entry().as_str(), p.splits), ("mmv_bf16_pair_x1", 4));
        assert_eq!(p.to_string(), "mmv_bf16_pair splits=4 warps=8 x1");
        let e = choose_mmv_x1(f, false, 4096, MMV_X1_BF16_MAX_K + 32, cc).unwrap_err();
        assert!(e.to_string().contains("BF16"), "{e}");
        assert!(choose_mmv_x1(QuantFormat::Q4_0, false, 4096, MMV_X1_BF16_MAX_K + 32, cc).is_ok());
    }

    #[test]
    fn q4_k_has_every_entry_point_with_the_quant_formats_split() {
        let cc = (9, 0);
        let f = QuantFormat::Q4_K;
        assert!(mmv_supported(f, cc));
        assert!(mmv_supported(f, (8, 6)));
        assert!(!mmv_supported(f, (7, 5)));
        for (n, nt) in [
            (1, 1),
            (4, 1),
            (8, 1),
            (9, 2),
            (16, 2),
            (17, 4),
            (32, 4),
            (33, 8),
            (64, 8),
        ] {
            let c = choose_mmv(f, false, 4096, 4096, n, cc).unwrap();
            assert_eq!(c.entry(), format!("mmv_q4_k_nt{nt}"), "n = {n}");
            let g = choose_mmv(f, true, 14336, 4096, n, cc).unwrap();
            assert_eq!(g.entry(), format!("mmv_q4_k_glu_nt{nt}"), "n = {n}");
        }
        // The split is the shape's, whatever the format and n (the invariance argument).
        for (rows, k) in [
            (1024, 4096),
            (4096, 14336),
            (37, 2304),
            (64, 768),
            (3584, 18944),
        ] {
            let q = choose_mmv(QuantFormat::Q8_0, false, rows, k, 1, cc).unwrap();
            for n in [1, 8, 9, 64] {
                assert_eq!(
                    choose_mmv(f, false, rows, k, n, cc).unwrap().splits,
                    q.splits
                );
            }
        }
        let c = choose_mmv(f, false, 1024, 4096, 3, cc).unwrap();
        assert_eq!(c.to_string(), "mmv_q4_k splits=4 warps=8");
        assert!(choose_mmv(f, false, 1024, 4096, 65, cc).is_err());
        // k must hold whole 256-value super-blocks (Q4_0 takes any multiple of 32).
        let e = choose_mmv(f, false, 1024, 4096 + 32, 1, cc).unwrap_err();
        assert!(e.to_string().contains("256"), "{e}");
        assert!(choose_mmv(QuantFormat::Q4_0, false, 1024, 4096 + 32, 1, cc).is_ok());
        // One token: `_x1`, `_glu_x1`, `_pair_x1` with the f16 staging's row limit (4 bytes
        // a value, as Q4_0 / Q8_0): Qwen2-7B's down product (18944) fits.
        assert_eq!(mmv_x1_max_k(f), MMV_X1_MAX_K);
        assert_eq!(mmv_x1_shared_bytes(f, 4096), 4 * 4096);
        let x = choose_mmv_x1(f, false, 3584, 18944, cc).unwrap();
        assert_eq!((x.entry().as_str(), x.splits), ("mmv_q4_k_x1", 1));
        let x = choose_mmv_x1(f, true, 14336, 4096, cc).unwrap();
        assert_eq!(x.entry(), "mmv_q4_k_glu_x1");
        let p = choose_mmv_pair_x1(f, 1024, 4096, cc).unwrap();
        assert_eq!((p.entry().as_str(), p.splits), ("mmv_q4_k_pair_x1", 4));
        assert_eq!(p.to_string(), "mmv_q4_k_pair splits=4 warps=8 x1");
        assert!(choose_mmv_x1(f, false, 4096, MMV_X1_MAX_K + 256, cc).is_err());
    }

    #[test]
    fn unsupported_formats_are_refused_by_name() {
        for f in [
            QuantFormat::Q6_K,
            QuantFormat::F16,
            QuantFormat::F32,
            QuantFormat::Q5_K,
        ] {
            let e = choose_mmv(f, false, 4096, 4096, 1, (9, 0)).unwrap_err();
            assert!(matches!(e, CudaError::UnsupportedFormat { op: "mmv", format } if format == f));
            assert!(choose_mmv_x1(f, true, 4096, 4096, (9, 0)).is_err());
            assert!(choose_mmv_pair_x1(f, 1024, 4096, (9, 0)).is_err());
        }
    }

    #[test]
    fn x1_staging_fits_the_shared_memory_limit() {
        for f in MMV_FORMATS {
            let k = mmv_x1_max_k(f);
            assert_eq!(k % 32, 0, "{f}");
            assert!(mmv_x1_shared_bytes(f, k) <= MMV_MAX_SHARED_BYTES, "{f}");
        }
        assert_eq!(mmv_x1_shared_bytes(QuantFormat::BF16, 4096), 6 * 4096);
        assert_eq!(mmv_x1_shared_bytes(QuantFormat::Q4_0, 4096), 4 * 4096);
        assert_eq!(MMV_MAX_SHARED_BYTES, 6 * 14336);
        // 99 KiB (sm_86 / sm_89's opt-in) minus the largest static reduction buffer
        // (mmv_*_glu_nt8: 2 x 16 x 72 floats) and the staging's few words.
        const { assert!(MMV_MAX_SHARED_BYTES + 2 * 16 * 72 * 4 + 256 <= 99 * 1024) };
        const { assert!(MMV_MAX_SHARED_BYTES >= MV_MAX_SHARED_BYTES) };
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
