//! Q3_K: 256 values in 110 bytes (3.4375 bits per weight).
//!
//! Layout (GGML `block_q3_K`): `hmask: [u8; 32]` (high bit of each 3-bit quant: bit `k` of
//! `hmask[l]` belongs to element `32k + l`), `qs: [u8; 64]` (low 2 bits: bit pair `2k` of
//! `qs[32h + l]` belongs to element `128h + 32k + l`), `scales: [u8; 12]` (sixteen 6-bit
//! codes, see [`unpack_scales`]), `d: f16`. Value `y = d·(code_j − 32)·q` with
//! `q = low2 + 4·hbit − 4 ∈ −4..=3`, sub-block `j = i / 16`.

use super::BlockFormat;
use super::k_common::{quantize_symmetric, read_f16};

/// Q3_K block format.
pub struct Q3K;

const BYTES: usize = 110;

/// The sixteen signed sub-block scales (`code − 32`, in −32..=31).
///
/// Code `j` has its low 4 bits in byte `j % 8` (low nibble for `j < 8`, high nibble after)
/// and its top 2 bits in byte `8 + j % 4` at bit position `2·(j / 4)`.
fn unpack_scales(s: &[u8]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let lo = (s[j % 8] >> (4 * (j / 8))) & 0x0F;
        let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        ((lo | (hi << 4)) as i8) - 32
    })
}

/// Inverse of [`unpack_scales`] (inputs clamped to −32..=31).
fn pack_scales(sc: &[i8; 16]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for (j, &v) in sc.iter().enumerate() {
        let code = (i32::from(v).clamp(-32, 31) + 32) as u8;
        s[j % 8] |= (code & 0x0F) << (4 * (j / 8));
        s[8 + j % 4] |= (code >> 4) << (2 * (j / 4));
    }
    s
}

/// Call `f(i, y_i)` for every element of the block, in element order.
fn decode(b: &[u8; BYTES], mut f: impl FnMut(usize, f32)) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let scales = unpack_scales(&b[96..108]);
    let d = read_f16([b[108], b[109]]);
    for h in 0..2 {
        for k in 0..4 {
            for g in 0..2 {
                let i0 = 128 * h + 32 * k + 16 * g;
                let dl = d * f32::from(scales[i0 / 16]);
                for l in 16 * g..16 * g + 16 {
                    let i = 128 * h + 32 * k + l;
                    let low = (qs[32 * h + l] >> (2 * k)) & 3;
                    let hbit = (hmask[l] >> (i / 32)) & 1;
                    let q = (low | (hbit << 2)) as i8 - 4;
                    f(i, dl * f32::from(q));
                }
            }
        }
    }
}

impl BlockFormat for Q3K {
    const BLOCK_ELEMS: usize = 256;
    const BLOCK_BYTES: usize = BYTES;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let (Ok(b), true) = (<&[u8; BYTES]>::try_from(block), out.len() == 256) else {
            out.fill(f32::NAN);
            return;
        };
        decode(b, |i, y| out[i] = y);
    }

    fn quantize_block(x: &[f32], out: &mut [u8]) {
        if x.len() != 256 || out.len() != BYTES {
            out.fill(0);
            return;
        }
        let blk = quantize_symmetric(x, 16, 4, 32);
        out.fill(0);
        for (i, &q) in blk.q.iter().enumerate() {
            let u = (i32::from(q).clamp(-4, 3) + 4) as u8;
            let (h, k, l) = (i / 128, (i / 32) % 4, i % 32);
            out[32 + 32 * h + l] |= (u & 3) << (2 * k);
            out[l] |= (u >> 2) << (i / 32);
        }
        out[96..108].copy_from_slice(&pack_scales(&blk.sc));
        out[108..110].copy_from_slice(&blk.d);
    }

    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        let (Ok(b), true) = (<&[u8; BYTES]>::try_from(block), x.len() == 256) else {
            return f32::NAN;
        };
        let mut acc = 0f32;
        decode(b, |i, y| acc += y * x[i]);
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::super::k_common::tests_support::*;
    use super::*;

    #[test]
    fn scale_packing_round_trips_and_matches_hand_layout() {
        let sc: [i8; 16] = std::array::from_fn(|j| (j as i8) * 4 - 32);
        assert_eq!(unpack_scales(&pack_scales(&sc)), sc);
        // Code 13 = 0b10_1101: low nibble 0xD in byte 5's high nibble, top bits 0b10 in
        // byte 9 at bits 6..8. Every other code is 0 (scale −32).
        let mut s = [0u8; 12];
        s[5] = 0xD0;
        s[9] = 0b10 << 6;
        let u = unpack_scales(&s);
        assert_eq!(u[13], 0b10_1101 - 32);
        assert!(u.iter().enumerate().all(|(j, &v)| j == 13 || v == -32));
    }

    #[test]
    fn hand_built_block_decodes_exactly() {
        let mut b = [0u8; BYTES];
        // Element i gets stored code u = i % 8, i.e. q = u − 4.
        for i in 0..256 {
            let u = (i % 8) as u8;
            let (h, k, l) = (i / 128, (i / 32) % 4, i % 32);
            b[32 + 32 * h + l] |= (u & 3) << (2 * k);
            b[l] |= (u >> 2) << (i / 32);
        }
        let sc: [i8; 16] = std::array::from_fn(|j| j as i8 - 8);
        b[96..108].copy_from_slice(&pack_scales(&sc));
        b[108..110].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        let mut y = [0f32; 256];
        Q3K::dequantize_block(&b, &mut y);
        for (i, &got) in y.iter().enumerate() {
            let want = 0.5 * f32::from(sc[i / 16]) * ((i % 8) as f32 - 4.0);
            assert_eq!(got, want, "element {i}");
        }
        // Element 0: 0.5·(−8)·(−4) = 16; element 255: 0.5·7·3 = 10.5.
        assert_eq!(y[0], 16.0);
        assert_eq!(y[255], 10.5);
    }

    #[test]
    fn dot_equals_dequantize_then_dot() {
        check_dot::<Q3K>(4);
    }

    #[test]
    fn quantize_special_blocks() {
        check_special_blocks::<Q3K>(0.02);
    }

    #[test]
    fn quantize_error_is_small_for_gaussian_data() {
        // GGML's reference quantizer gives 0.151 relative RMSE on Gaussian blocks
        // (measured offline against its C code); ours must not be worse.
        let r = relative_rmse::<Q3K>(7, 64);
        eprintln!("Q3K relative rmse on N(0,1): {r:.5}");
        assert!(r < 0.155, "relative rmse {r}");
    }
}
