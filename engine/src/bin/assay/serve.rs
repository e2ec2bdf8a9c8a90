//! `assay serve`: the OpenAI-compatible HTTP server over one or more models
//! (`--model [ALIAS=]PATH`, paths or catalog names), each run by its own scheduler on the
//! CPU reference backend. Prints the bound address on stderr; SIGTERM or ctrl-c drains
//! (stops admitting, lets running streams finish within `--drain-s`) and exits.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use engine::kv::KvDtype;
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};
use engine::scheduler::{self, CpuExecutor, SchedulerConfig};
use engine::server::{AppState, KeySet, Metrics, ServedModel, ServerConfig};
use engine::tokenizer::{ChatTemplate, Tokenizer};

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
    /// KV cache memory per model, MiB.
    #[arg(long, default_value_t = 1024)]
    pub kv_mb: usize,
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

fn load(args: &Args, spec: &str) -> anyhow::Result<ServedModel> {
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
    let options = ReferenceOptions {
        threads: args.threads,
        kv_dtype: KvDtype::F16,
    };
    let mut exec = Reference::new(model.clone(), options)
        .with_context(|| format!("cannot run {}", path.display()))?;
    exec.cache_weights(args.cache_weights_mb.saturating_mul(1 << 20))?;
    let tokenizer = Tokenizer::from_gguf(model.header())
        .with_context(|| format!("cannot read the tokenizer of {}", path.display()))?;
    let template = ChatTemplate::for_model(model.header()).ok();
    let n_train = exec.program().shape.n_ctx_train;
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
        kv_budget_bytes: args.kv_mb.saturating_mul(1 << 20),
        block_tokens: args.kv_block_tokens,
        max_queue: args.max_queue,
        max_batch_tokens: args.max_batch_tokens,
        prefix_cache_entries: args.prefix_cache_entries,
        eog_tokens: tokenizer.eog_ids(),
        warmup_token: tokenizer.bos_id().or(Some(0)),
    };
    let scheduler = scheduler::start(CpuExecutor::new(exec), config)
        .with_context(|| format!("cannot start the scheduler of {alias}"))?;
    eprintln!(
        "assay serve: model {alias} <- {} (ctx {n_ctx}, KV {} positions, chat template {})",
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
    let mut models = Vec::new();
    for s in &specs {
        let m = load(&args, s)?;
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
