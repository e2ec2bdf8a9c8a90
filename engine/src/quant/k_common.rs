//! Shared helpers of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
//!
//! Owns: f16 field access, the 12-byte packing of eight 6-bit (scale, min) codes used by
//! Q4_K and Q5_K, and the two super-block quantizers every K format is built on:
//!
//! - [`quantize_affine`]: `x ≈ d·sc_j·q − dmin·m_j` with unsigned `q`, `sc_j`, `m_j`
//!   (Q2_K, Q4_K, Q5_K);
//! - [`quantize_symmetric`]: `x ≈ d·sc_j·q` with signed `q` and `sc_j` (Q3_K, Q6_K).
//!
//! Both work in three steps: (1) per sub-block, a small search over candidate scales, each
//! refined by least squares, finds the best real-valued sub-block scale (and offset);
//! (2) the super-block f16 scale(s) are set from the largest sub-block values (nearest f16
//! and the next one up are both tried), and each sub-block's integer codes are chosen by
//! trying the neighbours of the rounded code and keeping the best for its elements; (3) the
//! super-block scale(s) are refit by least squares over all 256 elements with the codes
//! fixed, and kept only when the result improves. "Best" everywhere is plain (unweighted)
//! squared error among candidates whose worst element stays within [`CLIP_CAP`] of a naive
//! grid step (see [`Score`]); with no such candidate, the smallest excess wins.

use super::QK_K;
use half::f16;

/// Largest finite f16; super-block scales are clamped to it.
const F16_MAX: f32 = 65504.0;

/// Read a little-endian f16 as f32.
pub(crate) fn read_f16(b: [u8; 2]) -> f32 {
    f16::from_le_bytes(b).to_f32()
}

/// Round a scale to f16 (finite, clamped), returning (bytes, value).
fn to_f16(v: f32) -> ([u8; 2], f32) {
    let v = if v.is_finite() {
        v.clamp(-F16_MAX, F16_MAX)
    } else {
        0.0
    };
    let h = f16::from_f32(v);
    (h.to_le_bytes(), h.to_f32())
}

/// Two f16 candidates for a scale: round-to-nearest, and the next f16 one step further
/// from zero (useful when `v` is small and f16 steps are coarse, when the nearest value
/// would push the largest code past its limit, or when `v` rounds to zero).
fn f16_pair(v: f32) -> [([u8; 2], f32); 2] {
    let (b, r) = to_f16(v);
    let bits = u16::from_le_bytes(b);
    // One step further from zero; a value that rounded to ±0 gets the smallest subnormal.
    let up = if r.abs() >= F16_MAX { bits } else { bits + 1 };
    let h = f16::from_bits(up);
    [(b, r), (h.to_le_bytes(), h.to_f32())]
}

/// Sub-block `j`'s (scale, min) 6-bit codes from the Q4_K / Q5_K 12-byte scale field.
///
/// Bytes 0..4 hold scales 0..3 in their low 6 bits, bytes 4..8 mins 0..3; the top 2 bits of
/// bytes 0..8 and both nibbles of bytes 8..12 hold the codes of sub-blocks 4..7.
pub(crate) fn unpack_scale_min(s: &[u8; 12], j: usize) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        let sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        let mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (sc, mn)
    }
}

/// Inverse of [`unpack_scale_min`]: pack eight 6-bit scale and min codes (values above 63
/// are masked to 6 bits).
pub(crate) fn pack_scale_min(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        let (sh, mh) = (sc[j + 4] & 63, mn[j + 4] & 63);
        s[j] = (sc[j] & 63) | ((sh >> 4) << 6);
        s[j + 4] = (mn[j] & 63) | ((mh >> 4) << 6);
        s[j + 8] = (sh & 0x0F) | ((mh & 0x0F) << 4);
    }
    s
}

/// Result of [`quantize_affine`]: f16 super-block scales, per-sub-block codes (only the
/// first `256 / sub` entries are used) and the per-element quants.
pub(crate) struct AffineBlock {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub sc: [u8; 16],
    pub mn: [u8; 16],
    pub q: [u8; QK_K],
}

/// Result of [`quantize_symmetric`]: f16 super-block scale, signed per-sub-block codes and
/// signed per-element quants.
pub(crate) struct SymmetricBlock {
    pub d: [u8; 2],
    pub sc: [i8; 16],
    pub q: [i8; QK_K],
}

/// How far the fits may clip: no element's error should exceed `CLIP_CAP` × the step of
/// its sub-block's naive grid (the grid whose end level(s) hold the sub-block's extreme
/// values exactly). Least squares alone sometimes clips the largest weights by nearly a
/// full step; the cap keeps every weight within 0.8 of a naive step for a small RMSE cost.
const CLIP_CAP: f32 = 0.8;

/// Relative slack added to each cap for the f16 rounding of the super-block scales.
const F16_SLACK: f32 = 1.0 / 512.0;

/// A candidate's quality: how far its worst element exceeds the cap (0 when within), then
/// its squared error. Lower is better, compared in that order.
#[derive(Clone, Copy, Default)]
struct Score {
    excess: f32,
    sse: f32,
}

impl Score {
    const WORST: Score = Score {
        excess: f32::INFINITY,
        sse: f32::INFINITY,
    };

    fn better_than(self, other: Score) -> bool {
        self.excess < other.excess || (self.excess == other.excess && self.sse < other.sse)
    }

    fn add(self, other: Score) -> Score {
        Score {
            excess: self.excess + other.excess,
            sse: self.sse + other.sse,
        }
    }
}

/// Nearest level of `v / a`, clamped to `lo..=hi`; 0-safe (`a == 0` gives 0 clamped).
fn level(v: f32, inv_a: f32, lo: i32, hi: i32) -> i32 {
    let r = (v * inv_a).round();
    if r.is_nan() {
        0.clamp(lo, hi)
    } else {
        (r as i32).clamp(lo, hi)
    }
}

fn inv(a: f32) -> f32 {
    if a != 0.0 && a.is_finite() {
        1.0 / a
    } else {
        0.0
    }
}

/// Score of `x ≈ a·q − b`, `q = clamp(round((x + b)/a), 0, nmax)`, against `cap`; the
/// levels are written to `q` when given.
fn affine_eval(x: &[f32], a: f32, b: f32, nmax: i32, cap: f32, mut q: Option<&mut [u8]>) -> Score {
    let ia = inv(a);
    let (mut sse, mut worst) = (0f32, 0f32);
    for (i, &v) in x.iter().enumerate() {
        let l = level(v + b, ia, 0, nmax);
        let e = a * l as f32 - b - v;
        sse += e * e;
        worst = worst.max(e.abs());
        if let Some(q) = q.as_deref_mut() {
            q[i] = l as u8;
        }
    }
    Score {
        excess: (worst - cap).max(0.0),
        sse,
    }
}

/// Score of `x ≈ s·q`, `q = clamp(round(x/s), lo, hi)`, against `cap`; the levels are
/// written to `q` when given.
fn symmetric_eval(
    x: &[f32],
    s: f32,
    lo: i32,
    hi: i32,
    cap: f32,
    mut q: Option<&mut [i8]>,
) -> Score {
    let is = inv(s);
    let (mut sse, mut worst) = (0f32, 0f32);
    for (i, &v) in x.iter().enumerate() {
        let l = level(v, is, lo, hi);
        let e = s * l as f32 - v;
        sse += e * e;
        worst = worst.max(e.abs());
        if let Some(q) = q.as_deref_mut() {
            q[i] = l as i8;
        }
    }
    Score {
        excess: (worst - cap).max(0.0),
        sse,
    }
}

/// Best real `(a, b)` with `a ≥ 0`, `b ≥ 0` for `x ≈ a·q − b`, `q ∈ 0..=nmax`, and the
/// sub-block's error cap.
///
/// Starts from the naive grid over `[min(x, 0), max(x)]`, then tries initial scales spread
/// around it, refines each by least squares on the assigned levels (three rounds), and
/// keeps the best-scoring pair.
fn fit_affine(x: &[f32], nmax: i32) -> (f32, f32, f32) {
    let hi = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lo = x.iter().copied().fold(0f32, f32::min);
    if hi <= lo || !hi.is_finite() || !lo.is_finite() {
        // All values equal and ≤ 0 (or non-finite input): the offset alone is exact.
        let b = if lo.is_finite() { -lo } else { 0.0 };
        return (0.0, b, F16_SLACK * b);
    }
    let cap = CLIP_CAP * (hi - lo) / nmax as f32 + F16_SLACK * hi.max(-lo);
    let n = x.len() as f32;
    let naive = (hi - lo) / nmax as f32;
    let mut best = (naive, -lo, affine_eval(x, naive, -lo, nmax, cap, None));
    let mut q = [0u8; 32];
    let q = &mut q[..x.len()];
    for step in -3..=6 {
        let mut a = (hi - lo) / (nmax as f32 + 0.2 * step as f32);
        let mut b = -lo;
        for _ in 0..3 {
            let score = affine_eval(x, a, b, nmax, cap, Some(q));
            if score.better_than(best.2) {
                best = (a, b, score);
            }
            // Least squares for x ≈ a·q + c (c = −b), with c ≤ 0 enforced.
            let (mut sq, mut sqq, mut sx, mut sxq) = (0f32, 0f32, 0f32, 0f32);
            for (&v, &l) in x.iter().zip(q.iter()) {
                let l = l as f32;
                sq += l;
                sqq += l * l;
                sx += v;
                sxq += v * l;
            }
            let det = n * sqq - sq * sq;
            if det <= 0.0 {
                break;
            }
            let mut na = (n * sxq - sq * sx) / det;
            let mut c = (sqq * sx - sq * sxq) / det;
            if c > 0.0 {
                c = 0.0;
                na = sxq / sqq;
            }
            let usable = na > 0.0 && na.is_finite() && c.is_finite();
            if !usable {
                break;
            }
            a = na;
            b = -c;
        }
    }
    (best.0, best.1, cap)
}

/// Best real scale `s` for `x ≈ s·q`, `q ∈ −nneg..=npos` (`s` may be negative, which maps
/// the largest magnitude onto the longer negative side), and the sub-block's error cap.
///
/// Starts from the grid that holds both `±max|x|` within half a step, then tries scales
/// mapping the largest magnitude near either end level, each refined by least squares.
fn fit_symmetric(x: &[f32], nneg: i32, npos: i32) -> (f32, f32) {
    let mut m = 0f32;
    for &v in x {
        if v.abs() > m.abs() {
            m = v;
        }
    }
    if m == 0.0 || !m.is_finite() {
        return (0.0, 0.0);
    }
    let cap = CLIP_CAP * m.abs() / nneg as f32 + F16_SLACK * m.abs();
    let mut q = [0i8; 32];
    let q = &mut q[..x.len()];
    let s0 = m / (npos as f32 + 0.5);
    let mut best = (s0, symmetric_eval(x, s0, -nneg, npos, cap, None));
    for (ends, sign) in [(nneg, -1.0f32), (npos, 1.0)] {
        for step in -2..=4 {
            let mut s = sign * m / (ends as f32 + 0.25 * step as f32);
            for _ in 0..3 {
                let score = symmetric_eval(x, s, -nneg, npos, cap, Some(q));
                if score.better_than(best.1) {
                    best = (s, score);
                }
                let (mut sxq, mut sqq) = (0f32, 0f32);
                for (&v, &l) in x.iter().zip(q.iter()) {
                    sxq += v * l as f32;
                    sqq += (l as f32) * (l as f32);
                }
                if sqq <= 0.0 {
                    break;
                }
                s = sxq / sqq;
            }
        }
    }
    (best.0, cap)
}

/// Quantize 256 values as `d·sc_j·q − dmin·m_j` over sub-blocks of `sub` elements, with
/// `q ∈ 0..=nmax` and codes `sc_j, m_j ∈ 0..=code_max`.
pub(crate) fn quantize_affine(x: &[f32], sub: usize, nmax: u8, code_max: u8) -> AffineBlock {
    let nsub = QK_K / sub;
    let nmax = i32::from(nmax);
    let cmax = i32::from(code_max);
    let (mut a, mut b, mut cap) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    for (j, xs) in x.chunks_exact(sub).take(nsub).enumerate() {
        (a[j], b[j], cap[j]) = fit_affine(xs, nmax);
    }
    let amax = a.iter().copied().fold(0f32, f32::max);
    let bmax = b.iter().copied().fold(0f32, f32::max);

    // Codes for given (d, dmin): per sub-block, the best-scoring of the 3×3 neighbourhood
    // of the rounded codes.
    let choose = |d: f32, dmin: f32, blk: &mut AffineBlock| -> Score {
        let (id, idm) = (inv(d), inv(dmin));
        let mut total = Score::default();
        for (j, xs) in x.chunks_exact(sub).take(nsub).enumerate() {
            let s0 = level(a[j], id, 0, cmax);
            let m0 = level(b[j], idm, 0, cmax);
            let mut best = (0, 0, Score::WORST);
            for s in (s0 - 1).max(0)..=(s0 + 1).min(cmax) {
                for mc in (m0 - 1).max(0)..=(m0 + 1).min(cmax) {
                    let (sa, sb) = (d * s as f32, dmin * mc as f32);
                    let score = affine_eval(xs, sa, sb, nmax, cap[j], None);
                    if score.better_than(best.2) {
                        best = (s, mc, score);
                    }
                }
            }
            blk.sc[j] = best.0 as u8;
            blk.mn[j] = best.1 as u8;
            let qs = &mut blk.q[j * sub..(j + 1) * sub];
            let (sa, sb) = (d * best.0 as f32, dmin * best.1 as f32);
            total = total.add(affine_eval(xs, sa, sb, nmax, cap[j], Some(qs)));
        }
        total
    };
    let empty = |d: [u8; 2], dmin: [u8; 2]| AffineBlock {
        d,
        dmin,
        sc: [0; 16],
        mn: [0; 16],
        q: [0; QK_K],
    };

    let mut blk = empty([0; 2], [0; 2]);
    let mut score = Score::WORST;
    for (db, d) in f16_pair(amax / code_max as f32) {
        for (dmb, dmin) in f16_pair(bmax / code_max as f32) {
            let mut cand = empty(db, dmb);
            let s = choose(d, dmin, &mut cand);
            if s.better_than(score) {
                score = s;
                blk = cand;
            }
        }
    }

    // Refit (d, dmin) by least squares over all elements with codes and levels fixed:
    // x ≈ d·A − dmin·B with A = sc_j·q, B = m_j.
    for _ in 0..2 {
        let (mut saa, mut sab, mut sbb, mut sxa, mut sxb) = (0f32, 0f32, 0f32, 0f32, 0f32);
        for (i, &v) in x.iter().enumerate().take(nsub * sub) {
            let j = i / sub;
            let ea = f32::from(blk.sc[j]) * f32::from(blk.q[i]);
            let eb = f32::from(blk.mn[j]);
            saa += ea * ea;
            sab += ea * eb;
            sbb += eb * eb;
            sxa += v * ea;
            sxb += v * eb;
        }
        let det = saa * sbb - sab * sab;
        let (nd, ndm) = if det > 0.0 {
            ((sxa * sbb - sxb * sab) / det, (sxa * sab - sxb * saa) / det)
        } else if saa > 0.0 {
            (sxa / saa, 0.0)
        } else {
            break;
        };
        if !(nd >= 0.0 && ndm >= 0.0) {
            break;
        }
        let (ndb, nd) = to_f16(nd);
        let (ndmb, ndm) = to_f16(ndm);
        let mut cand = empty(ndb, ndmb);
        let s = choose(nd, ndm, &mut cand);
        if s.better_than(score) {
            score = s;
            blk = cand;
        } else {
            break;
        }
    }
    blk
}

/// Quantize 256 values as `d·sc_j·q` over sub-blocks of `sub` elements, with
/// `q ∈ −nneg..=nneg−1` and codes `sc_j ∈ −cneg..=cneg−1`.
pub(crate) fn quantize_symmetric(x: &[f32], sub: usize, nneg: i8, cneg: i32) -> SymmetricBlock {
    let nsub = QK_K / sub;
    let (qlo, qhi) = (-i32::from(nneg), i32::from(nneg) - 1);
    let (clo, chi) = (-cneg, cneg - 1);
    let (mut s, mut cap) = ([0f32; 16], [0f32; 16]);
    for (j, xs) in x.chunks_exact(sub).take(nsub).enumerate() {
        (s[j], cap[j]) = fit_symmetric(xs, -qlo, qhi);
    }
    let mut sm = 0f32;
    for &v in &s {
        if v.abs() > sm.abs() {
            sm = v;
        }
    }

    // Codes for a given d: per sub-block, the best-scoring of the rounded code and its two
    // neighbours.
    let choose = |d: f32, blk: &mut SymmetricBlock| -> Score {
        let id = inv(d);
        let mut total = Score::default();
        for (j, xs) in x.chunks_exact(sub).take(nsub).enumerate() {
            let c0 = level(s[j], id, clo, chi);
            let mut best = (0, Score::WORST);
            for c in (c0 - 1).max(clo)..=(c0 + 1).min(chi) {
                let score = symmetric_eval(xs, d * c as f32, qlo, qhi, cap[j], None);
                if score.better_than(best.1) {
                    best = (c, score);
                }
            }
            blk.sc[j] = best.0 as i8;
            let qs = &mut blk.q[j * sub..(j + 1) * sub];
            let sj = d * best.0 as f32;
            total = total.add(symmetric_eval(xs, sj, qlo, qhi, cap[j], Some(qs)));
        }
        total
    };
    let empty = |d: [u8; 2]| SymmetricBlock {
        d,
        sc: [0; 16],
        q: [0; QK_K],
    };

    // Two ways to place the largest sub-block scale: on the negative end (−cneg) or on the
    // positive end (cneg − 1) of the code range; keep the better.
    let mut blk = empty([0; 2]);
    let mut score = Score::WORST;
    for denom in [-(cneg as f32), (cneg - 1) as f32] {
        for (db, d) in f16_pair(sm / denom) {
            let mut cand = empty(db);
            let sc = choose(d, &mut cand);
            if sc.better_than(score) {
                score = sc;
                blk = cand;
            }
        }
    }
    // Least-squares refit of d with codes and levels fixed.
    for _ in 0..2 {
        let (mut sxa, mut saa) = (0f32, 0f32);
        for (i, &v) in x.iter().enumerate().take(nsub * sub) {
            let ea = f32::from(blk.sc[i / sub]) * f32::from(blk.q[i]);
            sxa += v * ea;
            saa += ea * ea;
        }
        if saa <= 0.0 {
            break;
        }
        let (db, d) = to_f16(sxa / saa);
        let mut cand = empty(db);
        let sc = choose(d, &mut cand);
        if sc.better_than(score) {
            score = sc;
            blk = cand;
        } else {
            break;
        }
    }
    blk
}

/// Test helpers shared by the K-format files: a seeded generator and generic checks.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::super::BlockFormat;

    /// Small deterministic generator (xorshift64*), uniform and standard normal draws.
    pub struct Rng(u64);
    impl Rng {
        pub fn new(seed: u64) -> Self {
            Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }
        pub fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        pub fn uniform(&mut self) -> f32 {
            ((self.next_u64() >> 40) as f32 + 0.5) / (1u64 << 24) as f32
        }
        pub fn normal(&mut self) -> f32 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
        }
    }

    /// `dot_block` equals dequantize-then-dot (in element order) on blocks made by the
    /// quantizer and on random byte blocks.
    pub fn check_dot<B: BlockFormat>(seed: u64) {
        let mut rng = Rng::new(seed);
        for round in 0..40 {
            let mut blk = vec![0u8; B::BLOCK_BYTES];
            if round % 2 == 0 {
                let w: Vec<f32> = (0..B::BLOCK_ELEMS).map(|_| rng.normal()).collect();
                B::quantize_block(&w, &mut blk);
            } else {
                blk.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
            }
            let x: Vec<f32> = (0..B::BLOCK_ELEMS).map(|_| rng.normal()).collect();
            let mut y = vec![0f32; B::BLOCK_ELEMS];
            B::dequantize_block(&blk, &mut y);
            let (mut want, mut mag) = (0f32, 0f32);
            for (a, b) in y.iter().zip(&x) {
                want += a * b;
                mag += (a * b).abs();
            }
            let got = B::dot_block(&blk, &x);
            if want.is_finite() {
                assert!(
                    (got - want).abs() <= 1e-6 * mag,
                    "round {round}: {got} vs {want}"
                );
            } else {
                assert!(!got.is_finite(), "round {round}: {got} vs {want}");
            }
        }
    }

    fn round_trip<B: BlockFormat>(x: &[f32]) -> Vec<f32> {
        let mut blk = vec![0u8; B::BLOCK_BYTES];
        B::quantize_block(x, &mut blk);
        let mut y = vec![0f32; B::BLOCK_ELEMS];
        B::dequantize_block(&blk, &mut y);
        y
    }

    /// All-zero, constant, tiny, huge and outlier blocks quantize to finite values; zeros
    /// stay exactly zero; constants come back within `tol` relative.
    pub fn check_special_blocks<B: BlockFormat>(tol: f32) {
        let n = B::BLOCK_ELEMS;
        let y = round_trip::<B>(&vec![0.0; n]);
        assert!(y.iter().all(|&v| v == 0.0), "all-zero block");
        for c in [0.3f32, -0.7, 1e-3, -2.5e-4, 100.0, -3000.0] {
            let y = round_trip::<B>(&vec![c; n]);
            for (i, &v) in y.iter().enumerate() {
                assert!(
                    v.is_finite() && (v - c).abs() <= tol * c.abs(),
                    "const {c}: y[{i}]={v}"
                );
            }
        }
        for c in [1e-9f32, 1e6, -1e6] {
            let x: Vec<f32> = (0..n).map(|i| c * ((i % 7) as f32 - 3.0)).collect();
            let y = round_trip::<B>(&x);
            assert!(y.iter().all(|v| v.is_finite()), "scaled block {c}");
        }
        for pos in [0, n / 2 + 3, n - 1] {
            // One large positive outlier among zeros: zeros stay exact, outlier close.
            let mut x = vec![0f32; n];
            x[pos] = 1000.0;
            let y = round_trip::<B>(&x);
            for (i, &v) in y.iter().enumerate() {
                if i == pos {
                    assert!((v - 1000.0).abs() <= tol * 1000.0, "outlier at {pos}: {v}");
                } else {
                    assert_eq!(v, 0.0, "outlier at {pos}: zero at {i} became {v}");
                }
            }
            // A negative outlier over small noise: finite, outlier roughly kept.
            let mut rng = Rng::new(pos as u64);
            let mut x: Vec<f32> = (0..n).map(|_| 0.01 * rng.normal()).collect();
            x[pos] = -50.0;
            let y = round_trip::<B>(&x);
            assert!(y.iter().all(|v| v.is_finite()));
            assert!(
                (y[pos] + 50.0).abs() <= 0.2 * 50.0,
                "negative outlier {}",
                y[pos]
            );
        }
    }

    /// RMSE of quantize→dequantize over `nblocks` blocks of N(0, 1) data, relative to the
    /// data's RMS.
    pub fn relative_rmse<B: BlockFormat>(seed: u64, nblocks: usize) -> f32 {
        let mut rng = Rng::new(seed);
        let (mut se, mut ss) = (0f64, 0f64);
        for _ in 0..nblocks {
            let x: Vec<f32> = (0..B::BLOCK_ELEMS).map(|_| rng.normal()).collect();
            let y = round_trip::<B>(&x);
            for (a, b) in x.iter().zip(&y) {
                se += f64::from(a - b).powi(2);
                ss += f64::from(*a).powi(2);
            }
        }
        (se / ss).sqrt() as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_packing_round_trips_every_code() {
        for seed in 0..64u8 {
            let sc: [u8; 8] =
                std::array::from_fn(|j| seed.wrapping_mul(7).wrapping_add(j as u8 * 9) & 63);
            let mn: [u8; 8] =
                std::array::from_fn(|j| seed.wrapping_mul(13).wrapping_add(j as u8 * 5) & 63);
            let p = pack_scale_min(&sc, &mn);
            for j in 0..8 {
                assert_eq!(unpack_scale_min(&p, j), (sc[j], mn[j]), "seed {seed} j {j}");
            }
        }
    }

    #[test]
    fn unpack_matches_hand_layout() {
        // Sub-block 5: scale = low nibble of byte 9 | top 2 bits of byte 1 << 4,
        //              min   = high nibble of byte 9 | top 2 bits of byte 5 << 4.
        let mut s = [0u8; 12];
        s[1] = 0b10_000011; // scale 1 = 3, top bits 0b10
        s[5] = 0b01_000111; // min 1 = 7, top bits 0b01
        s[9] = 0xA4; // scale 5 low = 4, min 5 low = 0xA
        assert_eq!(unpack_scale_min(&s, 1), (3, 7));
        assert_eq!(unpack_scale_min(&s, 5), (0b10_0100, 0b01_1010));
    }

    #[test]
    fn affine_fit_is_exact_on_grid_values() {
        // Values already on a grid a·q − b with b ≥ 0 are reproduced exactly.
        let x: Vec<f32> = (0..32).map(|i| 0.5 * (i % 16) as f32 - 2.0).collect();
        let (a, b, cap) = fit_affine(&x, 15);
        let e = affine_eval(&x, a, b, 15, cap, None);
        assert!(e.sse < 1e-8 && e.excess == 0.0, "sse {} a {a} b {b}", e.sse);
    }

    #[test]
    fn symmetric_fit_is_exact_on_grid_values() {
        let x: Vec<f32> = (0..16).map(|i| 0.25 * ((i % 8) as f32 - 4.0)).collect();
        let (s, cap) = fit_symmetric(&x, 4, 3);
        let e = symmetric_eval(&x, s, -4, 3, cap, None);
        assert!(e.sse < 1e-10 && e.excess == 0.0, "sse {} s {s}", e.sse);
    }
}
