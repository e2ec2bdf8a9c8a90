//! The tensor inventory of a synthetic checkpoint: GGUF names and shapes per architecture
//! (the same names and shapes the real models of each family carry — a test checks them
//! against the test models), the quant format of each tensor under a mix, and the scale
//! each tensor's values are drawn at.

use engine::quant::QuantFormat;

use super::shapes::{Arch, Shape};

/// What a tensor is, which decides its format and its values' scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Embd,
    Output,
    /// An RMSNorm weight (values ~1).
    Norm,
    /// A projection matrix (values ~N(0, 1/fan_in)).
    Proj,
    /// `attn_v` and `ffn_down`: projections a `_M` mix gives more bits in some layers.
    ProjSensitive,
    Bias,
}

/// One tensor to write.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    pub name: String,
    /// GGUF order: `dims[0]` is the row (contiguous, fan-in) length.
    pub dims: Vec<u64>,
    pub role: Role,
    pub layer: Option<usize>,
}

impl Planned {
    pub fn rows(&self) -> usize {
        self.dims.iter().skip(1).product::<u64>() as usize
    }
    pub fn row_len(&self) -> usize {
        self.dims[0] as usize
    }
    pub fn elems(&self) -> usize {
        self.rows() * self.row_len()
    }
}

/// The tensors of `arch` at `shape` with a vocabulary of `vocab`, in file order.
pub fn inventory(arch: Arch, shape: &Shape, vocab: usize) -> Vec<Planned> {
    let (d, ff, hd) = (
        shape.n_embd as u64,
        shape.n_ff as u64,
        shape.head_dim as u64,
    );
    let (q, kv) = (shape.n_heads as u64 * hd, shape.n_kv_heads as u64 * hd);
    let mut out = Vec::new();
    let mut add = |name: String, dims: &[u64], role: Role, layer: Option<usize>| {
        out.push(Planned {
            name,
            dims: dims.to_vec(),
            role,
            layer,
        });
    };
    add(
        "token_embd.weight".into(),
        &[d, vocab as u64],
        Role::Embd,
        None,
    );
    for l in 0..shape.n_layers {
        let b = |s: &str| format!("blk.{l}.{s}");
        let some = Some(l);
        add(b("attn_norm.weight"), &[d], Role::Norm, some);
        add(b("attn_q.weight"), &[d, q], Role::Proj, some);
        add(b("attn_k.weight"), &[d, kv], Role::Proj, some);
        add(b("attn_v.weight"), &[d, kv], Role::ProjSensitive, some);
        if arch == Arch::Qwen2 {
            add(b("attn_q.bias"), &[q], Role::Bias, some);
            add(b("attn_k.bias"), &[kv], Role::Bias, some);
            add(b("attn_v.bias"), &[kv], Role::Bias, some);
        }
        if matches!(arch, Arch::Qwen3 | Arch::Gemma3) {
            add(b("attn_q_norm.weight"), &[hd], Role::Norm, some);
            add(b("attn_k_norm.weight"), &[hd], Role::Norm, some);
        }
        add(b("attn_output.weight"), &[q, d], Role::Proj, some);
        if arch == Arch::Gemma3 {
            add(b("post_attention_norm.weight"), &[d], Role::Norm, some);
        }
        add(b("ffn_norm.weight"), &[d], Role::Norm, some);
        add(b("ffn_gate.weight"), &[d, ff], Role::Proj, some);
        add(b("ffn_up.weight"), &[d, ff], Role::Proj, some);
        add(b("ffn_down.weight"), &[ff, d], Role::ProjSensitive, some);
        if arch == Arch::Gemma3 {
            add(b("post_ffw_norm.weight"), &[d], Role::Norm, some);
        }
    }
    add("output_norm.weight".into(), &[d], Role::Norm, None);
    if !shape.tied {
        add(
            "output.weight".into(),
            &[d, vocab as u64],
            Role::Output,
            None,
        );
    }
    out
}

/// A quantization mix: one format everywhere, or a llama.cpp-style `_M` mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Every matrix in this format (the output head in Q6_K when the format has fewer bits).
    Plain(QuantFormat),
    /// `Q4_K_M` etc.: the base format, Q6_K for the output head and for `attn_v` /
    /// `ffn_down` in the first and last eighth of the layers and every third in between.
    Medium(QuantFormat),
}

impl Mix {
    /// Parse `Q4_0`, `BF16`, `Q4_K_M`, ...
    pub fn parse(s: &str) -> Option<Mix> {
        if let Some(f) = QuantFormat::from_name(s) {
            return Some(Mix::Plain(f));
        }
        let base = QuantFormat::from_name(s.strip_suffix("_M").or(s.strip_suffix("_m"))?)?;
        matches!(
            base,
            QuantFormat::Q3_K | QuantFormat::Q4_K | QuantFormat::Q5_K
        )
        .then_some(Mix::Medium(base))
    }

    pub fn name(self) -> String {
        match self {
            Mix::Plain(f) => f.name().to_owned(),
            Mix::Medium(f) => format!("{}_M", f.name()),
        }
    }

    /// GGUF `general.file_type` of this mix (llama.cpp's `llama_ftype` numbering).
    pub fn file_type(self) -> u32 {
        use QuantFormat::*;
        match self {
            Mix::Plain(f) => match f {
                F32 => 0,
                F16 => 1,
                Q4_0 => 2,
                Q4_1 => 3,
                Q8_0 => 7,
                Q5_0 => 8,
                Q5_1 => 9,
                Q2_K => 10,
                Q3_K => 11,
                Q4_K => 14,
                Q5_K => 16,
                Q6_K => 18,
                IQ4_NL => 25,
                IQ4_XS => 30,
                BF16 => 32,
            },
            Mix::Medium(Q3_K) => 12,
            Mix::Medium(Q5_K) => 17,
            Mix::Medium(_) => 15,
        }
    }

    /// The format of a tensor with `role` in layer `layer` of `n_layers`.
    fn wanted(self, role: Role, layer: Option<usize>, n_layers: usize) -> QuantFormat {
        use QuantFormat::*;
        let base = match self {
            Mix::Plain(f) | Mix::Medium(f) => f,
        };
        let float = matches!(base, F32 | F16 | BF16);
        match role {
            Role::Norm | Role::Bias => F32,
            _ if float => base,
            Role::Output if base != Q8_0 => Q6_K,
            Role::ProjSensitive => match (self, layer) {
                (Mix::Medium(_), Some(l)) if more_bits(l, n_layers) => Q6_K,
                _ => base,
            },
            _ => base,
        }
    }

    /// The format of a tensor, falling back to a 32-value block format when the row length
    /// is not a multiple of the wanted format's block (and to F16 when not even that).
    pub fn format_for(self, t: &Planned, n_layers: usize) -> QuantFormat {
        use QuantFormat::*;
        let want = self.wanted(t.role, t.layer, n_layers);
        let k = t.row_len();
        if k % want.block_geometry().0 == 0 {
            return want;
        }
        let fallback = match want {
            Q4_K => Q5_0,
            Q5_K => Q5_1,
            Q6_K => Q8_0,
            Q2_K | Q3_K | IQ4_XS => IQ4_NL,
            other => other,
        };
        if k % fallback.block_geometry().0 == 0 {
            fallback
        } else {
            F16
        }
    }
}

/// The layers a `_M` mix gives more bits: the first and last eighth and every third one
/// in between.
fn more_bits(layer: usize, n_layers: usize) -> bool {
    let eighth = n_layers / 8;
    layer < eighth || layer >= n_layers - eighth || (layer - eighth) % 3 == 2
}

/// Standard deviation of a tensor's values, and the mean they are centred on.
pub fn scale(t: &Planned) -> (f32, f32) {
    match t.role {
        Role::Norm => (1.0, 0.02),
        Role::Bias => (0.0, 0.02),
        Role::Embd => (0.0, 0.02),
        Role::Output | Role::Proj | Role::ProjSensitive => (0.0, 1.0 / (t.row_len() as f32).sqrt()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::shapes::find;

    #[test]
    fn llama_8b_inventory_has_the_real_sizes() {
        let s = find("llama-3.1-8b", Arch::Llama).unwrap();
        let inv = inventory(Arch::Llama, &s, 128_256);
        assert_eq!(inv.len(), 1 + 32 * 9 + 2);
        let params: usize = inv.iter().map(Planned::elems).sum();
        assert_eq!(params, 8_030_261_248);
        let q40: usize = inv
            .iter()
            .map(|t| {
                let f = Mix::Plain(QuantFormat::Q4_0).format_for(t, 32);
                f.bytes_for(t.elems()).unwrap()
            })
            .sum();
        // Q4_0 everywhere but a Q6_K output head: ~4.66 GB (issue 7 counts 4.36 GB read
        // per token: all but the embedding table).
        assert!((4.6e9..4.7e9).contains(&(q40 as f64)), "{q40}");
    }

    #[test]
    fn mixes_parse_and_place_formats() {
        use QuantFormat::*;
        assert_eq!(Mix::parse("q4_0"), Some(Mix::Plain(Q4_0)));
        assert_eq!(Mix::parse("Q4_K_M"), Some(Mix::Medium(Q4_K)));
        assert_eq!(Mix::parse("Q8_0_M"), None);
        let t = |role, layer, k: u64| Planned {
            name: "x".into(),
            dims: vec![k, 8],
            role,
            layer,
        };
        let m = Mix::Medium(Q4_K);
        assert_eq!(
            m.format_for(&t(Role::ProjSensitive, Some(0), 256), 32),
            Q6_K
        );
        assert_eq!(
            m.format_for(&t(Role::ProjSensitive, Some(4), 256), 32),
            Q4_K
        );
        assert_eq!(
            m.format_for(&t(Role::ProjSensitive, Some(6), 256), 32),
            Q6_K
        );
        assert_eq!(m.format_for(&t(Role::Proj, Some(0), 640), 32), Q5_0);
        assert_eq!(m.format_for(&t(Role::Output, None, 256), 32), Q6_K);
        assert_eq!(m.format_for(&t(Role::Norm, None, 256), 32), F32);
        let bf = Mix::Plain(BF16);
        assert_eq!(bf.format_for(&t(Role::Output, None, 256), 32), BF16);
        assert_eq!(
            Mix::Plain(Q8_0).format_for(&t(Role::Output, None, 256), 32),
            Q8_0
        );
        assert_eq!(
            Mix::Plain(Q4_0).format_for(&t(Role::Proj, None, 48), 32),
            F16
        );
    }
}
