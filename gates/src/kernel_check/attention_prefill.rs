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
    // The last four: flash4's splits (ATT_PREFILL_SPLIT = 1024 positions) — rows at
    // positions >= 2 splits, passes across a split boundary (2048), sliding windows that
    // cross one, 64 and 128 dims.
    let shapes: [Shape; 10] = [
        (8, 2, 128, 700, 0, 0.0, 0, 300),
        (8, 2, 128, 700, 0, 0.0, 250, 130),
        (4, 4, 64, 300, 0, 0.0, 0, 200),
        (8, 2, 64, 900, 100, 0.0, 600, 150),
        (8, 4, 128, 600, 0, 30.0, 10, 70),
        (32, 8, 128, 4200, 0, 0.0, 3900, 130),
        (4, 4, 64, 3000, 0, 0.0, 1990, 120),
        (8, 2, 64, 2600, 300, 0.0, 2000, 150),
        (8, 4, 128, 2300, 700, 30.0, 1900, 200),
        (32, 8, 128, 3500, 0, 0.0, 960, 200),
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
            // Rows a .. b as one pass of variant v, flash4's scratch bound `budget` bytes
            // (smaller: row groups).
            let pass_budget =
                |v: PrefillAttn, a: usize, b: usize, budget: usize| -> Result<Vec<f32>, String> {
                    let dq = gpu.upload(&q[a * nh * hd..b * nh * hd]).map_err(e2s)?;
                    let dp = gpu.upload(&pos[a..b]).map_err(e2s)?;
                    let mut out = poison(gpu, (b - a) * nh * hd).map_err(e2s)?;
                    let mut ws = ops::PrefillSplitScratch::with_budget(budget);
                    ops::attention_prefill_ws(
                        gpu,
                        v,
                        &dq,
                        &kv,
                        &dp,
                        AttnShape { ntok: b - a, ..s },
                        scale,
                        softcap,
                        &mut ws,
                        &mut out,
                    )
                    .map_err(e2s)?;
                    gpu.download(&out).map_err(e2s)
                };
            // Rows a .. b as one pass of variant v.
            let pass_v = |v: PrefillAttn, a: usize, b: usize| {
                pass_budget(v, a, b, select::ATT_PREFILL_SPLIT_SCRATCH_BYTES)
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
            // The fast path (a KV block wholly visible to all rows of a warp skips the
            // mask): the last row alone takes it for every block up to its own, beside a
            // row 200 positions earlier (in its warp) the masked path for the blocks
            // between; both must give the same bits, for every variant.
            if n >= 2 && pos[n - 1] >= 200 + 64 {
                let p = pos[n - 1];
                for v in [
                    PrefillAttn::Flash,
                    PrefillAttn::PackedF16,
                    PrefillAttn::PackedSplit,
                ] {
                    if select::attention_prefill_entry_for(v, hd, cc).is_none() {
                        continue;
                    }
                    let alone = pass_v(v, n - 1, n)?;
                    // Row 0's q at position p - 200, then the last row, as one pass (one
                    // warp: the pass's first 16 tokens of a head share it).
                    let two_q: Vec<f32> = q[..w]
                        .iter()
                        .chain(&q[(n - 1) * w..n * w])
                        .copied()
                        .collect();
                    let two_p = [p - 200, p];
                    let dq = gpu.upload(&two_q).map_err(e2s)?;
                    let dp = gpu.upload(&two_p[..]).map_err(e2s)?;
                    let mut out = poison(gpu, 2 * w).map_err(e2s)?;
                    ops::attention_prefill_ws(
                        gpu,
                        v,
                        &dq,
                        &kv,
                        &dp,
                        AttnShape { ntok: 2, ..s },
                        scale,
                        softcap,
                        &mut ops::PrefillSplitScratch::new(),
                        &mut out,
                    )
                    .map_err(e2s)?;
                    let beside = gpu.download(&out).map_err(e2s)?;
                    res.push(compare_f32(
                        "batch_invariance",
                        format!(
                            "attention_prefill fastpath {} {name}: row at {p} alone (wholly visible blocks unmasked) == beside a row at {} (masked path)",
                            v.name(),
                            p - 200
                        ),
                        &alone,
                        &beside[w..],
                    ));
                }
            }
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
            // The packed variants (sm_90): Packed gives Flash's bits; PackedF16 and
            // PackedSplit (flash4) their own, against the reference and row by row against
            // themselves; flash4 gives flash3's bits for rows at positions below a split.
            let w_tok = w;
            let mut flash3 = None;
            for v in [
                PrefillAttn::Packed,
                PrefillAttn::PackedF16,
                PrefillAttn::PackedSplit,
            ] {
                if select::attention_prefill_entry_for(v, hd, cc).is_none() {
                    continue;
                }
                let vn = v.name();
                let whole = pass_v(v, 0, n)?;
                if v == PrefillAttn::PackedF16 {
                    flash3 = Some(whole.clone());
                }
                if v == PrefillAttn::PackedSplit {
                    res.extend(flash4_lines(
                        name,
                        &whole,
                        flash3.as_deref(),
                        &pos,
                        w_tok,
                        select::attention_prefill_split_row_bytes(nh, hd, cap),
                        &mut |a, b, budget| pass_budget(v, a, b, budget),
                    )?);
                }
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

/// flash4's own lines for a pass `whole` (rows at `pos`, `w` values each, `row_bytes` of
/// partials each): (b) the pass run in row groups (a scratch bound of 40 rows: groups of
/// whole tiles, or of 40 tokens where a tile is more) == one launch; (c) the rows at positions below
/// one split == flash3's `f3` bit for bit (and how many there were).
fn flash4_lines(
    name: &str,
    whole: &[f32],
    f3: Option<&[f32]>,
    pos: &[i32],
    w: usize,
    row_bytes: usize,
    pass_budget: &mut dyn FnMut(usize, usize, usize) -> Result<Vec<f32>, String>,
) -> Result<Vec<CheckLine>, String> {
    let n = pos.len();
    let mut res = Vec::new();
    // Row groups: a bound that holds ~40 rows' partials (whole tiles where one fits).
    let budget = 40 * row_bytes;
    let grouped = pass_budget(0, n, budget)?;
    res.push(compare_f32(
        "batch_invariance",
        format!(
            "attention_prefill flash4 {name}: row groups (scratch bound {budget} B) == one launch"
        ),
        &grouped,
        whole,
    ));
    if let Some(f3) = f3 {
        let split = select::ATT_PREFILL_SPLIT as i32;
        let rows: Vec<usize> = (0..n).filter(|&t| pos[t] < split).collect();
        if !rows.is_empty() {
            let pick = |v: &[f32]| -> Vec<f32> {
                rows.iter()
                    .flat_map(|&t| v[t * w..(t + 1) * w].iter().copied())
                    .collect()
            };
            res.push(compare_f32(
                "batch_invariance",
                format!(
                    "attention_prefill flash4 == flash3 {name}: the {} rows at positions < {split}",
                    rows.len()
                ),
                &pick(whole),
                &pick(f3),
            ));
        }
    }
    Ok(res)
}
