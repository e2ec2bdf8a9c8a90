//! Shared building blocks the families are written against: the [`Builder`] that resolves
//! weight names against the file (checking shapes) and declares buffers, and the blocks
//! themselves — RMS norm, the attention block (QKV projections, optional bias, optional
//! QK-norm, RoPE, attention, output projection), the gated MLP, and the pre-norm decoder
//! layer stack that Llama, Qwen2 and Qwen3 share.

use std::collections::HashMap;

use crate::model_file::GgufHeader;

use super::ArchError;
use super::config::Hparams;
use super::program::{
    Activation, AttentionSpec, BufId, BufSpec, KvLayerSpec, ModelShape, Op, Program, RopeSpec,
    RopeStyle, WeightId, WeightSpec,
};

/// Builds a [`Program`]: weights are looked up in the file and shape-checked as they are
/// named; buffers are declared once by name and reused by every layer.
pub struct Builder<'a> {
    header: &'a GgufHeader,
    weights: Vec<WeightSpec>,
    weight_ids: HashMap<String, WeightId>,
    buffers: Vec<BufSpec>,
    kv_layers: Vec<KvLayerSpec>,
    body: Vec<Op>,
    head: Vec<Op>,
    in_head: bool,
}

impl<'a> Builder<'a> {
    pub fn new(header: &'a GgufHeader) -> Self {
        Self {
            header,
            weights: Vec::new(),
            weight_ids: HashMap::new(),
            buffers: Vec::new(),
            kv_layers: Vec::new(),
            body: Vec::new(),
            head: Vec::new(),
            in_head: false,
        }
    }

    /// Whether the file has a tensor named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.header.tensor(name).is_some()
    }

    /// The weight `name`, which must be a `rows x cols` matrix (GGUF dims `[cols, rows]`)
    /// or, with `rows == 1`, a vector of `cols` values.
    pub fn weight(&mut self, name: &str, rows: usize, cols: usize) -> Result<WeightId, ArchError> {
        if let Some(&id) = self.weight_ids.get(name) {
            let w = &self.weights[id.0 as usize];
            if (w.rows, w.cols) != (rows, cols) {
                return Err(ArchError::Shape {
                    name: name.to_owned(),
                    expected: vec![cols as u64, rows as u64],
                    found: vec![w.cols as u64, w.rows as u64],
                });
            }
            return Ok(id);
        }
        let t = self
            .header
            .tensor(name)
            .ok_or_else(|| ArchError::MissingTensor(name.to_owned()))?;
        let expected: Vec<u64> = if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        // Trailing 1-sized dims are the same shape.
        let mut found = t.dims.clone();
        while found.len() > expected.len() && found.last() == Some(&1) {
            found.pop();
        }
        if found != expected {
            return Err(ArchError::Shape {
                name: name.to_owned(),
                expected,
                found: t.dims.clone(),
            });
        }
        let (block, _) = t.format.block_geometry();
        if cols % block != 0 {
            return Err(ArchError::Shape {
                name: name.to_owned(),
                expected,
                found: t.dims.clone(),
            });
        }
        let id = WeightId(self.weights.len() as u32);
        self.weights.push(WeightSpec {
            name: name.to_owned(),
            rows,
            cols,
            format: t.format,
        });
        self.weight_ids.insert(name.to_owned(), id);
        Ok(id)
    }

    /// Like [`Builder::weight`], but `None` when the file has no such tensor.
    pub fn opt_weight(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<WeightId>, ArchError> {
        if self.has(name) {
            self.weight(name, rows, cols).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The buffer `name` (declared on first use); every use must agree on the width.
    pub fn buf(&mut self, name: &'static str, width: usize) -> Result<BufId, ArchError> {
        if let Some(i) = self.buffers.iter().position(|b| b.name == name) {
            if self.buffers[i].width != width {
                return Err(ArchError::Internal(format!(
                    "buffer {name} declared with widths {} and {width}",
                    self.buffers[i].width
                )));
            }
            return Ok(BufId(i as u16));
        }
        let id = BufId(self.buffers.len() as u16);
        self.buffers.push(BufSpec { name, width });
        Ok(id)
    }

    /// Append an op (to the body, or to the head after [`Builder::start_head`]).
    pub fn op(&mut self, op: Op) {
        if self.in_head {
            self.head.push(op)
        } else {
            self.body.push(op)
        }
    }

    /// Declare a layer's KV cache; returns its index.
    pub fn kv_layer(&mut self, spec: KvLayerSpec) -> usize {
        self.kv_layers.push(spec);
        self.kv_layers.len() - 1
    }

    /// Ops appended from now on run only on the rows whose logits are wanted.
    pub fn start_head(&mut self) {
        self.in_head = true;
    }

    /// Finish: check the program is consistent (every id in range, widths agree).
    pub fn finish(
        self,
        shape: ModelShape,
        hidden: BufId,
        logits: BufId,
    ) -> Result<Program, ArchError> {
        let p = Program {
            shape,
            weights: self.weights,
            buffers: self.buffers,
            kv_layers: self.kv_layers,
            body: self.body,
            head: self.head,
            hidden,
            logits,
        };
        super::validate::validate(&p)?;
        Ok(p)
    }
}

/// `out = rmsnorm(x) * weight(name)` over whole rows of width `width`.
pub fn rms_norm(
    b: &mut Builder<'_>,
    x: BufId,
    weight: &str,
    width: usize,
    eps: f32,
    out: BufId,
) -> Result<(), ArchError> {
    let w = b.weight(weight, 1, width)?;
    b.op(Op::RmsNorm {
        x,
        weight: w,
        out,
        group: width,
        eps,
    });
    Ok(())
}

/// What varies in the attention block between families.
#[derive(Clone, Debug)]
pub struct AttnStyle {
    pub rope_style: RopeStyle,
    /// Per-head RMS norm of Q and K before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    pub rope_base: f32,
    pub rope_freq_scale: f32,
    pub window: Option<usize>,
    pub scale: f32,
    pub softcap: Option<f32>,
}

/// The attention block of layer `il`: reads `x` (normed input), leaves the projected
/// attention output in the returned buffer (`attn_out`, `n_embd` wide). QKV biases are
/// used when the file has them.
pub fn attention(
    b: &mut Builder<'_>,
    hp: &Hparams,
    il: usize,
    x: BufId,
    style: &AttnStyle,
) -> Result<BufId, ArchError> {
    let (nh, nkv, hd) = (hp.n_heads, hp.n_kv_heads, hp.head_dim);
    let q = b.buf("q", nh * hd)?;
    let k = b.buf("k", nkv * hd)?;
    let v = b.buf("v", nkv * hd)?;
    for (name, out, width) in [
        ("attn_q", q, nh * hd),
        ("attn_k", k, nkv * hd),
        ("attn_v", v, nkv * hd),
    ] {
        let weight = b.weight(&format!("blk.{il}.{name}.weight"), width, hp.n_embd)?;
        let bias = b.opt_weight(&format!("blk.{il}.{name}.bias"), 1, width)?;
        b.op(Op::MatMul {
            x,
            weight,
            bias,
            out,
        });
    }
    if style.qk_norm {
        let qn = b.weight(&format!("blk.{il}.attn_q_norm.weight"), 1, hd)?;
        let kn = b.weight(&format!("blk.{il}.attn_k_norm.weight"), 1, hd)?;
        b.op(Op::RmsNorm {
            x: q,
            weight: qn,
            out: q,
            group: hd,
            eps: hp.rms_eps,
        });
        b.op(Op::RmsNorm {
            x: k,
            weight: kn,
            out: k,
            group: hd,
            eps: hp.rms_eps,
        });
    }
    let freq_factors = b.opt_weight("rope_freqs.weight", 1, hp.rot_dims / 2)?;
    for (buf, heads) in [(q, nh), (k, nkv)] {
        let rope = RopeSpec {
            style: style.rope_style,
            n_heads: heads,
            head_dim: hd,
            rot_dims: hp.rot_dims,
            base: style.rope_base,
            freq_scale: style.rope_freq_scale,
            freq_factors,
        };
        b.op(Op::Rope { x: buf, rope });
    }
    let kv_layer = b.kv_layer(KvLayerSpec {
        n_kv_heads: nkv,
        head_dim: hd,
        window: style.window,
    });
    let attn = b.buf("attn", nh * hd)?;
    b.op(Op::Attention(AttentionSpec {
        q,
        k,
        v,
        out: attn,
        kv_layer,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        scale: style.scale,
        window: style.window,
        softcap: style.softcap,
    }));
    let out = b.buf("attn_out", hp.n_embd)?;
    let wo = b.weight(&format!("blk.{il}.attn_output.weight"), hp.n_embd, nh * hd)?;
    let wo_b = b.opt_weight(&format!("blk.{il}.attn_output.bias"), 1, hp.n_embd)?;
    b.op(Op::MatMul {
        x: attn,
        weight: wo,
        bias: wo_b,
        out,
    });
    Ok(out)
}

/// The gated MLP of layer `il`: `down(act(gate x) * up x)`, result in `ffn_out`.
pub fn gated_mlp(
    b: &mut Builder<'_>,
    hp: &Hparams,
    il: usize,
    x: BufId,
    act: Activation,
) -> Result<BufId, ArchError> {
    let gate = b.buf("ffn_gate", hp.n_ff)?;
    let up = b.buf("ffn_up", hp.n_ff)?;
    let wg = b.weight(&format!("blk.{il}.ffn_gate.weight"), hp.n_ff, hp.n_embd)?;
    let wu = b.weight(&format!("blk.{il}.ffn_up.weight"), hp.n_ff, hp.n_embd)?;
    b.op(Op::MatMul {
        x,
        weight: wg,
        bias: None,
        out: gate,
    });
    b.op(Op::MatMul {
        x,
        weight: wu,
        bias: None,
        out: up,
    });
    b.op(Op::GatedAct {
        gate,
        up,
        out: gate,
        act,
    });
    let out = b.buf("ffn_out", hp.n_embd)?;
    let wd = b.weight(&format!("blk.{il}.ffn_down.weight"), hp.n_embd, hp.n_ff)?;
    b.op(Op::MatMul {
        x: gate,
        weight: wd,
        bias: None,
        out,
    });
    Ok(out)
}

/// Number of vocabulary rows of `token_embd.weight` (its second GGUF dimension).
pub fn vocab_size(header: &GgufHeader, n_embd: usize) -> Result<usize, ArchError> {
    let name = "token_embd.weight";
    let t = header
        .tensor(name)
        .ok_or_else(|| ArchError::MissingTensor(name.to_owned()))?;
    match t.dims.as_slice() {
        [c, v] if *c as usize == n_embd && *v > 0 => Ok(*v as usize),
        _ => Err(ArchError::Shape {
            name: name.to_owned(),
            expected: vec![n_embd as u64, 0],
            found: t.dims.clone(),
        }),
    }
}

/// The output head shared by every family: final norm, output projection (tied to the
/// token embedding when the file has no `output.weight`), optional logit soft-capping.
pub fn output_head(
    b: &mut Builder<'_>,
    hp: &Hparams,
    n_vocab: usize,
    hidden: BufId,
    softcap: Option<f32>,
) -> Result<BufId, ArchError> {
    b.start_head();
    let normed = b.buf("out_norm", hp.n_embd)?;
    rms_norm(
        b,
        hidden,
        "output_norm.weight",
        hp.n_embd,
        hp.rms_eps,
        normed,
    )?;
    let w = match b.opt_weight("output.weight", n_vocab, hp.n_embd)? {
        Some(w) => w,
        None => b.weight("token_embd.weight", n_vocab, hp.n_embd)?,
    };
    let logits = b.buf("logits", n_vocab)?;
    b.op(Op::MatMul {
        x: normed,
        weight: w,
        bias: None,
        out: logits,
    });
    if let Some(cap) = softcap {
        b.op(Op::Softcap { x: logits, cap });
    }
    Ok(logits)
}

/// What varies between the pre-norm decoders (Llama, Qwen2, Qwen3).
#[derive(Clone, Debug)]
pub struct DecoderStyle {
    pub rope_style: RopeStyle,
    pub qk_norm: bool,
}

/// The pre-norm decoder: `h = embed(t)`; per layer `h += attn(norm(h))`,
/// `h += mlp_silu(norm(h))`; then the output head.
pub fn pre_norm_decoder(
    header: &GgufHeader,
    hp: &Hparams,
    style: &DecoderStyle,
) -> Result<Program, ArchError> {
    let mut b = Builder::new(header);
    let n_vocab = vocab_size(header, hp.n_embd)?;
    let table = b.weight("token_embd.weight", n_vocab, hp.n_embd)?;
    let hidden = b.buf("hidden", hp.n_embd)?;
    b.op(Op::Embed {
        table,
        out: hidden,
        scale: 1.0,
    });
    let normed = b.buf("normed", hp.n_embd)?;
    let attn_style = AttnStyle {
        rope_style: style.rope_style,
        qk_norm: style.qk_norm,
        rope_base: hp.rope_base,
        rope_freq_scale: hp.rope_freq_scale,
        window: None,
        scale: 1.0 / (hp.head_dim as f32).sqrt(),
        softcap: None,
    };
    for il in 0..hp.n_layers {
        rms_norm(
            &mut b,
            hidden,
            &format!("blk.{il}.attn_norm.weight"),
            hp.n_embd,
            hp.rms_eps,
            normed,
        )?;
        let a = attention(&mut b, hp, il, normed, &attn_style)?;
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
            hp.rms_eps,
            normed,
        )?;
        let m = gated_mlp(&mut b, hp, il, normed, Activation::Silu)?;
        b.op(Op::Add {
            a: hidden,
            b: m,
            out: hidden,
        });
    }
    let logits = output_head(&mut b, hp, n_vocab, hidden, None)?;
    let shape = ModelShape {
        architecture: hp.arch.clone(),
        n_vocab,
        n_embd: hp.n_embd,
        n_layers: hp.n_layers,
        n_ctx_train: hp.n_ctx_train,
    };
    b.finish(shape, hidden, logits)
}
