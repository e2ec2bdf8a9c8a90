//! `assay generate`: load a model, tokenize a prompt (optionally through the model's chat
//! template), run it on a backend and stream the continuation, ending with a line of
//! prompt/generated token counts and tokens per second (stderr). `--json` prints one object
//! instead: `{"backend", "mode", "prompt_tokens", "tokens", "text", "sample_fallbacks",
//! "timings", ...}`.
//!
//! Backends ([`Backend`], resolved once by [`resolve_backend`], run through [`Exec`]): the
//! CPU reference executor, or the CUDA decoder — prompt in launches of up to 8 rows, then
//! one captured CUDA graph replayed per token (`--no-graph`: eager launches); greedy
//! without penalties takes the device argmax, anything else the device sampler, both 4
//! bytes back per token. `auto` (the default) uses CUDA when a driver and a device are
//! present and the model's formats have kernels, otherwise says why in one line and runs
//! on the CPU; `cuda` without a usable GPU is an error. The sampler (seed, draws, penalty
//! history) lives on the host for every backend, so a seed gives the same tokens on both
//! wherever the logits agree.
//!
//! Constrained output (`--json-schema FILE`, `--json-object`): llguidance's mask for the
//! next token is computed on the host before every pick ([`engine::api::constrain`]); the
//! CPU backend sets the disallowed logits to `-inf`, the CUDA backend uploads the bitmask
//! and applies it on the device before its argmax / sampler
//! ([`CudaDecoder::set_mask`]). On CUDA the step for the accepted token is queued first
//! (a graph replay without the pick: [`CudaDecoder::forward_graphed`]) so the mask is
//! computed while the GPU runs. `--json` adds `constrained`: whether the text parses, the
//! value, and the time spent computing masks, advancing the grammar, applying / uploading
//! masks and waiting for the pick.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use engine::api::constrain::{Constrained, GrammarEnv, GrammarSpec};
use engine::cuda::{CudaConfig, CudaDecoder, CudaError, Gpu, PrefillMode};
use engine::kv::{KvDtype, SeqKv};
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};
use engine::sampling::{Sampler, SamplerConfig};
use engine::tokenizer::{ChatMessage, ChatTemplate, StreamDecoder, Tokenizer};
use serde_json::json;

/// Which backend executes the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The GPU when one is usable, else the CPU (said once on stderr).
    Auto,
    /// The CPU reference executor.
    Cpu,
    /// The CUDA backend.
    Cuda,
}

/// Arguments of `assay generate`.
#[derive(clap::Args)]
pub struct Args {
    /// A GGUF model file, or the name of a catalog model; defaults to the catalog's default.
    pub model: Option<String>,
    /// Folder of fetched catalog models.
    #[arg(long, env = "ASSAY_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// The prompt text.
    #[arg(long, short = 'p')]
    pub prompt: String,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// Maximum number of tokens to generate.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 128)]
    pub max_tokens: usize,
    /// Keep generating past end-of-generation tokens (fixed-length runs).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Sampling temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling mass (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Drop tokens below this fraction of the top probability (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Repetition penalty over the last 64 tokens (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Presence penalty (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Frequency penalty (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Seed of the sampler's random numbers.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Backend: `auto` uses the GPU when a CUDA driver and device are present.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// CUDA: run every decode step eagerly instead of replaying a captured CUDA graph.
    #[arg(long)]
    pub no_graph: bool,
    /// CUDA: how the prompt is fed: `gemm` (tensor cores) or `rows` (the batched matvec,
    /// the bits of feeding it token by token); default: `ASSAY_PREFILL`, else the engine's.
    #[arg(long, value_parser = ["gemm", "rows"])]
    pub prefill: Option<String>,
    /// CUDA: run the Q4_0 / Q8_0 / BF16 / Q4_K decode products on tensor cores (`assay
    /// serve --mmv`; default: `ASSAY_MMV`, else off).
    #[arg(long)]
    pub mmv: bool,

    /// Keep up to this many MiB of weights dequantized in memory (faster decode, same
    /// results); 0 = dequantize on every step.
    #[arg(long, default_value_t = 2048)]
    pub cache_weights_mb: usize,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// Constrain the output to this JSON schema (a file; OpenAI's strict mode: objects take
    /// no extra properties unless the schema says so). llguidance computes a token mask
    /// before every pick; the CUDA backend applies it on the device. Generation ends when
    /// the grammar completes (stop `grammar`).
    #[arg(long, value_name = "FILE", conflicts_with = "json_object")]
    pub json_schema: Option<PathBuf>,
    /// Constrain the output to any JSON object.
    #[arg(long)]
    pub json_object: bool,
    #[command(flatten)]
    pub spec: crate::spec_cli::SpecArgs,
}

/// Tokenize the prompt as the run asks: plain (BOS as the model's metadata says) or
/// through the chat template (control tokens in the rendered text become their ids; no
/// second BOS when the template already wrote one).
fn prompt_tokens(args: &Args, model: &GgufModel, tok: &Tokenizer) -> anyhow::Result<Vec<u32>> {
    if !args.chat {
        return Ok(tok.encode(&args.prompt, true, false)?);
    }
    let template = ChatTemplate::for_model(model.header())?;
    let messages = [ChatMessage {
        role: "user".into(),
        content: args.prompt.clone(),
    }];
    let text = template.render(&messages, None, true)?;
    let starts_with_bos = tok
        .bos_id()
        .and_then(|b| tok.token_text(b))
        .is_some_and(|b| !b.is_empty() && text.starts_with(b));
    Ok(tok.encode(&text, !starts_with_bos, true)?)
}

/// The backend a run uses, after probing for a GPU.
pub(crate) enum Resolved {
    Cpu,
    Cuda(Arc<Gpu>),
}

/// The cubin cache of the `assay` binary: `~/.cache/assay/cubins`.
fn cuda_config() -> CudaConfig {
    CudaConfig {
        cubin_cache_dir: std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".cache/assay/cubins")),
        ..CudaConfig::default()
    }
}

/// Pick the backend: `auto` takes the GPU when a driver and a device are present, else
/// says so in one line and takes the CPU; `cuda` without a usable GPU is an error.
pub(crate) fn resolve_backend(backend: Backend) -> anyhow::Result<Resolved> {
    match backend {
        Backend::Cpu => Ok(Resolved::Cpu),
        Backend::Cuda => match Gpu::open(&cuda_config()) {
            Ok(g) => Ok(Resolved::Cuda(Arc::new(g))),
            Err(CudaError::NoDriver) => {
                bail!("--backend cuda: no CUDA driver found on this machine (use --backend cpu)")
            }
            Err(e) => Err(anyhow::Error::new(e).context("--backend cuda: cannot open the GPU")),
        },
        Backend::Auto => {
            if !engine::cuda::driver_present() {
                eprintln!("no CUDA driver found; using the CPU backend");
                return Ok(Resolved::Cpu);
            }
            match Gpu::open(&cuda_config()) {
                Ok(g) => Ok(Resolved::Cuda(Arc::new(g))),
                Err(e) => {
                    eprintln!("CUDA unavailable ({e}); using the CPU backend");
                    Ok(Resolved::Cpu)
                }
            }
        }
    }
}

/// A model loaded on its backend, with the state of the one sequence being generated.
enum Exec {
    Cpu {
        exec: Box<Reference>,
        kv: SeqKv,
    },
    Cuda {
        dec: Box<CudaDecoder>,
        /// Replay the captured one-token step (else eager launches).
        graph: bool,
        /// Greedy without penalties: the device argmax; else the device sampler.
        argmax: bool,
    },
}

impl Exec {
    fn name(&self) -> &'static str {
        match self {
            Exec::Cpu { .. } => "cpu",
            Exec::Cuda { .. } => "cuda",
        }
    }

    /// Feed the prompt and choose the first token.
    fn first(&mut self, prompt: &[u32], sampler: &mut Sampler) -> anyhow::Result<u32> {
        match self {
            Exec::Cpu { exec, kv } => Ok(sampler.sample(&exec.step(kv, prompt)?)),
            Exec::Cuda { dec, argmax, .. } => {
                dec.prefill(prompt)?;
                Ok(if *argmax {
                    dec.argmax()?
                } else {
                    dec.sample(sampler)?
                })
            }
        }
    }

    /// Feed the accepted `token` and choose the next.
    fn next(&mut self, token: u32, sampler: &mut Sampler) -> anyhow::Result<u32> {
        match self {
            Exec::Cpu { exec, kv } => Ok(sampler.sample(&exec.step(kv, &[token])?)),
            Exec::Cuda { dec, graph, argmax } => Ok(match (*graph, *argmax) {
                (true, true) => dec.step_graphed(token)?,
                (true, false) => dec.step_graphed_sampled(token, sampler)?,
                (false, true) => {
                    dec.forward(&[token])?;
                    dec.argmax()?
                }
                (false, false) => {
                    dec.forward(&[token])?;
                    dec.sample(sampler)?
                }
            }),
        }
    }
}

/// Cumulative costs of constrained decoding (seconds), for `--json`.
#[derive(Default)]
struct MaskTimes {
    /// llguidance computing the masks (CPU).
    mask_s: f64,
    /// llguidance advancing the grammar by each token (CPU).
    commit_s: f64,
    /// Queueing the mask upload (CUDA) or applying it to the logits (CPU).
    apply_s: f64,
    /// Waiting for the pick after the mask was applied (the rest of the GPU step).
    pick_s: f64,
    masks: usize,
}

impl Exec {
    /// Pick the next token with `c`'s mask applied, the logits of the last fed token being
    /// computed (CUDA: possibly still running on the device while the mask is computed).
    fn pick_masked(
        &mut self,
        fed: Option<&[u32]>,
        c: &mut Constrained,
        sampler: &mut Sampler,
        t: &mut MaskTimes,
    ) -> anyhow::Result<u32> {
        match self {
            Exec::Cpu { exec, kv } => {
                let mut logits = exec.step(kv, fed.unwrap_or(&[]))?;
                let t0 = Instant::now();
                let mask = c.mask()?;
                t.mask_s += t0.elapsed().as_secs_f64();
                let t1 = Instant::now();
                mask.apply(&mut logits);
                t.apply_s += t1.elapsed().as_secs_f64();
                t.masks += 1;
                Ok(sampler.sample(&logits))
            }
            Exec::Cuda { dec, argmax, .. } => {
                let t0 = Instant::now();
                let mask = c.mask()?;
                t.mask_s += t0.elapsed().as_secs_f64();
                let t1 = Instant::now();
                dec.set_mask(mask.words())?;
                t.apply_s += t1.elapsed().as_secs_f64();
                t.masks += 1;
                let t2 = Instant::now();
                let tok = if *argmax {
                    dec.argmax()?
                } else {
                    dec.sample(sampler)?
                };
                t.pick_s += t2.elapsed().as_secs_f64();
                Ok(tok)
            }
        }
    }

    /// Constrained: feed the prompt and choose the first token under the grammar's mask.
    fn first_masked(
        &mut self,
        prompt: &[u32],
        c: &mut Constrained,
        sampler: &mut Sampler,
        t: &mut MaskTimes,
    ) -> anyhow::Result<u32> {
        match self {
            Exec::Cpu { .. } => self.pick_masked(Some(prompt), c, sampler, t),
            Exec::Cuda { dec, .. } => {
                dec.prefill(prompt)?;
                self.pick_masked(None, c, sampler, t)
            }
        }
    }

    /// Constrained: feed the accepted `token` (on CUDA the step is queued, graphed or
    /// eager, and the mask computed while it runs) and choose the next under the mask.
    fn next_masked(
        &mut self,
        token: u32,
        c: &mut Constrained,
        sampler: &mut Sampler,
        t: &mut MaskTimes,
    ) -> anyhow::Result<u32> {
        match self {
            Exec::Cpu { .. } => self.pick_masked(Some(&[token]), c, sampler, t),
            Exec::Cuda { dec, graph, .. } => {
                if *graph {
                    dec.forward_graphed(token)?;
                } else {
                    dec.forward(&[token])?;
                }
                self.pick_masked(None, c, sampler, t)
            }
        }
    }
}

/// The grammar `--json-schema` / `--json-object` ask for, if any.
fn grammar_spec(args: &Args) -> anyhow::Result<Option<GrammarSpec>> {
    if let Some(p) = &args.json_schema {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("cannot read the JSON schema {}", p.display()))?;
        let schema: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
        return Ok(Some(GrammarSpec::JsonSchema {
            schema,
            strict: true,
        }));
    }
    Ok(args.json_object.then_some(GrammarSpec::JsonObject))
}

/// Load the model's program on the resolved backend (`capacity`: KV positions needed).
fn load_exec(
    backend: &Resolved,
    args: &Args,
    model: &Arc<GgufModel>,
    path: &std::path::Path,
    cfg: &SamplerConfig,
    capacity: usize,
) -> anyhow::Result<Exec> {
    match backend {
        Resolved::Cpu => {
            let options = ReferenceOptions {
                threads: args.threads,
                kv_dtype: KvDtype::F16,
            };
            let mut exec = Reference::new(model.clone(), options)
                .with_context(|| format!("cannot run {}", path.display()))?;
            exec.cache_weights(args.cache_weights_mb.saturating_mul(1 << 20))?;
            let kv = exec.new_cache();
            Ok(Exec::Cpu {
                exec: Box::new(exec),
                kv,
            })
        }
        Resolved::Cuda(gpu) => {
            let program = engine::arch::build_program(model.header())
                .with_context(|| format!("cannot run {}", path.display()))?;
            let mut dec = CudaDecoder::new(gpu.clone(), model, program, capacity)
                .with_context(|| format!("cannot load {} on the GPU", path.display()))?;
            if let Some(mode) = args.prefill.as_deref().and_then(PrefillMode::parse) {
                dec.set_prefill(mode);
            }
            if args.mmv {
                dec.set_mmv(true)
                    .with_context(|| format!("cannot run {} on tensor cores", path.display()))?;
            }
            let argmax = cfg.temperature <= 0.0
                && cfg.repeat_penalty == 1.0
                && cfg.presence_penalty == 0.0
                && cfg.frequency_penalty == 0.0;
            Ok(Exec::Cuda {
                dec: Box::new(dec),
                graph: !args.no_graph,
                argmax,
            })
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let backend = resolve_backend(args.backend)?;
    let t_load = Instant::now();
    let path = crate::common::resolve_model(args.model.as_deref(), args.models_dir.clone())?;
    let model =
        GgufModel::open(&path).with_context(|| format!("cannot open model {}", path.display()))?;
    // The program first: an unsupported or inconsistent model is reported as such even
    // when its tokenizer is missing too.
    let model = Arc::new(model);
    let cfg = SamplerConfig {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        seed: args.seed,
        ..SamplerConfig::default()
    };
    let program = engine::arch::build_program(model.header())
        .with_context(|| format!("cannot run {}", path.display()))?;
    let tok = Tokenizer::from_gguf(model.header())
        .with_context(|| format!("cannot read the tokenizer of {}", path.display()))?;
    let prompt = prompt_tokens(&args, &model, &tok)?;
    let spec = grammar_spec(&args)?;
    let mut constrained = match &spec {
        Some(spec) => {
            let env = GrammarEnv::new(&tok, program.shape.n_vocab)?;
            Some(env.compile(spec)?)
        }
        None => None,
    };
    if prompt.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    let n_ctx = program.shape.n_ctx_train;
    if n_ctx > 0 && prompt.len() + args.max_tokens > n_ctx {
        bail!(
            "prompt ({} tokens) + {} new tokens exceed the model's context of {n_ctx}",
            prompt.len(),
            args.max_tokens
        );
    }
    let capacity = prompt.len() + args.max_tokens;
    let mut exec = match load_exec(&backend, &args, &model, &path, &cfg, capacity) {
        Err(e) if args.backend == Backend::Auto && matches!(backend, Resolved::Cuda(_)) => {
            eprintln!("CUDA cannot run this model ({e:#}); using the CPU backend");
            load_exec(&Resolved::Cpu, &args, &model, &path, &cfg, capacity)?
        }
        r => r?,
    };
    let load_s = t_load.elapsed().as_secs_f64();

    let mut sampler = Sampler::new(cfg);
    for &t in &prompt {
        sampler.accept(t);
    }
    if args.spec.spec.is_some() {
        if constrained.is_some() {
            bail!("--spec does not take --json-schema / --json-object yet");
        }
        let cpu_exec: Box<Reference>;
        let exec = match (exec, &backend) {
            (Exec::Cpu { exec, .. }, _) => {
                cpu_exec = exec;
                crate::spec_cli::SpecExec::Cpu(&cpu_exec)
            }
            (Exec::Cuda { dec, graph, .. }, Resolved::Cuda(gpu)) => {
                crate::spec_cli::SpecExec::Cuda {
                    dec,
                    gpu: gpu.clone(),
                    graph,
                    capacity,
                }
            }
            (Exec::Cuda { .. }, Resolved::Cpu) => bail!("internal: a CUDA executor without a GPU"),
        };
        let prepared = crate::spec_cli::Prepared {
            exec,
            model: &model,
            tok: &tok,
            prompt: &prompt,
            sampler,
            load_s,
            model_path: path.display().to_string(),
        };
        return crate::spec_cli::run(&args, prepared);
    }
    let mut stream = StreamDecoder::new(&tok);
    let mut out = std::io::stdout().lock();
    let mut generated = Vec::new();
    let mut text = String::new();
    let mut stop = "length";

    let mut mt = MaskTimes::default();
    let t_prefill = Instant::now();
    let mut next = match constrained.as_mut() {
        Some(c) => exec.first_masked(&prompt, c, &mut sampler, &mut mt)?,
        None => exec.first(&prompt, &mut sampler)?,
    };
    let prefill_s = t_prefill.elapsed().as_secs_f64();
    let t_decode = Instant::now();
    while generated.len() < args.max_tokens {
        if tok.is_eog(next) && !args.ignore_eos {
            stop = "eog";
            break;
        }
        sampler.accept(next);
        generated.push(next);
        let piece = stream.push(next)?;
        if !args.json {
            write!(out, "{piece}")?;
            out.flush()?;
        }
        text.push_str(&piece);
        if let Some(c) = constrained.as_mut() {
            let t0 = Instant::now();
            c.commit(next)?;
            mt.commit_s += t0.elapsed().as_secs_f64();
            if c.is_stopped() {
                stop = "grammar";
                break;
            }
        }
        if generated.len() == args.max_tokens {
            break;
        }
        next = match constrained.as_mut() {
            Some(c) => exec.next_masked(next, c, &mut sampler, &mut mt)?,
            None => exec.next(next, &mut sampler)?,
        };
    }
    let tail = stream.finish();
    text.push_str(&tail);
    let decode_s = t_decode.elapsed().as_secs_f64();
    // The first generated token comes from the prefill's logits; the decode rate counts
    // the forward passes made after it.
    let decode_steps = generated.len().saturating_sub(1);
    let prefill_tps = prompt.len() as f64 / prefill_s.max(1e-9);
    let decode_tps = decode_steps as f64 / decode_s.max(1e-9);
    let (mode, fallbacks) = match &exec {
        Exec::Cpu { .. } => ("reference", 0),
        Exec::Cuda { dec, graph, .. } => (
            if *graph { "graphed" } else { "eager" },
            dec.sample_fallbacks(),
        ),
    };
    let constraint = spec.as_ref().map(|spec| {
        let parsed = serde_json::from_str::<serde_json::Value>(text.trim()).ok();
        json!({
            "grammar": match spec {
                GrammarSpec::JsonObject => "json_object",
                GrammarSpec::JsonSchema { .. } => "json_schema",
                GrammarSpec::Lark(_) => "lark",
            },
            "parses": parsed.is_some(),
            "value": parsed,
            "masks": mt.masks,
            "mask_s": mt.mask_s,
            "commit_s": mt.commit_s,
            "apply_s": mt.apply_s,
            "pick_s": mt.pick_s,
        })
    });
    if args.json {
        let obj = json!({
            "model": path.display().to_string(),
            "backend": exec.name(),
            "mode": mode,
            "prompt_tokens": prompt,
            "tokens": generated,
            "text": text,
            "stop": stop,
            "sample_fallbacks": fallbacks,
            "constrained": constraint,
            "timings": {
                "load_s": load_s,
                "prefill_s": prefill_s,
                "decode_s": decode_s,
                "prefill_tokens_per_s": prefill_tps,
                "decode_tokens_per_s": decode_tps,
            },
        });
        writeln!(out, "{obj}")?;
    } else {
        writeln!(out, "{tail}")?;
        eprintln!(
            "prompt: {} tokens in {prefill_s:.2}s ({prefill_tps:.1} tok/s) | generated: {} tokens in {decode_s:.2}s ({decode_tps:.1} tok/s) | backend: {} ({mode}) | stop: {stop}",
            prompt.len(),
            generated.len(),
            exec.name(),
        );
    }
    Ok(())
}
