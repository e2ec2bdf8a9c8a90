//! The OpenAI-compatible HTTP server (axum + tokio): `POST /v1/chat/completions`,
//! `POST /v1/completions` (blocking and SSE streaming), `GET /v1/models`, `GET /health`,
//! `GET /ready`, `GET /metrics`.
//!
//! Owns the routes, bearer-key auth on `/v1` ([`auth`]), OpenAI-style error bodies for
//! every failure ([`error`]), request validation ([`request`]), stop strings across token
//! boundaries ([`stop`]), Prometheus metrics ([`metrics`]) and graceful shutdown
//! ([`serve`]: on the signal, stop admitting and let running streams finish until the
//! drain deadline). Generation itself runs on each model's [`crate::scheduler`].

pub mod auth;
pub mod error;
mod handlers;
pub mod metrics;
pub mod request;
pub mod stop;
mod surfaces;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::scheduler::SchedulerHandle;
use crate::tokenizer::{ChatTemplate, Tokenizer};

pub use auth::KeySet;
pub use error::ApiError;
pub use metrics::Metrics;

/// One served model.
pub struct ServedModel {
    /// The name clients use in `model`.
    pub alias: String,
    pub tokenizer: Tokenizer,
    /// `None` when the model has no chat template (chat requests get a 400).
    pub template: Option<ChatTemplate>,
    pub scheduler: SchedulerHandle,
    /// Prompts longer than this get a 413.
    pub max_prompt_tokens: usize,
    /// Unix seconds of loading (the `created` of `/v1/models`).
    pub created: u64,
}

/// Server-wide settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Request bodies larger than this get a 413.
    pub body_limit_bytes: usize,
    /// After the shutdown signal, running streams may go on this long.
    pub drain_deadline: Duration,
    /// `Retry-After` seconds of a 429.
    pub retry_after_s: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            body_limit_bytes: 4 << 20,
            drain_deadline: Duration::from_secs(30),
            retry_after_s: 1,
        }
    }
}

/// Everything the handlers share.
pub struct AppState {
    pub models: Vec<Arc<ServedModel>>,
    /// `None`: no auth.
    pub keys: Option<KeySet>,
    pub metrics: Metrics,
    pub config: ServerConfig,
}

impl AppState {
    /// The model called `name`.
    pub fn model(&self, name: &str) -> Option<&Arc<ServedModel>> {
        self.models.iter().find(|m| m.alias == name)
    }
}

/// The tenant of an authenticated request (the key's hash; empty without auth).
#[derive(Clone, Debug, Default)]
pub struct Tenant(pub String);

async fn authenticate(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let tenant = match &st.keys {
        None => String::new(),
        Some(keys) => {
            let bearer = req
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                // Anthropic's SDKs send the key as `x-api-key`.
                .or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok()))
                .map(str::trim);
            match bearer {
                None => {
                    return ApiError::unauthorized(
                        "missing API key: send `Authorization: Bearer KEY`",
                    )
                    .into_response();
                }
                Some(k) => match keys.check(k) {
                    Some(t) => t,
                    None => return ApiError::unauthorized("invalid API key").into_response(),
                },
            }
        }
    };
    req.extensions_mut().insert(Tenant(tenant));
    next.run(req).await
}

async fn count_requests(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let r = next.run(req).await;
    st.metrics.request(&route, r.status().as_u16());
    r
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::internal("internal error while handling the request").into_response()
}

/// The application's routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(handlers::chat))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/messages", post(surfaces::messages))
        .route("/v1/responses", post(surfaces::responses))
        .route("/v1/models", get(handlers::models))
        .route("/v1/models/{id}", get(handlers::model))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    Router::new()
        .merge(v1)
        .route("/health", get(handlers::health))
        .route("/ready", get(handlers::ready))
        .route("/metrics", get(handlers::metrics))
        .fallback(handlers::no_route)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .layer(DefaultBodyLimit::max(state.config.body_limit_bytes))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .with_state(state)
}

/// Serve `state` on `listener` until `shutdown` resolves; then stop admitting, let running
/// streams finish until the drain deadline, and return once every engine thread ended.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state.clone());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let st = state.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: draining");
        for m in &st.models {
            m.scheduler.drain(st.config.drain_deadline);
        }
        let _ = tx.send(());
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(signal);
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        r = &mut server => r?,
        _ = async {
            let _ = rx.await;
            tokio::time::sleep(state.config.drain_deadline + Duration::from_secs(2)).await;
        } => tracing::warn!("drain deadline passed; closing remaining connections"),
    }
    let models = state.models.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for m in &models {
            m.scheduler.drain(Duration::ZERO);
            m.scheduler.join();
        }
    })
    .await;
    Ok(())
}
