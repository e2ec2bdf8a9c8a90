//! Tests of the tiled GEMM's host side (ops/gemmt.rs).

use super::tmap::{MapSpec, MapTy, Swizzle, weight_specs, x_spec};
use super::*;
use QuantFormat::{BF16, F16, Q4_0, Q8_0};

#[test]
fn tm_kinds_are_the_entry_suffixes() {
    for f in select::GEMMTM_KINDS {
        assert_eq!(tm_kind(select::format_suffix(f)), Some(f));
    }
    assert_eq!(tm_kind("q8_0"), Some(Q8_0));
    assert_eq!(tm_kind("bf16"), Some(BF16));
    for k in ["q4_k", "q6_k", "f32", "?", ""] {
        assert_eq!(tm_kind(k), None, "{k}");
    }
}

#[test]
fn weight_maps_by_kind() {
    let (a, rows, k) = (0x7f00_0000_0000u64, 192, 768);
    // Q4_0 (as before this kind list grew): quants [rows][k / 2] bytes, box 32 x 64, no
    // swizzle; scales [rows][k / 32] u16 after them, box 8 x 64.
    let (w, s) = weight_specs(Q4_0, a, rows, k).unwrap();
    let s = s.unwrap();
    assert_eq!((w.ty, w.es, w.addr), (MapTy::U8, 1, a));
    assert_eq!(
        (w.dims, w.stride, w.boxd, w.swizzle),
        ([384, 192], 384, [32, 64], Swizzle::None)
    );
    assert_eq!((s.ty, s.es, s.addr), (MapTy::U16, 2, a + 192 * 384));
    assert_eq!(
        (s.dims, s.stride, s.boxd, s.swizzle),
        ([24, 192], 48, [8, 64], Swizzle::None)
    );
    // Q8_0: quants [rows][k] bytes, box 64 x 64 in the 64-byte swizzle; scales after them.
    let (w, s) = weight_specs(Q8_0, a, rows, k).unwrap();
    let s = s.unwrap();
    assert_eq!((w.ty, w.es, w.addr), (MapTy::U8, 1, a));
    assert_eq!(
        (w.dims, w.stride, w.boxd, w.swizzle),
        ([768, 192], 768, [64, 64], Swizzle::B64)
    );
    assert_eq!((s.ty, s.es, s.addr), (MapTy::U16, 2, a + 192 * 768));
    assert_eq!(
        (s.dims, s.stride, s.boxd, s.swizzle),
        ([24, 192], 48, [8, 64], Swizzle::None)
    );
    // F16 and BF16: [rows][k] 16-bit values, box 64 x 64, 128-byte swizzle, no scales.
    for (f, ty) in [(F16, MapTy::F16), (BF16, MapTy::Bf16)] {
        let (w, s) = weight_specs(f, a, rows, k).unwrap();
        assert_eq!(s, None);
        assert_eq!((w.ty, w.es, w.addr), (ty, 2, a));
        assert_eq!(
            (w.dims, w.stride, w.boxd, w.swizzle),
            ([768, 192], 1536, [64, 64], Swizzle::B128)
        );
    }
    assert_eq!(weight_specs(QuantFormat::Q4_K, a, rows, k), None);
    assert_eq!(weight_specs(QuantFormat::F32, a, rows, k), None);
}

/// Whatever select::gemmt_tm lets through encodes (the TMA's rules hold), and a stage's
/// boxes bring the bytes the kernel's `full` barrier expects (GtmCfg::TX: x's box, then
/// per 64-row half the weight box and the scale box), or its consumers would wait forever.
#[test]
fn every_accepted_shape_encodes_and_fills_a_stage() {
    let a = 0x7f00_0000_0000u64;
    let shapes: [(usize, &[usize]); 5] = [
        (4096, &[4096, 1024, 1024]),
        (4096, &[4096]),
        (4096, &[14336]),
        (14336, &[4096]),
        (768, &[192]),
    ];
    for f in select::GEMMTM_KINDS {
        for &(k, rows) in &shapes {
            assert!(select::gemmt_tm((9, 0), 1, f, k, rows), "{f} {k}");
            for tn in select::GEMMTM_TN {
                let x = x_spec(a, 512, k, tn);
                assert!(x.ok(), "{f} {k} x");
                for &r in rows {
                    let (w, s) = weight_specs(f, a, r, k).unwrap();
                    assert!(w.ok() && s.is_none_or(|s| s.ok()), "{f} k {k} rows {r}");
                    let half = w.box_bytes() + s.map_or(0, |s| s.box_bytes());
                    assert_eq!(
                        x.box_bytes() + 2 * half,
                        (tn * 128 + select::gemmtm_weight_stage_bytes(f)) as u64,
                        "{f} TN {tn}"
                    );
                }
            }
        }
        // Every k the rule takes, up to 16384, at 64 rows.
        for k in (32..=16384).step_by(32) {
            if select::gemmt_tm((9, 0), 1, f, k, &[64]) {
                let (w, s) = weight_specs(f, a, 64, k).unwrap();
                assert!(w.ok() && s.is_none_or(|s| s.ok()), "{f} k {k}");
            }
        }
    }
    // Why Q8_0 (and Q4_0) take k a multiple of 256: k = 896 has scale rows of 56 bytes.
    let (w, s) = weight_specs(Q8_0, a, 64, 896).unwrap();
    assert!(w.ok());
    assert!(!s.unwrap().ok());
    assert!(!select::gemmt_tm((9, 0), 1, Q8_0, 896, &[64]));
    // A 64-byte swizzle takes box rows of at most 64 bytes.
    let wide = MapSpec {
        boxd: [128, 64],
        ..weight_specs(Q8_0, a, 64, 4096).unwrap().0
    };
    assert!(!wide.ok());
}
