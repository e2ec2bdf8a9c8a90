//! Shared by the scheduler integration tests (scheduler.rs, scheduler_spec.rs): the fake
//! executor whose next token is a hash of the whole history, and request helpers.

#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

pub use std::sync::atomic::{AtomicUsize, Ordering};
pub use std::sync::{Arc, Mutex};
pub use std::time::{Duration, Instant};

pub use engine::sampling::{Sampler, SamplerConfig};
pub use engine::scheduler::{
    self, Event, Executor, Finish, FinishReason, GenRequest, ProposerFactory, SchedulerConfig,
    SchedulerHandle, SpecServe, StepInput, StepOut, SubmitError, Want, WantKind, pick_on_host,
};
pub use engine::spec::{
    Draft, DraftMode, ExactVerifier, Proposer, RoundResult, SpecError, Verifier, greedy_match,
};
pub use tokio::sync::mpsc;

pub const VOCAB: usize = 50;
pub const EOG: u32 = 49;

/// One step's composition: (tokens fed, what the input asked for) per input.
pub type StepLog = Arc<Mutex<Vec<Vec<(usize, WantKind)>>>>;

pub struct Fake {
    pub log: StepLog,
    /// Blocks every step until this mutex can be taken.
    pub gate: Arc<Mutex<()>>,
    pub fail_when_fed: Option<u32>,
    /// Time each step takes (so streams overlap as they do on a real model).
    pub delay: Duration,
    /// Caches for sequences longer than this cannot be made (device memory out).
    pub max_capacity: usize,
}

/// Set in a history entry fed as a prompt token.
pub const PROMPT_MARK: u32 = 1 << 31;

pub fn next_token(history: &[u32]) -> u32 {
    let mut h: u64 = 1469598103934665603;
    for &t in history {
        h = (h ^ u64::from(t)).wrapping_mul(1099511628211);
    }
    // Never EOG by accident: 0..48.
    (h % (VOCAB as u64 - 2)) as u32
}

impl Executor for Fake {
    type Kv = Vec<u32>;
    fn new_kv(&self, capacity: usize) -> Result<Vec<u32>, String> {
        if capacity > self.max_capacity {
            return Err(format!("planted: no memory for {capacity} positions"));
        }
        Ok(Vec::new())
    }
    fn kv_len(&self, kv: &Vec<u32>) -> usize {
        kv.len()
    }
    fn kv_prefix(&self, kv: &Vec<u32>, len: usize, _capacity: usize) -> Result<Vec<u32>, String> {
        Ok(kv[..len.min(kv.len())].to_vec())
    }
    fn kv_trim(&self, kv: &mut Vec<u32>, len: usize) {
        kv.truncate(len);
        kv.shrink_to_fit();
    }
    fn kv_truncate(&self, kv: &mut Vec<u32>, len: usize) {
        kv.truncate(len);
    }
    fn kv_bytes_per_token(&self) -> usize {
        1024
    }
    fn n_vocab(&self) -> usize {
        VOCAB
    }
    fn step(&mut self, batch: &mut [StepInput<'_, Vec<u32>>]) -> Result<Vec<StepOut>, String> {
        let _g = self.gate.lock().unwrap();
        std::thread::sleep(self.delay);
        if let Some(bad) = self.fail_when_fed
            && batch.iter().any(|b| b.tokens.contains(&bad))
        {
            return Err("planted executor failure".into());
        }
        self.log.lock().unwrap().push(
            batch
                .iter()
                .map(|b| (b.tokens.len(), b.want.kind()))
                .collect(),
        );
        // Far above the rest: sampled requests pick it too.
        let row = |history: &[u32]| {
            let mut l = vec![0f32; VOCAB];
            l[next_token(history) as usize] = 1e4;
            l
        };
        Ok(batch
            .iter_mut()
            .map(|b| {
                let base = b.kv.len();
                let p = b.prompt;
                b.kv.extend(
                    b.tokens
                        .iter()
                        .enumerate()
                        .map(|(i, &t)| if i < p { t | PROMPT_MARK } else { t }),
                );
                let mut l = row(b.kv);
                match &mut b.want {
                    Want::Nothing => StepOut::Nothing,
                    Want::Logits => StepOut::Logits(l),
                    Want::Token(pick) => StepOut::Token(pick_on_host(&mut l, pick)),
                    Want::Rows { argmax } => {
                        let rows: Vec<Vec<f32>> = (1..=b.tokens.len())
                            .map(|j| row(&b.kv[..base + j]))
                            .collect();
                        if *argmax {
                            StepOut::Picks(
                                rows.iter().map(|r| engine::sampling::greedy(r)).collect(),
                            )
                        } else {
                            StepOut::Rows(rows)
                        }
                    }
                }
            })
            .collect())
    }
}

pub fn fake() -> (Fake, StepLog, Arc<Mutex<()>>) {
    let log = StepLog::default();
    let gate = Arc::new(Mutex::new(()));
    (
        Fake {
            log: log.clone(),
            gate: gate.clone(),
            fail_when_fed: None,
            delay: Duration::from_micros(200),
            max_capacity: usize::MAX,
        },
        log,
        gate,
    )
}

pub fn config() -> SchedulerConfig {
    SchedulerConfig {
        n_ctx: 256,
        kv_budget_bytes: 4096 * 1024,
        block_tokens: 4,
        max_queue: 64,
        max_batch_tokens: 32,
        prefix_cache_entries: 16,
        eog_tokens: vec![EOG],
        warmup_token: Some(1),
    }
}

/// What the fake generates for `prompt` alone.
pub fn solo(prompt: &[u32], n: usize) -> Vec<u32> {
    let mut h: Vec<u32> = prompt.iter().map(|&t| t | PROMPT_MARK).collect();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = next_token(&h);
        out.push(t);
        h.push(t);
    }
    out
}

pub fn request(
    tenant: &str,
    prompt: Vec<u32>,
    max_tokens: usize,
) -> (GenRequest, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        GenRequest {
            tenant: tenant.into(),
            prompt,
            max_tokens,
            sampling: SamplerConfig::default(),
            events: tx,
            constraint: None,
            logprobs: None,
            ignore_eos: false,
        },
        rx,
    )
}

/// Every event until Finished: (tokens, cached, finish).
pub fn collect(rx: &mut mpsc::UnboundedReceiver<Event>) -> (Vec<u32>, usize, Finish) {
    let mut toks = Vec::new();
    let mut cached = usize::MAX;
    loop {
        match rx.blocking_recv() {
            Some(Event::Admitted { cached_tokens }) => cached = cached_tokens,
            Some(Event::Token(t)) => toks.push(t),
            Some(Event::Logprob(_)) => {}
            Some(Event::Finished(f)) => return (toks, cached, f),
            None => panic!("channel closed without Finished"),
        }
    }
}

pub fn prompt(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (seed * 7 + i * 3) % 40 + 2).collect()
}

pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub fn idle(h: &SchedulerHandle) -> bool {
    let s = h.stats();
    s.running.load(Ordering::SeqCst) == 0 && s.queue_depth.load(Ordering::SeqCst) == 0
}
