//! The served gates' in-process server ([`InProcess`]): the real `assay serve` router on a
//! loopback port, in its own tokio runtime, over any executor.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use engine::scheduler::{self, Executor, SchedulerConfig};
use engine::server::{AppState, Metrics, ServedModel, ServerConfig};
use engine::tokenizer::{ChatTemplate, Tokenizer};

use super::{PROMPTS, key};

/// A server run in-process on a loopback port: one model `gate` (its scheduler speculating
/// with `spec` when given), API keys of the tenants [`key`] names.
pub struct InProcess {
    pub addr: std::net::SocketAddr,
    pub state: Arc<AppState>,
    rt: tokio::runtime::Runtime,
    stop_tx: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl InProcess {
    /// Start serving `exec`.
    pub fn start<E: Executor>(
        exec: E,
        tok: Tokenizer,
        template: ChatTemplate,
        spec: Option<engine::scheduler::SpecServe>,
    ) -> Result<Self, String> {
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
        let sched =
            scheduler::start_spec(exec, config, spec).map_err(|e| format!("scheduler: {e}"))?;
        let hashes: String = (0..=PROMPTS.len())
            .map(|i| format!("{}\n", engine::server::auth::hash_key(&key(i))))
            .collect();
        let keys = engine::server::KeySet::parse(&hashes, "gate keys")
            .map_err(|e| format!("keys: {e}"))?;
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
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .map_err(|e| format!("bind: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("bind: {e}"))?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = rt.spawn(engine::server::serve(listener, state.clone(), async {
            let _ = stop_rx.await;
        }));
        Ok(Self {
            addr,
            state,
            rt,
            stop_tx,
            server,
        })
    }

    /// The `/metrics` text as the server renders it.
    pub fn metrics(&self) -> String {
        let models: Vec<(&str, &engine::scheduler::Stats)> = self
            .state
            .models
            .iter()
            .map(|m| (m.alias.as_str(), m.scheduler.stats()))
            .collect();
        self.state.metrics.render(&models)
    }

    /// Stop the server and wait for it.
    pub fn stop(self) {
        let _ = self.stop_tx.send(());
        let _ = self.rt.block_on(self.server);
    }
}
