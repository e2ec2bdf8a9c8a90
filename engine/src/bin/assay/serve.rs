//! `assay serve`: the OpenAI-compatible HTTP server over one or more models
//! (`--model [ALIAS=]PATH`, paths or catalog names), each run by its own scheduler on the
//! CPU reference backend or the CUDA backend (`--backend auto|cpu|cuda`, resolved as
//! `assay generate` does: `auto` falls back to the CPU when no GPU is usable, or when CUDA
//! cannot run the model). On CUDA the weights are uploaded once per model and every
//! sequence gets its own device KV cache sized from its request; the default KV budget is
//! 80% of the GPU's free memory after the upload. `/ready` answers only after the weights
//! are loaded and a warm-up step ran. Prints the bound address on stderr; SIGTERM or
//! ctrl-c drains (stops admitting, lets running streams finish within `--drain-s`) and
//! exits.
//!
//! `--spec [ALIAS=]ngram|draft:PATH` makes a model decode speculatively (every model when
//! no alias is given; `--spec-k`, `--spec-fixed`, `--spec-policy`, `--spec-confidence`,
//! `--spec-greedy-only` apply to every speculating model): greedy requests get exactly the
//! tokens of plain decoding, sampled ones rejection sampling (see `engine::scheduler::spec`);
//! acceptance per draft position is on `/metrics`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use engine::kv::KvDtype;
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};
use engine::scheduler::{
    self, CpuExecutor, CudaDraftFactory, CudaExecutor, NgramFactory, ProposerFactory,
    ReferenceDraftFactory, SchedulerConfig, SpecPolicy, SpecServe,
};
use engine::server::{AppState, KeySet, Metrics, ServedModel, ServerConfig};
use engine::tokenizer::{ChatTemplate, Tokenizer};

use crate::generate::{Backend, Resolved, resolve_backend};
use crate::spec_cli::Policy;
use engine::cuda::Gpu;

/// Arguments of `assay serve`.
#[derive(clap::Args)]
pub struct Args {
    /// `[ALIAS=]PATH` of a GGUF model, or a catalog name; repeat for several models
    /// (default: the catalog's default model).
    #[arg(long = "model", short = 'm')]
    pub models: Vec<String>,
    /// Folder of fetched catalog models.
    #[arg(long, env = "ASSAY_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind (0 = any free port; the bound address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Context size (default: the model's training context).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// File of SHA-256 hashes of accepted API keys (`assay keys new`); without it, no auth.
    #[arg(long)]
    pub api_keys: Option<PathBuf>,
    /// KV cache memory per model, MiB (default: 1024 on the CPU; on CUDA 80% of the GPU's
    /// free memory after the weights are uploaded).
    #[arg(long)]
    pub kv_mb: Option<usize>,
    /// Backend: `auto` uses the GPU when a CUDA driver and device are present.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// CUDA: run every decode step eagerly instead of replaying a captured CUDA graph (but
    /// the batched step of --batched-decode: graphed unless `ASSAY_BATCH_GRAPH=0`).
    #[arg(long)]
    pub no_graph: bool,
    /// CUDA: decode the sequences of a step in one batched device step (each weight read
    /// once per group of up to 64 sequences; a sequence's tokens are those it gets alone,
    /// gate `batch`) instead of one after another; that step runs as one captured CUDA graph
    /// per group of sequences (captured anew when the group changes; `ASSAY_BATCH_GRAPH=0`:
    /// eager launches). Opt-in for now; the CPU backend always runs a step as one batch.
    #[arg(long)]
    pub batched_decode: bool,
    /// CUDA: run the Q4_0 / Q8_0 / BF16 / Q4_K decode products on tensor cores (one
    /// arithmetic for 1..64 rows; default: `ASSAY_MMV`, else off): with --batched-decode a
    /// step of many sequences is several times faster, a lone sequence about half as fast
    /// (board batch-h200's `-mmv` cells). Tokens differ from the default mode's, never
    /// between a sequence alone and in a batch.
    #[arg(long)]
    pub mmv: bool,
    /// Positions per KV block.
    #[arg(long, default_value_t = 16)]
    pub kv_block_tokens: usize,
    /// Requests waiting for admission before new ones get 429.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// Tokens per engine step (decodes + prefill chunks): a prompt is prefilled in chunks
    /// of at most this many tokens. Default: 2048 on the CUDA backend (a chunk runs as
    /// prompt passes of up to 1024 rows, `PREFILL_PASS_ROWS`, each a pass over every weight:
    /// a full chunk is two passes), 256 on the CPU (a step's prefill then stalls the other
    /// streams' decode for less long).
    #[arg(long)]
    pub max_batch_tokens: Option<usize>,
    /// Prefix-cache entries kept per model (0 = off).
    #[arg(long, default_value_t = 64)]
    pub prefix_cache_entries: usize,
    /// Longest prompt accepted, in tokens (default: context size - 1).
    #[arg(long)]
    pub max_prompt_tokens: Option<usize>,
    /// Largest request body accepted, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body_bytes: usize,
    /// Seconds running streams may go on after SIGTERM / ctrl-c.
    #[arg(long, default_value_t = 30)]
    pub drain_s: u64,
    /// `Retry-After` seconds sent with 429.
    #[arg(long, default_value_t = 1)]
    pub retry_after_s: u64,
    /// Keep up to this many MiB of weights dequantized in memory per model.
    #[arg(long, default_value_t = 2048)]
    pub cache_weights_mb: usize,
    /// CPU threads per model (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Speculative decoding, `[ALIAS=]ngram` (prompt lookup) or `[ALIAS=]draft:MODEL` (a
    /// path or catalog name of a model with the same vocabulary, run on the model's
    /// backend); without `ALIAS=` for every model. Greedy requests get the tokens of plain
    /// decoding; sampled ones distribution-exact rejection sampling; requests with logprobs,
    /// a grammar, or greedy with penalties decode plain.
    #[arg(long = "spec")]
    pub specs: Vec<String>,
    /// Largest number of drafted tokens per round (1..=8).
    #[arg(long, default_value_t = 4)]
    pub spec_k: usize,
    /// Keep the depth at `--spec-k` instead of adapting it to recent acceptance (and the
    /// speed policy off unless `--spec-policy on`).
    #[arg(long)]
    pub spec_fixed: bool,
    /// The speed policy: speculation off for a request while it measures slower per token
    /// than its plain steps (see `assay generate --help`). `auto` = on for greedy requests
    /// unless `--spec-fixed`, off for sampled ones.
    #[arg(long, value_enum, default_value_t = Policy::Auto)]
    pub spec_policy: Policy,
    /// Stop drafting when the draft model's top probability is under this (0 = never;
    /// default 0.3 on the CPU, 0 on CUDA).
    #[arg(long)]
    pub spec_confidence: Option<f64>,
    /// Speculate greedy requests only (sampled ones decode plain, with the tokens of the
    /// plain sampler for a seed).
    #[arg(long)]
    pub spec_greedy_only: bool,
}

/// The `--spec` of model `alias`: one with that alias, else one without an alias.
fn spec_for<'a>(args: &'a Args, alias: &str) -> Option<&'a str> {
    let mut general = None;
    let mut mine = None;
    for s in &args.specs {
        match s.split_once('=') {
            Some((a, p)) if a == alias => mine = Some(p),
            Some(_) => {}
            None => general = Some(s.as_str()),
        }
    }
    mine.or(general)
}

/// Check `--spec`s: every value a proposer, `--spec-k` in range, and (given `aliases`)
/// every alias a served model.
fn check_specs(args: &Args, aliases: Option<&[String]>) -> anyhow::Result<()> {
    for s in &args.specs {
        let (alias, p) = match s.split_once('=') {
            Some((a, p)) => (Some(a), p),
            None => (None, s.as_str()),
        };
        if let (Some(a), Some(aliases)) = (alias, aliases)
            && !aliases.iter().any(|x| x == a)
        {
            bail!("--spec {s:?}: no model is served as {a:?} (models: {aliases:?})");
        }
        if p != "ngram" && !p.starts_with("draft:") {
            bail!("--spec {s:?}: expected `[ALIAS=]ngram` or `[ALIAS=]draft:MODEL`");
        }
    }
    if !args.specs.is_empty() && !(1..=scheduler::spec::MAX_SERVE_K).contains(&args.spec_k) {
        bail!(
            "--spec-k {} is out of range (1..={})",
            args.spec_k,
            scheduler::spec::MAX_SERVE_K
        );
    }
    Ok(())
}

/// The speculative configuration of a model served by `exec` (`None` without `--spec`).
fn spec_config(
    args: &Args,
    spec: Option<&str>,
    model: &GgufModel,
    exec: &Loaded,
    backend: &Resolved,
) -> anyhow::Result<Option<SpecServe>> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let (n_vocab, cuda) = match exec {
        Loaded::Cpu(r) => (r.program().shape.n_vocab, false),
        Loaded::Cuda(c) => (c.program().shape.n_vocab, true),
    };
    let mut draft_bytes = None;
    let factory: Box<dyn ProposerFactory> = if spec == "ngram" {
        Box::new(NgramFactory)
    } else {
        let name = spec.strip_prefix("draft:").unwrap_or(spec);
        let path = crate::common::resolve_model(Some(name), args.models_dir.clone())?;
        let draft = GgufModel::open(&path)
            .with_context(|| format!("cannot open draft model {}", path.display()))?;
        draft_bytes = Some(engine::spec::model_weight_bytes(&draft));
        let label = path
            .file_name()
            .map_or_else(|| name.to_owned(), |f| f.to_string_lossy().into_owned());
        match (exec, backend) {
            (Loaded::Cuda(_), Resolved::Cuda(gpu)) => Box::new(
                CudaDraftFactory::new(gpu.clone(), &draft, model, n_vocab, label, !args.no_graph)
                    .map_err(anyhow::Error::msg)
                    .with_context(|| format!("draft model {}", path.display()))?,
            ),
            _ => {
                engine::spec::check_vocab(model, &draft)
                    .with_context(|| format!("draft model {}", path.display()))?;
                let options = ReferenceOptions {
                    threads: args.threads,
                    kv_dtype: KvDtype::F16,
                };
                let mut r = Reference::new(Arc::new(draft), options)
                    .with_context(|| format!("cannot run draft model {}", path.display()))?;
                r.cache_weights(args.cache_weights_mb.saturating_mul(1 << 20))?;
                Box::new(ReferenceDraftFactory {
                    exec: Arc::new(r),
                    target_vocab: n_vocab,
                    label,
                })
            }
        }
    };
    Ok(Some(SpecServe {
        confidence: args.spec_confidence.unwrap_or(if cuda { 0.0 } else { 0.3 }),
        policy: match args.spec_policy {
            Policy::Auto => SpecPolicy::Auto,
            Policy::On => SpecPolicy::On,
            Policy::Off => SpecPolicy::Off,
        },
        sampled: !args.spec_greedy_only,
        weight_bytes: (draft_bytes, Some(engine::spec::model_weight_bytes(model))),
        ..SpecServe::new(
            factory,
            args.spec_k,
            args.spec_fixed,
            if cuda {
                engine::cuda::decode::MAX_ROWS
            } else {
                usize::MAX
            },
        )
    }))
}

fn alias_and_spec(s: &str) -> (Option<String>, String) {
    match s.split_once('=') {
        Some((a, p)) if !a.is_empty() && !Path::new(s).exists() => {
            (Some(a.to_owned()), p.to_owned())
        }
        _ => (None, s.to_owned()),
    }
}

/// A model's executor on its backend.
enum Loaded {
    Cpu(Box<Reference>),
    Cuda(Box<CudaExecutor>),
}

/// Free device memory, bytes.
fn gpu_free_bytes(gpu: &Gpu) -> anyhow::Result<usize> {
    gpu.context()
        .bind_to_thread()
        .context("binding the CUDA context")?;
    let (free, _total) =
        engine::cuda::cudarc::driver::result::mem_get_info().context("reading free GPU memory")?;
    Ok(free)
}

fn load_exec(
    args: &Args,
    backend: &Resolved,
    model: &Arc<GgufModel>,
    path: &Path,
) -> anyhow::Result<Loaded> {
    match backend {
        Resolved::Cpu => {
            let options = ReferenceOptions {
                threads: args.threads,
                kv_dtype: KvDtype::F16,
            };
            let mut exec = Reference::new(model.clone(), options)
                .with_context(|| format!("cannot run {}", path.display()))?;
            exec.cache_weights(args.cache_weights_mb.saturating_mul(1 << 20))?;
            Ok(Loaded::Cpu(Box::new(exec)))
        }
        Resolved::Cuda(gpu) => {
            let exec = CudaExecutor::new(gpu.clone(), model, !args.no_graph)
                .with_context(|| format!("cannot load {} on the GPU", path.display()))?
                .with_batched_decode(args.batched_decode);
            let exec = if args.mmv {
                exec.with_mmv(true)
                    .with_context(|| format!("cannot run {} on tensor cores", path.display()))?
            } else {
                exec
            };
            Ok(Loaded::Cuda(Box::new(exec)))
        }
    }
}

fn load(args: &Args, backend: &Resolved, spec: &str) -> anyhow::Result<ServedModel> {
    let (alias, spec) = alias_and_spec(spec);
    let path = crate::common::resolve_model(Some(&spec), args.models_dir.clone())?;
    let alias = alias.unwrap_or_else(|| {
        if Path::new(&spec).exists() {
            path.file_stem()
                .map_or(spec.clone(), |s| s.to_string_lossy().into_owned())
        } else {
            spec.clone()
        }
    });
    let model = Arc::new(
        GgufModel::open(&path).with_context(|| format!("cannot open model {}", path.display()))?,
    );

    let exec = match load_exec(args, backend, &model, &path) {
        Err(e) if args.backend == Backend::Auto && matches!(backend, Resolved::Cuda(_)) => {
            eprintln!("CUDA cannot run this model ({e:#}); using the CPU backend");
            load_exec(args, &Resolved::Cpu, &model, &path)?
        }
        r => r?,
    };
    let tokenizer = Tokenizer::from_gguf(model.header())
        .with_context(|| format!("cannot read the tokenizer of {}", path.display()))?;
    let template = ChatTemplate::for_model(model.header()).ok();
    let spec = spec_config(args, spec_for(args, &alias), &model, &exec, backend)?;
    let spec_name = spec.as_ref().map(|s| s.factory.name());
    let n_train = match &exec {
        Loaded::Cpu(r) => r.program().shape.n_ctx_train,
        Loaded::Cuda(c) => c.program().shape.n_ctx_train,
    };
    let n_ctx = match (args.ctx, n_train) {
        (Some(c), _) => c,
        (None, 0) => 4096,
        (None, n) => n,
    };
    if n_ctx < 2 {
        bail!("--ctx must be at least 2");
    }
    let max_prompt_tokens = args.max_prompt_tokens.unwrap_or(n_ctx - 1).min(n_ctx - 1);
    let config = SchedulerConfig {
        n_ctx,
        kv_budget_bytes: 0,
        block_tokens: args.kv_block_tokens,
        max_queue: args.max_queue,
        max_batch_tokens: args.max_batch_tokens.unwrap_or(256),
        prefix_cache_entries: args.prefix_cache_entries,
        eog_tokens: tokenizer.eog_ids(),
        warmup_token: tokenizer.bos_id().or(Some(0)),
    };
    let (scheduler, backend_name) = match exec {
        Loaded::Cpu(r) => {
            let config = SchedulerConfig {
                kv_budget_bytes: args.kv_mb.unwrap_or(1024).saturating_mul(1 << 20),
                ..config
            };
            (
                scheduler::start_spec(CpuExecutor::new(*r), config, spec),
                "cpu",
            )
        }
        Loaded::Cuda(c) => {
            let budget = match (args.kv_mb, backend) {
                (Some(mb), _) => mb.saturating_mul(1 << 20),
                (None, Resolved::Cuda(gpu)) => gpu_free_bytes(gpu)? / 10 * 8,
                (None, Resolved::Cpu) => 1 << 30,
            };
            let config = SchedulerConfig {
                kv_budget_bytes: budget,
                max_batch_tokens: args.max_batch_tokens.unwrap_or(2048),
                ..config
            };
            (scheduler::start_spec(*c, config, spec), "cuda")
        }
    };
    let scheduler = scheduler.with_context(|| format!("cannot start the scheduler of {alias}"))?;
    eprintln!(
        "assay serve: model {alias} <- {} (backend {backend_name}, ctx {n_ctx}, KV {} positions, chat template {}{})",
        path.display(),
        scheduler.capacity_tokens(),
        if template.is_some() { "yes" } else { "no" },
        match &spec_name {
            Some(n) => format!(
                ", spec {n} k<={}{}",
                args.spec_k,
                if args.spec_fixed { " fixed" } else { "" }
            ),
            None => String::new(),
        }
    );
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(ServedModel {
        alias,
        tokenizer,
        template,
        scheduler,
        max_prompt_tokens,
        created,
    })
}

async fn shutdown_signal() {
    let term = async {
        #[cfg(unix)]
        {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let keys = match &args.api_keys {
        Some(f) => {
            Some(KeySet::load(f).with_context(|| format!("reading --api-keys {}", f.display()))?)
        }
        None => None,
    };
    let specs = if args.models.is_empty() {
        vec![engine::catalog::default_name()?]
    } else {
        args.models.clone()
    };
    check_specs(&args, None)?;
    let backend = resolve_backend(args.backend)?;
    let mut models = Vec::new();
    for s in &specs {
        let m = load(&args, &backend, s)?;
        if models.iter().any(|x: &Arc<ServedModel>| x.alias == m.alias) {
            bail!(
                "two models share the alias {:?}; name them with ALIAS=PATH",
                m.alias
            );
        }
        models.push(Arc::new(m));
    }
    let aliases: Vec<String> = models.iter().map(|m| m.alias.clone()).collect();
    check_specs(&args, Some(&aliases))?;
    let state = Arc::new(AppState {
        models,
        keys,
        metrics: Metrics::default(),
        config: ServerConfig {
            body_limit_bytes: args.max_body_bytes,
            drain_deadline: Duration::from_secs(args.drain_s),
            retry_after_s: args.retry_after_s,
        },
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let addr: SocketAddr = format!("{}:{}", args.host, args.port)
            .parse()
            .or_else(|_| format!("[{}]:{}", args.host, args.port).parse())
            .with_context(|| format!("bad --host/--port {}:{}", args.host, args.port))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot bind {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!("assay serve: listening on http://{local}");
        engine::server::serve(listener, state, shutdown_signal()).await?;
        eprintln!("assay serve: stopped");
        Ok(())
    })
}
