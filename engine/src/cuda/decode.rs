//! The CUDA executor of a [`Program`]: one sequence, weights uploaded once, every op run by
//! the kernels of this module, logits and the greedy token computed on the device.
//!
//! Owns [`CudaDecoder`]: weight upload (matrices in their GGUF block layout, deduplicated
//! by tensor name so a tied output head shares the embedding; vectors — norm weights,
//! biases, RoPE factors — as f32), the activation buffers (up to [`MAX_ROWS`] rows each),
//! the f16 KV cache of each layer (paged: pools of `KV_BLOCK`-position blocks read through
//! the decoder's block table, `ops/attention.rs`), and the execution
//! model of `arch::program`: the body runs on every new token, the head on the last one.
//!
//! Prompt tokens go through [`CudaDecoder::prefill`] (`decode/prefill.rs`: passes of
//! [`PREFILL_ROWS`](super::sources::consts::PREFILL_ROWS) rows in buffers of their own, the body's matrix products on tensor
//! cores for Q4_0 / Q8_0 / Q6_K / F16 / BF16, by default), generated tokens through
//! [`CudaDecoder::forward`], the row path described next.
//!
//! A prompt is processed [`MAX_ROWS`] tokens per launch. Every kernel is batch-invariant
//! (checked by kernel-check), so this gives exactly the logits of feeding the tokens one by
//! one. Each op is one or two launches on the GPU's stream, and a step returns 4 bytes (the
//! argmax) to the host when only the token is wanted.
//!
//! Device layout of the weights (issue 7): Q4_0, Q8_0 and Q6_K matrices are repacked at
//! upload into planes (the quants of every block, then the scales; `ops::repack`), so that
//! every quant load of the matvec is 16 bytes wide and aligned; the other formats keep the
//! GGUF block layout (Q4_K / Q5_K blocks are already 16-byte multiples). Same byte count.
//!
//! Launches ([`fuse::plan`]): an RMSNorm feeding only the matmuls right after it is folded
//! into their input staging, gate + up + gated activation run as one pass, and a residual
//! add that follows a matmul runs in its epilogue; each gives the bits of the separate
//! kernels (kernel-check `fusion` cases).
//!
//! A one-token step can also run as a captured CUDA graph ([`graph`]): the same launches,
//! recorded once per decoder with the token id and position read from a small device
//! buffer ([`Feed::Step`]) that the host overwrites before each replay.
//!
//! Sampled steps (`decode/sample.rs`): the `engine::sampling` chain runs on the device on the
//! logits left by a step (`kernels/sample.cu`), eagerly or as the last node of a second
//! captured graph; the host's sampler supplies the draw and the penalty window.
//!
//! Batched decode across sequences (`decode/batch.rs`): [`CudaDecoder::forward_batch`] feeds
//! one token to each of B decoders sharing these weights, up to [`MAX_ROWS`] rows per
//! launch through the body's matvecs, RoPE + KV store + attention per row into its own
//! decoder's cache with the one-token kernels, so each row's logits are those of a plain
//! step (the `batch` gate). By default a group's step runs as one captured CUDA graph per
//! row count, in a workspace shared by every decoder of the weights' upload, replayed for
//! any group of that size (`decode/batch/graph.rs`; `ASSAY_BATCH_GRAPH=0`: eager launches).
//!
//! Constrained decoding (`decode/mask.rs`): [`CudaDecoder::set_mask`] uploads a grammar's
//! token bitmask, which the next pick (argmax, sample, or a graphed step) applies to the
//! logits on the device (`kernels/mask.cu`) before choosing.

use super::cudarc::driver::CudaSlice;
use super::ops::{self, AttnScratch, RopeTable};
use super::select::{self, MatvecKernel};
use super::sources::consts::MV_MAX_TOK;
use super::{CudaError, DeviceWeight, Gpu, shape_err};
use crate::arch::{self, Op, Program};
use crate::model_file::GgufModel;
use half::f16;
use std::collections::HashMap;
use std::sync::Arc;

mod attention;
mod batch;
mod exec;
mod fuse;
mod graph;
mod inspect;
mod mask;
mod mmv;
mod prefill;
mod rope_fuse;
mod sample;
mod shared;
mod verify;

pub use batch::{BatchGraphStats, batch_graphs_from_env};
use exec::{get, matrix, put, take, vector, vector_host, w_ref};
pub use graph::StepGraph;
pub use prefill::{DEFAULT_PREFILL, PREFILL_PASS_ROWS, PrefillMode};

/// Most tokens one step of the body runs in one launch.
pub const MAX_ROWS: usize = MV_MAX_TOK;

/// A weight as the decoder holds it.
enum DevWeight {
    /// A matrix, index into `mats`.
    Matrix(usize),
    /// A vector as f32 (device and host copies).
    Vector(CudaSlice<f32>, Vec<f32>),
}

/// Where an op pass reads its token ids and positions from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Feed {
    /// `tokens[..n]` / `pos[..n]` (body) and `head_pos` (head), written per call.
    Rows,
    /// The two-value `step` buffer (`[token, position]`), one token: what a captured graph
    /// reads, so that replaying it needs only those 8 bytes rewritten.
    Step,
}

/// One layer's KV cache: K and V pools of paged blocks (`ops::kv_block_len` halves each),
/// read and written through the decoder's block table.
struct LayerKv {
    k: CudaSlice<f16>,
    v: CudaSlice<f16>,
    n_kv_heads: usize,
    head_dim: usize,
}

/// Identities of decoders (never reused in a process): a batched step that reads decoders'
/// own buffers (an unfused attention) keys its graphs by them.
static NEXT_DECODER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A program bound to uploaded weights, with the state of one sequence.
pub struct CudaDecoder {
    /// This decoder's identity ([`NEXT_DECODER_ID`]).
    id: u64,
    gpu: Arc<Gpu>,
    program: Program,
    /// Uploaded weights, shared by the decoders made by [`CudaDecoder::share`].
    mats: Arc<Vec<DeviceWeight>>,
    weights: Arc<Vec<DevWeight>>,
    /// RoPE tables, by index of the op in `body` then `head`.
    rope: Arc<HashMap<usize, RopeTable>>,
    bufs: Vec<Option<CudaSlice<f32>>>,
    head_bufs: Vec<Option<CudaSlice<f32>>>,
    kv: Vec<LayerKv>,
    /// The sequence's block table (`i32` per block of `KV_BLOCK` positions, the same for
    /// every layer): a decoder owns the pool blocks of its capacity and maps them in order.
    bt: CudaSlice<i32>,
    /// The host's copy of `bt`.
    bt_host: Vec<i32>,
    scratch: HashMap<(usize, usize), AttnScratch>,
    tokens: CudaSlice<i32>,
    pos: CudaSlice<i32>,
    head_pos: CudaSlice<i32>,
    argmax_out: CudaSlice<i32>,
    /// `[token, position]` of a graphed step (see [`Feed::Step`]).
    step: CudaSlice<i32>,
    /// The captured one-token step, once [`CudaDecoder::capture_step`] ran. It holds the
    /// device addresses of the buffers above, which are allocated once in
    /// [`CudaDecoder::new`] and never replaced while the decoder lives.
    graph: Option<StepGraph>,
    /// Buffers and captured step of device sampling ([`sample`]), made on first use.
    sampling: Option<sample::DeviceSampling>,
    /// The token mask of constrained decoding and its graphs ([`mask`]), made on first use.
    mask: Option<mask::DeviceMask>,
    capacity: usize,
    len: usize,
    /// Kernel choices made so far (for receipts), by weight name.
    choices: HashMap<String, MatvecKernel>,
    /// The body as launch units ([`fuse::plan`]).
    plan: Vec<fuse::Step>,
    /// Buffers of the all-rows verification forwards ([`verify`]).
    verify: verify::VerifyBufs,
    /// The prompt pass's mode and buffers ([`prefill`]).
    prefill: prefill::PrefillState,
    /// The decode products on tensor cores (`ASSAY_MMV=1`; [`mmv`]).
    mmv: mmv::MmvState,
    /// The matvec kernel choices forced on this decoder's launches (`ASSAY_MV_WR`:
    /// [`exec::mv_wr_switch_from`]).
    mv: ops::MatvecOpts,
    /// `rope_kv` in the q / k / v launch's epilogue on a one-token step (`ASSAY_ROPE_FUSE=1`,
    /// [`rope_fuse`]; off by default since engine21).
    rope_fuse: bool,
    /// The batched step's workspace ([`batch`]): one slot per upload of the weights, shared
    /// by the decoders made by [`CudaDecoder::share`], filled on the first batched step.
    batch: batch::BatchSlot,
}

fn model_err(what: impl std::fmt::Display) -> CudaError {
    shape_err("decoder", what.to_string())
}

impl CudaDecoder {
    /// Upload `program`'s weights from `model` and allocate buffers and a KV cache of
    /// `capacity` positions.
    pub fn new(
        gpu: Arc<Gpu>,
        model: &GgufModel,
        program: Program,
        capacity: usize,
    ) -> Result<CudaDecoder, CudaError> {
        arch::validate(&program).map_err(model_err)?;
        let mut mats: Vec<DeviceWeight> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut weights = Vec::with_capacity(program.weights.len());
        for spec in &program.weights {
            let info = model
                .header()
                .tensor(&spec.name)
                .ok_or_else(|| model_err(format!("tensor {:?} is missing", spec.name)))?;
            if spec.rows == 1 {
                let host = model.dequantize(&spec.name).map_err(model_err)?;
                if host.len() != spec.cols {
                    return Err(model_err(format!(
                        "vector {:?} has {} values",
                        spec.name,
                        host.len()
                    )));
                }
                weights.push(DevWeight::Vector(gpu.upload(&host)?, host));
                continue;
            }
            if let Some(&i) = by_name.get(&spec.name) {
                weights.push(DevWeight::Matrix(i));
                continue;
            }
            if select::format_suffix_of(info.format).is_none() || info.format != spec.format {
                return Err(CudaError::UnsupportedFormat {
                    op: "matvec",
                    format: info.format,
                });
            }
            let w = DeviceWeight::upload(
                &gpu,
                spec.format,
                spec.rows,
                spec.cols,
                model.tensor_bytes(info),
            )?;
            by_name.insert(spec.name.clone(), mats.len());
            weights.push(DevWeight::Matrix(mats.len()));
            mats.push(w);
        }
        let mut rope = HashMap::new();
        for (i, op) in program.ops().enumerate() {
            if let Op::Rope { rope: r, .. } = op {
                let factors = match r.freq_factors {
                    Some(id) => Some(vector_host(&weights, id)?.to_vec()),
                    None => None,
                };
                rope.insert(
                    i,
                    RopeTable::new(&gpu, r.base, r.rot_dims, r.freq_scale, factors.as_deref())?,
                );
            }
        }
        Self::with_weights(
            gpu,
            program,
            Arc::new(mats),
            Arc::new(weights),
            Arc::new(rope),
            capacity,
        )
    }

    /// Allocate the buffers and a KV cache of `capacity` positions around uploaded weights.
    fn with_weights(
        gpu: Arc<Gpu>,
        program: Program,
        mats: Arc<Vec<DeviceWeight>>,
        weights: Arc<Vec<DevWeight>>,
        rope: Arc<HashMap<usize, RopeTable>>,
        capacity: usize,
    ) -> Result<CudaDecoder, CudaError> {
        let alloc = |rows: usize| -> Result<Vec<Option<CudaSlice<f32>>>, CudaError> {
            program
                .buffers
                .iter()
                .map(|b| gpu.zeros::<f32>(b.width * rows).map(Some))
                .collect()
        };
        let bufs = alloc(MAX_ROWS)?;
        let head_bufs = alloc(1)?;
        let mut kv = Vec::new();
        let blocks = ops::kv_blocks(capacity);
        let table: Vec<i32> = (0..blocks)
            .map(|b| i32::try_from(b).map_err(|_| shape_err("kv cache", "KV capacity too large")))
            .collect::<Result<_, _>>()?;
        let bt = gpu.upload(&table)?;
        let bt_host = table;
        for l in &program.kv_layers {
            let n = blocks * ops::kv_block_len(l.n_kv_heads, l.head_dim);
            kv.push(LayerKv {
                k: gpu.zeros(n)?,
                v: gpu.zeros(n)?,
                n_kv_heads: l.n_kv_heads,
                head_dim: l.head_dim,
            });
        }
        let mut scratch = HashMap::new();
        for op in program.ops() {
            if let Op::Attention(a) = op {
                if let std::collections::hash_map::Entry::Vacant(e) =
                    scratch.entry((a.n_heads, a.head_dim))
                {
                    e.insert(AttnScratch::new(
                        &gpu, MAX_ROWS, a.n_heads, a.head_dim, capacity,
                    )?);
                }
            }
        }
        Ok(CudaDecoder {
            id: NEXT_DECODER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            plan: fuse::plan(&program),
            verify: verify::VerifyBufs::new(&gpu)?,
            prefill: prefill::PrefillState::from_env()?,
            mmv: mmv::MmvState::from_env(
                &gpu,
                mats.iter().map(|m| m.cols).max().unwrap_or(1),
                program.body.len(),
            )?,
            mv: ops::MatvecOpts {
                wr: exec::mv_wr_switch_from(std::env::var("ASSAY_MV_WR").ok().as_deref())
                    .map_err(|e| shape_err("decoder", e))?,
                wr_grid: None,
                qkv: exec::mv_qkv_switch_from(std::env::var("ASSAY_MV_QKV").ok().as_deref())
                    .map_err(|e| shape_err("decoder", e))?,
                wrt: exec::mv_wrt_switch_from(std::env::var("ASSAY_MV_WRT").ok().as_deref())
                    .map_err(|e| shape_err("decoder", e))?,
            },
            rope_fuse: rope_fuse::rope_fuse_switch_from(
                std::env::var("ASSAY_ROPE_FUSE").ok().as_deref(),
            )
            .map_err(|e| shape_err("decoder", e))?,
            batch: batch::BatchSlot::default(),
            tokens: gpu.zeros(MAX_ROWS)?,
            pos: gpu.zeros(MAX_ROWS)?,
            head_pos: gpu.zeros(1)?,
            argmax_out: gpu.zeros(1)?,
            step: gpu.zeros(2)?,
            graph: None,
            sampling: None,
            mask: None,
            gpu,
            program,
            mats,
            weights,
            rope,
            bufs,
            head_bufs,
            kv,
            bt,
            bt_host,
            scratch,
            capacity,
            len: 0,
            choices: HashMap::new(),
        })
    }

    /// Tokens in the sequence so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token has been fed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// KV capacity in positions.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The program being executed.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Forget the sequence (the cache is overwritten as new tokens arrive).
    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// Bytes of weights on the device.
    pub fn weight_bytes(&self) -> usize {
        self.mats.iter().map(|m| m.data.len()).sum::<usize>()
            + self
                .weights
                .iter()
                .map(|w| match w {
                    DevWeight::Vector(_, h) => h.len() * 4,
                    DevWeight::Matrix(_) => 0,
                })
                .sum::<usize>()
    }

    /// The streamed one-token matvec forced on (`Some(true)`) or off (`Some(false)`) by
    /// `ASSAY_MV_WR`; `None`: the engine's choice (`select::choose_matvec`).
    pub fn matvec_wr(&self) -> Option<bool> {
        self.mv.wr
    }

    /// q, k and v in one segmented streamed launch forced on (`Some(true)`) or off
    /// (`Some(false)`) by `ASSAY_MV_QKV`; `None`: the engine's choice
    /// (`select::choose_matvec_segs`).
    pub fn matvec_qkv(&self) -> Option<bool> {
        self.mv.qkv
    }

    /// Whether `rope_kv` may run in the q / k / v launch's epilogue on one-token steps (where
    /// `select::choose_rope_fuse` takes it): `ASSAY_ROPE_FUSE=1` (opt-in; off by default).
    pub fn rope_fuse(&self) -> bool {
        self.rope_fuse
    }

    /// The matvec kernel chosen for each matrix (by tensor name), for receipts.
    pub fn kernel_choices(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .choices
            .iter()
            .map(|(k, c)| (k.clone(), c.to_string()))
            .collect();
        // With `ASSAY_MMV=1` a product that ran on `mmv.cu` names that kernel instead.
        for (k, c) in &self.mmv.choices {
            match v.iter_mut().find(|(n, _)| n == k) {
                Some(e) => e.1 = c.to_string(),
                None => v.push((k.clone(), c.to_string())),
            }
        }
        v.sort();
        v
    }

    /// Append `tokens` to the sequence and compute the logits of the last one (kept on the
    /// device; see [`CudaDecoder::logits`] and [`CudaDecoder::argmax`]).
    pub fn forward(&mut self, tokens: &[u32]) -> Result<(), CudaError> {
        self.feed(tokens, MAX_ROWS)
    }

    /// [`CudaDecoder::forward`] in passes of `rows` rows (the buffers in place must hold
    /// that many: [`MAX_ROWS`], or [`PREFILL_ROWS`](super::sources::consts::PREFILL_ROWS) while a prompt pass has swapped its
    /// buffers in).
    fn feed(&mut self, tokens: &[u32], rows: usize) -> Result<(), CudaError> {
        if tokens.is_empty() {
            return Err(shape_err("decoder", "no tokens to feed"));
        }
        if self.len + tokens.len() > self.capacity {
            return Err(shape_err(
                "decoder",
                format!(
                    "{} + {} tokens exceed the KV capacity {}",
                    self.len,
                    tokens.len(),
                    self.capacity
                ),
            ));
        }
        let n_vocab = self.program.shape.n_vocab;
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(shape_err(
                "decoder",
                format!("token {t} outside the vocabulary ({n_vocab})"),
            ));
        }
        for chunk in tokens.chunks(rows) {
            let n = chunk.len();
            let ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
            let pos: Vec<i32> = (0..n).map(|i| (self.len + i) as i32).collect();
            self.gpu
                .stream()
                .memcpy_htod(&ids, &mut self.tokens.slice_mut(0..n))?;
            self.gpu
                .stream()
                .memcpy_htod(&pos, &mut self.pos.slice_mut(0..n))?;
            self.body_pass(n, Feed::Rows)?;
            self.len += n;
        }
        let last = (self.len - 1) as i32;
        self.gpu
            .stream()
            .memcpy_htod(&[last][..], &mut self.head_pos)?;
        self.head_pass(Feed::Rows)
    }

    /// Queue the body for `n` rows, then copy the last row's hidden state to the head's
    /// input.
    fn body_pass(&mut self, n: usize, feed: Feed) -> Result<(), CudaError> {
        let body = std::mem::take(&mut self.program.body);
        let plan = std::mem::take(&mut self.plan);
        let res = (|| {
            let mut skip = 0usize;
            for (si, step) in plan.iter().enumerate() {
                if skip > 0 {
                    skip -= 1;
                    continue; // ran with a step before it
                }
                if let Some(fuse::Fused::RopeAttn { q_rope, attn, .. }) = step.fused {
                    self.rope_attention(&body, q_rope, attn, n, feed)?;
                    continue;
                }
                if self.gemm_active() && step.fused.is_some() {
                    // The prompt pass: q, k and v of one x as one group of GEMMs.
                    let len = fuse::gemm_group(&self.program, &plan[si..], select::GEMMT_MAX_SEGS);
                    let units: Vec<fuse::Fused> =
                        plan[si..si + len].iter().filter_map(|s| s.fused).collect();
                    if self.gemm_units(&units, n)? {
                        skip = len - 1;
                        continue;
                    }
                }
                // q, k and v in one segmented streamed launch on a one-token step
                // ([`fuse::triple`], `run_triple`: the same bits as their own launches);
                // where it does not apply, k and v pair below.
                if let (Some(a), Some(b), Some(c), false) = (
                    step.fused,
                    plan.get(si + 1).and_then(|s| s.fused),
                    plan.get(si + 2).and_then(|s| s.fused),
                    self.gemm_active(),
                ) {
                    if let Some(t) = fuse::triple(&self.program, &a, &b, &c) {
                        // ASSAY_ROPE_FUSE=1 (opt-in): with the rope + attention unit right after
                        // (rope_kv in the segmented launch's epilogue, the same bits).
                        if let Some(ra @ fuse::Fused::RopeAttn { .. }) =
                            plan.get(si + 3).and_then(|s| s.fused)
                        {
                            if self.run_triple_rope(t, ra, &body, n, feed)? {
                                skip = 3;
                                continue;
                            }
                        }
                        if self.run_triple(t, n)? {
                            skip = 2;
                            continue;
                        }
                    }
                }
                // k and v in one launch on the row path ([`fuse::pair`]; the same bits as
                // their own launches).
                if let (Some(a), Some(b), false) = (
                    step.fused,
                    plan.get(si + 1).and_then(|s| s.fused),
                    self.gemm_active(),
                ) {
                    if let Some(pr) = fuse::pair(&self.program, &a, &b) {
                        self.run_pair(pr, n)?;
                        skip = 1;
                        continue;
                    }
                }
                if let Some(f) = step.fused {
                    self.run_fused(f, n)?;
                    continue;
                }
                for (i, op) in body.iter().enumerate().skip(step.first).take(step.len) {
                    if let (
                        true,
                        Op::MatMul {
                            x,
                            weight,
                            bias,
                            out,
                        },
                    ) = (self.gemm_active(), op)
                    {
                        if self.gemm_matmul(*x, *weight, *bias, *out, n)? {
                            continue;
                        }
                    }
                    self.run_op(i, op, n, false, feed)?;
                }
            }
            Ok::<(), CudaError>(())
        })();
        self.plan = plan;
        self.program.body = body;
        res?;
        let h = self.program.hidden;
        let w = self.program.buffer(h).width;
        let src = self.bufs[h.0 as usize]
            .as_ref()
            .ok_or_else(|| model_err("hidden buffer missing"))?;
        let dst = self.head_bufs[h.0 as usize]
            .as_mut()
            .ok_or_else(|| model_err("hidden buffer missing"))?;
        self.gpu
            .stream()
            .memcpy_dtod(&src.slice((n - 1) * w..n * w), dst)?;
        Ok(())
    }

    /// Queue the head (one row: the last token's logits).
    fn head_pass(&mut self, feed: Feed) -> Result<(), CudaError> {
        let head = std::mem::take(&mut self.program.head);
        let base = self.program.body.len();
        let res = (|| {
            for (i, op) in head.iter().enumerate() {
                self.run_op(base + i, op, 1, true, feed)?;
            }
            Ok::<(), CudaError>(())
        })();
        self.program.head = head;
        res
    }

    /// The logits of the last token fed (downloads `n_vocab` floats).
    pub fn logits(&self) -> Result<Vec<f32>, CudaError> {
        let l = self.program.logits;
        let b = self.head_bufs[l.0 as usize]
            .as_ref()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        self.gpu.download(b)
    }

    /// The greedy token after the last token fed, computed on the device (4 bytes back).
    pub fn argmax(&mut self) -> Result<u32, CudaError> {
        self.queue_pending_mask()?;
        self.queue_argmax()?;
        self.read_argmax()
    }

    /// Queue the argmax of the logits into `argmax_out`.
    fn queue_argmax(&mut self) -> Result<(), CudaError> {
        let l = self.program.logits;
        let n = self.program.shape.n_vocab;
        let b = self.head_bufs[l.0 as usize]
            .as_ref()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        ops::argmax(&self.gpu, b, 1, n, &mut self.argmax_out)
    }

    /// Download `argmax_out` (waits for the stream).
    fn read_argmax(&self) -> Result<u32, CudaError> {
        let v = self.gpu.download(&self.argmax_out)?;
        Ok(v.first().copied().unwrap_or(0).max(0) as u32)
    }

    /// Greedy decoding: feed `prompt`, then `n` times take the argmax and feed it.
    /// Returns the `n` generated tokens.
    pub fn generate_greedy(&mut self, prompt: &[u32], n: usize) -> Result<Vec<u32>, CudaError> {
        self.prefill(prompt)?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let t = self.argmax()?;
            out.push(t);
            if i + 1 < n {
                self.forward(&[t])?;
            }
        }
        Ok(out)
    }
}
