//! Quant formats: one file per block format, each giving its block layout, dequantize-to-f32,
//! a reference dot product against f32 activations, and quantize-from-f32.
//!
//! This module owns the [`QuantFormat`] enum (with GGML type ids and block geometry) and the
//! slice-level entry points [`dequantize`], [`quantize`] and [`dot`], which split a row into
//! blocks and dispatch to the per-format [`BlockFormat`] implementation. A `match` on
//! [`QuantFormat`] shows every place a new format must be filled in.
//!
//! Everything here is the CPU reference: clear, fixed summation order, no SIMD tricks. GPU
//! kernels are checked against it.

mod bf16;
mod f16;
mod f32;
mod iq4_nl;
mod iq4_xs;
mod k_common;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8_0;

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod roundtrip_tests;

pub use bf16::Bf16;
pub use f16::F16;
pub use f32::F32;
pub use iq4_nl::Iq4Nl;
pub use iq4_xs::Iq4Xs;
pub use q2_k::Q2K;
pub use q3_k::Q3K;
pub use q4_0::Q4_0;
pub use q4_1::Q4_1;
pub use q4_k::Q4K;
pub use q5_0::Q5_0;
pub use q5_1::Q5_1;
pub use q5_k::Q5K;
pub use q6_k::Q6K;
pub use q8_0::Q8_0;

use serde::Serialize;

/// Elements in one super-block of the K-quants and IQ4_XS.
pub const QK_K: usize = 256;

/// A block quantization format: `BLOCK_ELEMS` values stored in `BLOCK_BYTES` bytes.
///
/// Byte layouts are GGML's (little-endian), so GGUF tensor data is used as it is.
pub trait BlockFormat {
    /// Number of values one block holds.
    const BLOCK_ELEMS: usize;
    /// Number of bytes one block occupies.
    const BLOCK_BYTES: usize;
    /// Decode one block: `block.len() == BLOCK_BYTES`, `out.len() == BLOCK_ELEMS`.
    fn dequantize_block(block: &[u8], out: &mut [f32]);
    /// Encode one block: `x.len() == BLOCK_ELEMS`, `out.len() == BLOCK_BYTES`.
    fn quantize_block(x: &[f32], out: &mut [u8]);
    /// Reference dot product of one block against `x` (`x.len() == BLOCK_ELEMS`),
    /// accumulated in f32 in element order.
    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        let mut tmp = [0f32; QK_K];
        let tmp = &mut tmp[..Self::BLOCK_ELEMS];
        Self::dequantize_block(block, tmp);
        let mut acc = 0f32;
        for (a, b) in tmp.iter().zip(x) {
            acc += a * b;
        }
        acc
    }
}

/// The tensor element formats Assay reads and computes with.
///
/// Discriminants are not used; GGML type ids go through [`QuantFormat::from_ggml_type`] and
/// [`QuantFormat::ggml_type`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[allow(non_camel_case_types)]
pub enum QuantFormat {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
}

/// Errors from the slice-level quant entry points.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantError {
    #[error("{format}: {elems} values is not a multiple of the block size {block}")]
    NotBlockMultiple {
        format: QuantFormat,
        elems: usize,
        block: usize,
    },
    #[error("{format}: expected {expected} bytes for {elems} values, got {got}")]
    ByteLength {
        format: QuantFormat,
        elems: usize,
        expected: usize,
        got: usize,
    },
    #[error("length mismatch: {a} vs {b}")]
    LengthMismatch { a: usize, b: usize },
}

impl std::fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Names of GGML type ids that exist but Assay does not implement (for error messages).
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        6 => "Q5_0",
        7 => "Q5_1",
        8 => "Q8_0",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        30 => "BF16",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}

impl QuantFormat {
    /// Every format, in declaration order.
    pub const ALL: [QuantFormat; 15] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::IQ4_NL,
        Self::IQ4_XS,
    ];

    /// The GGML type id of this format.
    pub fn ggml_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::IQ4_NL => 20,
            Self::IQ4_XS => 23,
            Self::BF16 => 30,
        }
    }

    /// The format for a GGML type id, if Assay implements it.
    pub fn from_ggml_type(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.ggml_type() == id)
    }

    /// The canonical (GGML) name, e.g. `Q4_K`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::IQ4_NL => "IQ4_NL",
            Self::IQ4_XS => "IQ4_XS",
        }
    }

    /// Parse a name as printed by [`QuantFormat::name`] (case-insensitive).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
    }

    /// (values per block, bytes per block).
    pub fn block_geometry(self) -> (usize, usize) {
        fn g<B: BlockFormat>() -> (usize, usize) {
            (B::BLOCK_ELEMS, B::BLOCK_BYTES)
        }
        match self {
            Self::F32 => g::<F32>(),
            Self::F16 => g::<F16>(),
            Self::BF16 => g::<Bf16>(),
            Self::Q4_0 => g::<Q4_0>(),
            Self::Q4_1 => g::<Q4_1>(),
            Self::Q5_0 => g::<Q5_0>(),
            Self::Q5_1 => g::<Q5_1>(),
            Self::Q8_0 => g::<Q8_0>(),
            Self::Q2_K => g::<Q2K>(),
            Self::Q3_K => g::<Q3K>(),
            Self::Q4_K => g::<Q4K>(),
            Self::Q5_K => g::<Q5K>(),
            Self::Q6_K => g::<Q6K>(),
            Self::IQ4_NL => g::<Iq4Nl>(),
            Self::IQ4_XS => g::<Iq4Xs>(),
        }
    }

    /// Bytes needed for `elems` values, or an error when `elems` is not a block multiple.
    pub fn bytes_for(self, elems: usize) -> Result<usize, QuantError> {
        let (be, bb) = self.block_geometry();
        if elems % be != 0 {
            return Err(QuantError::NotBlockMultiple {
                format: self,
                elems,
                block: be,
            });
        }
        (elems / be)
            .checked_mul(bb)
            .ok_or(QuantError::NotBlockMultiple {
                format: self,
                elems,
                block: be,
            })
    }

    /// Bits per weight, including scales.
    pub fn bits_per_weight(self) -> f64 {
        let (be, bb) = self.block_geometry();
        (bb * 8) as f64 / be as f64
    }
}

fn check<B: BlockFormat>(
    format: QuantFormat,
    elems: usize,
    bytes: usize,
) -> Result<usize, QuantError> {
    if elems % B::BLOCK_ELEMS != 0 {
        return Err(QuantError::NotBlockMultiple {
            format,
            elems,
            block: B::BLOCK_ELEMS,
        });
    }
    let nblocks = elems / B::BLOCK_ELEMS;
    let expected = nblocks * B::BLOCK_BYTES;
    if bytes != expected {
        return Err(QuantError::ByteLength {
            format,
            elems,
            expected,
            got: bytes,
        });
    }
    Ok(nblocks)
}

fn dequantize_as<B: BlockFormat>(
    format: QuantFormat,
    data: &[u8],
    out: &mut [f32],
) -> Result<(), QuantError> {
    check::<B>(format, out.len(), data.len())?;
    for (blk, o) in data
        .chunks_exact(B::BLOCK_BYTES)
        .zip(out.chunks_exact_mut(B::BLOCK_ELEMS))
    {
        B::dequantize_block(blk, o);
    }
    Ok(())
}

fn quantize_as<B: BlockFormat>(
    format: QuantFormat,
    x: &[f32],
    out: &mut [u8],
) -> Result<(), QuantError> {
    check::<B>(format, x.len(), out.len())?;
    for (xs, o) in x
        .chunks_exact(B::BLOCK_ELEMS)
        .zip(out.chunks_exact_mut(B::BLOCK_BYTES))
    {
        B::quantize_block(xs, o);
    }
    Ok(())
}

fn dot_as<B: BlockFormat>(format: QuantFormat, data: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    check::<B>(format, x.len(), data.len())?;
    let mut acc = 0f32;
    for (blk, xs) in data
        .chunks_exact(B::BLOCK_BYTES)
        .zip(x.chunks_exact(B::BLOCK_ELEMS))
    {
        acc += B::dot_block(blk, xs);
    }
    Ok(acc)
}

macro_rules! dispatch {
    ($fmt:expr, $func:ident, $($arg:expr),*) => {
        match $fmt {
            QuantFormat::F32 => $func::<F32>($fmt, $($arg),*),
            QuantFormat::F16 => $func::<F16>($fmt, $($arg),*),
            QuantFormat::BF16 => $func::<Bf16>($fmt, $($arg),*),
            QuantFormat::Q4_0 => $func::<Q4_0>($fmt, $($arg),*),
            QuantFormat::Q4_1 => $func::<Q4_1>($fmt, $($arg),*),
            QuantFormat::Q5_0 => $func::<Q5_0>($fmt, $($arg),*),
            QuantFormat::Q5_1 => $func::<Q5_1>($fmt, $($arg),*),
            QuantFormat::Q8_0 => $func::<Q8_0>($fmt, $($arg),*),
            QuantFormat::Q2_K => $func::<Q2K>($fmt, $($arg),*),
            QuantFormat::Q3_K => $func::<Q3K>($fmt, $($arg),*),
            QuantFormat::Q4_K => $func::<Q4K>($fmt, $($arg),*),
            QuantFormat::Q5_K => $func::<Q5K>($fmt, $($arg),*),
            QuantFormat::Q6_K => $func::<Q6K>($fmt, $($arg),*),
            QuantFormat::IQ4_NL => $func::<Iq4Nl>($fmt, $($arg),*),
            QuantFormat::IQ4_XS => $func::<Iq4Xs>($fmt, $($arg),*),
        }
    };
}

/// Dequantize `data` (whole blocks of `format`) into `out` (one f32 per value).
pub fn dequantize(format: QuantFormat, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dispatch!(format, dequantize_as, data, out)
}

/// Quantize `x` into `out`, which must be exactly `format.bytes_for(x.len())` bytes.
pub fn quantize(format: QuantFormat, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    dispatch!(format, quantize_as, x, out)
}

/// Quantize `x` into a freshly allocated byte vector.
pub fn quantize_to_vec(format: QuantFormat, x: &[f32]) -> Result<Vec<u8>, QuantError> {
    let mut out = vec![0u8; format.bytes_for(x.len())?];
    quantize(format, x, &mut out)?;
    Ok(out)
}

/// Reference dot product of quantized `data` with f32 activations `x`: per-block dots
/// accumulated in block order.
pub fn dot(format: QuantFormat, data: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    dispatch!(format, dot_as, data, x)
}
