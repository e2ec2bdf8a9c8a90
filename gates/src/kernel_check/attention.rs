//! kernel-check's attention cases: decode attention against the CPU reference over GQA,
//! sliding windows, soft-capping, head dims and context lengths across the split boundary;
//! and the fused launches (RoPE + KV store, attention with its own split merge) against the
//! separate kernels, bit for bit.

use super::cases::*;
use super::{CheckLine, compare_exact, compare_f32};
use engine::cuda::cudarc::driver::CudaSlice;
use engine::cuda::ops::{self, AttnScratch, AttnShape, RopeStyle};
use engine::cuda::{Gpu, cpu};
use half::f16;

/// A paged cache of `cap` positions for the kernels: a random block table over a pool with
/// one block more than the table names (the blocks permuted, so a kernel that ignored the
/// table would read other rows; the spare block holds NaN).
pub(super) struct Paged {
    bt: Vec<i32>,
    blocks: usize,
    nkv: usize,
    cap: usize,
    hd: usize,
}

impl Paged {
    pub(super) fn new(rng: &mut Rng, nkv: usize, cap: usize, hd: usize) -> Paged {
        let blocks = ops::kv_blocks(cap) + 1;
        let mut ids: Vec<i32> = (0..blocks as i32).collect();
        for i in (1..blocks).rev() {
            ids.swap(i, rng.below(i + 1));
        }
        ids.truncate(blocks - 1);
        Paged {
            bt: ids,
            blocks,
            nkv,
            cap,
            hd,
        }
    }

    /// The pool holding `logical` (`[nkv][cap][hd]`) through the table.
    pub(super) fn pool(&self, gpu: &Gpu, logical: &[f16]) -> Result<CudaSlice<f16>, String> {
        let pool = ops::to_paged(
            logical,
            &self.bt,
            self.blocks,
            self.nkv,
            self.cap,
            self.hd,
            f16::NAN,
        )
        .ok_or("paged layout of a test cache")?;
        gpu.upload(&pool).map_err(e2s)
    }

    /// The logical cache (`[nkv][cap][hd]`) the table reads from `pool`.
    pub(super) fn logical(&self, gpu: &Gpu, pool: &CudaSlice<f16>) -> Result<Vec<f16>, String> {
        let pool = gpu.download(pool).map_err(e2s)?;
        ops::from_paged(&pool, &self.bt, self.nkv, self.cap, self.hd)
            .ok_or_else(|| "logical view of a test pool".to_string())
    }

    pub(super) fn table(&self, gpu: &Gpu) -> Result<CudaSlice<i32>, String> {
        gpu.upload(&self.bt).map_err(e2s)
    }
}

pub(super) fn attention_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    // (heads, kv heads, head_dim, capacity, window, softcap, positions of the query tokens)
    type Shape = (usize, usize, usize, usize, usize, f32, Vec<i32>);
    let shapes: [Shape; 10] = [
        (9, 3, 64, 700, 0, 0.0, vec![650]),
        // more than ATT_CMB (128) splits: the combine's second round of split weights
        (8, 2, 64, 9000, 0, 0.0, vec![64, 8500]),
        (14, 2, 64, 300, 0, 0.0, vec![0]),
        (14, 2, 64, 300, 0, 0.0, vec![257]),
        (4, 1, 256, 1500, 512, 0.0, vec![1300]),
        (4, 1, 256, 1500, 512, 0.0, vec![1100, 1101, 1102]),
        // Gemma-3's sliding layers (window 1024, heads 16/8 of 256) well past the window:
        // before it fills, its start on a split boundary (1087: split 1) and just before
        // (1086), far past it (4000: splits 46 ..= 62)
        (16, 8, 256, 4200, 1024, 0.0, vec![1023, 1086, 1087, 4000]),
        // a window not a multiple of the split, and one within a split (191: split 2 only)
        (8, 4, 128, 1000, 40, 0.0, vec![10, 100, 191, 999]),
        (8, 8, 80, 64, 0, 0.0, vec![10, 11, 12, 13]),
        (8, 4, 128, 600, 0, 0.3, vec![511, 512]),
    ];
    for (nh, nkv, hd, cap, window, softcap, pos) in shapes {
        let ntok = pos.len();
        let s = AttnShape {
            ntok,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            capacity: cap,
            window,
        };
        let name = format!(
            "heads={nh}/{nkv} head_dim={hd} cap={cap} window={window} softcap={softcap} pos={pos:?}"
        );
        case(lines, "attention", name, |name| {
            let q = rand_vec(rng, ntok * nh * hd, 1.0);
            let cache = |rng: &mut Rng| -> Vec<f16> {
                (0..nkv * cap * hd)
                    .map(|_| f16::from_f32(rng.symmetric()))
                    .collect()
            };
            let (kc, vc) = (cache(rng), cache(rng));
            let scale = 1.0 / (hd as f32).sqrt();
            let want = cpu::attention(&q, &kc, &vc, &pos, s, scale, softcap);
            let pg = Paged::new(rng, nkv, cap, hd);
            let (dq, dk, dv) = (
                gpu.upload(&q).map_err(e2s)?,
                pg.pool(gpu, &kc)?,
                pg.pool(gpu, &vc)?,
            );
            let dbt = pg.table(gpu)?;
            let dp = gpu.upload(&pos).map_err(e2s)?;
            let mut scratch = AttnScratch::new(gpu, ntok, nh, hd, cap).map_err(e2s)?;
            let mut out = poison(gpu, ntok * nh * hd).map_err(e2s)?;
            let choice = ops::attention(
                gpu,
                &dq,
                &ops::KvView {
                    k: &dk,
                    v: &dv,
                    bt: &dbt,
                },
                &dp,
                s,
                scale,
                softcap,
                &mut scratch,
                &mut out,
            )
            .map_err(e2s)?;
            let got = gpu.download(&out).map_err(e2s)?;
            let mut res = vec![compare_f32(
                "attention",
                format!("{name} [{choice}]"),
                &got,
                &want,
            )];
            if ntok > 1 {
                let mut single = Vec::new();
                for t in 0..ntok {
                    let one = AttnShape { ntok: 1, ..s };
                    let dqt = gpu
                        .upload(&q[t * nh * hd..(t + 1) * nh * hd])
                        .map_err(e2s)?;
                    let dpt = gpu.upload(&pos[t..t + 1]).map_err(e2s)?;
                    let kv = ops::KvView {
                        k: &dk,
                        v: &dv,
                        bt: &dbt,
                    };
                    single.extend(attend(
                        gpu,
                        &dqt,
                        &kv,
                        &dpt,
                        one,
                        scale,
                        softcap,
                        &mut scratch,
                    )?);
                }
                res.push(compare_f32(
                    "batch_invariance",
                    format!("attention {name}: 1 vs {ntok} per launch"),
                    &single,
                    &got,
                ));
            }
            Ok(res)
        });
    }
    for (ntok, nkv, hd, cap) in [(1, 3, 64, 100), (5, 2, 128, 40), (2, 1, 256, 600)] {
        case(
            lines,
            "kv_store",
            format!("ntok={ntok} kv_heads={nkv} head_dim={hd} cap={cap}"),
            |name| {
                let (k, v) = (
                    rand_vec(rng, ntok * nkv * hd, 4.0),
                    rand_vec(rng, ntok * nkv * hd, 4.0),
                );
                let mut pos: Vec<i32> = (0..ntok).map(|_| rng.below(cap) as i32).collect();
                pos.sort_unstable();
                pos.dedup();
                let ntok = pos.len();
                let init: Vec<f16> = (0..nkv * cap * hd)
                    .map(|_| f16::from_f32(rng.symmetric()))
                    .collect();
                let (mut kc, mut vc) = (init.clone(), init.clone());
                cpu::kv_store(&k, &v, &mut kc, &mut vc, &pos, nkv, hd, cap);
                let (dk, dv, dp) = (
                    gpu.upload(&k).map_err(e2s)?,
                    gpu.upload(&v).map_err(e2s)?,
                    gpu.upload(&pos).map_err(e2s)?,
                );
                let pg = Paged::new(rng, nkv, cap, hd);
                let (mut dkc, mut dvc) = (pg.pool(gpu, &init)?, pg.pool(gpu, &init)?);
                let dbt = pg.table(gpu)?;
                ops::kv_store(
                    gpu, &dk, &dv, &mut dkc, &mut dvc, &dbt, &dp, ntok, nkv, hd, cap,
                )
                .map_err(e2s)?;
                let bits = |v: Vec<f16>| v.into_iter().map(f16::to_bits).collect::<Vec<u16>>();
                let (gk, gv) = (bits(pg.logical(gpu, &dkc)?), bits(pg.logical(gpu, &dvc)?));
                Ok(vec![
                    compare_exact("kv_store", format!("{name} K"), &gk, &bits(kc)),
                    compare_exact("kv_store", format!("{name} V"), &gv, &bits(vc)),
                ])
            },
        );
    }
}

/// One [`ops::attention`] launch of `s` into a fresh poisoned output, downloaded.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend(
    gpu: &Gpu,
    q: &CudaSlice<f32>,
    kv: &ops::KvView<'_>,
    pos: &CudaSlice<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    scratch: &mut AttnScratch,
) -> Result<Vec<f32>, String> {
    let mut o = poison(gpu, s.ntok * s.n_heads * s.head_dim).map_err(e2s)?;
    ops::attention(gpu, q, kv, pos, s, scale, softcap, scratch, &mut o).map_err(e2s)?;
    gpu.download(&o).map_err(e2s)
}

/// The one-launch forms of the attention block against the separate kernels, bit for bit:
/// `rope_kv` against rope(q), rope(k), kv_store; the attention that merges its own splits
/// against the split launch followed by the combine launch (twice in a row on one scratch,
/// so a split counter left non-zero by the first launch would show in the second).
pub(super) fn fused_attention_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    // (tokens, heads, kv heads, head_dim, n_rot, style, base, frequency factors, capacity)
    type Shape = (
        usize,
        usize,
        usize,
        usize,
        usize,
        RopeStyle,
        f32,
        bool,
        usize,
    );
    // From select::ROPE_KV_PASS_MIN_TOK tokens a launch takes `rope_kv_pass` (one block per
    // token, its angles once for all heads): the last three shapes.
    let shapes: [Shape; 7] = [
        (1, 32, 8, 128, 128, RopeStyle::Normal, 500_000.0, true, 700),
        (3, 14, 2, 64, 64, RopeStyle::Neox, 1_000_000.0, false, 300),
        (2, 4, 1, 256, 128, RopeStyle::Neox, 10000.0, false, 40),
        (8, 9, 3, 64, 64, RopeStyle::Normal, 10000.0, false, 1000),
        (40, 32, 8, 128, 128, RopeStyle::Normal, 500_000.0, true, 700),
        (64, 14, 2, 64, 64, RopeStyle::Neox, 1_000_000.0, false, 300),
        (33, 4, 1, 256, 128, RopeStyle::Neox, 10000.0, false, 40),
    ];
    for (ntok, nh, nkv, hd, n_rot, style, base, ff, cap) in shapes {
        let name = format!(
            "{} ntok={ntok} heads={nh}/{nkv} head_dim={hd} n_rot={n_rot} {style:?} cap={cap}",
            engine::cuda::select::rope_kv_entry(ntok)
        );
        case(lines, "fusion", name, |name| {
            let q = rand_vec(rng, ntok * nh * hd, 1.0);
            let k = rand_vec(rng, ntok * nkv * hd, 4.0);
            let v = rand_vec(rng, ntok * nkv * hd, 4.0);
            // Distinct positions; the last token of the 40-position cache lies past it (its
            // rotations still happen, its store does not).
            let mut pos: Vec<i32> = (0..ntok).map(|t| (t * (cap / ntok)) as i32).collect();
            if cap == 40 {
                pos[ntok - 1] = cap as i32;
            }
            let factors: Option<Vec<f32>> =
                ff.then(|| (0..n_rot / 2).map(|_| rng.range(1.0, 8.0)).collect());
            let fscale = if ff { 0.25 } else { 1.0 };
            let table =
                ops::RopeTable::new(gpu, base, n_rot, fscale, factors.as_deref()).map_err(e2s)?;
            let init: Vec<f16> = (0..nkv * cap * hd)
                .map(|_| f16::from_f32(rng.symmetric()))
                .collect();
            let dp = gpu.upload(&pos).map_err(e2s)?;
            let dv = gpu.upload(&v).map_err(e2s)?;
            let pg = Paged::new(rng, nkv, cap, hd);
            let dbt = pg.table(gpu)?;
            // Separate kernels.
            let (mut q1, mut k1) = (gpu.upload(&q).map_err(e2s)?, gpu.upload(&k).map_err(e2s)?);
            let (mut kc1, mut vc1) = (pg.pool(gpu, &init)?, pg.pool(gpu, &init)?);
            ops::rope(gpu, &mut q1, &dp, &table, ntok, nh, hd, style).map_err(e2s)?;
            ops::rope(gpu, &mut k1, &dp, &table, ntok, nkv, hd, style).map_err(e2s)?;
            ops::kv_store(
                gpu, &k1, &dv, &mut kc1, &mut vc1, &dbt, &dp, ntok, nkv, hd, cap,
            )
            .map_err(e2s)?;
            // One launch.
            let (mut q2, mut k2) = (gpu.upload(&q).map_err(e2s)?, gpu.upload(&k).map_err(e2s)?);
            let (mut kc2, mut vc2) = (pg.pool(gpu, &init)?, pg.pool(gpu, &init)?);
            let shape = ops::RopeKvShape {
                ntok,
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                capacity: cap,
            };
            ops::rope_kv(
                gpu, &mut q2, &mut k2, &dv, &mut kc2, &mut vc2, &dbt, &dp, &table, style, shape,
            )
            .map_err(e2s)?;
            let f32_bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<u32>>();
            let f16_bits = |v: Vec<f16>| v.into_iter().map(f16::to_bits).collect::<Vec<u16>>();
            let dl = |b: &CudaSlice<f32>| gpu.download(b).map(f32_bits).map_err(e2s);
            let dl16 = |b: &CudaSlice<f16>| gpu.download(b).map(f16_bits).map_err(e2s);
            Ok(vec![
                compare_exact("fusion", format!("{name} q"), &dl(&q2)?, &dl(&q1)?),
                compare_exact("fusion", format!("{name} k"), &dl(&k2)?, &dl(&k1)?),
                compare_exact(
                    "fusion",
                    format!("{name} K cache"),
                    &dl16(&kc2)?,
                    &dl16(&kc1)?,
                ),
                compare_exact(
                    "fusion",
                    format!("{name} V cache"),
                    &dl16(&vc2)?,
                    &dl16(&vc1)?,
                ),
            ])
        });
    }
    // (heads, kv heads, head_dim, capacity, window, softcap, positions of the query tokens)
    type AShape = (usize, usize, usize, usize, usize, f32, Vec<i32>);
    let shapes: [AShape; 8] = [
        (32, 8, 128, 700, 0, 0.0, vec![600]),
        // more than ATT_CMB (128) splits: the combine's second round of split weights
        (8, 2, 64, 9000, 0, 0.0, vec![64, 8500]),
        (14, 2, 64, 300, 0, 0.0, vec![0]),
        (4, 1, 256, 1500, 512, 0.0, vec![1100, 1101, 1499]),
        // Gemma-3's sliding layers far past the window (the grid holds its 17 splits)
        (16, 8, 256, 4200, 1024, 0.0, vec![1087, 4000, 4159]),
        (8, 4, 128, 1000, 100, 0.3, vec![99, 162, 163, 191, 999]),
        (8, 4, 128, 600, 0, 0.3, vec![63, 64, 65, 511]),
        (32, 8, 128, 4200, 0, 0.0, vec![4159]),
    ];
    for (nh, nkv, hd, cap, window, softcap, pos) in shapes {
        let ntok = pos.len();
        let s = AttnShape {
            ntok,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            capacity: cap,
            window,
        };
        let name = format!(
            "attention one launch heads={nh}/{nkv} head_dim={hd} window={window} softcap={softcap} pos={pos:?}"
        );
        case(lines, "fusion", name, |name| {
            let q = rand_vec(rng, ntok * nh * hd, 1.0);
            let cache = |rng: &mut Rng| -> Vec<f16> {
                (0..nkv * cap * hd)
                    .map(|_| f16::from_f32(rng.symmetric()))
                    .collect()
            };
            let (kc, vc) = (cache(rng), cache(rng));
            let scale = 1.0 / (hd as f32).sqrt();
            let pg = Paged::new(rng, nkv, cap, hd);
            let (dq, dk, dv) = (
                gpu.upload(&q).map_err(e2s)?,
                pg.pool(gpu, &kc)?,
                pg.pool(gpu, &vc)?,
            );
            let dbt = pg.table(gpu)?;
            let dp = gpu.upload(&pos).map_err(e2s)?;
            let mut scratch = AttnScratch::new(gpu, ntok, nh, hd, cap).map_err(e2s)?;
            let mut want = poison(gpu, ntok * nh * hd).map_err(e2s)?;
            ops::attention_two_pass(
                gpu,
                &dq,
                &ops::KvView {
                    k: &dk,
                    v: &dv,
                    bt: &dbt,
                },
                &dp,
                s,
                scale,
                softcap,
                &mut scratch,
                &mut want,
            )
            .map_err(e2s)?;
            let want = gpu.download(&want).map_err(e2s)?;
            let mut res = Vec::new();
            for run in 1..=2 {
                let mut got = poison(gpu, ntok * nh * hd).map_err(e2s)?;
                ops::attention(
                    gpu,
                    &dq,
                    &ops::KvView {
                        k: &dk,
                        v: &dv,
                        bt: &dbt,
                    },
                    &dp,
                    s,
                    scale,
                    softcap,
                    &mut scratch,
                    &mut got,
                )
                .map_err(e2s)?;
                let got = gpu.download(&got).map_err(e2s)?;
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                res.push(compare_exact(
                    "fusion",
                    format!("{name} run {run}"),
                    &bits(&got),
                    &bits(&want),
                ));
            }
            Ok(res)
        });
    }
}

/// The batched launches of the batched decode step (`decode/batch.rs`) against one launch
/// per row, bit for bit: `attn_rows*` (every row over its own cache, at its own capacity
/// and position: rows of one split and of many, a window, a soft-cap, 64 rows at once; run
/// twice on one scratch, so a split counter left non-zero would show) against
/// [`ops::attention`] per row, and `rope_kv_rows` against a one-token [`ops::rope_kv`] per
/// row (q, k and both caches; a position past its row's cache stores nothing).
pub(super) fn rows_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    // (heads, kv heads, head_dim, window, softcap, (capacity, position) of each row)
    type AShape = (usize, usize, usize, usize, f32, Vec<(usize, i32)>);
    let mut many: Vec<(usize, i32)> = Vec::new();
    for _ in 0..64 {
        let cap = 64 + rng.below(600);
        many.push((cap, rng.below(cap) as i32));
    }
    let shapes: [AShape; 7] = [
        (
            32,
            8,
            128,
            0,
            0.0,
            vec![(200, 5), (700, 600), (100, 63), (4200, 4159), (130, 64)],
        ),
        (8, 2, 64, 0, 0.0, vec![(9000, 8500), (300, 0), (300, 257)]),
        (
            4,
            1,
            256,
            512,
            0.0,
            vec![(1500, 1100), (1500, 1499), (600, 10)],
        ),
        // Gemma-3's sliding layers: rows far past the window, on its split boundary, and
        // before it fills
        (
            16,
            8,
            256,
            1024,
            0.0,
            vec![
                (4200, 4000),
                (1500, 1087),
                (2048, 1023),
                (600, 10),
                (4096, 4095),
            ],
        ),
        (
            8,
            4,
            128,
            40,
            0.0,
            vec![(1000, 191), (300, 100), (64, 63), (1000, 999)],
        ),
        (8, 8, 80, 0, 0.3, vec![(64, 10), (130, 129)]),
        (32, 8, 128, 0, 0.0, many),
    ];
    for (nh, nkv, hd, window, softcap, rows) in shapes {
        let n = rows.len();
        let shown: Vec<_> = rows.iter().take(5).collect();
        let name = format!(
            "attention rows={n} heads={nh}/{nkv} head_dim={hd} window={window} \
             softcap={softcap} (cap, pos)={shown:?}{}",
            if n > 5 { " ..." } else { "" }
        );
        case(lines, "batch_invariance", name, |name| {
            let scale = 1.0 / (hd as f32).sqrt();
            let q = rand_vec(rng, n * nh * hd, 1.0);
            let dq = gpu.upload(&q).map_err(e2s)?;
            let row_w = nh * hd;
            let mut caches = Vec::with_capacity(n);
            let mut want = Vec::with_capacity(n * row_w);
            for (t, &(cap, p)) in rows.iter().enumerate() {
                let cache = |rng: &mut Rng| -> Vec<f16> {
                    (0..nkv * cap * hd)
                        .map(|_| f16::from_f32(rng.symmetric()))
                        .collect()
                };
                let (kc, vc) = (cache(rng), cache(rng));
                let pg = Paged::new(rng, nkv, cap, hd);
                let (dk, dv, dbt) = (pg.pool(gpu, &kc)?, pg.pool(gpu, &vc)?, pg.table(gpu)?);
                let dqt = gpu.upload(&q[t * row_w..(t + 1) * row_w]).map_err(e2s)?;
                let dpt = gpu.upload(&[p]).map_err(e2s)?;
                let s = AttnShape {
                    ntok: 1,
                    n_heads: nh,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    capacity: cap,
                    window,
                };
                let mut sc = AttnScratch::new(gpu, 1, nh, hd, cap).map_err(e2s)?;
                let mut o = poison(gpu, row_w).map_err(e2s)?;
                ops::attention(
                    gpu,
                    &dqt,
                    &ops::KvView {
                        k: &dk,
                        v: &dv,
                        bt: &dbt,
                    },
                    &dpt,
                    s,
                    scale,
                    softcap,
                    &mut sc,
                    &mut o,
                )
                .map_err(e2s)?;
                want.extend(gpu.download(&o).map_err(e2s)?);
                caches.push((dk, dv, dbt, cap));
            }
            let table: Vec<ops::KvRow> = caches
                .iter()
                .map(|(k, v, bt, cap)| ops::KvRow::of(gpu, k, v, bt, *cap))
                .collect();
            let (ptrs, caps) = ops::kv_row_table(&table, nkv, hd).map_err(e2s)?;
            let cap_max = rows.iter().map(|r| r.0).max().unwrap_or(1);
            let (dptrs, dcaps) = (
                gpu.upload(&ptrs).map_err(e2s)?,
                gpu.upload(&caps).map_err(e2s)?,
            );
            let pos: Vec<i32> = rows.iter().map(|r| r.1).collect();
            let dp = gpu.upload(&pos).map_err(e2s)?;
            let max_pos = pos.iter().map(|&p| p.max(0) as usize).max().unwrap_or(0);
            let mut sc = AttnScratch::new(gpu, n, nh, hd, cap_max).map_err(e2s)?;
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
            let mut res = Vec::new();
            for run in 1..=2 {
                let mut o = poison(gpu, n * row_w).map_err(e2s)?;
                let choice = ops::attention_rows(
                    gpu,
                    &dq,
                    &ops::KvRowsDev {
                        ptrs: &dptrs,
                        caps: &dcaps,
                        capacity: cap_max,
                        // run 1: the grid cut at the last split reached; run 2: all splits
                        max_pos: (run == 1).then_some(max_pos),
                    },
                    &dp,
                    AttnShape {
                        ntok: n,
                        n_heads: nh,
                        n_kv_heads: nkv,
                        head_dim: hd,
                        capacity: cap_max,
                        window,
                    },
                    scale,
                    softcap,
                    &mut sc,
                    &mut o,
                )
                .map_err(e2s)?;
                let got = gpu.download(&o).map_err(e2s)?;
                res.push(compare_exact(
                    "batch_invariance",
                    format!(
                        "{name}: per-row launches vs one batched launch, run {run} ({}) [{choice}]",
                        if run == 1 {
                            "grid to the last split reached"
                        } else {
                            "grid of every split"
                        }
                    ),
                    &bits(&got),
                    &bits(&want),
                ));
            }
            Ok(res)
        });
    }

    // (heads, kv heads, head_dim, n_rot, style, base, (capacity, position) of each row)
    type RShape = (
        usize,
        usize,
        usize,
        usize,
        RopeStyle,
        f32,
        Vec<(usize, i32)>,
    );
    let mut many: Vec<(usize, i32)> = Vec::new();
    for _ in 0..64 {
        let cap = 16 + rng.below(300);
        many.push((cap, rng.below(cap) as i32));
    }
    let shapes: [RShape; 3] = [
        (
            32,
            8,
            128,
            128,
            RopeStyle::Normal,
            500_000.0,
            vec![(700, 600), (40, 40), (200, 0), (130, 129)],
        ),
        (
            14,
            2,
            64,
            32,
            RopeStyle::Neox,
            1_000_000.0,
            vec![(300, 7), (64, 63)],
        ),
        (32, 8, 128, 128, RopeStyle::Normal, 500_000.0, many),
    ];
    for (nh, nkv, hd, n_rot, style, base, rows) in shapes {
        let n = rows.len();
        let shown: Vec<_> = rows.iter().take(4).collect();
        let name = format!(
            "rope_kv rows={n} heads={nh}/{nkv} head_dim={hd} n_rot={n_rot} {style:?} \
             (cap, pos)={shown:?}{}",
            if n > 4 { " ..." } else { "" }
        );
        case(lines, "batch_invariance", name, |name| {
            let (qw, kw) = (nh * hd, nkv * hd);
            let q = rand_vec(rng, n * qw, 1.0);
            let k = rand_vec(rng, n * kw, 4.0);
            let v = rand_vec(rng, n * kw, 4.0);
            let table = ops::RopeTable::new(gpu, base, n_rot, 1.0, None).map_err(e2s)?;
            let f32_bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<u32>>();
            let f16_bits = |v: Vec<f16>| v.into_iter().map(f16::to_bits).collect::<Vec<u16>>();
            // Per row: one-token rope_kv into the row's own caches.
            let (mut q1, mut k1) = (Vec::new(), Vec::new());
            let (mut kc1, mut vc1) = (Vec::new(), Vec::new());
            let mut caches = Vec::new();
            for (t, &(cap, p)) in rows.iter().enumerate() {
                let init: Vec<f16> = (0..nkv * cap * hd)
                    .map(|_| f16::from_f32(rng.symmetric()))
                    .collect();
                let mut dq = gpu.upload(&q[t * qw..(t + 1) * qw]).map_err(e2s)?;
                let mut dk = gpu.upload(&k[t * kw..(t + 1) * kw]).map_err(e2s)?;
                let dv = gpu.upload(&v[t * kw..(t + 1) * kw]).map_err(e2s)?;
                let pg = Paged::new(rng, nkv, cap, hd);
                let dbt = pg.table(gpu)?;
                let (mut dkc, mut dvc) = (pg.pool(gpu, &init)?, pg.pool(gpu, &init)?);
                let dp = gpu.upload(&[p]).map_err(e2s)?;
                let shape = ops::RopeKvShape {
                    ntok: 1,
                    n_heads: nh,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    capacity: cap,
                };
                ops::rope_kv(
                    gpu, &mut dq, &mut dk, &dv, &mut dkc, &mut dvc, &dbt, &dp, &table, style, shape,
                )
                .map_err(e2s)?;
                q1.extend(f32_bits(gpu.download(&dq).map_err(e2s)?));
                k1.extend(f32_bits(gpu.download(&dk).map_err(e2s)?));
                kc1.extend(f16_bits(gpu.download(&dkc).map_err(e2s)?));
                vc1.extend(f16_bits(gpu.download(&dvc).map_err(e2s)?));
                caches.push((pg.pool(gpu, &init)?, pg.pool(gpu, &init)?, dbt, cap));
            }
            // One batched launch into fresh copies of the same caches.
            let kv: Vec<ops::KvRow> = caches
                .iter()
                .map(|(kc, vc, bt, cap)| ops::KvRow::of(gpu, kc, vc, bt, *cap))
                .collect();
            let (ptrs, caps) = ops::kv_row_table(&kv, nkv, hd).map_err(e2s)?;
            let cap_max = rows.iter().map(|r| r.0).max().unwrap_or(1);
            let (dptrs, dcaps) = (
                gpu.upload(&ptrs).map_err(e2s)?,
                gpu.upload(&caps).map_err(e2s)?,
            );
            let pos: Vec<i32> = rows.iter().map(|r| r.1).collect();
            let dp = gpu.upload(&pos).map_err(e2s)?;
            let (mut dq, mut dk) = (gpu.upload(&q).map_err(e2s)?, gpu.upload(&k).map_err(e2s)?);
            let dv = gpu.upload(&v).map_err(e2s)?;
            ops::rope_kv_rows(
                gpu,
                &mut dq,
                &mut dk,
                &dv,
                &ops::KvRowsDev {
                    ptrs: &dptrs,
                    caps: &dcaps,
                    capacity: cap_max,
                    max_pos: None,
                },
                &dp,
                &table,
                style,
                ops::RopeKvShape {
                    ntok: n,
                    n_heads: nh,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    capacity: cap_max,
                },
            )
            .map_err(e2s)?;
            let (mut kc2, mut vc2) = (Vec::new(), Vec::new());
            for (kc, vc, _, _) in &caches {
                kc2.extend(f16_bits(gpu.download(kc).map_err(e2s)?));
                vc2.extend(f16_bits(gpu.download(vc).map_err(e2s)?));
            }
            let what = "per-row launches vs one batched launch";
            Ok(vec![
                compare_exact(
                    "batch_invariance",
                    format!("{name} q: {what}"),
                    &f32_bits(gpu.download(&dq).map_err(e2s)?),
                    &q1,
                ),
                compare_exact(
                    "batch_invariance",
                    format!("{name} k: {what}"),
                    &f32_bits(gpu.download(&dk).map_err(e2s)?),
                    &k1,
                ),
                compare_exact(
                    "batch_invariance",
                    format!("{name} K caches: {what}"),
                    &kc2,
                    &kc1,
                ),
                compare_exact(
                    "batch_invariance",
                    format!("{name} V caches: {what}"),
                    &vc2,
                    &vc1,
                ),
            ])
        });
    }
}
