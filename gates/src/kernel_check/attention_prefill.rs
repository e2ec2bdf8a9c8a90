//! kernel-check's cases of the prompt pass's tensor-core attention (`attn_prefill_d64` /
//! `_d128`): against the CPU reference, and the bits of a row alone or in any pass.

use super::attention::Paged;
use super::cases::*;
use super::{CheckLine, compare_f32};
use engine::cuda::ops::{self, AttnShape};
use engine::cuda::select::{self, PrefillAttn};
use engine::cuda::{Gpu, cpu};
use half::f16;

/// The prompt pass's tensor-core attention (`attn_prefill_d64` / `_d128`): a pass of `n`
/// tokens at positions `p0 ..` against the CPU reference (`attention_prefill`), and its
/// rows' bits alone (passes of one token at the tile edges) and in two passes (split in
/// the middle of a tile) against the whole pass (`batch_invariance`). Shapes: GQA 4 and
/// 1, 128 and 64 dims, passes from 0 and from inside a KV block, a sliding window, a
/// softcap.
pub(super) fn prefill_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    // (heads, kv heads, head_dim, capacity, window, softcap, first position, tokens)
    type Shape = (usize, usize, usize, usize, usize, f32, usize, usize);
    let shapes: [Shape; 6] = [
        (8, 2, 128, 700, 0, 0.0, 0, 300),
        (8, 2, 128, 700, 0, 0.0, 250, 130),
        (4, 4, 64, 300, 0, 0.0, 0, 200),
        (8, 2, 64, 900, 100, 0.0, 600, 150),
        (8, 4, 128, 600, 0, 30.0, 10, 70),
        (32, 8, 128, 4200, 0, 0.0, 3900, 130),
    ];
    let cc = gpu.info().compute_capability;
    for (nh, nkv, hd, cap, window, softcap, p0, n) in shapes {
        if engine::cuda::select::attention_prefill_entry(hd, cc).is_none() {
            continue;
        }
        let name = format!(
            "heads={nh}/{nkv} head_dim={hd} cap={cap} window={window} softcap={softcap} positions {p0}..{}",
            p0 + n
        );
        case(lines, "attention_prefill", name, |name| {
            let s = AttnShape {
                ntok: n,
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                capacity: cap,
                window,
            };
            let q = rand_vec(rng, n * nh * hd, 2.0);
            let cache = |rng: &mut Rng| -> Vec<f16> {
                (0..nkv * cap * hd)
                    .map(|_| f16::from_f32(rng.symmetric()))
                    .collect()
            };
            let (kc, vc) = (cache(rng), cache(rng));
            let pos: Vec<i32> = (p0..p0 + n).map(|p| p as i32).collect();
            let scale = 1.0 / (hd as f32).sqrt();
            let want = cpu::attention(&q, &kc, &vc, &pos, s, scale, softcap);
            let pg = Paged::new(rng, nkv, cap, hd);
            let (dk, dv, dbt) = (pg.pool(gpu, &kc)?, pg.pool(gpu, &vc)?, pg.table(gpu)?);
            let kv = ops::KvView {
                k: &dk,
                v: &dv,
                bt: &dbt,
            };
            // Rows a .. b as one pass of variant v.
            let pass_v = |v: PrefillAttn, a: usize, b: usize| -> Result<Vec<f32>, String> {
                let dq = gpu.upload(&q[a * nh * hd..b * nh * hd]).map_err(e2s)?;
                let dp = gpu.upload(&pos[a..b]).map_err(e2s)?;
                let mut out = poison(gpu, (b - a) * nh * hd).map_err(e2s)?;
                ops::attention_prefill_with(
                    gpu,
                    v,
                    &dq,
                    &kv,
                    &dp,
                    AttnShape { ntok: b - a, ..s },
                    scale,
                    softcap,
                    &mut out,
                )
                .map_err(e2s)?;
                gpu.download(&out).map_err(e2s)
            };
            let pass = |a: usize, b: usize| pass_v(PrefillAttn::Flash, a, b);
            let got = pass(0, n)?;
            let mut res = vec![compare_f32(
                "attention_prefill",
                name.to_string(),
                &got,
                &want,
            )];
            let w = nh * hd;
            let mut alone = Vec::new();
            let mut among = Vec::new();
            for t in [0, 1, 15, 16, 63, 64, n / 2, n - 1] {
                alone.extend(pass(t, t + 1)?);
                among.extend_from_slice(&got[t * w..(t + 1) * w]);
            }
            res.push(compare_f32(
                "batch_invariance",
                format!("attention_prefill {name}: rows alone == in the pass of {n}"),
                &alone,
                &among,
            ));
            let mid = n / 2 + 7;
            let mut two = pass(0, mid)?;
            two.extend(pass(mid, n)?);
            res.push(compare_f32(
                "batch_invariance",
                format!(
                    "attention_prefill {name}: passes of {mid} + {} == one pass",
                    n - mid
                ),
                &two,
                &got,
            ));
            // The packed variants (sm_90): Packed gives Flash's bits; PackedF16 its own,
            // against the reference and row by row against itself.
            let w_tok = w;
            for v in [PrefillAttn::Packed, PrefillAttn::PackedF16] {
                if select::attention_prefill_entry_for(v, hd, cc).is_none() {
                    continue;
                }
                let vn = v.name();
                let whole = pass_v(v, 0, n)?;
                if v == PrefillAttn::Packed {
                    res.push(compare_f32(
                        "batch_invariance",
                        format!("attention_prefill {vn} == flash {name}"),
                        &whole,
                        &got,
                    ));
                } else {
                    res.push(compare_f32(
                        "attention_prefill_f16q",
                        format!("{vn} {name}"),
                        &whole,
                        &want,
                    ));
                }
                let mut alone = Vec::new();
                let mut among = Vec::new();
                for t in [0, 1, 15, 16, 31, 32, 63, 64, n / 2, n - 1] {
                    alone.extend(pass_v(v, t, t + 1)?);
                    among.extend_from_slice(&whole[t * w_tok..(t + 1) * w_tok]);
                }
                res.push(compare_f32(
                    "batch_invariance",
                    format!("attention_prefill {vn} {name}: rows alone == in the pass of {n}"),
                    &alone,
                    &among,
                ));
                let mut two = pass_v(v, 0, mid)?;
                two.extend(pass_v(v, mid, n)?);
                res.push(compare_f32(
                    "batch_invariance",
                    format!(
                        "attention_prefill {vn} {name}: passes of {mid} + {} == one pass",
                        n - mid
                    ),
                    &two,
                    &whole,
                ));
            }
            Ok(res)
        });
    }
}
