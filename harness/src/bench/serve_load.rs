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
use std::net::{SocketAddr, TcpStream};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

mod server;
pub use server::{AssayServer, serve_flags, spec_flags};

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

/// `GET /metrics` of a server on the loopback (the whole exposition text).
pub fn get_metrics(addr: SocketAddr, timeout: Duration) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    // One write: `write!` on the socket sends each piece of the format separately, and a
    // server that answers after its first read would reset the rest.
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())?;
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
    let prompts = (0..concurrency)
        .map(|k| prompt_ids(first + k, prompt_tokens))
        .collect();
    wave_of(t, prompts, first, gen_tokens, timeout)
}

/// [`wave`] with the requests' prompts given (one request per prompt).
pub fn wave_of(
    t: &Target,
    prompts: Vec<Vec<u32>>,
    first: usize,
    gen_tokens: usize,
    timeout: Duration,
) -> Result<(Vec<StreamTiming>, f64)> {
    let concurrency = prompts.len();
    let barrier = Barrier::new(concurrency + 1);
    let (results, wall) = std::thread::scope(|s| {
        let hs: Vec<_> = prompts
            .into_iter()
            .map(|prompt| {
                let barrier = &barrier;
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

/// Run `warmup` discarded waves then `runs` timed waves of `concurrency` requests; each
/// request's prompt is `text` (a prompt file's ids: the same for every request) or
/// distinct ids ([`prompt_ids`]).
pub fn measure(
    t: &Target,
    concurrency: usize,
    text: Option<&[u32]>,
    prompt_tokens: usize,
    gen_tokens: usize,
    warmup: usize,
    runs: usize,
) -> Result<ServeMeasured> {
    let timeout = Duration::from_secs(600);
    let prompts = |first: usize| -> Vec<Vec<u32>> {
        (0..concurrency)
            .map(|k| text.map_or_else(|| prompt_ids(first + k, prompt_tokens), <[u32]>::to_vec))
            .collect()
    };
    let mut next = 0;
    for _ in 0..warmup {
        wave_of(t, prompts(next), next, gen_tokens, timeout)?;
        next += concurrency;
    }
    let mut m = ServeMeasured {
        aggregate: Vec::new(),
        ttft_ms: Vec::new(),
        stream_tok_s: Vec::new(),
        detail: Vec::new(),
    };
    for _ in 0..runs {
        let (timings, wall) = wave_of(t, prompts(next), next, gen_tokens, timeout)?;
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
        "concurrency {concurrency}: {runs} timed waves of {concurrency} streamed greedy completions ({prompt_tokens} prompt ids{} + {gen_tokens} tokens, ignore_eos) after {warmup} warm-up wave(s)",
        if text.is_some() { ", the cell's prompt file" } else { "" }
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

#[cfg(test)]
mod tests;
