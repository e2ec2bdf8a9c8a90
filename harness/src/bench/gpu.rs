//! The CUDA engine as a bench arm: greedy decode with the captured one-token graph (the
//! decode path as shipped), warm-up discarded, and the device bandwidth measured in the
//! same run by a large device-to-device copy.
//!
//! A cell with `json_schema` decodes under the schema's llguidance token masks, as `assay
//! generate --json-schema` does on CUDA: each step replays the forward graph for the
//! accepted token, computes the next mask on the host while the GPU runs, uploads it, and
//! takes the masked device argmax; the receipt's detail splits the time per token into mask
//! computation, grammar advance, upload and the wait for the pick.
//!
//! A decode cell with `batch` B > 1 times batched decode (issue 8): B sequences (distinct
//! prompts of the cell's length), each on its own decoder sharing one upload of the
//! weights, prefilled one by one, then `gen_tokens` batched device steps
//! ([`CudaDecoder::forward_batch_argmax`]: by default one captured CUDA graph per row count,
//! eager with `ASSAY_BATCH_GRAPH=0`; the receipt's `graph=` flag says which ran); the sample
//! is the aggregate rate, `B * gen_tokens` over the time of the batched steps.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use engine::api::constrain::{GrammarEnv, GrammarSpec};
use engine::cuda::{CudaConfig, CudaDecoder, Gpu};
use engine::model_file::GgufModel;
use engine::tokenizer::Tokenizer;

use super::arms::ArmRun;
use super::cells::{Cell, Mode};
use super::runner::{Measured, SameTokens, prompt};
use gates::receipt::Stats;

/// Open the GPU (kernels compiled or loaded from `cubin_cache`).
pub fn open_gpu(cubin_cache: Option<std::path::PathBuf>) -> Result<Arc<Gpu>> {
    let cfg = CudaConfig {
        cubin_cache_dir: cubin_cache,
        ..CudaConfig::default()
    };
    Ok(Arc::new(Gpu::open(&cfg).context("opening the GPU")?))
}

/// Device bandwidth: best of `reps` device-to-device copies of `bytes`, read + write
/// counted.
pub fn d2d_bandwidth(gpu: &Gpu, bytes: usize, reps: usize) -> Result<(f64, String)> {
    let src = gpu
        .zeros::<u8>(bytes)
        .context("allocating the copy source")?;
    let mut dst = gpu
        .zeros::<u8>(bytes)
        .context("allocating the copy destination")?;
    let mut best = f64::INFINITY;
    // One untimed copy first (first-touch, clocks up).
    for i in 0..=reps.max(1) {
        gpu.synchronize()?;
        let t = Instant::now();
        gpu.stream()
            .memcpy_dtod(&src, &mut dst)
            .context("device copy")?;
        gpu.synchronize()?;
        if i > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    Ok((
        2.0 * bytes as f64 / best.max(1e-12),
        format!(
            "device-to-device copy {} MiB, best of {}, read+write counted",
            bytes >> 20,
            reps.max(1)
        ),
    ))
}

/// The CUDA decoder ready to time `cell`: each run prefills the prompt eagerly, then
/// makes `gen_tokens` graphed greedy steps; every run must generate the same tokens.
pub struct GpuArm {
    dec: CudaDecoder,
    /// The other sequences of a batched cell (rows 1.. of each step; row 0 is `dec`).
    rows: Vec<CudaDecoder>,
    cell: Cell,
    prompt: Vec<u32>,
    capacity: usize,
    same: SameTokens,
    grammar: Option<Grammar>,
}

/// A constrained cell's grammar and what its runs measured.
struct Grammar {
    env: GrammarEnv,
    spec: GrammarSpec,
    /// Seconds per run: mask computation, grammar advance, upload, wait for the pick.
    split: Vec<[f64; 4]>,
    /// Tokens per run and whether the grammar completed.
    made: Vec<(usize, bool)>,
}

impl GpuArm {
    pub fn new(gpu: &Arc<Gpu>, path: &Path, cell: &Cell, root: &Path) -> Result<GpuArm> {
        if cell.batch != 1 && (cell.mode != Mode::Decode || cell.json_schema.is_some()) {
            bail!(
                "cell {}: batch > 1 is a plain decode cell on the CUDA decoder",
                cell.id
            );
        }
        let model = GgufModel::open(path).with_context(|| format!("opening {}", path.display()))?;
        let program =
            engine::arch::build_program(model.header()).context("building the program")?;
        let vocab = program.shape.n_vocab;
        let capacity = cell.prompt_tokens + cell.gen_tokens + 8;
        let mut dec = CudaDecoder::new(Arc::clone(gpu), &model, program, capacity)
            .context("uploading the weights")?;
        if let Some(on) = cell.mmv {
            dec.set_mmv(on)
                .context("choosing the decode products' kernels")?;
            if on && !dec.mmv_on() {
                bail!(
                    "cell {}: mmv = true needs the tensor-core MMA (sm_80 or newer)",
                    cell.id
                );
            }
        }
        dec.capture_step().context("capturing the step graph")?;
        let rows = (1..cell.batch.max(1))
            .map(|_| dec.share(capacity))
            .collect::<Result<Vec<_>, _>>()
            .context("a decoder per batch row")?;
        let grammar = match &cell.json_schema {
            None => None,
            Some(f) => {
                let file = root.join(f);
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("cell {}: reading {}", cell.id, file.display()))?;
                let schema: serde_json::Value = serde_json::from_str(&text)
                    .with_context(|| format!("cell {}: {} is not JSON", cell.id, file.display()))?;
                let tok = Tokenizer::from_gguf(model.header())
                    .with_context(|| format!("cell {}: the model's tokenizer", cell.id))?;
                let env = GrammarEnv::new(&tok, vocab)?;
                let spec = GrammarSpec::JsonSchema {
                    schema,
                    strict: true,
                };
                // Compile once here so a schema llguidance refuses fails the cell early.
                env.compile(&spec)?;
                Some(Grammar {
                    env,
                    spec,
                    split: Vec::new(),
                    made: Vec::new(),
                })
            }
        };
        Ok(GpuArm {
            dec,
            rows,
            cell: cell.clone(),
            prompt: prompt(cell.prompt_tokens, vocab),
            capacity,
            same: SameTokens::default(),
            grammar,
        })
    }

    /// One constrained run: prefill, then masked greedy steps until the grammar completes
    /// or `gen_tokens`; tok/s over the tokens made after the first.
    fn once_constrained(&mut self) -> Result<f64> {
        let Some(g) = self.grammar.as_mut() else {
            bail!("no grammar");
        };
        // Compiling the grammar is per request and outside the decode loop.
        let mut c = g.env.compile(&g.spec)?;
        let dec = &mut self.dec;
        let mut split = [0f64; 4];
        let pick = |dec: &mut CudaDecoder,
                    c: &mut engine::api::constrain::Constrained,
                    split: &mut [f64; 4]|
         -> Result<u32> {
            let t = Instant::now();
            let mask = c.mask()?;
            split[0] += t.elapsed().as_secs_f64();
            let t = Instant::now();
            dec.set_mask(mask.words())?;
            split[2] += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let tok = dec.argmax()?;
            split[3] += t.elapsed().as_secs_f64();
            Ok(tok)
        };
        dec.reset();
        dec.prefill(&self.prompt).context("prefill")?;
        let mut tok = pick(dec, &mut c, &mut split)?;
        let mut out = vec![tok];
        let mut complete = false;
        let t0 = Instant::now();
        let mut split = [0f64; 4];
        while out.len() < self.cell.gen_tokens {
            let t = Instant::now();
            c.commit(tok)?;
            split[1] += t.elapsed().as_secs_f64();
            if c.is_stopped() {
                complete = true;
                break;
            }
            dec.forward_graphed(tok).context("graphed forward")?;
            tok = pick(dec, &mut c, &mut split)?;
            out.push(tok);
        }
        let decode_s = t0.elapsed().as_secs_f64();
        let steps = out.len().saturating_sub(1);
        if steps == 0 {
            bail!(
                "cell {}: the grammar completed after one token",
                self.cell.id
            );
        }
        g.split.push(split.map(|v| v / steps as f64));
        g.made.push((out.len(), complete));
        self.same.check(&self.cell.id, out)?;
        Ok(steps as f64 / decode_s.max(1e-9))
    }

    /// Row `i`'s prompt of a batched cell: the cell's prompt with every id shifted by `i`
    /// (within the vocabulary), so that the rows decode different sequences.
    fn row_prompt(&self, i: usize) -> Vec<u32> {
        let vocab = self.dec.program().shape.n_vocab.max(1);
        self.prompt
            .iter()
            .map(|&t| ((t as usize + 131 * i) % vocab) as u32)
            .collect()
    }

    /// One batched run: every row prefilled, then `gen_tokens` batched steps; aggregate
    /// tok/s over the batched steps.
    fn once_batched(&mut self) -> Result<f64> {
        let gen_tokens = self.cell.gen_tokens;
        let prompts: Vec<Vec<u32>> = (0..=self.rows.len()).map(|i| self.row_prompt(i)).collect();
        let mut last = Vec::with_capacity(prompts.len());
        {
            let decs = std::iter::once(&mut self.dec).chain(self.rows.iter_mut());
            for (d, p) in decs.zip(&prompts) {
                d.reset();
                d.prefill(p).context("prefill")?;
                last.push(d.argmax().context("argmax")?);
            }
        }
        let mut out = last.clone();
        let t = Instant::now();
        for _ in 0..gen_tokens {
            let mut decs: Vec<&mut CudaDecoder> = std::iter::once(&mut self.dec)
                .chain(self.rows.iter_mut())
                .collect();
            last = CudaDecoder::forward_batch_argmax(&mut decs, &last).context("batched step")?;
            out.extend_from_slice(&last);
        }
        let decode_s = t.elapsed().as_secs_f64();
        self.same.check(&self.cell.id, out)?;
        Ok((prompts.len() * gen_tokens) as f64 / decode_s.max(1e-9))
    }

    fn once(&mut self) -> Result<f64> {
        if self.grammar.is_some() {
            return self.once_constrained();
        }
        if !self.rows.is_empty() {
            return self.once_batched();
        }
        let cell = &self.cell;
        self.dec.reset();
        let t = Instant::now();
        self.dec.prefill(&self.prompt).context("prefill")?;
        let mut tok = self.dec.argmax().context("argmax")?;
        let prefill_s = t.elapsed().as_secs_f64();
        let mut out = vec![tok];
        let t = Instant::now();
        for _ in 0..cell.gen_tokens {
            tok = self.dec.step_graphed(tok).context("graphed step")?;
            out.push(tok);
        }
        let decode_s = t.elapsed().as_secs_f64();
        self.same.check(&cell.id, out)?;
        Ok(match cell.mode {
            Mode::Decode => cell.gen_tokens as f64 / decode_s.max(1e-9),
            Mode::Prefill => cell.prompt_tokens as f64 / prefill_s.max(1e-9),
            Mode::Serve => bail!("cell {}: serve cells run through assay serve", cell.id),
        })
    }

    /// How the samples were made, with `samples` (warm-up excluded).
    pub fn measured(&self, samples: Vec<f64>) -> Measured {
        let mut kernels: Vec<String> = self
            .dec
            .kernel_choices()
            .into_iter()
            .map(|(_, k)| k)
            .collect();
        kernels.sort();
        kernels.dedup();
        let mut flags = vec![
            "graph=step".into(),
            "kv=f16".into(),
            format!("warmup={}", self.cell.warmup),
            format!("capacity={}", self.capacity),
            format!("prefill={}", self.dec.prefill_mode().name()),
        ];
        if self.dec.prefill_mode() == engine::cuda::PrefillMode::Gemm {
            // The prompt pass's kernel, rows per pass, and x's parts (hi + lo or 16 bits).
            flags.push(format!("gemm={}", self.dec.gemm_kernel()));
            flags.push(format!("pass={}", self.dec.prefill_pass_rows()));
            // x in one 16-bit part (the tiled kernel's default for f16-decoded weights
            // since session 11), or hi + lo (no flag, as before).
            if self.dec.prefill_x_parts() == Some(1) {
                flags.push("x=16bit".into());
            }
            if let Some(m) = self.dec.prefill_tile_m() {
                flags.push(format!("tile={m}"));
            }
            // The prompt pass's attention on the decode kernel (ASSAY_PREFILL_ATTN=split;
            // the default since session 11 is the tensor-core attention where the head
            // size has it).
            // A variant other than the default (ASSAY_PREFILL_ATTN=flash|flash2|flash3|flash4; the
            // default is flash3 on sm_90: flash4 lost its A/B in session 18) records its name.
            match self.dec.prefill_attn_variant() {
                None => flags.push("attn=split".into()),
                Some(v) if v != engine::cuda::select::DEFAULT_PREFILL_ATTN => {
                    flags.push(format!("attn={}", v.name()))
                }
                Some(_) => {}
            }
            // Q4_0 / Q8_0 decoded into the scratch first (ASSAY_GEMMT_FUSED=0).
            if !self.dec.prefill_fused_decode() {
                flags.push("decode=scratch".into());
            }
            // The warpgroup-MMA GEMM forced on or off (ASSAY_GEMMT_WGMMA; the default, on
            // sm_90a for x in one part, records nothing).
            if let Some(on) = self.dec.prefill_wgmma() {
                flags.push(format!("wgmma={}", if on { "on" } else { "off" }));
            }
            // Section 4's TMA warpgroup-MMA GEMM forced on or off (ASSAY_GEMMT_TM; the default,
            // on where select::gemmt_tm allows, records nothing).
            if let Some(on) = self.dec.prefill_tm() {
                flags.push(format!("tm={}", if on { "on" } else { "off" }));
            }
        }
        if self.dec.mmv_on() {
            // ASSAY_MMV=1 / staged: the Q4_0 / Q8_0 decode products on tensor cores (mmv.cu).
            flags.push(format!("mmv={}", self.dec.mmv_mode()));
        }
        // The streamed one-token matvec forced on or off (ASSAY_MV_WR; the default, the
        // engine's choice, records nothing).
        if let Some(on) = self.dec.matvec_wr() {
            flags.push(format!("mv_wr={}", if on { "on" } else { "off" }));
        }
        // q, k and v in one streamed launch forced on or off (ASSAY_MV_QKV; the default
        // records nothing).
        if let Some(on) = self.dec.matvec_qkv() {
            flags.push(format!("mv_qkv={}", if on { "on" } else { "off" }));
        }
        // rope_kv in the q / k / v launch's epilogue (ASSAY_ROPE_FUSE=1, opt-in since
        // engine21, records rope_fuse=on; the default, off, records nothing). Engine19's
        // receipts ran it on by default and recorded rope_fuse=off when off.
        if self.dec.rope_fuse() {
            flags.push("rope_fuse=on".into());
        }
        let mut detail = vec![
            self.same.detail(),
            format!("matvec kernels: {}", kernels.join(", ")),
            format!(
                "weights on device: {:.3} GB",
                self.dec.weight_bytes() as f64 / 1e9
            ),
            format!(
                "prompt-pass buffers on device: {:.1} MB",
                self.dec.prefill_buffer_bytes() as f64 / 1e6
            ),
        ];
        if !self.rows.is_empty() {
            // The batched step as CUDA graphs (the default since session 19; eager with
            // ASSAY_BATCH_GRAPH=0 or when a capture failed): what the workspace holds after
            // the runs says which ran (one workspace per upload of the weights, shared by
            // every decoder of the cell).
            let stats = self.dec.batch_graph_stats();
            let (held, failed) = (stats.held, stats.failed);
            let (graph, launches) = match (held, failed) {
                (0, 0) => (
                    "graph=none (batched decode, eager)".to_string(),
                    "eager launches, no graph".to_string(),
                ),
                (_, 0) => (
                    "graph=batch (batched decode, one CUDA graph per row count)".to_string(),
                    "the step captured once as a CUDA graph per row count and replayed".to_string(),
                ),
                (0, f) => (
                    format!("graph=none (batched decode, eager: {f} captures failed)"),
                    format!("eager launches: {f} graph captures failed"),
                ),
                (h, f) => (
                    format!("graph=partial (batched decode, {f} captures failed: eager)"),
                    format!("{h} CUDA graphs held, {f} captures failed (those steps eager)"),
                ),
            };
            flags[0] = graph;
            flags.push(format!("batch={}", self.rows.len() + 1));
            detail.push(format!(
                "batched decode: {} sequences on one upload of the weights, distinct prompts, \
                 each prefilled alone, then one batched device step per token for all of them \
                 (one launch per fusion unit over all rows of a group of up to 64: the weights \
                 read once per step; RoPE + KV store and attention one launch each per layer \
                 for all rows through per-row KV pointer tables; {launches}); \
                 tok/s = all sequences' tokens over the batched steps",
                self.rows.len() + 1
            ));
            detail.push(format!(
                "batch workspace on device: {:.1} MB",
                self.dec.batch_buffer_bytes() as f64 / 1e6
            ));
            detail.push(format!(
                "batched step graphs: {} captures, {} replays, {} evictions, {} held, {} \
                 captures failed",
                stats.captures, stats.replays, stats.evictions, stats.held, stats.failed
            ));
        }
        if let Some(g) = &self.grammar {
            flags[0] = "graph=forward+mask+argmax".into();
            flags.push("mask=device".into());
            // Timed runs only (the warm-up runs come first).
            let skip = g.split.len().saturating_sub(samples.len());
            let ms = |i: usize| {
                let v: Vec<f64> = g.split[skip..].iter().map(|s| s[i] * 1e3).collect();
                Stats::of(&v).map_or(f64::NAN, |s| s.median)
            };
            if let Some((n, complete)) = g.made.last() {
                detail.push(format!(
                    "constrained: {n} tokens per run, grammar {}",
                    if *complete {
                        "complete"
                    } else {
                        "cut at gen_tokens"
                    }
                ));
            }
            detail.push(format!(
                "per token, median of the timed runs: mask {:.4} ms (llguidance, CPU, overlapping the GPU step), \
                 grammar advance {:.4} ms, mask upload queued {:.4} ms, wait for the masked argmax {:.4} ms",
                ms(0),
                ms(1),
                ms(2),
                ms(3)
            ));
        }
        Measured {
            samples,
            version: env!("CARGO_PKG_VERSION").into(),
            engine: "assay-cuda".into(),
            flags,
            detail,
            kv_bytes: 2.0,
        }
    }
}

impl ArmRun for GpuArm {
    fn run(&mut self, n: usize) -> Result<Vec<f64>> {
        (0..n).map(|_| self.once()).collect()
    }
}
