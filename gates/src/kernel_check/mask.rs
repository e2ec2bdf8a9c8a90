//! The token-mask cases of kernel-check: `mask.cu` against the CPU path of constrained
//! decoding (`engine::api::TokenMask::apply`, then `cpu::argmax` / `engine::sampling::pick`).
//!
//! Owns: [`judge_allowed`] (every pick must be a token the mask allows: a pure function,
//! tested here with a planted fault) and the GPU cases ([`mask_cases`]): random logits of
//! real vocabulary sizes and odd ones, masks from sparse (a handful of tokens, as inside a
//! JSON string's grammar) to dense, one allowed token, the row's maximum disallowed, and a
//! mask shorter than the row (tokens past it disallowed). For each: the masked row must
//! equal the CPU's bit for bit (`mask`), the device argmax of the masked row must equal the
//! CPU argmax of the CPU-masked row (`mask`), the device sampler on the masked row must
//! pick what `sampling::pick` picks on the CPU-masked row (`sample`, near-ties as in the
//! sampling cases), and every pick must be allowed (`mask`).

use super::cases::Rng;
use super::sample::{judge_picks, run_draws};
use super::{CheckLine, compare_exact, tolerance};
use engine::api::constrain::TokenMask;
use engine::cuda::ops::{self, MaskBuffer, SampleBuffers};
use engine::cuda::{Gpu, cpu};
use engine::sampling::{self, Pick, SamplerConfig};

/// A check line of op `mask` that every pick in `picks` (token ids; negative = the
/// sampler's fallback, judged elsewhere) is allowed by `mask`.
pub fn judge_allowed(name: &str, mask: &TokenMask, picks: &[i32]) -> CheckLine {
    let bad: Vec<(usize, i32)> = picks
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, t)| t >= 0 && !mask.allows(t as u32))
        .collect();
    CheckLine {
        op: "mask",
        name: format!("{name}: {} picks allowed", picks.len()),
        tol: tolerance("mask"),
        err: bad.len() as f64,
        pass: bad.is_empty() && !picks.is_empty(),
        note: match bad.first() {
            Some((i, t)) => format!("pick {i} = token {t} is not allowed by the mask"),
            None if picks.is_empty() => "no picks".into(),
            None => String::new(),
        },
    }
}

/// How a case's mask is made.
#[derive(Clone, Copy)]
enum Shape {
    /// `k` random tokens allowed.
    Sparse(usize),
    /// Each token allowed with probability 1/2.
    Dense,
    /// Everything allowed but the row's maximum (and its runner-up).
    AllButTop,
    /// Dense, but only the first `words` words are given (tokens past them disallowed).
    Short(usize),
}

fn make_mask(rng: &mut Rng, logits: &[f32], shape: Shape) -> Vec<u32> {
    let n = logits.len();
    let nw = n.div_ceil(32);
    let mut w = vec![0u32; nw];
    let set = |w: &mut Vec<u32>, i: usize| w[i / 32] |= 1 << (i % 32);
    match shape {
        Shape::Sparse(k) => {
            for _ in 0..k {
                set(&mut w, rng.below(n));
            }
        }
        Shape::Dense | Shape::Short(_) => {
            for x in &mut w {
                *x = rng.next_u64() as u32;
            }
        }
        Shape::AllButTop => {
            w.fill(u32::MAX);
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
            for &i in idx.iter().take(2) {
                w[i / 32] &= !(1 << (i % 32));
            }
        }
    }
    // Bits past the row are never allowed (llguidance leaves them clear too).
    if n % 32 != 0 {
        if let Some(last) = w.last_mut() {
            *last &= (1u32 << (n % 32)) - 1;
        }
    }
    if let Shape::Short(k) = shape {
        w.truncate(k.min(nw));
    }
    // Never an empty mask (the decoder refuses one; a grammar always allows something).
    if w.iter().all(|&x| x == 0) {
        w[0] |= 1;
    }
    w
}

fn e2s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn sample_cfg(temperature: f32, top_k: usize, top_p: f32) -> SamplerConfig {
    SamplerConfig {
        temperature,
        top_k,
        top_p,
        ..SamplerConfig::default()
    }
}

/// The mask cases (see the module doc).
pub fn mask_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    let cases: [(usize, Shape, &str); 7] = [
        (151_936, Shape::Sparse(12), "sparse 12"),
        (151_936, Shape::Dense, "dense"),
        (151_936, Shape::AllButTop, "all but the top two"),
        (49_152, Shape::Sparse(1), "one token"),
        (49_152, Shape::Short(700), "first 700 words only"),
        (33, Shape::Dense, "dense"),
        (1000, Shape::Sparse(3), "sparse 3"),
    ];
    for (n, shape, what) in cases {
        let name = format!("n={n} {what}");
        let r = (|| -> Result<Vec<CheckLine>, String> {
            let logits: Vec<f32> = (0..n).map(|_| 8.0 * rng.symmetric()).collect();
            let words = make_mask(rng, &logits, shape);
            let mask = TokenMask::from_words(words.clone(), n);
            let mut want = logits.clone();
            mask.apply(&mut want);
            // Device: mask in place, then compare the row, the argmax and sampled picks.
            let mut dl = gpu.upload(&logits).map_err(e2s)?;
            let mut mb = MaskBuffer::new(gpu, n).map_err(e2s)?;
            mb.write(gpu, &words).map_err(e2s)?;
            ops::apply_mask(gpu, &mut dl, &mb, n).map_err(e2s)?;
            let got = gpu.download(&dl).map_err(e2s)?;
            let got_bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            let want_bits: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
            let mut out = vec![compare_exact(
                "mask",
                format!("{name}: masked row"),
                &got_bits,
                &want_bits,
            )];
            let mut am = gpu.upload(&[-7i32]).map_err(e2s)?;
            ops::argmax(gpu, &dl, 1, n, &mut am).map_err(e2s)?;
            let got_am = gpu.download(&am).map_err(e2s)?;
            let want_am = cpu::argmax(&want, 1, n);
            out.push(compare_exact(
                "mask",
                format!("{name}: argmax"),
                &got_am,
                &want_am,
            ));
            let mut picks: Vec<i32> = got_am.clone();
            for (cfg, label) in [
                (sample_cfg(1.0, 40, 0.95), "top-k 40 top-p 0.95 T 1"),
                (sample_cfg(0.7, 0, 1.0), "T 0.7, no cut"),
            ] {
                let mut draws = vec![0.0, 0.5, 1.0 - f64::EPSILON / 2.0];
                let mut g = sampling::Rng::new(rng.next_u64());
                draws.extend((0..13).map(|_| g.next_f64()));
                let want_p: Vec<Pick> = draws
                    .iter()
                    .map(|&u| sampling::pick(&cfg, &[], &want, u))
                    .collect();
                let mut bufs = SampleBuffers::new(gpu, n, 1).map_err(e2s)?;
                let got_p = run_draws(gpu, &mut bufs, &dl, &cfg, &[], &draws)?;
                picks.extend(got_p.iter().map(|o| o[0]));
                out.push(judge_picks(
                    &format!("{name} masked, {label}"),
                    &got_p,
                    &want_p,
                ));
            }
            out.push(judge_allowed(&name, &mask, &picks));
            Ok(out)
        })();
        match r {
            Ok(mut ls) => lines.append(&mut ls),
            Err(e) => lines.push(CheckLine::error("mask", name, e)),
        }
    }
    // Fixed logits whose probabilities (T 0.7) sum below the largest draw under 1: the
    // draw falls past the total and must take the last allowed survivor, never a masked
    // token (the sampler's fallback to the last survivor once picked a -inf one).
    let name = "n=33 draw past the rounded total".to_string();
    let r = (|| -> Result<Vec<CheckLine>, String> {
        let n = 33;
        let mut logits = vec![0.25f32; n];
        let allowed = [
            (0usize, 2.077_184_4f32),
            (2, 0.031_702_925),
            (7, 0.534_013_6),
            (9, -2.792_845),
            (11, -1.543_560_1),
        ];
        let mut words = vec![0u32; 2];
        for &(i, v) in &allowed {
            logits[i] = v;
            words[i / 32] |= 1 << (i % 32);
        }
        let mask = TokenMask::from_words(words.clone(), n);
        let mut want = logits.clone();
        mask.apply(&mut want);
        let mut dl = gpu.upload(&logits).map_err(e2s)?;
        let mut mb = MaskBuffer::new(gpu, n).map_err(e2s)?;
        mb.write(gpu, &words).map_err(e2s)?;
        ops::apply_mask(gpu, &mut dl, &mb, n).map_err(e2s)?;
        let cfg = sample_cfg(0.7, 0, 1.0);
        let draws = [
            1.0 - f64::EPSILON / 2.0,
            1.0 - f64::EPSILON,
            0.999_999_999_999,
            0.5,
        ];
        let want_p: Vec<Pick> = draws
            .iter()
            .map(|&u| sampling::pick(&cfg, &[], &want, u))
            .collect();
        let mut bufs = SampleBuffers::new(gpu, n, 1).map_err(e2s)?;
        let got_p = run_draws(gpu, &mut bufs, &dl, &cfg, &[], &draws)?;
        let picks: Vec<i32> = got_p.iter().map(|o| o[0]).collect();
        Ok(vec![
            judge_picks(&name, &got_p, &want_p),
            judge_allowed(&name, &mask, &picks),
        ])
    })();
    match r {
        Ok(mut ls) => lines.append(&mut ls),
        Err(e) => lines.push(CheckLine::error("mask", name, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_picks_are_green_and_a_disallowed_pick_is_red() {
        let m = TokenMask::from_words(vec![0b1010, 1], 40);
        let ok = judge_allowed("ok", &m, &[1, 3, 32, -1]);
        assert!(ok.pass, "{}", ok.render());
        // Planted fault: token 2 (bit clear) picked, as by a kernel that ignored the mask.
        let bad = judge_allowed("planted", &m, &[1, 2, 3]);
        assert!(!bad.pass && bad.err == 1.0, "{}", bad.render());
        assert!(bad.note.contains("token 2"));
        // Past the row is never allowed; no picks is not green.
        assert!(!judge_allowed("past", &m, &[39]).pass);
        assert!(!judge_allowed("empty", &m, &[]).pass);
    }

    #[test]
    fn masks_are_never_empty_and_respect_the_row() {
        let mut rng = Rng::new(5);
        for (n, shape) in [
            (33usize, Shape::Dense),
            (1000, Shape::Sparse(1)),
            (100, Shape::AllButTop),
            (100, Shape::Short(2)),
        ] {
            let logits: Vec<f32> = (0..n).map(|_| rng.symmetric()).collect();
            let w = make_mask(&mut rng, &logits, shape);
            let m = TokenMask::from_words(w.clone(), n);
            assert!(m.count() > 0);
            assert!(w.len() <= n.div_ceil(32));
            if let Shape::AllButTop = shape {
                let top = cpu::argmax(&logits, 1, n)[0] as u32;
                assert!(!m.allows(top));
                assert_eq!(m.count(), n - 2);
            }
        }
    }

    #[test]
    fn a_kernel_that_forgets_the_last_word_is_red() {
        // The CPU stand-in of a faulty kernel: the last word's tokens are left unmasked.
        let n = 70;
        let mut rng = Rng::new(9);
        let logits: Vec<f32> = (0..n).map(|_| rng.symmetric()).collect();
        let words = vec![u32::MAX, 0x0000_ffff, 0];
        let mask = TokenMask::from_words(words, n);
        let mut want = logits.clone();
        mask.apply(&mut want);
        let mut faulty = logits.clone();
        for (i, v) in faulty.iter_mut().enumerate().take(64) {
            if !mask.allows(i as u32) {
                *v = f32::NEG_INFINITY;
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(compare_exact("mask", "good", &bits(&want), &bits(&want)).pass);
        let line = compare_exact("mask", "planted", &bits(&faulty), &bits(&want));
        assert!(!line.pass && line.err == 6.0, "{}", line.render());
    }
}
