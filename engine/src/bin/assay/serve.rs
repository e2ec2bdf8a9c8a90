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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use engine::kv::KvDtype;
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};
use engine::scheduler::{self, CpuExecutor, CudaExecutor, SchedulerConfig};
use engine::server::{AppState, KeySet, Metrics, ServedModel, ServerConfig};
use engine::tokenizer::{ChatTemplate, Tokenizer};

use crate::generate::{Backend, Resolved, resolve_backend};
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
    /// CUDA: run every decode step eagerly instead of replaying a captured CUDA graph.
    #[arg(long)]
    pub no_graph: bool,
    /// CUDA: decode the sequences of a step in one batched device step (each weight read
    /// once per group of up to 8 sequences; a sequence's tokens are those it gets alone,
    /// gate `batch`) instead of one after another. Opt-in for now; the CPU backend always
    /// runs a step as one batch.
    #[arg(long)]
    pub batched_decode: bool,
    /// Positions per KV block.
    #[arg(long, default_value_t = 16)]
    pub kv_block_tokens: usize,
    /// Requests waiting for admission before new ones get 429.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// Tokens per engine step (decodes + prefill chunks).
    #[arg(long, default_value_t = 256)]
    pub max_batch_tokens: usize,
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
        max_batch_tokens: args.max_batch_tokens,
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
            (scheduler::start(CpuExecutor::new(*r), config), "cpu")
        }
        Loaded::Cuda(c) => {
            let budget = match (args.kv_mb, backend) {
                (Some(mb), _) => mb.saturating_mul(1 << 20),
                (None, Resolved::Cuda(gpu)) => gpu_free_bytes(gpu)? / 10 * 8,
                (None, Resolved::Cpu) => 1 << 30,
            };
            let config = SchedulerConfig {
                kv_budget_bytes: budget,
                ..config
            };
            (scheduler::start(*c, config), "cuda")
        }
    };
    let scheduler = scheduler.with_context(|| format!("cannot start the scheduler of {alias}"))?;
    eprintln!(
        "assay serve: model {alias} <- {} (backend {backend_name}, ctx {n_ctx}, KV {} positions, chat template {})",
        path.display(),
        scheduler.capacity_tokens(),
        if template.is_some() { "yes" } else { "no" }
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
