//! The `served` gate: greedy requests through `assay serve`'s HTTP path (the real server
//! in-process on a loopback port, the CPU reference behind the scheduler) return the same
//! tokens as the plain single-sequence greedy reference path that `assay generate` runs —
//! blocking and streamed, alone and among 16 concurrent requests, cold and from the
//! prefix cache (which must report cached tokens).
//!
//! [`run_served`] takes the executor, so a test plants a fault (an executor that swaps one
//! token, [`SwapOne`]) and sees the gate go red.
//!
//! `served-cuda` is the same check with the CUDA backend behind the server
//! ([`engine::scheduler::CudaExecutor`]) against the greedy path of `assay generate
//! --backend cuda` (one [`CudaDecoder`]: prompt, device argmax, graphed steps). It needs a
//! GPU. Setting `ASSAY_SERVED_PLANT_FAULT=N` swaps the N-th answer the CUDA executor returns
//! (answer 1 is the warm-up's logits row; the requests' answers are device-picked tokens), so
//! a GPU run can show the gate going red. `ASSAY_SERVED_BATCHED_DECODE=1` serves with the
//! executor's batched decode on (`assay serve --batched-decode`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use engine::cuda::{CudaConfig, CudaDecoder, Gpu};
use engine::kv::KvDtype;
use engine::reference::{Reference, ReferenceOptions};
use engine::sampling::{Sampler, SamplerConfig};
use engine::scheduler::{
    self, CpuExecutor, CudaExecutor, Executor, SchedulerConfig, StepInput, StepOut,
};
use engine::server::{AppState, Metrics, ServedModel, ServerConfig};
use engine::tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use serde_json::{Value, json};

use crate::receipt::Workload;
use crate::{GateContext, GateDef, GateOutcome, Verdict};

/// The served gates.
pub fn gates() -> Vec<GateDef> {
    vec![
        GateDef {
            name: "served",
            about: "greedy tokens over HTTP (blocking, streamed, 16 concurrent, prefix-cached) == reference greedy",
            needs_gpu: false,
            quick: true,
            run: served,
        },
        GateDef {
            name: "served-cuda",
            about: "greedy tokens over HTTP on the CUDA backend (blocking, streamed, 16 concurrent, prefix-cached) == assay generate --backend cuda",
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

/// The reference greedy path of `assay generate`: one sequence, prefill, then one token
/// per step, stop at end-of-generation or `n` tokens.
pub fn reference_greedy(
    r: &Reference,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
) -> Result<Vec<u32>, String> {
    let mut sampler = Sampler::new(SamplerConfig::default());
    for &t in prompt {
        sampler.accept(t);
    }
    let mut kv = r.new_cache();
    let mut logits = r.step(&mut kv, prompt).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while out.len() < n {
        let t = sampler.sample(&logits);
        if tok.is_eog(t) {
            break;
        }
        sampler.accept(t);
        out.push(t);
        if out.len() == n {
            break;
        }
        logits = r.step(&mut kv, &[t]).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// A minimal HTTP/1.1 POST over loopback (`Connection: close`): status and body, the
/// chunked transfer coding undone.
pub fn http_post(
    addr: SocketAddr,
    path: &str,
    key: &str,
    body: &str,
) -> Result<(u16, Vec<u8>), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(600)))
        .map_err(|e| e.to_string())?;
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status line")?;
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body)?;
    }
    Ok((status, body))
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let nl = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("bad chunk header")?;
        let size_txt = String::from_utf8_lossy(&b[..nl]);
        let size = usize::from_str_radix(size_txt.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_txt:?}"))?;
        b = &b[nl + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(b.get(..size).ok_or("truncated chunk")?);
        b = b.get(size + 2..).ok_or("truncated chunk")?;
    }
}

/// One greedy chat request with API key `key`; returns the served tokens, the cached
/// prompt tokens and the prompt tokens.
pub fn served_tokens(
    addr: SocketAddr,
    key: &str,
    prompt: &str,
    n: usize,
    stream: bool,
) -> Result<(Vec<u32>, u64, u64), String> {
    let model = "gate";
    let mut req = json!({
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": n,
        "temperature": 0,
        "return_token_ids": true,
    });
    if stream {
        req["stream"] = json!(true);
        req["stream_options"] = json!({"include_usage": true});
    }
    let (status, body) = http_post(addr, "/v1/chat/completions", key, &req.to_string())?;
    if status != 200 {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)));
    }
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_u64())
                    .map(|x| x as u32)
                    .collect()
            })
            .unwrap_or_default()
    };
    if !stream {
        let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        return Ok((ids(&v["choices"][0]["token_ids"]), cached, prompt));
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    let (mut toks, mut cached, mut prompt_tokens, mut done) = (Vec::new(), 0, 0, false);
    for ev in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        if ev == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value =
            serde_json::from_str(ev).map_err(|e| format!("bad SSE event {ev:?}: {e}"))?;
        if v.get("error").is_some() {
            return Err(format!("stream error: {ev}"));
        }
        toks.extend(ids(&v["choices"][0]["token_ids"]));
        if let Some(c) = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() {
            cached = c;
        }
        if let Some(p) = v["usage"]["prompt_tokens"].as_u64() {
            prompt_tokens = p;
        }
    }
    if !done {
        return Err("stream ended without [DONE]".into());
    }
    Ok((toks, cached, prompt_tokens))
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
    let want = |ids: &[u32], tok: &Tokenizer| reference_greedy(reference, tok, ids, n_tokens);
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
    dec.reset();
    dec.forward(prompt).map_err(|e| e.to_string())?;
    let mut t = dec.argmax().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while out.len() < n && !tok.is_eog(t) {
        out.push(t);
        if out.len() == n {
            break;
        }
        t = dec.step_graphed(t).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// Serve `exec` in-process and check every case against `want` (the expected greedy
/// tokens of a prompt's ids). Returns the verdict and detail lines.
pub fn serve_and_check<E: Executor>(
    exec: E,
    mut want: impl FnMut(&[u32], &Tokenizer) -> Result<Vec<u32>, String>,
    tok: Tokenizer,
    template: ChatTemplate,
    n_tokens: usize,
) -> (Verdict, Vec<String>) {
    let mut wants = Vec::new();
    for p in PROMPTS {
        match chat_ids(&tok, &template, p).and_then(|ids| want(&ids, &tok)) {
            Ok(w) => wants.push(w),
            Err(e) => {
                return (
                    Verdict::from_failures(vec![format!("reference: {e}")]),
                    vec![],
                );
            }
        }
    }
    let config = SchedulerConfig {
        n_ctx: 1024,
        kv_budget_bytes: 256 << 20,
        block_tokens: 16,
        max_queue: 64,
        max_batch_tokens: 64,
        prefix_cache_entries: 32,
        eog_tokens: tok.eog_ids(),
        warmup_token: tok.bos_id(),
    };
    let sched = match scheduler::start(exec, config) {
        Ok(s) => s,
        Err(e) => {
            return (
                Verdict::from_failures(vec![format!("scheduler: {e}")]),
                vec![],
            );
        }
    };
    let hashes: String = (0..=PROMPTS.len())
        .map(|i| format!("{}\n", engine::server::auth::hash_key(&key(i))))
        .collect();
    let keys = match engine::server::KeySet::parse(&hashes, "gate keys") {
        Ok(k) => k,
        Err(e) => return (Verdict::from_failures(vec![format!("keys: {e}")]), vec![]),
    };
    let state = Arc::new(AppState {
        models: vec![Arc::new(ServedModel {
            alias: "gate".into(),
            tokenizer: tok,
            template: Some(template),
            scheduler: sched,
            max_prompt_tokens: 1000,
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        })],
        keys: Some(keys),
        metrics: Metrics::default(),
        config: ServerConfig::default(),
    });
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return (
                Verdict::from_failures(vec![format!("runtime: {e}")]),
                vec![],
            );
        }
    };
    let listener = match rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")) {
        Ok(l) => l,
        Err(e) => return (Verdict::from_failures(vec![format!("bind: {e}")]), vec![]),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return (Verdict::from_failures(vec![format!("bind: {e}")]), vec![]),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(engine::server::serve(listener, state, async {
        let _ = stop_rx.await;
    }));
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
    let _ = stop_tx.send(());
    let _ = rt.block_on(server);
    let n = cases.len();
    let verdict = check(&cases);
    let detail = vec![format!(
        "{n} requests over HTTP ({} prompts x cold/cached/streamed + 16 concurrent), {n_tokens} greedy tokens each, equal to the single-sequence greedy path",
        PROMPTS.len()
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
    let want = |ids: &[u32], tok: &Tokenizer| cuda_greedy(&mut dec, tok, ids, n_tokens);
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
            sampling: Some("greedy".into()),
            batch: Some(16),
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
            sampling: Some("greedy".into()),
            threads: Some(ctx.threads as u64),
            batch: Some(16),
            ..Workload::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_is_red_on_one_swapped_token_or_an_error() {
        let ok = || Case {
            label: "a".into(),
            want: vec![1, 2, 3],
            got: Ok(vec![1, 2, 3]),
        };
        assert_eq!(check(&[ok(), ok()]), Verdict::Green);
        let swapped = Case {
            label: "b".into(),
            want: vec![1, 2, 3],
            got: Ok(vec![1, 9, 3]),
        };
        let Verdict::Red { failures } = check(&[ok(), swapped]) else {
            panic!("not red")
        };
        assert!(
            failures[0].starts_with("b: token 1 differs"),
            "{failures:?}"
        );
        let short = Case {
            label: "c".into(),
            want: vec![1, 2, 3],
            got: Ok(vec![1, 2]),
        };
        assert!(check(&[short]).is_red());
        let err = Case {
            label: "d".into(),
            want: vec![1],
            got: Err("HTTP 500".into()),
        };
        assert!(check(&[err]).is_red());
    }

    type Loaded = (Reference, Reference, Tokenizer, ChatTemplate);

    /// SmolLM2 twice (reference and served) with its tokenizer and template, or `None`
    /// (skip) when it is not fetched.
    fn smollm2() -> Option<Loaded> {
        let dir = std::env::var_os("ASSAY_MODELS_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".cache/assay/models")
            });
        let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
        if !path.exists() {
            println!("SKIP: {} not found", path.display());
            return None;
        }
        let model = Arc::new(engine::model_file::GgufModel::open(&path).unwrap());
        let opts = ReferenceOptions {
            threads: Some(2),
            kv_dtype: KvDtype::F16,
        };
        let mut reference = Reference::new(model.clone(), opts).unwrap();
        reference.cache_weights(1 << 30).unwrap();
        let mut served = Reference::new(model.clone(), opts).unwrap();
        served.cache_weights(1 << 30).unwrap();
        let tok = Tokenizer::from_gguf(model.header()).unwrap();
        let tmpl = ChatTemplate::for_model(model.header()).unwrap();
        Some((reference, served, tok, tmpl))
    }

    #[test]
    fn the_served_path_is_green_and_one_swapped_token_turns_it_red() {
        let Some((reference, served, tok, tmpl)) = smollm2() else {
            return;
        };
        let (v, detail) = run_served(CpuExecutor::new(served), &reference, tok, tmpl, 3);
        assert_eq!(v, Verdict::Green, "{detail:?}");
        let Some((reference, served, tok, tmpl)) = smollm2() else {
            return;
        };
        // Row 1 is the warm-up; row 6 belongs to a real request.
        let faulty = SwapOne {
            inner: CpuExecutor::new(served),
            rows: 0,
            at: 6,
        };
        let (v, _) = run_served(faulty, &reference, tok, tmpl, 3);
        let Verdict::Red { failures } = v else {
            panic!("a swapped token left the gate green")
        };
        assert!(
            failures.iter().any(|f| f.contains("differs")),
            "{failures:?}"
        );
    }

    /// On a GPU with SmolLM2 fetched: the CUDA served path is green, and one swapped token
    /// behind it turns the gate red (skipped elsewhere).
    #[test]
    fn the_cuda_served_path_is_green_and_one_swapped_token_turns_it_red() {
        if !engine::cuda::driver_present() {
            println!("SKIP: no CUDA driver");
            return;
        }
        let Some((_, _, tok, tmpl)) = smollm2() else {
            return;
        };
        let dir = std::env::var_os("ASSAY_MODELS_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".cache/assay/models")
            });
        let model =
            engine::model_file::GgufModel::open(&dir.join("SmolLM2-135M-Instruct.Q4_1.gguf"))
                .unwrap();
        let gpu = Arc::new(Gpu::open(&CudaConfig::default()).unwrap());
        let program = engine::arch::build_program(model.header()).unwrap();
        let mut dec = CudaDecoder::new(gpu.clone(), &model, program, 1024).unwrap();
        let exec = CudaExecutor::new(gpu.clone(), &model, true).unwrap();
        let want = |ids: &[u32], tok: &Tokenizer| cuda_greedy(&mut dec, tok, ids, 3);
        let (v, detail) = serve_and_check(exec, want, tok, tmpl, 3);
        assert_eq!(v, Verdict::Green, "{detail:?}");
        let Some((_, _, tok, tmpl)) = smollm2() else {
            return;
        };
        let faulty = SwapOne {
            inner: CudaExecutor::new(gpu, &model, true).unwrap(),
            rows: 0,
            at: 6,
        };
        let want = |ids: &[u32], tok: &Tokenizer| cuda_greedy(&mut dec, tok, ids, 3);
        let (v, _) = serve_and_check(faulty, want, tok, tmpl, 3);
        assert!(v.is_red(), "a swapped token left the CUDA gate green");
    }

    #[test]
    fn dechunk_undoes_chunked_coding() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(dechunk(b"5\r\nab").is_err());
    }
}
