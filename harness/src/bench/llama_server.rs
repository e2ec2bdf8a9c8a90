//! `llama-server` as a pairing arm (for `harness pair`, issue 12): start it on a free
//! local port with llama.cpp's best batch-1 serving flags, wait until `/health` answers
//! 200 (it answers 503 while the model loads), stop it (also on drop). Its output goes
//! to a log file, whose tail is quoted when it dies or never becomes ready.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::llamacpp::Install;

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Context length per slot.
    pub ctx: usize,
    /// Server slots (concurrent sequences).
    pub parallel: usize,
    /// Layers offloaded to the GPU (999: all; 0 on a CPU build).
    pub gpu_layers: usize,
    /// CPU threads (None: llama.cpp's default).
    pub threads: Option<usize>,
    /// Port to listen on (None: a free one chosen here).
    pub port: Option<u16>,
    /// Extra flags appended verbatim (recorded in the receipt like the others).
    pub extra: Vec<String>,
    /// Longest wait for `/health` to answer 200.
    pub ready_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            ctx: 4096,
            parallel: 1,
            gpu_layers: 999,
            threads: None,
            port: None,
            extra: Vec::new(),
            ready_timeout: Duration::from_secs(300),
        }
    }
}

/// llama-server's settings beyond [`server_args`]'s base that every pairing run passes (its
/// best flags for the board; competitors/llama.cpp/README.md says why each is there), before
/// any `--llama-server-arg` of an A/B. Session 25's A/B (research/notes/s25/README.md, logs
/// only, three cells, same run): `--ctx-checkpoints 0 --cache-ram 0` cut llama-server's TTFT
/// on a 2k prompt from 1663 to 306 ms (Gemma-3-12B Q8_0) and from 367 to 186 ms (8B Q8_0),
/// and on Gemma's 512 prompt from 412 to 82 ms, decode within noise; adding `-b 2048 -ub
/// 2048` gained nothing more (311 and 188 ms). The pairing board counts a llama-server
/// receipt only if its flags end with exactly these after the base ([`pair_tuning_of`]):
/// changing them makes every receipt taken without them stale.
pub const PAIR_TUNING: &[&str] = &["--ctx-checkpoints", "0", "--cache-ram", "0"];

/// The flags a recorded llama-server arm ran with past [`server_args`]'s base (`-m FILE`
/// first, `--host` .. `--metrics`, an optional `-t N`); None when the flags do not have
/// that base (another arm's, or a receipt from before the base was settled).
pub fn pair_tuning_of(flags: &[String]) -> Option<&[String]> {
    let i = flags.iter().position(|f| f == "--metrics")?;
    let mut rest = &flags[i + 1..];
    if rest.first().map(String::as_str) == Some("-t") && rest.len() >= 2 {
        rest = &rest[2..];
    }
    Some(rest)
}

/// The flags of a server on `port` (model given separately, as in the bench arm):
/// loopback only, every layer offloaded, flash attention on, one KV cache of `ctx` tokens
/// per slot, no web UI. CUDA graphs are on by default in this build (GGML_CUDA_GRAPHS).
pub fn server_args(o: &ServerOptions, port: u16) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
        "-ngl".into(),
        o.gpu_layers.to_string(),
        "-fa".into(),
        "on".into(),
        "-c".into(),
        (o.ctx * o.parallel.max(1)).to_string(),
        "-np".into(),
        o.parallel.max(1).to_string(),
        "--no-webui".into(),
        "--metrics".into(),
    ];
    if let Some(t) = o.threads {
        a.push("-t".into());
        a.push(t.to_string());
    }
    a.extend(o.extra.iter().cloned());
    a
}

/// A free TCP port on the loopback interface (bound then released; the server binds it
/// right after, a race only another process picking the same port could lose).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(l.local_addr().context("reading the bound port")?.port())
}

/// The HTTP status of `GET path` on the loopback `port`, or None when nothing answers.
pub fn http_status(port: u16, path: &str, timeout: Duration) -> Option<u16> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while !got.contains(&b'\n') && got.len() < 64 {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&got);
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => code.parse().ok(),
        _ => None,
    }
}

/// Poll `/health` on `port` until it answers 200; `alive` says whether the server process
/// still runs (a dead one ends the wait at once). Seconds waited.
pub fn wait_ready(
    port: u16,
    timeout: Duration,
    mut alive: impl FnMut() -> Result<bool>,
) -> Result<f64> {
    let t = Instant::now();
    let mut last = None;
    loop {
        if !alive()? {
            bail!("the server exited before it was ready (last /health status: {last:?})");
        }
        last = http_status(port, "/health", Duration::from_secs(2));
        if last == Some(200) {
            return Ok(t.elapsed().as_secs_f64());
        }
        if t.elapsed() > timeout {
            bail!(
                "the server was not ready after {} s (last /health status: {last:?})",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// [`wait_ready`] for a spawned `child` (held in an `Option` so that a stop can take it):
/// the wait ends at once when the process has exited.
pub fn wait_child_ready(
    port: u16,
    timeout: Duration,
    child: &mut Option<std::process::Child>,
) -> Result<f64> {
    wait_ready(port, timeout, || match child.as_mut() {
        Some(c) => Ok(c.try_wait().context("polling the server")?.is_none()),
        None => Ok(false),
    })
}

/// A failed start's error: `e` with the server's name, port and the tail of its log.
pub fn start_error(e: anyhow::Error, what: &str, port: u16, log: &Path) -> anyhow::Error {
    e.context(format!(
        "{what} on port {port}; log {}:\n{}",
        log.display(),
        log_tail(log, 15)
    ))
}

/// The last `n` lines of a log file (for error messages).
fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A running llama-server.
pub struct LlamaServer {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    /// The flags it was started with (model file name first).
    pub flags: Vec<String>,
    /// Seconds from start to the first 200 on `/health`.
    pub ready_s: f64,
}

impl LlamaServer {
    /// Start `binary` (llama-server) serving `model`, its output to `log`, and wait until
    /// it is ready. A server that exits or never becomes ready is stopped and reported
    /// with the tail of its log.
    pub fn start_binary(
        binary: &Path,
        model: &Path,
        o: &ServerOptions,
        log: &Path,
    ) -> Result<LlamaServer> {
        if !binary.is_file() {
            bail!(
                "no llama-server at {} (build it with competitors/llama.cpp/build)",
                binary.display()
            );
        }
        let port = match o.port {
            Some(p) => p,
            None => free_port()?,
        };
        let args = server_args(o, port);
        let out = std::fs::File::create(log)
            .with_context(|| format!("creating the server log {}", log.display()))?;
        let err = out.try_clone().context("sharing the server log")?;
        let child = Command::new(binary)
            .arg("-m")
            .arg(model)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let file = model
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut flags = vec!["-m".to_string(), file];
        flags.extend(args);
        let mut s = LlamaServer {
            child: Some(child),
            port,
            log: log.to_owned(),
            flags,
            ready_s: 0.0,
        };
        let waited = wait_child_ready(port, o.ready_timeout, &mut s.child);
        match waited {
            Ok(t) => {
                s.ready_s = t;
                Ok(s)
            }
            Err(e) => {
                let _ = s.stop();
                Err(start_error(e, "llama-server", port, log))
            }
        }
    }

    /// Start the llama-server of `install`.
    pub fn start(
        install: &Install,
        model: &Path,
        o: &ServerOptions,
        log: &Path,
    ) -> Result<LlamaServer> {
        LlamaServer::start_binary(&install.llama_server, model, o, log)
    }

    /// The base URL of its OpenAI-compatible API.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Stop it (kill, then reap); its exit status, None when already stopped.
    pub fn stop(&mut self) -> Result<Option<ExitStatus>> {
        let Some(mut c) = self.child.take() else {
            return Ok(None);
        };
        if c.try_wait().context("polling the server")?.is_none() {
            c.kill().context("stopping the server")?;
        }
        Ok(Some(c.wait().context("reaping the server")?))
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::cells::DeviceKind;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn args_are_loopback_full_offload_flash_attention() {
        let o = ServerOptions {
            parallel: 4,
            ctx: 1024,
            threads: Some(8),
            ..ServerOptions::default()
        };
        assert_eq!(
            server_args(&o, 8123).join(" "),
            "--host 127.0.0.1 --port 8123 -ngl 999 -fa on -c 4096 -np 4 --no-webui --metrics -t 8"
        );
    }

    /// A fake server: 503 for the first `loading` requests, then 200.
    fn fake(loading: usize) -> (u16, Arc<AtomicUsize>) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(AtomicUsize::new(0));
        let s2 = Arc::clone(&seen);
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { break };
                let mut buf = [0u8; 512];
                let _ = c.read(&mut buf);
                let n = s2.fetch_add(1, Ordering::SeqCst);
                let code = if n < loading {
                    "503 Service Unavailable"
                } else {
                    "200 OK"
                };
                let _ =
                    c.write_all(format!("HTTP/1.1 {code}\r\nContent-Length: 0\r\n\r\n").as_bytes());
            }
        });
        (port, seen)
    }

    #[test]
    fn readiness_waits_for_200() {
        let (port, seen) = fake(3);
        assert_eq!(
            http_status(port, "/health", Duration::from_secs(2)),
            Some(503)
        );
        wait_ready(port, Duration::from_secs(20), || Ok(true)).unwrap();
        assert!(seen.load(Ordering::SeqCst) >= 4);
    }

    #[test]
    fn a_dead_or_silent_server_is_not_ready() {
        let (port, _) = fake(usize::MAX);
        let e = wait_ready(port, Duration::from_millis(300), || Ok(true)).unwrap_err();
        assert!(e.to_string().contains("not ready"), "{e}");
        assert!(e.to_string().contains("503"), "{e}");
        let e = wait_ready(port, Duration::from_secs(5), || Ok(false)).unwrap_err();
        assert!(e.to_string().contains("exited"), "{e}");
        // Nothing listening: no status at all.
        let p = free_port().unwrap();
        assert_eq!(http_status(p, "/health", Duration::from_millis(500)), None);
    }

    /// The real thing, run by hand where a CPU build and SmolLM2 exist:
    /// `cargo test -p harness --bin harness real_llama_server -- --ignored`.
    #[test]
    #[ignore = "needs competitors/llama.cpp/build --cpu and the SmolLM2 test model"]
    fn real_llama_server_starts_serves_and_stops() {
        let home = crate::bench::llamacpp::default_home().unwrap();
        let install = crate::bench::llamacpp::locate(&home, DeviceKind::Cpu).unwrap();
        let model = PathBuf::from(std::env::var_os("HOME").unwrap())
            .join(".cache/assay/models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let t = tempfile::tempdir().unwrap();
        let o = ServerOptions {
            gpu_layers: 0,
            ctx: 512,
            threads: Some(2),
            ..ServerOptions::default()
        };
        let mut s = LlamaServer::start(&install, &model, &o, &t.path().join("log")).unwrap();
        assert_eq!(
            http_status(s.port, "/health", Duration::from_secs(5)),
            Some(200)
        );
        assert_eq!(
            http_status(s.port, "/v1/models", Duration::from_secs(5)),
            Some(200)
        );
        assert!(s.base_url().ends_with("/v1"));
        assert!(s.stop().unwrap().is_some());
        assert_eq!(
            http_status(s.port, "/health", Duration::from_millis(500)),
            None
        );
        assert!(s.stop().unwrap().is_none());
    }

    #[test]
    fn a_missing_or_crashing_binary_is_a_clear_error() {
        let t = tempfile::tempdir().unwrap();
        let log = t.path().join("server.log");
        let o = ServerOptions {
            ready_timeout: Duration::from_secs(10),
            ..ServerOptions::default()
        };
        let e = LlamaServer::start_binary(&t.path().join("nope"), Path::new("m.gguf"), &o, &log)
            .err()
            .unwrap();
        assert!(e.to_string().contains("no llama-server"), "{e}");
        // A "server" that prints an error and exits.
        let bin = t.path().join("llama-server");
        std::fs::write(
            &bin,
            "#!/bin/sh\necho 'error: failed to load model' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        // (Retried while another test thread's fork still holds the script open for
        // writing: ETXTBSY.)
        let mut msg = String::new();
        for _ in 0..20 {
            let e = LlamaServer::start_binary(&bin, Path::new("m.gguf"), &o, &log)
                .err()
                .unwrap();
            msg = format!("{e:#}");
            if !msg.contains("Text file busy") {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(msg.contains("exited before it was ready"), "{msg}");
        assert!(msg.contains("failed to load model"), "{msg}");
    }
}
