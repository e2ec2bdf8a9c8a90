//! The requests `harness pair` sends to each arm's server outside the timed waves: the
//! first greedy tokens (the agreement check) and the top next tokens where the arms part,
//! through a minimal HTTP/1.1 JSON POST.

use std::io::{BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::agree;
use crate::bench::serve_load::{self, Target};

/// A minimal HTTP/1.1 JSON POST (Connection: close; plain or chunked body).
fn post_json(addr: SocketAddr, path: &str, body: &Value, timeout: Duration) -> Result<Value> {
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(req.as_bytes()).context("sending the request")?;
    let mut r = BufReader::new(s);
    let (code, chunked) = serve_load::response_head(&mut r)?;
    let mut raw = Vec::new();
    r.read_to_end(&mut raw).context("reading the body")?;
    let text = if chunked { dechunk(&raw)? } else { raw };
    let text = String::from_utf8_lossy(&text);
    if code != 200 {
        bail!("{path}: HTTP {code}: {}", text.trim());
    }
    serde_json::from_str(&text).with_context(|| format!("{path}: a body that is not JSON"))
}

/// The payload of a complete chunked body (the served gates' parser).
pub(super) fn dechunk(raw: &[u8]) -> Result<Vec<u8>> {
    gates::served_gate::dechunk(raw).map_err(anyhow::Error::msg)
}

/// The ids of an array field.
pub(super) fn ids(v: &Value, what: &str) -> Result<Vec<u32>> {
    v.as_array()
        .with_context(|| format!("no {what} in the response"))?
        .iter()
        .map(|x| {
            x.as_u64()
                .map(|t| t as u32)
                .with_context(|| format!("{what}: not a token id: {x}"))
        })
        .collect()
}

/// Our server's first `n` greedy tokens for `prompt` (`return_token_ids`, ours).
pub(super) fn first_tokens_ours(
    t: &Target,
    prompt: &[u32],
    n: usize,
    timeout: Duration,
) -> Result<Vec<u32>> {
    let v = post_json(
        t.addr,
        "/v1/completions",
        &json!({"model": t.model, "prompt": prompt, "max_tokens": n, "temperature": 0,
                "ignore_eos": true, "return_token_ids": true}),
        timeout,
    )?;
    ids(&v["choices"][0]["token_ids"], "choices[0].token_ids")
}

/// llama-server's first `n` greedy tokens for `prompt` (its native `/completion` with
/// `return_tokens`; top-k 1 makes the pick the arg-max whatever its sampler chain).
pub(super) fn first_tokens_llama(
    port: u16,
    prompt: &[u32],
    n: usize,
    timeout: Duration,
) -> Result<Vec<u32>> {
    let v = post_json(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        "/completion",
        &json!({"prompt": prompt, "n_predict": n, "temperature": 0, "top_k": 1,
                "ignore_eos": true, "return_tokens": true, "cache_prompt": false}),
        timeout,
    )?;
    ids(&v["tokens"], "tokens")
}

/// An OpenAI-compatible arm's top next tokens after `prompt` (ours, or vLLM's): completions
/// with `logprobs` and `return_tokens_as_token_ids` (vLLM has no tokenizer,
/// `--skip-tokenizer-init`; ours would key two tokens with the same text by one piece), each
/// `token_id:N` key named by the piece our tokenizer gives token N, so that the two arms'
/// tops compare id for id and read the same.
pub(super) fn top_openai(
    t: &Target,
    prompt: &[u32],
    tok: &engine::tokenizer::Tokenizer,
    timeout: Duration,
) -> Result<agree::Top> {
    let v = post_json(
        t.addr,
        "/v1/completions",
        &json!({"model": t.model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
                "logprobs": agree::TOP_K, "return_tokens_as_token_ids": true}),
        timeout,
    )?;
    agree::parse_openai(&v, |id| piece(tok, id))
}

/// Our tokenizer's piece of token `id` (lossy UTF-8; None when out of the vocabulary).
pub(super) fn piece(tok: &engine::tokenizer::Tokenizer, id: u32) -> Option<String> {
    tok.token_to_piece(id)
        .ok()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// llama-server's top next tokens after `prompt` (native `/completion` with `n_probs`:
/// log-probabilities of the raw distribution, before its samplers; each with its id).
pub(super) fn top_llama(port: u16, prompt: &[u32], timeout: Duration) -> Result<agree::Top> {
    let v = post_json(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        "/completion",
        &json!({"prompt": prompt, "n_predict": 1, "temperature": 0, "top_k": 1,
                "n_probs": agree::TOP_K, "cache_prompt": false}),
        timeout,
    )?;
    agree::parse_llama(&v).context("no completion_probabilities[0].top_logprobs in the answer")
}
