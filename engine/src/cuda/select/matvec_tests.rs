//! Tests of the matvec kernel choices (select/matvec.rs).

use super::*;
use crate::cuda::select::tests::{H200, RTX};

use crate::cuda::sources::consts::MV_MAX_TOK;

#[test]
fn float_formats_take_at_most_two_rows_per_warp_for_one_token() {
    let dev = H200;
    for f in [QuantFormat::F32, QuantFormat::F16, QuantFormat::BF16] {
        let MatvecKernel::MultiRow { rows_per_warp, .. } =
            choose_matvec(f, 128_256, 4096, 1, &dev, None).unwrap()
        else {
            panic!("multi-row")
        };
        assert_eq!(rows_per_warp, 2, "{f}");
        let MatvecKernel::GluMultiRow { rows_per_warp, .. } =
            choose_matvec_glu(f, 14_336, 4096, 1, &dev, None).unwrap()
        else {
            panic!("glu")
        };
        assert_eq!(rows_per_warp, 1, "{f}");
    }
    let MatvecKernel::MultiRow { rows_per_warp, .. } =
        choose_matvec(QuantFormat::Q4_0, 128_256, 4096, 1, &dev, Some(false)).unwrap()
    else {
        panic!("multi-row")
    };
    assert_eq!(rows_per_warp, 4);
}

#[test]
fn matvec_choice() {
    for dev in [H200, RTX] {
        let c = choose_matvec(QuantFormat::Q4_K, 896, 4864, 1, &dev, None).unwrap();
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
    // (Today's entry points: the streamed kernel is kept out, `Some(false)`.)
    let r = |rows, dev: &DeviceFacts| match choose_matvec(
        QuantFormat::Q4_0,
        rows,
        4096,
        1,
        dev,
        Some(false),
    )
    .unwrap()
    {
        MatvecKernel::MultiRow { rows_per_warp, .. } => rows_per_warp,
        MatvecKernel::GluMultiRow { .. }
        | MatvecKernel::Pair { .. }
        | MatvecKernel::Wr { .. }
        | MatvecKernel::WrSegs { .. }
        | MatvecKernel::WrTok { .. } => 0,
    };
    assert_eq!(r(1024, &H200), 1);
    assert_eq!(r(4096, &H200), 2);
    assert_eq!(r(14336, &H200), 4);
    assert_eq!(r(128256, &H200), 4);
    assert_eq!(r(4096, &RTX), 4);
    assert_eq!(r(2048, &RTX), 2);
    assert_eq!(r(1, &RTX), 1);
    let c = choose_matvec(QuantFormat::Q4_0, 4096, 4096, 1, &H200, Some(false)).unwrap();
    assert_eq!(c.rows_per_block(), 16);
    assert_eq!(c.entry(), "matvec_q4_0_r2");
    // Shared memory: one tile of k/32 chunks of 33 floats, capped at MV_TILE chunks.
    assert_eq!(c.shared_bytes(4096), 128 * 33 * 4);
    assert_eq!(c.shared_bytes(1 << 20), MV_MAX_SHARED_BYTES);
    // Gate/up pairs: at most 2 rows of each matrix per warp; 14336-row gate/up on the
    // H200 -> 2, a small MLP -> 1; the same shape checks as a single matvec.
    let g = choose_matvec_glu(QuantFormat::Q4_K, 14336, 4096, 1, &H200, None).unwrap();
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
    let g = choose_matvec_glu(QuantFormat::Q8_0, 1024, 512, 1, &H200, None).unwrap();
    assert_eq!(g.entry(), "matvec_q8_0_glu_r1");
    assert!(choose_matvec_glu(QuantFormat::Q4_K, 64, 896, 1, &H200, None).is_err());
    assert!(
        choose_matvec_glu(
            QuantFormat::Q8_0,
            64,
            512,
            MV_LAUNCH_MAX_TOK + 1,
            &H200,
            None
        )
        .is_err()
    );
    // K-quant rows must be whole super-blocks; 32-blocks must be whole too.
    assert!(matches!(
        choose_matvec(QuantFormat::Q4_K, 8, 896, 1, &H200, None),
        Err(CudaError::Shape { .. })
    ));
    assert!(choose_matvec(QuantFormat::Q8_0, 8, 896, 8, &H200, None).is_ok());
    assert!(
        choose_matvec(
            QuantFormat::Q8_0,
            8,
            896,
            MV_LAUNCH_MAX_TOK + 1,
            &H200,
            None
        )
        .is_err()
    );
    // Up to MV_LAUNCH_MAX_TOK rows in one launch of the batched entry points.
    let c = choose_matvec(QuantFormat::Q8_0, 8, 896, MV_LAUNCH_MAX_TOK, &H200, None).unwrap();
    assert_eq!(c.tokens_per_pass(), MV_BATCH_TOK);
    assert!(choose_matvec(QuantFormat::Q8_0, 8, 896, 0, &H200, None).is_err());
    assert!(choose_matvec(QuantFormat::F32, 8, 40, 1, &H200, None).is_err());
    assert!(matches!(
        choose_matvec(QuantFormat::Q3_K, 8, 256, 1, &H200, None),
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
    let c = choose_matvec(QuantFormat::Q4_0, 4096, 4096, 8, &H200, None).unwrap();
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
    let c = choose_matvec(QuantFormat::Q4_0, 1024, 4096, 3, &H200, None).unwrap();
    assert_eq!(c.entry(), "matvec_q4_0_tb_r2");
    let c = choose_matvec(QuantFormat::Q6_K, 128256, 4096, 5, &H200, None).unwrap();
    assert_eq!(c.entry(), "matvec_q6_k_tb_r2");
    let g = choose_matvec_glu(QuantFormat::Q8_0, 1024, 512, 3, &H200, None).unwrap();
    assert_eq!(g.entry(), "matvec_q8_0_glu_tb_r1");
    let g = choose_matvec_glu(QuantFormat::Q4_0, 14336, 4096, 8, &H200, None).unwrap();
    assert_eq!(g.entry(), "matvec_q4_0_glu_tb_r1");
    assert_eq!(
        g.to_string(),
        "matvec_q4_0/glu-multi-row(r=1,warps=8,tok=8)"
    );
    // Every chosen entry point exists in the family's list.
    use crate::cuda::sources::Family;
    let listed = [Family::Matvec, Family::MatvecBatch]
        .map(|f| f.entry_points())
        .concat();
    for f in KERNEL_FORMATS {
        let unit = f.block_geometry().0.max(32);
        for rows in [1, 67, 1024, 4096, 14336, 128256] {
            for n in (1..=MV_MAX_TOK).chain([MV_LAUNCH_MAX_TOK]) {
                for dev in [H200, RTX] {
                    let a = choose_matvec(f, rows, unit * 4, n, &dev, None).unwrap();
                    let b = choose_matvec_glu(f, rows, unit * 4, n, &dev, None).unwrap();
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
    let mv = crate::cuda::sources::SOURCES
        .iter()
        .find(|s| s.path == "matvec.cu")
        .unwrap();
    assert!(mv.text.contains(&format!("#define MV_XCS {MV_XCS}\n")));
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
fn streamed_kernel_at_llama_8b_shapes_on_the_h200() {
    let q4 = QuantFormat::Q4_0;
    let wr = |glu, r, d| MatvecKernel::Wr {
        format: q4,
        glu,
        rows_per_warp: r,
        depth: d,
    };
    // gate + up 2 x 14336 x 4096: 1 row of each per warp, 6 slots.
    let g = choose_matvec_glu(q4, 14336, 4096, 1, &H200, None).unwrap();
    assert_eq!(g, wr(true, 1, 6));
    assert_eq!(g.entry(), "matvec_q4_0_glu_wr_r1_d6");
    assert_eq!(g.to_string(), "matvec_q4_0/glu-wr(r=1,d=6,warps=8)");
    // x 18 KB + ring 8 warps x 6 slots x 2 units x 32 lanes x 20 bytes = 78 KB.
    assert_eq!(g.shared_bytes(4096), 128 * 36 * 4 + 8 * 6 * 2 * 32 * 20);
    assert_eq!(g.blocks(14336, &H200), 264);
    assert_eq!(g.tokens_per_pass(), 1);
    // q / o 4096 x 4096: 4 rows per warp, 3 slots; 128 blocks of 32 rows.
    let q = choose_matvec(q4, 4096, 4096, 1, &H200, None).unwrap();
    assert_eq!(q, wr(false, 4, 3));
    assert_eq!(q.entry(), "matvec_q4_0_wr_r4_d3");
    assert_eq!(q.to_string(), "matvec_q4_0/wr(r=4,d=3,warps=8)");
    assert_eq!(q.blocks(4096, &H200), 128);
    // down 4096 x 14336: 63 KB of x leave room for 2 slots only (3 would make 123 KB,
    // one block per SM).
    let d = choose_matvec(q4, 4096, 14336, 1, &H200, None).unwrap();
    assert_eq!(d, wr(false, 4, 2));
    assert_eq!(d.shared_bytes(14336), 448 * 36 * 4 + 8 * 2 * 4 * 32 * 20);
    assert!(wr(false, 4, 3).shared_bytes(14336) > mv_wr_max_shared_bytes((9, 0)).unwrap());
    // k / v 1024 x 4096: 32 blocks of 4 rows per warp leave most SMs idle: today's
    // kernel, unless forced.
    let k = choose_matvec(q4, 1024, 4096, 1, &H200, None).unwrap();
    assert_eq!(k.entry(), "matvec_q4_0_r1");
    assert_eq!(
        choose_matvec(q4, 1024, 4096, 1, &H200, Some(true)).unwrap(),
        wr(false, 4, 3)
    );
    // 3/4 of a block per SM: 99 blocks of 32 rows on 132 SMs.
    assert_eq!(
        choose_matvec(q4, 99 * 32, 4096, 1, &H200, None).unwrap(),
        wr(false, 4, 3)
    );
    assert_eq!(
        choose_matvec(q4, 98 * 32, 4096, 1, &H200, None)
            .unwrap()
            .entry(),
        "matvec_q4_0_r1"
    );
    // The output head (Q4_0): many row groups per warp in a grid of 2 blocks per SM.
    let h = choose_matvec(q4, 128_256, 4096, 1, &H200, None).unwrap();
    assert_eq!(h, wr(false, 4, 3));
    assert_eq!(h.blocks(128_256, &H200), 264);
    // ASSAY_MV_WR=0: today's entry points everywhere.
    assert_eq!(
        choose_matvec_glu(q4, 14336, 4096, 1, &H200, Some(false))
            .unwrap()
            .entry(),
        "matvec_q4_0_glu_r2"
    );
    assert_eq!(
        choose_matvec(q4, 4096, 14336, 1, &H200, Some(false))
            .unwrap()
            .entry(),
        "matvec_q4_0_r2"
    );
    // Q8_0 (32 quant bytes per chunk): the shallower rings, only when forced; by
    // default today's entry points (measured faster, MV_WR_DEFAULT_FORMATS).
    let q8 = choose_matvec(QuantFormat::Q8_0, 4096, 4096, 1, &H200, Some(true)).unwrap();
    assert_eq!(q8.entry(), "matvec_q8_0_wr_r4_d2");
    let g8 = choose_matvec_glu(QuantFormat::Q8_0, 14336, 4096, 1, &H200, Some(true)).unwrap();
    assert_eq!(g8.entry(), "matvec_q8_0_glu_wr_r1_d4");
    let q8 = choose_matvec(QuantFormat::Q8_0, 4096, 4096, 1, &H200, None).unwrap();
    assert_eq!(q8.entry(), "matvec_q8_0_r2");
    let g8 = choose_matvec_glu(QuantFormat::Q8_0, 14336, 4096, 1, &H200, None).unwrap();
    assert_eq!(g8.entry(), "matvec_q8_0_glu_r2");
}

#[test]
fn streamed_kernel_requirements_fall_back_to_todays_entry_points() {
    let q4 = QuantFormat::Q4_0;
    for wr in [None, Some(true)] {
        // Several tokens, k not a multiple of 1024, other formats, other devices.
        let c = choose_matvec(q4, 4096, 4096, 2, &H200, wr).unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_tb_r2");
        let c = choose_matvec(q4, 4096, 4096 + 32, 1, &H200, wr).unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_r2");
        let c = choose_matvec(QuantFormat::Q4_K, 4096, 4096, 1, &H200, wr).unwrap();
        assert_eq!(c.entry(), "matvec_q4_k_r2");
        let c = choose_matvec(QuantFormat::Q6_K, 128_256, 4096, 1, &H200, wr).unwrap();
        assert_eq!(c.entry(), "matvec_q6_k_r4");
        let c = choose_matvec_glu(q4, 14336, 4096, 1, &RTX, wr).unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_glu_r2");
        for cc in [(8, 0), (8, 9), (10, 0), (12, 0)] {
            let dev = DeviceFacts {
                compute_capability: cc,
                sm_count: 132,
            };
            assert!(!matches!(
                choose_matvec(q4, 4096, 4096, 1, &dev, wr).unwrap(),
                MatvecKernel::Wr { .. }
            ));
            assert_eq!(mv_wr_max_shared_bytes(cc), None);
        }
        // No ring leaves room for 2 blocks per SM: x alone would take 144 KB.
        let c = choose_matvec(q4, 4096, 32768, 1, &H200, wr).unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_r2");
        // Q8_0's down: its rings do not fit beside 63 KB of x.
        let c = choose_matvec(QuantFormat::Q8_0, 4096, 14336, 1, &H200, wr).unwrap();
        assert_eq!(c.entry(), "matvec_q8_0_r2");
        // The shape checks come first.
        assert!(choose_matvec(q4, 4096, 0, 1, &H200, wr).is_err());
        assert!(choose_matvec(q4, 0, 4096, 1, &H200, wr).is_err());
    }
}

#[test]
fn every_streamed_choice_is_listed_and_fits() {
    use crate::cuda::sources::Family;
    let listed = Family::Matvec.entry_points();
    let max = mv_wr_max_shared_bytes((9, 0)).unwrap();
    // Two blocks of it per SM: 228 KiB / 2 less the system's 1 KiB and the norm's
    // 64 bytes.
    assert_eq!(max, 228 * 1024 / 2 - 1024 - 64);
    let mut seen = std::collections::BTreeSet::new();
    for f in MV_WR_FORMATS {
        for k in (1..=16).map(|m| m * MV_WR_K_STEP) {
            for rows in [1, 67, 4096, 14336] {
                let segs = [rows, 67, 5];
                let cs = [
                    choose_matvec(f, rows, k, 1, &H200, Some(true)).unwrap(),
                    choose_matvec_glu(f, rows, k, 1, &H200, Some(true)).unwrap(),
                    choose_matvec_segs(f, &segs, k, 1, &H200, Some(true), None)
                        .unwrap()
                        .unwrap_or(MatvecKernel::Pair {
                            format: f,
                            rows_per_warp: 1,
                        }),
                ];
                for c in cs {
                    if let MatvecKernel::Wr { .. } | MatvecKernel::WrSegs { .. } = c {
                        assert!(listed.contains(&c.entry()), "{}", c.entry());
                        assert!(is_matvec_wr_entry(&c.entry()));
                        assert!(c.shared_bytes(k) <= max, "{c} k={k}");
                        seen.insert(c.entry());
                    }
                    // The segmented launch with rope_kv in its epilogue (ASSAY_ROPE_FUSE):
                    // the same kernel, shared memory and grid.
                    if let MatvecKernel::WrSegs { format, .. } = c
                        && super::ROPE_FUSE_FORMATS.contains(&format)
                    {
                        let e = super::RopeFuse::QkvEpilogue(c).entry();
                        assert!(listed.contains(&e), "{e}");
                        assert!(is_matvec_wr_entry(&e));
                        seen.insert(e);
                    }
                }
            }
        }
    }
    // Every streamed entry point is reachable, and only they are streamed entries (the
    // multi-token ones, `_wrt`: multi_token_streamed_only_when_asked).
    let wr: Vec<&String> = listed
        .iter()
        .filter(|e| is_matvec_wr_entry(e) && !e.contains("_wrt"))
        .collect();
    assert_eq!(wr.len(), seen.len());
    assert_eq!(
        wr.len(),
        MV_WR_FORMATS
            .iter()
            .map(|&f| {
                // plain + seg3 per ring, gate + up per ring, and seg3rope per ring for the
                // formats of ASSAY_MATVEC_WR (Q4_0, Q8_0; BF16's list has none).
                let rope = if f == QuantFormat::BF16 { 0 } else { 1 };
                (2 + rope) * mv_wr_rd(f, false).len() + mv_wr_rd(f, true).len()
            })
            .sum::<usize>()
    );
    assert!(!is_matvec_wr_entry("matvec_q4_0_r2") && !is_matvec_wr_entry("matvec_q4_0_glu_r1"));
    // The kernel's constants are these ones.
    let mv = crate::cuda::sources::source("matvec.cu").unwrap();
    assert!(mv.contains(&format!("#define MV_WR_XS {MV_WR_XS}\n")));
    assert!(mv.contains(&format!("#define MV_WR_MINB {MV_WR_BLOCKS_PER_SM}\n")));
    for (r, d) in MV_WR_RD {
        assert!(mv.contains(&format!("    ASSAY_MATVEC_WR_R(name, F, {r}, {d})")));
    }
    for (r, d) in MV_WR_GLU_RD {
        assert!(mv.contains(&format!("    ASSAY_MATVEC_GLU_WR_R(name, F, {r}, {d})")));
    }
    for (r, d) in MV_WR_RD {
        assert!(mv.contains(&format!(
            "    ASSAY_MATVEC_SEG{MV_WR_SEGS}_WR_R(name, F, {r}, {d})"
        )));
    }
    // BF16's own (R, D) lists: the lines of ASSAY_MATVEC_WR_HALF, instantiated for bf16.
    let half = &mv[mv.find("#define ASSAY_MATVEC_WR_HALF(name, F)").unwrap()..];
    let half = &half[..half.find("#if").unwrap()];
    for (r, d) in MV_WR_HALF_RD {
        assert!(half.contains(&format!("    ASSAY_MATVEC_WR_R(name, F, {r}, {d})")));
        assert!(half.contains(&format!(
            "    ASSAY_MATVEC_SEG{MV_WR_SEGS}_WR_R(name, F, {r}, {d})"
        )));
    }
    for (r, d) in MV_WR_HALF_GLU_RD {
        assert!(half.contains(&format!("    ASSAY_MATVEC_GLU_WR_R(name, F, {r}, {d})")));
    }
    assert_eq!(
        half.matches("ASSAY_MATVEC_").count(),
        1 + 2 * MV_WR_HALF_RD.len() + MV_WR_HALF_GLU_RD.len()
    );
    assert!(mv.contains("\nASSAY_MATVEC_WR_HALF(bf16, FmtBF16)\n"));
    let fmts = crate::cuda::sources::source("common/formats.cuh").unwrap();
    let body = &fmts[fmts.find("struct HalfFmt : RowFmt<F> {").unwrap()..];
    let body = &body[..body.find("\n};").unwrap()];
    let qb = wr_quant_bytes(QuantFormat::BF16).unwrap();
    assert!(body.contains(&format!("static constexpr int QBYTES = {qb};")));
    assert!(body.contains("static constexpr bool WR_SCALE = false;"));
    assert_eq!(wr_scale_bytes(QuantFormat::BF16), 0);
    for (f, name) in [
        (QuantFormat::Q4_0, "FmtQ4_0"),
        (QuantFormat::Q8_0, "FmtQ8_0"),
    ] {
        let body = &fmts[fmts.find(&format!("struct {name} {{")).unwrap()..];
        let body = &body[..body.find("\n};").unwrap()];
        let qb = wr_quant_bytes(f).unwrap();
        assert!(
            body.contains(&format!("static constexpr int QBYTES = {qb};")),
            "{f}"
        );
        assert!(
            body.contains("static constexpr bool WR_SCALE = true;"),
            "{f}"
        );
        assert_eq!(wr_scale_bytes(f), 4);
    }
}

#[test]
fn q_k_and_v_of_llama_8b_take_one_segmented_streamed_launch_on_the_h200() {
    let q4 = QuantFormat::Q4_0;
    let qkv = [4096, 1024, 1024];
    let seg = |format, depth| MatvecKernel::WrSegs {
        format,
        segs: 3,
        rows_per_warp: 4,
        depth,
    };
    let c = choose_matvec_segs(q4, &qkv, 4096, 1, &H200, None, None)
        .unwrap()
        .unwrap();
    assert_eq!(c, seg(q4, 3));
    assert_eq!(c.entry(), "matvec_q4_0_seg3_wr_r4_d3");
    assert_eq!(c.to_string(), "matvec_q4_0/seg3-wr(r=4,d=3,warps=8)");
    assert!(is_matvec_wr_entry(&c.entry()));
    assert_eq!(c.tokens_per_pass(), 1);
    // The plain streamed kernel's ring and shared memory (q alone takes the same).
    assert_eq!(
        c.shared_bytes(4096),
        choose_matvec(q4, 4096, 4096, 1, &H200, None)
            .unwrap()
            .shared_bytes(4096)
    );
    // 6144 rows: 192 blocks of 32 rows, within the persistent grid's 264.
    assert_eq!(mv_seg_rows(4, &qkv), 6144);
    assert_eq!(c.blocks(mv_seg_rows(4, &qkv), &H200), 192);
    // Row counts not multiples of 4: each matrix padded on its own.
    assert_eq!(mv_seg_rows(4, &[513, 130, 127]), 516 + 132 + 128);
    assert_eq!(mv_seg_rows(1, &[513, 130, 127]), 770);
    // Q8_0: only when forced (ASSAY_MV_QKV=1), with the shallower ring.
    let q8 = QuantFormat::Q8_0;
    assert_eq!(
        choose_matvec_segs(q8, &qkv, 4096, 1, &H200, None, None).unwrap(),
        None
    );
    assert_eq!(
        choose_matvec_segs(q8, &qkv, 4096, 1, &H200, None, Some(true)).unwrap(),
        None
    );
    assert_eq!(
        choose_matvec_segs(q8, &qkv, 4096, 1, &H200, Some(true), None).unwrap(),
        Some(seg(q8, 2))
    );
    // The switches: ASSAY_MV_QKV=0 never; ASSAY_MV_WR=0 turns the default off, and
    // ASSAY_MV_QKV=1 forces it even then.
    for (qkv_sw, wr_sw, on) in [
        (Some(false), None, false),
        (Some(false), Some(true), false),
        (None, Some(false), false),
        (Some(true), Some(false), true),
        (None, Some(true), true),
    ] {
        let c = choose_matvec_segs(q4, &qkv, 4096, 1, &H200, qkv_sw, wr_sw).unwrap();
        assert_eq!(c.is_some(), on, "{qkv_sw:?} {wr_sw:?}");
    }
}

#[test]
fn segmented_streamed_kernel_requirements() {
    let q4 = QuantFormat::Q4_0;
    let qkv = [4096, 1024, 1024];
    for sw in [None, Some(true)] {
        let none = |fmt, rows: &[usize], k, ntok, dev: &DeviceFacts| {
            choose_matvec_segs(fmt, rows, k, ntok, dev, sw, None).unwrap()
        };
        // Several tokens, k not a multiple of 1024, other formats, other devices, not 3
        // matrices, x too large for a ring beside it.
        assert_eq!(none(q4, &qkv, 4096, 2, &H200), None);
        assert_eq!(none(q4, &qkv, 4096 + 32, 1, &H200), None);
        assert_eq!(none(QuantFormat::Q4_K, &qkv, 4096, 1, &H200), None);
        assert_eq!(none(QuantFormat::F16, &qkv, 4096, 1, &H200), None);
        assert_eq!(none(q4, &qkv, 4096, 1, &RTX), None);
        for cc in [(8, 0), (8, 9), (10, 0), (12, 0)] {
            let dev = DeviceFacts {
                compute_capability: cc,
                sm_count: 132,
            };
            assert_eq!(none(q4, &qkv, 4096, 1, &dev), None);
        }
        assert_eq!(none(q4, &qkv[..2], 4096, 1, &H200), None);
        assert_eq!(none(q4, &[4096, 1024, 1024, 1024], 4096, 1, &H200), None);
        assert_eq!(none(q4, &qkv, 32768, 1, &H200), None);
        // The shape checks come first, for every matrix.
        assert!(choose_matvec_segs(q4, &[4096, 0, 1024], 4096, 1, &H200, sw, None).is_err());
        assert!(choose_matvec_segs(q4, &qkv, 0, 1, &H200, sw, None).is_err());
        assert!(choose_matvec_segs(q4, &qkv, 4096, 0, &H200, sw, None).is_err());
    }
    // By default only with 3/4 of a block per SM (99 blocks of 32 rows on 132 SMs): a
    // small model's q / k / v stay in their own launches unless forced.
    let small = [896, 128, 128];
    assert_eq!(
        choose_matvec_segs(q4, &small, 1024, 1, &H200, None, None).unwrap(),
        None
    );
    assert!(
        choose_matvec_segs(q4, &small, 1024, 1, &H200, Some(true), None)
            .unwrap()
            .is_some()
    );
    let at = |rows: [usize; 3]| {
        choose_matvec_segs(q4, &rows, 1024, 1, &H200, None, None)
            .unwrap()
            .is_some()
    };
    assert!(at([99 * 32 - 2 * 4, 4, 4]));
    assert!(!at([98 * 32 - 2 * 4, 4, 4]));
    // Padding counts: 3129 + 1 + 1 rows are 98 blocks' worth, but padded per matrix
    // (3132 + 4 + 4) they make 99.
    assert!(at([98 * 32 - 7, 1, 1]));
}

#[test]
fn the_q6_k_head_is_the_plain_r4_entry_point() {
    let h200 = DeviceFacts {
        compute_capability: (9, 0),
        sm_count: 132,
    };
    let c = choose_matvec(QuantFormat::Q6_K, 128_256, 4096, 1, &h200, None).unwrap();
    assert_eq!(c.entry(), "matvec_q6_k_r4");
    assert_eq!(c.to_string(), "matvec_q6_k/multi-row(r=4,warps=8)");
    // Every one-token entry point is one of the family's plain names.
    use crate::cuda::sources::Family;
    let listed = Family::Matvec.entry_points();
    assert!(listed.iter().all(|e| !e.contains("_o")), "{listed:?}");
    assert!(listed.contains(&c.entry()));
}

/// The multi-token streamed kernel: only when asked, 2..=8 tokens, Q4_0, sm_90, on
/// Llama-3.1-8B's shapes; the fewest tokens that hold ntok; nothing else changes.
#[test]
fn multi_token_streamed_only_when_asked() {
    use crate::cuda::sources::Family;
    let q4 = QuantFormat::Q4_0;
    // (rows, k, glu): q 4096 x 4096, k / v 1024 x 4096, gate / up 14336 x 4096 (GLU),
    // down 4096 x 14336.
    let shapes = [
        (4096, 4096, false),
        (1024, 4096, false),
        (14336, 4096, true),
        (4096, 14336, false),
    ];
    let listed = Family::Matvec.entry_points();
    for (rows, k, glu) in shapes {
        for ntok in 1..=9 {
            let pick = |dev: &DeviceFacts, wrt: bool, format: QuantFormat| {
                choose_matvec_tok(format, rows, k, ntok, dev, None, wrt, glu)
            };
            let today = if glu {
                choose_matvec_glu(q4, rows, k, ntok, &H200, None)
            } else {
                choose_matvec(q4, rows, k, ntok, &H200, None)
            };
            // Off: today's choice, whatever ntok.
            assert_eq!(pick(&H200, false, q4).ok(), today.as_ref().ok().copied());
            let on = pick(&H200, true, q4);
            match ntok {
                1 => assert_eq!(on.ok(), today.ok()),
                2..=8 => {
                    let c = on.unwrap();
                    let want = if ntok <= 4 { 4 } else { 8 };
                    assert_eq!(
                        c,
                        MatvecKernel::WrTok {
                            format: q4,
                            glu,
                            tokens: want,
                            rows_per_warp: if glu { 1 } else { 2 },
                            depth: 4,
                        }
                    );
                    assert_eq!(c.tokens_per_pass(), want as usize);
                    assert!(listed.contains(&c.entry()), "{}", c.entry());
                    assert!(is_matvec_wr_entry(&c.entry()));
                    assert!(c.shared_bytes(k) <= mv_wr_max_shared_bytes((9, 0)).unwrap());
                    assert_eq!(
                        c.blocks(rows, &H200),
                        (rows.div_ceil(c.rows_per_block())).min(264)
                    );
                    // Not on other devices, not for other formats.
                    assert_eq!(pick(&RTX, true, q4).ok(), pick(&RTX, false, q4).ok());
                    let q8 = QuantFormat::Q8_0;
                    assert_eq!(pick(&H200, true, q8).ok(), pick(&H200, false, q8).ok());
                }
                // Past the most tokens of an entry: today's choice.
                _ => assert_eq!(on.ok(), today.ok()),
            }
        }
    }
    // The ring alone: 8 warps x 4 slots x 2 units x 32 lanes x 20 bytes.
    assert_eq!(mv_wrt_shared_bytes(q4, false, 2, 4), 40960);
    assert_eq!(mv_wrt_shared_bytes(q4, true, 1, 4), 40960);
    assert_eq!(
        MatvecKernel::WrTok {
            format: q4,
            glu: true,
            tokens: 8,
            rows_per_warp: 1,
            depth: 4
        }
        .entry(),
        "matvec_q4_0_glu_wrt8_r1_d4"
    );
}
