//! The scheduler: one engine thread owns the executor; requests enter a bounded queue and
//! are served by continuous batching.
//!
//! * Admission is by KV memory, not by slot count: a request is admitted when the paged
//!   [`BlockAllocator`] can hold its prompt (plus one position), after evicting
//!   least-recently-used prefix-cache entries if needed. Running sequences grow block by
//!   block; when the pool runs dry the newest running sequence is preempted (its KV freed,
//!   its tokens so far re-queued at the front to be recomputed), so the oldest always
//!   progress.
//! * Each step runs every decoding sequence (one token each) plus prefill chunks of the
//!   admitted prompts within a token budget (chunked prefill): a long prompt never stalls
//!   running streams for more than one chunk.
//! * A request whose event receiver is gone (client disconnected, stop string reached) is
//!   cancelled at the next step and its KV freed.
//! * Finished sequences leave their KV in the [`PrefixCache`] under their tenant (API key);
//!   a later prompt of that tenant sharing a prefix copies it and prefills only the rest.
//! * [`SchedulerHandle::drain`] stops admission, fails queued requests and lets running ones
//!   finish until a deadline, after which they are cancelled.
//!
//! The executor is the [`Executor`] trait ([`CpuExecutor`], [`CudaExecutor`]); with a batch-invariant
//! executor a sequence's tokens do not depend on what else ran beside it. A sequence asks the
//! executor for its next token ([`Want::Token`]: sampler and grammar mask go with it, the
//! CUDA executor picks on the device) unless it needs the logits row (logprobs).

pub mod cuda;
mod engine;
pub mod executor;
pub mod prefix;
pub mod spec;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use crate::kv::blocks::{BlockAllocator, BlockError};
use crate::sampling::SamplerConfig;

pub use cuda::{CudaDraftFactory, CudaExecutor, CudaKv};
pub use executor::{
    CpuExecutor, Executor, StepInput, StepOut, TokenPick, Want, WantKind, pick_on_host,
};
pub use prefix::PrefixCache;
pub use spec::{NgramFactory, ProposerFactory, ReferenceDraftFactory, SpecPolicy, SpecServe};

/// Limits and sizes of one scheduler.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Context size: prompt + generated tokens of one sequence.
    pub n_ctx: usize,
    /// KV memory budget in bytes.
    pub kv_budget_bytes: usize,
    /// Positions per KV block.
    pub block_tokens: usize,
    /// Requests waiting for admission beyond which submissions are refused.
    pub max_queue: usize,
    /// Tokens per step (decode tokens + prefill chunks).
    pub max_batch_tokens: usize,
    /// Prefix-cache entries kept at most (0 = no prefix cache).
    pub prefix_cache_entries: usize,
    /// Token ids that end generation.
    pub eog_tokens: Vec<u32>,
    /// A token to run once at start-up (warm-up); `None` = none.
    pub warmup_token: Option<u32>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            n_ctx: 2048,
            kv_budget_bytes: 512 << 20,
            block_tokens: 16,
            max_queue: 256,
            max_batch_tokens: 256,
            prefix_cache_entries: 64,
            eog_tokens: Vec::new(),
            warmup_token: None,
        }
    }
}

/// One generation request.
pub struct GenRequest {
    /// Prefix-cache scope (API key identity; empty without auth).
    pub tenant: String,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplerConfig,
    /// Where the events go; dropping the receiver cancels the request.
    pub events: UnboundedSender<Event>,
    /// Structured output: a grammar masks the logits before each sample and ends the
    /// sequence when complete (`None` = unconstrained).
    pub constraint: Option<crate::api::constrain::Constrained>,
    /// Report each token's log-probability with this many alternatives (`None` = off).
    pub logprobs: Option<usize>,
    /// Do not end at end-of-generation tokens (only `max_tokens` or the context ends it).
    pub ignore_eos: bool,
}

/// Why a sequence ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` or the context size reached.
    Length,
    /// An end-of-generation token.
    Eog,
    /// The receiver went away.
    Cancelled,
    /// The server is shutting down.
    Shutdown,
    /// The executor failed.
    Error(String),
}

/// What the engine reports about a request, in order: `Admitted`, `Token`s, `Finished`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Admitted; `cached_tokens` prompt tokens come from the prefix cache.
    Admitted { cached_tokens: usize },
    /// The log-probability of the token sampled next (sent just before its `Token`, or
    /// before `Finished` when it ended the sequence), when the request asked.
    Logprob(crate::api::logprobs::TokenLogprob),
    /// One generated token.
    Token(u32),
    /// The end.
    Finished(Finish),
}

/// Final accounting of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finish {
    pub reason: FinishReason,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub generated: usize,
    /// The request's speculation, when it speculated.
    pub spec: Option<SpecUsage>,
}

/// A speculating request's counters (the `usage.spec` extension of a response).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SpecUsage {
    /// Verification rounds (with at least one draft).
    pub rounds: u64,
    /// Draft tokens verified.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    #[error("the request queue is full ({0} waiting)")]
    QueueFull(usize),
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(
        "prompt ({prompt} tokens) + max_tokens ({max_tokens}) exceed the context size ({n_ctx})"
    )]
    TooLong {
        prompt: usize,
        max_tokens: usize,
        n_ctx: usize,
    },
    #[error("the engine thread has stopped")]
    EngineGone,
}

/// Live numbers of the engine, read by `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    pub queue_depth: AtomicUsize,
    pub running: AtomicUsize,
    pub kv_blocks_used: AtomicUsize,
    pub kv_blocks_free: AtomicUsize,
    pub prefix_cache_entries: AtomicUsize,
    pub prefix_hits: AtomicU64,
    pub prefix_misses: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub cached_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub preemptions: AtomicU64,
    pub steps: AtomicU64,
    pub ready: AtomicBool,
    pub draining: AtomicBool,
    pub stopped: AtomicBool,
    /// Speculative decoding counters.
    pub spec: SpecCounters,
}

/// Speculative decoding counters of one model (all requests).
#[derive(Debug, Default)]
pub struct SpecCounters {
    /// Verification rounds (one forward of the last token and at least one draft).
    pub rounds: AtomicU64,
    /// Decode steps of speculating sequences that drafted nothing (no n-gram match, the
    /// speed policy off, the last token of a request).
    pub plain_rounds: AtomicU64,
    /// `proposed[i]`: rounds with a draft at position `i + 1`.
    pub proposed: [AtomicU64; spec::MAX_SERVE_K],
    /// `accepted[i]`: rounds whose draft at position `i + 1` was accepted.
    pub accepted: [AtomicU64; spec::MAX_SERVE_K],
    /// Requests whose proposer failed (they decoded plain from then on).
    pub failures: AtomicU64,
}

impl SpecCounters {
    /// Tokens drafted in all.
    pub fn drafted(&self) -> u64 {
        self.proposed
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Drafts accepted in all.
    pub fn accepted_total(&self) -> u64 {
        self.accepted
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

enum Command {
    Submit(Box<GenRequest>),
    Drain(Instant),
}

/// The client side of a scheduler; cheap to clone.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: std::sync::mpsc::Sender<Command>,
    stats: Arc<Stats>,
    config: Arc<SchedulerConfig>,
    capacity_tokens: usize,
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

/// Errors starting a scheduler.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("KV budget: {0}")]
    Blocks(#[from] BlockError),
    #[error(
        "the KV budget holds {tokens} positions, less than one context of {n_ctx}; raise the KV budget or lower the context"
    )]
    BudgetTooSmall { tokens: usize, n_ctx: usize },
    #[error("cannot start the engine thread: {0}")]
    Thread(String),
    #[error("speculative depth {0} is out of range (1..={max})", max = spec::MAX_SERVE_K)]
    SpecDepth(usize),
}

/// Start the engine thread owning `exec`.
pub fn start<E: Executor>(exec: E, config: SchedulerConfig) -> Result<SchedulerHandle, StartError> {
    start_spec(exec, config, None)
}

/// Start the engine thread owning `exec`, speculating with `spec` ([`spec`]) when given.
pub fn start_spec<E: Executor>(
    exec: E,
    config: SchedulerConfig,
    spec: Option<SpecServe>,
) -> Result<SchedulerHandle, StartError> {
    if let Some(s) = &spec
        && !(1..=spec::MAX_SERVE_K).contains(&s.k_max)
    {
        return Err(StartError::SpecDepth(s.k_max));
    }
    let alloc = BlockAllocator::for_budget(
        config.kv_budget_bytes,
        exec.kv_bytes_per_token(),
        config.block_tokens,
    )?;
    let capacity_tokens = alloc.total() * alloc.block_tokens();
    if capacity_tokens < config.n_ctx {
        return Err(StartError::BudgetTooSmall {
            tokens: capacity_tokens,
            n_ctx: config.n_ctx,
        });
    }
    let stats = Arc::new(Stats::default());
    stats.kv_blocks_free.store(alloc.total(), Ordering::Relaxed);
    let (tx, rx) = std::sync::mpsc::channel();
    let config = Arc::new(config);
    let (cfg, st) = (config.clone(), stats.clone());
    // The engine is made on its thread: a sequence's proposer (a draft model on the GPU)
    // never leaves it.
    let thread = std::thread::Builder::new()
        .name("assay-engine".into())
        .spawn(move || engine::Engine::new(exec, alloc, cfg, st, rx, spec).run())
        .map_err(|e| StartError::Thread(e.to_string()))?;
    Ok(SchedulerHandle {
        tx,
        stats,
        config,
        capacity_tokens,
        thread: Arc::new(Mutex::new(Some(thread))),
    })
}

impl SchedulerHandle {
    /// Queue a request. Refused when the queue is full, the server drains, or the request
    /// cannot fit the context.
    pub fn submit(&self, req: GenRequest) -> Result<(), SubmitError> {
        if self.stats.draining.load(Ordering::SeqCst) {
            return Err(SubmitError::ShuttingDown);
        }
        if req.prompt.is_empty() {
            return Err(SubmitError::EmptyPrompt);
        }
        let n_ctx = self.config.n_ctx;
        if req.prompt.len().saturating_add(req.max_tokens) > n_ctx {
            return Err(SubmitError::TooLong {
                prompt: req.prompt.len(),
                max_tokens: req.max_tokens,
                n_ctx,
            });
        }
        let max = self.config.max_queue;
        let q = &self.stats.queue_depth;
        if q.fetch_add(1, Ordering::SeqCst) >= max {
            q.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::QueueFull(max));
        }
        self.tx.send(Command::Submit(Box::new(req))).map_err(|_| {
            q.fetch_sub(1, Ordering::SeqCst);
            SubmitError::EngineGone
        })
    }

    /// Stop admitting; running sequences may finish until `deadline`.
    pub fn drain(&self, deadline: Duration) {
        self.stats.draining.store(true, Ordering::SeqCst);
        let _ = self.tx.send(Command::Drain(Instant::now() + deadline));
    }

    /// Wait for the engine thread to end (after [`SchedulerHandle::drain`]).
    pub fn join(&self) {
        let t = self.thread.lock().ok().and_then(|mut g| g.take());
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    /// The live numbers.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Positions the KV pool holds.
    pub fn capacity_tokens(&self) -> usize {
        self.capacity_tokens
    }

    /// Warmed up and accepting work.
    pub fn is_ready(&self) -> bool {
        self.stats.ready.load(Ordering::SeqCst)
            && !self.stats.draining.load(Ordering::SeqCst)
            && !self.stats.stopped.load(Ordering::SeqCst)
    }
}
