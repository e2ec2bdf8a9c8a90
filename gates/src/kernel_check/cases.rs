//! The GPU cases of kernel-check: random inputs, shapes, launches, references.
//!
//! Owns: the seeded generator ([`Rng`]), random weights in every kernel format
//! ([`random_weight`]), and one function per kernel family that runs its shapes and returns
//! a [`CheckLine`] per comparison (the matvec family's in `matvec.rs`, others in their own
//! modules). A launch or copy error becomes a failing line, never a
//! crash of the gate.

use super::{CheckLine, compare_exact, compare_f32};
use engine::cuda::cudarc::driver::CudaSlice;
use engine::cuda::ops::{self, Activation, RopeStyle};
use engine::cuda::{CudaError, DeviceWeight, Gpu, cpu, select};
use engine::quant::QuantFormat;
use half::f16;

/// Every op name the cases report under (each must have one tolerance).
pub const OPS: [&str; 24] = [
    "matvec",
    "gemm",
    "mmv_bf16_x",
    "gemm_f16x",
    "gemmt",
    "gemmt_x16",
    "embed",
    "rmsnorm",
    "qk_norm",
    "rope",
    "attention",
    "attention_prefill",
    "attention_prefill_f16q",
    "gated_act",
    "add",
    "scale",
    "softcap",
    "kv_store",
    "argmax",
    "sample",
    "sample_chi2",
    "batch_invariance",
    "fusion",
    "mask",
];

/// The case groups `run_all` can be limited to (`kernel-check --only`).
pub const GROUPS: [&str; 11] = [
    "matvec",
    "gemm",
    "gemmt",
    "mmv",
    "embed",
    "norm",
    "rope",
    "attention",
    "pointwise",
    "sample",
    "mask",
];

/// SplitMix64: small, seeded, the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Uniform in [-1, 1), never exactly 0.
    pub fn symmetric(&mut self) -> f32 {
        let v = 2.0 * self.unit() - 1.0;
        if v == 0.0 { 0.5 } else { v }
    }
    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }
    /// Uniform integer in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Byte offsets of the f16 scale fields inside one block of `format` (the rest of a
/// block is quants and packed codes, any bit pattern of which is valid).
fn f16_fields(format: QuantFormat) -> &'static [usize] {
    match format {
        QuantFormat::Q4_0 | QuantFormat::Q5_0 | QuantFormat::Q8_0 => &[0],
        QuantFormat::Q4_1 | QuantFormat::Q5_1 | QuantFormat::Q4_K | QuantFormat::Q5_K => &[0, 2],
        QuantFormat::Q6_K => &[208],
        _ => &[],
    }
}

/// A random `rows x k` weight in `format`: float formats get values in [-1, 1); block
/// formats get random bytes with every f16 scale set to a finite random value.
pub fn random_weight(rng: &mut Rng, format: QuantFormat, rows: usize, k: usize) -> Vec<u8> {
    let n = rows * k;
    match format {
        QuantFormat::F32 => (0..n).flat_map(|_| rng.symmetric().to_le_bytes()).collect(),
        QuantFormat::F16 => (0..n)
            .flat_map(|_| f16::from_f32(rng.symmetric()).to_le_bytes())
            .collect(),
        QuantFormat::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(rng.symmetric()).to_le_bytes())
            .collect(),
        _ => {
            let (be, bb) = format.block_geometry();
            let mut w: Vec<u8> = (0..n / be * bb).map(|_| rng.next_u64() as u8).collect();
            let big = be == 256;
            for blk in w.chunks_exact_mut(bb) {
                for &off in f16_fields(format) {
                    // K-quant super-block scales multiply 6/8-bit sub-scales: keep them small.
                    let mag = if big {
                        rng.range(0.002, 0.02)
                    } else {
                        rng.range(0.01, 0.1)
                    };
                    let v = if big || rng.unit() < 0.5 { mag } else { -mag };
                    blk[off..off + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
                }
            }
            w
        }
    }
}

/// A random weight of `format` and a random bias for each of `rows` (k columns), uploaded:
/// the draws of each row's weight, then its bias.
pub(super) fn random_weights(
    gpu: &Gpu,
    rng: &mut Rng,
    format: QuantFormat,
    rows: [usize; 3],
    k: usize,
) -> Result<(Vec<DeviceWeight>, Vec<CudaSlice<f32>>), String> {
    let mut w = Vec::new();
    let mut bias = Vec::new();
    for r in rows {
        let bytes = random_weight(rng, format, r, k);
        w.push(DeviceWeight::upload(gpu, format, r, k, &bytes).map_err(e2s)?);
        bias.push(gpu.upload(&rand_vec(rng, r, 1.0)).map_err(e2s)?);
    }
    Ok((w, bias))
}

pub(super) fn rand_vec(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| scale * rng.symmetric()).collect()
}

/// The device inputs of a multi-token product case (`batch`, `gemm`, `mmv`): a weight and an
/// up weight of one format and shape, a bias and an RMSNorm weight.
pub(super) struct ProductInputs {
    pub w: DeviceWeight,
    pub wu: DeviceWeight,
    pub bias: CudaSlice<f32>,
    pub norm_w: CudaSlice<f32>,
    pub rows: usize,
    pub k: usize,
}

/// A multi-token product case's random inputs: the host weight and bias (for the CPU
/// reference), `n` token vectors of x and `n` residual rows, and the device inputs.
pub(super) struct ProductCase {
    pub w: Vec<u8>,
    /// The up matrix of the gate + up cases (host bytes of `dev.wu`).
    pub wu: Vec<u8>,
    pub bias: Vec<f32>,
    pub x: Vec<f32>,
    pub res: Vec<f32>,
    pub dev: ProductInputs,
}

impl ProductCase {
    pub fn random(
        gpu: &Gpu,
        rng: &mut Rng,
        format: QuantFormat,
        rows: usize,
        k: usize,
        n: usize,
    ) -> Result<ProductCase, String> {
        let w = random_weight(rng, format, rows, k);
        let wu = random_weight(rng, format, rows, k);
        let x = rand_vec(rng, n * k, 1.0);
        let bias = rand_vec(rng, rows, 1.0);
        let res = rand_vec(rng, n * rows, 1.0);
        let norm_w: Vec<f32> = (0..k).map(|_| 1.0 + 0.1 * rng.symmetric()).collect();
        let dev = ProductInputs {
            w: DeviceWeight::upload(gpu, format, rows, k, &w).map_err(e2s)?,
            wu: DeviceWeight::upload(gpu, format, rows, k, &wu).map_err(e2s)?,
            bias: gpu.upload(&bias).map_err(e2s)?,
            norm_w: gpu.upload(&norm_w).map_err(e2s)?,
            rows,
            k,
        };
        Ok(ProductCase {
            w,
            wu,
            bias,
            x,
            res,
            dev,
        })
    }
}

pub(super) fn poison(gpu: &Gpu, n: usize) -> Result<CudaSlice<f32>, CudaError> {
    gpu.upload(&vec![f32::NAN; n])
}

/// One shape of a weight-product family's cases: the device, the weight's format, its rows
/// (`[usize; 3]` for the q/k/v segments) and k, and the name the lines carry.
#[derive(Clone, Copy)]
pub(super) struct Shape<'a, R = usize> {
    pub gpu: &'a Gpu,
    pub format: QuantFormat,
    pub rows: R,
    pub k: usize,
    pub name: &'a str,
}

impl<'a, R> Shape<'a, R> {
    pub fn new(gpu: &'a Gpu, format: QuantFormat, rows: R, k: usize, name: &'a str) -> Self {
        Shape {
            gpu,
            format,
            rows,
            k,
            name,
        }
    }

    /// (gpu, format, rows, k, name).
    pub fn parts(self) -> (&'a Gpu, QuantFormat, R, usize, &'a str) {
        (self.gpu, self.format, self.rows, self.k, self.name)
    }

    /// Run `cases` on this shape, which push their lines; an error becomes a failing `op`
    /// line under the shape's name (after the lines pushed before it).
    pub fn run(
        self,
        rng: &mut Rng,
        lines: &mut Vec<CheckLine>,
        op: &'static str,
        cases: impl FnOnce(Self, &mut Rng, &mut Vec<CheckLine>) -> Result<(), String>,
    ) {
        lines_or_error(lines, op, self.name, |lines| cases(self, rng, lines));
    }
}

/// Run `cases`, which push their lines; an error becomes a failing `op` line named `name`
/// (after the lines pushed before it).
pub(super) fn lines_or_error(
    lines: &mut Vec<CheckLine>,
    op: &'static str,
    name: &str,
    cases: impl FnOnce(&mut Vec<CheckLine>) -> Result<(), String>,
) {
    if let Err(e) = cases(lines) {
        lines.push(CheckLine::error(op, name, e));
    }
}

/// Collect the lines of one case, turning an error into a failing line.
pub(super) fn case(
    lines: &mut Vec<CheckLine>,
    op: &'static str,
    name: String,
    f: impl FnOnce(&str) -> Result<Vec<CheckLine>, String>,
) {
    match f(&name) {
        Ok(mut ls) => lines.append(&mut ls),
        Err(e) => lines.push(CheckLine::error(op, name, e)),
    }
}

/// Run every case on `gpu` with inputs from `seed`; `only` (names of [`GROUPS`]) limits
/// the run to those groups when not empty. Each group draws from its own generator seeded
/// from `seed` and the group's name, so a limited run gives the same inputs as a full one.
pub fn run_all(gpu: &Gpu, seed: u64, only: &[String]) -> Vec<CheckLine> {
    let want = |g: &str| only.is_empty() || only.iter().any(|o| o == g);
    let rng_for = |g: &str| {
        let h = g.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Rng::new(seed ^ h)
    };
    let mut lines = Vec::new();
    for (g, run) in [
        (
            "matvec",
            super::matvec::matvec_cases as fn(&Gpu, &mut Rng, QuantFormat, &mut Vec<CheckLine>),
        ),
        ("embed", embed_cases),
    ] {
        if want(g) {
            let mut rng = rng_for(g);
            for format in select::KERNEL_FORMATS {
                run(gpu, &mut rng, format, &mut lines);
            }
        }
    }
    if want("matvec") {
        super::batch::run_all(gpu, &mut rng_for("matvec_batch"), &mut lines);
        super::wr::run_all(gpu, &mut rng_for("matvec_wr"), &mut lines);
        super::wrt::run_all(gpu, &mut rng_for("matvec_wrt"), &mut lines);
        super::qkv::run_all(gpu, &mut rng_for("matvec_qkv"), &mut lines);
    }
    // (group, name of the generator's seed, cases)
    for (g, seed_name, run) in [
        (
            "norm",
            "norm",
            norm_cases as fn(&Gpu, &mut Rng, &mut Vec<CheckLine>),
        ),
        ("rope", "rope", rope_cases),
        ("attention", "attention", super::attention::attention_cases),
        (
            "attention",
            "fused_attention",
            super::attention::fused_attention_cases,
        ),
        ("attention", "attention_rows", super::attention::rows_cases),
        (
            "attention",
            "attention_prefill",
            super::attention_prefill::prefill_cases,
        ),
        ("pointwise", "pointwise", pointwise_cases),
        ("gemm", "gemm", super::gemm::gemm_cases),
        ("gemmt", "gemmt", super::gemmt::gemmt_cases),
        ("mmv", "mmv", super::mmv::mmv_cases),
        ("sample", "sample", super::sample::sample_cases),
        ("mask", "mask", super::mask::mask_cases),
    ] {
        if want(g) {
            run(gpu, &mut rng_for(seed_name), &mut lines);
        }
    }
    if want("rope") {
        // rope_kv in the q / k / v launch's epilogue (ASSAY_ROPE_FUSE) against the separate
        // launches: lines named `ropefuse ...`.
        super::ropefuse::run_all(gpu, &mut rng_for("ropefuse"), &mut lines);
    }
    lines
}

pub(super) fn e2s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `sum_j |w_rj * x_tj| + |bias_r|` for every output (token-major like the result): the
/// magnitude the f32 rounding of each dot product scales with.
pub(super) fn dot_scales(
    format: QuantFormat,
    w: &[u8],
    rows: usize,
    k: usize,
    x: &[f32],
    ntok: usize,
    bias: Option<&[f32]>,
) -> Result<Vec<f64>, String> {
    let row_bytes = format.bytes_for(k).map_err(e2s)?;
    let mut row = vec![0f32; k];
    let mut out = vec![0f64; ntok * rows];
    for r in 0..rows {
        let bytes = w
            .get(r * row_bytes..(r + 1) * row_bytes)
            .ok_or_else(|| "weight too short".to_owned())?;
        engine::quant::dequantize(format, bytes, &mut row).map_err(e2s)?;
        for t in 0..ntok {
            let xt = &x[t * k..(t + 1) * k];
            let mag: f64 = row
                .iter()
                .zip(xt)
                .map(|(a, b)| f64::from(*a * *b).abs())
                .sum();
            let b = bias.map_or(0.0, |b| f64::from(b[r].abs()));
            out[t * rows + r] = mag + b;
        }
    }
    Ok(out)
}

fn embed_cases(gpu: &Gpu, rng: &mut Rng, format: QuantFormat, lines: &mut Vec<CheckLine>) {
    let unit = format.block_geometry().0.max(32);
    let vocab = 37;
    for (k, scale) in [
        (unit, 1.0f32),
        (if unit == 256 { 768 } else { 800 }, 24.0f32.sqrt()),
    ] {
        let name = format!("{format} vocab={vocab} k={k} scale={scale:.3}");
        case(lines, "embed", name, |name| {
            let w = random_weight(rng, format, vocab, k);
            // First and last ids, random ones, and one out of range (a NaN row both sides).
            let tokens = [
                0,
                vocab as i32 - 1,
                rng.below(vocab) as i32,
                vocab as i32,
                rng.below(vocab) as i32,
            ];
            let want = cpu::embed(format, &w, vocab, k, &tokens, scale).map_err(e2s)?;
            let dw = DeviceWeight::upload(gpu, format, vocab, k, &w).map_err(e2s)?;
            let dt = gpu.upload(&tokens).map_err(e2s)?;
            let mut out = poison(gpu, tokens.len() * k).map_err(e2s)?;
            let choice = ops::embed(gpu, &dw, &dt, tokens.len(), scale, &mut out).map_err(e2s)?;
            let got = gpu.download(&out).map_err(e2s)?;
            Ok(vec![compare_f32(
                "embed",
                format!("{name} [{choice}]"),
                &got,
                &want,
            )])
        });
    }
}

fn norm_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    for (rows, dim, off) in [
        (1, 576, 0.0f32),
        (3, 896, 0.0),
        (5, 2048, 1.0),
        (2, 999, 0.0),
    ] {
        case(
            lines,
            "rmsnorm",
            format!("rows={rows} dim={dim} w_offset={off}"),
            |name| {
                let x = rand_vec(rng, rows * dim, 3.0);
                let w: Vec<f32> = (0..dim).map(|_| rng.range(0.5, 1.5)).collect();
                let want = cpu::rmsnorm(&x, &w, rows, dim, 1e-6, off);
                let (dx, dw) = (gpu.upload(&x).map_err(e2s)?, gpu.upload(&w).map_err(e2s)?);
                let mut dy = poison(gpu, rows * dim).map_err(e2s)?;
                ops::rmsnorm(gpu, &dx, &dw, &mut dy, rows, dim, 1e-6, off).map_err(e2s)?;
                let got = gpu.download(&dy).map_err(e2s)?;
                Ok(vec![compare_f32("rmsnorm", name.to_string(), &got, &want)])
            },
        );
    }
    for (ntok, nheads, hd, off) in [(1, 16, 128, 0.0f32), (3, 8, 64, 0.0), (2, 4, 256, 1.0)] {
        case(
            lines,
            "qk_norm",
            format!("ntok={ntok} heads={nheads} head_dim={hd} w_offset={off}"),
            |name| {
                let x = rand_vec(rng, ntok * nheads * hd, 2.0);
                let w: Vec<f32> = (0..hd).map(|_| rng.range(0.5, 1.5)).collect();
                let want = cpu::rmsnorm(&x, &w, ntok * nheads, hd, 1e-6, off);
                let (mut dx, dw) = (gpu.upload(&x).map_err(e2s)?, gpu.upload(&w).map_err(e2s)?);
                ops::qk_norm(gpu, &mut dx, &dw, ntok, nheads, hd, 1e-6, off).map_err(e2s)?;
                let got = gpu.download(&dx).map_err(e2s)?;
                Ok(vec![compare_f32("qk_norm", name.to_string(), &got, &want)])
            },
        );
    }
}

fn rope_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    let shapes = [
        (1, 9, 64, 64, RopeStyle::Normal, 10000.0f32, 4000),
        (3, 14, 64, 64, RopeStyle::Neox, 1_000_000.0, 30000),
        (2, 4, 128, 64, RopeStyle::Neox, 10000.0, 100),
        (2, 4, 256, 256, RopeStyle::Neox, 1_000_000.0, 8000),
    ];
    for (ntok, nheads, hd, n_rot, style, base, max_pos) in shapes {
        let name =
            format!("{style:?} ntok={ntok} heads={nheads} head_dim={hd} n_rot={n_rot} base={base}");
        case(lines, "rope", name, |name| {
            let mut x = rand_vec(rng, ntok * nheads * hd, 1.0);
            let pos: Vec<i32> = (0..ntok).map(|_| rng.below(max_pos) as i32).collect();
            // The last shape has Llama-3.1-style frequency factors and a position scale.
            let factors: Option<Vec<f32>> =
                (hd == 256).then(|| (0..n_rot / 2).map(|_| rng.range(1.0, 8.0)).collect());
            let fscale = if factors.is_some() { 0.25 } else { 1.0 };
            let table =
                ops::RopeTable::new(gpu, base, n_rot, fscale, factors.as_deref()).map_err(e2s)?;
            let host_table = cpu::rope_table(base, n_rot, factors.as_deref());
            let mut dx = gpu.upload(&x).map_err(e2s)?;
            let dp = gpu.upload(&pos).map_err(e2s)?;
            ops::rope(gpu, &mut dx, &dp, &table, ntok, nheads, hd, style).map_err(e2s)?;
            let got = gpu.download(&dx).map_err(e2s)?;
            cpu::rope(
                &mut x,
                &pos,
                &host_table,
                fscale,
                ntok,
                nheads,
                hd,
                n_rot,
                style,
            );
            Ok(vec![compare_f32(
                "rope",
                format!("{name} pos<{max_pos}"),
                &got,
                &x,
            )])
        });
    }
}

fn pointwise_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    for (n, act) in [
        (4871, Activation::Silu),
        (4871, Activation::GeluTanh),
        (64, Activation::Silu),
    ] {
        case(lines, "gated_act", format!("{act:?} n={n}"), |name| {
            let (g, u) = (rand_vec(rng, n, 6.0), rand_vec(rng, n, 2.0));
            let want = cpu::gated_act(&g, &u, act);
            let (dg, du) = (gpu.upload(&g).map_err(e2s)?, gpu.upload(&u).map_err(e2s)?);
            let mut out = poison(gpu, n).map_err(e2s)?;
            ops::gated_act(gpu, &dg, &du, &mut out, n, act).map_err(e2s)?;
            let got = gpu.download(&out).map_err(e2s)?;
            // The same, written over the gate and over the up input (aliased launches).
            let mut over_gate = gpu.upload(&g).map_err(e2s)?;
            ops::gated_act_inplace(gpu, &mut over_gate, &du, true, n, act).map_err(e2s)?;
            let mut over_up = gpu.upload(&u).map_err(e2s)?;
            ops::gated_act_inplace(gpu, &mut over_up, &dg, false, n, act).map_err(e2s)?;
            Ok(vec![
                compare_f32("gated_act", name.to_string(), &got, &want),
                compare_f32(
                    "gated_act",
                    format!("{name} out=gate"),
                    &gpu.download(&over_gate).map_err(e2s)?,
                    &want,
                ),
                compare_f32(
                    "gated_act",
                    format!("{name} out=up"),
                    &gpu.download(&over_up).map_err(e2s)?,
                    &want,
                ),
            ])
        });
    }
    case(lines, "add", "n=1001".to_string(), |name| {
        let (y, x) = (rand_vec(rng, 1001, 10.0), rand_vec(rng, 1001, 1.0));
        let want: Vec<f32> = y.iter().zip(&x).map(|(a, b)| a + b).collect();
        let (mut dy, dx) = (gpu.upload(&y).map_err(e2s)?, gpu.upload(&x).map_err(e2s)?);
        let mut out = poison(gpu, 1001).map_err(e2s)?;
        ops::add(gpu, &dy, &dx, &mut out, 1001).map_err(e2s)?;
        ops::add_inplace(gpu, &mut dy, &dx, 1001).map_err(e2s)?;
        Ok(vec![
            compare_f32(
                "add",
                name.to_string(),
                &gpu.download(&out).map_err(e2s)?,
                &want,
            ),
            compare_f32(
                "add",
                format!("{name} in place"),
                &gpu.download(&dy).map_err(e2s)?,
                &want,
            ),
        ])
    });
    case(lines, "softcap", "n=1001 cap=30".to_string(), |name| {
        let y = rand_vec(rng, 1001, 60.0);
        let want: Vec<f32> = y
            .iter()
            .map(|&a| (30.0 * (f64::from(a) / 30.0).tanh()) as f32)
            .collect();
        let mut dy = gpu.upload(&y).map_err(e2s)?;
        ops::softcap_inplace(gpu, &mut dy, 30.0, 1001).map_err(e2s)?;
        Ok(vec![compare_f32(
            "softcap",
            name.to_string(),
            &gpu.download(&dy).map_err(e2s)?,
            &want,
        )])
    });
    case(lines, "scale", "n=1001 s=33.941".to_string(), |name| {
        let y = rand_vec(rng, 1001, 1.0);
        let s = 1152f32.sqrt();
        let want: Vec<f32> = y.iter().map(|a| a * s).collect();
        let mut dy = gpu.upload(&y).map_err(e2s)?;
        ops::scale_inplace(gpu, &mut dy, s, 1001).map_err(e2s)?;
        Ok(vec![compare_f32(
            "scale",
            name.to_string(),
            &gpu.download(&dy).map_err(e2s)?,
            &want,
        )])
    });
    for n in [151_936usize, 49_152, 4_099, 3] {
        case(
            lines,
            "argmax",
            format!("rows=4 n={n} (ties, NaN, all-equal row)"),
            |name| {
                let rows = 4;
                let mut x = rand_vec(rng, rows * n, 10.0);
                // Row 0: the maximum twice (the smaller index wins). Row 1: NaN around the max at
                // the last index. Row 2: all equal (index 0). Row 3: plain random.
                let (a, b) = (rng.below(n), rng.below(n));
                x[a] = 20.0;
                x[b] = 20.0;
                for i in (n..2 * n).step_by(7) {
                    x[i] = f32::NAN;
                }
                x[2 * n - 1] = 25.0;
                x[2 * n..3 * n].fill(-1.5);
                let want = cpu::argmax(&x, rows, n);
                let dx = gpu.upload(&x).map_err(e2s)?;
                let mut out = gpu.upload(&vec![-7i32; rows]).map_err(e2s)?;
                ops::argmax(gpu, &dx, rows, n, &mut out).map_err(e2s)?;
                let got = gpu.download(&out).map_err(e2s)?;
                Ok(vec![compare_exact("argmax", name.to_string(), &got, &want)])
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_becomes_a_failing_line_after_the_lines_pushed_before_it() {
        let mut lines = Vec::new();
        lines_or_error(&mut lines, "gemm", "Q4_0 rows=37 k=768", |lines| {
            lines.push(compare_f32("gemm", "same", &[1.0], &[1.0]));
            lines.push(compare_f32("gemm", "differs", &[1.0], &[2.0]));
            Err("launch failed".into())
        });
        assert_eq!(lines.len(), 3);
        assert!(lines[0].pass);
        assert!(!lines[1].pass);
        let e = &lines[2];
        assert!(!e.pass);
        assert_eq!((e.op, e.name.as_str()), ("gemm", "Q4_0 rows=37 k=768"));
        assert_eq!(e.note, "error: launch failed");

        let mut lines = Vec::new();
        lines_or_error(&mut lines, "fusion", "ok", |lines| {
            lines.push(compare_f32("fusion", "same", &[3.0], &[3.0]));
            Ok(())
        });
        assert_eq!(lines.len(), 1);
        assert!(lines[0].pass);
    }
}
