//! Tests of the BF16 streamed matvec choices (select/matvec.rs; session 19's bf16wr19), apart
//! from matvec_tests.rs to keep each file under 800 lines.

use super::*;
use crate::cuda::select::tests::{H200, RTX};

#[test]
fn bf16_streamed_kernel_only_when_forced() {
    let bf = QuantFormat::BF16;
    assert!(MV_WR_FORMATS.contains(&bf));
    assert!(!MV_WR_DEFAULT_FORMATS.contains(&bf));
    let wr = |glu, r, d| MatvecKernel::Wr {
        format: bf,
        glu,
        rows_per_warp: r,
        depth: d,
    };
    let seg = |r, d| MatvecKernel::WrSegs {
        format: bf,
        segs: 3,
        rows_per_warp: r,
        depth: d,
    };
    // Llama-3.1-8B's products: by default (and ASSAY_MV_WR=0) today's row kernels.
    for sw in [None, Some(false)] {
        let q = choose_matvec(bf, 4096, 4096, 1, &H200, sw).unwrap();
        assert_eq!(q.entry(), "matvec_bf16_r2");
        let d = choose_matvec(bf, 4096, 14336, 1, &H200, sw).unwrap();
        assert_eq!(d.entry(), "matvec_bf16_r2");
        let g = choose_matvec_glu(bf, 14336, 4096, 1, &H200, sw).unwrap();
        assert_eq!(g.entry(), "matvec_bf16_glu_r1");
        let h = choose_matvec(bf, 128_256, 4096, 1, &H200, sw).unwrap();
        assert_eq!(h.entry(), "matvec_bf16_r2");
        let qkv = [4096, 1024, 1024];
        assert_eq!(
            choose_matvec_segs(bf, &qkv, 4096, 1, &H200, None, sw).unwrap(),
            None
        );
    }
    // ASSAY_MV_WR=1: the streamed kernel, 2 rows at depth 2 beside k = 4096's x, 1 row at
    // depth 3 beside k = 14336's, gate + up 1 row of each at depth 2; k / v too (forced).
    let on = Some(true);
    let q = choose_matvec(bf, 4096, 4096, 1, &H200, on).unwrap();
    assert_eq!(q, wr(false, 2, 2));
    assert_eq!(q.entry(), "matvec_bf16_wr_r2_d2");
    assert_eq!(q.to_string(), "matvec_bf16/wr(r=2,d=2,warps=8)");
    let d = choose_matvec(bf, 4096, 14336, 1, &H200, on).unwrap();
    assert_eq!(d, wr(false, 1, 3));
    assert_eq!(d.entry(), "matvec_bf16_wr_r1_d3");
    let g = choose_matvec_glu(bf, 14336, 4096, 1, &H200, on).unwrap();
    assert_eq!(g, wr(true, 1, 2));
    assert_eq!(g.entry(), "matvec_bf16_glu_wr_r1_d2");
    let k = choose_matvec(bf, 1024, 4096, 1, &H200, on).unwrap();
    assert_eq!(k, wr(false, 2, 2));
    let h = choose_matvec(bf, 128_256, 4096, 1, &H200, on).unwrap();
    assert_eq!(h, wr(false, 2, 2));
    // Gate + up beside k = 14336's x: no BF16 ring fits, today's kernel even when forced.
    let g14 = choose_matvec_glu(bf, 4096, 14336, 1, &H200, on).unwrap();
    assert_eq!(g14.entry(), "matvec_bf16_glu_r1");
    // Other devices, several tokens, k not a multiple of 1024: today's kernels.
    assert_eq!(
        choose_matvec(bf, 4096, 4096, 1, &RTX, on).unwrap().entry(),
        "matvec_bf16_r2"
    );
    assert_eq!(
        choose_matvec(bf, 4096, 4096, 2, &H200, on).unwrap().entry(),
        "matvec_bf16_tb_r2"
    );
    assert_eq!(
        choose_matvec(bf, 4096, 4096 + 32, 1, &H200, on)
            .unwrap()
            .entry(),
        "matvec_bf16_r2"
    );
    // q / k / v in one launch: only when ASSAY_MV_QKV=1 asks (as Q8_0), the plain rings.
    let qkv = [4096, 1024, 1024];
    assert_eq!(
        choose_matvec_segs(bf, &qkv, 4096, 1, &H200, None, on).unwrap(),
        None
    );
    let s = choose_matvec_segs(bf, &qkv, 4096, 1, &H200, on, None)
        .unwrap()
        .unwrap();
    assert_eq!(s, seg(2, 2));
    assert_eq!(s.entry(), "matvec_bf16_seg3_wr_r2_d2");
    assert_eq!(
        choose_matvec_segs(bf, &[67, 5, 3], 12288, 1, &H200, on, None).unwrap(),
        Some(seg(1, 3))
    );
    assert_eq!(
        choose_matvec_segs(bf, &qkv, 4096, 1, &H200, Some(false), on).unwrap(),
        None
    );
}

#[test]
fn bf16_streamed_rings_fit_beside_llama_8b_x() {
    let bf = QuantFormat::BF16;
    let max = mv_wr_max_shared_bytes((9, 0)).unwrap();
    assert_eq!(max, 115_648);
    let wr = |glu, r, d| MatvecKernel::Wr {
        format: bf,
        glu,
        rows_per_warp: r,
        depth: d,
    };
    // A ring slot of one unit: 8 warps x 32 lanes x 64 bytes, no scale words.
    assert_eq!(mv_wrt_shared_bytes(bf, false, 1, 1), 8 * 32 * 64);
    // k = 4096: x 128 chunks x 36 floats = 18 KB; plain 2 rows x 2 slots = 64 KB more;
    // gate + up 2 units x 2 slots the same.
    let x4 = 128 * 36 * 4;
    assert_eq!(wr(false, 2, 2).shared_bytes(4096), x4 + 8 * 2 * 2 * 32 * 64);
    assert_eq!(wr(true, 1, 2).shared_bytes(4096), x4 + 8 * 2 * 2 * 32 * 64);
    assert!(wr(false, 2, 2).shared_bytes(4096) <= max);
    assert!(wr(true, 1, 2).shared_bytes(4096) <= max);
    // A deeper gate + up ring would not leave room for two blocks per SM.
    assert!(wr(true, 1, 3).shared_bytes(4096) > max);
    // k = 14336: x 448 chunks = 63 KB; 1 row x 3 slots = 48 KB fits (111 KB), 2 rows x 2
    // slots (127 KB) and gate + up's 4 units do not.
    let x14 = 448 * 36 * 4;
    assert_eq!(wr(false, 1, 3).shared_bytes(14336), x14 + 8 * 3 * 32 * 64);
    assert_eq!(wr(false, 1, 3).shared_bytes(14336), 113_664);
    assert!(wr(false, 1, 3).shared_bytes(14336) <= max);
    assert!(wr(false, 2, 2).shared_bytes(14336) > max);
    assert!(wr(true, 1, 2).shared_bytes(14336) > max);
    // Every listed BF16 (R, D), plain and segmented, fits at some k = 1024 m.
    for &(r, d) in mv_wr_rd(bf, false).iter().chain(mv_wr_rd(bf, true)) {
        assert!(wr(false, r, d).shared_bytes(MV_WR_K_STEP) <= max);
    }
}

#[test]
fn bf16_streamed_rows_per_block_and_grid() {
    let bf = QuantFormat::BF16;
    let wr = |glu, r, d| MatvecKernel::Wr {
        format: bf,
        glu,
        rows_per_warp: r,
        depth: d,
    };
    // 8 warps x rows per warp; a persistent grid of at most 2 blocks x 132 SMs.
    assert_eq!(wr(false, 2, 2).rows_per_block(), 16);
    assert_eq!(wr(false, 1, 3).rows_per_block(), 8);
    assert_eq!(wr(true, 1, 2).rows_per_block(), 8);
    // q / o 4096 rows: 256 blocks of 16 rows (within 264).
    assert_eq!(wr(false, 2, 2).blocks(4096, &H200), 256);
    // k / v 1024 rows: 64 blocks.
    assert_eq!(wr(false, 2, 2).blocks(1024, &H200), 64);
    // down 4096 rows of 8: 512 wanted, the grid's 264 (warps walk 2 row groups or so).
    assert_eq!(wr(false, 1, 3).blocks(4096, &H200), 264);
    // gate + up 14336 rows: 1792 wanted, 264.
    assert_eq!(wr(true, 1, 2).blocks(14336, &H200), 264);
    // q / k / v in one launch: 4096 + 1024 + 1024 rows in groups of 2, 384 blocks wanted.
    let s = MatvecKernel::WrSegs {
        format: bf,
        segs: 3,
        rows_per_warp: 2,
        depth: 2,
    };
    assert_eq!(mv_seg_rows(2, &[4096, 1024, 1024]), 6144);
    assert_eq!(mv_seg_rows(2, &[513, 130, 127]), 514 + 130 + 128);
    assert_eq!(s.rows_per_block(), 16);
    assert_eq!(s.blocks(6144, &H200), 264);
    assert_eq!(s.blocks(mv_seg_rows(2, &[512, 128, 128]), &H200), 48);
}
