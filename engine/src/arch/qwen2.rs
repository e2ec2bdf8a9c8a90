//! `qwen2`: Qwen2 / Qwen2.5. The Llama decoder with biases on the Q, K and V projections
//! (picked up from the file by the attention block) and NeoX RoPE.

use crate::model_file::GgufHeader;

use super::ArchError;
use super::blocks::{DecoderStyle, pre_norm_decoder};
use super::config::Hparams;
use super::program::{Program, RopeStyle};

/// Build the program of a `qwen2` file.
pub fn build(header: &GgufHeader) -> Result<Program, ArchError> {
    let hp = Hparams::read(header, "qwen2")?;
    for il in 0..hp.n_layers {
        for t in ["attn_q", "attn_k", "attn_v"] {
            let name = format!("blk.{il}.{t}.bias");
            if header.tensor(&name).is_none() {
                return Err(ArchError::MissingTensor(name));
            }
        }
    }
    pre_norm_decoder(
        header,
        &hp,
        &DecoderStyle {
            rope_style: RopeStyle::Neox,
            qk_norm: false,
        },
    )
}
