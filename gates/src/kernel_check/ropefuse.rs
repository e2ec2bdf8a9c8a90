//! kernel-check's cases of `rope_kv` fused into the q / k / v segmented launch
//! (`matvec_<fmt>_seg3rope_wr_r<R>_d<D>`, `ops::matvec_segs_rope`, `ASSAY_ROPE_FUSE=1`), on
//! the devices that run the segmented launch (sm_90; no lines elsewhere). Every line's name
//! holds `ropefuse`. For each format of [`select::ROPE_FUSE_FORMATS`] and each shape of
//! [`SHAPES`] (GQA 32 / 8 heads of 128, heads of 64 with full and partial rotation, a
//! frequency-factor table, biases, a folded norm), one token at a time over [`POSITIONS`]
//! (the same caches written position after position, as a decode does; across the
//! 64-position blocks of a permuted paged table; the last position past the cache: its
//! rotations happen, its store does not), bit for bit:
//! - the fused launch against the separate launches the decoder runs without it
//!   (`ops::matvec_segs`, then a one-token `ops::rope_kv`): q, k and v outputs (q and k
//!   rotated), and the whole K and V caches after the step;
//! - the decode attention (`ops::attention`) of that position over each path's q and
//!   caches.
//!
//! And for NeoX rotation (pairs across row groups): the fused wrapper launches nothing
//! (`Ok(None)`) and leaves the outputs and caches untouched (the decoder then runs the
//! separate launches).

use super::attention::{Paged, attend};
use super::cases::{case, e2s, poison, rand_vec, random_weights};
use super::{CheckLine, Rng, compare_exact};
use engine::cuda::cudarc::driver::CudaSlice;
use engine::cuda::ops::{self, AttnScratch, AttnShape, MatvecOpts, RopeStyle};
use engine::cuda::select::{self, MatvecKernel};
use engine::cuda::{DeviceWeight, Gpu};
use engine::quant::QuantFormat;
use half::f16;

/// One case: (q heads, kv heads, head_dim, n_rot, k, capacity, style, RoPE base, frequency
/// factors, biases, folded norm's w_offset).
type Case = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    RopeStyle,
    f32,
    bool,
    bool,
    Option<f32>,
);

/// The shapes (see the module header).
pub(super) const SHAPES: [Case; 6] = [
    // Llama-3.1-8B: GQA 32 / 8, head_dim 128, factors, folded norm.
    (
        32,
        8,
        128,
        128,
        4096,
        700,
        RopeStyle::Normal,
        500_000.0,
        true,
        false,
        Some(0.0),
    ),
    // The same heads at k = 1024, biases, no norm.
    (
        32,
        8,
        128,
        128,
        1024,
        300,
        RopeStyle::Normal,
        10_000.0,
        false,
        true,
        None,
    ),
    // head_dim 64, GQA 16 / 4.
    (
        16,
        4,
        64,
        64,
        2048,
        200,
        RopeStyle::Normal,
        1_000_000.0,
        false,
        false,
        Some(0.0),
    ),
    // head_dim 64, partial rotation (dims past n_rot pass through), w_offset 1 + biases.
    (
        8,
        2,
        64,
        32,
        1024,
        130,
        RopeStyle::Normal,
        10_000.0,
        false,
        true,
        Some(1.0),
    ),
    // k = 12288: Q4_0's shallower ring (no Q8_0 ring fits beside its x: Q4_0 only).
    (
        4,
        1,
        64,
        64,
        12288,
        130,
        RopeStyle::Normal,
        10_000.0,
        false,
        false,
        Some(0.0),
    ),
    // NeoX: not fused (nothing launched).
    (
        14,
        2,
        64,
        64,
        1024,
        130,
        RopeStyle::Neox,
        1_000_000.0,
        false,
        false,
        None,
    ),
];

/// Positions of the steps (those up to the capacity; `cap` itself lies past the cache).
pub(super) const POSITIONS: [usize; 10] = [0, 1, 63, 64, 65, 127, 128, 129, 511, 699];

/// The positions run for a cache of `cap`: [`POSITIONS`] below it, then `cap` (no store).
fn positions(cap: usize) -> Vec<usize> {
    let mut p: Vec<usize> = POSITIONS.iter().copied().filter(|&p| p < cap).collect();
    p.push(cap);
    p
}

/// Whether the segmented launch serves these matrices on `gpu` when forced.
fn segmented(gpu: &Gpu, format: QuantFormat, rows: &[usize; 3], k: usize) -> bool {
    matches!(
        select::choose_matvec_segs(format, rows, k, 1, &gpu.facts(), Some(true), None),
        Ok(Some(MatvecKernel::WrSegs { .. }))
    )
}

const FORCED: MatvecOpts = MatvecOpts {
    wr: None,
    wr_grid: None,
    qkv: Some(true),
    wrt: false,
};

/// Every case (an error becomes a failing line).
pub fn run_all(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    for format in select::ROPE_FUSE_FORMATS {
        for c in SHAPES {
            let (nh, nkv, hd, n_rot, k, cap, style, ..) = c;
            let rows = [nh * hd, nkv * hd, nkv * hd];
            if !segmented(gpu, format, &rows, k) {
                continue;
            }
            let name = format!(
                "ropefuse {format} heads={nh}/{nkv} head_dim={hd} n_rot={n_rot} k={k} \
                 cap={cap} {style:?}"
            );
            case(lines, "fusion", name, |name| {
                one_case(gpu, rng, format, c, name)
            });
        }
    }
}

/// The inputs of a case that do not change from step to step.
struct Fixed {
    w: Vec<DeviceWeight>,
    bias: Vec<CudaSlice<f32>>,
    norm_w: CudaSlice<f32>,
    table: ops::RopeTable,
    pg: Paged,
    bt: CudaSlice<i32>,
}

fn bits32(v: Vec<f32>) -> Vec<u32> {
    v.into_iter().map(f32::to_bits).collect()
}
fn bits16(v: Vec<f16>) -> Vec<u16> {
    v.into_iter().map(f16::to_bits).collect()
}

fn one_case(
    gpu: &Gpu,
    rng: &mut Rng,
    format: QuantFormat,
    c: Case,
    name: &str,
) -> Result<Vec<CheckLine>, String> {
    let (nh, nkv, hd, n_rot, k, cap, style, base, ff, with_bias, w_off) = c;
    let rows = [nh * hd, nkv * hd, nkv * hd];
    let (w, bias) = random_weights(gpu, rng, format, rows, k)?;
    let nw: Vec<f32> = (0..k).map(|_| 1.0 + 0.1 * rng.symmetric()).collect();
    let factors: Option<Vec<f32>> =
        ff.then(|| (0..n_rot / 2).map(|_| rng.range(1.0, 8.0)).collect());
    let fscale = if ff { 0.25 } else { 1.0 };
    let table = ops::RopeTable::new(gpu, base, n_rot, fscale, factors.as_deref()).map_err(e2s)?;
    let pg = Paged::new(rng, nkv, cap, hd);
    let fx = Fixed {
        w,
        bias,
        norm_w: gpu.upload(&nw).map_err(e2s)?,
        table,
        bt: pg.table(gpu)?,
        pg,
    };
    // Both paths' caches start from the same random contents.
    let init: Vec<f16> = (0..nkv * cap * hd)
        .map(|_| f16::from_f32(rng.symmetric()))
        .collect();
    let mut sep = (fx.pg.pool(gpu, &init)?, fx.pg.pool(gpu, &init)?);
    let mut fus = (fx.pg.pool(gpu, &init)?, fx.pg.pool(gpu, &init)?);
    let mut scratch = AttnScratch::new(gpu, 1, nh, hd, cap).map_err(e2s)?;
    let shape = ops::RopeKvShape {
        ntok: 1,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        capacity: cap,
    };
    let mut out = Vec::new();
    for p in positions(cap) {
        let x = gpu.upload(&rand_vec(rng, k, 1.0)).map_err(e2s)?;
        let dp = gpu.upload(&[p as i32][..]).map_err(e2s)?;
        let biases = |on: bool| [0, 1, 2].map(|s| on.then_some(&fx.bias[s] as _));
        let norm = w_off.map(|w_offset| ops::NormIn {
            weight: &fx.norm_w,
            eps: 1e-5,
            w_offset,
        });
        let ws = [&fx.w[0], &fx.w[1], &fx.w[2]];
        let outs = |gpu: &Gpu| -> Result<[CudaSlice<f32>; 3], String> {
            let y = |r| poison(gpu, r).map_err(e2s);
            Ok([y(rows[0])?, y(rows[1])?, y(rows[2])?])
        };
        // The separate launches (the decoder's default; ASSAY_ROPE_FUSE unset or 0).
        let mut ys = outs(gpu)?;
        {
            let [y0, y1, y2] = &mut ys;
            let c = ops::matvec_segs(
                gpu,
                ws,
                &x,
                1,
                biases(with_bias),
                norm,
                FORCED,
                [y0, y1, y2],
            )
            .map_err(e2s)?;
            if c.is_none() {
                return Err("the segmented launch was not chosen".into());
            }
            ops::rope_kv(
                gpu, y0, y1, &*y2, &mut sep.0, &mut sep.1, &fx.bt, &dp, &fx.table, style, shape,
            )
            .map_err(e2s)?;
        }
        // The fused launch.
        let mut yf = outs(gpu)?;
        let fused = {
            let [y0, y1, y2] = &mut yf;
            ops::matvec_segs_rope(
                gpu,
                ws,
                &x,
                biases(with_bias),
                norm,
                FORCED,
                [y0, y1, y2],
                ops::QkvRope {
                    k_cache: &mut fus.0,
                    v_cache: &mut fus.1,
                    bt: &fx.bt,
                    pos: &dp,
                    table: &fx.table,
                    style,
                    shape,
                },
            )
            .map_err(e2s)?
        };
        let at = format!("{name} pos={p}");
        if style == RopeStyle::Neox {
            // Not fused: nothing launched, the outputs still poisoned, the caches as before.
            out.push(compare_exact(
                "fusion",
                format!("{at}: NeoX falls back (nothing launched)"),
                &[fused.is_some()],
                &[false],
            ));
            let (pk, pv) = (fx.pg.pool(gpu, &init)?, fx.pg.pool(gpu, &init)?);
            for (s, m) in ["q", "k", "v"].iter().enumerate() {
                let got = bits32(gpu.download(&yf[s]).map_err(e2s)?);
                out.push(compare_exact(
                    "fusion",
                    format!("{at}: NeoX leaves {m} untouched"),
                    &got,
                    &vec![f32::NAN.to_bits(); rows[s]],
                ));
            }
            let dl = |b: &CudaSlice<f16>| gpu.download(b).map(bits16).map_err(e2s);
            out.push(compare_exact(
                "fusion",
                format!("{at}: NeoX leaves the K cache untouched"),
                &dl(&fus.0)?,
                &dl(&pk)?,
            ));
            out.push(compare_exact(
                "fusion",
                format!("{at}: NeoX leaves the V cache untouched"),
                &dl(&fus.1)?,
                &dl(&pv)?,
            ));
            // Keep the two paths' caches alike for the next step.
            fus = (fx.pg.pool(gpu, &init)?, fx.pg.pool(gpu, &init)?);
            sep = (fx.pg.pool(gpu, &init)?, fx.pg.pool(gpu, &init)?);
            continue;
        }
        let Some(fused) = fused else {
            return Err("the fused launch was not taken".into());
        };
        let what = format!("{at} [{fused}] == matvec_segs + rope_kv");
        for (s, m) in ["q", "k", "v"].iter().enumerate() {
            out.push(compare_exact(
                "fusion",
                format!("{what}: {m}"),
                &bits32(gpu.download(&yf[s]).map_err(e2s)?),
                &bits32(gpu.download(&ys[s]).map_err(e2s)?),
            ));
        }
        let logical = |b: &CudaSlice<f16>| fx.pg.logical(gpu, b).map(bits16);
        out.push(compare_exact(
            "fusion",
            format!("{what}: K cache"),
            &logical(&fus.0)?,
            &logical(&sep.0)?,
        ));
        out.push(compare_exact(
            "fusion",
            format!("{what}: V cache"),
            &logical(&fus.1)?,
            &logical(&sep.1)?,
        ));
        // The attention of the step over each path's q and caches (a position past the
        // cache has no attention to run).
        if p < cap {
            let s = AttnShape {
                ntok: 1,
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                capacity: cap,
                window: 0,
            };
            let scale = 1.0 / (hd as f32).sqrt();
            let mut att = |q: &CudaSlice<f32>, k: &CudaSlice<f16>, v: &CudaSlice<f16>| {
                let kv = ops::KvView { k, v, bt: &fx.bt };
                attend(gpu, q, &kv, &dp, s, scale, 0.0, &mut scratch).map(bits32)
            };
            let want = att(&ys[0], &sep.0, &sep.1)?;
            let got = att(&yf[0], &fus.0, &fus.1)?;
            out.push(compare_exact(
                "fusion",
                format!("{what}: attention output"),
                &got,
                &want,
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_check::wr::{H200, matvec_entries};
    use engine::cuda::select::{RopeFuseShape, choose_rope_fuse};
    use std::collections::BTreeSet;

    #[test]
    fn the_shapes_reach_every_fused_entry_point_and_the_fallback() {
        let mut seen = BTreeSet::new();
        let mut neox = 0;
        for f in select::ROPE_FUSE_FORMATS {
            for (nh, nkv, hd, n_rot, k, _, style, ..) in SHAPES {
                let rows = [nh * hd, nkv * hd, nkv * hd];
                let Ok(Some(kern)) =
                    select::choose_matvec_segs(f, &rows, k, 1, &H200, Some(true), None)
                else {
                    // Only Q8_0 at k = 12288 (no ring fits beside x).
                    assert!(f == QuantFormat::Q8_0 && k == 12288, "{f} {rows:?} {k}");
                    continue;
                };
                let s = RopeFuseShape {
                    ntok: 1,
                    n_heads: nh,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    n_rot,
                    neox: style == RopeStyle::Neox,
                    rows,
                };
                match choose_rope_fuse(true, Some(kern), s) {
                    Some(c) => {
                        seen.insert(c.entry());
                    }
                    None => {
                        assert_eq!(style, RopeStyle::Neox);
                        neox += 1;
                    }
                }
            }
        }
        assert_eq!(seen, matvec_entries(|e| e.contains("_seg3rope")));
        assert_eq!(neox, select::ROPE_FUSE_FORMATS.len());
        // GQA 32 / 8 at head_dim 128 and head_dim 64; the positions cross KV blocks of 64.
        assert!(SHAPES.iter().any(|c| (c.0, c.1, c.2) == (32, 8, 128)));
        assert!(SHAPES.iter().any(|c| c.2 == 64 && c.6 == RopeStyle::Normal));
        assert!(POSITIONS.windows(2).any(|w| w[0] < 64 && w[1] >= 64));
        assert!(POSITIONS.windows(2).any(|w| w[0] < 128 && w[1] >= 128));
        assert_eq!(positions(130), vec![0, 1, 63, 64, 65, 127, 128, 129, 130]);
    }
}
