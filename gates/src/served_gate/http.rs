//! The served gates' HTTP client: a minimal HTTP/1.1 POST over loopback and the chat
//! requests that read the served token ids (blocking and SSE-streamed).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::{Value, json};

use super::PickSpec;

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

/// The payload of a complete chunked (HTTP/1.1 `Transfer-Encoding: chunked`) body.
pub fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
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
    served_tokens_with(addr, key, prompt, n, stream, &PickSpec::greedy().body)
}

/// [`served_tokens`] with the fields of `body` (sampling, `response_format`) in the request.
pub fn served_tokens_with(
    addr: SocketAddr,
    key: &str,
    prompt: &str,
    n: usize,
    stream: bool,
    body: &Value,
) -> Result<(Vec<u32>, u64, u64), String> {
    let model = "gate";
    let mut req = json!({
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": n,
        "temperature": 0,
        "return_token_ids": true,
    });
    if let (Some(r), Some(b)) = (req.as_object_mut(), body.as_object()) {
        for (k, v) in b {
            r.insert(k.clone(), v.clone());
        }
    }
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
