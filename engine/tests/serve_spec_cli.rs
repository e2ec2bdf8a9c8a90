//! `assay serve --spec` as a user runs it (the binary, CPU backend, SmolLM2): bad `--spec`
//! values and depths are clear errors; a server speculating with n-gram lookup returns, for
//! two prompts, blocking and streamed, exactly the ids `assay generate --json` prints for
//! them (plain greedy), its `usage.spec` carries the request's acceptance and `/metrics`
//! counts verification rounds per draft position. Skips (with a message) when the model is
//! not fetched.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod cli_common;
use cli_common::{SMOL, assay, model};
const N: usize = 16;

/// A running `assay serve`, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_assay"))
            .arg("serve")
            .args(args)
            .args(["--port", "0", "--backend", "cpu", "--threads", "2"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("assay serve exited before listening")
                .unwrap();
            if let Some(addr) = line.strip_prefix("assay serve: listening on http://") {
                break addr.rsplit(':').next().unwrap().parse().unwrap();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let s = Server { child, port };
        let t = Instant::now();
        while s.get("/ready").0 != 200 {
            assert!(t.elapsed() < Duration::from_secs(120), "never ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn request(&self, head: &str, body: &str) -> (u16, String) {
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
        write!(
            c,
            "{head} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut raw = String::new();
        c.read_to_string(&mut raw).unwrap();
        let (h, b) = raw.split_once("\r\n\r\n").unwrap();
        let code = h.split_whitespace().nth(1).unwrap().parse().unwrap();
        let b = if h
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(b)
        } else {
            b.to_owned()
        };
        (code, b)
    }

    fn get(&self, path: &str) -> (u16, String) {
        match TcpStream::connect(("127.0.0.1", self.port)) {
            Ok(_) => self.request(&format!("GET {path}"), ""),
            Err(_) => (0, String::new()),
        }
    }
}

fn dechunk(mut b: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = b.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        b = &rest[n + 2..];
    }
    out
}

#[test]
fn bad_spec_flags_are_clear_errors() {
    for (args, want) in [
        (vec!["--spec", "mtp"], "expected `[ALIAS=]ngram`"),
        (
            vec!["--spec", "ngram", "--spec-k", "9"],
            "--spec-k 9 is out of range",
        ),
    ] {
        let mut a = vec!["serve"];
        a.extend(args);
        let (ok, _, err) = assay(&a);
        assert!(!ok && err.contains(want), "{a:?}: {err}");
    }
    let Some(model) = model() else {
        println!("SKIP: {SMOL} not found");
        return;
    };
    let m = format!("smol={model}");
    let (ok, _, err) = assay(&[
        "serve",
        "-m",
        &m,
        "--backend",
        "cpu",
        "--port",
        "0",
        "--spec",
        "other=ngram",
    ]);
    assert!(
        !ok && err.contains("no model is served as \"other\""),
        "{err}"
    );
}

#[test]
fn served_speculation_returns_the_ids_of_assay_generate() {
    let Some(model) = model() else {
        println!("SKIP: {SMOL} not found");
        return;
    };
    let prompts = [
        "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
        "one two three four, one two three four, one two three",
    ];
    let mut refs = Vec::new();
    for p in prompts {
        let (ok, out, err) = assay(&[
            "generate",
            &model,
            "--backend",
            "cpu",
            "--prompt",
            p,
            "-n",
            &N.to_string(),
            "--json",
        ]);
        assert!(ok, "{err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        refs.push((v["prompt_tokens"].clone(), v["tokens"].clone()));
    }
    let m = format!("smol={model}");
    let s = Server::start(&[
        "-m",
        &m,
        "--ctx",
        "512",
        "--kv-mb",
        "64",
        "--spec",
        "smol=ngram",
        "--spec-k",
        "4",
        "--spec-fixed",
    ]);
    let mut drafted = 0;
    for (prompt, want) in &refs {
        for stream in [false, true] {
            let mut body = json!({"model": "smol", "prompt": prompt, "max_tokens": N,
                "temperature": 0, "return_token_ids": true});
            if stream {
                body["stream"] = json!(true);
                body["stream_options"] = json!({"include_usage": true});
            }
            let (code, text) = s.request("POST /v1/completions", &body.to_string());
            assert_eq!(code, 200, "{text}");
            let (ids, usage): (Vec<Value>, Value) = if stream {
                let events: Vec<Value> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter(|l| *l != "[DONE]")
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                let ids = events
                    .iter()
                    .filter_map(|e| e["choices"][0]["token_ids"].as_array())
                    .flatten()
                    .cloned()
                    .collect();
                let usage = events
                    .iter()
                    .find(|e| e["usage"].is_object())
                    .map(|e| e["usage"].clone())
                    .unwrap();
                (ids, usage)
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                (
                    v["choices"][0]["token_ids"].as_array().unwrap().clone(),
                    v["usage"].clone(),
                )
            };
            assert_eq!(&Value::Array(ids), want, "stream {stream}");
            let sp = &usage["spec"];
            let (d, a) = (
                sp["drafted_tokens"].as_u64().unwrap(),
                sp["accepted_tokens"].as_u64().unwrap(),
            );
            assert!(a <= d, "{usage}");
            drafted += d;
        }
    }
    assert!(
        drafted > 0,
        "n-gram lookup drafted nothing on repetitive prompts"
    );
    let (_, metrics) = s.get("/metrics");
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(
        value("assay_spec_drafted_tokens_total{model=\"smol\"}"),
        drafted
    );
    assert!(value("assay_spec_rounds_total{model=\"smol\"}") > 0);
    assert!(value("assay_spec_position_proposed_total{model=\"smol\",position=\"1\"}") > 0);
}
