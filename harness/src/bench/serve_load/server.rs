//! Our server for a load or pairing cell: the `assay serve` flags of a cell and the
//! server process itself ([`AssayServer`]: started on a free loopback port, ready when
//! `/ready` answers, stopped on drop). The client that drives it is the parent module.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Protocol, Target};

/// Tokens per engine step our server is given for load and pairing cells
/// (`--max-batch-tokens`; `assay serve`'s default is 256). A prompt is prefilled in chunks of
/// at most this many tokens, each chunk a pass over every weight: session 19's BF16 pairs
/// against vLLM (TTFT 0.42x at 4096 prompt tokens, prefill 0.48x at 2048) ran at the default,
/// 16 and 8 chunks. A chunk runs as prompt passes of up to 1024 rows (the engine's
/// `PREFILL_PASS_ROWS` since engine21: session 21's prefill-h200 A/B measured 1024-row passes
/// 16-19% faster than 512 at 2048 and 8192 tokens), so a 2048-token chunk is two full passes
/// and bounds a step's prefill share.
pub const SERVE_MAX_BATCH_TOKENS: usize = 2048;

/// The flags of `assay serve` for a load or pairing cell: the cell's backend, a context of
/// its prompt + generated tokens (+16), no prefix cache (every request is timed cold), a
/// queue of at least twice the concurrency, [`SERVE_MAX_BATCH_TOKENS`] tokens per step.
pub fn serve_flags(
    backend: &str,
    prompt_tokens: usize,
    gen_tokens: usize,
    concurrency: usize,
) -> Vec<String> {
    vec![
        "--backend".into(),
        backend.into(),
        "--ctx".into(),
        (prompt_tokens + gen_tokens + 16).to_string(),
        "--prefix-cache-entries".into(),
        "0".into(),
        "--max-queue".into(),
        (concurrency * 2).max(16).to_string(),
        "--max-batch-tokens".into(),
        SERVE_MAX_BATCH_TOKENS.to_string(),
    ]
}

/// The flags of `assay serve --spec` for a speculative cell (`spec = { ... }`): the
/// proposer (`ngram`, or `draft:` with `draft`, the draft checkpoint's path), the largest
/// depth, `--spec-fixed` unless adaptive, and the speed policy on or off.
pub fn spec_flags(
    spec: &crate::bench::cells::SpecCell,
    draft: Option<&std::path::Path>,
) -> Result<Vec<String>> {
    let proposer = if spec.proposer == "ngram" {
        "ngram".to_owned()
    } else if spec.proposer.starts_with("draft:") {
        let Some(d) = draft else {
            bail!("proposer {:?}: no draft checkpoint given", spec.proposer);
        };
        format!("draft:{}", d.display())
    } else {
        bail!(
            "proposer {:?} is not one `assay serve --spec` takes",
            spec.proposer
        );
    };
    let mut f = vec![
        "--spec".to_owned(),
        proposer,
        "--spec-k".to_owned(),
        spec.k.to_string(),
        "--spec-policy".to_owned(),
        if spec.policy { "on" } else { "off" }.to_owned(),
    ];
    if !spec.adaptive {
        f.push("--spec-fixed".to_owned());
    }
    Ok(f)
}

/// A running `assay serve`, stopped on drop.
pub struct AssayServer {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    pub flags: Vec<String>,
    pub ready_s: f64,
}

impl AssayServer {
    /// Start `binary serve` on `model` with `flags` on a free loopback port, output to
    /// `log`, and wait until `/ready` answers 200 (the weights are loaded and the warm-up
    /// step ran).
    pub fn start(
        binary: &Path,
        model: &Path,
        flags: &[String],
        log: &Path,
        ready_timeout: Duration,
    ) -> Result<AssayServer> {
        if !binary.is_file() {
            bail!(
                "no assay binary at {} (build it: cargo build --release -p engine --bin assay; or pass --assay-bin)",
                binary.display()
            );
        }
        let port = crate::bench::llama_server::free_port()?;
        let out = std::fs::File::create(log)
            .with_context(|| format!("creating the server log {}", log.display()))?;
        let err = out.try_clone().context("sharing the server log")?;
        let child = Command::new(binary)
            .arg("serve")
            .arg("--model")
            .arg(format!("bench={}", model.display()))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut s = AssayServer {
            child: Some(child),
            port,
            log: log.to_owned(),
            flags: flags.to_vec(),
            ready_s: 0.0,
        };
        let waited = (|| -> Result<f64> {
            let t = Instant::now();
            loop {
                let alive = match s.child.as_mut() {
                    Some(c) => c.try_wait().context("polling the server")?.is_none(),
                    None => false,
                };
                if !alive {
                    bail!("assay serve exited before it was ready");
                }
                let status =
                    crate::bench::llama_server::http_status(port, "/ready", Duration::from_secs(2));
                if status == Some(200) {
                    return Ok(t.elapsed().as_secs_f64());
                }
                if t.elapsed() > ready_timeout {
                    bail!(
                        "assay serve was not ready after {} s (last /ready status: {status:?})",
                        ready_timeout.as_secs()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })();
        match waited {
            Ok(t) => {
                s.ready_s = t;
                Ok(s)
            }
            Err(e) => {
                s.stop();
                Err(crate::bench::llama_server::start_error(
                    e,
                    "assay serve",
                    port,
                    log,
                ))
            }
        }
    }

    /// The target of this server (`model` = the alias it serves, `bench`).
    pub fn target(&self) -> Target {
        Target {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)),
            model: "bench".into(),
            api_key: None,
            protocol: Protocol::OpenAi,
        }
    }

    /// Stop it (kill, then reap).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for AssayServer {
    fn drop(&mut self) {
        self.stop();
    }
}
