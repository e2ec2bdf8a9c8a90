//! `llama`: Llama 2/3, Mistral-shaped and SmolLM2 checkpoints. Pre-norm decoder, SiLU gated
//! MLP, adjacent-pair RoPE (the GGUF converter permutes Q/K rows for it), optional
//! `rope_freqs` (Llama 3.1), output tied to the embedding when `output.weight` is absent.

use crate::model_file::GgufHeader;

use super::ArchError;
use super::blocks::{DecoderStyle, pre_norm_decoder};
use super::config::Hparams;
use super::program::{Program, RopeStyle};

/// Build the program of a `llama` file.
pub fn build(header: &GgufHeader) -> Result<Program, ArchError> {
    let hp = Hparams::read(header, "llama")?;
    pre_norm_decoder(
        header,
        &hp,
        &DecoderStyle {
            rope_style: RopeStyle::Adjacent,
            qk_norm: false,
        },
    )
}
