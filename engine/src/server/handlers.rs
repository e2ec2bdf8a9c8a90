//! Route handlers: parse and validate, tokenize (chat template for chat), submit to the
//! model's scheduler, then answer in one JSON body or as an SSE stream, detokenizing
//! incrementally and applying stop strings. A handler or stream that goes away drops its
//! event receiver, which cancels the request in the engine and frees its KV.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::error::ApiError;
use super::request::{self, GenParams, Kind, Prompt};
use super::stop::StopMatcher;
use super::surfaces;
use super::{AppState, ServedModel, Tenant};
use crate::api::logprobs::TokenNames;
use crate::scheduler::{Event, Finish, FinishReason, GenRequest, SubmitError};
use crate::tokenizer::StreamDecoder;

pub(super) fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(super) fn fresh_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{:x}{:06x}", t, n & 0xff_ffff)
}

pub(super) fn default_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(super) async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

pub(super) async fn ready(State(st): State<Arc<AppState>>) -> Response {
    if !st.models.is_empty() && st.models.iter().all(|m| m.scheduler.is_ready()) {
        axum::Json(json!({"status": "ready"})).into_response()
    } else {
        ApiError::unavailable("not ready: models loading, warming up or shutting down")
            .into_response()
    }
}

pub(super) async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let models: Vec<(&str, &crate::scheduler::Stats)> = st
        .models
        .iter()
        .map(|m| (m.alias.as_str(), m.scheduler.stats()))
        .collect();
    let mut r = st.metrics.render(&models).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

fn model_json(m: &ServedModel) -> Value {
    json!({"id": m.alias, "object": "model", "created": m.created, "owned_by": "assay"})
}

pub(super) async fn models(State(st): State<Arc<AppState>>) -> Response {
    let data: Vec<Value> = st.models.iter().map(|m| model_json(m)).collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

pub(super) async fn model(
    State(st): State<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let id = match id {
        Ok(Path(id)) => id,
        Err(e) => return ApiError::bad_request(e.body_text()).into_response(),
    };
    match st.model(&id) {
        Some(m) => axum::Json(model_json(m)).into_response(),
        None => ApiError::model_not_found(&id).into_response(),
    }
}

pub(super) async fn no_route(uri: Uri) -> Response {
    ApiError::no_route(uri.path()).into_response()
}

pub(super) async fn method_not_allowed() -> Response {
    ApiError::method_not_allowed().into_response()
}

pub(super) async fn chat(
    State(st): State<Arc<AppState>>,
    tenant: Option<Extension<Tenant>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(st, tenant, body, Kind::Chat)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub(super) async fn completions(
    State(st): State<Arc<AppState>>,
    tenant: Option<Extension<Tenant>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(st, tenant, body, Kind::Completion)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub(super) fn body_json(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Value, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::body_too_large(limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {}", r.body_text()))
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// Token ids of the prompt, as `assay generate` makes them (chat through the template,
/// control tokens parsed; plain text with BOS as the metadata says).
pub(super) fn tokenize(m: &ServedModel, p: &GenParams) -> Result<Vec<u32>, ApiError> {
    let tok = &m.tokenizer;
    let ids = match &p.prompt {
        Prompt::Tokens(t) => {
            if let Some(&bad) = t.iter().find(|&&x| x as usize >= tok.vocab_size()) {
                return Err(ApiError::bad_field(
                    "prompt",
                    format!(
                        "token id {bad} is outside the vocabulary ({})",
                        tok.vocab_size()
                    ),
                ));
            }
            t.clone()
        }
        Prompt::Text(s) => tok
            .encode(s, true, false)
            .map_err(|e| ApiError::bad_field("prompt", format!("cannot tokenize: {e}")))?,
        Prompt::Messages(_) | Prompt::ChatJson(_) => {
            let Some(t) = &m.template else {
                return Err(ApiError::bad_request(format!(
                    "model `{}` has no chat template; use /v1/completions",
                    m.alias
                )));
            };
            let rendered = match &p.prompt {
                Prompt::Messages(msgs) if p.tools.is_none() => t.render(msgs, None, true),
                _ => surfaces::render_with_tools(t, p),
            };
            let text = rendered.map_err(|e| {
                ApiError::bad_field(
                    "messages",
                    format!("the chat template rejected the conversation: {e}"),
                )
            })?;
            let starts_with_bos = tok
                .bos_id()
                .and_then(|b| tok.token_text(b))
                .is_some_and(|b| !b.is_empty() && text.starts_with(b));
            tok.encode(&text, !starts_with_bos, true)
                .map_err(|e| ApiError::bad_field("messages", format!("cannot tokenize: {e}")))?
        }
    };
    if ids.is_empty() {
        return Err(ApiError::bad_field(
            "prompt",
            "the prompt is empty after tokenization",
        ));
    }
    Ok(ids)
}

pub(super) fn submit_error(e: SubmitError, retry_after: u64) -> ApiError {
    match e {
        SubmitError::QueueFull(_) => ApiError::queue_full(format!("server busy: {e}"), retry_after),
        SubmitError::ShuttingDown | SubmitError::EngineGone => ApiError::unavailable(e.to_string()),
        SubmitError::EmptyPrompt => ApiError::bad_field("prompt", e.to_string()),
        SubmitError::TooLong { .. } => ApiError::bad_field("max_tokens", e.to_string()),
    }
}

pub(super) fn finish_reason(f: &FinishReason, stopped: bool) -> &'static str {
    if stopped {
        return "stop";
    }
    match f {
        FinishReason::Eog => "stop",
        _ => "length",
    }
}

pub(super) fn usage(prompt: usize, cached: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// `usage` with the request's speculation (an extension: `usage.spec` = verification
/// rounds, drafted and accepted tokens) when it speculated.
pub(super) fn with_spec(mut u: Value, f: Option<&crate::scheduler::Finish>) -> Value {
    if let Some(s) = f.and_then(|f| f.spec) {
        u["spec"] =
            json!({"rounds": s.rounds, "drafted_tokens": s.drafted, "accepted_tokens": s.accepted});
    }
    u
}

/// Turns engine events into text: detokenizer, stop strings, token accounting.
pub(super) struct Collector<'a> {
    dec: Option<StreamDecoder<'a>>,
    stop: StopMatcher,
    pub(super) stopped: bool,
    pub(super) tokens: Vec<u32>,
    started: Instant,
    last: Option<Instant>,
    state: &'a AppState,
}

impl<'a> Collector<'a> {
    pub(super) fn new(
        m: &'a ServedModel,
        stops: &[String],
        started: Instant,
        state: &'a AppState,
    ) -> Self {
        Self {
            dec: Some(StreamDecoder::new(&m.tokenizer)),
            stop: StopMatcher::new(stops),
            stopped: false,
            tokens: Vec::new(),
            started,
            last: None,
            state,
        }
    }

    /// A token: the text now safe to emit.
    pub(super) fn token(&mut self, t: u32) -> String {
        let now = Instant::now();
        match self.last {
            None => self
                .state
                .metrics
                .ttft
                .observe((now - self.started).as_secs_f64()),
            Some(l) => self
                .state
                .metrics
                .inter_token
                .observe((now - l).as_secs_f64()),
        }
        self.last = Some(now);
        self.tokens.push(t);
        let piece = match self.dec.as_mut() {
            Some(d) => d.push(t).unwrap_or_default(),
            None => String::new(),
        };
        let (text, stop) = self.stop.push(&piece);
        self.stopped = stop;
        text
    }

    /// End of the stream (not after a stop): the held-back text.
    pub(super) fn tail(&mut self) -> String {
        let rest = self
            .dec
            .take()
            .map(StreamDecoder::finish)
            .unwrap_or_default();
        let (mut text, stop) = self.stop.push(&rest);
        self.stopped |= stop;
        if !stop {
            text.push_str(&self.stop.finish());
        }
        text
    }
}

pub(super) fn engine_error(f: &Finish) -> Option<ApiError> {
    match &f.reason {
        FinishReason::Shutdown => Some(ApiError::unavailable("the server is shutting down")),
        FinishReason::Error(e) => Some(ApiError::internal(format!("generation failed: {e}"))),
        FinishReason::Cancelled => Some(ApiError::internal("the request was cancelled")),
        _ => None,
    }
}

async fn generate(
    st: Arc<AppState>,
    tenant: Option<Extension<Tenant>>,
    body: Result<Bytes, BytesRejection>,
    kind: Kind,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let v = body_json(body, st.config.body_limit_bytes)?;
    let p = request::parse(&v, kind, default_seed())?;
    let (m, rx, n_prompt) = submit(&st, tenant, &p, kind).await?;
    let id = match kind {
        Kind::Chat => format!("chatcmpl-{}", fresh_id()),
        Kind::Completion => format!("cmpl-{}", fresh_id()),
    };
    if p.stream {
        Ok(stream(st, m, p, kind, id, rx, started, n_prompt))
    } else {
        blocking(&st, &m, &p, kind, id, rx, started, n_prompt).await
    }
}

/// The events of a submitted request, with its model and prompt length.
pub(super) type Submitted = (Arc<ServedModel>, mpsc::UnboundedReceiver<Event>, usize);

/// Resolve the model, tokenize, build the grammar and queue the request.
pub(super) async fn submit(
    st: &AppState,
    tenant: Option<Extension<Tenant>>,
    p: &GenParams,
    kind: Kind,
) -> Result<Submitted, ApiError> {
    let m = st
        .model(&p.model)
        .ok_or_else(|| ApiError::model_not_found(&p.model))?
        .clone();
    if !m.scheduler.is_ready()
        && m.scheduler
            .stats()
            .draining
            .load(std::sync::atomic::Ordering::SeqCst)
    {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    // Template rendering and tokenization of a large body, and compiling a grammar (the
    // first one of a model also builds its token trie), take a while: off the async workers.
    let (mm, pp) = (m.clone(), p.clone());
    let (prompt, constraint) = tokio::task::spawn_blocking(move || {
        Ok::<_, ApiError>((tokenize(&mm, &pp)?, surfaces::constraint(&mm, &pp)?))
    })
    .await
    .map_err(|_| ApiError::internal("tokenization failed"))??;
    if prompt.len() > m.max_prompt_tokens {
        let param = match kind {
            Kind::Chat => "messages",
            Kind::Completion => "prompt",
        };
        return Err(ApiError::too_large(
            Some(param),
            format!(
                "the prompt is {} tokens, more than the limit of {}",
                prompt.len(),
                m.max_prompt_tokens
            ),
        ));
    }
    let n_ctx = m.scheduler.config().n_ctx;
    let max_tokens = p.max_tokens.unwrap_or(n_ctx.saturating_sub(prompt.len()));
    let (tx, rx) = mpsc::unbounded_channel();
    let n_prompt = prompt.len();
    m.scheduler
        .submit(GenRequest {
            tenant: tenant.map(|t| t.0.0).unwrap_or_default(),
            prompt,
            max_tokens,
            sampling: p.sampling.clone(),
            events: tx,
            constraint,
            logprobs: p.logprobs.map(|l| l.top),
            ignore_eos: p.ignore_eos,
        })
        .map_err(|e| submit_error(e, st.config.retry_after_s))?;
    Ok((m, rx, n_prompt))
}

#[allow(clippy::too_many_arguments)]
async fn blocking(
    st: &AppState,
    m: &ServedModel,
    p: &GenParams,
    kind: Kind,
    id: String,
    mut rx: mpsc::UnboundedReceiver<Event>,
    started: Instant,
    n_prompt: usize,
) -> Result<Response, ApiError> {
    let mut c = Collector::new(m, &p.stop, started, st);
    let mut text = String::new();
    let mut cached = 0;
    let mut lps = Vec::new();
    let mut pending_lp = None;
    let finish = loop {
        match rx.recv().await {
            Some(Event::Admitted { cached_tokens }) => cached = cached_tokens,
            Some(Event::Logprob(l)) => pending_lp = Some(l),
            Some(Event::Token(t)) => {
                lps.extend(pending_lp.take());
                text.push_str(&c.token(t));
                if c.stopped {
                    break None;
                }
            }
            Some(Event::Finished(f)) => break Some(f),
            None => return Err(ApiError::internal("the engine dropped the request")),
        }
    };
    drop(rx);
    let reason = match &finish {
        Some(f) => {
            if let Some(e) = engine_error(f) {
                return Err(e);
            }
            text.push_str(&c.tail());
            finish_reason(&f.reason, c.stopped)
        }
        None => "stop",
    };
    let u = with_spec(usage(n_prompt, cached, c.tokens.len()), finish.as_ref());
    let mut message = json!({"role": "assistant", "content": text});
    let mut reason = reason;
    if let Some(mut parser) = surfaces::tool_parser(m, p, &id) {
        let mut parts = parser.push(&text);
        parts.extend(parser.finish());
        message = crate::api::tools::message(&parts);
        if message.get("tool_calls").is_some() {
            reason = "tool_calls";
        }
    }
    let mut choice = match kind {
        Kind::Chat => json!({
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": reason,
        }),
        Kind::Completion => json!({
            "index": 0,
            "text": text,
            "logprobs": null,
            "finish_reason": reason,
        }),
    };
    if p.return_token_ids {
        choice["token_ids"] = json!(c.tokens);
    }
    if p.logprobs.is_some() {
        let names = TokenNames::ids_if(p.return_tokens_as_token_ids);
        choice["logprobs"] = match kind {
            Kind::Chat => crate::api::logprobs::chat_logprobs(&m.tokenizer, &lps, names),
            Kind::Completion => {
                crate::api::logprobs::completion_logprobs(&m.tokenizer, &lps, 0, names)
            }
        };
    }
    let object = match kind {
        Kind::Chat => "chat.completion",
        Kind::Completion => "text_completion",
    };
    Ok(axum::Json(json!({
        "id": id,
        "object": object,
        "created": now_s(),
        "model": m.alias,
        "choices": [choice],
        "usage": u,
    }))
    .into_response())
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

fn chunk(
    kind: Kind,
    id: &str,
    created: u64,
    model: &str,
    text: Option<&str>,
    reason: Option<&str>,
    ids: Option<&[u32]>,
) -> Value {
    let mut choice = match kind {
        Kind::Chat => {
            let delta = match text {
                Some(t) => json!({"content": t}),
                None => json!({}),
            };
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": reason})
        }
        Kind::Completion => {
            json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": reason})
        }
    };
    if let Some(ids) = ids {
        choice["token_ids"] = json!(ids);
    }
    let object = match kind {
        Kind::Chat => "chat.completion.chunk",
        Kind::Completion => "text_completion",
    };
    json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]})
}

#[allow(clippy::too_many_arguments)]
fn stream(
    st: Arc<AppState>,
    m: Arc<ServedModel>,
    p: GenParams,
    kind: Kind,
    id: String,
    mut rx: mpsc::UnboundedReceiver<Event>,
    started: Instant,
    n_prompt: usize,
) -> Response {
    let (tx, out) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let created = now_s();
        let model = m.alias.as_str();
        let mut c = Collector::new(&m, &p.stop, started, &st);
        let ids = |t: u32| p.return_token_ids.then_some(vec![t]);
        let names = TokenNames::ids_if(p.return_tokens_as_token_ids);
        let mut parser = surfaces::tool_parser(&m, &p, &id);
        let mut pending_lp = None;
        let mut text_offset = 0usize;
        let mut called = false;
        if kind == Kind::Chat {
            let mut first = chunk(kind, &id, created, model, None, None, None);
            first["choices"][0]["delta"] = json!({"role": "assistant", "content": ""});
            if tx.send(sse(&first)).await.is_err() {
                return;
            }
        }
        let mut cached = 0;
        let mut spec = None;
        let reason = loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = tx.closed() => return,
            };
            match ev {
                Some(Event::Admitted { cached_tokens }) => cached = cached_tokens,
                Some(Event::Logprob(l)) => pending_lp = Some(l),
                Some(Event::Token(t)) => {
                    let text = c.token(t);
                    let tid = ids(t);
                    let lp = pending_lp.take().map(|l| match kind {
                        Kind::Chat => {
                            crate::api::logprobs::chat_logprobs(&m.tokenizer, &[l], names)
                        }
                        Kind::Completion => {
                            let v = crate::api::logprobs::completion_logprobs(
                                &m.tokenizer,
                                &[l],
                                text_offset,
                                names,
                            );
                            text_offset += text.len();
                            v
                        }
                    });
                    if let Some(ps) = parser.as_mut() {
                        for part in ps.push(&text) {
                            called |= matches!(part, crate::api::tools::Parsed::Call { .. });
                            let mut ch = chunk(kind, &id, created, model, None, None, None);
                            ch["choices"][0]["delta"] = crate::api::tools::delta(&part);
                            if tx.send(sse(&ch)).await.is_err() {
                                return;
                            }
                        }
                    } else if !text.is_empty() || tid.is_some() || lp.is_some() {
                        let mut ch =
                            chunk(kind, &id, created, model, Some(&text), None, tid.as_deref());
                        if let Some(lp) = lp {
                            ch["choices"][0]["logprobs"] = lp;
                        }
                        if tx.send(sse(&ch)).await.is_err() {
                            return;
                        }
                    }
                    if c.stopped {
                        break "stop";
                    }
                }
                Some(Event::Finished(f)) => {
                    if let Some(e) = engine_error(&f) {
                        let _ = tx.send(sse(&e.body())).await;
                        return;
                    }
                    spec = Some(f.clone());
                    let mut text = c.tail();
                    if let Some(mut ps) = parser.take() {
                        let mut parts = ps.push(&text);
                        parts.extend(ps.finish());
                        text.clear();
                        for part in parts {
                            if matches!(part, crate::api::tools::Parsed::Call { .. }) {
                                called = true;
                            }
                            let mut ch = chunk(kind, &id, created, model, None, None, None);
                            ch["choices"][0]["delta"] = crate::api::tools::delta(&part);
                            if tx.send(sse(&ch)).await.is_err() {
                                return;
                            }
                        }
                    }
                    if !text.is_empty()
                        && tx
                            .send(sse(&chunk(
                                kind,
                                &id,
                                created,
                                model,
                                Some(&text),
                                None,
                                None,
                            )))
                            .await
                            .is_err()
                    {
                        return;
                    }
                    if called {
                        break "tool_calls";
                    }
                    break finish_reason(&f.reason, c.stopped);
                }
                None => {
                    let _ = tx
                        .send(sse(
                            &ApiError::internal("the engine dropped the request").body()
                        ))
                        .await;
                    return;
                }
            }
        };
        drop(rx);
        if tx
            .send(sse(&chunk(
                kind,
                &id,
                created,
                model,
                None,
                Some(reason),
                None,
            )))
            .await
            .is_err()
        {
            return;
        }
        if p.include_usage {
            let u = json!({
                "id": id, "object": match kind { Kind::Chat => "chat.completion.chunk", Kind::Completion => "text_completion" },
                "created": created, "model": model, "choices": [],
                "usage": with_spec(usage(n_prompt, cached, c.tokens.len()), spec.as_ref()),
            });
            if tx.send(sse(&u)).await.is_err() {
                return;
            }
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    let body = futures_util::stream::unfold(out, |mut out| async move {
        out.recv()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), out))
    });
    let mut r = Response::new(Body::from_stream(body));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
