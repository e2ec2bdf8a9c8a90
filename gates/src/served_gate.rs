//! The `served` gate: greedy requests through `assay serve`'s HTTP path (the real server
//! in-process on a loopback port, the CPU reference behind the scheduler) return the same
//! tokens as the plain single-sequence greedy reference path that `assay generate` runs —
//! blocking and streamed, alone and among 16 concurrent requests, cold and from the
//! prefix cache (which must report cached tokens). Three more requests ([`picks`]: sampled
//! with a seed, and a JSON schema enforced greedy and sampled), each blocking and streamed,
//! must return the tokens of the same backend's single-sequence path with that seed and
//! grammar ([`reference_pick`], [`cuda_pick`]).
//!
//! [`run_served`] takes the executor, so a test plants a fault (an executor that swaps one
//! token, [`SwapOne`]) and sees the gate go red.
//!
//! `served-cuda` is the same check with the CUDA backend behind the server
//! ([`engine::scheduler::CudaExecutor`]) against the greedy path of `assay generate
//! --backend cuda` (one [`CudaDecoder`]: prompt, device argmax, graphed steps). It needs a
//! GPU (the server's CUDA executor picks tokens on the device: argmax, sampler, grammar mask;
//! [`cuda_pick`] makes the calls of `assay generate --backend cuda [--json-schema]`). Setting `ASSAY_SERVED_PLANT_FAULT=N` swaps the N-th answer the CUDA executor returns
//! (answer 1 is the warm-up's logits row; the requests' answers are device-picked tokens), so
//! a GPU run can show the gate going red. `ASSAY_SERVED_BATCHED_DECODE=1` serves with the
//! executor's batched decode on (`assay serve --batched-decode`).

use std::sync::Arc;

use engine::api::constrain::{Constrained, GrammarEnv, GrammarSpec};
use engine::cuda::{CudaConfig, CudaDecoder, Gpu};
use engine::kv::KvDtype;
use engine::reference::{Reference, ReferenceOptions};
use engine::sampling::{Sampler, SamplerConfig};
use engine::scheduler::{CpuExecutor, CudaExecutor, Executor, StepInput, StepOut};

use engine::tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use serde_json::{Value, json};

use crate::receipt::Workload;
use crate::{GateContext, GateDef, GateOutcome, Verdict};

mod http;
mod inprocess;
pub mod spec;
pub use http::{dechunk, http_post, served_tokens, served_tokens_with};
pub use inprocess::InProcess;

/// The served gates.
pub fn gates() -> Vec<GateDef> {
    vec![
        GateDef {
            name: "served",
            about: "tokens over HTTP (greedy: blocking, streamed, 16 concurrent, prefix-cached; sampled with a seed; json_schema greedy and sampled) == the reference's single-sequence path",
            needs_gpu: false,
            quick: true,
            run: served,
        },
        GateDef {
            name: "served-spec",
            about: "assay serve --spec (n-gram K=1,4,8; the model drafting for itself K=4) over HTTP: greedy blocking, streamed, prefix-cached, 8 concurrent == the plain single-sequence path; seeded sampled == spec::generate; /metrics counts the rounds",
            needs_gpu: false,
            quick: true,
            run: served_spec,
        },
        GateDef {
            name: "served-cuda",
            about: "tokens over HTTP on the CUDA backend (greedy: blocking, streamed, 16 concurrent, prefix-cached; sampled with a seed; json_schema greedy and sampled, mask on the device) == assay generate --backend cuda",
            needs_gpu: true,
            quick: true,
            run: served_cuda,
        },
    ]
}

/// An executor with one planted fault: the `at`-th answer it returns (a logits row or a
/// token picked by the executor) changes — the row gets a different arg-max, the token is
/// replaced by the next id — so one token on the served path is swapped.
pub struct SwapOne<E> {
    pub inner: E,
    pub rows: usize,
    pub at: usize,
}

impl<E: Executor> Executor for SwapOne<E> {
    type Kv = E::Kv;
    fn new_kv(&self, capacity: usize) -> Result<Self::Kv, String> {
        self.inner.new_kv(capacity)
    }
    fn kv_len(&self, kv: &Self::Kv) -> usize {
        self.inner.kv_len(kv)
    }
    fn kv_prefix(&self, kv: &Self::Kv, len: usize, capacity: usize) -> Result<Self::Kv, String> {
        self.inner.kv_prefix(kv, len, capacity)
    }
    fn kv_trim(&self, kv: &mut Self::Kv, len: usize) {
        self.inner.kv_trim(kv, len)
    }
    fn kv_truncate(&self, kv: &mut Self::Kv, len: usize) {
        self.inner.kv_truncate(kv, len)
    }
    fn kv_bytes_per_token(&self) -> usize {
        self.inner.kv_bytes_per_token()
    }
    fn reserves_capacity(&self) -> bool {
        self.inner.reserves_capacity()
    }
    fn n_vocab(&self) -> usize {
        self.inner.n_vocab()
    }
    fn step(&mut self, batch: &mut [StepInput<'_, Self::Kv>]) -> Result<Vec<StepOut>, String> {
        let n_vocab = self.inner.n_vocab().max(1);
        let mut out = self.inner.step(batch)?;
        for o in out.iter_mut() {
            match o {
                StepOut::Nothing => {}
                StepOut::Logits(row) => {
                    self.rows += 1;
                    if self.rows == self.at && !row.is_empty() {
                        let a = engine::sampling::greedy(row) as usize;
                        let b = (a + 1) % row.len();
                        if let Some(x) = row.get_mut(b) {
                            *x = f32::MAX;
                        }
                    }
                }
                StepOut::Token(t) => {
                    self.rows += 1;
                    if self.rows == self.at {
                        *t = (*t + 1) % n_vocab as u32;
                    }
                }
                // A verification counts as one answer: its last pick is swapped.
                StepOut::Picks(p) => {
                    self.rows += 1;
                    if let (true, Some(t)) = (self.rows == self.at, p.last_mut()) {
                        *t = (*t + 1) % n_vocab as u32;
                    }
                }
                StepOut::Rows(rows) => {
                    self.rows += 1;
                    if let (true, Some(row)) = (self.rows == self.at, rows.last_mut())
                        && !row.is_empty()
                    {
                        let a = engine::sampling::greedy(row) as usize;
                        let b = (a + 1) % row.len();
                        if let Some(x) = row.get_mut(b) {
                            *x = f32::MAX;
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The prompts (chat, user turn).
pub const PROMPTS: [&str; 4] = [
    "What is the capital of France?",
    "Write one sentence about the sea.",
    "List three prime numbers.",
    "Say hello in Spanish.",
];

/// One checked request: what it was, the reference tokens, what the server returned.
pub struct Case {
    pub label: String,
    pub want: Vec<u32>,
    pub got: Result<Vec<u32>, String>,
}

/// Red when any case's tokens differ from the reference (first difference named).
pub fn check(cases: &[Case]) -> Verdict {
    let mut failures = Vec::new();
    for c in cases {
        match &c.got {
            Err(e) => failures.push(format!("{}: {e}", c.label)),
            Ok(got) if got != &c.want => {
                let at = c
                    .want
                    .iter()
                    .zip(got)
                    .position(|(a, b)| a != b)
                    .unwrap_or(c.want.len().min(got.len()));
                failures.push(format!(
                    "{}: token {at} differs (reference {:?}, served {:?}; {} vs {} tokens)",
                    c.label,
                    c.want.get(at),
                    got.get(at),
                    c.want.len(),
                    got.len()
                ));
            }
            Ok(_) => {}
        }
    }
    Verdict::from_failures(failures)
}

/// Prompt ids as `assay generate --chat` makes them.
pub fn chat_ids(tok: &Tokenizer, template: &ChatTemplate, text: &str) -> Result<Vec<u32>, String> {
    let m = [ChatMessage {
        role: "user".into(),
        content: text.into(),
    }];
    let s = template.render(&m, None, true).map_err(|e| e.to_string())?;
    let bos = tok
        .bos_id()
        .and_then(|b| tok.token_text(b))
        .is_some_and(|b| !b.is_empty() && s.starts_with(b));
    tok.encode(&s, !bos, true).map_err(|e| e.to_string())
}

/// How a checked request picks its tokens: its sampling fields and grammar as the server
/// parses them from `body` (merged into the chat request).
#[derive(Clone, Debug)]
pub struct PickSpec {
    pub label: &'static str,
    pub sampling: SamplerConfig,
    /// `response_format.json_schema.schema` (strict), if any.
    pub schema: Option<Value>,
    /// Request fields.
    pub body: Value,
}

impl PickSpec {
    /// Greedy, unconstrained (the gate's main cases).
    pub fn greedy() -> PickSpec {
        PickSpec {
            label: "greedy",
            sampling: SamplerConfig::default(),
            schema: None,
            body: json!({"temperature": 0}),
        }
    }

    /// The grammar the server compiles for this request.
    fn grammar(&self, tok: &Tokenizer) -> Result<Option<Constrained>, String> {
        let Some(schema) = &self.schema else {
            return Ok(None);
        };
        // As the server builds it: the tokenizer's vocabulary, strict json_schema.
        let env = GrammarEnv::new(tok, tok.vocab_size()).map_err(|e| e.to_string())?;
        env.compile(&GrammarSpec::JsonSchema {
            schema: schema.clone(),
            strict: true,
        })
        .map(Some)
        .map_err(|e| e.to_string())
    }
}

/// The schema of the constrained cases.
pub fn pick_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "country": {"type": "string", "maxLength": 24},
            "population_millions": {"type": "integer"},
            "capital": {"type": "boolean"}
        },
        "required": ["city", "country", "population_millions", "capital"],
        "additionalProperties": false
    })
}

/// The non-greedy cases: sampled with a seed; the schema greedy; the schema sampled.
pub fn picks() -> Vec<PickSpec> {
    let format = json!({
        "type": "json_schema",
        "json_schema": {"name": "city", "schema": pick_schema(), "strict": true}
    });
    let sampled = |seed: u64| SamplerConfig {
        temperature: 0.8,
        top_p: 0.95,
        seed,
        ..SamplerConfig::default()
    };
    vec![
        PickSpec {
            label: "sampled seed 42",
            sampling: sampled(42),
            schema: None,
            body: json!({"temperature": 0.8, "top_p": 0.95, "seed": 42}),
        },
        PickSpec {
            label: "json_schema greedy",
            sampling: SamplerConfig::default(),
            schema: Some(pick_schema()),
            body: json!({"temperature": 0, "response_format": format}),
        },
        PickSpec {
            label: "json_schema sampled seed 7",
            sampling: sampled(7),
            schema: Some(pick_schema()),
            body: json!({"temperature": 0.8, "top_p": 0.95, "seed": 7, "response_format": format}),
        },
    ]
}

/// What the scheduler does with a picked token `t`: `Some(true)` = emit it and stop,
/// `Some(false)` = emit it and go on, `None` = stop without emitting it (end of
/// generation). Advances the grammar.
fn after_pick(
    t: u32,
    c: &mut Option<Constrained>,
    tok: &Tokenizer,
    sampler: &mut Sampler,
) -> Result<Option<bool>, String> {
    let mut done = false;
    if let Some(c) = c.as_mut() {
        c.commit(t).map_err(|e| e.to_string())?;
        done = c.is_stopped();
    }
    if tok.is_eog(t) {
        return Ok(None);
    }
    sampler.accept(t);
    Ok(Some(done))
}

/// The reference greedy path of `assay generate`: one sequence, prefill, then one token
/// per step, stop at end-of-generation or `n` tokens.
pub fn reference_greedy(
    r: &Reference,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
) -> Result<Vec<u32>, String> {
    reference_pick(r, tok, prompt, n, &PickSpec::greedy())
}

/// The CPU reference path of `assay generate` with `pick`'s sampling and grammar: one
/// sequence, prefill, then one token per step (mask with `-inf`, [`Sampler::sample`]);
/// stop at end-of-generation, a complete grammar or `n` tokens.
pub fn reference_pick(
    r: &Reference,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    pick: &PickSpec,
) -> Result<Vec<u32>, String> {
    let mut sampler = Sampler::new(pick.sampling.clone());
    for &t in prompt {
        sampler.accept(t);
    }
    let mut c = pick.grammar(tok)?;
    let mut kv = r.new_cache();
    let mut logits = r.step(&mut kv, prompt).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while out.len() < n {
        if let Some(c) = c.as_mut() {
            c.constrain(&mut logits).map_err(|e| e.to_string())?;
        }
        let t = sampler.sample(&logits);
        let Some(stop) = after_pick(t, &mut c, tok, &mut sampler)? else {
            break;
        };
        out.push(t);
        if stop || out.len() == n {
            break;
        }
        logits = r.step(&mut kv, &[t]).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The API key of tenant `i` (each prompt gets its own tenant, so its first request is
/// cold: prefix caches are per key).
fn key(i: usize) -> String {
    format!("gate-key-{i}")
}

/// Serve `exec` in-process and check every case against `reference`. Returns the verdict
/// and detail lines.
pub fn run_served<E: Executor>(
    exec: E,
    reference: &Reference,
    tok: Tokenizer,
    template: ChatTemplate,
    n_tokens: usize,
) -> (Verdict, Vec<String>) {
    let want = |ids: &[u32], tok: &Tokenizer, pick: &PickSpec| {
        reference_pick(reference, tok, ids, n_tokens, pick)
    };
    serve_and_check(exec, want, tok, template, n_tokens)
}

/// The greedy path of `assay generate --backend cuda`: prefill, device argmax, then one
/// graphed step per token; stop at end-of-generation or `n` tokens.
pub fn cuda_greedy(
    dec: &mut CudaDecoder,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
) -> Result<Vec<u32>, String> {
    cuda_pick(dec, tok, prompt, n, &PickSpec::greedy())
}

/// The path of `assay generate --backend cuda` with `pick`'s sampling and grammar: prefill,
/// then per token — unconstrained: the graphed step with the device argmax (greedy without
/// penalties) or the device sampler; constrained: the forward-only graphed step, the mask
/// uploaded ([`CudaDecoder::set_mask`]), the device argmax or sampler. Stops at
/// end-of-generation, a complete grammar or `n` tokens.
pub fn cuda_pick(
    dec: &mut CudaDecoder,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    pick: &PickSpec,
) -> Result<Vec<u32>, String> {
    let e = |e: engine::cuda::CudaError| e.to_string();
    let mut sampler = Sampler::new(pick.sampling.clone());
    for &t in prompt {
        sampler.accept(t);
    }
    let mut c = pick.grammar(tok)?;
    let argmax = engine::scheduler::cuda::device_argmax(&pick.sampling);
    let choose = |dec: &mut CudaDecoder,
                  c: &mut Option<Constrained>,
                  sampler: &mut Sampler|
     -> Result<u32, String> {
        if let Some(c) = c.as_mut() {
            let m = c.mask().map_err(|e| e.to_string())?;
            dec.set_mask(m.words()).map_err(e)?;
        }
        if argmax {
            dec.argmax().map_err(e)
        } else {
            dec.sample(sampler).map_err(e)
        }
    };
    dec.reset();
    dec.prefill(prompt).map_err(e)?;
    let mut t = choose(dec, &mut c, &mut sampler)?;
    let mut out = Vec::new();
    while out.len() < n {
        let Some(stop) = after_pick(t, &mut c, tok, &mut sampler)? else {
            break;
        };
        out.push(t);
        if stop || out.len() == n {
            break;
        }
        t = if c.is_some() {
            dec.forward_graphed(t).map_err(e)?;
            choose(dec, &mut c, &mut sampler)?
        } else if argmax {
            dec.step_graphed(t).map_err(e)?
        } else {
            dec.step_graphed_sampled(t, &mut sampler).map_err(e)?
        };
    }
    Ok(out)
}

/// Serve `exec` in-process and check every case against `want` (the expected tokens of a
/// prompt's ids under a [`PickSpec`]: greedy for the main cases, then each of [`picks`] on
/// the first prompt). Returns the verdict and detail lines.
pub fn serve_and_check<E: Executor>(
    exec: E,
    mut want: impl FnMut(&[u32], &Tokenizer, &PickSpec) -> Result<Vec<u32>, String>,
    tok: Tokenizer,
    template: ChatTemplate,
    n_tokens: usize,
) -> (Verdict, Vec<String>) {
    let greedy = PickSpec::greedy();
    let mut wants = Vec::new();
    for p in PROMPTS {
        match chat_ids(&tok, &template, p).and_then(|ids| want(&ids, &tok, &greedy)) {
            Ok(w) => wants.push(w),
            Err(e) => {
                return (
                    Verdict::from_failures(vec![format!("reference: {e}")]),
                    vec![],
                );
            }
        }
    }
    let pick_prompt = PROMPTS[0];
    let mut pick_wants = Vec::new();
    for pick in picks() {
        match chat_ids(&tok, &template, pick_prompt).and_then(|ids| want(&ids, &tok, &pick)) {
            Ok(w) => pick_wants.push((pick, w)),
            Err(e) => {
                return (
                    Verdict::from_failures(vec![format!("reference {}: {e}", pick.label)]),
                    vec![],
                );
            }
        }
    }
    let srv = match InProcess::start(exec, tok, template, None) {
        Ok(s) => s,
        Err(e) => return (Verdict::from_failures(vec![e]), vec![]),
    };
    let addr = srv.addr;
    let mut cases = Vec::new();
    let mut push = |label: String, want: &Vec<u32>, got: Result<Vec<u32>, String>| {
        cases.push(Case {
            label,
            want: want.clone(),
            got,
        });
    };
    // Alone, one tenant per prompt: cold (blocking, nothing cached), then the repeat
    // (blocking, the whole prompt but its last token from the prefix cache), then streamed.
    for (i, p) in PROMPTS.iter().enumerate() {
        let k = key(i);
        let cold = served_tokens(addr, &k, p, n_tokens, false);
        let cold = cold.and_then(|(t, c, _)| {
            if c == 0 {
                Ok(t)
            } else {
                Err(format!("cold request reported {c} cached tokens"))
            }
        });
        push(format!("prompt {i} cold"), &wants[i], cold);
        let warm = served_tokens(addr, &k, p, n_tokens, false);
        let warm = warm.and_then(|(t, c, n)| {
            if c + 1 == n {
                Ok(t)
            } else {
                Err(format!(
                    "repeat request reported {c} cached of {n} prompt tokens, expected {}",
                    n.saturating_sub(1)
                ))
            }
        });
        push(format!("prompt {i} prefix-cached"), &wants[i], warm);
        let streamed = served_tokens(addr, &k, p, n_tokens, true).map(|(t, _, _)| t);
        push(format!("prompt {i} streamed"), &wants[i], streamed);
    }
    // 16 concurrent requests, streamed and not, every prompt.
    let results: Vec<(usize, bool, Result<Vec<u32>, String>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|k| {
                let i = k % PROMPTS.len();
                let stream = k % 2 == 1;
                s.spawn(move || {
                    (
                        i,
                        stream,
                        served_tokens(addr, &key(PROMPTS.len()), PROMPTS[i], n_tokens, stream)
                            .map(|(t, _, _)| t),
                    )
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or((0, false, Err("client thread panicked".into())))
            })
            .collect()
    });
    for (k, (i, stream, got)) in results.into_iter().enumerate() {
        push(
            format!(
                "concurrent #{k} prompt {i}{}",
                if stream { " streamed" } else { "" }
            ),
            &wants[i],
            got,
        );
    }
    // Sampled and constrained, alone: blocking (cold), then streamed (from the prefix cache).
    for (pick, w) in &pick_wants {
        for stream in [false, true] {
            let got = served_tokens_with(
                addr,
                &key(PROMPTS.len()),
                pick_prompt,
                n_tokens,
                stream,
                &pick.body,
            )
            .map(|(t, _, _)| t);
            let how = if stream { "streamed" } else { "blocking" };
            push(format!("{} {how}", pick.label), w, got);
        }
    }
    srv.stop();
    let n = cases.len();
    let verdict = check(&cases);
    let detail = vec![format!(
        "{n} requests over HTTP ({} prompts x cold/cached/streamed + 16 concurrent, greedy; {} blocking and streamed), {n_tokens} tokens each, equal to the single-sequence path",
        PROMPTS.len(),
        pick_wants
            .iter()
            .map(|(p, _)| p.label)
            .collect::<Vec<_>>()
            .join(", ")
    )];
    (verdict, detail)
}

fn served_cuda(ctx: &GateContext) -> GateOutcome {
    let (model, facts) = match crate::reference_gates::default_model(ctx) {
        Ok(x) => x,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), vec![]),
    };
    let n_tokens = if ctx.quick { 8 } else { 24 };
    let fault: Option<usize> = std::env::var("ASSAY_SERVED_PLANT_FAULT")
        .ok()
        .and_then(|v| v.parse().ok());
    let batched = std::env::var("ASSAY_SERVED_BATCHED_DECODE").is_ok_and(|v| v == "1");
    let built = (|| -> Result<(CudaExecutor, CudaDecoder, Tokenizer, ChatTemplate), String> {
        let cuda = CudaConfig {
            ordinal: 0,
            cubin_cache_dir: ctx.cubin_cache.clone(),
        };
        let gpu = Arc::new(Gpu::open(&cuda).map_err(|e| e.to_string())?);
        let exec = CudaExecutor::new(gpu.clone(), &model, true)
            .map_err(|e| e.to_string())?
            .with_batched_decode(batched);
        let program = engine::arch::build_program(model.header()).map_err(|e| e.to_string())?;
        let dec = CudaDecoder::new(gpu, &model, program, 1024).map_err(|e| e.to_string())?;
        let tok = Tokenizer::from_gguf(model.header()).map_err(|e| e.to_string())?;
        let tmpl = ChatTemplate::for_model(model.header()).map_err(|e| e.to_string())?;
        Ok((exec, dec, tok, tmpl))
    })();
    let (exec, mut dec, tok, template) = match built {
        Ok(x) => x,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), vec![]),
    };
    let want = |ids: &[u32], tok: &Tokenizer, pick: &PickSpec| {
        cuda_pick(&mut dec, tok, ids, n_tokens, pick)
    };
    let (verdict, mut detail) = match fault {
        Some(at) => {
            let faulty = SwapOne {
                inner: exec,
                rows: 0,
                at,
            };
            serve_and_check(faulty, want, tok, template, n_tokens)
        }
        None => serve_and_check(exec, want, tok, template, n_tokens),
    };
    if batched {
        detail.insert(
            0,
            "served with batched decode (ASSAY_SERVED_BATCHED_DECODE=1)".into(),
        );
    }
    if let Some(at) = fault {
        detail.push(format!(
            "planted fault: answer {at} of the CUDA executor (logits row or token) swapped (ASSAY_SERVED_PLANT_FAULT)"
        ));
    }
    GateOutcome {
        verdict,
        detail,
        model: Some(facts),
        workload: Workload {
            mode: Some("gate".into()),
            prompt_id: Some("served-chat-v1".into()),
            sampling: Some("greedy + seeded samples + json_schema".into()),
            batch: Some(16),
            ..Workload::default()
        },
    }
}

fn served_spec(ctx: &GateContext) -> GateOutcome {
    let (model, facts) = match crate::reference_gates::default_model(ctx) {
        Ok(x) => x,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), vec![]),
    };
    let (n_tokens, ks): (usize, &[usize]) = if ctx.quick {
        (8, &[1, 4, 8])
    } else {
        (24, &[1, 2, 4, 8])
    };
    let opts = ReferenceOptions {
        threads: Some(ctx.threads.max(1)),
        kv_dtype: KvDtype::F16,
    };
    let reference = match Reference::new(model.clone(), opts)
        .and_then(|mut r| r.cache_weights(1 << 30).map(|_| r))
    {
        Ok(r) => Arc::new(r),
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e.to_string()]), vec![]),
    };
    let mut runs: Vec<(spec::Proposal, usize)> =
        ks.iter().map(|&k| (spec::Proposal::Ngram, k)).collect();
    runs.push((spec::Proposal::SelfDraft, 4));
    let (verdict, detail) = spec::run_served_spec(&reference, n_tokens, 8, &runs, &|| {
        Box::new(engine::spec::ExactVerifier)
    });
    GateOutcome {
        verdict,
        detail,
        model: Some(facts),
        workload: Workload {
            mode: Some("gate".into()),
            prompt_id: Some("served-chat-v1".into()),
            gen_tokens: Some(n_tokens as u64),
            k: ks.last().map(|&k| k as u64),
            sampling: Some("greedy + seeded sample".into()),
            threads: Some(ctx.threads as u64),
            batch: Some(8),
            ..Workload::default()
        },
    }
}

fn served(ctx: &GateContext) -> GateOutcome {
    let (model, facts) = match crate::reference_gates::default_model(ctx) {
        Ok(x) => x,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), vec![]),
    };
    let n_tokens = if ctx.quick { 8 } else { 24 };
    let opts = ReferenceOptions {
        threads: Some(ctx.threads.max(1)),
        kv_dtype: KvDtype::F16,
    };
    let built = (|| -> Result<(Reference, Reference, Tokenizer, ChatTemplate), String> {
        let mut a = Reference::new(model.clone(), opts).map_err(|e| e.to_string())?;
        let mut b = Reference::new(model.clone(), opts).map_err(|e| e.to_string())?;
        a.cache_weights(1 << 30).map_err(|e| e.to_string())?;
        b.cache_weights(1 << 30).map_err(|e| e.to_string())?;
        let tok = Tokenizer::from_gguf(model.header()).map_err(|e| e.to_string())?;
        let tmpl = ChatTemplate::for_model(model.header()).map_err(|e| e.to_string())?;
        Ok((a, b, tok, tmpl))
    })();
    let (reference, served, tok, template) = match built {
        Ok(x) => x,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), vec![]),
    };
    let (verdict, detail) = run_served(
        CpuExecutor::new(served),
        &reference,
        tok,
        template,
        n_tokens,
    );
    GateOutcome {
        verdict,
        detail,
        model: Some(facts),
        workload: Workload {
            mode: Some("gate".into()),
            prompt_id: Some("served-chat-v1".into()),
            sampling: Some("greedy + seeded samples + json_schema".into()),
            threads: Some(ctx.threads as u64),
            batch: Some(16),
            ..Workload::default()
        },
    }
}

#[cfg(test)]
mod tests;
