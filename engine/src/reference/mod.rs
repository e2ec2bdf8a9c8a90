//! The CPU reference executor: the oracle every GPU kernel and gate is checked against, and
//! the CPU backend for small models.
//!
//! Owns [`Reference`], which runs a [`Program`] for a batch of sequences ([`SeqInput`]),
//! with f32 activations, weights dequantized row by row with the `quant` module, and the
//! fixed-order arithmetic of [`math`]. Multi-threaded with rayon, but only ever split over
//! independent outputs (output rows of a projection, (row, head) pairs of attention, rows
//! of a norm), so every value is computed by one task in one order: results are
//! bit-identical whatever the thread count, and a row's arithmetic does not depend on the
//! other rows of the batch — prefill of T tokens and T one-token decodes give identical
//! logits.

pub mod attention;
pub mod math;
pub mod weights;

use std::sync::Arc;

use rayon::prelude::*;

use crate::arch::{self, ArchError, BufId, Op, Program};
use crate::kv::{KvDtype, KvError, SeqKv};
use crate::model_file::GgufModel;
use crate::quant::QuantError;

use attention::RowPos;
use weights::{Weight, matmul};

/// Errors of the reference executor.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error(transparent)]
    Arch(#[from] ArchError),
    #[error("weight: {0}")]
    Weight(String),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error("token id {token} is outside the vocabulary ({n_vocab} tokens)")]
    TokenOutOfRange { token: u32, n_vocab: usize },
    #[error("a sequence's KV cache was made for another program")]
    CacheMismatch,
    #[error("cannot build the thread pool: {0}")]
    ThreadPool(String),
    #[error("internal error: {0}")]
    Internal(&'static str),
}

/// Options of the reference executor.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceOptions {
    /// Worker threads (`None`: rayon's global pool).
    pub threads: Option<usize>,
    /// KV cache precision.
    pub kv_dtype: KvDtype,
}

/// Which rows of a sequence's step produce logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitRows {
    /// None (prefill of a prefix).
    None,
    /// The last token's row.
    Last,
    /// Every row.
    All,
}

/// One sequence's part of a batch: new tokens appended at positions `kv.len()..`.
pub struct SeqInput<'a> {
    pub kv: &'a mut SeqKv,
    pub tokens: &'a [u32],
    pub logits: LogitRows,
}

/// Logits of the requested rows, in batch order.
#[derive(Clone, Debug, PartialEq)]
pub struct Logits {
    pub n_vocab: usize,
    /// For each logits row: (index of the sequence in the batch, position).
    pub rows: Vec<(usize, usize)>,
    /// `rows.len() * n_vocab` values.
    pub data: Vec<f32>,
}

impl Logits {
    /// Logits row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        self.data
            .get(i * self.n_vocab..(i + 1) * self.n_vocab)
            .unwrap_or(&[])
    }
}

/// A program bound to a model file's weights, ready to run on the CPU.
pub struct Reference {
    model: Arc<GgufModel>,
    program: Program,
    weights: Vec<Weight>,
    /// Dequantized vectors (norm weights, biases, rope factors), by weight index.
    vectors: Vec<Option<Vec<f32>>>,
    pool: Option<rayon::ThreadPool>,
    options: ReferenceOptions,
}

impl Reference {
    /// Build the program for `model` (by its architecture) and bind the weights.
    pub fn new(model: Arc<GgufModel>, options: ReferenceOptions) -> Result<Self, ReferenceError> {
        let program = arch::build_program(model.header())?;
        Self::with_program(model, program, options)
    }

    /// Bind an already built program to `model`'s weights.
    pub fn with_program(
        model: Arc<GgufModel>,
        program: Program,
        options: ReferenceOptions,
    ) -> Result<Self, ReferenceError> {
        arch::validate(&program)?;
        let weights = Weight::resolve_all(&model, &program)?;
        let vectors = weights
            .iter()
            .map(|w| {
                if w.spec.rows == 1 {
                    w.to_f32(&model).map(Some)
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pool = match options.threads {
            None => None,
            Some(n) => Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n.max(1))
                    .build()
                    .map_err(|e| ReferenceError::ThreadPool(e.to_string()))?,
            ),
        };
        Ok(Self {
            model,
            program,
            weights,
            vectors,
            pool,
            options,
        })
    }

    /// Keep matrices dequantized in memory (f32), in program order, while they fit in
    /// `budget_bytes`; returns the bytes used. The cached values are exactly those the
    /// per-step dequantization produces, so results do not change (tested); decode gets
    /// faster because weights are no longer dequantized on every step.
    pub fn cache_weights(&mut self, budget_bytes: usize) -> Result<usize, ReferenceError> {
        let mut used: usize = self
            .weights
            .iter()
            .filter_map(|w| w.cached.as_ref().map(|c| c.len() * 4))
            .sum();
        let model = self.model.clone();
        for w in &mut self.weights {
            let bytes = w.spec.rows * w.spec.cols * 4;
            if w.spec.rows == 1 || w.cached.is_some() || used + bytes > budget_bytes {
                continue;
            }
            w.cached = Some(w.to_f32(&model)?);
            used += bytes;
        }
        Ok(used)
    }

    /// The program being executed.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The model file.
    pub fn model(&self) -> &GgufModel {
        &self.model
    }

    /// A fresh, empty KV cache for one sequence.
    pub fn new_cache(&self) -> SeqKv {
        SeqKv::new(&self.program.kv_layers, self.options.kv_dtype)
    }

    /// Run one step for a batch of sequences: append each sequence's tokens to its cache
    /// and return the logits of the requested rows. On error no cache grows.
    pub fn forward(&self, batch: &mut [SeqInput<'_>]) -> Result<Logits, ReferenceError> {
        match &self.pool {
            Some(pool) => pool.install(|| self.forward_inner(batch)),
            None => self.forward_inner(batch),
        }
    }

    /// Convenience: one sequence, logits of its last token.
    pub fn step(&self, kv: &mut SeqKv, tokens: &[u32]) -> Result<Vec<f32>, ReferenceError> {
        let mut batch = [SeqInput {
            kv,
            tokens,
            logits: LogitRows::Last,
        }];
        Ok(self.forward(&mut batch)?.data)
    }

    fn vector(&self, id: arch::WeightId) -> Result<&[f32], ReferenceError> {
        self.vectors
            .get(id.0 as usize)
            .and_then(|v| v.as_deref())
            .ok_or(ReferenceError::Internal("vector weight not loaded"))
    }

    fn forward_inner(&self, batch: &mut [SeqInput<'_>]) -> Result<Logits, ReferenceError> {
        let p = &self.program;
        let mut rows = Vec::new();
        let mut tokens = Vec::new();
        let mut want = Vec::new();
        for (s, input) in batch.iter_mut().enumerate() {
            if input.kv.layer_count() != p.kv_layers.len() {
                return Err(ReferenceError::CacheMismatch);
            }
            let pos0 = input.kv.len();
            input.kv.reserve(input.tokens.len());
            for (i, &t) in input.tokens.iter().enumerate() {
                if t as usize >= p.shape.n_vocab {
                    return Err(ReferenceError::TokenOutOfRange {
                        token: t,
                        n_vocab: p.shape.n_vocab,
                    });
                }
                let last = i + 1 == input.tokens.len();
                if input.logits == LogitRows::All || (input.logits == LogitRows::Last && last) {
                    want.push(rows.len());
                }
                rows.push(RowPos {
                    seq: s,
                    pos: pos0 + i,
                });
                tokens.push(t);
            }
        }
        let mut caches: Vec<&mut SeqKv> = batch.iter_mut().map(|b| &mut *b.kv).collect();
        let mut bufs = self.alloc(rows.len());
        for op in &p.body {
            self.run_op(op, &rows, &tokens, &mut caches, &mut bufs)?;
        }
        let hidden = take(&mut bufs, p.hidden);
        let mut head_bufs = self.alloc(want.len());
        let width = p.shape.n_embd;
        let mut h = Vec::with_capacity(want.len() * width);
        for &r in &want {
            h.extend_from_slice(&hidden[r * width..(r + 1) * width]);
        }
        head_bufs[p.hidden.0 as usize] = h;
        let head_rows: Vec<RowPos> = want.iter().map(|&r| rows[r]).collect();
        let head_tokens: Vec<u32> = want.iter().map(|&r| tokens[r]).collect();
        for op in &p.head {
            self.run_op(op, &head_rows, &head_tokens, &mut caches, &mut head_bufs)?;
        }
        for input in batch.iter_mut() {
            input.kv.commit(input.tokens.len())?;
        }
        Ok(Logits {
            n_vocab: p.shape.n_vocab,
            rows: head_rows.iter().map(|r| (r.seq, r.pos)).collect(),
            data: take(&mut head_bufs, p.logits),
        })
    }

    fn alloc(&self, rows: usize) -> Vec<Vec<f32>> {
        self.program
            .buffers
            .iter()
            .map(|b| vec![0f32; b.width * rows])
            .collect()
    }

    fn run_op(
        &self,
        op: &Op,
        rows: &[RowPos],
        tokens: &[u32],
        caches: &mut [&mut SeqKv],
        bufs: &mut [Vec<f32>],
    ) -> Result<(), ReferenceError> {
        let model = &*self.model;
        match op {
            Op::Embed { table, out, scale } => {
                let w = self.weight(*table)?;
                let mut o = take(bufs, *out);
                let cols = w.spec.cols;
                o.par_chunks_mut(cols)
                    .zip(tokens.par_iter())
                    .try_for_each(|(row, &t)| {
                        w.row(model, t as usize, row)?;
                        if *scale != 1.0 {
                            row.iter_mut().for_each(|v| *v *= scale);
                        }
                        Ok::<(), ReferenceError>(())
                    })?;
                bufs[out.0 as usize] = o;
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                group,
                eps,
            } => {
                let w = self.vector(*weight)?;
                if x == out {
                    let mut o = take(bufs, *out);
                    o.par_chunks_mut(*group)
                        .for_each(|g| math::rms_norm_inplace(g, w, *eps));
                    bufs[out.0 as usize] = o;
                } else {
                    let mut o = take(bufs, *out);
                    let xs = &bufs[x.0 as usize];
                    o.par_chunks_mut(*group)
                        .zip(xs.par_chunks(*group))
                        .for_each(|(og, xg)| math::rms_norm(xg, w, *eps, og));
                    bufs[out.0 as usize] = o;
                }
            }
            Op::MatMul {
                x,
                weight,
                bias,
                out,
            } => {
                let w = self.weight(*weight)?;
                let b = match bias {
                    Some(b) => Some(self.vector(*b)?),
                    None => None,
                };
                let mut o = take(bufs, *out);
                matmul(model, w, &bufs[x.0 as usize], b, &mut o)?;
                bufs[out.0 as usize] = o;
            }
            Op::Rope { x, rope } => {
                let factors = match rope.freq_factors {
                    Some(f) => Some(self.vector(f)?),
                    None => None,
                };
                let half = rope.rot_dims / 2;
                let neox = rope.style == arch::RopeStyle::Neox;
                let width = rope.n_heads * rope.head_dim;
                let mut o = take(bufs, *x);
                o.par_chunks_mut(width)
                    .zip(rows.par_iter())
                    .for_each(|(row, rp)| {
                        let table: Vec<(f32, f32)> = (0..half)
                            .map(|i| {
                                let f = factors.and_then(|f| f.get(i).copied()).unwrap_or(1.0);
                                math::rope_cos_sin(
                                    rp.pos,
                                    i,
                                    rope.rot_dims,
                                    rope.base,
                                    rope.freq_scale,
                                    f,
                                )
                            })
                            .collect();
                        for head in row.chunks_exact_mut(rope.head_dim) {
                            math::rope_head(&mut head[..rope.rot_dims], &table, neox);
                        }
                    });
                bufs[x.0 as usize] = o;
            }
            Op::Scale { x, factor } => {
                bufs[x.0 as usize].iter_mut().for_each(|v| *v *= factor);
            }
            Op::Softcap { x, cap } => {
                bufs[x.0 as usize]
                    .iter_mut()
                    .for_each(|v| *v = math::softcap(*v, *cap));
            }
            Op::Attention(spec) => {
                let mut o = take(bufs, spec.out);
                attention::attention(
                    spec,
                    rows,
                    &bufs[spec.q.0 as usize],
                    &bufs[spec.k.0 as usize],
                    &bufs[spec.v.0 as usize],
                    caches,
                    &mut o,
                )?;
                bufs[spec.out.0 as usize] = o;
            }
            Op::GatedAct { gate, up, out, act } => {
                let f = match act {
                    arch::Activation::Silu => math::silu,
                    arch::Activation::GeluTanh => math::gelu_tanh,
                };
                let mut o = take(bufs, *out);
                if out == gate {
                    o.iter_mut()
                        .zip(&bufs[up.0 as usize])
                        .for_each(|(g, &u)| *g = f(*g) * u);
                } else if out == up {
                    o.iter_mut()
                        .zip(&bufs[gate.0 as usize])
                        .for_each(|(u, &g)| *u *= f(g));
                } else {
                    let (g, u) = (&bufs[gate.0 as usize], &bufs[up.0 as usize]);
                    o.iter_mut()
                        .zip(g.iter().zip(u))
                        .for_each(|(o, (&g, &u))| *o = f(g) * u);
                }
                bufs[out.0 as usize] = o;
            }
            Op::Add { a, b, out } => {
                let mut o = take(bufs, *out);
                if out == a && out == b {
                    o.iter_mut().for_each(|v| *v += *v);
                } else if out == a || out == b {
                    let other = if out == a { b } else { a };
                    o.iter_mut()
                        .zip(&bufs[other.0 as usize])
                        .for_each(|(v, &w)| *v += w);
                } else {
                    let (x, y) = (&bufs[a.0 as usize], &bufs[b.0 as usize]);
                    o.iter_mut()
                        .zip(x.iter().zip(y))
                        .for_each(|(o, (&x, &y))| *o = x + y);
                }
                bufs[out.0 as usize] = o;
            }
        }
        Ok(())
    }

    fn weight(&self, id: arch::WeightId) -> Result<&Weight, ReferenceError> {
        self.weights
            .get(id.0 as usize)
            .ok_or(ReferenceError::Internal("weight id out of range"))
    }
}

fn take(bufs: &mut [Vec<f32>], id: BufId) -> Vec<f32> {
    bufs.get_mut(id.0 as usize)
        .map(std::mem::take)
        .unwrap_or_default()
}

/// Index of the largest value (the lowest index among equal maxima; NaN never wins).
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}
