//! The [`Program`]: a model's forward pass as a flat list of typed ops over named weights
//! and named activation buffers, with every shape explicit. Written once per architecture
//! family (see the sibling files) and executed by every backend (the CPU reference today,
//! CUDA later) for a batch of sequences.
//!
//! Execution model, which every backend implements the same way:
//! - A batch is a list of rows; row `r` is one token of one sequence at one position.
//!   Every activation buffer holds `rows x width` f32 values (row-major).
//! - Every op except [`Op::Attention`] is row-wise: row `r` of its output depends only on
//!   row `r` of its inputs. Attention is the only op that reads other positions, through
//!   the KV cache of the row's sequence.
//! - [`Program::body`] runs on all rows of the batch and leaves the residual stream in
//!   [`Program::hidden`]. [`Program::head`] then runs only on the rows whose logits were
//!   asked for (usually the last row of each sequence), reading `hidden` and leaving
//!   [`Program::logits`].
//! - Each op names its per-layer parameters itself (RoPE base, sliding window, head
//!   counts), so a backend never needs to know which family built the program.

use crate::quant::QuantFormat;

/// Index into [`Program::weights`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WeightId(pub u32);

/// Index into [`Program::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u16);

/// A weight tensor the program reads: a matrix of `rows` rows of `cols` values, each row
/// stored contiguously in `format` (GGUF `dims = [cols, rows]`; vectors have `rows == 1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightSpec {
    /// Tensor name in the model file, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Number of rows (output features of a matrix; 1 for a vector).
    pub rows: usize,
    /// Values per row (input features of a matrix; length of a vector).
    pub cols: usize,
    /// Storage format of the tensor in the file.
    pub format: QuantFormat,
}

/// An activation buffer: `width` f32 values per row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufSpec {
    /// Human-readable name (`hidden`, `q`, `ffn_gate`, ...), for traces and errors.
    pub name: &'static str,
    /// Values per row.
    pub width: usize,
}

/// How RoPE pairs the values of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Consecutive pairs `(2i, 2i+1)` (GGML "normal"; Llama GGUFs, whose Q/K rows the
    /// converter permuted).
    Adjacent,
    /// Pairs `(i, i + rot_dims/2)` (GGML "NeoX"; Qwen2, Qwen3, Gemma 3).
    Neox,
}

/// Rotary position embedding of every head of a buffer, in place.
///
/// Pair `i` (of `rot_dims / 2`) at position `p` is rotated by the angle
/// `p * freq_scale * base^(-2i / rot_dims) / freq_factors[i]`. Values past `rot_dims` in
/// each head are left alone. The angles are computed in f64 and rounded to f32 cos/sin.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    pub style: RopeStyle,
    /// Number of heads in the buffer.
    pub n_heads: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Leading values of each head that are rotated (even, `<= head_dim`).
    pub rot_dims: usize,
    /// Frequency base (theta).
    pub base: f32,
    /// Position scale (1 / linear scaling factor; 1 when unscaled).
    pub freq_scale: f32,
    /// Optional per-pair divisors (`rope_freqs.weight`, Llama 3.1 style), `rot_dims / 2`
    /// values.
    pub freq_factors: Option<WeightId>,
}

/// The elementwise activation of a gated MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `x * sigmoid(x)`.
    Silu,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
}

/// Causal self-attention of one layer over the KV cache of each row's sequence.
///
/// For each row at position `p`: its K and V rows are stored in the cache of layer
/// `kv_layer` at `p`, then each query head `h` attends with KV head
/// `h / (n_heads / n_kv_heads)` over cache positions `j` with `j <= p` and, when `window`
/// is set, `p - j < window`. Scores are `dot(q, k_j) * scale`, optionally soft-capped as
/// `cap * tanh(s / cap)`, then soft-maxed.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionSpec {
    pub q: BufId,
    pub k: BufId,
    pub v: BufId,
    pub out: BufId,
    /// Which entry of [`Program::kv_layers`] holds this layer's cache.
    pub kv_layer: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub window: Option<usize>,
    pub softcap: Option<f32>,
}

/// One step of the program.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `out[r] = table[token[r]] * scale` (row `token[r]` of the table, dequantized).
    Embed {
        table: WeightId,
        out: BufId,
        scale: f32,
    },
    /// RMS normalization over groups of `group` values (the whole row for a layer norm,
    /// one head for QK-norm): `out = x / sqrt(mean(x^2) + eps) * weight`, where `weight`
    /// has `group` values shared by every group. `x` and `out` may be the same buffer.
    RmsNorm {
        x: BufId,
        weight: WeightId,
        out: BufId,
        group: usize,
        eps: f32,
    },
    /// `out[r] = W x[r] (+ bias)`, `W` being `weight` (rows = out width, cols = x width).
    MatMul {
        x: BufId,
        weight: WeightId,
        bias: Option<WeightId>,
        out: BufId,
    },
    /// Rotary position embedding of `x`, in place.
    Rope { x: BufId, rope: RopeSpec },
    /// `x *= factor`, in place.
    Scale { x: BufId, factor: f32 },
    /// Self-attention over the KV cache.
    Attention(AttentionSpec),
    /// `out = act(gate) * up`.
    GatedAct {
        gate: BufId,
        up: BufId,
        out: BufId,
        act: Activation,
    },
    /// `out = a + b`. `out` may alias `a` or `b`.
    Add { a: BufId, b: BufId, out: BufId },
    /// `x = cap * tanh(x / cap)`, in place.
    Softcap { x: BufId, cap: f32 },
}

/// Shape of one layer's KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayerSpec {
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Sliding window (positions kept); `None` for full attention.
    pub window: Option<usize>,
}

/// Model-level facts a backend or the CLI needs besides the ops.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelShape {
    /// `general.architecture` as written in the file.
    pub architecture: String,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layers: usize,
    /// Training context length (0 when the file does not say).
    pub n_ctx_train: usize,
}

/// A model's forward pass. See the module docs for the execution model.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub shape: ModelShape,
    pub weights: Vec<WeightSpec>,
    pub buffers: Vec<BufSpec>,
    pub kv_layers: Vec<KvLayerSpec>,
    /// Ops run on every row of the batch.
    pub body: Vec<Op>,
    /// Ops run only on the rows whose logits are wanted.
    pub head: Vec<Op>,
    /// The residual stream at the end of the body (input of the head).
    pub hidden: BufId,
    /// The logits (`n_vocab` wide) at the end of the head.
    pub logits: BufId,
}

impl Program {
    /// The spec of a weight.
    pub fn weight(&self, id: WeightId) -> &WeightSpec {
        &self.weights[id.0 as usize]
    }

    /// The spec of a buffer.
    pub fn buffer(&self, id: BufId) -> &BufSpec {
        &self.buffers[id.0 as usize]
    }

    /// Every op, body then head.
    pub fn ops(&self) -> impl Iterator<Item = &Op> {
        self.body.iter().chain(self.head.iter())
    }
}
