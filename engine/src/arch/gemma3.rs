//! `gemma3`: Gemma 3 text models (270M .. 27B).
//!
//! Differences from the pre-norm decoder, each checked against llama.cpp's reading of the
//! same GGUF files:
//! - the embedding is scaled by `sqrt(n_embd)` (f32);
//! - every sub-block has a pre-norm *and* a post-norm (`post_attention_norm`,
//!   `post_ffw_norm`) before its residual add;
//! - Gemma's RMS norm multiplies by `1 + w`; llama.cpp's converter already added the 1 to
//!   every `*norm.weight` tensor when writing the GGUF, so the stored weights are used as
//!   they are (a plain RMS norm here);
//! - QK-norm, NeoX RoPE, GeLU (tanh approximation) gated MLP;
//! - interleaved sliding-window and global layers: `attention.sliding_window_pattern` as a
//!   per-layer bool array, or as a period `n` (layer `il` is local when
//!   `il % n < n - 1`), default 6 (every 6th layer global); no `attention.sliding_window`
//!   (or 0) means every layer is global;
//! - local layers use RoPE base `rope.freq_base_swa` (default 10000) and no position
//!   scaling; global layers use `rope.freq_base` and the file's linear scaling;
//! - queries are scaled by `1/sqrt(head_dim)`, except for the 62-layer (27B) model, which
//!   uses `1/sqrt(n_embd / n_heads)` (Gemma's `query_pre_attn_scalar`);
//! - the output is tied to the embedding; final logit soft-capping when the file sets
//!   `final_logit_softcapping`.

use crate::model_file::GgufHeader;

use super::ArchError;
use super::blocks::{AttnStyle, Builder, attention, gated_mlp, output_head, rms_norm, vocab_size};
use super::config::{Hparams, Meta};
use super::program::{Activation, ModelShape, Op, Program, RopeStyle};

/// Default period of the local/global layer pattern.
const DEFAULT_SWA_PERIOD: usize = 6;
/// Default RoPE base of the local (sliding-window) layers.
const DEFAULT_SWA_ROPE_BASE: f32 = 10000.0;

/// Which layers use the sliding window.
pub fn sliding_layers(header: &GgufHeader, n_layers: usize) -> Result<Vec<bool>, ArchError> {
    let m = Meta {
        header,
        arch: "gemma3",
    };
    let window = m.opt_usize("attention.sliding_window")?.unwrap_or(0);
    if window == 0 {
        return Ok(vec![false; n_layers]);
    }
    if let Some(list) = m.opt_bool_array("attention.sliding_window_pattern")? {
        if list.len() < n_layers {
            return Err(ArchError::BadMetadata {
                key: "gemma3.attention.sliding_window_pattern".into(),
                why: format!("{} entries for {n_layers} layers", list.len()),
            });
        }
        return Ok(list[..n_layers].to_vec());
    }
    let n = m
        .opt_usize("attention.sliding_window_pattern")?
        .unwrap_or(DEFAULT_SWA_PERIOD);
    Ok((0..n_layers).map(|il| n == 0 || il % n < n - 1).collect())
}

/// Build the program of a `gemma3` file.
pub fn build(header: &GgufHeader) -> Result<Program, ArchError> {
    let hp = Hparams::read(header, "gemma3")?;
    let m = Meta {
        header,
        arch: "gemma3",
    };
    let window = m.opt_usize("attention.sliding_window")?.filter(|&w| w > 0);
    let sliding = sliding_layers(header, hp.n_layers)?;
    let swa_base = m
        .opt_f32("rope.freq_base_swa")?
        .unwrap_or(DEFAULT_SWA_ROPE_BASE);
    let softcap = m.opt_f32("final_logit_softcapping")?.filter(|&c| c > 0.0);
    let scale = if hp.n_layers == 62 {
        1.0 / ((hp.n_embd / hp.n_heads) as f32).sqrt()
    } else {
        1.0 / (hp.head_dim as f32).sqrt()
    };

    let mut b = Builder::new(header);
    let n_vocab = vocab_size(header, hp.n_embd)?;
    let table = b.weight("token_embd.weight", n_vocab, hp.n_embd)?;
    let hidden = b.buf("hidden", hp.n_embd)?;
    b.op(Op::Embed {
        table,
        out: hidden,
        scale: (hp.n_embd as f32).sqrt(),
    });
    let normed = b.buf("normed", hp.n_embd)?;
    for (il, &local) in sliding.iter().enumerate() {
        let style = AttnStyle {
            rope_style: RopeStyle::Neox,
            qk_norm: true,
            rope_base: if local { swa_base } else { hp.rope_base },
            rope_freq_scale: if local { 1.0 } else { hp.rope_freq_scale },
            window: if local { window } else { None },
            scale,
            softcap: None,
        };
        let eps = hp.rms_eps;
        rms_norm(
            &mut b,
            hidden,
            &format!("blk.{il}.attn_norm.weight"),
            hp.n_embd,
            eps,
            normed,
        )?;
        let a = attention(&mut b, &hp, il, normed, &style)?;
        rms_norm(
            &mut b,
            a,
            &format!("blk.{il}.post_attention_norm.weight"),
            hp.n_embd,
            eps,
            a,
        )?;
        b.op(Op::Add {
            a: hidden,
            b: a,
            out: hidden,
        });
        rms_norm(
            &mut b,
            hidden,
            &format!("blk.{il}.ffn_norm.weight"),
            hp.n_embd,
            eps,
            normed,
        )?;
        let f = gated_mlp(&mut b, &hp, il, normed, Activation::GeluTanh)?;
        rms_norm(
            &mut b,
            f,
            &format!("blk.{il}.post_ffw_norm.weight"),
            hp.n_embd,
            eps,
            f,
        )?;
        b.op(Op::Add {
            a: hidden,
            b: f,
            out: hidden,
        });
    }
    let logits = output_head(&mut b, &hp, n_vocab, hidden, softcap)?;
    let shape = ModelShape {
        architecture: hp.arch.clone(),
        n_vocab,
        n_embd: hp.n_embd,
        n_layers: hp.n_layers,
        n_ctx_train: hp.n_ctx_train,
    };
    b.finish(shape, hidden, logits)
}
