//! `qwen3`: Qwen3 dense. The Llama decoder with per-head RMS norm of Q and K before RoPE
//! (QK-norm), NeoX RoPE, and a head size that need not be `n_embd / n_heads`.

use crate::model_file::GgufHeader;

use super::ArchError;
use super::blocks::{DecoderStyle, pre_norm_decoder};
use super::config::Hparams;
use super::program::{Program, RopeStyle};

/// Build the program of a `qwen3` file.
pub fn build(header: &GgufHeader) -> Result<Program, ArchError> {
    let hp = Hparams::read(header, "qwen3")?;
    pre_norm_decoder(
        header,
        &hp,
        &DecoderStyle {
            rope_style: RopeStyle::Neox,
            qk_norm: true,
        },
    )
}
