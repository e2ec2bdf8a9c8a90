//! kernel-check's tiled prompt-pass cases (`kernels/gemmt.cu`), for every format the tiled
//! kernel decodes ([`select::gemmt_supported`]), x in two parts (`gemmt`) and in one
//! (`gemmt_x16`):
//! - invariance (`batch_invariance`, exact): a pass of [`FULL`] rows (three token tiles of
//!   128, the last partial) against passes of the sizes of [`PASS_SIZES`] (each row must
//!   keep its bits: the first n rows of the full pass) and against the rows of [`ALONE`]
//!   each in a pass of its own, for every epilogue (plain with bias, residual, RMSNorm
//!   folded into the staging, gate + up with either activation, with and without the norm);
//!   The full pass runs with 128-token tiles, the others with the tile the grid picks (64
//!   for these shapes), and the full pass with 64-token tiles must match it too;
//! - `fusion` (exact): the residual epilogue is the plain result + res (one f32 add), and
//!   a group of three products of one x in one launch (`gemmt_group`: w + bias, wu, w +
//!   bias; segment boundaries inside a tile) gives the bits of their own launches; Q4_0 and
//!   Q8_0 decoded in the tile loop give the bits of the scratch decode;
//! - against the CPU reference (`cpu::matvec`, f64): plain + bias, and gate + up (GELU, no
//!   norm) through `act(g) * u`; and the plain product with a planted huge activation (odd
//!   rows times 2^17, past f16's range), whose ordinary rows must keep their bits.
//!
//! Shapes: 37 rows (one partial column tile; gate + up one partial group of 64) at k = 2304,
//! and 200 rows (two column tiles, the second partial; gate + up four groups, the last of 8
//! rows) at k = 768.
//! On sm_90a (x in one part) the warpgroup-MMA kernels are compared with the mma.sync pass
//! bit for bit: section 3 on every shape, section 4 (TMA) on F16, Q4_0, Q8_0 and BF16 (the
//! kinds it reads as they lie: [`select::GEMMTM_KINDS`]) at 192 rows, k = 768 (its shape
//! rules: rows a multiple of 64, k of 256), every epilogue, both tiles, a group, partial
//! token tiles, its register decode against the scratch; the big cases' default (section 4)
//! against section 3.

use super::cases::{ProductCase, ProductInputs as Inputs, Shape, dot_scales, e2s, poison};
use super::{CheckLine, Rng, compare_f32, compare_f32_scaled};
use engine::cuda::cudarc::driver::DevicePtr;
use engine::cuda::ops::{self, Activation, GemmX, GemmtOpts, GemmtScratch};
use engine::cuda::{Gpu, cpu, select};
use engine::quant::QuantFormat;

mod wgmma;

/// Rows of the full pass: two whole token tiles of 128 and a partial third.
const FULL: usize = 300;
/// Pass sizes whose rows must equal the full pass's first rows.
const PASS_SIZES: [usize; 8] = [1, 5, 64, 127, 128, 129, 256, 299];
/// Rows run alone (each a pass of one row): the edges of the token tiles and of the warps'
/// 64-row halves.
const ALONE: [usize; 12] = [0, 1, 7, 8, 63, 64, 127, 128, 129, 255, 256, 299];

/// One pass's outputs, token-major.
struct Outputs {
    plain: Vec<f32>,
    residual: Vec<f32>,
    norm: Vec<f32>,
    glu_silu_norm: Vec<f32>,
    glu_gelu: Vec<f32>,
}

impl Outputs {
    /// Rows `a..b` of every epilogue, concatenated.
    fn rows(&self, rows: usize, a: usize, b: usize) -> Vec<f32> {
        [
            &self.plain,
            &self.residual,
            &self.norm,
            &self.glu_silu_norm,
            &self.glu_gelu,
        ]
        .iter()
        .flat_map(|v| v[a * rows..b * rows].iter().copied())
        .collect()
    }
}

struct Ctx<'a> {
    gpu: &'a Gpu,
    inp: &'a Inputs,
    xs: GemmX,
    dq: GemmtScratch,
}

impl Ctx<'_> {
    /// The five epilogues on the `n` rows of x with residual inputs `res` (`n * rows`).
    fn run(
        &mut self,
        x: &[f32],
        res: &[f32],
        n: usize,
        opts: GemmtOpts,
    ) -> Result<Outputs, String> {
        let (gpu, inp) = (self.gpu, self.inp);
        let (rows, k) = (inp.rows, inp.k);
        let dx = gpu.upload(x).map_err(e2s)?;
        let bias = Some(&inp.bias as &dyn DevicePtr<f32>);
        let norm = Some(ops::NormIn {
            weight: &inp.norm_w,
            eps: 1e-5,
            w_offset: 0.0,
        });
        let (xs, dq) = (&mut self.xs, &mut self.dq);
        ops::gemmt_stage_x(gpu, inp.w.format, opts, &dx, n, k, None, xs).map_err(e2s)?;
        let mut y = poison(gpu, n * rows).map_err(e2s)?;
        ops::gemmt(gpu, &inp.w, xs, dq, n, bias, false, &mut y, opts).map_err(e2s)?;
        let plain = gpu.download(&y).map_err(e2s)?;
        let mut y = gpu.upload(res).map_err(e2s)?;
        ops::gemmt(gpu, &inp.w, xs, dq, n, bias, true, &mut y, opts).map_err(e2s)?;
        let residual = gpu.download(&y).map_err(e2s)?;
        let mut y = poison(gpu, n * rows).map_err(e2s)?;
        ops::gemmt_glu(
            gpu,
            &inp.w,
            &inp.wu,
            xs,
            dq,
            n,
            Activation::GeluTanh,
            &mut y,
            opts,
        )
        .map_err(e2s)?;
        let glu_gelu = gpu.download(&y).map_err(e2s)?;
        ops::gemmt_stage_x(gpu, inp.w.format, opts, &dx, n, k, norm, xs).map_err(e2s)?;
        let mut y = poison(gpu, n * rows).map_err(e2s)?;
        ops::gemmt(gpu, &inp.w, xs, dq, n, bias, false, &mut y, opts).map_err(e2s)?;
        let norm_out = gpu.download(&y).map_err(e2s)?;
        let mut y = poison(gpu, n * rows).map_err(e2s)?;
        ops::gemmt_glu(
            gpu,
            &inp.w,
            &inp.wu,
            xs,
            dq,
            n,
            Activation::Silu,
            &mut y,
            opts,
        )
        .map_err(e2s)?;
        let glu_silu_norm = gpu.download(&y).map_err(e2s)?;
        Ok(Outputs {
            plain,
            residual,
            norm: norm_out,
            glu_silu_norm,
            glu_gelu,
        })
    }
}

impl Ctx<'_> {
    /// `w` + bias, `wu` and `w` + bias of x in one grouped launch, and the same three as
    /// launches of their own: (grouped, alone), each the three outputs concatenated.
    fn run_group(
        &mut self,
        x: &[f32],
        n: usize,
        opts: GemmtOpts,
    ) -> Result<(Vec<f32>, Vec<f32>), String> {
        let (gpu, inp) = (self.gpu, self.inp);
        let rows = inp.rows;
        let dx = gpu.upload(x).map_err(e2s)?;
        let (xs, dq) = (&mut self.xs, &mut self.dq);
        ops::gemmt_stage_x(gpu, inp.w.format, opts, &dx, n, inp.k, None, xs).map_err(e2s)?;
        let bias = Some(&inp.bias as &dyn DevicePtr<f32>);
        let prods = [(&inp.w, bias), (&inp.wu, None), (&inp.w, bias)];
        let mut ys = Vec::new();
        for _ in 0..3 {
            ys.push(poison(gpu, n * rows).map_err(e2s)?);
        }
        {
            let mut segs: Vec<ops::GemmtSeg> = prods
                .iter()
                .zip(ys.iter_mut())
                .map(|(&(w, bias), y)| ops::GemmtSeg { w, bias, y })
                .collect();
            ops::gemmt_group(gpu, &mut segs, xs, dq, n, opts).map_err(e2s)?;
        }
        let mut grouped = Vec::new();
        for y in &ys {
            grouped.extend(gpu.download(y).map_err(e2s)?);
        }
        let mut alone = Vec::new();
        for (w, bias) in prods {
            let mut y = poison(gpu, n * rows).map_err(e2s)?;
            ops::gemmt(gpu, w, xs, dq, n, bias, false, &mut y, opts).map_err(e2s)?;
            alone.extend(gpu.download(&y).map_err(e2s)?);
        }
        Ok((grouped, alone))
    }
}

/// Every tiled format's cases (an error becomes a failing line).
pub fn gemmt_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    let cc = gpu.info().compute_capability;
    for format in [QuantFormat::Q4_0, QuantFormat::BF16, QuantFormat::Q8_0] {
        if select::gemmt_supported(format, cc) {
            for (rows, k) in [(1024, 4096), (256, 14336)] {
                let name = format!("{format} rows={rows} k={k} n={BIG_N}");
                Shape::new(gpu, format, rows, k, &name).run(rng, lines, "gemmt", big_case);
            }
        }
    }
    if select::gemmt_supported(QuantFormat::BF16, cc)
        && let Err(e) = bf16_wide(gpu, rng, lines)
    {
        lines.push(CheckLine::error("gemmt", "BF16 past f16's range", e));
    }
    for format in select::KERNEL_FORMATS {
        if !select::gemmt_supported(format, cc) {
            continue;
        }
        // 192 rows at k = 768 (F16, Q4_0, Q8_0, BF16: the kinds section 4 reads as they
        // lie): section 4's shapes (rows a multiple of 64, k of 256): a block's second 64-row
        // half past the rows, segment boundaries inside a block.
        let tm_shape: &[(usize, usize)] = if select::GEMMTM_KINDS.contains(&format) {
            &[(192, 24 * 32)]
        } else {
            &[]
        };
        for &(rows, k) in [(37, 72 * 32), (200, 24 * 32)].iter().chain(tm_shape) {
            let name = format!("{format} rows={rows} k={k}");
            Shape::new(gpu, format, rows, k, &name).run(rng, lines, "gemmt", cases_of);
        }
    }
}

/// BF16 weights holding one value past f16's range (2^17): the upload marks the matrix
/// (`fits_f16` false), x in one part (the f16 conversion, the default) is refused with an
/// error rather than run with an infinity, and x in two parts (bf16 in place) is within the
/// CPU reference's tolerance.
fn bf16_wide(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) -> Result<(), String> {
    const N: usize = 9;
    let (rows, k, format) = (37, 24 * 32, QuantFormat::BF16);
    let mut w = super::cases::random_weight(rng, format, rows, k);
    let at = 2 * (5 * k + 17);
    w[at..at + 2].copy_from_slice(&half::bf16::from_f32(131072.0).to_le_bytes());
    let dw = engine::cuda::DeviceWeight::upload(gpu, format, rows, k, &w).map_err(e2s)?;
    let x: Vec<f32> = (0..N * k).map(|_| rng.symmetric()).collect();
    let dx = gpu.upload(&x).map_err(e2s)?;
    let mut xs = GemmX::with_rows(gpu, N, k).map_err(e2s)?;
    let mut dq = GemmtScratch::new();
    let one = GemmtOpts::default();
    let mut y = poison(gpu, N * rows).map_err(e2s)?;
    ops::gemmt_stage_x(gpu, format, one, &dx, N, k, None, &mut xs).map_err(e2s)?;
    let refused = ops::gemmt(gpu, &dw, &xs, &mut dq, N, None, false, &mut y, one).is_err();
    let ok = !dw.fits_f16 && refused;
    lines.push(CheckLine {
        op: "gemmt",
        name: "BF16 with 2^17 (past f16): marked, x in one part refused".into(),
        tol: super::tolerance("gemmt"),
        err: if ok { 0.0 } else { f64::INFINITY },
        pass: ok,
        note: if ok {
            String::new()
        } else {
            format!("fits_f16 {}, one part refused {refused}", dw.fits_f16)
        },
    });
    let two = GemmtOpts {
        parts: Some(2),
        ..one
    };
    ops::gemmt_stage_x(gpu, format, two, &dx, N, k, None, &mut xs).map_err(e2s)?;
    ops::gemmt(gpu, &dw, &xs, &mut dq, N, None, false, &mut y, two).map_err(e2s)?;
    let want = cpu::matvec(format, &w, rows, k, &x, N, None).map_err(e2s)?;
    let scale = dot_scales(format, &w, rows, k, &x, N, None)?;
    lines.push(compare_f32_scaled(
        "gemmt",
        "BF16 with 2^17 (past f16), x in two parts (bf16 in place)".to_string(),
        &gpu.download(&y).map_err(e2s)?,
        &want,
        &scale,
    ));
    Ok(())
}

/// GELU (tanh form) and a bound of its slope, in f64.
fn gelu(g: f64) -> f64 {
    let k0 = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * g * (1.0 + (k0 * (g + 0.044715 * g * g * g)).tanh())
}
const GELU_SLOPE: f64 = 1.13;

/// The CPU references of `n` token vectors: plain + bias with its scale (sum |w x| + |bias|),
/// and gate + up (GELU, no norm) through act(g) * u in f64 with the scale the error carries
/// through it (GELU_SLOPE |u| sum |wg x| + |act(g)| sum |wu x|).
struct Refs {
    want: Vec<f32>,
    scale: Vec<f64>,
    glu_want: Vec<f32>,
    glu_scale: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
fn refs(
    format: QuantFormat,
    w: &[u8],
    wu: &[u8],
    bias: &[f32],
    rows: usize,
    k: usize,
    x: &[f32],
    n: usize,
) -> Result<Refs, String> {
    let want = cpu::matvec(format, w, rows, k, x, n, Some(bias)).map_err(e2s)?;
    let scale = dot_scales(format, w, rows, k, x, n, Some(bias))?;
    let g = cpu::matvec(format, w, rows, k, x, n, None).map_err(e2s)?;
    let u = cpu::matvec(format, wu, rows, k, x, n, None).map_err(e2s)?;
    let sg = dot_scales(format, w, rows, k, x, n, None)?;
    let su = dot_scales(format, wu, rows, k, x, n, None)?;
    let glu_want = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| (gelu(f64::from(g)) * f64::from(u)) as f32)
        .collect();
    let glu_scale = (0..g.len())
        .map(|i| GELU_SLOPE * f64::from(u[i]).abs() * sg[i] + gelu(f64::from(g[i])).abs() * su[i])
        .collect();
    Ok(Refs {
        want,
        scale,
        glu_want,
        glu_scale,
    })
}

fn cases_of(s: Shape, rng: &mut Rng, lines: &mut Vec<CheckLine>) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    let ProductCase {
        w,
        wu,
        bias,
        x,
        res,
        dev: inp,
    } = ProductCase::random(gpu, rng, format, rows, k, FULL)?;
    let mut cx = Ctx {
        gpu,
        inp: &inp,
        xs: GemmX::with_rows(gpu, FULL, k).map_err(e2s)?,
        dq: GemmtScratch::new(),
    };
    let Refs {
        want,
        scale,
        glu_want,
        glu_scale,
    } = refs(format, &w, &wu, &bias, rows, k, &x, FULL)?;
    let cc = gpu.info().compute_capability;
    for (parts, op) in [(2, "gemmt"), (1, "gemmt_x16")] {
        // Tiles as the grid picks them (64 tokens for these shapes), and of 128 tokens, on
        // the mma.sync kernel; the warpgroup MMA (sm_90a, one part) is compared with it below.
        let opts = GemmtOpts {
            parts: Some(parts),
            tile_m: None,
            fault: false,
            scratch_decode: false,
            wgmma: Some(false),
            wgmma_tile_n: None,
            tm: None,
        };
        let tall = GemmtOpts {
            tile_m: Some(128),
            ..opts
        };
        let tag = format!("x in {parts} part(s)");
        let full = cx.run(&x, &res, FULL, tall)?;
        let short = cx.run(
            &x,
            &res,
            FULL,
            GemmtOpts {
                tile_m: Some(64),
                ..opts
            },
        )?;
        lines.push(compare_f32(
            "batch_invariance",
            format!(
                "gemmt {name} {tag}: a pass of {FULL} in tiles of 64 tokens == of 128, 5 epilogues"
            ),
            &short.rows(rows, 0, FULL),
            &full.rows(rows, 0, FULL),
        ));
        if select::gemmt_fused(format, parts) {
            // Decoded in the tile loop (the default) == decoded into the scratch first.
            let scratch = cx.run(
                &x,
                &res,
                FULL,
                GemmtOpts {
                    scratch_decode: true,
                    ..tall
                },
            )?;
            lines.push(compare_f32(
                "fusion",
                format!("gemmt {name} {tag}: decoded in the tile loop == through the scratch, 5 epilogues"),
                &full.rows(rows, 0, FULL),
                &scratch.rows(rows, 0, FULL),
            ));
        }
        if select::gemmt_wgmma(cc, parts, FULL) {
            let wc = wgmma::WCase {
                x: &x,
                res: &res,
                mma: &full,
                format,
                name,
                tag: &tag,
            };
            wgmma::wgmma_cases(&mut cx, &wc, lines)?;
            if wgmma::tm_applies(gpu, format, rows, k) {
                wgmma::tm_cases(&mut cx, &wc, lines)?;
            }
        }
        let (grouped, alone3) = cx.run_group(&x, FULL, opts)?;
        lines.push(compare_f32(
            "fusion",
            format!("gemmt {name} {tag}: w + bias, wu, w + bias of one x in one launch == their own launches"),
            &grouped,
            &alone3,
        ));
        for n in PASS_SIZES {
            let got = cx.run(&x[..n * k], &res[..n * rows], n, opts)?;
            lines.push(compare_f32(
                "batch_invariance",
                format!("gemmt {name} {tag}: rows of a pass of {n} == the same rows of {FULL}, 5 epilogues"),
                &got.rows(rows, 0, n),
                &full.rows(rows, 0, n),
            ));
        }
        let mut alone = Vec::new();
        let mut among = Vec::new();
        for t in ALONE {
            let o = cx.run(
                &x[t * k..(t + 1) * k],
                &res[t * rows..(t + 1) * rows],
                1,
                opts,
            )?;
            alone.extend(o.rows(rows, 0, 1));
            among.extend(full.rows(rows, t, t + 1));
        }
        lines.push(compare_f32(
            "batch_invariance",
            format!("gemmt {name} {tag}: rows {ALONE:?} alone == among {FULL}, 5 epilogues"),
            &alone,
            &among,
        ));
        lines.push(compare_f32_scaled(
            op,
            format!("{name} n={FULL} +bias {tag}"),
            &full.plain,
            &want,
            &scale,
        ));
        lines.push(compare_f32_scaled(
            op,
            format!("{name} n={FULL} glu gelu {tag}"),
            &full.glu_gelu,
            &glu_want,
            &glu_scale,
        ));
        let sum: Vec<f32> = full.plain.iter().zip(&res).map(|(a, b)| a + b).collect();
        lines.push(compare_f32(
            "fusion",
            format!("gemmt {name} {tag}: residual epilogue == plain + res"),
            &full.residual,
            &sum,
        ));
        if parts == 2 {
            huge_rows(&mut cx, &w, &bias, &x, &res, &full, tall, name, lines)?;
        }
    }
    Ok(())
}

/// The odd rows of x times 2^17 (past f16's 65504): within the reference's tolerance (the
/// staging's power-of-two scale), and the even rows keep their bits.
#[allow(clippy::too_many_arguments)]
fn huge_rows(
    cx: &mut Ctx<'_>,
    w: &[u8],
    bias: &[f32],
    x: &[f32],
    res: &[f32],
    ordinary: &Outputs,
    opts: GemmtOpts,
    name: &str,
    lines: &mut Vec<CheckLine>,
) -> Result<(), String> {
    let (rows, k, format) = (cx.inp.rows, cx.inp.k, cx.inp.w.format);
    let big: Vec<f32> = x
        .chunks(k)
        .enumerate()
        .flat_map(|(t, r)| {
            let f = if t % 2 == 1 { 131072.0 } else { 1.0 };
            r.iter().map(move |v| v * f)
        })
        .collect();
    let want = cpu::matvec(format, w, rows, k, &big, FULL, Some(bias)).map_err(e2s)?;
    let scale = dot_scales(format, w, rows, k, &big, FULL, Some(bias))?;
    let got = cx.run(&big, res, FULL, opts)?;
    lines.push(compare_f32_scaled(
        "gemmt",
        format!("{name} odd rows of x times 2^17 (past f16) +bias"),
        &got.plain,
        &want,
        &scale,
    ));
    let even = |o: &Outputs| -> Vec<f32> {
        (0..FULL)
            .step_by(2)
            .flat_map(|t| o.rows(rows, t, t + 1))
            .collect()
    };
    lines.push(compare_f32(
        "batch_invariance",
        format!("gemmt {name}: ordinary rows among rows past f16 == among ordinary rows"),
        &even(&got),
        &even(ordinary),
    ));
    Ok(())
}

/// Rows of the large pass (a whole prompt pass of an 8B model's shapes).
const BIG_N: usize = 512;
/// Its rows checked against the CPU reference and run alone.
const BIG_PICK: [usize; 8] = [0, 1, 127, 128, 255, 256, 383, 511];

/// A prompt pass of [`BIG_N`] rows at a Llama-3.1-8B product's shape, x in both part
/// counts: the same pass twice gives the same bits (and finite values), the picked rows
/// alone give the bits they have in the pass, and they are within the tolerance of the CPU
/// reference (plain + bias, and gate + up through act(g) * u).
fn big_case(s: Shape, rng: &mut Rng, lines: &mut Vec<CheckLine>) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    let ProductCase {
        w,
        wu,
        bias,
        x,
        res,
        dev: inp,
    } = ProductCase::random(gpu, rng, format, rows, k, BIG_N)?;
    let mut cx = Ctx {
        gpu,
        inp: &inp,
        xs: GemmX::with_rows(gpu, BIG_N, k).map_err(e2s)?,
        dq: GemmtScratch::new(),
    };
    let xp: Vec<f32> = BIG_PICK
        .iter()
        .flat_map(|&t| x[t * k..(t + 1) * k].iter().copied())
        .collect();
    let Refs {
        want,
        scale,
        glu_want,
        glu_scale,
    } = refs(format, &w, &wu, &bias, rows, k, &xp, BIG_PICK.len())?;
    for (parts, op) in [(2, "gemmt"), (1, "gemmt_x16")] {
        // The engine's default choice of kernel (the warpgroup MMA on sm_90a for one part).
        let opts = GemmtOpts {
            parts: Some(parts),
            tile_m: None,
            fault: false,
            scratch_decode: false,
            wgmma: None,
            wgmma_tile_n: None,
            tm: None,
        };
        let tag = format!("x in {parts} part(s)");
        let a = cx.run(&x, &res, BIG_N, opts)?;
        if select::gemmt_wgmma(cx.gpu.info().compute_capability, parts, BIG_N) {
            let mma = cx.run(
                &x,
                &res,
                BIG_N,
                GemmtOpts {
                    wgmma: Some(false),
                    ..opts
                },
            )?;
            lines.push(compare_f32(
                "fusion",
                format!("gemmt {name} {tag}: warpgroup MMA == mma.sync, 5 epilogues"),
                &a.rows(rows, 0, BIG_N),
                &mma.rows(rows, 0, BIG_N),
            ));
            // The default above is section 4's TMA kernel where it applies: section 3 too.
            if wgmma::tm_applies(cx.gpu, format, rows, k) {
                let w = cx.run(
                    &x,
                    &res,
                    BIG_N,
                    GemmtOpts {
                        tm: Some(false),
                        ..opts
                    },
                )?;
                lines.push(compare_f32(
                    "fusion",
                    format!(
                        "gemmt {name} {tag}: TMA warpgroup MMA (default) == section 3, 5 epilogues"
                    ),
                    &a.rows(rows, 0, BIG_N),
                    &w.rows(rows, 0, BIG_N),
                ));
            }
        }
        if select::gemmt_fused(format, parts) {
            let scratch = cx.run(
                &x,
                &res,
                BIG_N,
                GemmtOpts {
                    scratch_decode: true,
                    ..opts
                },
            )?;
            lines.push(compare_f32(
                "fusion",
                format!("gemmt {name} {tag}: decoded in the tile loop == through the scratch, 5 epilogues"),
                &a.rows(rows, 0, BIG_N),
                &scratch.rows(rows, 0, BIG_N),
            ));
        }
        let b = cx.run(&x, &res, BIG_N, opts)?;
        let tall = cx.run(
            &x,
            &res,
            BIG_N,
            GemmtOpts {
                tile_m: Some(128),
                ..opts
            },
        )?;
        lines.push(compare_f32(
            "batch_invariance",
            format!("gemmt {name} {tag}: tiles of 128 tokens == the grid's choice, 5 epilogues"),
            &tall.rows(rows, 0, BIG_N),
            &a.rows(rows, 0, BIG_N),
        ));
        let all = a.rows(rows, 0, BIG_N);
        let finite = all.iter().filter(|v| !v.is_finite()).count();
        let mut same = compare_f32(
            "batch_invariance",
            format!("gemmt {name} {tag}: the same pass twice, 5 epilogues"),
            &b.rows(rows, 0, BIG_N),
            &all,
        );
        if finite > 0 {
            same.pass = false;
            same.note = format!("{finite} outputs not finite");
        }
        lines.push(same);
        let mut alone = Vec::new();
        let mut among = Vec::new();
        let pick = |o: &Outputs, f: fn(&Outputs) -> &Vec<f32>| -> Vec<f32> {
            BIG_PICK
                .iter()
                .flat_map(|&t| f(o)[t * rows..(t + 1) * rows].iter().copied())
                .collect()
        };
        for t in BIG_PICK {
            let o = cx.run(
                &x[t * k..(t + 1) * k],
                &res[t * rows..(t + 1) * rows],
                1,
                opts,
            )?;
            alone.extend(o.rows(rows, 0, 1));
            among.extend(a.rows(rows, t, t + 1));
        }
        lines.push(compare_f32(
            "batch_invariance",
            format!("gemmt {name} {tag}: rows {BIG_PICK:?} alone == among {BIG_N}"),
            &alone,
            &among,
        ));
        lines.push(compare_f32_scaled(
            op,
            format!("{name} rows {BIG_PICK:?} +bias {tag}"),
            &pick(&a, |o| &o.plain),
            &want,
            &scale,
        ));
        lines.push(compare_f32_scaled(
            op,
            format!("{name} rows {BIG_PICK:?} glu gelu {tag}"),
            &pick(&a, |o| &o.glu_gelu),
            &glu_want,
            &glu_scale,
        ));
    }
    Ok(())
}
