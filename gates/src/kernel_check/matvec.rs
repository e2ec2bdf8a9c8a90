//! kernel-check's cases of the matvec family (every format; 1..8 tokens, with a bias, the
//! residual and the norm fused in, gate + up with its activation): each against the CPU
//! reference or the unfused launches, and a row's bits alone vs among other rows.

use super::cases::{Rng, case, dot_scales, e2s, poison, rand_vec, random_weight};
use super::{CheckLine, compare_f32, compare_f32_scaled};
use engine::cuda::ops::{self, Activation};
use engine::cuda::{DeviceWeight, Gpu, cpu};
use engine::quant::QuantFormat;

pub(super) fn matvec_cases(
    gpu: &Gpu,
    rng: &mut Rng,
    format: QuantFormat,
    lines: &mut Vec<CheckLine>,
) {
    let unit = format.block_geometry().0.max(32);
    // (rows, k, ntok, bias): one block; odd rows and block counts; a long row at 8 tokens.
    let k_odd = if unit == 256 { 3 * 256 } else { 25 * 32 };
    let shapes = [
        (1, unit, 1, false),
        (67, k_odd, 3, true),
        (129, 4864, 8, false),
        (7, 2 * unit, 5, true),
        // Rows enough for 4 rows per warp alone (the output head's choice), each token
        // alone against the shared launch.
        (6400, unit, 2, false),
        // A row longer than one x tile (MV_TILE = 640 chunks): 672 chunks, the second tile
        // 32 chunks (the one-token body's rounds restart per tile).
        (33, 21504, 2, false),
    ];
    for (si, (rows, k, ntok, with_bias)) in shapes.into_iter().enumerate() {
        let name = format!(
            "{format} rows={rows} k={k} ntok={ntok}{}",
            if with_bias { " +bias" } else { "" }
        );
        case(lines, "matvec", name, |name| {
            let w = random_weight(rng, format, rows, k);
            let x = rand_vec(rng, ntok * k, 1.0);
            let bias = with_bias.then(|| rand_vec(rng, rows, 1.0));
            let want = cpu::matvec(format, &w, rows, k, &x, ntok, bias.as_deref()).map_err(e2s)?;
            let dw = DeviceWeight::upload(gpu, format, rows, k, &w).map_err(e2s)?;
            let dx = gpu.upload(&x).map_err(e2s)?;
            let db = bias
                .as_ref()
                .map(|b| gpu.upload(b))
                .transpose()
                .map_err(e2s)?;
            let mut dy = poison(gpu, ntok * rows).map_err(e2s)?;
            let choice = ops::matvec(
                gpu,
                &dw,
                &dx,
                ntok,
                db.as_ref()
                    .map(|b| b as &dyn engine::cuda::cudarc::driver::DevicePtr<f32>),
                &mut dy,
            )
            .map_err(e2s)?;
            let got = gpu.download(&dy).map_err(e2s)?;
            let scale = dot_scales(format, &w, rows, k, &x, ntok, bias.as_deref())?;
            let mut out = vec![compare_f32_scaled(
                "matvec",
                format!("{name} [{choice}]"),
                &got,
                &want,
                &scale,
            )];
            if ntok > 1 {
                // Each token alone must give the very bits it got in the shared launch.
                let mut single = Vec::with_capacity(ntok * rows);
                for t in 0..ntok {
                    let dxt = gpu.upload(&x[t * k..(t + 1) * k]).map_err(e2s)?;
                    let mut dyt = poison(gpu, rows).map_err(e2s)?;
                    ops::matvec(
                        gpu,
                        &dw,
                        &dxt,
                        1,
                        db.as_ref()
                            .map(|b| b as &dyn engine::cuda::cudarc::driver::DevicePtr<f32>),
                        &mut dyt,
                    )
                    .map_err(e2s)?;
                    single.extend(gpu.download(&dyt).map_err(e2s)?);
                }
                out.push(compare_f32(
                    "batch_invariance",
                    format!("matvec {name}: 1 vs {ntok} per launch"),
                    &single,
                    &got,
                ));
            }
            let bias_ptr = db
                .as_ref()
                .map(|b| b as &dyn engine::cuda::cudarc::driver::DevicePtr<f32>);
            // Residual in the epilogue = matvec then add, bit for bit.
            let res = rand_vec(rng, ntok * rows, 1.0);
            let dres = gpu.upload(&res).map_err(e2s)?;
            let mut sep = poison(gpu, ntok * rows).map_err(e2s)?;
            ops::add(gpu, &dy, &dres, &mut sep, ntok * rows).map_err(e2s)?;
            let mut fused = gpu.upload(&res).map_err(e2s)?;
            ops::matvec_residual(gpu, &dw, &dx, ntok, bias_ptr, &mut fused).map_err(e2s)?;
            out.push(compare_f32(
                "fusion",
                format!("matvec+residual {name}"),
                &gpu.download(&fused).map_err(e2s)?,
                &gpu.download(&sep).map_err(e2s)?,
            ));
            // RMSNorm folded into the input = rmsnorm then matvec, bit for bit.
            let eps = 1e-5;
            let nw: Vec<f32> = (0..k).map(|_| 1.0 + 0.1 * rng.symmetric()).collect();
            let dnw = gpu.upload(&nw).map_err(e2s)?;
            let mut dxn = poison(gpu, ntok * k).map_err(e2s)?;
            ops::rmsnorm(gpu, &dx, &dnw, &mut dxn, ntok, k, eps, 0.0).map_err(e2s)?;
            let norm = Some(ops::NormIn {
                weight: &dnw,
                eps,
                w_offset: 0.0,
            });
            let mut sep = poison(gpu, ntok * rows).map_err(e2s)?;
            ops::matvec(gpu, &dw, &dxn, ntok, bias_ptr, &mut sep).map_err(e2s)?;
            let mut fused = poison(gpu, ntok * rows).map_err(e2s)?;
            let mv = ops::MatvecOpts::default();
            ops::matvec_fused(gpu, &dw, &dx, ntok, bias_ptr, norm, false, mv, &mut fused)
                .map_err(e2s)?;
            out.push(compare_f32(
                "fusion",
                format!("rmsnorm+matvec {name}"),
                &gpu.download(&fused).map_err(e2s)?,
                &gpu.download(&sep).map_err(e2s)?,
            ));
            // Gate/up in one pass = two matvecs then gated_act, bit for bit (on odd shapes
            // with the input norm folded in as well).
            if !with_bias {
                let act = if si % 2 == 0 {
                    Activation::Silu
                } else {
                    Activation::GeluTanh
                };
                let with_norm = si % 2 == 1;
                let xin = if with_norm { &dxn } else { &dx };
                let wu = random_weight(rng, format, rows, k);
                let du = DeviceWeight::upload(gpu, format, rows, k, &wu).map_err(e2s)?;
                let mut yg = poison(gpu, ntok * rows).map_err(e2s)?;
                ops::matvec(gpu, &dw, xin, ntok, None, &mut yg).map_err(e2s)?;
                let mut yu = poison(gpu, ntok * rows).map_err(e2s)?;
                ops::matvec(gpu, &du, xin, ntok, None, &mut yu).map_err(e2s)?;
                let mut sep = poison(gpu, ntok * rows).map_err(e2s)?;
                ops::gated_act(gpu, &yg, &yu, &mut sep, ntok * rows, act).map_err(e2s)?;
                let mut fused = poison(gpu, ntok * rows).map_err(e2s)?;
                let c = ops::matvec_glu(
                    gpu,
                    &dw,
                    &du,
                    &dx,
                    ntok,
                    act,
                    if with_norm { norm } else { None },
                    mv,
                    &mut fused,
                )
                .map_err(e2s)?;
                out.push(compare_f32(
                    "fusion",
                    format!(
                        "{}matvec_glu {act:?} {name} [{c}]",
                        if with_norm { "rmsnorm+" } else { "" }
                    ),
                    &gpu.download(&fused).map_err(e2s)?,
                    &gpu.download(&sep).map_err(e2s)?,
                ));
            }
            Ok(out)
        });
    }
    // Two matrices in one launch (k and v of an attention block) = their own launches, bit
    // for bit: with biases and the input norm folded, and without either.
    for (rows, k, extras) in [(67, k_odd, true), (1, unit, false)] {
        let name = format!("{format} pair rows={rows} k={k}");
        case(lines, "matvec", name, |name| {
            let wa = random_weight(rng, format, rows, k);
            let wb = random_weight(rng, format, rows, k);
            let x = rand_vec(rng, k, 1.0);
            let (ba, bb) = (rand_vec(rng, rows, 1.0), rand_vec(rng, rows, 1.0));
            let nw: Vec<f32> = (0..k).map(|_| 1.0 + 0.1 * rng.symmetric()).collect();
            let dwa = DeviceWeight::upload(gpu, format, rows, k, &wa).map_err(e2s)?;
            let dwb = DeviceWeight::upload(gpu, format, rows, k, &wb).map_err(e2s)?;
            let dx = gpu.upload(&x).map_err(e2s)?;
            let (dba, dbb) = (gpu.upload(&ba).map_err(e2s)?, gpu.upload(&bb).map_err(e2s)?);
            let dnw = gpu.upload(&nw).map_err(e2s)?;
            type Dp<'a> = &'a dyn engine::cuda::cudarc::driver::DevicePtr<f32>;
            let (bias_a, bias_b): (Option<Dp>, Option<Dp>) = if extras {
                (Some(&dba), Some(&dbb))
            } else {
                (None, None)
            };
            let norm = extras.then_some(ops::NormIn {
                weight: &dnw,
                eps: 1e-5,
                w_offset: 0.0,
            });
            let mut sa = poison(gpu, rows).map_err(e2s)?;
            let mv = ops::MatvecOpts::default();
            ops::matvec_fused(gpu, &dwa, &dx, 1, bias_a, norm, false, mv, &mut sa).map_err(e2s)?;
            let mut sb = poison(gpu, rows).map_err(e2s)?;
            ops::matvec_fused(gpu, &dwb, &dx, 1, bias_b, norm, false, mv, &mut sb).map_err(e2s)?;
            let (mut ya, mut yb) = (
                poison(gpu, rows).map_err(e2s)?,
                poison(gpu, rows).map_err(e2s)?,
            );
            let c = ops::matvec_pair(
                gpu, &dwa, &dwb, &dx, 1, bias_a, bias_b, norm, mv, &mut ya, &mut yb,
            )
            .map_err(e2s)?;
            if !c.entry().contains("_pair_") {
                return Err(format!("the pair kernel was not chosen ({c})"));
            }
            Ok(vec![
                compare_f32(
                    "fusion",
                    format!("matvec pair {name} a [{c}]"),
                    &gpu.download(&ya).map_err(e2s)?,
                    &gpu.download(&sa).map_err(e2s)?,
                ),
                compare_f32(
                    "fusion",
                    format!("matvec pair {name} b [{c}]"),
                    &gpu.download(&yb).map_err(e2s)?,
                    &gpu.download(&sb).map_err(e2s)?,
                ),
            ])
        });
    }
}
