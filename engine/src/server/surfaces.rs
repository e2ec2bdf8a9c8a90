//! The API surfaces beyond plain chat/completions (see [`crate::api`]): grammars for
//! `response_format` and forced tool calls, tools rendered through the chat template and
//! parsed back, and the Anthropic Messages (`/v1/messages`) and OpenAI Responses
//! (`/v1/responses`) routes, which translate onto the same parse / submit path as chat
//! completions (same auth, limits and metrics) and translate the result back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::mpsc;

use super::error::ApiError;
use super::handlers::{Collector, body_json, default_seed, engine_error, fresh_id, now_s, submit};
use super::request::{self, GenParams, Kind, Prompt, constrain_error};
use super::{AppState, ServedModel, Tenant};
use crate::api::constrain::{Constrained, GrammarEnv};
use crate::api::tools::{self, Parsed, ToolFormat, ToolParser};
use crate::api::{Outcome, Stop, anthropic, responses};
use crate::scheduler::{Event, Finish, FinishReason};
use crate::tokenizer::{ChatTemplate, TemplateError};

type EnvCache = Mutex<HashMap<usize, Arc<GrammarEnv>>>;

/// The grammar environment of a served model, built on first use.
fn grammar_env(m: &ServedModel) -> Result<Arc<GrammarEnv>, ApiError> {
    static CACHE: OnceLock<EnvCache> = OnceLock::new();
    let key = m as *const ServedModel as usize;
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(e) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(e);
    }
    let env = Arc::new(
        GrammarEnv::new(&m.tokenizer, m.tokenizer.vocab_size())
            .map_err(|e| ApiError::internal(e.to_string()))?,
    );
    if let Ok(mut c) = cache.lock() {
        c.insert(key, env.clone());
    }
    Ok(env)
}

fn tool_format(m: &ServedModel) -> Option<ToolFormat> {
    m.template.as_ref().map(|t| ToolFormat::detect(t.source()))
}

/// The grammar a request needs: its `response_format`, or a forced tool call.
pub(super) fn constraint(m: &ServedModel, p: &GenParams) -> Result<Option<Constrained>, ApiError> {
    let spec = match (&p.response_format, &p.tools, tool_format(m)) {
        (Some(spec), _, _) => Some(spec.clone()),
        (None, Some(t), Some(fmt)) => tools::grammar(t, fmt, &m.tokenizer)
            .map_err(|(param, msg)| ApiError::bad_field(&param, msg))?,
        _ => None,
    };
    match spec {
        None => Ok(None),
        Some(spec) => grammar_env(m)?
            .compile(&spec)
            .map(Some)
            .map_err(constrain_error),
    }
}

/// Render a chat request that carries tools or tool-shaped messages.
pub(super) fn render_with_tools(t: &ChatTemplate, p: &GenParams) -> Result<String, TemplateError> {
    let msgs: Vec<Value> = match &p.prompt {
        Prompt::Messages(ms) => ms
            .iter()
            .map(|x| serde_json::json!({"role": x.role, "content": x.content}))
            .collect(),
        Prompt::ChatJson(v) => v.clone(),
        _ => Vec::new(),
    };
    let fmt = ToolFormat::detect(t.source());
    let (msgs, tools) = tools::prepare(msgs, p.tools.as_ref(), fmt);
    t.render(&msgs, tools.as_ref(), true)
}

/// A tool-call parser when the request lets the model call tools.
pub(super) fn tool_parser(m: &ServedModel, p: &GenParams, id: &str) -> Option<ToolParser> {
    let fmt = tool_format(m)?;
    p.tools
        .as_ref()
        .filter(|t| t.active())
        .map(|_| ToolParser::new(fmt.family, &format!("call_{id}")))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Surface {
    Anthropic,
    Responses,
}

fn stop_of(f: &FinishReason, stopped: bool) -> Stop {
    match f {
        _ if stopped => Stop::StopSequence(None),
        FinishReason::Eog => Stop::EndTurn,
        _ => Stop::Length,
    }
}

pub(super) async fn messages(
    State(st): State<Arc<AppState>>,
    tenant: Option<Extension<Tenant>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match serve(st, tenant, body, Surface::Anthropic).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = (
                e.status,
                axum::Json(anthropic::error_body(e.status.as_u16(), &e.message)),
            )
                .into_response();
            if let Some(s) = e.retry_after
                && let Ok(v) = HeaderValue::from_str(&s.to_string())
            {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
    }
}

pub(super) async fn responses(
    State(st): State<Arc<AppState>>,
    tenant: Option<Extension<Tenant>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    serve(st, tenant, body, Surface::Responses)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn serve(
    st: Arc<AppState>,
    tenant: Option<Extension<Tenant>>,
    body: Result<Bytes, BytesRejection>,
    surface: Surface,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let v = body_json(body, st.config.body_limit_bytes)?;
    let chat = match surface {
        Surface::Anthropic => anthropic::to_chat(&v),
        Surface::Responses => responses::to_chat(&v),
    }
    .map_err(|(param, msg)| ApiError::bad_field(&param, msg))?;
    let p = request::parse(&chat, Kind::Chat, default_seed())?;
    let (m, rx, n_prompt) = submit(&st, tenant, &p, Kind::Chat).await?;
    let id = match surface {
        Surface::Anthropic => format!("msg_{}", fresh_id()),
        Surface::Responses => format!("resp_{}", fresh_id()),
    };
    if p.stream {
        return Ok(stream(st, m, p, surface, id, rx, started, n_prompt));
    }
    let mut c = Collector::new(&m, &p.stop, started, &st);
    let mut rx = rx;
    let mut text = String::new();
    let mut cached = 0;
    let finish: Option<Finish> = loop {
        match rx.recv().await {
            Some(Event::Admitted { cached_tokens }) => cached = cached_tokens,
            Some(Event::Logprob(_)) => {}
            Some(Event::Token(t)) => {
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
    let stop = match &finish {
        Some(f) => {
            if let Some(e) = engine_error(f) {
                return Err(e);
            }
            text.push_str(&c.tail());
            stop_of(&f.reason, c.stopped)
        }
        None => Stop::StopSequence(None),
    };
    let parts = match tool_parser(&m, &p, &id) {
        Some(mut ps) => {
            let mut parts = ps.push(&text);
            parts.extend(ps.finish());
            parts
        }
        None => vec![Parsed::Content(text)],
    };
    let o = Outcome {
        id,
        model: m.alias.clone(),
        created: now_s(),
        parts,
        stop,
        prompt_tokens: n_prompt,
        cached_tokens: cached,
        completion_tokens: c.tokens.len(),
    };
    let body = match surface {
        Surface::Anthropic => anthropic::response(&o),
        Surface::Responses => responses::response(&o),
    };
    Ok(axum::Json(body).into_response())
}

enum Events {
    Anthropic(anthropic::EventStream),
    Responses(responses::EventStream),
}

impl Events {
    fn piece(&mut self, p: &Parsed) -> Vec<String> {
        match self {
            Events::Anthropic(s) => s.piece(p),
            Events::Responses(s) => s.piece(p),
        }
    }

    fn finish(&mut self, o: &Outcome) -> Vec<String> {
        match self {
            Events::Anthropic(s) => s.finish(o),
            Events::Responses(s) => s.finish(o),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn stream(
    st: Arc<AppState>,
    m: Arc<ServedModel>,
    p: GenParams,
    surface: Surface,
    id: String,
    mut rx: mpsc::UnboundedReceiver<Event>,
    started: Instant,
    n_prompt: usize,
) -> Response {
    let (tx, out) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let created = now_s();
        let mut c = Collector::new(&m, &p.stop, started, &st);
        let mut parser = tool_parser(&m, &p, &id);
        let mut all: Vec<Parsed> = Vec::new();
        let mut cached = 0;
        // The start event carries the prompt usage: wait for admission first.
        let mut early = Vec::new();
        match rx.recv().await {
            Some(Event::Admitted { cached_tokens }) => cached = cached_tokens,
            Some(ev) => early.push(ev),
            None => return,
        }
        let (mut events, start) = match surface {
            Surface::Anthropic => {
                let mut s = anthropic::EventStream::new();
                let ev = s.start(&id, &m.alias, n_prompt, cached);
                (Events::Anthropic(s), ev)
            }
            Surface::Responses => {
                let mut s = responses::EventStream::new(&id);
                let ev = s.start(&m.alias, created);
                (Events::Responses(s), ev)
            }
        };
        for e in start {
            if tx.send(Bytes::from(e)).await.is_err() {
                return;
            }
        }
        let mut early = early.into_iter();
        let stop = loop {
            let ev = match early.next() {
                Some(ev) => Some(ev),
                None => tokio::select! {
                    ev = rx.recv() => ev,
                    _ = tx.closed() => return,
                },
            };
            let (text, end) = match ev {
                Some(Event::Admitted { cached_tokens }) => {
                    cached = cached_tokens;
                    continue;
                }
                Some(Event::Logprob(_)) => continue,
                Some(Event::Token(t)) => {
                    let text = c.token(t);
                    let end = c.stopped.then_some(Stop::StopSequence(None));
                    (text, end)
                }
                Some(Event::Finished(f)) => {
                    if let Some(e) = engine_error(&f) {
                        let err = match surface {
                            Surface::Anthropic => anthropic::sse(
                                "error",
                                &anthropic::error_body(e.status.as_u16(), &e.message),
                            ),
                            Surface::Responses => format!(
                                "event: error\ndata: {}\n\n",
                                serde_json::json!({"type": "error", "message": e.message})
                            ),
                        };
                        let _ = tx.send(Bytes::from(err)).await;
                        return;
                    }
                    let text = c.tail();
                    (text, Some(stop_of(&f.reason, c.stopped)))
                }
                None => return,
            };
            let mut parts = match parser.as_mut() {
                Some(ps) => ps.push(&text),
                None if text.is_empty() => Vec::new(),
                None => vec![Parsed::Content(text)],
            };
            if end.is_some()
                && let Some(ps) = parser.take()
            {
                parts.extend(ps.finish());
            }
            for part in parts {
                for e in events.piece(&part) {
                    if tx.send(Bytes::from(e)).await.is_err() {
                        return;
                    }
                }
                all.push(part);
            }
            if let Some(stop) = end {
                break stop;
            }
        };
        drop(rx);
        let o = Outcome {
            id: id.clone(),
            model: m.alias.clone(),
            created,
            parts: all,
            stop,
            prompt_tokens: n_prompt,
            cached_tokens: cached,
            completion_tokens: c.tokens.len(),
        };
        for e in events.finish(&o) {
            if tx.send(Bytes::from(e)).await.is_err() {
                return;
            }
        }
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
