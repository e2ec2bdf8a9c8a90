//! Serving load (issue 9): a bench cell of `mode = "serve"` starts `assay serve` on the
//! cell's model and drives it over HTTP with `batch` concurrent streams (the concurrency),
//! each a greedy streamed completion of `prompt_tokens` prompt ids and exactly
//! `gen_tokens` generated tokens (`ignore_eos`), and records per request the time to the
//! first token (TTFT) and the per-stream decode rate (tokens after the first over the time
//! from the first to the last), and per wave the aggregate rate (every token of the wave
//! over its wall time).
//!
//! The client ([`Target`], [`stream_completion`], [`wave`]) speaks only the OpenAI
//! `/v1/completions` streaming protocol (HTTP/1.1, SSE, chunked or not) given a base URL
//! and a model name, so a pairing (`harness pair`, issue 12) can point it at llama-server
//! or vLLM unchanged: the request carries `ignore_eos` (llama-server and vLLM read it
//! too) and `return_token_ids` (ours: every token is timed; without ids the usage's
//! `completion_tokens` counts the tokens and the events that carry text time them, since a
//! token that decodes to no text sends no event), and the usage is checked against the ids.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// The streaming protocol a target is driven with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// OpenAI `/v1/completions` (ours, vLLM): tokens counted by `token_ids`, else by text
    /// events, checked against the usage's `completion_tokens`.
    #[default]
    OpenAi,
    /// llama-server's native `/completion` stream. Its OpenAI stream cannot be counted:
    /// a token whose text ends inside a UTF-8 sequence sends no event at all (the next one
    /// carries the text), so there are fewer text events than tokens. Each native event
    /// carries `tokens_predicted`, the tokens generated so far, so every token is counted
    /// at the first event that knows of it; the event with `stop: true` ends the stream.
    LlamaNative,
}

/// An OpenAI-compatible server to load.
#[derive(Clone, Debug)]
pub struct Target {
    /// `host:port` on the loopback or elsewhere (plain HTTP).
    pub addr: SocketAddr,
    /// The `model` field of each request.
    pub model: String,
    /// A bearer key, if the server wants one.
    pub api_key: Option<String>,
    /// How requests are sent and tokens counted.
    pub protocol: Protocol,
}

/// One request's timing.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamTiming {
    /// Seconds from sending the request to the first token.
    pub ttft_s: f64,
    /// Seconds from sending the request to the end of the stream.
    pub total_s: f64,
    /// Tokens received.
    pub tokens: usize,
    /// Arrival time of each token, seconds from sending the request; with a server that
    /// sends no token ids, of each event that carried text (fewer than `tokens` when some
    /// tokens decode to no text: `tokens` then comes from the usage).
    pub token_times: Vec<f64>,
}

impl StreamTiming {
    /// Tokens after the first over the time from the first arrival to the last (None with
    /// fewer than two tokens or no time between them).
    pub fn decode_tok_s(&self) -> Option<f64> {
        let (first, last) = (self.token_times.first()?, self.token_times.last()?);
        let dt = last - first;
        (self.tokens >= 2 && dt > 0.0).then(|| (self.tokens - 1) as f64 / dt)
    }
}

/// Reads the body of a `Transfer-Encoding: chunked` response as plain bytes.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            // The CRLF ending the previous chunk comes first (an empty line), except
            // before the first chunk.
            while line.trim().is_empty() {
                line.clear();
                if self.inner.read_line(&mut line)? == 0 {
                    self.done = true;
                    return Ok(0);
                }
            }
            let size = line.trim().split(';').next().unwrap_or("");
            self.left = usize::from_str_radix(size.trim(), 16).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad chunk size {line:?}"),
                )
            })?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.left);
        let got = self.inner.read(&mut buf[..n])?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= got;
        Ok(got)
    }
}

/// Read an HTTP/1.1 response's status line and headers: the status code and whether the
/// body is chunked.
pub fn response_head(r: &mut impl BufRead) -> Result<(u16, bool)> {
    let mut status = String::new();
    r.read_line(&mut status).context("reading the status")?;
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("bad status line {status:?}"))?;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).context("reading the headers")? == 0 || h.trim().is_empty() {
            break;
        }
        let h = h.to_ascii_lowercase();
        chunked |= h.starts_with("transfer-encoding:") && h.contains("chunked");
    }
    Ok((code, chunked))
}

/// The flags of `assay serve` for a load or pairing cell: the cell's backend, a context of
/// its prompt + generated tokens (+16), no prefix cache (every request is timed cold), a
/// queue of at least twice the concurrency.
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

/// `GET /metrics` of a server on the loopback (the whole exposition text).
pub fn get_metrics(addr: SocketAddr, timeout: Duration) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut r = BufReader::new(s);
    let (code, chunked) = response_head(&mut r)?;
    if code != 200 {
        bail!("GET /metrics: HTTP {code}");
    }
    let mut body = Vec::new();
    r.read_to_end(&mut body)?;
    if chunked {
        body = gates::served_gate::dechunk(&body).map_err(anyhow::Error::msg)?;
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// One line of a speculating server's acceptance from its `/metrics` text (all models
/// summed): verification rounds, drafts accepted of drafted, and per draft position
/// accepted/proposed. `None` when no round ran.
pub fn spec_summary(metrics: &str) -> Option<String> {
    let sum = |name: &str, position: Option<usize>| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter(|l| position.is_none_or(|p| l.contains(&format!("position=\"{p}\""))))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let rounds = sum("assay_spec_rounds_total", None);
    if rounds == 0 {
        return None;
    }
    let (drafted, accepted) = (
        sum("assay_spec_drafted_tokens_total", None),
        sum("assay_spec_accepted_tokens_total", None),
    );
    let positions: Vec<String> = (1..=8)
        .map(|p| {
            (
                p,
                sum("assay_spec_position_accepted_total", Some(p)),
                sum("assay_spec_position_proposed_total", Some(p)),
            )
        })
        .filter(|&(_, _, n)| n > 0)
        .map(|(p, a, n)| format!("{p}: {a}/{n}"))
        .collect();
    Some(format!(
        "spec (assay /metrics, warm-up included): {rounds} verification rounds, {} plain steps, drafts accepted {accepted}/{drafted} ({:.1}%); per position {}",
        sum("assay_spec_plain_rounds_total", None),
        100.0 * accepted as f64 / drafted.max(1) as f64,
        positions.join(", ")
    ))
}

/// The tokens one SSE event carries: its `token_ids` when present; else, unless the stream
/// already carried ids (`ids_seen`: then an event without them, such as a final one
/// flushing held-back text, carries no new token), 1 for non-empty text, else 0.
fn event_tokens(v: &Value, ids_seen: &mut bool) -> usize {
    let choice = &v["choices"][0];
    if let Some(ids) = choice["token_ids"].as_array() {
        *ids_seen = true;
        return ids.len();
    }
    if *ids_seen {
        return 0;
    }
    let text = choice["text"]
        .as_str()
        .or_else(|| choice["delta"]["content"].as_str())
        .unwrap_or("");
    usize::from(!text.is_empty())
}

/// One streamed greedy completion of `prompt` (token ids) for exactly `max_tokens` tokens.
pub fn stream_completion(
    t: &Target,
    prompt: &[u32],
    max_tokens: usize,
    timeout: Duration,
) -> Result<StreamTiming> {
    let (path, body) = match t.protocol {
        Protocol::OpenAi => (
            "/v1/completions",
            json!({
                "model": t.model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "stream": true,
                "stream_options": {"include_usage": true},
                "ignore_eos": true,
                "return_token_ids": true,
            }),
        ),
        // top-k 1: the arg-max whatever the rest of llama.cpp's sampler chain does.
        Protocol::LlamaNative => (
            "/completion",
            json!({
                "prompt": prompt,
                "n_predict": max_tokens,
                "temperature": 0,
                "top_k": 1,
                "stream": true,
                "ignore_eos": true,
                "cache_prompt": false,
            }),
        ),
    };
    let body = body.to_string();
    let auth = t
        .api_key
        .as_ref()
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        t.addr,
        body.len()
    );
    let mut s = TcpStream::connect_timeout(&t.addr, Duration::from_secs(10))
        .with_context(|| format!("connecting to {}", t.addr))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    let t0 = Instant::now();
    s.write_all(req.as_bytes()).context("sending the request")?;
    let mut r = BufReader::new(s);
    let (code, chunked) = response_head(&mut r)?;
    let mut body: Box<dyn BufRead> = if chunked {
        Box::new(BufReader::new(Chunked {
            inner: r,
            left: 0,
            done: false,
        }))
    } else {
        Box::new(r)
    };
    if code != 200 {
        let mut text = String::new();
        let _ = body.read_to_string(&mut text);
        bail!("HTTP {code}: {}", text.trim());
    }
    let mut token_times = Vec::new();
    let mut usage_tokens = None;
    let mut done = false;
    let mut ids_seen = false;
    let mut line = String::new();
    loop {
        line.clear();
        if body.read_line(&mut line).context("reading the stream")? == 0 {
            break;
        }
        let now = t0.elapsed().as_secs_f64();
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            done = true;
            break;
        }
        let v: Value =
            serde_json::from_str(data).with_context(|| format!("bad SSE event {data:?}"))?;
        if v.get("error").is_some() {
            bail!("stream error: {data}");
        }
        if t.protocol == Protocol::LlamaNative {
            if let Some(n) = v["tokens_predicted"].as_u64() {
                while token_times.len() < n as usize {
                    token_times.push(now);
                }
            }
            if v["stop"].as_bool() == Some(true) {
                done = true;
                break;
            }
            continue;
        }
        for _ in 0..event_tokens(&v, &mut ids_seen) {
            token_times.push(now);
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            usage_tokens = Some(n as usize);
        }
    }
    if !done {
        bail!(match t.protocol {
            Protocol::OpenAi => "the stream ended without [DONE]",
            Protocol::LlamaNative => "the stream ended without its stop event",
        });
    }
    let tokens = match usage_tokens {
        // With ids every token is seen: the usage must agree.
        Some(n) if ids_seen && n != token_times.len() => bail!(
            "usage says {n} completion tokens, the stream carried {} token ids",
            token_times.len()
        ),
        // Without ids (llama-server, vLLM) a token that decodes to no text sends no event:
        // the usage counts the tokens, the text events time them.
        Some(n) if n < token_times.len() => bail!(
            "usage says {n} completion tokens, the stream carried {} text events",
            token_times.len()
        ),
        Some(n) => n,
        None => token_times.len(),
    };
    let Some(&ttft_s) = token_times.first() else {
        bail!("the stream carried no token");
    };
    Ok(StreamTiming {
        ttft_s,
        total_s: t0.elapsed().as_secs_f64(),
        tokens,
        token_times,
    })
}

/// Deterministic prompt ids of request `i`: distinct per request (no prefix is shared
/// between requests, so no server's prefix cache helps), within the first 10,000 ids.
pub fn prompt_ids(i: usize, len: usize) -> Vec<u32> {
    (0..len)
        .map(|j| (1000 + (i * 7919 + j * 104_729) % 9000) as u32)
        .collect()
}

/// One wave: `concurrency` requests sent at once (request ids `first..`), each of
/// `prompt_tokens` ids and `gen_tokens` tokens. Returns each request's timing and the
/// wave's wall time.
pub fn wave(
    t: &Target,
    concurrency: usize,
    first: usize,
    prompt_tokens: usize,
    gen_tokens: usize,
    timeout: Duration,
) -> Result<(Vec<StreamTiming>, f64)> {
    let barrier = Barrier::new(concurrency + 1);
    let (results, wall) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..concurrency)
            .map(|k| {
                let barrier = &barrier;
                let prompt = prompt_ids(first + k, prompt_tokens);
                s.spawn(move || {
                    barrier.wait();
                    stream_completion(t, &prompt, gen_tokens, timeout)
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let results: Vec<Result<StreamTiming>> = hs
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("client thread panicked")))
            })
            .collect();
        (results, t0.elapsed().as_secs_f64())
    });
    let mut out = Vec::with_capacity(concurrency);
    for (k, r) in results.into_iter().enumerate() {
        let r = r.with_context(|| format!("request {}", first + k))?;
        if r.tokens != gen_tokens {
            bail!(
                "request {}: {} tokens streamed, {gen_tokens} asked (ignore_eos)",
                first + k,
                r.tokens
            );
        }
        out.push(r);
    }
    Ok((out, wall))
}

/// The `q`-quantile of `v` (nearest rank; None when empty).
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s.get(rank - 1).copied()
}

/// What a serve cell measured.
pub struct ServeMeasured {
    /// Aggregate tok/s of each timed wave.
    pub aggregate: Vec<f64>,
    /// TTFT of each timed request, milliseconds.
    pub ttft_ms: Vec<f64>,
    /// Per-stream decode tok/s of each timed request.
    pub stream_tok_s: Vec<f64>,
    /// Detail lines for the receipt.
    pub detail: Vec<String>,
}

/// Run `warmup` discarded waves then `runs` timed waves of `concurrency` requests.
pub fn measure(
    t: &Target,
    concurrency: usize,
    prompt_tokens: usize,
    gen_tokens: usize,
    warmup: usize,
    runs: usize,
) -> Result<ServeMeasured> {
    let timeout = Duration::from_secs(600);
    let mut next = 0;
    for _ in 0..warmup {
        wave(t, concurrency, next, prompt_tokens, gen_tokens, timeout)?;
        next += concurrency;
    }
    let mut m = ServeMeasured {
        aggregate: Vec::new(),
        ttft_ms: Vec::new(),
        stream_tok_s: Vec::new(),
        detail: Vec::new(),
    };
    for _ in 0..runs {
        let (timings, wall) = wave(t, concurrency, next, prompt_tokens, gen_tokens, timeout)?;
        next += concurrency;
        let tokens: usize = timings.iter().map(|x| x.tokens).sum();
        m.aggregate.push(tokens as f64 / wall);
        for x in &timings {
            m.ttft_ms.push(x.ttft_s * 1000.0);
            if let Some(r) = x.decode_tok_s() {
                m.stream_tok_s.push(r);
            }
        }
    }
    let q = |v: &[f64], p: f64| quantile(v, p).map_or("-".into(), |x| format!("{x:.2}"));
    m.detail.push(format!(
        "concurrency {concurrency}: {runs} timed waves of {concurrency} streamed greedy completions ({prompt_tokens} prompt ids + {gen_tokens} tokens, ignore_eos) after {warmup} warm-up wave(s)"
    ));
    m.detail.push(format!(
        "TTFT ms: p50 {}, p90 {} (nearest rank) over {} requests",
        q(&m.ttft_ms, 0.5),
        q(&m.ttft_ms, 0.9),
        m.ttft_ms.len()
    ));
    m.detail.push(format!(
        "per-stream decode tok/s: p50 {}, p10 (the slowest tenth) {} (nearest rank) over {} requests",
        q(&m.stream_tok_s, 0.5),
        q(&m.stream_tok_s, 0.1),
        m.stream_tok_s.len()
    ));
    m.detail.push(format!(
        "aggregate tok/s per wave: p50 {} (nearest rank)",
        q(&m.aggregate, 0.5)
    ));
    Ok(m)
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
        let port = super::llama_server::free_port()?;
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
                    super::llama_server::http_status(port, "/ready", Duration::from_secs(2));
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
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                Err(e.context(format!(
                    "assay serve on port {port}; log {}:\n{tail}",
                    log.display()
                )))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server answering with `response` (raw HTTP).
    fn fake(response: String) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            s.write_all(response.as_bytes()).unwrap();
        });
        addr
    }

    fn target(addr: SocketAddr) -> Target {
        Target {
            addr,
            model: "m".into(),
            api_key: None,
            protocol: Protocol::OpenAi,
        }
    }

    fn chunk(s: &str) -> String {
        format!("{:x}\r\n{s}\r\n", s.len())
    }

    #[test]
    fn a_chunked_stream_is_timed_token_by_token() {
        // One event split across two chunks, one event with two ids, usage, [DONE].
        let body = [
            chunk("data: {\"choices\":[{\"text\":\"a\",\"tok"),
            chunk("en_ids\":[5]}]}\n\n"),
            chunk("data: {\"choices\":[{\"text\":\"bc\",\"token_ids\":[6,7]}]}\n\n"),
            // A final event flushing text without ids carries no new token.
            chunk("data: {\"choices\":[{\"text\":\"d\",\"finish_reason\":\"length\"}]}\n\n"),
            chunk("data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n"),
            chunk("data: [DONE]\n\n"),
            "0\r\n\r\n".to_string(),
        ]
        .concat();
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{body}"
        );
        let t = stream_completion(&target(fake(resp)), &[1, 2], 3, Duration::from_secs(5)).unwrap();
        assert_eq!(t.tokens, 3);
        assert_eq!(t.token_times.len(), 3);
        assert!(t.ttft_s >= 0.0 && t.total_s >= t.ttft_s);
    }

    #[test]
    fn a_llama_native_stream_counts_tokens_held_back_for_utf8() {
        // Token 2 ends inside a UTF-8 sequence: no event for it; the event of token 3
        // says 3 tokens so far. The final event has stop: true (no [DONE]).
        let body = [
            "data: {\"content\":\"a\",\"tokens_predicted\":1,\"stop\":false}\n\n",
            "data: {\"content\":\"\\u00e9\",\"tokens_predicted\":3,\"stop\":false}\n\n",
            "data: {\"content\":\"b\",\"tokens_predicted\":4,\"stop\":false}\n\n",
            "data: {\"content\":\"\",\"tokens_predicted\":4,\"stop\":true}\n\n",
        ]
        .concat();
        let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
        let mut tg = target(fake(resp));
        tg.protocol = Protocol::LlamaNative;
        let t = stream_completion(&tg, &[1, 2], 4, Duration::from_secs(5)).unwrap();
        assert_eq!(t.tokens, 4);
        // Without the stop event the stream is cut.
        let resp = "HTTP/1.1 200 OK\r\n\r\ndata: {\"content\":\"a\",\"tokens_predicted\":1,\"stop\":false}\n\n".to_string();
        let mut tg = target(fake(resp));
        tg.protocol = Protocol::LlamaNative;
        let e = stream_completion(&tg, &[1], 2, Duration::from_secs(5));
        assert!(format!("{:#}", e.unwrap_err()).contains("stop event"));
    }

    #[test]
    fn a_usage_mismatch_an_error_status_and_a_cut_stream_fail() {
        // Ids that disagree with the usage are an error.
        let body = "data: {\"choices\":[{\"text\":\"a\",\"token_ids\":[4]}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
        let e = stream_completion(&target(fake(resp)), &[1], 2, Duration::from_secs(5));
        assert!(format!("{:#}", e.unwrap_err()).contains("usage says 2"));
        // Without ids, fewer text events than the usage's tokens: the usage counts them.
        let body = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
        let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
        let t = stream_completion(&target(fake(resp)), &[1], 3, Duration::from_secs(5)).unwrap();
        assert_eq!((t.tokens, t.token_times.len()), (3, 2));
        // ... but never more events than tokens.
        let body = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";
        let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
        let e = stream_completion(&target(fake(resp)), &[1], 1, Duration::from_secs(5));
        assert!(format!("{:#}", e.unwrap_err()).contains("text events"));
        let resp = "HTTP/1.1 429 Too Many Requests\r\ncontent-length: 4\r\n\r\nbusy".to_string();
        let e = stream_completion(&target(fake(resp)), &[1], 2, Duration::from_secs(5));
        assert!(format!("{:#}", e.unwrap_err()).contains("HTTP 429"));
        let resp = "HTTP/1.1 200 OK\r\n\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\n".to_string();
        let e = stream_completion(&target(fake(resp)), &[1], 2, Duration::from_secs(5));
        assert!(format!("{:#}", e.unwrap_err()).contains("[DONE]"));
    }

    #[test]
    fn spec_acceptance_is_read_from_metrics() {
        let text = "# HELP x\nassay_spec_rounds_total{model=\"bench\"} 10\nassay_spec_plain_rounds_total{model=\"bench\"} 3\nassay_spec_drafted_tokens_total{model=\"bench\"} 30\nassay_spec_accepted_tokens_total{model=\"bench\"} 12\nassay_spec_position_proposed_total{model=\"bench\",position=\"1\"} 10\nassay_spec_position_accepted_total{model=\"bench\",position=\"1\"} 7\nassay_spec_position_proposed_total{model=\"bench\",position=\"2\"} 10\nassay_spec_position_accepted_total{model=\"bench\",position=\"2\"} 5\nassay_spec_position_proposed_total{model=\"bench\",position=\"3\"} 0\n";
        let s = spec_summary(text).unwrap();
        assert!(
            s.contains("10 verification rounds, 3 plain steps, drafts accepted 12/30 (40.0%)")
                && s.ends_with("per position 1: 7/10, 2: 5/10"),
            "{s}"
        );
        assert_eq!(
            spec_summary("assay_spec_rounds_total{model=\"m\"} 0\n"),
            None
        );
        let body = text.to_owned();
        let addr = fake(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
        let got = get_metrics(addr, Duration::from_secs(5)).unwrap();
        assert_eq!(spec_summary(&got), Some(s));
        let addr = fake("HTTP/1.1 500 Internal\r\nContent-Length: 0\r\n\r\n".into());
        assert!(get_metrics(addr, Duration::from_secs(5)).is_err());
    }

    #[test]
    fn spec_cells_get_the_serve_spec_flags() {
        use crate::bench::cells::SpecCell;
        let ngram = SpecCell {
            proposer: "ngram".into(),
            k: 8,
            adaptive: true,
            policy: true,
        };
        assert_eq!(
            spec_flags(&ngram, None).unwrap(),
            ["--spec", "ngram", "--spec-k", "8", "--spec-policy", "on"]
        );
        let draft = SpecCell {
            proposer: "draft:synth:Q4_0".into(),
            k: 4,
            adaptive: false,
            policy: false,
        };
        let p = std::path::Path::new("/m/synth/llama-q4_0.gguf");
        assert_eq!(
            spec_flags(&draft, Some(p)).unwrap(),
            [
                "--spec",
                "draft:/m/synth/llama-q4_0.gguf",
                "--spec-k",
                "4",
                "--spec-policy",
                "off",
                "--spec-fixed"
            ]
        );
        assert!(spec_flags(&draft, None).is_err());
        let mtp = SpecCell {
            proposer: "mtp".into(),
            ..ngram
        };
        assert!(spec_flags(&mtp, None).is_err());
    }

    #[test]
    fn decode_rate_quantiles_and_prompts() {
        let t = StreamTiming {
            ttft_s: 1.0,
            total_s: 3.0,
            tokens: 3,
            token_times: vec![1.0, 2.0, 3.0],
        };
        assert_eq!(t.decode_tok_s(), Some(1.0));
        let one = StreamTiming {
            token_times: vec![1.0],
            tokens: 1,
            ..t
        };
        assert_eq!(one.decode_tok_s(), None);
        let v = [5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(quantile(&v, 0.5), Some(5.0));
        assert_eq!(quantile(&v, 0.9), Some(9.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(prompt_ids(3, 16).len(), 16);
        assert_ne!(prompt_ids(0, 8), prompt_ids(1, 8));
        assert!(
            prompt_ids(2, 64)
                .iter()
                .all(|&x| (1000..10_000).contains(&x))
        );
    }
}
