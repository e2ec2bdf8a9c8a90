//! Wrapper of `mask.cu`: a grammar's token mask applied to a row of logits on the device.
//!
//! Owns [`MaskBuffer`] (the device copy of one mask: `ceil(n / 32)` `u32` words in
//! llguidance's layout, bit `i % 32` of word `i / 32` set = token `i` allowed, as
//! [`crate::api::constrain::TokenMask::words`] gives them) and [`apply_mask`], which queues the kernel
//! that sets every disallowed logit to `-inf` in place. The buffer is allocated once and its
//! address never changes, so a captured CUDA graph can hold a mask node: the host rewrites
//! the words (one host-to-device copy of `n / 8` bytes, queued on the stream) before each
//! launch or replay.

use super::{Arg, cfg1, int, launch, need, rd, wr};
use crate::cuda::{CudaError, Gpu, shape_err};
use cudarc::driver::{CudaSlice, DevicePtrMut};

/// Threads per block of `mask_logits` (its `__launch_bounds__`).
const MASK_THREADS: u32 = 256;

/// The device copy of one token mask for rows of `n` logits.
pub struct MaskBuffer {
    n: usize,
    words: CudaSlice<u32>,
    host: Vec<u32>,
}

impl MaskBuffer {
    /// A buffer for rows of `n` logits (`ceil(n / 32)` words, all zero until written).
    pub fn new(gpu: &Gpu, n: usize) -> Result<MaskBuffer, CudaError> {
        int("mask", "n", n)?;
        let nw = n.div_ceil(32).max(1);
        Ok(MaskBuffer {
            n,
            words: gpu.zeros(nw)?,
            host: vec![0; nw],
        })
    }

    /// Row width the buffer was made for.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Words the buffer holds (`ceil(n / 32)`).
    pub fn n_words(&self) -> usize {
        self.host.len()
    }

    /// Queue the upload of `words` (bit set = allowed). Fewer words than
    /// [`MaskBuffer::n_words`] leave the tokens past them disallowed; more words than that is
    /// an error unless the extra words are zero (bits past `n` are never read).
    pub fn write(&mut self, gpu: &Gpu, words: &[u32]) -> Result<(), CudaError> {
        let nw = self.host.len();
        if words.len() > nw && words[nw..].iter().any(|&w| w != 0) {
            return Err(shape_err(
                "mask",
                format!(
                    "{} mask words for a row of {} logits ({nw} words) allow tokens past the row",
                    words.len(),
                    self.n
                ),
            ));
        }
        let k = words.len().min(nw);
        self.host[..k].copy_from_slice(&words[..k]);
        self.host[k..].fill(0);
        gpu.stream().memcpy_htod(&self.host, &mut self.words)?;
        Ok(())
    }

    /// The words last written (host copy).
    pub fn words(&self) -> &[u32] {
        &self.host
    }
}

/// Queue `x[i] = -inf` for every token `i < n` that `mask` does not allow (in place).
pub fn apply_mask(
    gpu: &Gpu,
    x: &mut dyn DevicePtrMut<f32>,
    mask: &MaskBuffer,
    n: usize,
) -> Result<(), CudaError> {
    const OP: &str = "mask";
    need(OP, "x", x.len(), n)?;
    if n > mask.n {
        return Err(shape_err(
            OP,
            format!("mask made for {} logits, the row has {n}", mask.n),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    let blocks = int(OP, "blocks", n.div_ceil(MASK_THREADS as usize))? as u32;
    let (xp, mp) = (wr(gpu, x), rd(gpu, &mask.words));
    launch(
        gpu,
        "mask_logits",
        cfg1(blocks, MASK_THREADS),
        &[Arg::Ptr(xp), Arg::Ptr(mp), Arg::I32(int(OP, "n", n)?)],
    )
}
